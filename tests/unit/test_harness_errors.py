"""A failure of the test harness (the port taken by another process, a bind that fails, a tool the harness needs
missing) is a harness error in the results, the history and the report: never a finding against the host, never
a reason to remediate it."""

from __future__ import annotations

import socket

import pytest
from ansible_collections.mlplatform.gpunode.plugins.action import bandwidth_history as bw_action
from ansible_collections.mlplatform.gpunode.plugins.filter.validation import validation_result
from ansible_collections.mlplatform.gpunode.plugins.module_utils import perftest, validation
from ansible_collections.mlplatform.gpunode.plugins.module_utils import remediation as rm
from ansible_collections.mlplatform.gpunode.plugins.modules import ib_write_bw
from ansible_collections.mlplatform.gpunode.plugins.plugin_utils.fleet_report import (
    html_host_details,
    validation_summary,
)
from module_harness import PublishedHostVars, action_plugin, patch_exits, run_module

TESTS = [{"id": "a:0-b:0", "server": "a", "client": "b", "rail": 0, "server_device": "mlx5_0",
          "client_device": "mlx5_0", "line_rate_gbps": 400},
         {"id": "b:0-a:0", "server": "b", "client": "a", "rail": 0, "server_device": "mlx5_0",
          "client_device": "mlx5_0", "line_rate_gbps": 400}]


@pytest.mark.parametrize("reason", [
    "port 18515 is already in use (another process listens on it): not started",
    "exit status 1: Couldn't listen to port 18515: Address already in use",
    "exit status 1: Couldn't bind to port 18515",
    "perftest is not installed on this host (no ib_write_bw on PATH)",
    "the harness's timeout(1) is missing on this host (coreutils)",
])
def test_a_server_the_harness_could_not_start_blames_no_host(reason):
    results = {"a:0-b:0": {"gbps": None, "error": "Couldn't connect to 10.0.0.1:18515"},
               "b:0-a:0": {"gbps": 391.0, "error": None}}
    judged = validation.judge_pairs(TESTS, results, 90, {"a:0-b:0": reason})
    for host in ("a", "b"):
        assert validation.verdict([], judged[host]) == (True, [])
        entry = next(p for p in judged[host] if p["status"] != "pass")
        assert entry["status"] == "harness_error" and entry["failed_side"] == "harness" and not entry["blamed"]
        assert "harness error" in entry["reason"] and reason in entry["reason"]
    out = validation_result([], judged["a"], "a")
    assert out["passed"] and out["failures"] == [] and len(out["harness_errors"]) == 1


@pytest.mark.parametrize("reason", ["exit status 1: Unable to open device mlx5_0",
                                    "exit status 1: Failed to modify QP 0x108 to RTR",
                                    "exit status 255: mlx5_0: No such file or directory"])
def test_a_failure_of_the_host_or_its_rail_is_still_blamed(reason):
    judged = validation.judge_pairs(TESTS, {"b:0-a:0": {"gbps": 391.0, "error": None}}, 90, {"a:0-b:0": reason})
    assert not perftest.is_harness_failure(reason)
    assert validation.verdict([], judged["a"])[0] is False


def test_a_client_whose_bind_fails_is_a_harness_error():
    results = {"a:0-b:0": {"gbps": None, "error": "Failed to bind: Address already in use"},
               "b:0-a:0": {"gbps": 391.0, "error": None}}
    judged = validation.judge_pairs(TESTS, results, 90)
    assert all(validation.verdict([], judged[h])[0] for h in ("a", "b"))


def test_the_history_and_the_remediation_plan_do_not_see_a_harness_error(tmp_path):
    results = {"a:0-b:0": {"gbps": None, "error": None}, "b:0-a:0": {"gbps": 391.0, "error": None}}
    judged = validation.judge_pairs(TESTS, results, 90, {"a:0-b:0": "port 18515 is already in use: not started"})
    hostvars = PublishedHostVars({h: {"validation_result": validation_result([], judged[h], h)} for h in "ab"})
    plugin = action_plugin(bw_action, {"db": str(tmp_path / "h.sqlite"), "run": "r1", "version": "0"})
    out = plugin.run(task_vars={"hostvars": hostvars, "ansible_play_hosts": ["a", "b"]})
    assert out["regressions"] == [] and out["by_host"] == {}
    assert out["recorded"] == 2  # the two measured results; the test the harness failed is no measurement
    assert sorted(out["harness_errors"]) == ["a", "b"] and "harness errors" in out["msg"]
    # The finding revalidate.yml publishes: failures and peers come from failed pairs only.
    finding = {"conditions": [], "regressions": out["by_host"].get("a", []),
               "failures": hostvars["a"]["validation_result"]["failures"], "checks": [],
               "peers": [p["peer"] for p in judged["a"] if p["status"] == "fail"]}
    assert rm.plan({"a": finding}, {"a": "A"}, {})["a"]["action"] == "none"


def test_the_report_lists_harness_errors_apart_from_failures():
    judged = validation.judge_pairs(TESTS, {"b:0-a:0": {"gbps": 391.0, "error": None}}, 90,
                                    {"a:0-b:0": "port 18515 is already in use (another process listens on it)"})
    summary = validation_summary("a", validation_result([], judged["a"], "a"))
    assert summary["status"] == "passed" and summary["failures"] == []
    assert len(summary["harness_errors"]) == 1
    page = html_host_details([{"name": "a", "validation": summary, "rails": [], "platform": "NVIDIA DGX H100",
                               "gpus": 8, "nvswitches": 4, "fabric": "east", "reboot": "not needed"}])
    assert '<p class="harness">Harness errors (the test harness failed, not this host' in page
    assert "port 18515 is already in use" in page and 'class="failures"' not in page
    assert "1 of 2 tests passed" in page


def test_the_module_reports_a_port_taken_as_a_harness_error(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "ib_write_bw").write_text("#!/bin/sh\nsleep 60\n")
    (bindir / "ib_write_bw").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    monkeypatch.setattr(ib_write_bw.tempfile, "mkdtemp", lambda prefix: str(tmp_path))
    patch_exits(monkeypatch)
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen(1)
        port = other.getsockname()[1]
        result = run_module(ib_write_bw.main, {"servers": [{"id": "a:0-b:0", "device": "mlx5_0", "port": port}],
                                               "timeout": 5, "server_check_s": 1})
    reason = result["server_errors"]["a:0-b:0"]
    assert perftest.is_harness_failure(reason)
    judged = validation.judge_pairs(TESTS[:1], {}, 90, result["server_errors"])
    assert validation.verdict([], judged["a"]) == (True, []) and validation.verdict([], judged["b"]) == (True, [])
