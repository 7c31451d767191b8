# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The day-two history database on the controller (SQLite): bandwidth results, remediation states and events,
and the history queries the bandwidth_history action and the report share.

One file for the bandwidth_history and remediation actions (and the post-provision hook's schedule, which points
both at its state directory), created 0600 in a 0700 directory: it names hosts and their faults.

The schema is versioned with ``PRAGMA user_version`` and moved forward one step at a time (``MIGRATIONS``), in
one transaction. A file is touched (opened for writing, chmod'ed, migrated) only once it is verified to be this
database: a regular file that is empty or starts with the SQLite header, whose tables are this schema's, at a
version this code knows. Anything else is refused with the reason and left as it is.
"""

from __future__ import annotations

import os
import sqlite3
import stat

SQLITE_HEADER = b"SQLite format 3\x00"
# The tables of the schema before it was versioned (user_version 0): a database that has only these is ours.
LEGACY_TABLES = {"bandwidth", "remediation", "events"}
MIGRATIONS = (
    # 1: the schema as it was before versioning (CREATE ... IF NOT EXISTS keeps what a legacy database has).
    """
    CREATE TABLE IF NOT EXISTS bandwidth (
        id INTEGER PRIMARY KEY,
        host TEXT NOT NULL, rail INTEGER NOT NULL, peer TEXT NOT NULL, peer_rail INTEGER NOT NULL,
        side TEXT NOT NULL, gbps REAL, line_rate_gbps REAL, time REAL NOT NULL, run TEXT NOT NULL,
        version TEXT NOT NULL
    );
    CREATE INDEX IF NOT EXISTS bandwidth_rail ON bandwidth (host, rail, time);
    CREATE TABLE IF NOT EXISTS remediation (
        host TEXT PRIMARY KEY, fabric TEXT NOT NULL, state TEXT NOT NULL, attempts INTEGER NOT NULL,
        reason TEXT NOT NULL, updated REAL NOT NULL
    );
    CREATE TABLE IF NOT EXISTS events (
        id INTEGER PRIMARY KEY, time REAL NOT NULL, run TEXT NOT NULL, host TEXT NOT NULL, step TEXT NOT NULL,
        detail TEXT NOT NULL
    );
    CREATE INDEX IF NOT EXISTS events_host ON events (host, time);
    """,
    # 2: runs in the order they were recorded (a clock set wrong once must not reorder the history), and the
    # cordon state remediation found on a Node before it took the host out of service (1, 0, or NULL: unknown).
    """
    CREATE TABLE runs (seq INTEGER PRIMARY KEY AUTOINCREMENT, run TEXT NOT NULL UNIQUE, first_time REAL NOT NULL);
    INSERT INTO runs (run, first_time)
        SELECT run, MIN(time) FROM bandwidth GROUP BY run ORDER BY MIN(id);
    ALTER TABLE bandwidth ADD COLUMN seq INTEGER;
    UPDATE bandwidth SET seq = (SELECT seq FROM runs WHERE runs.run = bandwidth.run);
    CREATE INDEX bandwidth_seq ON bandwidth (host, rail, seq);
    ALTER TABLE remediation ADD COLUMN cordoned_before INTEGER;
    """,
)
VERSION = len(MIGRATIONS)


class HistoryDbError(sqlite3.DatabaseError):
    """The file is not a day-two database this code may use; the message says why (the file is left as it is)."""


def _ro_uri(path):
    return "file:" + os.path.abspath(path).replace("?", "%3f").replace("#", "%23") + "?mode=ro"


def _inspect(path):
    """``(user_version, tables)`` of the existing file at ``path``, read-only; HistoryDbError when it is not a
    day-two database (nothing about the file is changed)."""
    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        raise HistoryDbError(f"{path} is not a regular file")
    if info.st_size == 0:
        return 0, set()
    with open(path, "rb") as handle:
        header = handle.read(len(SQLITE_HEADER))
    if header != SQLITE_HEADER:
        raise HistoryDbError(f"{path} is not an SQLite database (it does not start with the SQLite header); "
                             "it is left as it is")
    conn = sqlite3.connect(_ro_uri(path), uri=True, timeout=30)
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                             "AND name NOT LIKE 'sqlite_%'")}
    finally:
        conn.close()
    if version > VERSION:
        raise HistoryDbError(f"{path} has schema version {version}, newer than this collection's {VERSION} "
                             "(written by a newer mlplatform.gpunode); it is left as it is")
    if version == 0 and tables - LEGACY_TABLES:
        raise HistoryDbError(f"{path} is an SQLite database but not the day-two history (unknown tables "
                             f"{', '.join(sorted(tables - LEGACY_TABLES))}); it is left as it is")
    return version, tables


def verify(path):
    """Check, read-only, that an existing ``path`` is a day-two database this code can use (HistoryDbError, or
    OSError, naming why not); a missing path is fine (it would be created)."""
    if os.path.lexists(path):
        _inspect(path)


def migrate(conn):
    """Move the schema of ``conn`` forward to VERSION, one migration at a time, in one transaction."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > VERSION:
        raise HistoryDbError(f"schema version {version} is newer than this collection's {VERSION}")
    if version == VERSION:
        return
    conn.isolation_level = None
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Another writer may have migrated between the read above and the lock.
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        for number in range(version, VERSION):
            for statement in filter(str.strip, MIGRATIONS[number].split(";")):
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    finally:
        conn.isolation_level = ""


def open_db(path, check_mode=False):
    """The day-two database at ``path`` at the current schema version.

    A missing file is created 0600 (its directory 0700). An existing file is verified first (see the module's
    docstring); only then is it made 0600 and migrated. In check mode nothing is created or written: a missing
    database is an empty one in memory, an older one is migrated in a copy in memory, and the file is opened
    read-only (so check mode works on a read-only filesystem)."""
    exists = os.path.lexists(path)
    if exists:
        _inspect(path)
    if check_mode:
        mem = sqlite3.connect(":memory:")
        if exists:
            with sqlite3.connect(_ro_uri(path), uri=True, timeout=30) as src:
                src.backup(mem)
            src.close()
        migrate(mem)
        return mem
    if not exists:
        directory = os.path.dirname(path) or "."
        os.makedirs(directory, mode=0o700, exist_ok=True)
        # Without O_EXCL: another plan creating it at the same moment is no error (the file is then
        # verified as SQLite by the migration below, which fails on anything else).
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    elif stat.S_IMODE(os.stat(path).st_mode) & 0o077:
        os.chmod(path, 0o600)
    conn = sqlite3.connect(path, timeout=30)
    try:
        migrate(conn)
    except BaseException:
        conn.close()
        raise
    return conn


def run_seq(conn, run, now):
    """The sequence number of ``run`` (registered with its first time when new): the order runs were recorded in."""
    conn.execute("INSERT INTO runs (run, first_time) VALUES (?, ?) ON CONFLICT(run) DO NOTHING", (run, now))
    return conn.execute("SELECT seq FROM runs WHERE run = ?", (run,)).fetchone()[0]


def earlier_results(conn, keys, window, before_run):
    """``{(host, rail): [gbps, ...]}``: each rail's last ``window`` measured results of runs other than
    ``before_run``, oldest first, in the order the runs were recorded (not by their wall-clock time)."""
    out = {}
    for host, rail in keys:
        cur = conn.execute("SELECT gbps FROM bandwidth WHERE host = ? AND rail = ? AND run != ? AND gbps IS NOT NULL "
                           "ORDER BY seq DESC, id DESC LIMIT ?", (host, rail, before_run, window))
        out[(host, rail)] = [row[0] for row in cur.fetchall()][::-1]
    return out


def trend(conn, keys, points):
    """``{"host/rail": [{time, gbps, run}, ...]}``: each rail's last ``points`` runs (its lowest result in each),
    oldest first by run sequence, for the report's trend plot."""
    out = {}
    for host, rail in keys:
        cur = conn.execute("SELECT run, MIN(time), MIN(gbps) FROM bandwidth WHERE host = ? AND rail = ? GROUP BY run "
                           "ORDER BY MAX(seq) DESC LIMIT ?", (host, rail, points))
        out[f"{host}/{rail}"] = [{"run": r, "time": t, "gbps": g} for r, t, g in cur.fetchall()][::-1]
    return out
