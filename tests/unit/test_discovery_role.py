"""The discovery role's decisions, run with ansible-playbook on this machine against materialized trees.

No container is needed: the role reads ``discovery_sysfs_root``, which points at a tree the
simulator's materializer wrote into tmp_path, and writes discovery.json into tmp_path too.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from local_play import fabric

from gpunode.sim.profile import load_profile, validate_profile
from gpunode.sim.sysfs import materialize

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = REPO / "playbooks" / "discover.yml"
ANSIBLE_PLAYBOOK = str(Path(sys.executable).with_name("ansible-playbook"))


def _play(tmp_path: Path, tree: Path, **extra) -> subprocess.CompletedProcess:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  children:\n    gpu_nodes:\n      hosts:\n        node1:\n"
        f"          ansible_connection: local\n          ansible_python_interpreter: {sys.executable}\n"
    )
    extra_vars = {"discovery_sysfs_root": str(tree), "discovery_results_dir": str(tmp_path / "results"), **fabric(),
                  **extra}
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
           "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".cache" / "collections"), "ANSIBLE_NOCOLOR": "1"}
    return subprocess.run(
        [ANSIBLE_PLAYBOOK, "-i", str(inventory), str(PLAYBOOK), "-e", json.dumps(extra_vars)],
        capture_output=True, text=True, env=env, check=False, timeout=300,
    )


@pytest.fixture(scope="module")
def dgx_tree(tmp_path_factory) -> Path:
    tree = tmp_path_factory.mktemp("dgx") / "sys"
    materialize(load_profile("dgx-h100"), tree)
    return tree


def test_discovery_writes_the_rail_map_and_result(tmp_path, dgx_tree):
    proc = _play(tmp_path, dgx_tree)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads((tmp_path / "results" / "discovery.json").read_text())
    assert [r["rdma_device"] for r in result["rails"]] == [
        "mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]
    assert result["fabric_manager_required"] is True
    assert "0     0000:1b:00.0  0000:18:00.0  ConnectX-7  ibp24s0" in proc.stdout


def test_override_for_an_absent_address_fails_naming_it(tmp_path, dgx_tree):
    proc = _play(tmp_path, dgx_tree, gpunode_nic_overrides={"0000:99:00.0": {"role": "storage"}})
    assert proc.returncode != 0
    assert "node1: gpunode_nic_overrides names 0000:99:00.0" in proc.stdout
    assert not (tmp_path / "results" / "discovery.json").exists()


def test_override_with_an_unknown_role_fails_before_the_host_is_read(tmp_path, dgx_tree):
    proc = _play(tmp_path, dgx_tree, gpunode_nic_overrides={"0000:18:00.0": {"role": "rail"}})
    assert proc.returncode != 0
    # the role's first task line: the unknown-variable warning, then this check
    assert "then check gpunode_nic_overrides" in proc.stdout and "must map full lower-case" in proc.stdout
    assert "Read the host once" not in proc.stdout


def test_gpu_without_rail_fails_unless_partial_rails_are_allowed(tmp_path):
    data = copy.deepcopy(load_profile("hgx-h100"))
    # Drop the CX-7 next to GPU3 (bus 5e): the storage CX-6 Dx cards must not stand in for it.
    for hb in data["pcie"]:
        stack = [hb]
        while stack:
            node = stack.pop()
            kids = node.get("children", [])
            node_kids = [c for c in kids if c.get("nic") != "0000:5e:00"]
            if len(node_kids) != len(kids):
                node["children"] = node_kids
            stack.extend(node_kids)
    tree = tmp_path / "sys"
    materialize(validate_profile(data, "hgx-h100-no-rail3"), tree)

    proc = _play(tmp_path, tree)
    assert proc.returncode != 0
    assert "GPU3 0000:5d:00.0 has no compute rail" in proc.stdout.replace("\n        ", " ")

    allowed = _play(tmp_path, tree, discovery_allow_partial_rails=True)
    assert allowed.returncode == 0, allowed.stdout
    result = json.loads((tmp_path / "results" / "discovery.json").read_text())
    assert [g["gpu"] for g in result["gpus_without_rail"]] == ["0000:5d:00.0"]
    assert len(result["rails"]) == 7


@pytest.mark.parametrize(("variables", "needle"), [
    ({"gpunode_fabric": None}, "node1: GPU node in no fabric: gpunode_fabric is not set"),
    ({"gpunode_fabric_settings": {"link_speed_gbps": 400}},
     "node1: fabric default: gpunode_fabric_settings.transport is not set (infiniband or roce; there is no default)"),
    ({"gpunode_fabric_settings": {"transport": "roce", "nics": {"compute": {"num_vf": 8}}}},
     "node1: fabric default: gpunode_fabric_settings.nics.compute: unknown key num_vf"),
    ({"sriov_compute_num_vfs": 4}, "node1: sriov_compute_num_vfs no longer declares a fabric's intent: set "
                                   "gpunode_fabric_settings.nics.compute.num_vfs"),
])
def test_a_host_without_a_valid_fabric_stops_the_run_before_anything_is_written(tmp_path, variables, needle):
    """The first task of the first play: a GPU node in no fabric, a fabric without a transport, an unknown key or
    a variable that declared intent elsewhere fails the run naming the host, the fabric and the variable, before
    the host is read or discovery.json written."""
    tree = tmp_path / "sys"
    materialize(load_profile("dgx-h100"), tree)
    proc = _play(tmp_path, tree, **variables)
    assert proc.returncode != 0
    assert needle in " ".join(proc.stdout.split())
    assert "nothing was changed on any host" in proc.stdout
    assert not (tmp_path / "results").exists()
    assert "ok=0" in proc.stdout.split("PLAY RECAP")[1]
