"""mlxconfig, mlxconfig_info and roce_accl modules: main() against an in-process fake MFT.

Covers change, no-change, check mode, parse error, a write that did not take, and devices that
refuse the tool (skipped or failing).
"""

from __future__ import annotations

import socket

import pytest
from ansible.module_utils import basic
from ansible_collections.mlplatform.gpunode.plugins.modules import mlxconfig, mlxconfig_info, roce_accl
from fake_mft import FakeMft
from module_harness import ExitJson, FailJson, patch_exits, run_module

HOST = socket.gethostname()  # every module error names the host (module_utils/host_errors.py)

RAIL = "0000:18:00.0"
PORTS = ["0000:29:00.0", "0000:29:00.1"]
COMPUTE = {"SRIOV_EN": True, "NUM_OF_VFS": 8, "LINK_TYPE": "ETH", "ATS_ENABLED": False,
           "ROCE_CC_PRIO_MASK": 8, "CNP_DSCP": 48, "CNP_802P_PRIO": 6}


@pytest.fixture
def fake(monkeypatch):
    mft = FakeMft().add_card("0000:18:00").add_card("0000:29:00", ports=2, link=2, name="MCX755106AS-HEA_Ax")

    patch_exits(monkeypatch)
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, name, required=False, opt_dirs=None:
                        f"/usr/bin/{name}" if name in ("mlxconfig", "mlxreg") else None)
    monkeypatch.setattr(basic.AnsibleModule, "run_command", lambda self, argv, **kw: mft.run(argv))
    return mft


def run(module, args, expect=ExitJson):
    return run_module(module.main, args, expect)


def writes(fake):
    return [call for call in fake.calls if "set" in call or "--set" in call]


def test_change_writes_differing_keys_and_reads_back(fake):
    result = run(mlxconfig, {"devices": [{"device": RAIL, "settings": COMPUTE}], "_ansible_diff": True})
    assert result["changed"] is True
    assert result["changes"] == {RAIL: {"NUM_OF_VFS": {"before": "16", "after": "8"},
                                        "LINK_TYPE_P1": {"before": "IB(1)", "after": "ETH(2)"},
                                        "ROCE_CC_PRIO_MASK_P1": {"before": "255", "after": "8"}}}
    assert writes(fake) == [["/usr/bin/mlxconfig", "-d", RAIL, "-y", "set",
                             "LINK_TYPE_P1=2", "NUM_OF_VFS=8", "ROCE_CC_PRIO_MASK_P1=8"]]
    params = fake.cards["0000:18:00"]["params"]
    assert (params["NUM_OF_VFS"]["next_boot"], params["NUM_OF_VFS"]["current"]) == (8, 16)
    assert params["LINK_TYPE_P1"]["next_boot"] == 2
    assert result["reboot_required"] is True
    assert result["pending"] == {RAIL: ["LINK_TYPE_P1", "NUM_OF_VFS", "ROCE_CC_PRIO_MASK_P1"]}
    assert result["config"][RAIL]["NUM_OF_VFS"] == {"default": "16", "current": "16", "next_boot": "8"}
    table = result["diff"]["prepared"]
    assert "  *  NUM_OF_VFS            16        16        16         8" in table.splitlines()
    assert "     ATS_ENABLED           False(0)  False(0)  False(0)   False(0)" in table.splitlines()
    assert "0000:18:00.0 NUM_OF_VFS=16" in result["diff"]["before"]
    assert "0000:18:00.0 NUM_OF_VFS=8" in result["diff"]["after"]


def test_no_change_when_next_boot_already_desired(fake):
    run(mlxconfig, {"devices": [{"device": RAIL, "settings": COMPUTE}]})
    fake.reboot()
    fake.calls.clear()
    result = run(mlxconfig, {"devices": [{"device": RAIL, "settings": COMPUTE}]})
    assert result["changed"] is False
    assert result["reboot_required"] is False
    assert result["changes"] == {}
    assert writes(fake) == []


def test_no_change_but_reboot_still_pending(fake):
    run(mlxconfig, {"devices": [{"device": RAIL, "settings": COMPUTE}]})
    result = run(mlxconfig, {"devices": [{"device": RAIL, "settings": COMPUTE}]})
    assert result["changed"] is False
    assert result["reboot_required"] is True


def test_check_mode_reports_and_writes_nothing(fake):
    result = run(mlxconfig, {"devices": [{"device": RAIL, "settings": COMPUTE}], "_ansible_check_mode": True})
    assert result["changed"] is True
    assert result["reboot_required"] is True
    assert set(result["changes"][RAIL]) == {"NUM_OF_VFS", "LINK_TYPE_P1", "ROCE_CC_PRIO_MASK_P1"}
    assert writes(fake) == []
    assert fake.cards["0000:18:00"]["params"]["NUM_OF_VFS"]["next_boot"] == 16


def test_dual_port_card_one_call(fake):
    devices = [{"device": d, "settings": {"NUM_OF_VFS": 4, "LINK_TYPE": "IB"}} for d in PORTS]
    result = run(mlxconfig, {"devices": devices})
    assert writes(fake) == [
        ["/usr/bin/mlxconfig", "-d", "0000:29:00.0", "-y", "set", "LINK_TYPE_P1=1", "NUM_OF_VFS=4"],
        ["/usr/bin/mlxconfig", "-d", "0000:29:00.1", "-y", "set", "LINK_TYPE_P2=1"],
    ]
    assert result["config"]["0000:29:00.1"]["NUM_OF_VFS"]["next_boot"] == "4"


def test_conflict_fails_before_any_write(fake):
    devices = [{"device": RAIL, "settings": COMPUTE},
               {"device": PORTS[0], "settings": {"NUM_OF_VFS": 4}},
               {"device": PORTS[1], "settings": {"NUM_OF_VFS": 2}}]
    result = run(mlxconfig, {"devices": devices}, FailJson)
    assert "0000:29:00.0 wants NUM_OF_VFS=4 but 0000:29:00.1 wants NUM_OF_VFS=2" in result["msg"]
    assert "nothing was written" in result["msg"]
    assert writes(fake) == []


def test_refusing_device_fails_naming_it_unless_skipped(fake):
    fake.reject.add(PORTS[0])
    devices = [{"device": RAIL, "settings": COMPUTE}, {"device": PORTS[0], "settings": {"NUM_OF_VFS": 4}}]
    failed = run(mlxconfig, {"devices": devices}, FailJson)
    assert "0000:29:00.0: Failed to open the device" in failed["msg"]
    assert writes(fake) == []
    result = run(mlxconfig, {"devices": devices, "skip_unsupported": True})
    assert result["skipped_devices"] == {PORTS[0]: "device refuses mlxconfig: Failed to open the device: 0000:29:00.0"}
    assert list(result["changes"]) == [RAIL]
    assert "skipped" not in result  # a truthy "skipped" would make Ansible report the task as skipped


def test_value_that_does_not_take_fails(fake):
    fake.not_taking[RAIL] = {"NUM_OF_VFS"}
    result = run(mlxconfig, {"devices": [{"device": RAIL, "settings": COMPUTE}]}, FailJson)
    assert result["msg"] == (f"mlxconfig on {HOST}: the change did not take: "
                             "0000:18:00.0: NUM_OF_VFS next boot is 16 after writing 8")


def test_parse_error_fails(fake, monkeypatch):
    monkeypatch.setattr(basic.AnsibleModule, "run_command", lambda self, argv, **kw: (0, "Segmentation fault\n", ""))
    result = run(mlxconfig, {"devices": [{"device": RAIL, "settings": COMPUTE}]}, FailJson)
    assert result["msg"].startswith(f"mlxconfig on {HOST}: cannot read the query output: mlxconfig: expected")


def test_hidden_parameter_written_after_advanced_pci_settings(fake):
    settings = {"ADVANCED_PCI_SETTINGS": True, "MAX_ACC_OUT_READ": 32}
    result = run(mlxconfig, {"devices": [{"device": RAIL, "settings": settings}]})
    assert writes(fake) == [["/usr/bin/mlxconfig", "-d", RAIL, "-y", "set", "ADVANCED_PCI_SETTINGS=1"],
                            ["/usr/bin/mlxconfig", "-d", RAIL, "-y", "set", "MAX_ACC_OUT_READ=32"]]
    assert fake.cards["0000:18:00"]["hidden"]["MAX_ACC_OUT_READ"]["next_boot"] == 32
    assert result["config"][RAIL]["MAX_ACC_OUT_READ"]["next_boot"] == "32"


def test_mlxconfig_info_reads_every_parameter(fake):
    fake.cards["0000:18:00"]["params"]["NUM_OF_VFS"]["next_boot"] = 8
    result = run(mlxconfig_info, {"devices": [RAIL, PORTS[1]]})
    assert result["changed"] is False
    assert result["config"][RAIL]["NUM_OF_VFS"] == {"default": "16", "current": "16", "next_boot": "8"}
    assert result["config"][PORTS[1]]["LINK_TYPE_P2"] == {"default": "ETH(2)", "current": "ETH(2)",
                                                          "next_boot": "ETH(2)"}
    assert result["device_info"][RAIL]["name"] == "MCX75310AAS-NEA_Ax"
    assert result["pending"] == {RAIL: ["NUM_OF_VFS"]}
    assert result["reboot_required"] is True
    assert writes(fake) == []


def test_mlxconfig_info_refused_device(fake):
    fake.reject.add(RAIL)
    assert "0000:18:00.0: Failed to open" in run(mlxconfig_info, {"devices": [RAIL]}, FailJson)["msg"]
    assert run(mlxconfig_info, {"devices": [RAIL], "skip_unsupported": True})["skipped_devices"] == {
        RAIL: "Failed to open the device: 0000:18:00.0"}


def test_roce_accl_change_no_change_and_check(fake):
    args = {"devices": [{"device": RAIL, "fields": {"adaptive_routing_forced_en": True}},
                        {"device": PORTS[0], "fields": {"adaptive_routing_forced_en": "0x0"}}]}
    check = run(roce_accl, {**args, "_ansible_check_mode": True})
    assert check["changed"] is True
    assert check["changes"] == {RAIL: {"adaptive_routing_forced_en": {"before": 0, "after": 1}}}
    assert writes(fake) == []
    result = run(roce_accl, args)
    assert writes(fake) == [["/usr/bin/mlxreg", "-d", RAIL, "--reg_name", "ROCE_ACCL", "--set",
                             "adaptive_routing_forced_en=0x1", "--yes"]]
    assert fake.accl[RAIL]["adaptive_routing_forced_en"] == 1
    assert result["fields"][RAIL]["adaptive_routing_forced_en"] == 1
    assert result["fields"][PORTS[0]]["roce_adp_retrans_en"] == 1
    again = run(roce_accl, args)
    assert again["changed"] is False


def test_roce_accl_did_not_take_and_bad_field(fake):
    fake.not_taking[RAIL] = {"adaptive_routing_forced_en"}
    failed = run(roce_accl, {"devices": [{"device": RAIL, "fields": {"adaptive_routing_forced_en": 1}}]}, FailJson)
    assert failed["msg"] == (f"roce_accl on {HOST}: the change did not take: "
                             "0000:18:00.0: adaptive_routing_forced_en reads 0x0 after writing 0x1")
    bad = run(roce_accl, {"devices": [{"device": RAIL, "fields": {"adaptive_routing": 1}}]}, FailJson)
    assert "the ROCE_ACCL register has no field 'adaptive_routing'" in bad["msg"]


def test_roce_accl_refused_device(fake):
    fake.reject.add(RAIL)
    args = {"devices": [{"device": RAIL, "fields": {"adaptive_routing_forced_en": 1}}]}
    assert "ME_REG_ACCESS_BAD_PARAM" in run(roce_accl, args, FailJson)["msg"]
    result = run(roce_accl, {**args, "skip_unsupported": True})
    assert result["skipped_devices"] == {RAIL: "Failed to send access register: ME_REG_ACCESS_BAD_PARAM"}
    assert result["changed"] is False
