"""kubernetes_node does not join blindly over a Ready Node of the same name (issue 6).

With the bootstrap token passed in and no control-plane host, the role looks the Node up through
``kubernetes_node_kubeconfig`` (kubernetes.core.k8s_info from the controller) against the API
emulator. A Ready Node of the host's name stops the join before anything is written on the host.
"""

from __future__ import annotations

import sys

import kubernetes
import pytest
from kubernetes.dynamic import DynamicClient
from local_play import free_port, run_play  # tests/unit is on sys.path (rootdir-relative import mode)

from gpunode.kapi.server import RunningServer

PLAY = """---
- name: Run the join tasks of kubernetes_node on a host that has no kubelet.conf
  hosts: gpu_nodes
  gather_facts: false
  tasks:
    - name: Include the join tasks
      ansible.builtin.include_role:
        name: mlplatform.gpunode.kubernetes_node
        tasks_from: join
      vars:
        __kubernetes_node_needs_join: true
"""



@pytest.fixture
def api(tmp_path):
    with RunningServer(tmp_path / "kapi", free_port(16500, 16510)) as srv:
        yield srv, DynamicClient(kubernetes.config.new_client_from_config(srv.kubeconfig))


def _play(tmp_path, kubeconfig, **extra):
    inventory = {"all": {"children": {"gpu_nodes": {"hosts": {"gpu-old": {}}}}, "vars": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "kubernetes_node_kubeconfig": kubeconfig, "kubernetes_node_api_server": "127.0.0.1:6443",
        "kubernetes_node_join_token": "abcdef.0123456789abcdef", **extra}}}
    return run_play(tmp_path, inventory, PLAY)


def test_a_ready_node_of_the_same_name_stops_the_join(tmp_path, api):
    srv, dyn = api
    nodes = dyn.resources.get(api_version="v1", kind="Node")
    nodes.create(body={"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-old"},
                       "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    proc = _play(tmp_path, srv.kubeconfig)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "gpu-old: a Ready Node named gpu-old already exists in the cluster" in out
    assert "kubernetes_node_replace_ready_node: true" in out
    # Nothing after the refusal ran: no JoinConfiguration rendered, no kubeadm join.
    assert "Join | Render the JoinConfiguration" not in out
    assert "Join | Join with kubeadm" not in out
    # The old Node is still there, untouched, and the token is not in the output.
    assert nodes.get(name="gpu-old").metadata.name == "gpu-old"
    assert "0123456789abcdef" not in out


def test_a_stale_notready_node_of_the_same_name_stops_the_join_naming_what_it_holds(tmp_path, api):
    """A kubelet that finds its Node registered already does not apply its registration taint or labels to it
    (kubernetes/kubernetes pkg/kubelet/kubelet_node_status.go, tryRegisterWithAPIServer): joining over a stale
    Node would leave it schedulable before validation. The join is refused, naming the Node's state."""
    srv, dyn = api
    nodes = dyn.resources.get(api_version="v1", kind="Node")
    nodes.create(body={"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-old"},
                       "spec": {"unschedulable": True,
                                "taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]},
                       "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}})
    proc = _play(tmp_path, srv.kubeconfig)
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0
    assert ("gpu-old: a NotReady Node named gpu-old already exists in the cluster (cordoned; taints: "
            "node.kubernetes.io/unreachable)") in out
    assert "would not apply its registration taint (gpunode.mlplatform.io/not-validated)" in out
    assert "kubernetes_node_replace_ready_node: true" in out
    assert "Join | Render the JoinConfiguration" not in out and "Join | Join with kubeadm" not in out
    assert nodes.get(name="gpu-old").spec.unschedulable is True  # left as it was


CONVERGED_PLAY = """---
- name: Run the join tasks of kubernetes_node on hosts that joined in an earlier run
  hosts: gpu_nodes
  gather_facts: false
  tasks:
    - name: Include the join tasks
      ansible.builtin.include_role:
        name: mlplatform.gpunode.kubernetes_node
        tasks_from: join
      vars:
        __kubernetes_node_needs_join: false
        __kubernetes_node_installed: {kubelet: "1.33.4-1.1"}
        __kubernetes_node_state: {units: {kubelet.service: {enabled: enabled, active: active}}}
        __kubernetes_node_kubelet_conf: "{{ kubernetes_node_kubeconfig }}"

    - name: Show what the role published
      ansible.builtin.debug:
        msg: "REGISTERED {{ inventory_hostname }} {{ kubernetes_node_registered | to_json | b64encode }}"
"""


def test_a_joined_host_with_a_ready_node_is_not_asked_again(tmp_path, api):
    """The re-run: one read of every Node on the controller. A joined host whose Node is Ready there (and whose
    kubelet this run did not start) publishes the Node from that read, without running kubectl on the host; a
    host whose Node the API server does not have Ready still waits for it through its kubelet (and fails here,
    as before, when it never comes)."""
    import base64
    import json
    import re

    srv, dyn = api
    nodes = dyn.resources.get(api_version="v1", kind="Node")
    taint = {"key": "gpunode.mlplatform.io/not-validated", "value": "true", "effect": "NoSchedule"}
    nodes.create(body={"apiVersion": "v1", "kind": "Node",
                       "metadata": {"name": "gpu-a", "labels": {"nvidia.com/gpu.present": "true"}},
                       "spec": {"taints": [taint]},
                       "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    inventory = {"all": {"children": {"gpu_nodes": {"hosts": {"gpu-a": {}, "gpu-b": {}}}}, "vars": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "kubernetes_node_kubeconfig": srv.kubeconfig, "kubernetes_node_api_server": "127.0.0.1:6443",
        "kubernetes_node_join_token": "abcdef.0123456789abcdef", "kubernetes_node_ready_timeout": 0}}}
    proc = run_play(tmp_path, inventory, CONVERGED_PLAY, "-v")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    registered = {m.group(1): json.loads(base64.b64decode(m.group(2)))
                  for m in re.finditer(r"REGISTERED (\S+) (\S+)", out)}
    assert registered == {"gpu-a": {"name": "gpu-a", "labels": {"nvidia.com/gpu.present": "true"},
                                    "taints": [taint]}}
    wait = out[out.index("Join | Wait for the kubelet"):out.index("Join | Publish the Node")]
    assert "skipping: [gpu-a]" in wait
    assert re.search(r"fatal: \[gpu-b\]: FAILED! .*NotFound", wait, re.S), wait
