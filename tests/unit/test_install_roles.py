"""Error paths of the ofed and gpu_driver roles that fail before anything is written, run with
ansible-playbook against this machine (local connection). Paths that need an apt repository
(unreachable mirror, unknown branch) run on simulated hosts in molecule/install's side effect."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = str(Path(sys.executable).with_name("ansible-playbook"))
NVSWITCH_HW = {"fabric_manager_required": True, "gpu_count": 8, "nics": [],
               "nvswitches": [{"pci_address": f"0000:{b}:00.0"} for b in ("83", "84", "85", "86")]}

pytestmark = pytest.mark.skipif(not Path("/usr/bin/apt-get").exists(), reason="the roles need a Debian-family host")


def _play(tmp_path: Path, role: str, **extra) -> subprocess.CompletedProcess:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  hosts:\n    node1:\n"
        "      ansible_connection: local\n      ansible_python_interpreter: /usr/bin/python3\n")
    playbook = tmp_path / "play.yml"
    playbook.write_text(f"- hosts: node1\n  gather_facts: false\n  roles:\n    - mlplatform.gpunode.{role}\n")
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
           "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".cache" / "collections"), "ANSIBLE_NOCOLOR": "1"}
    return subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(inventory), str(playbook), "-e", json.dumps(extra)],
                          capture_output=True, text=True, env=env, check=False, timeout=300)


def _snapshot() -> dict[str, bytes]:
    files = {}
    for path in ("/etc/apt/sources.list.d/cuda.sources", "/etc/apt/preferences.d/gpunode-nvidia-driver.pref",
                 "/etc/apt/sources.list.d/doca.sources", "/etc/apt/keyrings/cuda.asc"):
        p = Path(path)
        files[path] = p.read_bytes() if p.exists() else b""
    return files


def test_fabric_manager_version_other_than_the_driver_fails_naming_host_and_variable(tmp_path):
    before = _snapshot()
    proc = _play(tmp_path, "gpu_driver", gpunode_hw=NVSWITCH_HW, gpu_driver_version="570.172.08",
                 gpu_driver_fabricmanager_version="570.133.20")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "node1: gpu_driver_fabricmanager_version=570.133.20 differs from gpu_driver_version=570.172.08" in out
    assert "4 NVSwitches" in out
    assert "Repository |" not in out  # failed before touching apt
    assert _snapshot() == before


def test_fabric_manager_version_is_ignored_without_nvswitch_only_in_the_check(tmp_path):
    """Without NVSwitches fabric manager is not installed, so its version cannot mismatch; the role
    goes on to the repository step (stopped here by an unusable mirror, before any write)."""
    proc = _play(tmp_path, "gpu_driver", gpunode_hw={**NVSWITCH_HW, "fabric_manager_required": False, "nvswitches": []},
                 gpu_driver_fabricmanager_version="570.133.20", gpu_driver_mirror_url="ftp://nowhere")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "differs from" not in out
    assert "an http(s) or file URL in gpu_driver_mirror_url (got ftp://nowhere)" in out


@pytest.mark.parametrize(("extra", "needle"), [
    ({"gpu_driver_branch": "r570"}, "a numeric gpu_driver_branch (r570)"),
    ({"gpu_driver_version": "550.90.07"}, "(got 550.90.07)"),
    ({"gpu_driver_fabricmanager": "maybe"}, "auto/true/false in gpu_driver_fabricmanager"),
])
def test_bad_driver_inputs_fail_naming_the_variable(tmp_path, extra, needle):
    proc = _play(tmp_path, "gpu_driver", gpunode_hw=NVSWITCH_HW, **extra)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "node1: the gpu_driver role needs" in out and needle in out


def test_ofed_without_discovery_fails_naming_the_host(tmp_path):
    before = _snapshot()
    proc = _play(tmp_path, "ofed")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "node1: the ofed role needs gpunode_hw (run the discovery role first)" in out
    assert _snapshot() == before
