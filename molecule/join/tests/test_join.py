"""Verify the join on the simulated fleet and the objects in the API emulator.

Host state is read on each host (testinfra); the cluster state is the emulator's ``objects.json``
in the scenario's ephemeral directory (the API server's storage, written on every change).
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest

EPHEMERAL = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"])
DOMAIN = "gpunode.mlplatform.io"
NOT_VALIDATED = {"key": f"{DOMAIN}/not-validated", "value": "true", "effect": "NoSchedule"}
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
GPU_HOSTS = {"k8-dgx": "dgx", "k8-hgx": "hgx"}


def cluster() -> dict:
    state = json.loads((EPHEMERAL / "kapi" / "objects.json").read_text())
    return {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in state["objects"]}


@pytest.fixture
def gpu_host(host):
    name = host.backend.get_hostname()
    if name not in GPU_HOSTS:
        pytest.skip(f"{name} is the control plane")
    return host, name


def test_right_after_join_the_node_has_its_self_labels_and_the_not_validated_taint(gpu_host):
    host, name = gpu_host
    registered = json.loads(host.file("/var/lib/gpunode/kubernetes_node.json").content_string)
    labels = registered["labels"]
    assert labels[f"{DOMAIN}/rail.count"] == "8"
    assert labels[f"{DOMAIN}/gpu.count"] == "8"
    assert labels[f"{DOMAIN}/platform"] == GPU_HOSTS[name]
    assert labels[f"{DOMAIN}/fabric"] == "default"
    assert labels["feature.node.kubernetes.io/pci-15b3.present"] == "true"
    assert not any(k.startswith(("node-role.kubernetes.io/", "node-restriction.kubernetes.io/")) for k in labels)
    assert "nvidia.com/gpu.product" not in labels  # admin labels come later, from the controller
    assert registered["taints"] == [NOT_VALIDATED, GPU_TAINT]
    flags = host.file("/var/lib/kubelet/kubeadm-flags.env").content_string
    assert f"--register-with-taints={DOMAIN}/not-validated=true:NoSchedule,nvidia.com/gpu=present:NoSchedule" in flags
    assert host.file("/etc/kubernetes/kubelet.conf").mode == 0o600
    assert not host.file("/etc/kubernetes/kubeadm-join.json").exists


def test_node_is_ready_and_still_tainted_not_validated(gpu_host):
    host, name = gpu_host
    node = cluster()[("Node", None, name)]
    conditions = {c["type"]: c["status"] for c in node["status"]["conditions"]}
    assert conditions["Ready"] == "True"
    assert NOT_VALIDATED in node["spec"]["taints"]
    assert host.service("kubelet").is_running
    assert host.service("kubelet").is_enabled


def test_admin_labels_from_the_controller(gpu_host):
    host, name = gpu_host
    labels = cluster()[("Node", None, name)]["metadata"]["labels"]
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["nvidia.com/gpu.count"] == "8"
    assert labels["node-restriction.kubernetes.io/platform"] == GPU_HOSTS[name]
    assert labels[f"{DOMAIN}/adaptive-routing"] == "unknown"  # no firmware contract in this scenario
    machine = {"k8-dgx": "NVIDIA-DGX-H100", "k8-hgx": "PowerEdge-XE9680"}[name]
    assert labels["nvidia.com/gpu.machine"] == machine


def test_packages_pinned_held_and_containerd_has_the_nvidia_runtime(gpu_host):
    host, _ = gpu_host
    for pkg in ("kubelet", "kubeadm", "kubectl"):
        assert host.package(pkg).version == "1.33.4-1.1"
    held = host.check_output("apt-mark showhold").split()
    assert sorted(p for p in held if p.startswith("kube")) == ["kubeadm", "kubectl", "kubelet"]
    dump = host.check_output("containerd config dump")
    assert 'BinaryName = "/usr/bin/nvidia-container-runtime"' in dump
    assert 'default_runtime_name = "nvidia"' in dump
    assert "br_netfilter" in host.file("/etc/modules-load.d/kubernetes.conf").content_string
    assert "net.ipv4.ip_forward=1" in host.file("/etc/sysctl.d/99-kubernetes.conf").content_string.replace(" ", "")


def test_flavors_and_queues():
    objs = cluster()
    flavors = {k[2]: o["spec"] for k, o in objs.items() if k[0] == "ResourceFlavor"}
    assert sorted(flavors) == ["nvidia-h100-80gb-hbm3-dgx-default", "nvidia-h100-80gb-hbm3-hgx-default"]
    assert flavors["nvidia-h100-80gb-hbm3-hgx-default"]["nodeLabels"] == {
        "node-restriction.kubernetes.io/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "node-restriction.kubernetes.io/platform": "hgx", "node-restriction.kubernetes.io/fabric": "default"}
    cq = objs[("ClusterQueue", None, "gpu-default")]["spec"]
    flavors_of_cq = cq["resourceGroups"][0]["flavors"]
    quotas = {f["name"]: {r["name"]: r["nominalQuota"] for r in f["resources"]} for f in flavors_of_cq}
    assert quotas["nvidia-h100-80gb-hbm3-dgx-default"]["nvidia.com/gpu"] == 8
    assert quotas["nvidia-h100-80gb-hbm3-hgx-default"]["nvidia.com/gpu"] == 8
    assert quotas["nvidia-h100-80gb-hbm3-dgx-default"]["nvidia.com/rail7"] == 8
    assert quotas["nvidia-h100-80gb-hbm3-dgx-default"]["cpu"] == os.cpu_count()  # containers see the host's CPUs
    for ns in ("team-a", "team-b"):
        assert objs[("LocalQueue", ns, "gpu")]["spec"]["clusterQueue"] == "gpu-default"


def test_device_plugin_config_lists_exactly_each_rails_pf(gpu_host):
    host, _ = gpu_host
    rails = json.loads(host.file("/var/lib/gpunode/discovery.json").content_string)["rails"]
    config = json.loads(cluster()[("ConfigMap", "kube-system", "sriovdp-config")]["data"]["config.json"])
    resources = {r["resourceName"]: r["selectors"] for r in config["resourceList"]}
    assert sorted(resources) == [f"rail{r['rail']}" for r in sorted(rails, key=lambda r: r["rail"])]
    for rail in rails:
        pfs = resources[f"rail{rail['rail']}"]["pfNames"]
        assert f"{rail['netdev']}#0-7" in pfs
        assert len(pfs) == len(GPU_HOSTS)  # one PF per host per rail, nothing else
    assert all(s["devices"] == ["101e"] and s["isRdma"] for s in resources.values())


def test_no_bootstrap_token_in_any_log_or_artifact(host):
    tokens = []
    for obj in cluster().values():
        if obj["kind"] == "Secret" and obj.get("type") == "bootstrap.kubernetes.io/token":
            data = {k: base64.b64decode(v).decode() for k, v in obj["data"].items()}
            tokens.append((f"{data['token-id']}.{data['token-secret']}", data["token-secret"]))
    assert tokens, "no bootstrap token was created"
    for full, secret in tokens:
        assert "expiration" in next(o for o in cluster().values()
                                    if o["metadata"]["name"] == f"bootstrap-token-{full.split('.')[0]}")["data"]
        for path in EPHEMERAL.rglob("*"):
            if path.is_file():
                text = path.read_bytes()
                assert secret.encode() not in text, f"the token secret is in {path}"
        # The search pattern must not contain the secret itself: the command line of this very
        # search is logged (journal, ansible.log, AnsiballZ files). "a()b()c" matches "abc" only.
        pattern = "()".join(secret)
        found = host.run(f"grep -rlE '{pattern}' /etc /var/lib/kubelet /var/lib/gpunode /var/log /root /tmp")
        assert found.stdout.strip() == "", f"the token secret is on {host.backend.get_hostname()}: {found.stdout}"
    assert (EPHEMERAL / "ansible.log").stat().st_size > 0
