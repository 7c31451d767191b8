"""nic_info and gpu_info modules: main() with patched arguments, on simulator sysfs trees."""

from __future__ import annotations

import builtins
import os

import pytest
from ansible.module_utils import basic
from ansible_collections.mlplatform.gpunode.plugins.modules import gpu_info, nic_info
from module_harness import patch_module_args

sim_profile = pytest.importorskip("gpunode.sim.profile")
sim_sysfs = pytest.importorskip("gpunode.sim.sysfs")

RESULT_KEYS = {"nics", "gpus", "nvswitches", "platform", "rails", "gpus_without_rail", "discovery_warnings"}


class AnsibleExitJson(Exception):
    """Raised by the patched exit_json; carries the module result."""


class AnsibleFailJson(Exception):
    """Raised by the patched fail_json; carries the failure."""


def _exit_json(self, **kwargs):
    kwargs.setdefault("changed", False)
    raise AnsibleExitJson(kwargs)


def _fail_json(self, msg, **kwargs):
    kwargs["failed"] = True
    kwargs["msg"] = msg
    raise AnsibleFailJson(kwargs)


@pytest.fixture(autouse=True)
def _patch_exits(monkeypatch):
    monkeypatch.setattr(basic.AnsibleModule, "exit_json", _exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", _fail_json)


def run(module, args, expect=AnsibleExitJson):
    with patch_module_args(args), pytest.raises(expect) as err:
        module.main()
    return err.value.args[0]


@pytest.fixture(scope="module")
def hgx_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("sysfs") / "hgx"
    sim_sysfs.materialize(sim_profile.load_profile("hgx-h100"), root)
    return root


@pytest.fixture
def dgx_root(tmp_path):
    root = tmp_path / "dgx"
    sim_sysfs.materialize(sim_profile.load_profile("dgx-h100"), root)
    return root


def test_nic_info_success(hgx_root):
    result = run(nic_info, {"sysfs_root": str(hgx_root)})
    assert result["changed"] is False
    assert set(result) >= RESULT_KEYS
    assert "warnings" not in result  # reserved by Ansible: the list is discovery_warnings
    assert [r["rail"] for r in result["rails"]] == list(range(8))
    assert result["platform"]["product"] == "PowerEdge XE9680"


@pytest.mark.parametrize("check_mode", [True, False])
def test_nic_info_check_mode_same_answer(hgx_root, check_mode):
    result = run(nic_info, {"sysfs_root": str(hgx_root), "_ansible_check_mode": check_mode})
    assert result["changed"] is False
    assert len(result["rails"]) == 8


def test_nic_info_management_and_overrides(dgx_root):
    args = {
        "sysfs_root": str(dgx_root),
        "management_interfaces": ["bond0"],
        "overrides": {"0000:29:00.0": {"role": "ignored"}, "0000:77:00.0": {"role": "storage"}},
    }
    result = run(nic_info, args)
    roles = {n["pci_address"]: n["role"] for n in result["nics"]}
    assert roles["0000:29:00.1"] == roles["0000:aa:00.1"] == "management"
    assert roles["0000:29:00.0"] == "ignored"
    assert result["discovery_warnings"] == ["override for 0000:77:00.0: not present on this host; ignored"]


def test_nic_info_sysfs_root_missing(tmp_path):
    missing = tmp_path / "nope"
    result = run(nic_info, {"sysfs_root": str(missing)}, AnsibleFailJson)
    assert str(missing) in result["msg"]
    assert "does not exist" in result["msg"]


def test_nic_info_sysfs_root_without_pci(tmp_path):
    result = run(nic_info, {"sysfs_root": str(tmp_path)}, AnsibleFailJson)
    assert "bus/pci/devices" in result["msg"] and str(tmp_path) in result["msg"]


def test_nic_info_unreadable_file_directory_in_place_of_file(dgx_root):
    board_id = os.path.realpath(dgx_root / "class/infiniband/mlx5_0") + "/board_id"
    os.remove(board_id)
    os.mkdir(board_id)
    result = run(nic_info, {"sysfs_root": str(dgx_root)}, AnsibleFailJson)
    assert board_id in result["msg"]


def test_nic_info_unreadable_file_permission(dgx_root, monkeypatch):
    target = os.path.realpath(dgx_root / "bus/pci/devices/0000:18:00.0") + "/sriov_totalvfs"
    real_open = builtins.open

    def guarded_open(file, *args, **kwargs):
        if os.fspath(file) == target:
            raise PermissionError(13, "Permission denied", target)
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", guarded_open)
    result = run(nic_info, {"sysfs_root": str(dgx_root)}, AnsibleFailJson)
    assert target in result["msg"] and "permission denied" in result["msg"]


def test_nic_info_bad_override_role(hgx_root):
    args = {"sysfs_root": str(hgx_root), "overrides": {"0000:1a:00.0": {"role": "rail"}}}
    result = run(nic_info, args, AnsibleFailJson)
    assert "0000:1a:00.0" in result["msg"] and "'rail'" in result["msg"]


def test_nic_info_rejects_unknown_option(hgx_root):
    result = run(nic_info, {"sysfs_root": str(hgx_root), "nic_count": 8}, AnsibleFailJson)
    assert "nic_count" in result["msg"]


def test_gpu_info_success(hgx_root):
    result = run(gpu_info, {"sysfs_root": str(hgx_root), "_ansible_check_mode": True})
    assert result["changed"] is False
    assert result["gpu_count"] == 8
    assert result["gpu_product"] == "H100 SXM5 80GB"
    assert [g["pci_address"][5:7] for g in result["gpus"]] == ["19", "3b", "4c", "5d", "9b", "bb", "cb", "db"]
    assert [g["numa_node"] for g in result["gpus"]] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [s["pci_address"] for s in result["nvswitches"]] == [f"0000:{b}:00.0" for b in ("83", "84", "85", "86")]
    assert result["fabric_manager_required"] is True
    assert result["driver_version"] is None and result["persistence_mode"] is None and result["fabric_state"] is None


def test_gpu_info_without_nvswitch(tmp_path):
    root = tmp_path / "bare"
    (root / "bus/pci/devices").mkdir(parents=True)
    result = run(gpu_info, {"sysfs_root": str(root)})
    assert result["gpu_count"] == 0 and result["gpu_product"] is None
    assert result["fabric_manager_required"] is False


def test_gpu_info_sysfs_root_missing(tmp_path):
    result = run(gpu_info, {"sysfs_root": str(tmp_path / "nope")}, AnsibleFailJson)
    assert str(tmp_path / "nope") in result["msg"]


def test_discovery_on_pcie_h100_without_nvswitch(tmp_path):
    """A PCIe H100 server: 10de:2331 GPUs, one CX-7 rail per GPU, no NVSwitch, no fabric manager."""
    root = tmp_path / "pcie"
    profile = sim_profile.load_profile("pcie-h100")
    sim_sysfs.materialize(profile, root)
    gpus = run(gpu_info, {"sysfs_root": str(root)})
    assert gpus["gpu_count"] == 4
    assert gpus["gpu_product"] == "H100 PCIe 80GB"
    assert {g["device_id"] for g in gpus["gpus"]} == {"0x2331"}
    assert gpus["nvswitches"] == []
    assert gpus["fabric_manager_required"] is False
    nics = run(nic_info, {"sysfs_root": str(root)})
    expected = {r["address"]: r["expect"] for r in sim_profile.iter_devices(profile) if r["kind"] == "nic"}
    assert {n["pci_address"]: {"role": n["role"], "rail": n["rail"]} for n in nics["nics"]} == expected
    assert [r["pci_address"] for r in nics["rails"]] == ["0000:1a:00.0", "0000:3c:00.0", "0000:9c:00.0",
                                                         "0000:bc:00.0"]
    assert nics["gpus_without_rail"] == []
