"""The hook's durable state: every request, the per-host queue and every run, in one SQLite file.

A request is committed (WAL, ``synchronous=FULL``) before the service answers 2xx, so a request the
client saw accepted survives a crash or restart. A host's identity (instance id, SSH host keys) is
bound at first contact (``identities``): a later request that would change it without proving it
is refused and recorded as ``refused`` with the conflict named. Used request nonces are kept
(``nonces``) until their time window has passed. The database, its WAL and SHM files are 0600.

Hosts move ``queued`` → ``running`` → ``ok`` |
``failed`` (or back to ``queued`` for a bounded retry); a host is in at most one run at a time
because the claim that moves it to ``running`` is one ``BEGIN IMMEDIATE`` transaction.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
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
CREATE TABLE IF NOT EXISTS identities (
    name TEXT PRIMARY KEY,
    instance_id TEXT,
    host_keys TEXT NOT NULL DEFAULT '{}',
    deploy_time TEXT,
    bound_at REAL NOT NULL,
    bound_by TEXT NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS nonces (
    nonce TEXT PRIMARY KEY,
    expires_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS revalidations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    started_at REAL NOT NULL,
    finished_at REAL,
    playbook TEXT NOT NULL,
    hosts TEXT NOT NULL,
    state TEXT NOT NULL,
    result TEXT
);
"""

#: Columns added after the first release, created on an older database when it is opened.
_ADDED_COLUMNS = {"requests": {"detail": "TEXT"}, "hosts": {"interrupted_run": "INTEGER"}}

class StoreError(RuntimeError):
    """A store operation is not possible now; the message says why."""


class StoreUnavailable(StoreError):
    """The database cannot take new work (removed, replaced, unwritable, a full disk); the message says which."""


#: SQLite result codes (``sqlite3.Error.sqlite_errorname``) and what they mean for the service.
_UNAVAILABLE = {
    "SQLITE_FULL": "the disk is full",
    "SQLITE_READONLY": "the database is not writable",
    "SQLITE_CANTOPEN": "the database cannot be opened",
    "SQLITE_IOERR": "an I/O error",
}


def private_dir(path: Path) -> Path:
    """Create ``path`` (and parents) and make it 0700; return it."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.chmod(0o700)
    return path


def key_fingerprint(key: str) -> str:
    """OpenSSH's ``SHA256:`` fingerprint of a ``<type> <base64>`` key line."""
    blob = base64.b64decode(key.split()[1] + "==")
    return key.split()[0] + " SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def identity_conflict(host: str, ident: dict, bound_keys: dict[str, str], instance_id: str | None,
                      host_keys: dict[str, str], proves: frozenset[str] | set[str]) -> str | None:
    """Why a request may not change ``host``'s bound identity, or None when it may (pure)."""
    parts = []
    if instance_id and ident["instance_id"] and instance_id != ident["instance_id"] and "instance_id" not in proves:
        parts.append(f"instance_id {instance_id} (bound: {ident['instance_id']})")
    offered = sorted(set(host_keys.values()) - set(bound_keys.values()))
    if offered and bound_keys and "host_keys" not in proves:
        bound = ", ".join(key_fingerprint(k) for k in sorted(set(bound_keys.values())))
        parts.append(f"host keys {', '.join(key_fingerprint(k) for k in offered)} (bound: {bound})")
    if not parts:
        return None
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ident["bound_at"]))
    return (f"identity conflict: {host} was bound at first contact ({ident['bound_by']}, {when});"
            f" this request claims {' and '.join(parts)} without proving it"
            f" (a signature over them, MAAS reporting a re-deployment, or `gpunode hook forget --host {host}`)")


#: Host states a new request for the same deployment does not queue again.
_COALESCED = ("queued", "running")


class Store:
    """Thread-safe access to the hook database (one connection, one lock)."""

    def __init__(self, path: Path):
        path = Path(path)
        private_dir(path.parent)
        self.path = path
        self._lock = threading.Lock()
        # SQLite creates the -wal and -shm files with the database file's mode: create it 0600 first.
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
        path.chmod(0o600)
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(SCHEMA)
        for table, columns in _ADDED_COLUMNS.items():
            have = {r["name"] for r in self._db.execute(f"PRAGMA table_info({table})")}
            for name, kind in columns.items():
                if name not in have:
                    self._db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")
        # A database from before identities existed: bind each known host to what it last posted.
        self._db.execute(
            "INSERT OR IGNORE INTO identities (name, instance_id, host_keys, bound_at, bound_by, updated_at)"
            " SELECT h.name, h.instance_id, COALESCE((SELECT r.host_keys FROM requests r WHERE r.host = h.name"
            " AND r.host_keys != '{}' ORDER BY r.id DESC LIMIT 1), '{}'), h.updated_at, 'upgrade', h.updated_at"
            " FROM hosts h")
        for suffix in ("-wal", "-shm"):
            extra = path.with_name(path.name + suffix)
            if extra.exists():
                extra.chmod(0o600)
        st = path.stat()
        self._file_id = (st.st_dev, st.st_ino)
        self._gone: str | None = None

    def check_file(self) -> None:
        """Raise StoreUnavailable when the database file was removed or replaced since it was opened.

        SQLite keeps writing to a removed file through its open descriptor, so what it would commit
        is lost at the next start; new work is refused instead, until the service is restarted.
        """
        if self._gone is None:
            try:
                st = os.stat(self.path)
                if (st.st_dev, st.st_ino) != self._file_id:
                    self._gone = "replaced"
            except FileNotFoundError:
                self._gone = "removed"
        if self._gone is not None:
            raise StoreUnavailable(f"state database {self.path}: {self._gone} while the service ran;"
                                   " new requests are refused until the service is restarted")

    def _rollback(self) -> None:
        """Roll back the open transaction, if SQLite has not already (it does on SQLITE_FULL and I/O errors)."""
        if self._db.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")

    def _raise_unavailable(self, exc: BaseException) -> None:
        """Raise StoreUnavailable naming the cause when ``exc`` is SQLite failing to write (full disk, ...)."""
        name = getattr(exc, "sqlite_errorname", "") or ""
        base = name.split("_", 2)[:2]
        what = _UNAVAILABLE.get("_".join(base)) if isinstance(exc, sqlite3.Error) else None
        if what is not None:
            raise StoreUnavailable(f"state database {self.path}: {what} ({name}: {exc})") from exc

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- requests -------------------------------------------------------------------------

    def record_request(self, *, source: str, host: str, instance_id: str | None, fqdn: str | None,
                       host_keys: dict[str, str], peer: str | None, force: bool = False,
                       proves: frozenset[str] = frozenset(), deploy_time: str | None = None,
                       now: float | None = None) -> dict:
        """Record a request durably and queue its host unless a run for it is queued, running or done.

        Identity: the first request naming a host binds its instance id and host keys (each at the
        first request that carries it). A later request whose instance id or keys differ is
        refused — recorded with outcome ``refused`` and the conflict in ``detail``, the host and its
        identity untouched — unless its credential proves the changed field (``proves``, from
        ``requests.Credential``), or, for the keys, MAAS reports a ``deploy_time`` other than the
        one recorded at binding (the machine was re-deployed).

        Queueing: a host already ``queued`` or ``running`` is not queued twice (duplicate posts →
        one run); a host that finished for the same deployment is not run again unless ``force``;
        a new ``instance_id`` or a new MAAS ``deploy_time`` (a redeployment) queues. Returns
        ``{request_id, outcome, host}`` plus ``conflict`` when refused.
        """
        now = time.time() if now is None else now
        keys_json = json.dumps(host_keys, sort_keys=True)
        with self._lock:
            self.check_file()
            cur = self._db.cursor()
            try:
                cur.execute("BEGIN IMMEDIATE")
                ident = cur.execute("SELECT * FROM identities WHERE name = ?", (host,)).fetchone()
                redeployed = False
                conflict = None
                rekey = ident is None
                if ident is not None:
                    bound_keys = json.loads(ident["host_keys"])
                    redeployed = bool(deploy_time and ident["deploy_time"] and deploy_time != ident["deploy_time"])
                    allowed = proves | ({"host_keys"} if redeployed else set())
                    conflict = identity_conflict(host, dict(ident), bound_keys, instance_id, host_keys, allowed)
                    # Keys are replaced on a proven change or when none were bound yet; a subset of the
                    # bound keys (a JSON post with only the ed25519 key) leaves them as they are.
                    rekey = bool(host_keys) and (not bound_keys or "host_keys" in allowed)
                row = cur.execute("SELECT * FROM hosts WHERE name = ?", (host,)).fetchone()
                if conflict is None and fqdn:
                    other = cur.execute("SELECT name FROM hosts WHERE fqdn = ? AND name != ?", (fqdn, host)).fetchone()
                    if other is not None:
                        conflict = (f"identity conflict: fqdn {fqdn} belongs to host {other['name']}, not {host}"
                                    f" (`gpunode hook forget --host {other['name']}` if that machine is gone)")
                    elif row is not None and row["fqdn"] and row["fqdn"] != fqdn and "fqdn" not in proves:
                        conflict = (f"identity conflict: {host}'s fqdn is {row['fqdn']}; changing it to {fqdn}"
                                    " needs the operator credential")
                new_instance = bool(instance_id) and row is not None and instance_id != row["instance_id"]
                if conflict is not None:
                    outcome = "refused"
                elif row is None:
                    outcome = "queued"
                elif row["state"] in _COALESCED:
                    outcome = "duplicate"
                    if row["state"] == "running" and (force or new_instance or redeployed):
                        outcome = "rerun"
                elif force or new_instance or redeployed:
                    outcome = "queued"
                else:
                    outcome = "duplicate"
                cur.execute(
                    "INSERT INTO requests (received_at, source, host, instance_id, fqdn, host_keys, peer, outcome,"
                    " detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (now, source, host, instance_id, fqdn, keys_json, peer, outcome, conflict),
                )
                request_id = cur.lastrowid
                if outcome != "refused":
                    self._bind(cur, ident, host, instance_id, host_keys if rekey else None, deploy_time, source, now)
                if outcome == "refused":
                    pass
                elif row is None:
                    cur.execute(
                        "INSERT INTO hosts (name, instance_id, fqdn, state, queued_at, not_before, attempts,"
                        " last_request_id, updated_at) VALUES (?, ?, ?, 'queued', ?, ?, 0, ?, ?)",
                        (host, instance_id, fqdn, now, now, request_id, now),
                    )
                elif outcome == "queued":
                    cur.execute(
                        "UPDATE hosts SET instance_id = COALESCE(?, instance_id), fqdn = COALESCE(?, fqdn),"
                        " state = 'queued', queued_at = ?, not_before = ?, attempts = 0, rerun = 0,"
                        " interrupted_run = NULL, last_request_id = ?, updated_at = ? WHERE name = ?",
                        (instance_id, fqdn, now, now, request_id, now, host),
                    )
                else:
                    cur.execute(
                        "UPDATE hosts SET instance_id = COALESCE(?, instance_id), fqdn = COALESCE(?, fqdn),"
                        " last_request_id = ?, rerun = rerun OR ?, updated_at = ? WHERE name = ?",
                        (instance_id, fqdn, request_id, outcome == "rerun", now, host),
                    )
                cur.execute("COMMIT")
            except BaseException as exc:
                self._rollback()
                self._raise_unavailable(exc)
                raise
        out = {"request_id": request_id, "outcome": outcome, "host": host}
        if conflict is not None:
            out["conflict"] = conflict
        return out

    @staticmethod
    def _bind(cur: sqlite3.Cursor, ident: sqlite3.Row | None, host: str, instance_id: str | None,
              host_keys: dict[str, str] | None, deploy_time: str | None, source: str, now: float) -> None:
        """Bind (first contact) or update (a proven or first-time field) a host's identity.

        ``host_keys`` None keeps the bound keys.
        """
        keys_json = json.dumps(host_keys, sort_keys=True) if host_keys else None
        if ident is None:
            cur.execute("INSERT INTO identities (name, instance_id, host_keys, deploy_time, bound_at, bound_by,"
                        " updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (host, instance_id, keys_json or "{}", deploy_time, now, source, now))
            return
        cur.execute("UPDATE identities SET instance_id = COALESCE(?, instance_id),"
                    " host_keys = COALESCE(?, host_keys), deploy_time = COALESCE(?, deploy_time), updated_at = ?"
                    " WHERE name = ?",
                    (instance_id, keys_json, deploy_time, now, host))

    def identity(self, host: str) -> dict | None:
        """The identity bound to ``host``: instance_id, host_keys, deploy_time, bound_at, bound_by."""
        with self._lock:
            row = self._db.execute("SELECT * FROM identities WHERE name = ?", (host,)).fetchone()
        if row is None:
            return None
        out = dict(row)
        out["host_keys"] = json.loads(out["host_keys"])
        return out

    def forget(self, host: str) -> bool:
        """``gpunode hook forget``: drop a host's bound identity and queue state (its history stays).

        The next request for it is a first contact again. Refused while the host is running.
        Returns False when the hook knows nothing of the host.
        """
        with self._lock:
            cur = self._db.cursor()
            try:
                cur.execute("BEGIN IMMEDIATE")
                row = cur.execute("SELECT state FROM hosts WHERE name = ?", (host,)).fetchone()
                if row is not None and row["state"] == "running":
                    raise StoreError(f"host {host}: a run is in progress; forget it once the run has finished")
                n = cur.execute("DELETE FROM identities WHERE name = ?", (host,)).rowcount
                n += cur.execute("DELETE FROM hosts WHERE name = ?", (host,)).rowcount
                cur.execute("COMMIT")
            except BaseException as exc:
                self._rollback()
                self._raise_unavailable(exc)
                raise
        return n > 0

    def use_nonce(self, nonce: str, *, window: float, now: float | None = None) -> bool:
        """Record a request nonce for ``window`` seconds; False when it was already used in that time."""
        now = time.time() if now is None else now
        with self._lock:
            self.check_file()
            cur = self._db.cursor()
            try:
                cur.execute("BEGIN IMMEDIATE")
                cur.execute("DELETE FROM nonces WHERE expires_at < ?", (now,))
                try:
                    cur.execute("INSERT INTO nonces (nonce, expires_at) VALUES (?, ?)", (nonce, now + window))
                    fresh = True
                except sqlite3.IntegrityError:
                    fresh = False
                cur.execute("COMMIT")
            except BaseException as exc:
                self._rollback()
                self._raise_unavailable(exc)
                raise
        return fresh

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
        host). Each such host keeps ``interrupted_run`` (the run it was in), which ``status`` shows
        as "re-run after interruption" until a new deployment of it is queued. Running the
        pipeline again is safe because every step of it is idempotent. Returns the hosts queued
        again.
        """
        now = time.time() if now is None else now
        with self._lock:
            cur = self._db.cursor()
            cur.execute("BEGIN IMMEDIATE")
            hosts = [r["name"] for r in cur.execute("SELECT name FROM hosts WHERE state = 'running'")]
            cur.execute("UPDATE runs SET state = 'interrupted', finished_at = ? WHERE state = 'running'", (now,))
            cur.execute(
                "UPDATE hosts SET state = 'queued', not_before = ?, attempts = MAX(attempts - 1, 0),"
                " interrupted_run = last_run_id, updated_at = ? WHERE state = 'running'",
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
            self.check_file()
            cur = self._db.cursor()
            try:
                cur.execute("BEGIN IMMEDIATE")
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
            except BaseException as exc:
                self._rollback()
                self._raise_unavailable(exc)
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
            try:
                cur.execute("BEGIN IMMEDIATE")
                cur.execute(
                    "UPDATE runs SET state = ?, finished_at = ?, result = ?, result_path = ? WHERE id = ?",
                    (state, now, json.dumps(result, sort_keys=True), result_path, run_id),
                )
                for host, ok in host_ok.items():
                    row = cur.execute("SELECT attempts, rerun FROM hosts WHERE name = ?", (host,)).fetchone()
                    summary = json.dumps((result.get("hosts") or {}).get(host, {}), sort_keys=True)
                    if state == "cancelled":
                        new, not_before, attempts = "queued", now, max(row["attempts"] - 1, 0)
                        cur.execute("UPDATE hosts SET interrupted_run = ? WHERE name = ?", (run_id, host))
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
            except BaseException as exc:
                self._rollback()
                self._raise_unavailable(exc)
                raise
        return states

    # -- reads ----------------------------------------------------------------------------

    def host(self, name: str) -> dict | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM hosts WHERE name = ?", (name,)).fetchone()
            count, refused = self._db.execute(
                "SELECT COUNT(*), COALESCE(SUM(outcome = 'refused'), 0) FROM requests WHERE host = ?",
                (name,)).fetchone()
        if row is None:
            return None
        out = dict(row)
        out["outcome"] = json.loads(out["outcome"]) if out["outcome"] else None
        out["rerun"] = bool(out["rerun"])
        out["requests"] = count
        out["refused"] = refused
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

    # -- scheduled revalidation -------------------------------------------------------------

    def start_revalidation(self, hosts: list[str], playbook: str, now: float | None = None) -> int:
        """Record a revalidation as running; its id."""
        with self._lock:
            cur = self._db.execute("INSERT INTO revalidations (started_at, playbook, hosts, state) VALUES (?, ?, ?, ?)",
                                   (time.time() if now is None else now, playbook, json.dumps(hosts), "running"))
            return int(cur.lastrowid)

    def finish_revalidation(self, rid: int, state: str, result: dict, now: float | None = None) -> None:
        with self._lock:
            self._db.execute("UPDATE revalidations SET finished_at = ?, state = ?, result = ? WHERE id = ?",
                             (time.time() if now is None else now, state, json.dumps(result), rid))

    def revalidations(self, limit: int = 20) -> list[dict]:
        """The latest revalidations, newest first (a run still going has state ``running``)."""
        with self._lock:
            rows = self._db.execute("SELECT * FROM revalidations ORDER BY id DESC LIMIT ?", (limit,)).fetchall()
        out = []
        for row in rows:
            entry = dict(row)
            entry["hosts"] = json.loads(entry["hosts"])
            entry["result"] = json.loads(entry["result"]) if entry["result"] else None
            out.append(entry)
        return out

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
