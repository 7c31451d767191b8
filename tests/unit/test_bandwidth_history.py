"""Bandwidth history: each run's ib_write_bw results recorded in SQLite on the controller, and each rail judged
against its own baseline (module_utils/bandwidth_history.py, the bandwidth_history action)."""

from __future__ import annotations

import sqlite3
import stat

import pytest
from ansible.errors import AnsibleActionFail
from ansible_collections.mlplatform.gpunode.plugins.action import bandwidth_history as action
from ansible_collections.mlplatform.gpunode.plugins.module_utils import bandwidth_history as bh
from module_harness import PublishedHostVars, action_plugin


def _pair(rail, gbps, peer="hgx1", side="client", line_rate=400):
    return {"rail": rail, "peer": peer, "peer_rail": rail, "side": side, "gbps": gbps, "line_rate_gbps": line_rate,
            "status": "pass" if gbps and gbps >= line_rate * 0.9 else "fail", "blamed": False, "reason": ""}


def _validation(*pairs):
    return {"passed": True, "failures": [], "checks": [], "pairs": list(pairs)}


def _run(tmp_path, results, run, **args):
    hostvars = PublishedHostVars({h: {"validation_result": r} for h, r in results.items()})
    plugin = action_plugin(action, {"db": str(tmp_path / "hist" / "bandwidth.sqlite"), "run": run,
                                    "version": "0.1.0", **args})
    return plugin.run(task_vars={"hostvars": hostvars, "ansible_play_hosts": sorted(results)})


def test_baseline_is_the_median_of_the_last_measured_results():
    assert bh.baseline([300, None, 384, 380, 386, 390], 3) == 386
    assert bh.baseline([None, None], 3) is None
    assert bh.baseline([], 5) is None


def test_a_rail_that_drops_against_its_own_history_regresses_while_still_above_line_rate(tmp_path):
    # Five runs at 384 Gb/s on both rails, then rail 1 of dgx1 at 365: above the 360 line-rate threshold
    # (90% of 400), 4.9% below its own baseline.
    for n in range(5):
        out = _run(tmp_path, {"dgx1": _validation(_pair(0, 384.0), _pair(1, 384.0))}, f"run-{n}", drop_pct=3)
        assert out["regressions"] == [] and out["recorded"] == 2
    out = _run(tmp_path, {"dgx1": _validation(_pair(0, 383.0), _pair(1, 365.0))}, "run-5", drop_pct=3)
    (finding,) = out["regressions"]
    assert finding["host"] == "dgx1" and finding["rail"] == 1
    assert finding["reasons"] == ["regression"]  # not below line rate
    assert finding["baseline_gbps"] == 384.0 and finding["points"] == 5 and finding["drop_pct"] == 4.95
    assert out["by_host"] == {"dgx1": ["dgx1 rail 1 (as client, peer hgx1 rail 1): 365 Gb/s is 4.95% below its own "
                                       "baseline 384 Gb/s (median of its last 5 results)"]}
    # The same result on a rail without enough history is not judged against a baseline.
    fresh = _run(tmp_path, {"other": _validation(_pair(0, 365.0))}, "run-6", drop_pct=3)
    assert fresh["regressions"] == []
    assert fresh["rails"][0]["points"] == 0 and fresh["rails"][0]["baseline_gbps"] is None
    # Every result is in the history, with the run and version; the trend has one point per run, oldest first.
    with sqlite3.connect(tmp_path / "hist" / "bandwidth.sqlite") as conn:
        rows = conn.execute("SELECT host, rail, peer, side, gbps, run, version FROM bandwidth ORDER BY id").fetchall()
    assert len(rows) == 13
    assert rows[-2] == ("dgx1", 1, "hgx1", "client", 365.0, "run-5", "0.1.0")
    assert [p["gbps"] for p in out["trend"]["dgx1/1"]] == [384.0] * 5 + [365.0]
    assert [p["run"] for p in out["trend"]["dgx1/1"]] == [f"run-{n}" for n in range(6)]


def test_below_line_rate_and_failed_tests_are_flagged_without_history(tmp_path):
    out = _run(tmp_path, {"dgx1": _validation(_pair(0, 190.0), _pair(1, None)), "hgx1": _validation(
        _pair(0, 384.0, peer="dgx1", side="server"))}, "run-1")
    assert [(f["host"], f["rail"], f["reasons"]) for f in out["regressions"]] == [
        ("dgx1", 0, ["below_line_rate"]), ("dgx1", 1, ["failed"])]
    assert "190 Gb/s is below the line-rate threshold of 400 Gb/s" in out["by_host"]["dgx1"][0]
    assert "no result (the test failed)" in out["by_host"]["dgx1"][1]
    assert [(f["host"], f["rail"]) for f in out["rails"]] == [("dgx1", 0), ("dgx1", 1), ("hgx1", 0)]


def test_a_rerun_of_the_same_run_id_is_not_its_own_baseline(tmp_path):
    for n in range(3):
        _run(tmp_path, {"dgx1": _validation(_pair(0, 384.0))}, f"run-{n}", drop_pct=3)
    _run(tmp_path, {"dgx1": _validation(_pair(0, 300.0))}, "run-x", drop_pct=3)
    again = _run(tmp_path, {"dgx1": _validation(_pair(0, 300.0))}, "run-x", drop_pct=3)
    assert again["rails"][0]["baseline_gbps"] == 384.0  # run-x's own rows are left out


def test_the_database_is_private_and_check_mode_writes_nothing(tmp_path):
    hostvars = PublishedHostVars({"dgx1": {"validation_result": _validation(_pair(0, 384.0))}})
    plugin = action_plugin(action, {"db": str(tmp_path / "h" / "bw.sqlite"), "run": "r1"})
    plugin._task.check_mode = True
    out = plugin.run(task_vars={"hostvars": hostvars, "ansible_play_hosts": ["dgx1"]})
    assert out["recorded"] == 0 and out["changed"] is False
    assert not (tmp_path / "h").exists()  # check mode creates nothing
    plugin._task.check_mode = False
    assert plugin.run(task_vars={"hostvars": hostvars, "ansible_play_hosts": ["dgx1"]})["recorded"] == 1
    plugin._task.check_mode = True
    assert plugin.run(task_vars={"hostvars": hostvars, "ansible_play_hosts": ["dgx1"]})["recorded"] == 0
    assert stat.S_IMODE((tmp_path / "h" / "bw.sqlite").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "h").stat().st_mode) == 0o700
    with sqlite3.connect(tmp_path / "h" / "bw.sqlite") as conn:
        assert conn.execute("SELECT COUNT(*) FROM bandwidth").fetchone() == (1,)


@pytest.mark.parametrize(("results", "args", "message"), [
    ({"dgx1": None}, {}, "bandwidth_history: no validation_result for host(s) dgx1 (run the validation role"),
    ({"dgx1": {"pairs": [{"rail": 0}]}}, {}, "bandwidth_history: dgx1: validation_result.pairs[0] lacks or mistypes"),
    ({"dgx1": {"pairs": [dict(_pair(0, 1.0), side="both")]}}, {}, "dgx1: validation_result.pairs[0].side is 'both'"),
    ({"dgx1": _validation()}, {"drop_pct": 120}, "bandwidth_history: drop_pct 120.0 is out of range 0.0-100.0"),
    ({"dgx1": _validation()}, {"window": "ten"}, "bandwidth_history: window must be a number, got 'ten'"),
    ({"dgx1": _validation()}, {"db": ""}, "bandwidth_history: db must be the path of the history database"),
])
def test_bad_input_names_the_host_or_option_and_records_nothing(tmp_path, results, args, message):
    hostvars = PublishedHostVars({h: ({"validation_result": r} if r is not None else {}) for h, r in results.items()})
    plugin = action_plugin(action, {"db": str(tmp_path / "bw.sqlite"), "run": "r1", **args})
    with pytest.raises(AnsibleActionFail) as err:
        plugin.run(task_vars={"hostvars": hostvars, "ansible_play_hosts": sorted(results)})
    assert message in str(err.value)
    assert not (tmp_path / "bw.sqlite").exists()
