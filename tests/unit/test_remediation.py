"""Day-two remediation: the plan (module_utils/remediation.py), its record in the day-two database (the remediation
action), Node conditions through the status subresource (the node_conditions action, against the API emulator) and
the report's day-two section (trend SVG, hosts out of service, events)."""

from __future__ import annotations

import sqlite3
import stat
import xml.etree.ElementTree as ET

import kubernetes
import pytest
from ansible.errors import AnsibleActionFail
from ansible_collections.mlplatform.gpunode.plugins.action import bandwidth_history as bw_action
from ansible_collections.mlplatform.gpunode.plugins.action import node_conditions as nc_action
from ansible_collections.mlplatform.gpunode.plugins.action import remediation as action
from ansible_collections.mlplatform.gpunode.plugins.module_utils import remediation as rm
from ansible_collections.mlplatform.gpunode.plugins.plugin_utils import day_two_report
from ansible_collections.mlplatform.gpunode.plugins.plugin_utils.fleet_report import write_report
from local_play import free_port
from module_harness import PublishedHostVars, action_plugin

from gpunode.kapi.server import RunningServer

AR = {"type": "RailRoceAcclDrift", "status": "True", "reason": "RoceAcclDrift", "device": "0000:3b:00.0",
      "message": "rail 2 NIC 0000:3b:00.0: adaptive_routing_forced_en 0, declared 1", "check": "roce_accl",
      "remedy": "reconfigure"}
XID79 = {"type": "GPUFallenOffBus", "status": "True", "reason": "Xid79", "device": "0000:91:00.0",
         "message": "GPU 0000:91:00.0: Xid 79 (GPU has fallen off the bus) 1 time since boot", "check": "xid",
         "remedy": "hardware"}
PCIE = {"type": "PCIeLinkDegraded", "status": "True", "reason": "LinkWidthDegraded", "device": "0000:5e:00.0",
        "message": "NIC 0000:5e:00.0: PCIe x8, max x16", "check": "pcie", "remedy": "hardware"}


def healthy():
    return {"conditions": [], "regressions": [], "failures": []}


def sick(*conditions, regressions=()):
    return {"conditions": list(conditions), "regressions": list(regressions), "failures": []}


def test_a_healthy_fleet_needs_nothing():
    plan = rm.plan({"a": healthy(), "b": healthy()}, {"a": "east", "b": "east"}, {})
    assert {h: p["action"] for h, p in plan.items()} == {"a": "none", "b": "none"}


def test_drift_is_remediated_and_hardware_faults_go_to_hardware_service_naming_the_device():
    plan = rm.plan({"a": sick(AR), "b": sick(XID79), "c": sick(PCIE)}, dict.fromkeys("abc", "east"), {},
                   max_unavailable=3)
    assert plan["a"]["action"] == "remediate" and plan["a"]["attempts"] == 1 and plan["a"]["state"] == "remediating"
    assert plan["a"]["reasons"] == [f"RailRoceAcclDrift: {AR['message']}"]
    assert plan["b"]["action"] == "hardware_service"
    assert plan["b"]["message"] == "needs hardware service: GPUFallenOffBus on 0000:91:00.0"
    assert plan["c"]["hardware"] == [{"type": "PCIeLinkDegraded", "device": "0000:5e:00.0",
                                      "message": PCIE["message"]}]
    # Hardware is never re-run, even with a drift beside it.
    both = rm.plan({"d": sick(AR, XID79)}, {"d": "east"}, {})
    assert both["d"]["action"] == "hardware_service"


def test_max_unavailable_bounds_each_fabric_and_a_host_already_out_does_not_count_twice():
    findings = {h: sick(AR) for h in ("a1", "a2", "a3", "b1")}
    fabrics = {"a1": "A", "a2": "A", "a3": "A", "b1": "B"}
    plan = rm.plan(findings, fabrics, {}, max_unavailable=1)
    assert {h: p["action"] for h, p in plan.items()} == {
        "a1": "remediate", "a2": "deferred", "a3": "deferred", "b1": "remediate"}
    assert plan["a2"]["message"] == "waits: 1 host(s) of fabric A are out already (max_unavailable): a1"
    assert plan["a2"]["state"] == "in_service" and plan["a2"]["attempts"] == 0
    # a3 is out already (recorded): it keeps its place and a1 waits; hardware service uses the budget as well.
    records = {"a3": {"state": "remediating", "attempts": 1, "fabric": "A"}}
    plan = rm.plan(findings, fabrics, records, max_unavailable=1)
    assert plan["a3"]["action"] == "remediate" and plan["a3"]["attempts"] == 2
    assert plan["a1"]["action"] == plan["a2"]["action"] == "deferred"
    plan = rm.plan({"a1": sick(XID79), "a2": sick(AR)}, {"a1": "A", "a2": "A"}, {}, max_unavailable=1)
    assert plan["a1"]["action"] == "hardware_service" and plan["a2"]["action"] == "deferred"
    # A percentage of the fabric's hosts, at least one.
    assert rm.budget("50%", 4) == 2 and rm.budget("10%", 4) == 1 and rm.budget(2, 10) == 2


def test_a_host_failing_only_against_a_drifted_peer_waits_for_the_peer():
    # Two hosts: adaptive routing flipped on b; the RDMA test between them fails on both ends.
    a = {"conditions": [], "regressions": ["a rail 2 (as client, peer b rail 2): no result (the test failed)"],
         "failures": ["rail 2 mlx5_4 as client <-> b mlx5_4: ib_write_bw failed"], "checks": [], "peers": ["b"]}
    b = {"conditions": [AR], "regressions": [], "failures": ["rail 2: ROCE_ACCL drift"], "checks": ["roce_accl"],
         "peers": ["a"]}
    plan = rm.plan({"a": a, "b": b}, {"a": "A", "b": "A"}, {}, max_unavailable=1)
    assert plan["b"]["action"] == "remediate"
    assert plan["a"]["action"] == "deferred" and plan["a"]["state"] == "in_service"
    assert plan["a"]["waits_for"] == ["b"] and plan["b"]["waits_for"] == []
    assert plan["a"]["message"] == ("waits: only its bandwidth results failed, against b, which have findings of "
                                    "their own; judged again once they pass")
    # Without a peer to explain it, a bandwidth-only finding is remediated.
    alone = rm.plan({"a": a}, {"a": "A"}, {})
    assert alone["a"]["action"] == "remediate"


def test_attempts_run_out_and_a_healthy_host_returns():
    records = {"a": {"state": "remediating", "attempts": 3, "fabric": "A"},
               "b": {"state": "exhausted", "attempts": 3, "fabric": "A"},
               "c": {"state": "hardware_service", "attempts": 0, "fabric": "A"}}
    plan = rm.plan({"a": sick(AR), "b": healthy(), "c": healthy()}, dict.fromkeys("abc", "A"), records,
                   max_attempts=3)
    assert plan["a"]["action"] == "exhausted"
    assert plan["a"]["message"] == "left out of service: 3 remediation attempts did not fix it"
    assert plan["b"]["action"] == plan["c"]["action"] == "return"
    assert plan["b"]["state"] == "in_service" and plan["b"]["attempts"] == 0


@pytest.mark.parametrize(("call", "message"), [
    (lambda: rm.plan({"a": sick(AR)}, {}, {}), "a: no fabric (gpunode_fabric) for the host"),
    (lambda: rm.plan({"a": {"conditions": "x"}}, {"a": "A"}, {}), "a: findings.conditions: expected a list"),
    (lambda: rm.plan({"a": healthy()}, {"a": "A"}, {"a": {"state": "gone"}}), "a: recorded state 'gone'"),
    (lambda: rm.plan({"a": sick(AR)}, {"a": "A"}, {}, max_unavailable="x"), "max_unavailable: 'x' is not"),
    (lambda: rm.plan({"a": sick(AR)}, {"a": "A"}, {}, max_unavailable=0), "max_unavailable: 0 must be at least 1"),
    (lambda: rm.plan({"a": sick(AR)}, {"a": "A"}, {}, max_attempts=0), "max_attempts: 0 must be at least 1"),
])
def test_bad_input_names_the_host_or_the_option(call, message):
    with pytest.raises(rm.RemediationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        call()


def _plan(tmp_path, findings, fabrics=None, check_mode=False, nodes=None, others=(), **args):
    hostvars = PublishedHostVars({**{h: {"gpunode_fabric": (fabrics or {}).get(h, "A")} for h in others},
                                  **{h: {"revalidate_finding": f, "gpunode_fabric": (fabrics or {}).get(h, "A")}
                                     for h, f in findings.items()}})
    nodes = {h: {"unschedulable": False} for h in [*findings, *others]} if nodes is None else nodes
    plugin = action_plugin(action, {"db": str(tmp_path / "d2" / "history.sqlite"), "run": "run-1", "nodes": nodes,
                                    **args})
    plugin._task.check_mode = check_mode
    return plugin.run(task_vars={"hostvars": hostvars, "ansible_play_hosts": sorted(findings)})


def _record(tmp_path, hosts, **args):
    plugin = action_plugin(action, {"db": str(tmp_path / "d2" / "history.sqlite"), "run": "run-1", "step": "record",
                                    "hosts": hosts, **args})
    return plugin.run(task_vars={"hostvars": PublishedHostVars({}), "ansible_play_hosts": hosts})


def test_the_action_records_states_and_events_and_attempts_survive_runs(tmp_path):
    db = tmp_path / "d2" / "history.sqlite"
    dry = _plan(tmp_path, {"a": sick(AR), "b": healthy()}, check_mode=True)
    assert dry["by_action"]["remediate"] == ["a"] and dry["events"] == [] and not db.exists()
    out = _plan(tmp_path, {"a": sick(AR), "b": healthy()})
    assert out["changed"] and out["by_action"]["remediate"] == ["a"] and out["by_action"]["none"] == ["b"]
    assert [(e["host"], e["step"]) for e in out["events"]] == [("a", "remediate")]
    assert stat.S_IMODE(db.stat().st_mode) == 0o600 and stat.S_IMODE(db.parent.stat().st_mode) == 0o700
    _record(tmp_path, ["a"], event="drained", details={"a": "1 Pod(s) deleted from node."})
    # The re-run failed twice more: the fourth plan gives up.
    for attempt in (2, 3):
        assert _plan(tmp_path, {"a": sick(AR)})["plan"]["a"]["attempts"] == attempt
    assert _plan(tmp_path, {"a": sick(AR)})["plan"]["a"]["action"] == "exhausted"
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT state, attempts FROM remediation WHERE host = 'a'").fetchone() == ("exhausted", 3)
    # Fixed by hand: healthy again, it returns, and the attempts start over.
    assert _plan(tmp_path, {"a": healthy()})["plan"]["a"]["action"] == "return"
    _record(tmp_path, ["a"], event="returned", state="in_service", details="back in service")
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT state, attempts FROM remediation WHERE host = 'a'").fetchone() == ("in_service", 0)
        steps = [r[0] for r in conn.execute("SELECT step FROM events WHERE host = 'a' ORDER BY id")]
    assert steps == ["remediate", "drained", "remediate", "remediate", "exhausted", "return", "returned"]


@pytest.mark.parametrize(("args", "message"), [
    ({"step": "fix"}, "step 'fix' is not one of plan, record"),
    ({"step": "record", "hosts": ["a"]}, "step=record needs event"),
    ({"step": "record", "hosts": ["a"], "event": "x", "state": "broken"}, "state 'broken' is not one of"),
    ({"step": "record", "hosts": ["zz"], "event": "x", "state": "in_service"}, "zz: no recorded remediation state"),
    ({"max_attempts": "many"}, "max_attempts must be an integer"),
    ({"max_unavailable": "0"}, "max_unavailable: '0' must be at least 1"),
    ({"max_unavailable": "150%"}, r"max_unavailable: '150%' is not a percentage in \(0, 100\]"),
    ({"max_unavailable": "two"}, "max_unavailable: 'two' is not a count or a percentage"),
    ({"max_unavailable": 1.5}, "max_unavailable: 1.5 is not a whole number of hosts"),
    ({"max_unavailable": True}, "max_unavailable: True is not a count or a percentage"),
    ({"max_unavailable": "-1"}, "max_unavailable: '-1' is not a count or a percentage"),
    ({"max_unavailable": "nan%"}, r"max_unavailable: 'nan%' is not a percentage in \(0, 100\]"),
    ({"nodes": "all"}, "nodes must be a list of Node objects or a mapping"),
    ({"nodes": [{"spec": {}}]}, r"nodes\[0\] is not a Node object with metadata.name"),
    ({"nodes": {"a": {"unschedulable": "maybe"}}}, "nodes: a: expected {unschedulable: true|false}"),
    ({"finding_var": ["x"]}, "finding_var must be a non-empty string"),
])
def test_bad_action_input_is_refused_naming_the_option(tmp_path, args, message):
    with pytest.raises(AnsibleActionFail, match=message):
        _plan(tmp_path, {"a": healthy()}, **args)


def test_a_host_without_a_finding_is_named(tmp_path):
    plugin = action_plugin(action, {"db": str(tmp_path / "h.sqlite"), "nodes": []})
    with pytest.raises(AnsibleActionFail, match="no revalidate_finding for host\\(s\\) b"):
        plugin.run(task_vars={"hostvars": PublishedHostVars({"a": {"revalidate_finding": healthy()}, "b": {}}),
                              "ansible_play_hosts": ["a", "b"]})


@pytest.fixture
def kapi(tmp_path):
    with RunningServer(tmp_path / "kapi", free_port(16530, 16540)) as srv:
        core = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(srv.kubeconfig))
        core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "hgx1"}})
        core.patch_node_status("hgx1", {"status": {"conditions": [{"type": "Ready", "status": "True",
                                                                   "reason": "KubeletReady", "message": "ok"}]}})
        yield srv, core


def _conditions(kapi_server, nodes, check_mode=False):
    plugin = action_plugin(nc_action, {"kubeconfig": kapi_server.kubeconfig, "nodes": nodes})
    plugin._task.check_mode = check_mode
    return plugin.run(task_vars={})


def test_node_conditions_merge_by_type_through_the_status_subresource(kapi):
    srv, core = kapi
    bad = [{"type": "RailBandwidthRegression", "status": "True", "reason": "BelowBaseline", "message": "rail 3: 192"}]
    assert _conditions(srv, {"hgx1": bad}, check_mode=True)["changed"]
    assert {c.type for c in core.read_node_status("hgx1").status.conditions} == {"Ready"}
    out = _conditions(srv, {"hgx1": bad})
    assert out["changed"] and out["nodes"]["hgx1"]["conditions"][0]["reason"] == "BelowBaseline"
    conds = {c.type: c for c in core.read_node_status("hgx1").status.conditions}
    assert conds["Ready"].status == "True"  # the kubelet's condition is left as it was
    regression = conds["RailBandwidthRegression"]
    assert regression.status == "True" and regression.message == "rail 3: 192"
    first = regression.last_transition_time
    assert _conditions(srv, {"hgx1": bad})["changed"] is False  # idempotent: no patch
    good = [{"type": "RailBandwidthRegression", "status": "False", "reason": "AtBaseline", "message": "ok"}]
    assert _conditions(srv, {"hgx1": good})["changed"]
    after = {c.type: c for c in core.read_node_status("hgx1").status.conditions}["RailBandwidthRegression"]
    assert after.status == "False" and after.last_transition_time >= first


@pytest.mark.parametrize(("nodes", "message"), [
    ({"nope": []}, "no Node named nope"),
    ({"hgx1": [{"type": "lower", "status": "True", "reason": "R"}]}, "hgx1: conditions\\[0\\].type 'lower'"),
    ({"hgx1": [{"type": "X", "status": "yes", "reason": "R"}]}, "hgx1: conditions\\[0\\] \\(X\\).status 'yes'"),
    ({"hgx1": [{"type": "X", "status": "True", "reason": "has space"}]}, "reason 'has space' is not"),
    ({"hgx1": [{"type": "X", "status": "True", "reason": "R"}, {"type": "X", "status": "True", "reason": "R"}]},
     "type X is given twice"),
])
def test_node_conditions_refuse_bad_input_naming_the_node(kapi, nodes, message):
    srv, core = kapi
    with pytest.raises(AnsibleActionFail, match=message):
        _conditions(srv, nodes)
    assert {c.type for c in core.read_node_status("hgx1").status.conditions} == {"Ready"}


def _bw(tmp_path, run, gbps):
    pair = {"rail": 3, "peer": "dgx1", "peer_rail": 3, "side": "client", "gbps": gbps, "line_rate_gbps": 400}
    hostvars = PublishedHostVars({"hgx1": {"validation_result": {"pairs": [pair]}}})
    plugin = action_plugin(bw_action, {"db": str(tmp_path / "d2" / "history.sqlite"), "run": run, "version": "0.3.0"})
    plugin.run(task_vars={"hostvars": hostvars, "ansible_play_hosts": ["hgx1"]})


def test_the_report_shows_the_regressed_rail_with_its_trend_and_the_events(tmp_path):
    for n, gbps in enumerate([384.0, 386.0, 383.0, 300.0]):
        _bw(tmp_path, f"run-{n}", gbps)
    _plan(tmp_path, {"hgx1": sick(AR, regressions=["hgx1 rail 3: 300 Gb/s is 22% below its own baseline"])})
    _record(tmp_path, ["hgx1"], event="drained", details="1 Pod(s) deleted from node.")
    day_two = day_two_report.load(tmp_path / "d2" / "history.sqlite")
    (rail,) = day_two["rails"]
    assert (rail["host"], rail["rail"], rail["gbps"], rail["baseline_gbps"]) == ("hgx1", 3, 300.0, 384.0)
    assert [p["gbps"] for p in rail["trend"]] == [384.0, 386.0, 383.0, 300.0]
    assert [s["state"] for s in day_two["states"]] == ["remediating"]
    assert [e["step"] for e in day_two["events"]] == ["drained", "remediate"]
    svg = ET.fromstring(day_two_report.trend_svg(rail))  # noqa: S314 - the SVG this test just rendered
    ns = "{http://www.w3.org/2000/svg}"
    circles = svg.findall(f"{ns}circle")
    assert len(circles) == 4 and circles[-1].get("fill") == "#c62828"
    assert svg.find(f"{ns}line").get("class") == "baseline"
    assert [c.find(f"{ns}title").text for c in circles][-1] == "run-3: 300 Gb/s"
    # In the fleet report: the section, the plot, the host out of service and the events.
    written = write_report(tmp_path / "empty", tmp_path / "out", {"hosts": {}, "kueue": [], "run": {}},
                           history=tmp_path / "d2" / "history.sqlite")
    page = written["report.html"][0].read_text()
    assert '<h2 id="day-two">' in page and 'class="trend"' in page and 'data-step="drained"' in page
    assert 'data-state="remediating"' in page
    md = written["report.md"][0].read_text()
    assert "| hgx1 | 3 | 384 386 383 300 |" in md and "| remediating |" in md
    # A report without a day-two database has no such section.
    plain = write_report(tmp_path / "empty", tmp_path / "plain", {"hosts": {}, "kueue": [], "run": {}})
    assert "day-two" not in plain["report.html"][0].read_text()


def test_busy_nodes_are_those_with_gpu_pods_running_or_the_annotation():
    def pod(name, node, gpus=None, phase="Running", mig=False):
        resources = {"limits": {("nvidia.com/mig-1g.10gb" if mig else "nvidia.com/gpu"): gpus}} if gpus else {}
        return {"metadata": {"name": name, "namespace": "team-a"}, "status": {"phase": phase},
                "spec": {"nodeName": node, "containers": [{"name": "c", "resources": resources}]}}

    pods = [pod("train-0", "a", 8), pod("cpu-job", "b"), pod("done", "c", 8, phase="Succeeded"),
            pod("mig", "d", "1", mig=True), pod("pending", None, 8, phase="Pending")]
    nodes = [{"metadata": {"name": n}} for n in "abcd"] + [
        {"metadata": {"name": "e", "annotations": {"gpunode.mlplatform.io/revalidate": "false"}}}]
    assert rm.busy_nodes(pods, nodes, "gpunode.mlplatform.io/revalidate") == {
        "a": "GPU pods team-a/train-0", "d": "GPU pods team-a/mig",
        "e": "annotation gpunode.mlplatform.io/revalidate=false"}
