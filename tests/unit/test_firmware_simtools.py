"""The firmware modules against the simulated mlxconfig/mlxreg/mlxfwreset (GPUNODE_SIM_STATE host dirs).

Same parsers and flows as on a real host; the simulated tools keep NV config per card in hw.json
and promote next boot to current only at a (simulated) reboot.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible.module_utils import basic
from ansible_collections.mlplatform.gpunode.plugins.modules import mlxconfig, mlxconfig_info, mlxfwreset, roce_accl
from module_harness import ExitJson, FailJson, patch_exits, run_module
from simhost import make_host, run_tool

from gpunode.sim import hwstate

DGX_RAILS = ["0000:18:00.0", "0000:40:00.0", "0000:4f:00.0", "0000:5e:00.0",
             "0000:9a:00.0", "0000:c0:00.0", "0000:ce:00.0", "0000:dc:00.0"]
STORAGE = ["0000:29:00.0", "0000:29:00.1"]
COMPUTE = {"SRIOV_EN": True, "NUM_OF_VFS": 8, "LINK_TYPE": "ETH", "ATS_ENABLED": False,
           "ROCE_CC_PRIO_MASK": 8, "CNP_DSCP": 48, "CNP_802P_PRIO": 6}


@pytest.fixture
def host(tmp_path, monkeypatch):
    root = make_host(tmp_path / "dgx", "dgx-h100")
    calls = []

    def run_command(self, argv, **kwargs):
        calls.append(list(argv))
        result = run_tool(root, Path(argv[0]).name, *argv[1:])
        return result.rc, result.out, result.err

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    patch_exits(monkeypatch)
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path",
                        lambda self, name, required=False, opt_dirs=None: f"/usr/bin/{name}")
    return {"root": root, "calls": calls}


def run(module, args, expect=ExitJson):
    return run_module(module.main, args, expect)


def writes(calls):
    return [c for c in calls if "set" in c or "--set" in c or "reset" in c]


def test_eight_rails_in_one_call_then_reboot_then_nothing_to_do(host):
    devices = [{"device": d, "settings": COMPUTE} for d in DGX_RAILS]
    first = run(mlxconfig, {"devices": devices})
    assert first["changed"] is True and first["reboot_required"] is True
    assert set(first["changes"]) == set(DGX_RAILS)
    assert first["changes"][DGX_RAILS[0]]["NUM_OF_VFS"] == {"before": "16", "after": "8"}
    assert first["config"][DGX_RAILS[0]]["NUM_OF_VFS"] == {"default": "16", "current": "16", "next_boot": "8"}
    assert len(writes(host["calls"])) == 8
    again = run(mlxconfig, {"devices": devices})
    assert again["changed"] is False and again["reboot_required"] is True
    hwstate.reboot_state(host["root"])
    host["calls"].clear()
    after = run(mlxconfig, {"devices": devices})
    assert after["changed"] is False and after["reboot_required"] is False and after["changes"] == {}
    assert writes(host["calls"]) == []
    info = run(mlxconfig_info, {"devices": DGX_RAILS})
    assert {info["config"][d]["NUM_OF_VFS"]["current"] for d in DGX_RAILS} == {"8"}
    assert {info["config"][d]["LINK_TYPE_P1"]["current"] for d in DGX_RAILS} == {"ETH(2)"}
    assert info["pending"] == {}


def test_check_mode_writes_nothing(host):
    before = (host["root"] / "hw.json").read_text()
    result = run(mlxconfig, {"devices": [{"device": d, "settings": COMPUTE} for d in DGX_RAILS],
                             "_ansible_check_mode": True, "_ansible_diff": True})
    assert result["changed"] is True and result["reboot_required"] is True
    assert "*  NUM_OF_VFS" in result["diff"]["prepared"]
    assert writes(host["calls"]) == []
    assert (host["root"] / "hw.json").read_text() == before


def test_dual_port_storage_card(host):
    ok = run(mlxconfig, {"devices": [{"device": d, "settings": {"NUM_OF_VFS": 4, "LINK_TYPE": "ETH"}}
                                     for d in STORAGE]})
    assert [c[2] for c in writes(host["calls"])] in ([STORAGE[0]], STORAGE)
    info = run(mlxconfig_info, {"devices": STORAGE})
    assert info["config"][STORAGE[1]]["NUM_OF_VFS"]["next_boot"] == "4"
    assert ok["reboot_required"] is True
    host["calls"].clear()
    bad = run(mlxconfig, {"devices": [{"device": STORAGE[0], "settings": {"NUM_OF_VFS": 2}},
                                      {"device": STORAGE[1], "settings": {"NUM_OF_VFS": 6}}]}, FailJson)
    assert "NV config is per card" in bad["msg"]
    assert writes(host["calls"]) == []


def test_hidden_parameter_with_advanced_pci_settings(host):
    bad = run(mlxconfig, {"devices": [{"device": DGX_RAILS[0], "settings": {"MAX_ACC_OUT_READ": 32}}]}, FailJson)
    assert "ADVANCED_PCI_SETTINGS" in bad["msg"]
    result = run(mlxconfig, {"devices": [{"device": DGX_RAILS[0],
                                          "settings": {"ADVANCED_PCI_SETTINGS": True, "MAX_ACC_OUT_READ": 32}}]})
    assert result["config"][DGX_RAILS[0]]["MAX_ACC_OUT_READ"]["next_boot"] == "32"


def test_rejecting_device_and_value_that_does_not_stick(host):
    hwstate.set_fault(host["root"], "mlxconfig_reject", DGX_RAILS[1])
    devices = [{"device": d, "settings": COMPUTE} for d in DGX_RAILS[:2]]
    failed = run(mlxconfig, {"devices": devices}, FailJson)
    assert DGX_RAILS[1] in failed["msg"] and writes(host["calls"]) == []
    skipped = run(mlxconfig, {"devices": devices, "skip_unsupported": True})
    assert list(skipped["skipped_devices"]) == [DGX_RAILS[1]]
    assert list(skipped["changes"]) == [DGX_RAILS[0]]
    hwstate.set_fault(host["root"], "not_sticky", DGX_RAILS[0], params=["NUM_OF_VFS"])
    hwstate.reboot_state(host["root"])
    info = run(mlxconfig_info, {"devices": [DGX_RAILS[0]]})
    assert info["pending"] == {DGX_RAILS[0]: ["NUM_OF_VFS"]}
    assert info["config"][DGX_RAILS[0]]["NUM_OF_VFS"] == {"default": "16", "current": "16", "next_boot": "8"}


def test_roce_accl_set_read_back_and_lost_at_reboot(host):
    devices = [{"device": d, "fields": {"adaptive_routing_forced_en": 1}} for d in DGX_RAILS]
    result = run(roce_accl, {"devices": devices})
    assert result["changed"] is True
    assert {result["fields"][d]["adaptive_routing_forced_en"] for d in DGX_RAILS} == {1}
    assert run(roce_accl, {"devices": devices})["changed"] is False
    hwstate.reboot_state(host["root"])
    read = run(roce_accl, {"devices": [{"device": d} for d in DGX_RAILS]})
    assert {read["fields"][d]["adaptive_routing_forced_en"] for d in DGX_RAILS} == {0}


def test_mlxfwreset_queries_every_card_before_resetting_any(host):
    """Card A is fine, a second device does not exist, a third refuses resets: the call fails naming both bad
    devices with the tool's words, and no card is reset (ROCE_ACCL set on card A survives), in check mode too."""
    run(roce_accl, {"devices": [{"device": DGX_RAILS[0], "fields": {"adaptive_routing_forced_en": 1}}]})
    hwstate.set_fault(host["root"], "mlxconfig_reject", DGX_RAILS[2])
    for check in (True, False):
        args = {"devices": [DGX_RAILS[0], "0000:99:00.0", DGX_RAILS[2]], "_ansible_check_mode": check}
        failed = run(mlxfwreset, args, FailJson)
        assert set(failed["refused"]) == {"0000:99:00.0", DGX_RAILS[2]}
        assert "Failed to open device: 0000:99:00.0" in failed["refused"]["0000:99:00.0"]
        assert "does not support firmware reset" in failed["refused"][DGX_RAILS[2]]
        assert failed["msg"].endswith("Nothing was reset.") and failed["reset"] == []
        assert DGX_RAILS[0] not in failed["refused"]
    assert not [c for c in host["calls"] if "reset" in c]
    read = run(roce_accl, {"devices": [{"device": DGX_RAILS[0]}]})
    assert read["fields"][DGX_RAILS[0]]["adaptive_routing_forced_en"] == 1


def test_mlxfwreset_once_per_card(host):
    result = run(mlxfwreset, {"devices": [DGX_RAILS[0], STORAGE[1], STORAGE[0]]})
    assert result["reset"] == [DGX_RAILS[0], STORAGE[0]]
    assert [c[1:] for c in writes(host["calls"])] == [["-d", DGX_RAILS[0], "-y", "reset"],
                                                       ["-d", STORAGE[0], "-y", "reset"]]
