# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller side of ``mlplatform.gpunode.remediation`` (documentation: plugins/modules/remediation.py)."""

from __future__ import annotations

import os
import sqlite3
import time
from contextlib import closing

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.validation import check_type_int
from ansible.plugins.action import ActionBase
from ansible_collections.mlplatform.gpunode.plugins.module_utils import remediation as rm
from ansible_collections.mlplatform.gpunode.plugins.plugin_utils import action_args, history_db
from ansible_collections.mlplatform.gpunode.plugins.plugin_utils.fleet_vars import FleetVars

STEPS = ("plan", "record", "check")
RECORD_STATES = ("in_service", *rm.OUT_STATES)
NUMBERS = {"max_attempts": (check_type_int, 3, 1, 100)}


def open_db(path, check_mode=False):
    """The day-two database at ``path`` (0600, its directory 0700) at the current schema version; in check mode
    nothing is created or written (see history_db.open_db)."""
    return history_db.open_db(path, check_mode)


def read_records(conn):
    """host -> ``{state, attempts, fabric, reason, cordoned_before, handled_at}`` of every host recorded;
    ``handled_at`` is the time of its last ``returned`` event (its last return to service), or None."""
    return {h: {"fabric": f, "state": s, "attempts": a, "reason": r,
                "cordoned_before": None if c is None else bool(c), "handled_at": t}
            for h, f, s, a, r, c, t in conn.execute(
                "SELECT host, fabric, state, attempts, reason, cordoned_before, (SELECT MAX(time) FROM events "
                "WHERE events.host = remediation.host AND step = 'returned') FROM remediation")}


def release(conn, hosts, records, run, now):
    """Delete the records of ``hosts`` (hosts that no longer exist) with an event naming each -> the events."""
    events = []
    for host in hosts:
        record = records[host]
        conn.execute("DELETE FROM remediation WHERE host = ?", (host,))
        events.append({"time": now, "run": run, "host": host, "step": "released",
                       "detail": f"{host} is no longer in the inventory nor a Node of the cluster: its remediation "
                                 f"record (state {record['state']}, fabric {record['fabric']}) is released and holds "
                                 "no budget"})
    conn.executemany("INSERT INTO events (time, run, host, step, detail) VALUES (:time, :run, :host, :step, :detail)",
                     events)
    return events


def write_plan(conn, planned, run, now):
    """Record each host's new state and an event for each action other than ``none``; -> the events."""
    events = []
    for host, entry in sorted(planned.items()):
        if entry["action"] == "none":
            continue
        reason = entry["message"] + (": " + "; ".join(entry["reasons"]) if entry["reasons"] else "")
        before = entry.get("cordoned_before")
        conn.execute("INSERT INTO remediation (host, fabric, state, attempts, reason, updated, cordoned_before)"
                     " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(host) DO UPDATE SET fabric = excluded.fabric,"
                     " state = excluded.state, attempts = excluded.attempts, reason = excluded.reason,"
                     " updated = excluded.updated, cordoned_before = excluded.cordoned_before",
                     (host, entry["fabric"], entry["state"], entry["attempts"] if entry["state"] != "in_service" else 0,
                      reason, now, None if before is None else int(before)))
        events.append({"time": now, "run": run, "host": host, "step": entry["action"], "detail": reason})
    conn.executemany("INSERT INTO events (time, run, host, step, detail) VALUES (:time, :run, :host, :step, :detail)",
                     events)
    return events


def node_states(nodes):
    """Node name -> ``{unschedulable}`` from ``nodes``: Node objects (a list, as the API lists them) or a mapping of
    Node name to ``{unschedulable}``; AnsibleActionFail naming the entry otherwise."""
    out = {}
    if isinstance(nodes, dict):
        items = list(nodes.items())
    elif isinstance(nodes, list):
        items = []
        for index, node in enumerate(nodes):
            name = ((node or {}).get("metadata") or {}).get("name") if isinstance(node, dict) else None
            if not isinstance(name, str) or not name:
                raise AnsibleActionFail(f"remediation: nodes[{index}] is not a Node object with metadata.name")
            items.append((name, {"unschedulable": (node.get("spec") or {}).get("unschedulable", False)}))
    else:
        raise AnsibleActionFail("remediation: nodes must be a list of Node objects or a mapping of Node name to "
                                "{unschedulable}")
    for name, state in items:
        if not isinstance(state, dict) or not isinstance(state.get("unschedulable", False), (bool, type(None))):
            raise AnsibleActionFail(f"remediation: nodes: {name}: expected {{unschedulable: true|false}}")
        out[str(name)] = {"unschedulable": bool(state.get("unschedulable"))}
    return out


def read_nodes(kubeconfig, context):
    """Node name -> ``{unschedulable}`` of every Node, read from the API server (the kubernetes client
    kubernetes.core uses)."""
    try:
        import kubernetes.config  # noqa: PLC0415 - imported when a plan reads the Nodes (half a second)
        from kubernetes.dynamic import DynamicClient  # noqa: PLC0415 - imported with kubernetes.config above, when a plan reads the Nodes
    except ImportError:  # pragma: no cover - kubernetes.core needs the same library
        raise AnsibleActionFail("remediation: the kubernetes Python library is missing on the controller "
                                "(needed to read the Nodes' cordon state)") from None
    try:
        client = DynamicClient(kubernetes.config.new_client_from_config(config_file=kubeconfig or None,
                                                                        context=context or None))
        listed = client.resources.get(api_version="v1", kind="Node").get().to_dict()
    except Exception as exc:  # noqa: BLE001 - any client, kubeconfig or API error, reported with its text
        raise AnsibleActionFail(f"remediation: cannot read the Nodes' cordon state from the API server: {exc}") \
            from None
    return node_states(listed.get("items") or [])


def write_record(conn, hosts, step, state, details, run, now):
    """An event ``step`` for each host (its detail from ``details``) and, with ``state``, the host's new state."""
    events = [{"time": now, "run": run, "host": h, "step": step, "detail": str(details.get(h, ""))} for h in hosts]
    if state:
        for host in hosts:
            cur = conn.execute("UPDATE remediation SET state = ?, attempts = CASE WHEN ? = 'in_service' THEN 0 "
                               "ELSE attempts END, reason = ?, updated = ? WHERE host = ?",
                               (state, state, details.get(host) or step, now, host))
            if cur.rowcount == 0:
                raise AnsibleActionFail(f"remediation: {host}: no recorded remediation state to set to {state} "
                                        "(step=plan records the host first)")
    conn.executemany("INSERT INTO events (time, run, host, step, detail) VALUES (:time, :run, :host, :step, :detail)",
                     events)
    return events


class ActionModule(ActionBase):
    """Plan what to do with each revalidated host, or record a step, in the day-two database on the controller."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("step", "db", "hosts", "finding_var", "fabric_var", "max_unavailable", "run", "event",
                             "state", "details", "nodes", "kubeconfig", "context", "node_name_var", *NUMBERS))

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)  # refuses an option outside _VALID_ARGS, naming it
        args = self._task.args
        step = args.get("step", "plan")
        if step not in STEPS:
            raise AnsibleActionFail(f"remediation: step {step!r} is not one of {', '.join(STEPS)}")
        db = args.get("db")
        if not isinstance(db, str) or not db:
            raise AnsibleActionFail("remediation: db must be the path of the day-two database on the controller")
        options = self._options(args) if step in ("plan", "check") else {}
        if step == "check":
            try:
                history_db.verify(db)
            except (OSError, sqlite3.Error) as exc:
                raise AnsibleActionFail(f"remediation: the day-two database {db} cannot be used: {exc}") from None
            return {**result, "changed": False, "events": [], "options": options,
                    "msg": "remediation options are valid: " + ", ".join(f"{k}={v}" for k, v in options.items())}
        hosts = action_args.play_hosts("remediation", args, task_vars)
        now = time.time()
        run = str(args.get("run") or os.environ.get("GPUNODE_RUN_ID")
                  or "run-" + time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now)))
        try:
            with closing(open_db(db, self._task.check_mode)) as conn:
                result.update(self._in_transaction(conn, step, args, options, task_vars, hosts, run, now))
        except (OSError, sqlite3.Error) as exc:
            raise AnsibleActionFail(f"remediation: the day-two database {db} cannot be used: {exc}") from None
        result["changed"] = bool(result["events"])
        return result

    @staticmethod
    def _options(args):
        """Every plan option checked before any host or the database is read."""
        numbers = action_args.numbers("remediation", args, NUMBERS)
        try:
            max_unavailable = args.get("max_unavailable", 1)
            rm.parse_max_unavailable(max_unavailable)
        except rm.RemediationError as exc:
            raise AnsibleActionFail(f"remediation: {exc}") from None
        for name in ("finding_var", "fabric_var", "node_name_var", "kubeconfig", "context"):
            value = args.get(name)
            if value is not None and (not isinstance(value, str) or not value):
                raise AnsibleActionFail(f"remediation: {name} must be a non-empty string, got {value!r}")
        nodes = args.get("nodes")
        return {"max_unavailable": max_unavailable, "max_attempts": numbers["max_attempts"],
                "nodes": None if nodes is None else node_states(nodes)}

    def _in_transaction(self, conn, step, args, options, task_vars, hosts, run, now):
        """The step, in one transaction taken before the records are read (a write lock: two plans running at
        once are serialised, the second sees the first's records): all of it is written, or nothing."""
        with conn:
            if not self._task.check_mode:
                conn.execute("BEGIN IMMEDIATE")
            if step == "plan":
                return self._plan(conn, args, options, task_vars, hosts, run, now)
            return self._record(conn, args, hosts, run, now)

    def _plan(self, conn, args, options, task_vars, hosts, run, now):
        finding_var = str(args.get("finding_var") or "revalidate_finding")
        fabric_var = str(args.get("fabric_var") or "gpunode_fabric")
        node_name_var = str(args.get("node_name_var") or "validation_node_name")
        fleet = FleetVars(task_vars["hostvars"])
        findings, fabrics, missing = {}, {}, []
        for host in hosts:
            finding = fleet.get(host, finding_var)
            if finding is None:
                missing.append(host)
                continue
            findings[host] = finding
            fabrics[host] = str(fleet.get(host, fabric_var) or "default")
        if missing:
            raise AnsibleActionFail(f"remediation: no {finding_var} for host(s) {', '.join(missing)} "
                                    "(revalidate them first)")
        known = set(task_vars["hostvars"])
        for host in known - set(fabrics):
            fabric = fleet.get(host, fabric_var)
            if fabric is not None:
                fabrics[host] = str(fabric)
        by_node = options["nodes"]
        if by_node is None:
            by_node = read_nodes(args.get("kubeconfig"), args.get("context"))
        names = {host: str(fleet.get(host, node_name_var) or host) for host in known}
        records = read_records(conn)
        node_hosts = {h for h in known | set(records) if names.get(h, h) in by_node}
        nodes = {h: by_node[names.get(h, h)] for h in node_hosts}
        gone = rm.released(records, known, node_hosts)
        events = [] if self._task.check_mode else release(conn, gone, records, run, now)
        records = {h: r for h, r in records.items() if h not in gone}
        try:
            planned = rm.plan(findings, fabrics, records, max_unavailable=options["max_unavailable"],
                              max_attempts=options["max_attempts"], nodes=nodes)
        except rm.RemediationError as exc:
            raise AnsibleActionFail(f"remediation: {exc}") from None
        if not self._task.check_mode:
            events += write_plan(conn, planned, run, now)
        by_action = {a: sorted(h for h, e in planned.items() if e["action"] == a) for a in rm.ACTIONS}
        msg = ", ".join(f"{a}: {len(h)}" for a, h in by_action.items() if h)
        if gone:
            msg += "; released the records of hosts that no longer exist: " + ", ".join(gone)
        return {"plan": planned, "by_action": by_action, "events": events, "run": run, "released": gone,
                "msg": msg}

    def _record(self, conn, args, hosts, run, now):
        event = args.get("event")
        if not isinstance(event, str) or not event:
            raise AnsibleActionFail("remediation: step=record needs event, the step to record (e.g. drained)")
        state = args.get("state")
        if state is not None and state not in RECORD_STATES:
            raise AnsibleActionFail(f"remediation: state {state!r} is not one of {', '.join(RECORD_STATES)}")
        details = args.get("details") or {}
        if isinstance(details, str):
            details = dict.fromkeys(hosts, details)
        if not isinstance(details, dict):
            raise AnsibleActionFail("remediation: details must be a string or a mapping of host to string")
        events = [] if self._task.check_mode else write_record(conn, hosts, event, state, details, run, now)
        return {"events": events, "run": run, "msg": f"{event}: {', '.join(hosts)}"}
