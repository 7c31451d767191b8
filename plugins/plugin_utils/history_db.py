# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The day-two history database on the controller (SQLite): bandwidth results, remediation states and events.

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
