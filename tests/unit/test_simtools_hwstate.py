"""Host state lifecycle: fresh hw.json per profile, fault flags, reboot promotion, profile fault validation."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from simhost import make_host, run_tool

from gpunode.sim import hwstate
from gpunode.sim.profile import ProfileError, load_profile, validate_profile


def test_fresh_hw_json_has_catalogue_defaults_per_card(tmp_path: Path) -> None:
    root = make_host(tmp_path / "h", "hgx-h100")
    hw = json.loads((root / "hw.json").read_text())
    rail, storage = hw["cards"]["0000:1a:00"], hw["cards"]["0000:1b:00"]
    assert (rail["model"], rail["ports"], rail["psid"], rail["fw_version"]) == ("cx7", 1, "MT_0000000838", "28.39.1002")
    assert rail["current"] == rail["next_boot"] == rail["default"]
    assert rail["current"]["NUM_OF_VFS"] == 16 and rail["current"]["LINK_TYPE_P1"] == 2  # RoCE: ETH(2)
    assert "LINK_TYPE_P2" not in rail["current"]
    assert (storage["model"], storage["ports"], storage["current"]["NUM_OF_VFS"]) == ("cx6dx", 2, 8)
    assert storage["functions"] == ["0000:1b:00.0", "0000:1b:00.1"]
    assert "ROCE_CC_PRIO_MASK_P2" in storage["current"] and "LINK_TYPE_P1" not in storage["current"]
    assert hw["faults"] == {"mlxconfig_reject": [], "not_sticky": {}, "link_down": []}
    for name in ("profile.json", "devices.json", "profile.yaml"):
        assert (root / name).is_file()


def test_link_down_fault_at_runtime_and_after_reboot(tmp_path: Path) -> None:
    root = make_host(tmp_path / "h", "hgx-h100")
    port = root / "sys/class/infiniband/mlx5_0/ports/1"
    assert (port / "state").read_text() == "4: ACTIVE\n"
    hwstate.set_fault(root, "link_down", "1a:00.0")
    assert (port / "state").read_text() == "1: DOWN\n"
    assert (root / "sys/class/net/enp26s0np0/operstate").read_text() == "down\n"
    hwstate.reboot_state(root)
    assert (port / "phys_state").read_text() == "3: Disabled\n"
    hwstate.set_fault(root, "link_down", "0000:1a:00.0", clear=True)
    assert (port / "state").read_text() == "4: ACTIVE\n"
    hwstate.reboot_state(root)
    assert (port / "state").read_text() == "4: ACTIVE\n"


def test_set_fault_not_sticky_and_reject(tmp_path: Path) -> None:
    root = make_host(tmp_path / "h", "dgx-h100")
    faults = hwstate.set_fault(root, "not_sticky", "0000:18:00.0", params=["link_type_p1"])
    assert faults["not_sticky"] == {"0000:18:00.0": ["LINK_TYPE_P1"]}
    hwstate.set_fault(root, "mlxconfig_reject", "0000:18:00.0")
    assert run_tool(root, "mlxconfig", "-d", "18:00.0", "q").rc == 1
    hwstate.set_fault(root, "mlxconfig_reject", "0000:18:00.0", clear=True)
    assert run_tool(root, "mlxconfig", "-d", "18:00.0", "q").rc == 0
    with pytest.raises(hwstate.HwStateError, match="not a NIC function"):
        hwstate.set_fault(root, "link_down", "0000:77:00.0")
    with pytest.raises(hwstate.HwStateError, match="unknown fault"):
        hwstate.set_fault(root, "melted", "0000:18:00.0")


def test_sriov_disabled_means_no_vfs_after_reboot(tmp_path: Path) -> None:
    root = make_host(tmp_path / "h", "dgx-h100")
    assert run_tool(root, "mlxconfig", "-d", "18:00.0", "-y", "set", "SRIOV_EN=0").rc == 0
    hwstate.reboot_state(root)
    assert (root / "sys/bus/pci/devices/0000:18:00.0/sriov_totalvfs").read_text() == "0\n"


@pytest.mark.parametrize(("faults", "message"), [
    ({"bogus": []}, "unknown fault"),
    ({"link_down": ["0000:77:00.0"]}, "not a NIC function"),
    ({"not_sticky": {"0000:18:00.0": "LINK_TYPE_P1"}}, "list of parameter names"),
    ({"mlxconfig_reject": "0000:18:00.0"}, "list of PCI addresses"),
])
def test_profile_faults_are_validated(faults: dict, message: str) -> None:
    data = copy.deepcopy(load_profile("dgx-h100"))
    data["faults"] = faults
    with pytest.raises(ProfileError, match=message):
        validate_profile(data, "dgx-h100.yaml")


def test_main_dispatch(tmp_path: Path) -> None:
    root = make_host(tmp_path / "h", "hgx-h100")
    missing = run_tool(root, "no-such-tool")
    assert missing.rc == 127 and "not a simulated tool" in missing.err
    assert run_tool(root, "state").rc == 127  # helper modules are not tools
    assert run_tool(root, "mstconfig", "-d", "1a:00.0", "q").out.startswith("\nDevice #1:")
    assert run_tool(root, "gpunode-sim-ctl", "module-load", "mlx5_core", "24.10").rc == 0
    assert run_tool(root, "gpunode-sim-ctl", "module-list").out == "mlx5_core 24.10\n"
    assert run_tool(root, "gpunode-sim-ctl", "module-unload", "mlx5_core").rc == 0
    assert run_tool(root, "gpunode-sim-ctl", "module-unload", "mlx5_core").rc == 1
