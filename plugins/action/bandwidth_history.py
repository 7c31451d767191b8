# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller side of ``mlplatform.gpunode.bandwidth_history`` (documentation:
plugins/modules/bandwidth_history.py)."""

from __future__ import annotations

import os
import sqlite3
import time
from contextlib import closing

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.validation import check_type_float, check_type_int
from ansible.plugins.action import ActionBase
from ansible_collections.mlplatform.gpunode.plugins.module_utils import bandwidth_history as bh
from ansible_collections.mlplatform.gpunode.plugins.plugin_utils import action_args, history_db
from ansible_collections.mlplatform.gpunode.plugins.plugin_utils.fleet_report import collection_info
from ansible_collections.mlplatform.gpunode.plugins.plugin_utils.fleet_vars import FleetVars

NUMBERS = {"window": (check_type_int, 10, 1, 1000), "min_points": (check_type_int, 3, 1, 1000),
           "drop_pct": (check_type_float, 10.0, 0.0, 100.0), "threshold_pct": (check_type_float, 90.0, 0.0, 100.0),
           "trend_points": (check_type_int, 20, 1, 1000)}

INSERT = ("INSERT INTO bandwidth (host, rail, peer, peer_rail, side, gbps, line_rate_gbps, time, run, version, seq) "
          "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")


def open_db(path, check_mode=False):
    """The day-two database at ``path`` (0600, its directory 0700) at the current schema version (in check mode
    opened read-only, see history_db.open_db)."""
    return history_db.open_db(path, check_mode)


def record(conn, rows, keys, run, window, points, write, now=None):
    """In one transaction (this run's rows are all written, or none): read each rail's earlier results, write
    ``rows`` when ``write`` (under the run's sequence number), read the trends -> ``(earlier, trends)``."""
    with conn:
        earlier = history_db.earlier_results(conn, keys, window, run)
        if write:
            seq = history_db.run_seq(conn, run, rows[0]["time"] if rows else (now or 0.0))
            conn.executemany(INSERT, [(*(r[c] for c in bh.COLUMNS), seq) for r in rows])
        return earlier, history_db.trend(conn, keys, points)


class ActionModule(ActionBase):
    """Record every host's bandwidth results in the SQLite history on the controller and judge each rail against
    its own baseline."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("db", "hosts", "result_var", "run", "version", *NUMBERS))

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)  # refuses an option outside _VALID_ARGS, naming it
        args = self._task.args
        numbers = action_args.numbers("bandwidth_history", args, NUMBERS, must_be="a number")
        db = args.get("db")
        if not isinstance(db, str) or not db:
            raise AnsibleActionFail("bandwidth_history: db must be the path of the history database on the controller")
        hosts = action_args.play_hosts("bandwidth_history", args, task_vars)
        result_var = str(args.get("result_var") or "validation_result")
        now = time.time()
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
        run = str(args.get("run") or os.environ.get("GPUNODE_RUN_ID") or f"run-{stamp}")
        version = str(args.get("version") or collection_info()["version"] or "unknown")

        fleet = FleetVars(task_vars["hostvars"])
        rows, missing, harness = [], [], {}
        for host in hosts:
            value = fleet.get(host, result_var)
            if value is None:
                missing.append(host)
                continue
            if bh.harness_errors(host, value):
                harness[host] = bh.harness_errors(host, value)
            try:
                rows.extend(bh.rows_from_validation(host, value, time=now, run=run, version=version))
            except bh.HistoryError as exc:
                raise AnsibleActionFail(f"bandwidth_history: {exc}") from None
        if missing:
            raise AnsibleActionFail(f"bandwidth_history: no {result_var} for host(s) {', '.join(missing)} "
                                    "(run the validation role on them first)")
        keys = sorted({(r["host"], r["rail"]) for r in rows})
        try:
            with closing(open_db(db, self._task.check_mode)) as conn:
                earlier, trends = record(conn, rows, keys, run, numbers["window"], numbers["trend_points"],
                                         write=not self._task.check_mode)
        except (OSError, sqlite3.Error) as exc:
            raise AnsibleActionFail(f"bandwidth_history: the history database {db} cannot be used: {exc}") from None
        findings = bh.judge(rows, earlier, window=numbers["window"], min_points=numbers["min_points"],
                            drop_pct=numbers["drop_pct"], threshold_pct=numbers["threshold_pct"])
        flagged = [f for f in findings if f["reasons"]]
        by_host = {}
        for finding in flagged:
            by_host.setdefault(finding["host"], []).append(bh.describe(finding))
        recorded = 0 if self._task.check_mode else len(rows)
        result.update(changed=recorded > 0, recorded=recorded, run=run, version=version, rails=findings,
                      regressions=flagged, by_host=by_host, trend=trends, harness_errors=harness,
                      msg=f"{len(rows)} result(s) of {len(keys)} rail(s) recorded in {db}; "
                          f"{len(flagged)} rail(s) regressed, below line rate or failed"
                          + (f"; harness errors (not the hosts'): {sum(map(len, harness.values()))} test(s) on "
                             f"{', '.join(sorted(harness))}" if harness else ""))
        return result
