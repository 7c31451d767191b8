"""Old Xid events are judged against the GPU's current state and the last handling recorded for the host: lines
logged before a GPU reset, with the GPU clean now, make no new condition and no new remediation."""

from __future__ import annotations

import datetime

import pytest
from ansible_collections.mlplatform.gpunode.plugins.action import remediation as action
from ansible_collections.mlplatform.gpunode.plugins.module_utils import node_health
from ansible_collections.mlplatform.gpunode.plugins.module_utils import remediation as rm
from ansible_collections.mlplatform.gpunode.plugins.modules import node_health as module
from module_harness import ExitJson, FailJson, PublishedHostVars, action_plugin, patch_exits, run_module
from simhost import day_two_host, tool_bin

GPU = "0000:19:00.0"
HW = {"gpus": [{"pci_address": GPU}], "rails": []}


def _xid(xid, stamp="2024-11-15T12:02:03,470068+00:00"):
    return (f"{stamp} NVRM: Xid (PCI:0000:19:00): {xid}, pid='<unknown>', name=<unknown>, "
            "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6.\n")


def _observed(log, **gpu):
    xids = node_health.parse_kernel_log(log)
    for event in xids:
        event["epoch"] = node_health.event_epoch(event["time"], boot_epoch=1_700_000_000.0)
    state = {"persistence_mode": "Enabled", "volatile_uncorrectable": 0, "row_remap_pending": False,
             "row_remap_failure": False, "retired_pages_pending": None, "unreadable": {}, **gpu}
    return {"nvidia_smi": {"gpus": {GPU: state}}, "kernel_log": {"xids": xids}}


def test_a_double_bit_error_the_gpu_no_longer_shows_is_handled():
    observed = _observed(_xid(48))
    assert node_health.evaluate(HW, observed, {}) == []
    (event,) = observed["kernel_log"]["handled"]
    assert event["xid"] == 48 and "volatile uncorrectable ECC count reads 0 now" in event["why"]
    # Still counted by the GPU now: the same line is a condition.
    conds = node_health.evaluate(HW, _observed(_xid(48), volatile_uncorrectable=2), {})
    assert [(c["type"], c["device"]) for c in conds] == [("GPUUncorrectableECC", GPU), ("GPUDoubleBitECCError", GPU)]
    cond = conds[1]
    assert cond["last_seen"] == datetime.datetime(2024, 11, 15, 12, 2, 3, 470068, datetime.UTC).timestamp()


def test_a_row_remap_applied_since_is_handled_and_an_unreadable_gpu_is_not_judged_clean():
    assert node_health.evaluate(HW, _observed(_xid(63)), {}) == []
    assert [c["reason"] for c in node_health.evaluate(HW, _observed(_xid(63), row_remap_pending=True), {})] == [
        "RowRemapPending", "Xid63"]
    unreadable = _observed(_xid(48), volatile_uncorrectable=None,
                           unreadable={"ECC Errors/Volatile/DRAM Uncorrectable": "ERR!"})
    assert "Xid48" in [c["reason"] for c in node_health.evaluate(HW, unreadable, {})]


def test_events_before_the_last_handling_are_not_conditions():
    log = _xid(79, "2024-11-15T12:00:00,000000+00:00") + _xid(79, "2024-11-15T13:00:00,000000+00:00")
    handled = datetime.datetime(2024, 11, 15, 12, 30, tzinfo=datetime.UTC).timestamp()
    (cond,) = node_health.evaluate(HW, _observed(log), {"xid_handled_before": handled})
    assert cond["reason"] == "Xid79" and "1 time(s)" in cond["message"]  # only the one after the handling
    later = datetime.datetime(2024, 11, 15, 14, tzinfo=datetime.UTC).timestamp()
    observed = _observed(log)
    assert node_health.evaluate(HW, observed, {"xid_handled_before": later}) == []
    assert len(observed["kernel_log"]["handled"]) == 2


@pytest.mark.parametrize(("stamp", "boot", "epoch"), [
    ("2024-11-15T12:02:03,5+01:00", None, datetime.datetime(2024, 11, 15, 11, 2, 3, 500000, datetime.UTC)),
    ("2024-11-15T12:02:03.5-0030", None, datetime.datetime(2024, 11, 15, 12, 32, 3, 500000, datetime.UTC)),
    ("120.5", 1000.0, 1120.5),
    ("120.5", None, None),
    (None, 1000.0, None),
])
def test_event_times(stamp, boot, epoch):
    want = epoch.timestamp() if isinstance(epoch, datetime.datetime) else epoch
    assert node_health.event_epoch(stamp, boot) == want


def test_the_plan_leaves_out_xid_conditions_handled_at_the_last_return():
    cond = {"type": "GPUFallenOffBus", "status": "True", "reason": "Xid79", "device": GPU, "check": "xid",
            "remedy": "hardware", "message": "GPU 0000:19:00.0: Xid 79", "last_seen": 1000.0}
    finding = {"conditions": [cond], "regressions": [], "failures": []}
    record = {"state": "in_service", "attempts": 0, "fabric": "A", "handled_at": 2000.0}
    plan = rm.plan({"a": finding}, {"a": "A"}, {"a": record})
    assert plan["a"]["action"] == "none" and plan["a"]["handled"] == ["GPUFallenOffBus: GPU 0000:19:00.0: Xid 79"]
    # A new event after the return is a finding again.
    newer = {**finding, "conditions": [{**cond, "last_seen": 3000.0}]}
    assert rm.plan({"a": newer}, {"a": "A"}, {"a": record})["a"]["action"] == "hardware_service"


def test_the_action_takes_the_last_return_from_the_database(tmp_path):
    db = tmp_path / "h.sqlite"
    cond = {"type": "GPUDoubleBitECCError", "status": "True", "reason": "Xid48", "device": GPU, "check": "xid",
            "remedy": "reset", "message": "GPU 0000:19:00.0: Xid 48"}

    def plan(last_seen):
        finding = {"conditions": [{**cond, "last_seen": last_seen}], "regressions": [], "failures": []}
        plugin = action_plugin(action, {"db": str(db), "run": "r", "nodes": {"a": {"unschedulable": False}}})
        return plugin.run(task_vars={"hostvars": PublishedHostVars({"a": {"revalidate_finding": finding,
                                                                          "gpunode_fabric": "A"}}),
                                     "ansible_play_hosts": ["a"]})["plan"]["a"]

    assert plan(1.0)["action"] == "remediate"
    returned = action_plugin(action, {"db": str(db), "run": "r", "step": "record", "hosts": ["a"],
                                      "event": "returned", "state": "in_service"})
    returned.run(task_vars={"hostvars": PublishedHostVars({}), "ansible_play_hosts": ["a"]})
    # The same old event after the host came back: no new remediation.
    assert plan(1.0)["action"] == "none"


@pytest.fixture
def host(tmp_path, monkeypatch):
    bindir = tool_bin(tmp_path / "bin", ("nvidia-smi", "dmesg"))
    hdir, hw = day_two_host(tmp_path / "host", "hgx-h100")
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    monkeypatch.setenv("GPUNODE_SIM_STATE", str(hdir))
    monkeypatch.setenv("GPUNODE_SIM_NVIDIA_USERSPACE", str(tmp_path / "no-userspace-file"))
    patch_exits(monkeypatch)
    return hdir, hw


@pytest.mark.parametrize("value", ["yesterday", "2026-12-01T08:00:00", "nan", True, [1]])
def test_a_bad_handling_time_is_refused_naming_the_option(host, value):
    hdir, hw = host
    result = run_module(module.main, {"sysfs_root": str(hdir / "sys"), "proc_root": str(hdir / "run" / "proc"),
                                      "hw": hw, "xid_handled_before": value}, FailJson)
    assert "xid_handled_before" in result["msg"] and "is not a time" in result["msg"]


def test_the_module_accepts_an_iso_handling_time(host):
    hdir, hw = host
    result = run_module(module.main, {"sysfs_root": str(hdir / "sys"), "proc_root": str(hdir / "run" / "proc"),
                                      "hw": hw, "xid_handled_before": "2026-12-01T08:00:00Z"}, ExitJson)
    assert result["conditions"] == []
