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

SCHEMA = """
CREATE TABLE IF NOT EXISTS remediation (
    host TEXT PRIMARY KEY, fabric TEXT NOT NULL, state TEXT NOT NULL, attempts INTEGER NOT NULL,
    reason TEXT NOT NULL, updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY, time REAL NOT NULL, run TEXT NOT NULL, host TEXT NOT NULL, step TEXT NOT NULL,
    detail TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_host ON events (host, time);
"""
STEPS = ("plan", "record")
RECORD_STATES = ("in_service", *rm.OUT_STATES)
NUMBERS = {"max_attempts": (check_type_int, 3, 1, 100)}


def open_db(path, check_mode=False):
    """The day-two database at ``path`` (0600, its directory 0700) with the remediation tables; in check mode a
    missing database is not created (an empty one in memory stands in)."""
    if check_mode and not os.path.exists(path):
        conn = sqlite3.connect(":memory:")
        conn.executescript(SCHEMA)
        return conn
    return history_db.open_db(path, SCHEMA)


def read_records(conn):
    """host -> ``{state, attempts, fabric, reason}`` of every host recorded."""
    return {h: {"fabric": f, "state": s, "attempts": a, "reason": r}
            for h, f, s, a, r in conn.execute("SELECT host, fabric, state, attempts, reason FROM remediation")}


def write_plan(conn, planned, run, now):
    """Record each host's new state and an event for each action other than ``none``; -> the events."""
    events = []
    for host, entry in sorted(planned.items()):
        if entry["action"] == "none":
            continue
        reason = entry["message"] + (": " + "; ".join(entry["reasons"]) if entry["reasons"] else "")
        conn.execute("INSERT INTO remediation (host, fabric, state, attempts, reason, updated)"
                     " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(host) DO UPDATE SET fabric = excluded.fabric,"
                     " state = excluded.state,"
                     " attempts = excluded.attempts, reason = excluded.reason, updated = excluded.updated",
                     (host, entry["fabric"], entry["state"], entry["attempts"] if entry["state"] != "in_service" else 0,
                      reason, now))
        events.append({"time": now, "run": run, "host": host, "step": entry["action"], "detail": reason})
    conn.executemany("INSERT INTO events (time, run, host, step, detail) VALUES (:time, :run, :host, :step, :detail)",
                     events)
    return events


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
                             "state", "details", *NUMBERS))

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
        hosts = action_args.play_hosts("remediation", args, task_vars)
        now = time.time()
        run = str(args.get("run") or os.environ.get("GPUNODE_RUN_ID")
                  or "run-" + time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now)))
        try:
            with closing(open_db(db, self._task.check_mode)) as conn:
                result.update(self._in_transaction(conn, step, args, task_vars, hosts, run, now))
        except (OSError, sqlite3.Error) as exc:
            raise AnsibleActionFail(f"remediation: the day-two database {db} cannot be used: {exc}") from None
        result["changed"] = bool(result["events"])
        return result

    def _in_transaction(self, conn, step, args, task_vars, hosts, run, now):
        """The step, in one transaction: all of it is written, or nothing."""
        with conn:
            if step == "plan":
                return self._plan(conn, args, task_vars, hosts, run, now)
            return self._record(conn, args, hosts, run, now)

    def _plan(self, conn, args, task_vars, hosts, run, now):
        numbers = action_args.numbers("remediation", args, NUMBERS)
        finding_var = str(args.get("finding_var") or "revalidate_finding")
        fabric_var = str(args.get("fabric_var") or "gpunode_fabric")
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
        records = read_records(conn)
        try:
            planned = rm.plan(findings, fabrics, records, max_unavailable=args.get("max_unavailable", 1),
                              max_attempts=numbers["max_attempts"])
        except rm.RemediationError as exc:
            raise AnsibleActionFail(f"remediation: {exc}") from None
        events = [] if self._task.check_mode else write_plan(conn, planned, run, now)
        by_action = {a: sorted(h for h, e in planned.items() if e["action"] == a) for a in rm.ACTIONS}
        return {"plan": planned, "by_action": by_action, "events": events, "run": run,
                "msg": ", ".join(f"{a}: {len(h)}" for a, h in by_action.items() if h)}

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
