"""Remediation owns only what it did: the cordon state it found, the budget of hosts not yet schedulable again,
the records of hosts that no longer exist, one write transaction per plan, and every option checked before any
host is read."""

from __future__ import annotations

import sqlite3
import threading
import time

import kubernetes
import pytest
from ansible.errors import AnsibleActionFail
from ansible_collections.mlplatform.gpunode.plugins.action import remediation as action
from ansible_collections.mlplatform.gpunode.plugins.module_utils import remediation as rm
from local_play import free_port
from module_harness import PublishedHostVars, action_plugin

from gpunode.kapi.server import RunningServer

AR = {"type": "RailRoceAcclDrift", "status": "True", "reason": "RoceAcclDrift", "device": "0000:3b:00.0",
      "message": "rail 2 NIC 0000:3b:00.0: adaptive_routing_forced_en 0, declared 1", "check": "roce_accl",
      "remedy": "reconfigure"}


def healthy():
    return {"conditions": [], "regressions": [], "failures": []}


def sick():
    return {"conditions": [AR], "regressions": [], "failures": []}


def _plan(db, findings, *, nodes, others=(), check_mode=False, **args):
    hostvars = PublishedHostVars({**{h: {"gpunode_fabric": "A"} for h in others},
                                  **{h: {"revalidate_finding": f, "gpunode_fabric": "A"} for h, f in findings.items()}})
    plugin = action_plugin(action, {"db": str(db), "run": "run-1", "nodes": nodes, **args})
    plugin._task.check_mode = check_mode
    return plugin.run(task_vars={"hostvars": hostvars, "ansible_play_hosts": sorted(findings)})


def _record(db, hosts, **args):
    plugin = action_plugin(action, {"db": str(db), "run": "run-1", "step": "record", "hosts": hosts, **args})
    return plugin.run(task_vars={"hostvars": PublishedHostVars({}), "ansible_play_hosts": hosts})


def _rows(db, sql):
    with sqlite3.connect(db) as conn:
        return conn.execute(sql).fetchall()


def test_an_administrators_cordon_survives_remediation_and_only_our_cordon_is_undone(tmp_path):
    db = tmp_path / "history.sqlite"
    # admin cordoned by hand before the run; ours was schedulable.
    first = _plan(db, {"admin": sick(), "ours": sick()}, max_unavailable=2,
                  nodes={"admin": {"unschedulable": True}, "ours": {"unschedulable": False}})
    assert first["plan"]["admin"]["action"] == first["plan"]["ours"]["action"] == "remediate"
    assert first["plan"]["admin"]["cordoned_before"] is True and first["plan"]["admin"]["uncordon"] is False
    assert first["plan"]["ours"]["cordoned_before"] is False and first["plan"]["ours"]["uncordon"] is True
    # What the returned event will say once each is back in service after this run's re-run.
    assert first["plan"]["admin"]["returned_detail"] == (
        "revalidated and back in service (untainted); its Node stays cordoned: it was cordoned before remediation "
        "took it out")
    assert first["plan"]["ours"]["returned_detail"] == "revalidated and back in service (uncordoned, untainted)"
    assert dict(_rows(db, "SELECT host, cordoned_before FROM remediation")) == {"admin": 1, "ours": 0}
    # Next run: both healthy, both Nodes cordoned now (we drained ours). What was found is what counts.
    back = _plan(db, {"admin": healthy(), "ours": healthy()}, max_unavailable=2,
                 nodes={"admin": {"unschedulable": True}, "ours": {"unschedulable": True}})
    assert back["plan"]["admin"]["action"] == back["plan"]["ours"]["action"] == "return"
    assert back["plan"]["admin"]["uncordon"] is False and back["plan"]["ours"]["uncordon"] is True
    assert back["plan"]["admin"]["message"].endswith(
        "its Node stays cordoned: it was cordoned before remediation took it out")


def test_a_record_without_the_cordon_state_is_never_uncordoned(tmp_path):
    """A record from before the cordon state was kept (or a Node not read) does not let remediation uncordon."""
    plan = rm.plan({"a": healthy()}, {"a": "A"}, {"a": {"state": "remediating", "attempts": 1, "fabric": "A"}},
                   nodes={"a": {"unschedulable": True}})
    assert plan["a"]["action"] == "return" and plan["a"]["uncordon"] is False
    assert "whether it was cordoned before remediation is not known" in plan["a"]["message"]
    assert plan["a"]["returned_detail"].endswith("whether it was cordoned before remediation is not known")


def test_a_host_counts_against_the_budget_until_it_is_schedulable_again():
    findings = {"a": healthy(), "b": sick()}
    fabrics = {"a": "A", "b": "A"}
    records = {"a": {"state": "remediating", "attempts": 1, "fabric": "A", "cordoned_before": False}}
    # a is healthy again, but its Node is still cordoned: b waits for it.
    plan = rm.plan(findings, fabrics, records, nodes={"a": {"unschedulable": True}, "b": {"unschedulable": False}})
    assert plan["a"]["action"] == "return" and plan["b"]["action"] == "deferred"
    assert plan["b"]["message"] == "waits: 1 host(s) of fabric A are out already (max_unavailable): a"
    # a returned but its uncordon failed: recorded in service, the Node still cordoned; it still counts.
    records["a"]["state"] = "in_service"
    plan = rm.plan(findings, fabrics, records, nodes={"a": {"unschedulable": True}, "b": {"unschedulable": False}})
    assert plan["b"]["action"] == "deferred"
    # A Node cordoned by anyone, of a host outside this run, counts too.
    plan = rm.plan({"b": sick()}, {"b": "A", "c": "A"}, {}, nodes={"c": {"unschedulable": True}})
    assert plan["b"]["action"] == "deferred" and plan["b"]["message"].endswith(": c")
    # Schedulable again: the slot is free.
    plan = rm.plan(findings, fabrics, records, nodes={"a": {"unschedulable": False}, "b": {"unschedulable": False}})
    assert plan["b"]["action"] == "remediate"


def test_a_removed_host_releases_its_slot_with_an_event_naming_it(tmp_path):
    db = tmp_path / "history.sqlite"
    _plan(db, {"gone": sick(), "b": healthy()}, nodes={"gone": {"unschedulable": False}, "b": {}})
    # gone left the inventory and the cluster: b, sick now, takes the slot and the record is released.
    out = _plan(db, {"b": sick()}, nodes={"b": {"unschedulable": False}})
    assert out["released"] == ["gone"] and out["plan"]["b"]["action"] == "remediate"
    released = [e for e in out["events"] if e["step"] == "released"]
    assert [e["host"] for e in released] == ["gone"] and released[0]["detail"].startswith(
        "gone is no longer in the inventory nor a Node of the cluster")
    assert _rows(db, "SELECT host FROM remediation ORDER BY host") == [("b",)]
    assert _rows(db, "SELECT host, step FROM events WHERE step = 'released'") == [("gone", "released")]


def test_a_host_out_of_the_inventory_whose_node_still_exists_keeps_its_record(tmp_path):
    db = tmp_path / "history.sqlite"
    _plan(db, {"x": sick(), "b": healthy()}, nodes={"x": {}, "b": {}})
    out = _plan(db, {"b": sick()}, nodes={"x": {"unschedulable": True}, "b": {}})
    assert out["released"] == [] and out["plan"]["b"]["action"] == "deferred"
    # In check mode the release is shown and nothing is written.
    dry = _plan(db, {"b": sick()}, nodes={"b": {}}, check_mode=True)
    assert dry["released"] == ["x"] and dry["events"] == []
    assert _rows(db, "SELECT host, state FROM remediation ORDER BY host") == [("b", "in_service"),
                                                                            ("x", "remediating")]


def test_two_plans_at_once_cannot_both_take_the_last_slot(tmp_path):
    db = tmp_path / "history.sqlite"
    _plan(db, {"a": healthy(), "b": healthy()}, nodes={"a": {}, "b": {}})
    # Another plan holds the write lock and is about to take the last slot for a.
    other = sqlite3.connect(db, timeout=30)
    other.execute("BEGIN IMMEDIATE")
    other.execute("INSERT INTO remediation (host, fabric, state, attempts, reason, updated, cordoned_before) "
                  "VALUES ('a', 'A', 'remediating', 1, 'x', 0, 0)")
    out = {}
    thread = threading.Thread(target=lambda: out.update(_plan(db, {"b": sick()}, nodes={"a": {}, "b": {}},
                                                              others=("a",))))
    thread.start()
    time.sleep(0.5)
    assert not out  # it waits for the lock instead of reading the records before a is recorded
    other.commit()
    other.close()
    thread.join(30)
    assert out["plan"]["b"]["action"] == "deferred"


class Untouchable(dict):
    """hostvars that fail the test when any host is read."""

    def __getitem__(self, key):
        raise AssertionError(f"host {key} was read before the options were checked")

    def __iter__(self):
        raise AssertionError("the hosts were listed before the options were checked")


@pytest.mark.parametrize("value", ["0", "150%", "two", 0, -2, "1.5", 2.5, "", None, [1], "0%", "inf%", "½"])
def test_every_option_is_checked_before_any_host_or_the_database_is_read(tmp_path, value):
    db = tmp_path / "not-yet" / "history.sqlite"
    plugin = action_plugin(action, {"db": str(db), "max_unavailable": value, "nodes": []})
    with pytest.raises(AnsibleActionFail, match=r"^remediation: max_unavailable: "):
        plugin.run(task_vars={"hostvars": Untouchable(), "ansible_play_hosts": ["a"]})
    assert not db.parent.exists()
    # step=check is the same checks alone (the playbook runs it before revalidating anything).
    check = action_plugin(action, {"db": str(db), "step": "check", "max_unavailable": value})
    with pytest.raises(AnsibleActionFail, match=r"^remediation: max_unavailable: "):
        check.run(task_vars={"hostvars": Untouchable()})
    good = action_plugin(action, {"db": str(db), "step": "check", "max_unavailable": "25%", "max_attempts": 2})
    assert good.run(task_vars={"hostvars": Untouchable()})["options"]["max_attempts"] == 2
    assert not db.parent.exists()


def test_the_plan_reads_the_cordon_state_from_the_api_server(tmp_path):
    with RunningServer(tmp_path / "kapi", free_port(16541, 16550)) as srv:
        core = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(srv.kubeconfig))
        for name, cordoned in (("n-admin", True), ("n-ours", False)):
            core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
                              "spec": {"unschedulable": cordoned}})
        hostvars = PublishedHostVars({
            h: {"revalidate_finding": sick(), "gpunode_fabric": "A", "validation_node_name": f"n-{h}"}
            for h in ("admin", "ours")})
        plugin = action_plugin(action, {"db": str(tmp_path / "h.sqlite"), "kubeconfig": srv.kubeconfig,
                                        "max_unavailable": 2})
        out = plugin.run(task_vars={"hostvars": hostvars, "ansible_play_hosts": ["admin", "ours"]})
        assert out["plan"]["admin"]["cordoned_before"] is True and out["plan"]["ours"]["cordoned_before"] is False
    # No API server and no nodes given: a clear error, nothing planned.
    plugin = action_plugin(action, {"db": str(tmp_path / "h2.sqlite"), "kubeconfig": str(tmp_path / "nope")})
    with pytest.raises(AnsibleActionFail, match="remediation: cannot read the Nodes' cordon state"):
        plugin.run(task_vars={"hostvars": hostvars, "ansible_play_hosts": ["admin"]})


def test_the_check_step_refuses_a_file_that_is_not_the_day_two_database_before_any_host_is_read(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    check = action_plugin(action, {"db": str(notes), "step": "check"})
    with pytest.raises(AnsibleActionFail, match="is not an SQLite database"):
        check.run(task_vars={"hostvars": Untouchable()})
    assert notes.read_text() == "my notes\n"
