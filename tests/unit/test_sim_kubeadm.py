"""The simulated kubeadm, kubelet and kubectl against the API emulator, run on the controller.

``GPUNODE_SIM_ROOT`` points the tools' /etc and /var paths at tmp_path; the emulator runs in a
thread. The flow is the role's: token create on the control plane, join from a JoinConfiguration,
the kubelet posts Ready, a second join of the same name is refused.
"""

from __future__ import annotations

import base64
import io
import json
import re
import shutil

import kubernetes
import pytest
from local_play import free_port  # tests/unit is on sys.path (rootdir-relative import mode)

from gpunode.kapi.server import RunningServer
from gpunode.sim.tools import kubeadm, kubectl, kubelet

DOMAIN = "gpunode.mlplatform.io"


def run(tool, argv):
    out, err = io.StringIO(), io.StringIO()
    rc = tool.main(argv, out, err)
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    """A running emulator, a control-plane root with admin.conf and a node root with a CRI socket."""
    with RunningServer(tmp_path / "kapi", free_port(16450, 16470)) as srv:
        cp, node = tmp_path / "cp", tmp_path / "node"
        (cp / "etc/kubernetes").mkdir(parents=True)
        shutil.copy(srv.kubeconfig, cp / "etc/kubernetes/admin.conf")
        (node / "run/containerd").mkdir(parents=True)
        (node / "run/containerd/containerd.sock").write_text("")
        yield srv, cp, node


def kubectl_on(monkeypatch, root, argv):
    """kubectl on the control plane (its admin.conf), then back to the node's root."""
    before = kubeadm._root()
    monkeypatch.setenv("GPUNODE_SIM_ROOT", str(root))
    try:
        return run(kubectl, [*argv, "--kubeconfig", "/etc/kubernetes/admin.conf"])
    finally:
        monkeypatch.setenv("GPUNODE_SIM_ROOT", before)


def token_create(monkeypatch, cp):
    monkeypatch.setenv("GPUNODE_SIM_ROOT", str(cp))
    rc, out, err = run(kubeadm, ["token", "create", "--ttl", "15m", "--print-join-command"])
    assert rc == 0, err
    m = re.fullmatch(r"kubeadm join (\S+) --token (\S+) --discovery-token-ca-cert-hash (sha256:[0-9a-f]{64}) \n", out)
    assert m, out
    return m.group(1), m.group(2), m.group(3)


def join_config(tmp_path, endpoint, token, pin, labels, name="dgx01"):
    conf = {"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "JoinConfiguration",
            "discovery": {"bootstrapToken": {"apiServerEndpoint": endpoint, "token": token, "caCertHashes": [pin]}},
            "nodeRegistration": {"name": name, "criSocket": "unix:///run/containerd/containerd.sock",
                                 "taints": [{"key": f"{DOMAIN}/not-validated", "value": "true",
                                             "effect": "NoSchedule"}],
                                 "kubeletExtraArgs": [{"name": "node-labels", "value": ",".join(
                                     f"{k}={v}" for k, v in labels.items())}]}}
    path = tmp_path / f"join-{name}.json"
    path.write_text(json.dumps(conf))
    return str(path)


def test_join_registers_labels_and_taint_then_kubelet_posts_ready(cluster, tmp_path, monkeypatch):
    srv, cp, node = cluster
    endpoint, token, pin = token_create(monkeypatch, cp)
    assert pin == srv.creds["ca_cert_hash"]
    monkeypatch.setenv("GPUNODE_SIM_ROOT", str(node))
    config = join_config(tmp_path, endpoint, token, pin, {f"{DOMAIN}/rail.count": "8"})
    rc, out, err = run(kubeadm, ["join", "--config", config])
    assert rc == 0, err
    assert "This node has joined the cluster" in out
    conf = json.loads((node / "etc/kubernetes/kubelet.conf").read_text())
    assert conf["users"][0]["name"] == "system:node:dgx01"
    flags = (node / "var/lib/kubelet/kubeadm-flags.env").read_text()
    assert f"--register-with-taints={DOMAIN}/not-validated=true:NoSchedule" in flags
    rc, out, err = kubectl_on(monkeypatch, cp, ["get", "node", "dgx01", "-o", "json"])
    assert rc == 0, err
    registered = json.loads(out)
    assert registered["metadata"]["labels"][f"{DOMAIN}/rail.count"] == "8"
    assert registered["spec"]["taints"] == [{"key": f"{DOMAIN}/not-validated", "value": "true",
                                             "effect": "NoSchedule"}]
    assert not kubeadm._ready(registered)
    rc, out, err = run(kubelet, ["--kubeconfig=/etc/kubernetes/kubelet.conf", "--once"])
    assert rc == 0, err
    rc, out, _ = kubectl_on(monkeypatch, cp, ["get", "nodes"])
    assert re.search(r"^dgx01\s+Ready\s", out, re.M), out
    # A second join: kubelet.conf exists (preflight), and after a reset the Ready Node refuses the join.
    rc, _, err = run(kubeadm, ["join", "--config", config])
    assert rc == 1 and "[ERROR FileAvailable--etc-kubernetes-kubelet.conf]" in err
    assert run(kubeadm, ["reset", "-f"])[0] == 0
    rc, _, err = run(kubeadm, ["join", "--config", config])
    assert rc == 1
    assert 'a Node with name "dgx01" and status "Ready" already exists in the cluster' in err


def test_kubelet_refuses_node_role_labels_like_the_real_one(cluster, tmp_path, monkeypatch):
    srv, cp, node = cluster
    endpoint, token, pin = token_create(monkeypatch, cp)
    monkeypatch.setenv("GPUNODE_SIM_ROOT", str(node))
    config = join_config(tmp_path, endpoint, token, pin, {"node-role.kubernetes.io/worker": ""})
    rc, _, err = run(kubeadm, ["join", "--config", config])
    assert rc == 1
    assert "unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: " \
           "['node-role.kubernetes.io/worker']" in err
    assert not (node / "etc/kubernetes/kubelet.conf").exists()
    rc, _, err = run(kubelet, ["--node-labels=node-role.kubernetes.io/worker="])
    assert rc == 1 and "failed to validate kubelet flags" in err


def test_wrong_ca_pin_and_expired_or_unknown_token_are_refused(cluster, tmp_path, monkeypatch):
    srv, cp, node = cluster
    endpoint, token, pin = token_create(monkeypatch, cp)
    monkeypatch.setenv("GPUNODE_SIM_ROOT", str(node))
    rc, _, err = run(kubeadm, ["join", "--config", join_config(tmp_path, endpoint, token, "sha256:" + "0" * 64, {})])
    assert rc == 1 and "none of the public keys" in err and pin in err
    rc, _, err = run(kubeadm, ["join", "--config", join_config(tmp_path, endpoint, "abcdef.0123456789abcdef", pin, {})])
    assert rc == 1 and "the TLS bootstrap failed: Unauthorized" in err


def test_token_secret_has_the_ttl(cluster, monkeypatch):
    srv, cp, _ = cluster
    _, token, _ = token_create(monkeypatch, cp)
    tid = token.split(".")[0]
    stored = next(o for o in json.loads((srv.state_dir / "objects.json").read_text())["objects"]
                  if o["metadata"]["name"] == f"bootstrap-token-{tid}")
    assert stored["type"] == "bootstrap.kubernetes.io/token"
    assert base64.b64decode(stored["data"]["expiration"]).decode().endswith("Z")


@pytest.mark.parametrize(("change", "message"), [
    ({"apiVersion": "kubeadm.k8s.io/v1beta2"}, 'no kind "JoinConfiguration" is registered for version'),
    ({"discovery": {}}, "bootstrapToken or file must be set"),
    ({"discovery": {"bootstrapToken": {"apiServerEndpoint": "127.0.0.1:1", "token": "abcdef.0123456789abcdef"}}},
     "using token-based discovery without caCertHashes can be unsafe"),
    ({"nodeRegistration": {"taints": [{"key": "a", "effect": "Never"}]}}, 'Unsupported value: "Never"'),
    ({"nodeRegistration": {"kubeletExtraArgs": {"node-labels": "a=b"}}}, "in v1beta4 this is a list"),
])
def test_join_configuration_validation(change, message):
    conf = {"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "JoinConfiguration",
            "discovery": {"bootstrapToken": {"apiServerEndpoint": "127.0.0.1:1", "token": "abcdef.0123456789abcdef",
                                             "caCertHashes": ["sha256:" + "a" * 64]}}}
    errors, _ = kubeadm.validate_join({**conf, **change})
    assert any(message in e for e in errors), errors


def test_config_validate_checks_without_joining(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUNODE_SIM_ROOT", str(tmp_path))
    good = join_config(tmp_path, "127.0.0.1:16443", "abcdef.0123456789abcdef", "sha256:" + "a" * 64,
                       {f"{DOMAIN}/x": "1"})
    assert run(kubeadm, ["config", "validate", "--config", good])[0] == 0
    bad = join_config(tmp_path, "127.0.0.1:16443", "abcdef.0123456789abcdef", "sha256:" + "a" * 64,
                      {"node-role.kubernetes.io/gpu": ""}, name="bad")
    rc, _, err = run(kubeadm, ["config", "validate", "--config", bad])
    assert rc == 1 and "node-role.kubernetes.io/gpu" in err
    assert not (tmp_path / "etc").exists()


def test_a_join_over_a_stale_node_sets_only_the_default_labels_like_the_real_kubelet(cluster, tmp_path, monkeypatch):
    """kubernetes/kubernetes pkg/kubelet/kubelet_node_status.go, tryRegisterWithAPIServer: on AlreadyExists the
    kubelet reconciles its default labels only; --node-labels and --register-with-taints are sent by a Create."""
    srv, cp, node = cluster
    core = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(srv.kubeconfig))
    core.create_node({"apiVersion": "v1", "kind": "Node",
                      "metadata": {"name": "dgx01", "labels": {"kubernetes.io/hostname": "old", "team": "a"}},
                      "spec": {"unschedulable": True,
                               "taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]}})
    endpoint, token, pin = token_create(monkeypatch, cp)
    monkeypatch.setenv("GPUNODE_SIM_ROOT", str(node))
    rc, _, err = run(kubeadm, ["join", "--config", join_config(tmp_path, endpoint, token, pin,
                                                               {f"{DOMAIN}/rail.count": "8"})])
    assert rc == 0, err
    stale = core.read_node("dgx01")
    assert stale.metadata.labels == {"kubernetes.io/hostname": "dgx01", "kubernetes.io/os": "linux",
                                     "kubernetes.io/arch": "amd64", "team": "a"}
    assert [t.key for t in stale.spec.taints] == ["node.kubernetes.io/unreachable"]  # no not-validated taint
    assert stale.spec.unschedulable is True
