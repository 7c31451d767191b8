"""The validation gate's taint against the API emulator (kubernetes.core from the controller).

On pass the ``not-validated`` taint goes, also when it is the Node's only taint (a strategic merge
patch of ``taints: []`` cannot remove it, so the role sends a JSON patch); other taints stay; a
re-run changes nothing; on fail the taint comes back.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import kubernetes
import pytest
import yaml
from kubernetes.dynamic import DynamicClient

from gpunode.kapi.server import RunningServer

REPO = Path(__file__).resolve().parents[2]
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


def free_port() -> int:
    for port in range(16510, 16520):  # this module's range, apart from the other tests'
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) != 0:
                return port
    raise RuntimeError("no free port")


@pytest.fixture
def api(tmp_path):
    with RunningServer(tmp_path / "kapi", free_port()) as srv:
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


def _gate(tmp_path, srv, status):
    check = {"check": "gpu_count", "scope": "host", "rail": None, "device": None, "netdev": None,
             "status": status, "expected": 8, "found": 8 if status == "pass" else 7,
             "reason": "" if status == "pass" else "7 GPUs, expected 8"}
    host_vars = {"__validation_node": {"checks": [check]}}
    inventory = {"all": {"children": {"gpu_nodes": {"hosts": {"gpu-a": host_vars, "gpu-b": host_vars}}}, "vars": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "validation_manage_taint": True, "validation_kubeconfig": srv.kubeconfig, "validation_fail_hosts": False,
        "validation_results_dir": str(tmp_path / "results" / "{{ inventory_hostname }}")}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "play.yml").write_text(PLAY)
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".cache" / "collections"), "ANSIBLE_FORCE_COLOR": "0"}
    proc = subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(tmp_path / "hosts.yml"),
                           str(tmp_path / "play.yml")], capture_output=True, text=True, env=env, check=False,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    recap = dict(re.findall(r"^(gpu-[ab])\s+:.*changed=(\d+)", proc.stdout, re.M))
    return proc, {h: int(n) for h, n in recap.items()}


def test_pass_removes_the_taint_even_when_it_is_the_only_one(tmp_path, api):
    srv, nodes = api
    _, changed = _gate(tmp_path, srv, "pass")
    assert taints(nodes, "gpu-a") == []
    assert taints(nodes, "gpu-b") == [GPU_TAINT]
    result = json.loads((tmp_path / "results" / "gpu-a" / "validation.json").read_text())
    assert result["passed"] is True and result["taint"] == "removed"
    assert changed == {"gpu-a": 3, "gpu-b": 3}  # results dir, validation.json, taint removed

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
