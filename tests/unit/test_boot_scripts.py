"""The boot units' scripts (roles/sriov/files/sriov-apply, roles/roce_qos/files/roce-qos-apply) on materialized trees.

They run as the boot units run them (a config file as the only argument). mlnx_qos and cma_roce_tos are
stand-in executables on PATH that log their argv, so the test sees exactly which commands a boot runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpunode.sim.profile import load_profile
from gpunode.sim.sysfs import materialize

REPO = Path(__file__).resolve().parents[2]
SRIOV_APPLY = REPO / "roles" / "sriov" / "files" / "sriov-apply"
QOS_APPLY = REPO / "roles" / "roce_qos" / "files" / "roce-qos-apply"
RAILS = ["0000:18:00.0", "0000:40:00.0"]


def run(script, config, tmp_path, env=None):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return subprocess.run([sys.executable, str(script), str(path)], capture_output=True, text=True, check=False,
                          timeout=120, env={**os.environ, **(env or {})})


@pytest.fixture
def dgx(tmp_path):
    root = tmp_path / "sys"
    materialize(load_profile("dgx-h100"), root)
    return root


def numvfs(root, pci):
    return (root / "bus/pci/devices" / pci / "sriov_numvfs").read_text().strip()


def test_sriov_apply_recreates_vfs_after_boot_and_changes_through_zero(dgx, tmp_path):
    config = {"sysfs_root": str(dgx), "vf_trust": None, "vf_spoofchk": None,
              "pfs": [{"pci_address": p, "num_vfs": 8, "netdev": None, "role": "compute"} for p in RAILS]}
    proc = run(SRIOV_APPLY, config, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [numvfs(dgx, p) for p in RAILS] == ["8", "8"]
    assert "0000:18:00.0 (None): 8 VFs (was 0)" in proc.stdout
    config["pfs"][0]["num_vfs"] = 4
    proc = run(SRIOV_APPLY, config, tmp_path)
    assert proc.returncode == 0, proc.stdout
    assert numvfs(dgx, RAILS[0]) == "4"


def test_sriov_apply_refuses_more_than_total_but_does_the_other_pfs(dgx, tmp_path):
    config = {"sysfs_root": str(dgx), "pfs": [{"pci_address": RAILS[0], "num_vfs": 32},
                                              {"pci_address": RAILS[1], "num_vfs": 8}]}
    proc = run(SRIOV_APPLY, config, tmp_path)
    assert proc.returncode == 1
    assert "0000:18:00.0 (None): FAILED: 32 VFs wanted but sriov_totalvfs is 16" in proc.stdout
    assert numvfs(dgx, RAILS[0]) == "0" and numvfs(dgx, RAILS[1]) == "8"


@pytest.fixture
def fake_tools(tmp_path):
    """mlnx_qos / cma_roce_tos stand-ins that append their argv to a log and answer like the real tools."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "calls.log"
    for tool, answer in (("mlnx_qos", "DCBX mode: OS controlled"), ("cma_roce_tos", None)):
        body = (f"#!{sys.executable}\nimport sys\n"
                f"open({str(log)!r}, 'a').write(' '.join(['{tool}'] + sys.argv[1:]) + '\\n')\n")
        body += (f"print({answer!r})\n" if answer else "print(sys.argv[sys.argv.index('-t') + 1])\n")
        (bindir / tool).write_text(body)
        (bindir / tool).chmod(0o755)
    return {"PATH": f"{bindir}:{os.environ['PATH']}"}, log


def test_roce_qos_apply_runs_the_recipe_and_writes_sysfs(tmp_path, fake_tools):
    root = tmp_path / "sys"
    materialize(load_profile("hgx-h100"), root)
    netdev = next(p.name for p in sorted((root / "class" / "net").iterdir()) if (p / "ecn").is_dir())
    dev = next((root / "class" / "net" / netdev / "device" / "infiniband").iterdir()).name
    (root / "class" / "infiniband" / dev / "tc" / "1").mkdir(parents=True)
    (root / "class" / "infiniband" / dev / "tc" / "1" / "traffic_class").write_text("")
    env, log = fake_tools
    config = {"sysfs_root": str(root), "interfaces": [{
        "netdev": netdev, "rdma_device": dev, "trust": "dscp", "pfc": [0, 0, 0, 1, 0, 0, 0, 0],
        "ecn_np": [3], "ecn_rp": [3], "cnp_dscp": 48, "roce_tos": 106, "mtu": 9000}]}
    proc = run(QOS_APPLY, config, tmp_path, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert log.read_text().splitlines() == [
        f"mlnx_qos -i {netdev} --trust dscp",
        f"mlnx_qos -i {netdev} --pfc 0,0,0,1,0,0,0,0",
        f"cma_roce_tos -d {dev} -t 106",
    ]
    net = root / "class" / "net" / netdev
    for point in ("roce_np", "roce_rp"):
        assert [(net / "ecn" / point / "enable" / str(p)).read_text().strip() for p in range(8)] == list("00010000")
    assert (net / "mtu").read_text() == "9000\n"
    assert (root / "class" / "infiniband" / dev / "tc" / "1" / "traffic_class").read_text() == "106\n"


def test_roce_qos_apply_reports_a_missing_tool(tmp_path):
    root = tmp_path / "sys"
    materialize(load_profile("hgx-h100"), root)
    netdev = next(p.name for p in sorted((root / "class" / "net").iterdir()) if (p / "ecn").is_dir())
    proc = run(QOS_APPLY, {"sysfs_root": str(root), "interfaces": [{"netdev": netdev, "trust": "dscp", "mtu": 9000}]},
               tmp_path, {"PATH": str(tmp_path)})
    assert proc.returncode == 1
    assert f"{netdev}: FAILED: mlnx_qos not found" in proc.stdout
