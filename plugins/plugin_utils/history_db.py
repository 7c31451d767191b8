# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The day-two history database on the controller (SQLite): bandwidth results, remediation states and events,
and the history queries the bandwidth_history action and the report share.

One file for the bandwidth_history and remediation actions (and the post-provision hook's schedule, which points
both at its state directory), created 0600 in a 0700 directory: it names hosts and their faults.
"""

from __future__ import annotations

import os
import sqlite3


def open_db(path, schema):
    """The database at ``path``, created 0600 (and its directory 0700) when missing, with ``schema`` applied."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o700, exist_ok=True)
    if not os.path.exists(path):
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    os.chmod(path, 0o600)
    conn = sqlite3.connect(path, timeout=30)
    conn.executescript(schema)
    return conn


def earlier_results(conn, keys, window, before_run):
    """``{(host, rail): [gbps, ...]}``: each rail's last ``window`` measured results of runs other than
    ``before_run``, oldest first."""
    out = {}
    for host, rail in keys:
        cur = conn.execute("SELECT gbps FROM bandwidth WHERE host = ? AND rail = ? AND run != ? AND gbps IS NOT NULL "
                           "ORDER BY time DESC, id DESC LIMIT ?", (host, rail, before_run, window))
        out[(host, rail)] = [row[0] for row in cur.fetchall()][::-1]
    return out


def trend(conn, keys, points):
    """``{"host/rail": [{time, gbps, run}, ...]}``: each rail's last ``points`` runs (its lowest result in each),
    oldest first, for the report's trend plot."""
    out = {}
    for host, rail in keys:
        cur = conn.execute("SELECT run, MIN(time), MIN(gbps) FROM bandwidth WHERE host = ? AND rail = ? GROUP BY run "
                           "ORDER BY MIN(time) DESC LIMIT ?", (host, rail, points))
        out[f"{host}/{rail}"] = [{"run": r, "time": t, "gbps": g} for r, t, g in cur.fetchall()][::-1]
    return out
