"""The day-two database: a versioned schema moved forward by migrations, a file touched only once verified to be
this database, check mode that writes nothing (also on a read-only filesystem), the history ordered by run
sequence, and impossible results refused."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import stat
import subprocess

import pytest
from ansible.errors import AnsibleActionFail
from ansible_collections.mlplatform.gpunode.plugins.action import bandwidth_history as bw_action
from ansible_collections.mlplatform.gpunode.plugins.action import remediation as rm_action
from ansible_collections.mlplatform.gpunode.plugins.module_utils import bandwidth_history as bh
from ansible_collections.mlplatform.gpunode.plugins.plugin_utils import day_two_report, history_db
from module_harness import PublishedHostVars, action_plugin

LEGACY = """
CREATE TABLE bandwidth (id INTEGER PRIMARY KEY, host TEXT NOT NULL, rail INTEGER NOT NULL, peer TEXT NOT NULL,
    peer_rail INTEGER NOT NULL, side TEXT NOT NULL, gbps REAL, line_rate_gbps REAL, time REAL NOT NULL,
    run TEXT NOT NULL, version TEXT NOT NULL);
CREATE INDEX bandwidth_rail ON bandwidth (host, rail, time);
CREATE TABLE remediation (host TEXT PRIMARY KEY, fabric TEXT NOT NULL, state TEXT NOT NULL, attempts INTEGER NOT NULL,
    reason TEXT NOT NULL, updated REAL NOT NULL);
CREATE TABLE events (id INTEGER PRIMARY KEY, time REAL NOT NULL, run TEXT NOT NULL, host TEXT NOT NULL,
    step TEXT NOT NULL, detail TEXT NOT NULL);
"""


def _pair(gbps, rail=3, line=400):
    return {"rail": rail, "peer": "dgx1", "peer_rail": rail, "side": "client", "gbps": gbps, "line_rate_gbps": line}


def _bw(db, run, pairs, check_mode=False, **args):
    hostvars = PublishedHostVars({"hgx1": {"validation_result": {"pairs": pairs}}})
    plugin = action_plugin(bw_action, {"db": str(db), "run": run, "version": "0", **args})
    plugin._task.check_mode = check_mode
    return plugin.run(task_vars={"hostvars": hostvars, "ansible_play_hosts": ["hgx1"]})


def _plan(db, check_mode=False):
    finding = {"conditions": [], "regressions": [], "failures": []}
    plugin = action_plugin(rm_action, {"db": str(db), "run": "r", "nodes": {}})
    plugin._task.check_mode = check_mode
    return plugin.run(task_vars={"hostvars": PublishedHostVars({"hgx1": {"revalidate_finding": finding}}),
                                 "ansible_play_hosts": ["hgx1"]})


def _legacy(path):
    with sqlite3.connect(path) as conn:
        conn.executescript(LEGACY)
        rows = [("hgx1", 3, "dgx1", 3, "client", g, 400.0, t, r, "0")
                for g, t, r in ((380.0, 100.0, "old-1"), (382.0, 5e9, "old-2"), (384.0, 300.0, "old-3"))]
        conn.executemany("INSERT INTO bandwidth (host, rail, peer, peer_rail, side, gbps, line_rate_gbps, time, run, "
                         "version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
        conn.execute("INSERT INTO remediation VALUES ('hgx2', 'A', 'remediating', 1, 'x', 1.0)")
    conn.close()
    os.chmod(path, 0o644)


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_legacy_database_is_moved_forward_keeping_its_rows(tmp_path):
    db = tmp_path / "history.sqlite"
    _legacy(db)
    _bw(db, "new-1", [_pair(300.0)])
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (history_db.VERSION,)
        # Runs numbered in the order they were recorded (by row), not by their time (old-2 is dated 2128).
        assert conn.execute("SELECT run, seq FROM runs ORDER BY seq").fetchall() == [
            ("old-1", 1), ("old-2", 2), ("old-3", 3), ("new-1", 4)]
        assert conn.execute("SELECT COUNT(*) FROM bandwidth WHERE seq IS NULL").fetchone() == (0,)
        assert conn.execute("SELECT host, cordoned_before FROM remediation").fetchall() == [("hgx2", None)]
    assert stat.S_IMODE(db.stat().st_mode) == 0o600  # verified as ours, then made private


@pytest.mark.parametrize("content", [b"db: this is my notes file\n", b"\x00" * 64, b"SQLite format 2\x00junk"])
def test_a_file_that_is_not_sqlite_is_refused_and_left_as_it_is(tmp_path, content):
    db = tmp_path / "notes.txt"
    db.write_bytes(content)
    os.chmod(db, 0o644)
    for call in (lambda: _bw(db, "r", [_pair(380.0)]), lambda: _plan(db), lambda: _bw(db, "r", [], check_mode=True)):
        with pytest.raises(AnsibleActionFail, match=f"{db} cannot be used: {db} is not an SQLite database"):
            call()
    assert db.read_bytes() == content and stat.S_IMODE(db.stat().st_mode) == 0o644


def test_another_sqlite_database_or_a_newer_schema_is_refused_and_left_as_it_is(tmp_path):
    foreign = tmp_path / "crm.sqlite"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE customers (name TEXT)")
    conn.close()
    os.chmod(foreign, 0o644)
    before = _digest(foreign)
    with pytest.raises(AnsibleActionFail, match="not the day-two history \\(unknown tables customers\\)"):
        _plan(foreign)
    assert _digest(foreign) == before and stat.S_IMODE(foreign.stat().st_mode) == 0o644
    newer = tmp_path / "newer.sqlite"
    _bw(newer, "r", [_pair(380.0)])
    with sqlite3.connect(newer) as conn:
        conn.execute(f"PRAGMA user_version = {history_db.VERSION + 1}")
    conn.close()
    before = _digest(newer)
    with pytest.raises(AnsibleActionFail, match=f"schema version {history_db.VERSION + 1}, newer than"):
        _bw(newer, "r2", [_pair(380.0)])
    assert _digest(newer) == before
    directory = tmp_path / "a-directory"
    directory.mkdir()
    with pytest.raises(AnsibleActionFail, match="is not a regular file"):
        _plan(directory)


def test_check_mode_writes_nothing_even_to_an_old_database(tmp_path, monkeypatch):
    db = tmp_path / "history.sqlite"
    _legacy(db)
    before, mtime = _digest(db), db.stat().st_mtime_ns
    monkeypatch.setattr(os, "chmod", lambda *a, **k: pytest.fail("check mode changed a file mode"))
    out = _bw(db, "r", [_pair(300.0)], check_mode=True)
    assert out["recorded"] == 0 and out["rails"][0]["baseline_gbps"] == 382.0
    assert _plan(db, check_mode=True)["events"] == []
    assert _digest(db) == before and db.stat().st_mtime_ns == mtime
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (0,)
    conn.close()


def test_check_mode_works_on_a_read_only_filesystem(tmp_path):
    mnt = tmp_path / "ro"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(mnt)], capture_output=True, check=False).returncode:
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    try:
        db = mnt / "history.sqlite"
        _legacy(db)
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        assert _bw(db, "r", [_pair(300.0)], check_mode=True)["rails"][0]["baseline_gbps"] == 382.0
        assert _plan(db, check_mode=True)["plan"]["hgx1"]["action"] == "none"
        assert _bw(mnt / "missing.sqlite", "r", [_pair(300.0)], check_mode=True)["recorded"] == 0
        with pytest.raises(AnsibleActionFail, match="cannot be used"):  # a real run says why it cannot write
            _bw(db, "r", [_pair(300.0)])
        assert day_two_report.load(db)["rails"] == []
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_a_run_dated_in_the_future_does_not_pin_the_baseline(tmp_path, monkeypatch):
    db = tmp_path / "history.sqlite"
    clock = iter([1.0e9 + 5e8, 1.0e9, 1.0e9 + 10, 1.0e9 + 20, 1.0e9 + 30])  # the first run's clock was set wrong
    monkeypatch.setattr(bw_action.time, "time", lambda: next(clock))
    for run, gbps in (("r1", 200.0), ("r2", 380.0), ("r3", 384.0), ("r4", 386.0)):
        _bw(db, run, [_pair(gbps)])
    out = _bw(db, "r5", [_pair(300.0)], window=3, min_points=3)
    (rail,) = out["rails"]
    assert rail["baseline_gbps"] == 384.0 and "regression" in rail["reasons"]  # r2-r4, not r1 dated 2017
    latest = day_two_report.load(db)
    assert [p["run"] for p in latest["rails"][0]["trend"]] == ["r1", "r2", "r3", "r4", "r5"]


@pytest.mark.parametrize(("pair", "message"), [
    (_pair(float("nan")), r"gbps is nan, not a finite number"),
    (_pair(float("inf")), r"gbps is inf, not a finite number"),
    (_pair("-inf"), r"gbps is '-inf', not a finite number"),
    (_pair(4_000_000.0),
     r"gbps is 4000000.0: an impossible result \(below 0 or above 1.5 times its line rate 400 Gb/s\)"),
    (_pair(700.0), r"gbps is 700.0: an impossible result \(below 0 or above 1.5 times its line rate 400"),
    (_pair(-1.0), r"gbps is -1.0: an impossible result"),
    (_pair(5000.0, line=None), r"gbps is 5000.0: an impossible result \(below 0 or above 3200 Gb/s\)"),
    (_pair(380.0, rail=0.7), r"rail is 0.7, not a rail number"),
    (_pair(380.0, rail=-1), r"rail is -1, not a rail number"),
    (_pair(380.0, rail=True), r"rail is True, not a rail number"),
    (_pair(380.0, rail="3a"), r"rail is '3a', not a rail number"),
    ({**_pair(380.0), "peer_rail": 1.5}, r"peer_rail is 1.5, not a rail number"),
    (_pair(380.0, line=0), r"line_rate_gbps is 0: a rail's line rate is above 0"),
    (_pair(380.0, line=-400), r"line_rate_gbps is -400: a rail's line rate is above 0"),
    (_pair(380.0, line=float("nan")), r"line_rate_gbps is nan, not a finite number"),
    (_pair(380.0, line="fast"), r"line_rate_gbps is 'fast', not a number"),
    ({**_pair(380.0), "peer": " "}, r"peer is empty"),
    (_pair(True), r"gbps is True, not a number"),
])
def test_an_impossible_result_is_refused_naming_the_host_and_nothing_is_recorded(tmp_path, pair, message):
    db = tmp_path / "history.sqlite"
    _bw(db, "r0", [_pair(380.0)])
    with pytest.raises(AnsibleActionFail, match="bandwidth_history: hgx1: validation_result.pairs\\[1\\]." + message):
        _bw(db, "r1", [_pair(381.0), pair])
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT run FROM bandwidth").fetchall() == [("r0",)]
    conn.close()


def test_whole_numbers_in_other_forms_are_rails():
    rows = bh.rows_from_validation("h", {"pairs": [_pair(380.0, rail="2"), _pair(380.0, rail=4.0)]}, time=1.0,
                                   run="r", version="0")
    assert [r["rail"] for r in rows] == [2, 4]


def test_the_report_names_a_history_file_it_cannot_use(tmp_path):
    from ansible_collections.mlplatform.gpunode.plugins.plugin_utils.fleet_report import (  # noqa: PLC0415 - only this test needs the report
        ReportInputError,
        write_report,
    )

    notes = tmp_path / "notes.txt"
    notes.write_text("not a database\n")
    with pytest.raises(ReportInputError, match=f"history: the day-two database {notes} cannot be read: .*is not an "
                                               "SQLite database"):
        write_report(tmp_path / "in", tmp_path / "out", {"hosts": {}, "kueue": [], "run": {}}, history=notes)
    assert notes.read_text() == "not a database\n"
