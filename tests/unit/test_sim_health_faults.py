"""The simulator's day-two faults: off by default, validated, live at once, what a reboot keeps
(hardware faults) and what it undoes (drift, stuck processes)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml
from simhost import make_host, run_tool, state

from gpunode.sim import hwstate
from gpunode.sim.profile import ProfileError, load_profile


@pytest.fixture
def hdir(tmp_path):
    return make_host(tmp_path / "h", "dgx-h100")


def _sys(hdir, pci, name):
    return (hdir / "sys" / "bus" / "pci" / "devices" / pci / name).read_text().strip()


def test_off_by_default_and_unchanged(hdir):
    assert hwstate.load_hw(hdir)["faults"] == {"mlxconfig_reject": [], "not_sticky": {}, "link_down": []}
    st = state(hdir)
    for rec in st.gpus() + st.nics():
        assert _sys(hdir, rec["address"], "current_link_width") == _sys(hdir, rec["address"], "max_link_width")
    st.load_module("nvidia", "570.172.08")
    log = run_tool(hdir, "dmesg").out
    assert "Xid" not in log and log.startswith("[    0.000000] Linux version")
    smi = run_tool(hdir, "nvidia-smi", "-q").out
    assert smi.count("Pending                           : No") == 8  # Remapped Rows
    assert "Uncorrectable Error               : 1" not in smi


def test_hardware_faults_survive_reboot_drift_does_not(hdir):
    st = state(hdir)
    gpu, nic = st.gpus()[1]["address"], st.nics()[0]
    hwstate.set_fault(hdir, "xid", gpu, params=["63"])
    hwstate.set_fault(hdir, "rail_rate", nic["address"], params=["200"])
    hwstate.set_fault(hdir, "pcie_width", gpu, params=["8"])
    hwstate.set_fault(hdir, "adaptive_routing", nic["address"], params=["1"])
    hwstate.set_fault(hdir, "vf_reset", nic["address"])
    hwstate.set_fault(hdir, "dstate", "/usr/sbin/lvm", params=["700"])
    assert (hdir / "sys" / "class" / "infiniband" / nic["rdma"] / "ports" / "1" / "rate").read_text() == \
        "200 Gb/sec (4X HDR)\n"
    assert _sys(hdir, gpu, "current_link_width") == "8"
    assert "adaptive_routing_forced_en" in run_tool(hdir, "mlxreg", "-d", nic["address"], "--reg_name",
                                                    "ROCE_ACCL", "--get").out
    hwstate.reboot_state(hdir)
    assert _sys(hdir, gpu, "current_link_width") == "8" and _sys(hdir, gpu, "max_link_width") == "16"
    assert (hdir / "sys" / "class" / "infiniband" / nic["rdma"] / "ports" / "1" / "rate").read_text() == \
        "200 Gb/sec (4X HDR)\n"
    assert not (hdir / "run").exists()  # ROCE_ACCL back to firmware defaults, no stuck process
    st.load_module("nvidia", "570.172.08")
    assert f"NVRM: Xid (PCI:{gpu[:-2]}): 63, pid='<unknown>', name=<unknown>, Row Remapper" in \
        run_tool(hdir, "dmesg", "--time-format=iso").out
    faults = hwstate.set_fault(hdir, "rail_rate", nic["address"], clear=True)
    assert "rail_rate" not in faults
    assert (hdir / "sys" / "class" / "infiniband" / nic["rdma"] / "ports" / "1" / "rate").read_text() == \
        "400 Gb/sec (4X NDR)\n"


@pytest.mark.parametrize("kind, address, params, message", [
    ("xid", "gpu", ["13"], "Xid numbers from 48, 63, 79, 94"),
    ("xid", "nic", ["79"], "is not a GPU of this host"),
    ("rail_rate", "gpu", ["200"], "is not a NIC function of this host"),
    ("rail_rate", "nic", [], "needs the rate in Gb/s"),
    ("pcie_width", "nic", ["32"], "from 1 to 16"),
    ("adaptive_routing", "nic", ["2"], "0 or 1"),
])
def test_bad_fault_input_is_refused(hdir, kind, address, params, message):
    st = state(hdir)
    pci = st.gpus()[0]["address"] if address == "gpu" else st.nics()[0]["address"]
    with pytest.raises(hwstate.HwStateError, match=message):
        hwstate.set_fault(hdir, kind, pci, params=params)
    assert hwstate.load_hw(hdir)["faults"] == {"mlxconfig_reject": [], "not_sticky": {}, "link_down": []}


def test_profile_fault_flags_are_validated(tmp_path):
    data = load_profile("hgx-h100")
    gpu = next(d for d in hwstate.iter_devices(data) if d["kind"] == "gpu")["address"]
    data["faults"] = {"xid": {gpu: [79]}, "retired_page_pending": [gpu]}
    hdir = tmp_path / "h"
    hwstate.write_state(hdir, data)
    assert hwstate.load_hw(hdir)["faults"]["xid"] == {gpu: [79]}
    nic = next(d for d in hwstate.iter_devices(data) if d["kind"] == "nic")["address"]
    bad = yaml.safe_load((hdir / "profile.yaml").read_text())
    bad["faults"] = {"xid": {nic: [79]}}
    (tmp_path / "hgx-h100.yaml").write_text(yaml.safe_dump(bad))
    with pytest.raises(ProfileError, match="not a GPU of this host"):
        load_profile(tmp_path / "hgx-h100.yaml")


def test_a_hung_tool_answers_nothing_until_the_fault_is_cleared_and_a_reboot_ends_it(hdir):
    """`hang nvidia-smi`: every call hangs without output (as one stuck in the driver) while the other tools answer;
    clearing the fault ends the call already hanging, and a reboot clears it (volatile state)."""
    env = {**os.environ, "GPUNODE_SIM_STATE": str(hdir), "GPUNODE_SIM_NVIDIA_USERSPACE": str(hdir / "none")}
    argv = [sys.executable, "-m", "gpunode.sim.tools.main", "nvidia-smi", "-L"]
    hwstate.set_fault(hdir, "hang", "nvidia-smi")
    with pytest.raises(subprocess.TimeoutExpired) as hung:
        subprocess.run(argv, env=env, capture_output=True, timeout=2, check=False)
    assert not hung.value.stdout
    assert run_tool(hdir, "dmesg").out  # only the named tool hangs
    call = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            call.wait(timeout=1)
        hwstate.set_fault(hdir, "hang", "nvidia-smi", clear=True)
        out, _err = call.communicate(timeout=30)  # the call that hung answers once the fault is cleared
    finally:
        call.kill()
    assert call.returncode is not None and out is not None
    hwstate.set_fault(hdir, "hang", "nvidia-smi")
    hwstate.reboot_state(hdir)
    assert subprocess.run(argv, env=env, capture_output=True, timeout=30, check=False).returncode is not None
    with pytest.raises(hwstate.HwStateError, match="not a simulated tool"):
        hwstate.set_fault(hdir, "hang", "no-such-tool")
