"""The hook's durable state: every request, the per-host queue and every run, in one SQLite file.

A request is committed (WAL, ``synchronous=FULL``) before the service answers 2xx, so a request the
client saw accepted survives a crash or restart. Hosts move ``queued`` → ``running`` → ``ok`` |
``failed`` (or back to ``queued`` for a bounded retry); a host is in at most one run at a time
because the claim that moves it to ``running`` is one ``BEGIN IMMEDIATE`` transaction.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS requests (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    received_at REAL NOT NULL,
    source TEXT NOT NULL,
    host TEXT NOT NULL,
    instance_id TEXT,
    fqdn TEXT,
    host_keys TEXT NOT NULL,
    peer TEXT,
    outcome TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS hosts (
    name TEXT PRIMARY KEY,
    instance_id TEXT,
    fqdn TEXT,
    state TEXT NOT NULL,
    queued_at REAL,
    not_before REAL,
    attempts INTEGER NOT NULL DEFAULT 0,
    rerun INTEGER NOT NULL DEFAULT 0,
    last_run_id INTEGER,
    last_request_id INTEGER,
    updated_at REAL NOT NULL,
    outcome TEXT
);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created_at REAL NOT NULL,
    finished_at REAL,
    hosts TEXT NOT NULL,
    state TEXT NOT NULL,
    result TEXT,
    result_path TEXT
);
"""

#: Host states a new request for the same deployment does not queue again.
_COALESCED = ("queued", "running")


class Store:
    """Thread-safe access to the hook database (one connection, one lock)."""

    def __init__(self, path: Path):
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(SCHEMA)
        path.chmod(0o600)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- requests -------------------------------------------------------------------------

    def record_request(self, *, source: str, host: str, instance_id: str | None, fqdn: str | None,
                       host_keys: dict[str, str], peer: str | None, force: bool = False,
                       now: float | None = None) -> dict:
        """Record a request durably and queue its host unless a run for it is queued, running or done.

        A host already ``queued`` or ``running`` is not queued twice (duplicate posts → one run);
        a host that finished for the same ``instance_id`` is not run again unless ``force``; a new
        ``instance_id`` (a redeployment) always queues. Returns ``{request_id, outcome, host}``.
        """
        now = time.time() if now is None else now
        with self._lock:
            cur = self._db.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                row = cur.execute("SELECT * FROM hosts WHERE name = ?", (host,)).fetchone()
                if row is None:
                    outcome = "queued"
                elif row["state"] in _COALESCED:
                    outcome = "duplicate"
                    redeployed = bool(instance_id) and instance_id != row["instance_id"]
                    if row["state"] == "running" and (force or redeployed):
                        outcome = "rerun"
                elif force or (instance_id and instance_id != row["instance_id"]):
                    outcome = "queued"
                else:
                    outcome = "duplicate"
                cur.execute(
                    "INSERT INTO requests (received_at, source, host, instance_id, fqdn, host_keys, peer, outcome)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (now, source, host, instance_id, fqdn, json.dumps(host_keys, sort_keys=True), peer, outcome),
                )
                request_id = cur.lastrowid
                if row is None:
                    cur.execute(
                        "INSERT INTO hosts (name, instance_id, fqdn, state, queued_at, not_before, attempts,"
                        " last_request_id, updated_at) VALUES (?, ?, ?, 'queued', ?, ?, 0, ?, ?)",
                        (host, instance_id, fqdn, now, now, request_id, now),
                    )
                elif outcome == "queued":
                    cur.execute(
                        "UPDATE hosts SET instance_id = COALESCE(?, instance_id), fqdn = COALESCE(?, fqdn),"
                        " state = 'queued', queued_at = ?, not_before = ?, attempts = 0, rerun = 0,"
                        " last_request_id = ?, updated_at = ? WHERE name = ?",
                        (instance_id, fqdn, now, now, request_id, now, host),
                    )
                else:
                    cur.execute(
                        "UPDATE hosts SET instance_id = COALESCE(?, instance_id), fqdn = COALESCE(?, fqdn),"
                        " last_request_id = ?, rerun = rerun OR ?, updated_at = ? WHERE name = ?",
                        (instance_id, fqdn, request_id, outcome == "rerun", now, host),
                    )
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise
        return {"request_id": request_id, "outcome": outcome, "host": host}

    def requests(self, host: str | None = None) -> list[dict]:
        with self._lock:
            if host is None:
                rows = self._db.execute("SELECT * FROM requests ORDER BY id").fetchall()
            else:
                rows = self._db.execute("SELECT * FROM requests WHERE host = ? ORDER BY id", (host,)).fetchall()
        return [_request(r) for r in rows]

    # -- the queue ------------------------------------------------------------------------

    def recover(self, now: float | None = None) -> list[str]:
        """After a restart: runs left ``running`` are ``interrupted`` and their hosts queued again.

        The interrupted attempt is not counted against the host (the service stopped, not the
        host). Returns the hosts queued again.
        """
        now = time.time() if now is None else now
        with self._lock:
            cur = self._db.cursor()
            cur.execute("BEGIN IMMEDIATE")
            hosts = [r["name"] for r in cur.execute("SELECT name FROM hosts WHERE state = 'running'")]
            cur.execute("UPDATE runs SET state = 'interrupted', finished_at = ? WHERE state = 'running'", (now,))
            cur.execute(
                "UPDATE hosts SET state = 'queued', not_before = ?, attempts = MAX(attempts - 1, 0), updated_at = ?"
                " WHERE state = 'running'",
                (now, now),
            )
            cur.execute("COMMIT")
        return hosts

    def next_due(self, now: float, batch_window: float) -> float | None:
        """Seconds until a batch can be claimed (0 = now), or None when nothing is queued."""
        with self._lock:
            row = self._db.execute(
                "SELECT MIN(MAX(not_before, queued_at + ?)) AS due FROM hosts WHERE state = 'queued'",
                (batch_window,),
            ).fetchone()
        if row["due"] is None:
            return None
        return max(0.0, row["due"] - now)

    def claim_batch(self, *, now: float, batch_window: float, max_batch: int,
                    only: list[str] | None = None) -> dict | None:
        """Move up to ``max_batch`` due hosts to ``running`` in a new run; return the run or None.

        A host is due once its retry delay has passed and ``batch_window`` seconds have passed
        since it was queued, so hosts that arrive together (a rack deployed at once) share a run.
        ``only`` restricts the claim to these hosts (``gpunode hook run --host``).
        """
        only_json = json.dumps(list(only)) if only else None
        with self._lock:
            cur = self._db.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                rows = cur.execute(
                    "SELECT name FROM hosts WHERE state = 'queued' AND not_before <= ? AND queued_at <= ?"
                    " AND (? IS NULL OR name IN (SELECT value FROM json_each(?)))"
                    " ORDER BY queued_at, name LIMIT ?",
                    (now, now - batch_window, only_json, only_json, max_batch),
                ).fetchall()
                if not rows:
                    cur.execute("COMMIT")
                    return None
                hosts = [r["name"] for r in rows]
                cur.execute("INSERT INTO runs (created_at, hosts, state) VALUES (?, ?, 'running')",
                            (now, json.dumps(hosts)))
                run_id = cur.lastrowid
                cur.executemany(
                    "UPDATE hosts SET state = 'running', last_run_id = ?, attempts = attempts + 1, rerun = 0,"
                    " updated_at = ? WHERE name = ?",
                    [(run_id, now, h) for h in hosts],
                )
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise
        return {"id": run_id, "hosts": hosts}

    def finish_run(self, run_id: int, *, state: str, result: dict, result_path: str | None,
                   host_ok: dict[str, bool], max_attempts: int, retry_delay: float,
                   now: float | None = None) -> dict[str, str]:
        """Store a run's result and move each host on; returns each host's new state.

        A host that failed is queued again after ``retry_delay`` while it has attempts left, then
        stays ``failed`` (bounded retries, never a loop). A host asked to run again while it was
        running (``force``) is queued again. A ``cancelled`` run (service shutdown) requeues its
        hosts without counting the attempt.
        """
        now = time.time() if now is None else now
        states: dict[str, str] = {}
        with self._lock:
            cur = self._db.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                cur.execute(
                    "UPDATE runs SET state = ?, finished_at = ?, result = ?, result_path = ? WHERE id = ?",
                    (state, now, json.dumps(result, sort_keys=True), result_path, run_id),
                )
                for host, ok in host_ok.items():
                    row = cur.execute("SELECT attempts, rerun FROM hosts WHERE name = ?", (host,)).fetchone()
                    summary = json.dumps((result.get("hosts") or {}).get(host, {}), sort_keys=True)
                    if state == "cancelled":
                        new, not_before, attempts = "queued", now, max(row["attempts"] - 1, 0)
                    elif row["rerun"]:
                        new, not_before, attempts = "queued", now, 0
                    elif ok:
                        new, not_before, attempts = "ok", None, row["attempts"]
                    elif row["attempts"] < max_attempts:
                        new, not_before, attempts = "queued", now + retry_delay, row["attempts"]
                    else:
                        new, not_before, attempts = "failed", None, row["attempts"]
                    cur.execute(
                        "UPDATE hosts SET state = ?, not_before = ?, attempts = ?, rerun = 0, outcome = ?,"
                        " updated_at = ? WHERE name = ?",
                        (new, not_before, attempts, summary, now, host),
                    )
                    states[host] = new
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise
        return states

    # -- reads ----------------------------------------------------------------------------

    def host(self, name: str) -> dict | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM hosts WHERE name = ?", (name,)).fetchone()
            count = self._db.execute("SELECT COUNT(*) FROM requests WHERE host = ?", (name,)).fetchone()[0]
        if row is None:
            return None
        out = dict(row)
        out["outcome"] = json.loads(out["outcome"]) if out["outcome"] else None
        out["rerun"] = bool(out["rerun"])
        out["requests"] = count
        return out

    def hosts(self) -> list[dict]:
        with self._lock:
            names = [r["name"] for r in self._db.execute("SELECT name FROM hosts ORDER BY name")]
        return [h for h in (self.host(n) for n in names) if h is not None]

    def run(self, run_id: int) -> dict | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        return _run(row) if row is not None else None

    def runs(self) -> list[dict]:
        with self._lock:
            rows = self._db.execute("SELECT * FROM runs ORDER BY id").fetchall()
        return [_run(r) for r in rows]

    def counts(self) -> dict[str, int]:
        with self._lock:
            rows = self._db.execute("SELECT state, COUNT(*) AS n FROM hosts GROUP BY state").fetchall()
        return {r["state"]: r["n"] for r in rows}


def _request(row: sqlite3.Row) -> dict:
    out = dict(row)
    out["host_keys"] = json.loads(out["host_keys"])
    return out


def _run(row: sqlite3.Row) -> dict:
    out = dict(row)
    out["hosts"] = json.loads(out["hosts"])
    out["result"] = json.loads(out["result"]) if out["result"] else None
    return out
