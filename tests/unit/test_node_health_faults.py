"""node_health when one read goes wrong: a tool that hangs, a GPU field nvidia-smi cannot read, a GPU it cannot
reach, an output cut short, one kernel-log line of an unknown shape. Each is a condition (or a warning) naming the
device, and the rest of the host is read and judged.

The host is a converged simulated HGX H100; the faulty tool is a script on PATH before the simulated ones that
prints a changed copy of what the simulated tool prints.
"""

from __future__ import annotations

import re
import time

import pytest
from ansible.module_utils import basic
from ansible_collections.mlplatform.gpunode.plugins.modules import node_health as module
from module_harness import ExitJson, FailJson, patch_exits, run_module
from simhost import day_two_host, run_tool, tool_bin

DRIVER = "570.172.08"
PFC = [0, 0, 0, 1, 0, 0, 0, 0]
EXPECT = {"num_vfs": 8, "roce_accl": {"adaptive_routing_forced_en": 1}, "qos": {"trust": "dscp", "pfc": PFC}}


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    """One converged host for the module (the tests change only the faulty tools, and put back what they change)."""
    tmp = tmp_path_factory.mktemp("faults")
    bindir = tool_bin(tmp / "bin", ("nvidia-smi", "dmesg", "mlxreg", "mlnx_qos"))
    hdir, hw = day_two_host(tmp / "host", "hgx-h100", DRIVER, pfc=PFC)
    return tmp, bindir, hdir, hw


@pytest.fixture
def host(simulated, tmp_path, monkeypatch):
    tmp, bindir, hdir, hw = simulated
    faulty = tmp_path / "faulty"
    faulty.mkdir()
    monkeypatch.setenv("PATH", f"{faulty}:{bindir}:/usr/bin:/bin")
    monkeypatch.setenv("GPUNODE_SIM_STATE", str(hdir))
    monkeypatch.setenv("GPUNODE_SIM_NVIDIA_USERSPACE", str(tmp / "no-userspace-file"))
    patch_exits(monkeypatch)
    return hdir, hw, faulty


def fake(faulty, tool, stdout="", rc=0, stderr="", hang=False):
    """``tool`` on PATH printing ``stdout``/``stderr`` and exiting ``rc`` (or hanging)."""
    (faulty / f"{tool}.out").write_text(stdout)
    (faulty / f"{tool}.err").write_text(stderr)
    body = "exec sleep 60\n" if hang else f"cat '{faulty}/{tool}.out'\ncat '{faulty}/{tool}.err' >&2\nexit {rc}\n"
    (faulty / tool).write_text("#!/bin/sh\n" + body)
    (faulty / tool).chmod(0o755)


def smi_q(hdir):
    done = run_tool(hdir, "nvidia-smi", "-q")
    assert done.rc == 0, done.err
    return done.out


def health(hdir, hw, **extra):
    args = {"sysfs_root": str(hdir / "sys"), "proc_root": str(hdir / "run" / "proc"), "hw": hw, "expect": EXPECT,
            **extra}
    return run_module(module.main, args, ExitJson)


def kinds(result):
    return [(c["type"], c["reason"], c["device"], c["status"]) for c in result["conditions"]]


def test_a_hung_nvidia_smi_is_a_condition_and_the_rest_of_the_host_is_read(host):
    hdir, hw, faulty = host
    fake(faulty, "nvidia-smi", hang=True)
    rail = hw["rails"][2]
    numvfs = hdir / "sys" / "bus" / "pci" / "devices" / rail["pci_address"] / "sriov_numvfs"
    numvfs.write_text("0\n")
    start = time.monotonic()
    try:
        result = health(hdir, hw, timeout=1)
    finally:
        numvfs.write_text("8\n")
    assert time.monotonic() - start < 20
    assert kinds(result) == [("GPUDriverUnavailable", "NvidiaSmiTimedOut", "nvidia-smi", "Unknown"),
                             ("RailVFCountDrift", "VFCountChanged", rail["pci_address"], "True")]
    assert "nvidia-smi timed out after 1 s" in result["conditions"][0]["message"]


def test_a_hung_mlxreg_names_each_rail_and_the_gpus_are_still_judged(host):
    hdir, hw, faulty = host
    fake(faulty, "mlxreg", hang=True)
    two = {**hw, "rails": hw["rails"][:2]}  # each rail's read waits out its timeout: two are enough
    result = health(hdir, two, timeout=1)
    accl = [c for c in result["conditions"] if c["check"] == "roce_accl"]
    assert [c["device"] for c in accl] == [r["pci_address"] for r in two["rails"]]
    assert all("timed out after 1 s" in c["message"] for c in accl)
    assert {c["status"] for c in accl} == {"Unknown"}
    assert len(result["observed"]["nvidia_smi"]["gpus"]) == 8


@pytest.mark.parametrize("value", ["ERR!", "[Unknown Error]", "[GPU requires reset]", "Maybe"])
def test_an_unreadable_gpu_field_names_that_gpu_and_the_others_are_judged(host, value):
    hdir, hw, faulty = host
    text = smi_q(hdir)
    sections = text.split("\nGPU ")
    # The third GPU's volatile DRAM uncorrectable count and its persistence mode do not read.
    third = re.sub(r"(Persistence Mode\s+: ).*", lambda m: m.group(1) + value, sections[3], count=1)
    third = re.sub(r"(DRAM Uncorrectable\s+: ).*", lambda m: m.group(1) + value, third, count=1)
    sections[3] = third
    fake(faulty, "nvidia-smi", "\nGPU ".join(sections))
    gpu = sorted(g["pci_address"] for g in hw["gpus"])[2]
    result = health(hdir, hw)
    (cond,) = result["conditions"]
    assert (cond["type"], cond["reason"], cond["device"], cond["status"]) == (
        "GPUFieldUnreadable", "UnreadableValue", gpu, "Unknown")
    assert f"{value!r} for Persistence Mode" in cond["message"]
    assert "ECC Errors/Volatile/DRAM Uncorrectable" in cond["message"]
    assert len(result["observed"]["nvidia_smi"]["gpus"]) == 8


def test_a_gpu_nvidia_smi_cannot_reach_is_named(host):
    hdir, hw, faulty = host
    text = smi_q(hdir)
    head, *sections = text.split("\nGPU ")
    lost = sections.pop(5)
    bus = lost.splitlines()[0].strip()
    pci = bus[-12:].lower()
    fake(faulty, "nvidia-smi", head + "".join("\nGPU " + s for s in sections),
         stderr=f"Unable to determine the device handle for GPU{bus}: Unknown Error\n", rc=15)
    result = health(hdir, hw)
    assert kinds(result) == [("GPUUnreachable", "DeviceHandleUnavailable", pci, "True")]
    assert "Unknown Error" in result["conditions"][0]["message"]


@pytest.mark.parametrize("cut", ["sections", "mid-section", "banner"])
def test_nvidia_smi_output_cut_short_is_a_parse_condition_not_missing_gpus(host, cut):
    hdir, hw, faulty = host
    text = smi_q(hdir)
    if cut == "sections":  # after the fifth GPU's section
        text = "\nGPU ".join(text.split("\nGPU ")[:6])
    elif cut == "mid-section":  # inside the last GPU's section
        text = text[:text.rindex("\nGPU ") + 400]
    else:
        text = text[:20]
    fake(faulty, "nvidia-smi", text)
    result = health(hdir, hw)
    (cond,) = result["conditions"]
    assert (cond["type"], cond["device"], cond["status"], cond["remedy"]) == (
        "GPUQueryIncomplete", "nvidia-smi", "Unknown", "investigate")
    assert cond["reason"] == ("OutputUnparseable" if cut == "banner" else "OutputTruncated")
    assert not [c for c in result["conditions"] if c["type"] == "GPUMissing"]


def test_one_bad_kernel_log_line_is_reported_and_the_rest_is_read(host, monkeypatch):
    hdir, hw, faulty = host
    warned = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, text: warned.append(text))
    gpu = sorted(g["pci_address"] for g in hw["gpus"])[1]
    fake(faulty, "dmesg", "2024-11-15T12:02:03,470068+00:00 NVRM: Xid garbled beyond repair\n"
                          f"2024-11-15T12:05:00,000000+00:00 NVRM: Xid (PCI:{gpu[:-2]}): 79, pid='<unknown>', "
                          "name=<unknown>, GPU has fallen off the bus.\n")
    result = health(hdir, hw)
    assert kinds(result) == [("GPUFallenOffBus", "Xid79", gpu, "True")]
    assert result["observed"]["kernel_log"]["unparsed"] == [
        {"line": 1, "text": "2024-11-15T12:02:03,470068+00:00 NVRM: Xid garbled beyond repair"}]
    assert [w for w in warned if "kernel log line" in w] == [
        "kernel log line 1 looks like an Xid line but is of no known shape, left out: "
        "2024-11-15T12:02:03,470068+00:00 NVRM: Xid garbled beyond repair"]


@pytest.mark.parametrize("timeout", [0, -1, 7200])
def test_a_bad_timeout_is_refused_naming_it(host, timeout):
    hdir, hw, _faulty = host
    result = run_module(module.main, {"sysfs_root": str(hdir / "sys"), "hw": hw, "timeout": timeout}, FailJson)
    assert f"timeout {timeout} must be 1 to 3600 seconds" in result["msg"]
