"""node_health: the parsers on the real day-two samples and their variants, and the module run
in-process against a simulated host whose faults are injected with the simulator's own calls
(``hwstate.set_fault``, what ``gpunode sim fault`` runs).

The host is a state directory on the controller (profile, hw.json, sysfs), converged the way the
pipeline leaves it (NVIDIA driver loaded, persistence on, fabric Completed, 8 VFs per rail,
adaptive routing on, DSCP trust and PFC on priority 3). The module's ``nvidia-smi``, ``dmesg``,
``mlxreg`` and ``mlnx_qos`` are the simulated tools, as executables on PATH.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.mlplatform.gpunode.plugins.module_utils import node_health, nvidia_smi
from ansible_collections.mlplatform.gpunode.plugins.module_utils.parsing import ParseError
from ansible_collections.mlplatform.gpunode.plugins.modules import node_health as module
from module_harness import ExitJson, FailJson, patch_exits, run_module
from simhost import day_two_host, run_tool, state, tool_bin

from gpunode.sim import hwstate

REPO = Path(__file__).resolve().parents[2]
DRIVER = "570.172.08"
TOOLS = ("nvidia-smi", "dmesg", "mlxreg", "mlnx_qos")
PFC = [0, 0, 0, 1, 0, 0, 0, 0]
EXPECT = {"num_vfs": 8, "roce_accl": {"adaptive_routing_forced_en": 1}, "qos": {"trust": "dscp", "pfc": PFC}}


def _verbatim(path):
    return "\n".join(line for line in path.read_text().splitlines() if not line.startswith("# ")) + "\n"


@pytest.fixture
def day_two(real_outputs):
    path = real_outputs.parent / "real-outputs-day-two"
    if not path.is_dir():
        pytest.skip(f"{path} is absent")
    return path


# -- parsers on the real samples -------------------------------------------------------------


def test_dmesg_iso_sample_xid_48_63_94_on_one_gpu(day_two):
    events = node_health.parse_kernel_log(_verbatim(day_two / "dmesg-xid48-63-94-gpud-iso.txt"))
    assert [e["xid"] for e in events] == [48, 63] + [94] * 9
    assert {e["pci_address"] for e in events} == {"0000:19:00.0"}
    assert events[0]["time"] == "2024-11-15T12:02:03,470068+00:00"
    assert events[0]["text"].startswith("An uncorrectable double bit error (DBE)")
    assert (events[3]["pid"], events[3]["process"]) == (1248209, "python3.10")
    assert (events[0]["pid"], events[0]["process"]) == (None, None)


def test_dmesg_monotonic_sample_xid_79_and_sxid_lines_ignored(day_two):
    events = node_health.parse_kernel_log(_verbatim(day_two / "dmesg-xid79-sxid-gpud-readme.txt"))
    assert events == [{"xid": 79, "pci_address": "0000:91:00.0", "time": "6781741.548779", "pid": None,
                       "process": None, "text": "GPU has fallen off the bus.", "line": 3}]


@pytest.mark.parametrize("line, xid, pci, stamp", [
    ("[Fri Nov 15 12:02:03 2024] NVRM: Xid (PCI:0000:19:00): 48, pid='<unknown>', name=<unknown>, DBE",
     48, "0000:19:00.0", "Fri Nov 15 12:02:03 2024"),
    ("NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.", 79, "0000:3b:00.0", None),  # dmesg -t, old driver
    ("[  12.5] NVRM: Xid (0000:3b:00): 13, Graphics Exception", 13, "0000:3b:00.0", "12.5"),  # no "PCI:"
])
def test_dmesg_variants(line, xid, pci, stamp):
    (event,) = node_health.parse_kernel_log(line + "\n")
    assert (event["xid"], event["pci_address"], event["time"]) == (xid, pci, stamp)


def test_dmesg_unknown_xid_shape_is_an_error_naming_the_line():
    with pytest.raises(ParseError, match="line 2.*NVRM: Xid 79 on 0000:19:00"):
        node_health.parse_kernel_log("[ 1.0] hello\n[ 2.0] NVRM: Xid 79 on 0000:19:00\n")
    assert node_health.parse_kernel_log("") == []


def test_nvidia_smi_q_full_sample_every_gpu_healthy(day_two):
    sample = day_two / "nvidia-smi-q-full-h100-hgx-gpud-535.161.08.txt"
    _header, sections = nvidia_smi.parse_query_tree(_verbatim(sample))
    health = {nvidia_smi.pci_address(bus): node_health.gpu_health_fields(f) for bus, f in sections}
    assert len(health) == 8
    assert set(map(str, health.values())) == {str({
        "persistence_mode": "Enabled", "fabric_state": "Completed", "fabric_status": "Success",
        "retired_pages_pending": None, "row_remap_pending": False, "row_remap_failure": False,
        "volatile_uncorrectable": 0, "unreadable": {}})}


def test_nvidia_smi_q_pre_ampere_and_bad_values():
    old = {"Retired Pages/Single Bit ECC": "0", "Retired Pages/Double Bit ECC": "2",
           "Retired Pages/Pending Page Retirement": "Yes", "ECC Errors/Volatile/Double Bit/Total": "3",
           "ECC Errors/Volatile/Double Bit/Device Memory": "3", "Persistence Mode": "Enabled"}
    health = node_health.gpu_health_fields(old)
    assert (health["retired_pages_pending"], health["volatile_uncorrectable"], health["row_remap_pending"]) == (
        True, 3, None)
    # A value of no known form is not a verdict: it is named, and the other fields are read.
    odd = node_health.gpu_health_fields({"Remapped Rows/Pending": "Maybe", "Remapped Rows/Remapping Failure Occurred":
                                         "No", "ECC Errors/Volatile/DRAM Uncorrectable": "many"})
    assert odd["unreadable"] == {"Remapped Rows/Pending": "Maybe", "ECC Errors/Volatile/DRAM Uncorrectable": "many"}
    assert (odd["row_remap_pending"], odd["row_remap_failure"], odd["volatile_uncorrectable"]) == (None, False, None)


def test_ps_sample_d_state_processes(day_two):
    text = (day_two / "ps-dstate-h100-aks-azure-local-csi-driver-153.txt").read_text()
    ps = [line for line in text.splitlines() if not line.startswith("# ")]
    rows = node_health.parse_ps("\n".join(ps[:ps.index(next(x for x in ps if "cat /proc" in x))]))
    assert [(r["pid"], r["state"], r["cmd"]) for r in rows] == [
        (12405, "D", "/opt/microsoft/auoms/bin/auoms"), (105408, "D", "[jbd2/dm-8-8]"), (1233013, "D", "[lvm]"),
        (1233429, "D", "[lvm]"), (1233747, "D", "[lvm]"), (1234598, "D", "[lvm]")]
    with_age = node_health.parse_ps("    PID S ELAPSED CMD\n      1 S  86400 /sbin/init\n   812 D    930 [lvm]\n")
    assert with_age[1] == {"pid": 812, "state": "D", "etimes": 930, "cmd": "[lvm]"}
    with pytest.raises(ParseError):
        node_health.parse_ps("[<0>] exit_aio+0xe8/0xf0\n")


@pytest.mark.parametrize("text, gts", [("32.0 GT/s PCIe", 32.0), ("8 GT/s", 8.0), ("2.5 GT/s PCIe", 2.5),
                                       ("Unknown", None), ("Unknown speed", None)])
def test_link_speed_variants(text, gts):
    assert node_health.parse_link_speed(text + "\n") == gts


def test_link_files_unknown_format_is_an_error():
    with pytest.raises(ParseError, match="max_link_speed"):
        node_health.parse_link_speed("fast", "max_link_speed")
    with pytest.raises(ParseError, match="lane count"):
        node_health.parse_link_width("x16")


def test_proc_stat_comm_with_spaces_and_parentheses():
    stat = "4242 (my (odd) cmd) D 1 4242 4242 0 -1 4194560 1 0 0 0 1 2 0 0 20 0 1 0 1234567 0 0\n"
    assert node_health.parse_proc_stat(stat) == {"pid": 4242, "comm": "my (odd) cmd", "state": "D",
                                                 "starttime_ticks": 1234567}
    with pytest.raises(ParseError):
        node_health.parse_proc_stat("4242 cmd D 1")
    assert node_health.parse_uptime("350735.47 234388.90\n") == 350735.47


def test_gpu_missing_from_nvidia_smi_names_it():
    hw = {"gpus": [{"pci_address": "0000:19:00.0"}, {"pci_address": "0000:3b:00.0"}], "rails": []}
    gpu = {"persistence_mode": "Enabled"}
    conditions = node_health.evaluate(hw, {"nvidia_smi": {"gpus": {"0000:19:00.0": gpu}}}, {})
    assert [(c["type"], c["device"], c["remedy"]) for c in conditions] == [("GPUMissing", "0000:3b:00.0", "hardware")]


# -- the module against a simulated host -----------------------------------------------------


@pytest.fixture
def host(tmp_path, monkeypatch):
    """A converged simulated HGX H100 (4 NVSwitches) with the tools on PATH; returns (dir, hw)."""
    bindir = tool_bin(tmp_path / "bin", TOOLS)
    hdir, hw = day_two_host(tmp_path / "host", "hgx-h100", DRIVER, pfc=PFC)
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    monkeypatch.setenv("GPUNODE_SIM_STATE", str(hdir))
    monkeypatch.setenv("GPUNODE_SIM_NVIDIA_USERSPACE", str(tmp_path / "no-userspace-file"))
    patch_exits(monkeypatch)
    return hdir, hw


def health(host, **extra):
    hdir, hw = host
    args = {"sysfs_root": str(hdir / "sys"), "proc_root": str(hdir / "run" / "proc"), "hw": hw, "expect": EXPECT,
            **extra}
    return run_module(module.main, args, ExitJson)


def kinds(result):
    return [(c["type"], c["reason"], c["device"]) for c in result["conditions"]]


def test_healthy_host_gives_no_condition(host):
    result = health(host)
    assert result["conditions"] == [] and result["healthy"] is True and result["changed"] is False
    assert len(result["observed"]["nvidia_smi"]["gpus"]) == 8
    assert len(result["observed"]["rails"]) == 8


def test_xid_79_on_one_gpu(host):
    hdir, hw = host
    gpu = hw["gpus"][2]["pci_address"]
    hwstate.set_fault(hdir, "xid", gpu, params=["79"])
    result = health(host)
    assert kinds(result) == [("GPUFallenOffBus", "Xid79", gpu)]
    (cond,) = result["conditions"]
    assert cond["status"] == "True" and cond["remedy"] == "hardware"
    assert cond["message"].startswith(f"GPU {gpu}: Xid 79 (GPU has fallen off the bus) 1 time(s) since boot")


def test_xid_48_is_a_double_bit_error_and_counts_volatile_ecc(host):
    hdir, hw = host
    gpu = hw["gpus"][5]["pci_address"]
    hwstate.set_fault(hdir, "xid", gpu, params=["48"])
    assert kinds(health(host)) == [("GPUUncorrectableECC", "VolatileUncorrectableECC", gpu),
                                   ("GPUDoubleBitECCError", "Xid48", gpu)]


def test_retired_page_pending(host):
    hdir, hw = host
    gpu = hw["gpus"][0]["pci_address"]
    hwstate.set_fault(hdir, "retired_page_pending", gpu)
    result = health(host)
    assert kinds(result) == [("GPURetiredPagesPending", "RowRemapPending", gpu)]
    assert result["conditions"][0]["remedy"] == "reset"


def test_rail_at_200_gbps(host):
    hdir, hw = host
    rail = hw["rails"][1]
    hwstate.set_fault(hdir, "rail_rate", rail["pci_address"], params=["200"])
    result = health(host)
    assert kinds(result) == [("RailSpeedDegraded", "RateBelowDiscovered", rail["pci_address"])]
    assert "port rate 200 Gb/s, discovered 400 Gb/s" in result["conditions"][0]["message"]
    assert f"rail 1 NIC {rail['pci_address']} ({rail['netdev']})" in result["conditions"][0]["message"]


def test_pcie_x16_to_x8_on_one_nic(host):
    hdir, hw = host
    rail = hw["rails"][6]
    hwstate.set_fault(hdir, "pcie_width", rail["pci_address"], params=["8"])
    result = health(host)
    assert kinds(result) == [("PCIeLinkDegraded", "PCIeWidthDowngraded", rail["pci_address"])]
    assert result["conditions"][0]["message"].endswith("PCIe link x8 of x16")
    assert result["conditions"][0]["remedy"] == "hardware"


def test_adaptive_routing_flipped(host):
    hdir, hw = host
    rail = hw["rails"][0]
    hwstate.set_fault(hdir, "adaptive_routing", rail["pci_address"])
    result = health(host)
    assert kinds(result) == [("RailRoceAcclDrift", "AdaptiveRoutingChanged", rail["pci_address"])]
    assert "adaptive_routing_forced_en=0, declared 1" in result["conditions"][0]["message"]
    assert result["conditions"][0]["remedy"] == "reconfigure"


def test_vf_count_reset(host):
    hdir, hw = host
    rail = hw["rails"][4]
    hwstate.set_fault(hdir, "vf_reset", rail["pci_address"])
    assert kinds(health(host)) == [("RailVFCountDrift", "VFCountChanged", rail["pci_address"])]


def test_d_state_process_older_than_the_threshold(host):
    hdir, _hw = host
    hwstate.set_fault(hdir, "dstate", "/usr/sbin/lvm vgs", params=["900"])
    hwstate.set_fault(hdir, "dstate", "[jbd2/dm-8-8]", params=["30"])  # younger than the threshold
    result = health(host)
    (cond,) = result["conditions"]
    assert (cond["type"], cond["reason"], cond["device"]) == ("DStateProcess", "ProcessStuckInDState", "pid 1002")
    assert cond["message"].startswith("pid 1002 (/usr/sbin/lvm vgs) in uninterruptible sleep (D) for 900 s")
    assert len(health(host, d_state_min_age=10)["conditions"]) == 2
    hwstate.set_fault(hdir, "dstate", "-", clear=True)
    assert health(host)["conditions"] == []


def test_qos_drift_and_persistence_and_fabric(host):
    hdir, hw = host
    rail = hw["rails"][2]
    assert run_tool(hdir, "mlnx_qos", "-i", rail["netdev"], "--trust", "pcp").rc == 0
    state(hdir).set_gpu_runtime(fabric_state="In Progress", fabric_status="N/A")
    result = health(host)
    assert ("RailQoSDrift", "TrustChanged", rail["pci_address"]) in kinds(result)
    assert sum(1 for c in result["conditions"] if c["type"] == "GPUFabricNotReady") == 8


def test_no_driver_is_one_condition_and_faults_off_by_default(host):
    hdir, _hw = host
    assert hwstate.load_hw(hdir)["faults"] == {"mlxconfig_reject": [], "not_sticky": {}, "link_down": []}
    state(hdir).unload_module("nvidia")
    (cond,) = health(host)["conditions"]
    assert (cond["type"], cond["reason"]) == ("GPUDriverUnavailable", "NvidiaSmiFailed")
    assert "exit status 9" in cond["message"]


def test_bad_input_fails_naming_the_option(host):
    hdir, hw = host
    result = run_module(module.main, {"sysfs_root": str(hdir / "sys"), "hw": {"gpus": []}}, FailJson)
    assert "hw.rails is missing" in result["msg"]
    result = run_module(module.main, {"sysfs_root": str(hdir / "sys"), "proc_root": str(hdir / "nope"), "hw": hw},
                        FailJson)
    assert "proc_root" in result["msg"]
    result = run_module(module.main, {"sysfs_root": str(hdir / "sys"), "hw": hw, "expect": {"qos": {"tos": 1}}},
                        FailJson)
    assert "unknown keys tos" in result["msg"]


def test_unknown_sysfs_link_format_is_a_condition_naming_the_file(host):
    hdir, hw = host
    gpu = hw["gpus"][0]["pci_address"]
    path = hdir / "sys" / "bus" / "pci" / "devices" / gpu / "max_link_speed"
    path.write_text("very fast\n")
    result = run_module(module.main, {"sysfs_root": str(hdir / "sys"), "proc_root": str(hdir / "run" / "proc"),
                                      "hw": hw}, ExitJson)
    (cond,) = result["conditions"]
    assert (cond["type"], cond["reason"], cond["device"], cond["status"]) == (
        "PCIeLinkDegraded", "LinkUnreadable", gpu, "Unknown")
    assert "max_link_speed" in cond["message"] and "very fast" in cond["message"]


def test_return_documents_every_condition_type():
    import yaml  # noqa: PLC0415 - only this test reads the module's documentation

    doc = yaml.safe_load(module.RETURN)["conditions"]["contains"]["type"]["description"]
    assert [t for t in node_health.CONDITION_TYPES if t not in doc] == []
