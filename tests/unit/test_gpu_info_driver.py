"""gpu_info's driver-side fields: the nvidia-smi -q summary on the real sample, and the module with
and without nvidia-smi."""

from __future__ import annotations

import pytest
from ansible_collections.mlplatform.gpunode.plugins.module_utils import nvidia_smi
from ansible_collections.mlplatform.gpunode.plugins.modules import gpu_info
from module_harness import ExitJson, FailJson, patch_exits, run_module

sim_profile = pytest.importorskip("gpunode.sim.profile")
sim_sysfs = pytest.importorskip("gpunode.sim.sysfs")

SAMPLE = "nvidia-smi-q-h100-header-gpu0-gpud.txt"


def _verbatim(path):
    return "\n".join(line for line in path.read_text().splitlines() if not line.startswith("#")) + "\n"


def test_summary_of_the_real_sample_reads_what_a_human_reads(real_outputs):
    summary = nvidia_smi.driver_summary(nvidia_smi.parse_query(_verbatim(real_outputs / SAMPLE)))
    assert summary["driver_version"] == "535.161.08"
    assert summary["persistence_mode"] is True
    assert summary["fabric_state"] == "Completed"
    assert summary["gpus"] == {"0000:19:00.0": {"product_name": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81559,
                                                "persistence_mode": True, "fabric_state": "Completed"}}


def test_summary_disabled_persistence_and_mixed_fabric_state(real_outputs):
    query = nvidia_smi.parse_query(_verbatim(real_outputs / SAMPLE))
    second = dict(query["gpus"][0], pci_address="0000:3b:00.0", persistence_mode="Disabled",
                  fabric_state="In Progress")
    summary = nvidia_smi.driver_summary({**query, "gpus": [query["gpus"][0], second]})
    assert summary["persistence_mode"] is False
    assert summary["fabric_state"] == "Completed, In Progress"
    no_fabric = dict(query["gpus"][0], fabric_state=None)
    assert nvidia_smi.driver_summary({**query, "gpus": [no_fabric]})["fabric_state"] is None


@pytest.fixture
def run(monkeypatch):
    patch_exits(monkeypatch)

    def _run(args, expect=ExitJson):
        return run_module(gpu_info.main, args, expect)
    return _run


@pytest.fixture
def hgx_root(tmp_path):
    root = tmp_path / "sys"
    sim_sysfs.materialize(sim_profile.load_profile("hgx-h100"), root)
    return root


def _fake_smi(tmp_path, body, rc=0):
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\ncat <<'EOF'\n{body}EOF\nexit {rc}\n")
    smi.chmod(0o755)
    return smi


def test_module_merges_nvidia_smi_into_the_sysfs_gpus(run, hgx_root, tmp_path, real_outputs):
    smi = _fake_smi(tmp_path, _verbatim(real_outputs / SAMPLE))
    result = run({"sysfs_root": str(hgx_root), "nvidia_smi_path": str(smi)})
    assert result["driver_loaded"] is True
    assert (result["driver_version"], result["persistence_mode"], result["fabric_state"]) == (
        "535.161.08", True, "Completed")
    gpu0 = result["gpus"][0]
    assert (gpu0["pci_address"], gpu0["product_name"], gpu0["memory_total_mib"]) == (
        "0000:19:00.0", "NVIDIA H100 80GB HBM3", 81559)
    assert result["gpus"][1]["product_name"] is None  # the sample lists GPU0 only


def test_module_without_a_loaded_driver_reports_why(run, hgx_root, tmp_path):
    smi = _fake_smi(tmp_path, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                    "Make sure that the latest NVIDIA driver is installed and running.\n", rc=9)
    result = run({"sysfs_root": str(hgx_root), "nvidia_smi_path": str(smi)})
    assert result["driver_loaded"] is False
    assert result["driver_version"] is None and result["fabric_state"] is None
    assert "couldn't communicate with the NVIDIA driver" in result["nvidia_smi_error"]
    assert result["gpu_count"] == 8


def test_module_with_an_nvidia_smi_path_that_does_not_exist_fails(run, hgx_root, tmp_path):
    result = run({"sysfs_root": str(hgx_root), "nvidia_smi_path": str(tmp_path / "absent")}, FailJson)
    assert f"nvidia_smi_path {tmp_path / 'absent'} does not exist" in result["msg"]


def test_module_without_nvidia_smi_on_path(run, hgx_root, monkeypatch):
    monkeypatch.setattr(gpu_info.AnsibleModule, "get_bin_path", lambda self, name, required=False, opt_dirs=None: None)
    result = run({"sysfs_root": str(hgx_root)})
    assert result["driver_loaded"] is False and result["nvidia_smi_error"] is None


def test_module_fails_on_unparseable_output(run, hgx_root, tmp_path):
    smi = _fake_smi(tmp_path, "garbage\n")
    result = run({"sysfs_root": str(hgx_root), "nvidia_smi_path": str(smi)}, FailJson)
    assert "NVSMI LOG" in result["msg"]
