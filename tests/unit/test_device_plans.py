"""Per-device plans on the controller against a host_state read of a simulated HGX: empty when the host
matches, the module's own before -> after when not, and "run the module" whenever the read cannot decide."""

from __future__ import annotations

import copy

import pytest
from ansible_collections.mlplatform.gpunode.plugins.filter.device_plans import FilterModule
from ansible_collections.mlplatform.gpunode.plugins.modules import host_state
from module_harness import run_module
from test_host_state import sim  # noqa: F401  (fixture: a simulated HGX with its tools)

simhost = pytest.importorskip("simhost")
F = FilterModule().filters()


@pytest.fixture
def state(sim):  # noqa: F811  (the fixture above)
    args = {"sysfs_root": str(sim["host"] / "sys"), "root": str(sim["files_root"])}
    result = run_module(host_state.main, args)["host_state"]
    result["_sim"] = sim
    return result


def _rail(state):
    return state["hardware"]["rails"][0]["pci_address"]


def test_nv_config_plan_no_change_returns_the_module_result(state):
    rail = _rail(state)
    now = state["nv_config"][rail]["NUM_OF_VFS"]["next_boot"]
    plan = F["nv_config_plan"](state, [{"device": rail, "settings": {"NUM_OF_VFS": int(now)}}])
    assert plan["run"] is False and plan["changes"] == {}
    assert plan["result"]["reboot_required"] is False
    assert plan["result"]["config"][rail]["NUM_OF_VFS"]["next_boot"] == now


def test_nv_config_plan_without_a_current_column_says_reboot_unknown_like_the_module(state):
    """The read shows next boot only (tools that print no current column): next boot already holds the wish, so
    nothing is written, and reboot_required is unknown - true, with the reason - as the mlxconfig module says."""
    rail = _rail(state)
    now = state["nv_config"][rail]["NUM_OF_VFS"]["next_boot"]
    no_current = copy.deepcopy(state)
    for row in no_current["nv_config"][rail].values():
        row["current"] = None
    plan = F["nv_config_plan"](no_current, [{"device": rail, "settings": {"NUM_OF_VFS": int(now)}}])
    assert plan["run"] is False and plan["result"]["pending"] == {}
    assert plan["result"]["reboot_required"] is True
    assert plan["result"]["reboot_unknown"] == {rail: ["NUM_OF_VFS"]}
    assert "unknown, treated as true: mlxconfig prints no current value" in plan["result"]["reboot_reason"]
    # With the current column, no reason.
    plain = F["nv_config_plan"](state, [{"device": rail, "settings": {"NUM_OF_VFS": int(now)}}])
    assert plain["result"]["reboot_unknown"] == {} and plain["result"]["reboot_reason"] is None


def test_nv_config_plan_change_shows_before_after(state):
    rail = _rail(state)
    plan = F["nv_config_plan"](state, [{"device": rail, "settings": {"NUM_OF_VFS": 3}}])
    assert plan["run"] is True
    assert plan["changes"][rail]["NUM_OF_VFS"]["after"] == "3"


def test_nv_config_plan_runs_the_module_when_it_cannot_decide(state):
    rail = _rail(state)
    assert F["nv_config_plan"](state, [{"device": rail, "settings": {"NO_SUCH": 1}}])["run"] is True
    assert F["nv_config_plan"](state, [{"device": "0000:ff:00.0", "settings": {"NUM_OF_VFS": 1}}])["run"] is True
    no_tool = dict(state, tools=dict(state["tools"], mlxconfig=None))
    assert F["nv_config_plan"](no_tool, [{"device": rail, "settings": {"NUM_OF_VFS": 1}}])["run"] is True
    refused = dict(state, nv_config_refused={rail: "Failed to open the device"})
    refused["nv_config"] = {k: v for k, v in state["nv_config"].items() if k != rail}
    assert F["nv_config_plan"](refused, [{"device": rail, "settings": {"NUM_OF_VFS": 1}}])["run"] is True
    skipped = F["nv_config_plan"](refused, [{"device": rail, "settings": {"NUM_OF_VFS": 1}}], True)
    assert skipped["run"] is False and rail in skipped["result"]["skipped_devices"]
    assert F["nv_config_plan"](state, [])["run"] is False


def test_nv_config_plan_sees_a_pending_value(state):
    rail = _rail(state)
    res = simhost.run_tool(state["_sim"]["host"], "mlxconfig", "-d", rail, "-y", "set", "NUM_OF_VFS=4")
    assert res.rc == 0
    args = {"sysfs_root": str(state["_sim"]["host"] / "sys"), "root": str(state["_sim"]["files_root"])}
    again = run_module(host_state.main, args)["host_state"]
    keep = F["nv_config_plan"](again, [{"device": rail, "settings": {"NUM_OF_VFS": 4}}])
    assert keep["run"] is False and keep["result"]["pending"] == {rail: ["NUM_OF_VFS"]}
    assert keep["result"]["reboot_required"] is True
    drift = F["nv_config_plan"](again, [{"device": rail, "settings": {"NUM_OF_VFS": 16}}])
    assert drift["run"] is True and drift["changes"] == {rail: {"NUM_OF_VFS": {"before": "4", "after": "16"}}}


def test_roce_accl_plan(state):
    rail = _rail(state)
    now = state["roce_accl"][rail]["adaptive_routing_forced_en"]
    same = F["roce_accl_plan"](state, [{"device": rail, "fields": {"adaptive_routing_forced_en": now}}])
    assert same["run"] is False and same["result"]["fields"][rail] == state["roce_accl"][rail]
    flip = F["roce_accl_plan"](state, [{"device": rail, "fields": {"adaptive_routing_forced_en": 1 - now}}])
    assert flip["run"] is True
    assert flip["changes"] == {rail: {"adaptive_routing_forced_en": {"before": now, "after": 1 - now}}}
    assert F["roce_accl_plan"](state, [{"device": rail, "fields": {"bogus": 1}}])["run"] is True


def test_vf_plan(state):
    rail = _rail(state)
    assert F["vf_plan"](state, [{"pci_address": rail, "num_vfs": 0}]) == {
        "run": False, "reason": "every PF has its VF count", "changes": {},
        "result": {"changed": False, "pfs": {rail: {"before": 0, "after": 0,
                                                    "total": state["vfs"][rail]["totalvfs"]}}}}
    drift = F["vf_plan"](state, [{"pci_address": rail, "num_vfs": 8}])
    assert drift["run"] is True and drift["changes"] == {rail: {"num_vfs": {"before": 0, "after": 8}}}
    assert F["vf_plan"](state, [{"pci_address": rail, "num_vfs": 10_000}])["run"] is True
    assert F["vf_plan"](state, [{"pci_address": rail, "num_vfs": -1}])["run"] is True


QOS = {"trust": "dscp", "pfc": [0, 0, 0, 1, 0, 0, 0, 0], "ecn_np": [3], "ecn_rp": [3], "cnp_dscp": 48,
       "roce_tos": 106, "mtu": 9000}


def test_qos_plan():
    current = {"ens1np0": {"trust": "dscp", "pfc": [0, 0, 0, 1, 0, 0, 0, 0], "ecn_np": [3], "ecn_rp": [3],
                           "cnp_dscp": 48, "roce_tos": 106, "cma_roce_tos": 106, "mtu": 9000,
                           "dcbx_mode": "OS controlled"}}
    state = {"qos": current}
    wish = [{"netdev": "ens1np0", "rdma_device": "mlx5_0", **QOS}]
    same = F["qos_plan"](state, wish)
    assert same["run"] is False and same["result"]["current"] == current
    drifted = copy.deepcopy(state)
    drifted["qos"]["ens1np0"]["trust"] = "pcp"
    plan = F["qos_plan"](drifted, wish)
    assert plan["run"] is True and plan["changes"]["ens1np0"]["trust"] == {"before": "pcp", "after": "dscp"}
    assert set(plan["changes"]["ens1np0"]) == {"trust"}
    assert F["qos_plan"]({}, wish)["run"] is True
    assert F["qos_plan"](state, [{"netdev": "ens1np0", "rdma_device": "mlx5_0", "trust": "bogus"}])["run"] is True
    # Firmware-controlled DCBX with another PFC: nothing to write, PFC left alone with the reason, under the key the
    # roce_qos module returns (no "skipped": Ansible's `is skipped` test would be true for the result).
    firmware = copy.deepcopy(state)
    firmware["qos"]["ens1np0"].update(dcbx_mode="Firmware controlled", pfc=[0, 0, 0, 0, 1, 0, 0, 0])
    left = F["qos_plan"](firmware, wish)
    assert left["run"] is False and "skipped" not in left["result"]
    assert "firmware controlled" in left["result"]["left_alone"]["ens1np0"]["pfc"]
    assert same["result"]["left_alone"] == {}
