"""Simulated mlxconfig/mstconfig: output parses like the real samples; NV config state behaves like firmware."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from ansible_collections.mlplatform.gpunode.plugins.module_utils import mlxconfig
from simhost import make_host, run_tool

from gpunode.sim import hwstate

DGX_RAIL0 = "0000:18:00.0"
DGX_STORAGE = ("0000:29:00.0", "0000:29:00.1")


def verbatim(path: Path) -> str:
    return "\n".join(line for line in path.read_text().splitlines() if not line.startswith("#")) + "\n"


def after_prompt(text: str, command: str) -> str:
    """The output of the first ``command`` in a shell transcript."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if re.search(r"[#$] " + re.escape(command) + r"\s*$", line))
    out = []
    for line in lines[start + 1:]:
        if re.match(r"^\[[^\]]*\][#$]", line):
            break
        out.append(line)
    return "\n".join(out) + "\n"


@pytest.fixture
def dgx(tmp_path: Path) -> Path:
    return make_host(tmp_path / "dgx", "dgx-h100")


@pytest.fixture
def hgx(tmp_path: Path) -> Path:
    return make_host(tmp_path / "hgx", "hgx-h100")


def hw(root: Path) -> dict:
    return json.loads((root / "hw.json").read_text())


def params(text: str, device: int = 0) -> dict:
    return mlxconfig.parse_query(text)["devices"][device]["params"]


# -- conformance ----------------------------------------------------------------------------------


def test_q_parses_like_the_real_cx7_sample(dgx: Path, real_outputs: Path) -> None:
    real = mlxconfig.parse_query(verbatim(real_outputs / "mlxconfig-q-cx7-sriov-device-plugin-601.txt"))
    res = run_tool(dgx, "mlxconfig", "-d", "/dev/mst/mt4129_pciconf0", "q")
    assert res.rc == 0
    sim = mlxconfig.parse_query(res.out)
    (rdev,), (sdev,) = real["devices"], sim["devices"]
    assert sdev.keys() == rdev.keys()
    assert sdev["columns"] == rdev["columns"] == ["next_boot"]
    assert (sdev["device_type"], sdev["name"], sdev["description"]) == (
        rdev["device_type"], rdev["name"], rdev["description"])  # same board MT_0000000838
    assert sdev["device"] == "/dev/mst/mt4129_pciconf0"
    shared = set(rdev["params"]) & set(sdev["params"])
    assert {"ATS_ENABLED", "DPA_AUTHENTICATION", "ROCE_NEXT_PROTOCOL", "MODULE_SPLIT_M0"} <= shared
    for name in shared:  # factory values of a fresh card equal the real card's
        assert sdev["params"][name]["next_boot"] == rdev["params"][name]["next_boot"], name
    assert sim["errors"] == [] and real["errors"] == []


def test_q_layout_is_the_real_column_layout(dgx: Path, real_outputs: Path) -> None:
    real = verbatim(real_outputs / "mlxconfig-q-cx7-sriov-device-plugin-601.txt").splitlines()
    sim = run_tool(dgx, "mlxconfig", "-d", "/dev/mst/mt4129_pciconf0", "q").out.splitlines()
    for prefix in ("Configurations:", "        ATS_ENABLED ", "        MODULE_SPLIT_M0 ", "Device type:", "Name:"):
        (r,), (s,) = [x for x in real if x.startswith(prefix)], [x for x in sim if x.startswith(prefix)]
        assert r == s, prefix  # byte for byte, trailing padding included


def test_mstconfig_narrow_layout_like_the_real_bf3_sample(hgx: Path, real_outputs: Path) -> None:
    text = after_prompt(verbatim(real_outputs / "mstconfig-q-bf3-b3220-edcdavid-ptp-tools.txt"),
                        "mstconfig -d 0002:01:00.0 q")
    real = text.splitlines()
    res = run_tool(hgx, "mstconfig", "-d", "0000:1b:00.1", "q")
    sim = res.out.splitlines()
    for prefix in ("Configurations:", "        SRIOV_EN ", "        NUM_OF_VFS "):
        r = next(x for x in real if x.startswith(prefix))
        s = next(x for x in sim if x.startswith(prefix))
        if prefix.strip() == "NUM_OF_VFS":  # CX-6 Dx factory total 8, BF-3 16: same columns
            assert s.index("8") == r.index("16") and len(s) == len(r)
        else:
            assert s == r, prefix
    rdev, sdev = mlxconfig.parse_query(text)["devices"][0], mlxconfig.parse_query(res.out)["devices"][0]
    assert sdev.keys() == rdev.keys() and sdev["columns"] == rdev["columns"]
    real_type = next(x for x in real if x.startswith("Device type:"))  # "Device type:    BlueField3      "
    sim_type = next(x for x in sim if x.startswith("Device type:"))  # "Device type:    ConnectX6DX     "
    assert (sim_type[:16], len(sim_type)) == (real_type[:16], len(real_type))


def test_e_q_parses_like_the_real_three_column_sample(dgx: Path, real_outputs: Path) -> None:
    real = mlxconfig.parse_query(verbatim(real_outputs / "mlxconfig-e-q-cx6lx-sriov-network-operator-968.txt"))
    res = run_tool(dgx, "mlxconfig", "-d", DGX_RAIL0, "-e", "q")
    sim = mlxconfig.parse_query(res.out)
    rdev, sdev = real["devices"][0], sim["devices"][0]
    assert sdev["columns"] == rdev["columns"] == ["default", "current", "next_boot"]
    for name in ("UCTX_EN", "TRACER_ENABLE", "CQE_COMPRESSION", "IP_OVER_VXLAN_EN"):
        assert sdev["params"][name].keys() == rdev["params"][name].keys()
        assert sdev["params"][name]["default"] == rdev["params"][name]["default"], name
    real_lines = verbatim(real_outputs / "mlxconfig-e-q-cx6lx-sriov-network-operator-968.txt").splitlines()
    for prefix in ("Configurations:", "        UCTX_EN ", "        CQE_COMPRESSION "):
        assert next(x for x in real_lines if x.startswith(prefix)) == next(
            x for x in res.out.splitlines() if x.startswith(prefix))


def test_set_parses_like_the_real_set_sample(dgx: Path, real_outputs: Path) -> None:
    text = after_prompt(verbatim(real_outputs / "mlxconfig-set-cx7-sigitp-aws.txt"),
                        "mlxconfig -d 05:00.0 set NUM_OF_VFS=127")
    real = mlxconfig.parse_set(text)
    res = run_tool(dgx, "mlxconfig", "-d", "29:00.0", "set", "NUM_OF_VFS=127", stdin="y\n")
    sim = mlxconfig.parse_set(res.out)
    assert res.rc == 0
    for key in ("prompted", "answer", "applied", "apply_result", "reboot_required", "errors"):
        assert sim[key] == real[key], key
    rdev, sdev = real["devices"][0], sim["devices"][0]
    assert sdev["columns"] == rdev["columns"] == ["next_boot", "new"]
    assert sdev["params"] == rdev["params"]  # NUM_OF_VFS 16 -> 127 on a factory dual-port CX-7
    assert (sdev["device_type"], sdev["name"], sdev["device"]) == (rdev["device_type"], rdev["name"], "29:00.0")
    assert " Apply new Configuration? (y/n) [n] : y" in res.out.splitlines()


# -- behaviour ------------------------------------------------------------------------------------


def test_set_changes_next_boot_only_and_is_shared_by_both_functions(dgx: Path) -> None:
    res = run_tool(dgx, "mlxconfig", "-d", DGX_STORAGE[0], "-y", "set", "NUM_OF_VFS=32", "SRIOV_EN=True")
    assert res.rc == 0
    card = hw(dgx)["cards"]["0000:29:00"]
    assert (card["current"]["NUM_OF_VFS"], card["next_boot"]["NUM_OF_VFS"]) == (16, 32)
    other = params(run_tool(dgx, "mlxconfig", "-d", DGX_STORAGE[1], "-e", "q").out)
    assert other["NUM_OF_VFS"]["current"]["number"] == 16
    assert other["NUM_OF_VFS"]["next_boot"]["number"] == 32
    assert other["NUM_OF_VFS"]["changed"] is True
    assert (dgx / "sys/bus/pci/devices/0000:29:00.1/sriov_totalvfs").read_text() == "16\n"


def test_reboot_promotes_next_boot_and_rebuilds_sysfs(dgx: Path) -> None:
    assert run_tool(dgx, "mlxconfig", "-d", DGX_STORAGE[1], "-y", "set", "NUM_OF_VFS=64").rc == 0
    assert run_tool(dgx, "mlxconfig", "-d", DGX_RAIL0, "-y", "set", "LINK_TYPE_P1=ETH").rc == 0
    hwstate.reboot_state(dgx)
    card = hw(dgx)["cards"]["0000:29:00"]
    assert card["current"]["NUM_OF_VFS"] == card["next_boot"]["NUM_OF_VFS"] == 64
    for fn in DGX_STORAGE:
        assert (dgx / f"sys/bus/pci/devices/{fn}/sriov_totalvfs").read_text() == "64\n"
    rail0 = dgx / "sys/bus/pci/devices/0000:18:00.0"
    assert (rail0 / "class").read_text() == "0x020000\n"  # Ethernet after LINK_TYPE_P1=ETH
    assert [p.name for p in (rail0 / "net").iterdir()] == ["enp24s0np0"]
    assert (dgx / "sys/class/infiniband/mlx5_0/ports/1/link_layer").read_text() == "Ethernet\n"
    q = params(run_tool(dgx, "mlxconfig", "-d", DGX_RAIL0, "-e", "q").out)
    assert q["LINK_TYPE_P1"]["current"]["raw"] == "ETH(2)" and q["LINK_TYPE_P1"]["changed"] is True


def test_not_sticky_fault_keeps_the_current_value(tmp_path: Path) -> None:
    root = make_host(tmp_path / "h", "hgx-h100", faults={"not_sticky": {"0000:1a:00.0": ["ROCE_CC_PRIO_MASK_P1"]}})
    assert run_tool(root, "mlxconfig", "-d", "1a:00.0", "-y", "set", "ROCE_CC_PRIO_MASK_P1=8", "CNP_DSCP_P1=46").rc == 0
    hwstate.reboot_state(root)
    q = params(run_tool(root, "mlxconfig", "-d", "1a:00.0", "-e", "q").out)
    assert q["CNP_DSCP_P1"]["current"]["number"] == 46
    assert q["ROCE_CC_PRIO_MASK_P1"]["current"]["number"] == 255
    assert q["ROCE_CC_PRIO_MASK_P1"]["next_boot"]["number"] == 8


def test_prompt_answered_n_changes_nothing(dgx: Path) -> None:
    before = (dgx / "hw.json").read_text()
    res = run_tool(dgx, "mlxconfig", "-d", DGX_RAIL0, "set", "ATS_ENABLED=1", stdin="n\n")
    parsed = mlxconfig.parse_set(res.out)
    assert res.rc != 0 and parsed["prompted"] and parsed["answer"] == "n" and not parsed["applied"]
    assert (dgx / "hw.json").read_text() == before


def test_no_change_still_prompts_and_asks_for_reboot(dgx: Path) -> None:
    res = run_tool(dgx, "mlxconfig", "-d", DGX_RAIL0, "-y", "set", "SRIOV_EN=1")
    parsed = mlxconfig.parse_set(res.out)
    row = parsed["devices"][0]["params"]["SRIOV_EN"]
    assert parsed["reboot_required"] and parsed["applied"] and row["next_boot"] == row["new"]


@pytest.mark.parametrize(("assignment", "message"), [
    ("NO_SUCH_PARAM=1", "-E- Unknown Parameter: NO_SUCH_PARAM"),
    ("LINK_TYPE_P2=ETH", "-E- Unknown Parameter: LINK_TYPE_P2"),  # single-port card: no port 2
    ("MAX_ACC_OUT_READ=44", "-E- Unknown Parameter: MAX_ACC_OUT_READ"),  # hidden until ADVANCED_PCI_SETTINGS=1
    ("LINK_TYPE_P1=FOO", "-E- Bad value 'FOO' for parameter LINK_TYPE_P1"),
    ("CNP_DSCP_P1=64", "-E- Bad value '64' for parameter CNP_DSCP_P1"),
    ("SRIOV_EN=maybe", "-E- Bad value 'maybe' for parameter SRIOV_EN"),
])
def test_bad_input_fails_and_applies_nothing(dgx: Path, assignment: str, message: str) -> None:
    before = (dgx / "hw.json").read_text()
    res = run_tool(dgx, "mlxconfig", "-d", DGX_RAIL0, "-y", "set", "ATS_ENABLED=1", assignment)
    assert res.rc == 1
    assert mlxconfig.parse_set(res.out)["errors"] == [message.removeprefix("-E- ")] or message in res.out
    assert (dgx / "hw.json").read_text() == before


def test_hidden_parameters_appear_with_advanced_pci_settings(dgx: Path) -> None:
    assert "MAX_ACC_OUT_READ" not in params(run_tool(dgx, "mlxconfig", "-d", DGX_RAIL0, "q").out)
    assert run_tool(dgx, "mlxconfig", "-d", DGX_RAIL0, "-y", "set", "ADVANCED_PCI_SETTINGS=1").rc == 0
    assert params(run_tool(dgx, "mlxconfig", "-d", DGX_RAIL0, "q").out)["MAX_ACC_OUT_READ"]["next_boot"]["number"] == 0
    assert run_tool(dgx, "mlxconfig", "-d", DGX_RAIL0, "-y", "set", "MAX_ACC_OUT_READ=44").rc == 0


def test_values_by_name_or_number(dgx: Path) -> None:
    assert run_tool(dgx, "mlxconfig", "-d", DGX_RAIL0, "-y", "set", "LINK_TYPE_P1=2", "ATS_ENABLED=True(1)").rc == 0
    q = params(run_tool(dgx, "mlxconfig", "-d", DGX_RAIL0, "q").out)
    assert (q["LINK_TYPE_P1"]["next_boot"]["raw"], q["ATS_ENABLED"]["next_boot"]["raw"]) == ("ETH(2)", "True(1)")


def test_reset_restores_factory_next_boot(dgx: Path) -> None:
    run_tool(dgx, "mlxconfig", "-d", DGX_RAIL0, "-y", "set", "NUM_OF_VFS=8")
    res = run_tool(dgx, "mlxconfig", "-d", DGX_RAIL0, "-y", "reset")
    assert res.rc == 0 and "-I- Please reboot machine to load new configurations." in res.out
    assert hw(dgx)["cards"]["0000:18:00"]["next_boot"]["NUM_OF_VFS"] == 16


def test_mlxconfig_reject_fault(tmp_path: Path) -> None:
    root = make_host(tmp_path / "h", "dgx-h100", faults={"mlxconfig_reject": ["0000:29:00.1"]})
    res = run_tool(root, "mlxconfig", "-d", "0000:29:00.1", "q")
    assert res.rc == 1 and mlxconfig.parse_query(res.out)["errors"]
    assert run_tool(root, "mlxconfig", "-d", "0000:29:00.0", "q").rc == 0  # the other function is fine


def test_query_without_device_lists_every_card_function(dgx: Path) -> None:
    res = run_tool(dgx, "mlxconfig", "q")
    devices = mlxconfig.parse_query(res.out)["devices"]
    assert [d["device"] for d in devices][:2] == ["/dev/mst/mt4129_pciconf0", "/dev/mst/mt4129_pciconf1"]
    assert len(devices) == 12  # 8 rails + 2 dual-port storage cards


def test_unknown_device(dgx: Path) -> None:
    res = run_tool(dgx, "mlxconfig", "-d", "0000:77:00.0", "q")
    assert res.rc == 1 and mlxconfig.parse_query(res.out)["errors"]
