"""The validation gate's taint against the API emulator (kubernetes.core from the controller).

On pass the ``not-validated`` taint goes, also when it is the Node's only taint (a strategic merge
patch of ``taints: []`` cannot remove it, so the role sends a JSON patch); other taints stay; a
re-run changes nothing; on fail the taint comes back.
"""

from __future__ import annotations

import json
import re
import sys

import kubernetes
import pytest
from kubernetes.dynamic import DynamicClient
from local_play import free_port, run_play  # tests/unit is on sys.path (rootdir-relative import mode)

from gpunode.kapi.server import RunningServer

pytestmark = pytest.mark.slow  # ansible-playbook runs on materialized hosts (README: slow tests)

KEY = "gpunode.mlplatform.io/not-validated"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
PLAY = """---
- name: Run the validation gate on checks decided elsewhere
  hosts: gpu_nodes
  gather_facts: false
  tasks:
    - name: Include the gate
      ansible.builtin.include_role:
        name: mlplatform.gpunode.validation
        tasks_from: gate
"""



@pytest.fixture
def api(tmp_path):
    with RunningServer(tmp_path / "kapi", free_port(16510, 16520)) as srv:
        dyn = DynamicClient(kubernetes.config.new_client_from_config(srv.kubeconfig))
        nodes = dyn.resources.get(api_version="v1", kind="Node")
        only = {"key": KEY, "value": "true", "effect": "NoSchedule"}
        nodes.create(body={"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-a"},
                           "spec": {"taints": [only]}})
        nodes.create(body={"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-b"},
                           "spec": {"taints": [GPU_TAINT, only]}})
        yield srv, nodes


def taints(nodes, name):
    return [{k: t[k] for k in ("key", "value", "effect")} for t in nodes.get(name=name).spec.get("taints") or []]


def _gate(tmp_path, srv, status, expect_rc=0, **extra):
    check = {"check": "gpu_count", "scope": "host", "rail": None, "device": None, "netdev": None,
             "status": status, "expected": 8, "found": 8 if status == "pass" else 7,
             "reason": "" if status == "pass" else "7 GPUs, expected 8"}
    host_vars = {"__validation_gate_node": {"checks": [check]}}
    inventory = {"all": {"children": {"gpu_nodes": {"hosts": {"gpu-a": host_vars, "gpu-b": host_vars}}}, "vars": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "validation_manage_taint": True, "validation_kubeconfig": srv.kubeconfig, "validation_fail_hosts": False,
        "validation_results_dir": str(tmp_path / "results" / "{{ inventory_hostname }}"), **extra}}}
    proc = run_play(tmp_path, inventory, PLAY)
    assert proc.returncode == expect_rc, proc.stdout + proc.stderr
    recap = dict(re.findall(r"^(gpu-[ab])\s+:.*changed=(\d+)", proc.stdout, re.M))
    return proc, {h: int(n) for h, n in recap.items()}


def test_pass_removes_the_taint_even_when_it_is_the_only_one(tmp_path, api):
    srv, nodes = api
    _, changed = _gate(tmp_path, srv, "pass")
    assert taints(nodes, "gpu-a") == []
    assert taints(nodes, "gpu-b") == [GPU_TAINT]
    result = json.loads((tmp_path / "results" / "gpu-a" / "validation.json").read_text())
    assert result["passed"] is True and result["taint"] == "removed"
    assert changed == {"gpu-a": 2, "gpu-b": 2}  # validation.json (its directory in the same call), taint removed

    _, changed = _gate(tmp_path, srv, "pass")
    assert changed == {"gpu-a": 0, "gpu-b": 0}
    assert taints(nodes, "gpu-a") == []


def test_fail_puts_the_taint_back_and_says_why(tmp_path, api):
    srv, nodes = api
    _gate(tmp_path, srv, "pass")
    _, changed = _gate(tmp_path, srv, "fail")
    assert taints(nodes, "gpu-a") == [{"key": KEY, "value": "true", "effect": "NoSchedule"}]
    assert {t["key"] for t in taints(nodes, "gpu-b")} == {KEY, GPU_TAINT["key"]}
    result = json.loads((tmp_path / "results" / "gpu-a" / "validation.json").read_text())
    assert result["passed"] is False and result["taint"] == "kept"
    assert result["failures"] and "7 GPUs, expected 8" in " ".join(result["failures"])
    assert changed["gpu-a"] == 2


def test_a_node_that_does_not_exist_is_an_error_naming_the_host_and_the_variable(tmp_path, api):
    srv, nodes = api
    proc, _ = _gate(tmp_path, srv, "pass", expect_rc=2, validation_node_name="gpu-{{ inventory_hostname }}")
    out = " ".join(proc.stdout.split())
    for host in ("gpu-a", "gpu-b"):
        assert (f"{host}: no Node named gpu-{host} (validation_node_name) in the cluster of validation_kubeconfig; "
                f"cannot remove the {KEY} taint") in out, out[-3000:]
    assert taints(nodes, "gpu-a") == [{"key": KEY, "value": "true", "effect": "NoSchedule"}]


def test_check_mode_leaves_validation_json_alone_when_the_bandwidth_tests_would_decide_it(tmp_path):
    """Check mode runs no bandwidth test: validation.json, whose pairs a real run measures, is neither written nor
    shown as a change on a converged host (it holds the pairs of the last real run); without bandwidth tests its
    text is known, and check mode shows the write."""
    measured = '{"pairs": [{"peer": "gpu-b", "rail": 0, "status": "pass"}], "passed": true}\n'
    check = {"check": "gpu_count", "scope": "host", "rail": None, "device": None, "netdev": None, "status": "pass",
             "expected": 8, "found": 8, "reason": ""}
    for bandwidth in (True, False):
        results = tmp_path / f"results-{bandwidth}"
        results.mkdir()
        (results / "validation.json").write_text(measured)
        host_vars = {"__validation_gate_node": {"checks": [check]}}
        inventory = {"all": {"children": {"gpu_nodes": {"hosts": {"gpu-a": host_vars}}}, "vars": {
            "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
            "validation_manage_taint": False, "validation_fail_hosts": False,
            "validation_bandwidth_enabled": bandwidth, "validation_results_dir": str(results)}}}
        proc = run_play(tmp_path, inventory, PLAY, "--check", "--diff")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        changed = int(re.search(r"^gpu-a\s+:.*changed=(\d+)", proc.stdout, re.M)[1])
        assert changed == (0 if bandwidth else 1), proc.stdout
        assert (results / "validation.json").read_text() == measured  # check mode never writes
