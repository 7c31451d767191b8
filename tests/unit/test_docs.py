"""Every plugin's documentation renders with ansible-doc (the acceptance of issue 2 names nic_info)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ANSIBLE_DOC = str(Path(sys.executable).with_name("ansible-doc"))
# conftest.py links the repository here as ansible_collections/mlplatform/gpunode.
COLLECTIONS = Path(__file__).resolve().parents[2] / ".cache" / "collections"

PLUGINS = [
    ("module", "nic_info"),
    ("module", "gpu_info"),
    ("module", "mlxconfig"),
    ("module", "mlxconfig_info"),
    ("module", "roce_accl"),
    ("module", "fleet_contract"),
    ("module", "validation_schedule"),
    ("module", "mlxfwreset"),
    ("filter", "firmware_contract"),
    ("module", "sriov_vfs"),
    ("module", "roce_qos"),
    ("module", "node_health"),
    ("filter", "rail_map"),
    ("filter", "interfaces_with_address"),
    ("filter", "cluster_objects"),
    ("filter", "join_configuration"),
    ("filter", "node_self_labels"),
    ("filter", "sriov_rails_from_hw"),
    ("filter", "adaptive_routing_mode"),
    ("filter", "kubelet_node_labels"),
    ("module", "host_state"),
    ("filter", "file_plan"),
    ("filter", "key_plan"),
    ("filter", "unit_plan"),
    ("filter", "unheld"),
    ("filter", "package_versions"),
    ("filter", "apt_versions"),
    ("filter", "module_version"),
    ("filter", "nv_config_plan"),
    ("filter", "roce_accl_plan"),
    ("filter", "vf_plan"),
    ("filter", "qos_plan"),
]


def _doc(kind: str, name: str, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS), "ANSIBLE_NOCOLOR": "1"}
    return subprocess.run([ANSIBLE_DOC, "-t", kind, *extra, f"mlplatform.gpunode.{name}"],
                          capture_output=True, text=True, env=env, check=False, timeout=120)


@pytest.mark.parametrize(("kind", "name"), PLUGINS)
def test_ansible_doc_renders(kind, name):
    proc = _doc(kind, name)
    assert proc.returncode == 0, proc.stderr
    assert f"mlplatform.gpunode.{name}" in proc.stdout
    assert "WARNING" not in proc.stderr, proc.stderr


def test_nic_info_documents_every_returned_key():
    proc = _doc("module", "nic_info", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)["mlplatform.gpunode.nic_info"]
    returned = set(doc["return"])
    assert {"nics", "gpus", "nvswitches", "platform", "rails", "gpus_without_rail"} <= returned
    nic_keys = set(doc["return"]["nics"]["contains"])
    assert {"pci_address", "device_id", "model", "ports", "netdev", "rdma_device", "link_layer", "speed_gbps",
            "numa_node", "board_id", "fw_version", "sriov_totalvfs", "sriov_numvfs", "bond", "role", "rail", "gpu",
            "gpu_distance"} <= nic_keys
    assert doc["doc"]["attributes"]["check_mode"]["support"] == "full"


def test_role_inputs_without_a_default_are_required_and_conditional_ones_say_so():
    """meta/argument_specs.yml is each role's contract: an option the role has no default for is ``required: true``
    (ansible-core refuses the role without it), and the inputs only some setups need say when they are required
    (the preflight enforces that, naming the variables)."""
    import yaml as _yaml

    repo = Path(__file__).resolve().parents[2]
    for spec in sorted(repo.glob("roles/*/meta/argument_specs.yml")):
        role = spec.parts[-3]
        options = _yaml.safe_load(spec.read_text())["argument_specs"]["main"]["options"]
        defaults_file = spec.parents[1] / "defaults" / "main.yml"
        defaults = (_yaml.safe_load(defaults_file.read_text()) if defaults_file.is_file() else None) or {}
        for name, option in options.items():
            if name not in defaults and "default" not in option:
                assert option.get("required") is True, f"{role}: {name} has no default and is not required"
    conditional = {"kubernetes_node": ["kubernetes_node_api_server", "kubernetes_node_discovery_file",
                                       "kubernetes_node_join_token"],
                   "node_reboot": ["node_reboot_power_cycle_command"]}
    for role, names in conditional.items():
        options = _yaml.safe_load((repo / "roles" / role / "meta" / "argument_specs.yml").read_text())[
            "argument_specs"]["main"]["options"]
        for name in names:
            text = " ".join(options[name]["description"])
            assert "Required" in text or "Requires" in text, (role, name)
