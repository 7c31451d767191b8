"""The cluster_objects role with kubernetes.core against the API emulator: apply, re-run, prune, render.

The fleet is two hosts (connection local) carrying the discovery role's real output for the DGX H100
and HGX H100 profiles; the emulator has the Kueue CRDs from ../shared/schemas and the Multus
NetworkAttachmentDefinition CRD, and one Node per host as kubeadm registered it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import kubernetes
import pytest
import yaml
from kubernetes.dynamic import DynamicClient
from local_play import (
    fabric,
    free_port,  # tests/unit is on sys.path (rootdir-relative import mode)
)
from test_k8s_objects import discover  # tests/unit is on sys.path (rootdir-relative import mode)

from gpunode.kapi.server import RunningServer

pytestmark = pytest.mark.slow  # ansible-playbook runs on materialized hosts (README: slow tests)

REPO = Path(__file__).resolve().parents[2]
KUEUE = REPO.parent / "shared" / "schemas" / "kueue"
NAD_CRD = REPO / "tests" / "fixtures" / "crds" / "network-attachment-definitions.yaml"
PLAY = """---
- name: Publish the cluster objects
  hosts: gpu_nodes
  gather_facts: true
  roles:
    - role: mlplatform.gpunode.cluster_objects
"""


@pytest.fixture(scope="module")
def fleet_hw():
    return {p: discover(p) for p in ("dgx-h100", "hgx-h100")}


@pytest.fixture
def cluster(tmp_path):
    if not KUEUE.is_dir():
        pytest.skip(f"{KUEUE} is absent: the Kueue CRD schemas come from ../shared/schemas")
    with RunningServer(tmp_path / "kapi", free_port(16480, 16490)) as srv:
        dyn = DynamicClient(kubernetes.config.new_client_from_config(srv.kubeconfig))
        crds = dyn.resources.get(api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition")
        for path in [*sorted(KUEUE.glob("*.yaml")), NAD_CRD]:
            crds.create(body=yaml.safe_load(path.read_text()))
        nodes = dyn.resources.get(api_version="v1", kind="Node")
        for name in ("dgx01", "hgx01"):
            nodes.create(body={"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
        yield srv


def play(tmp_path, srv, fleet_hw, *args, **extra):
    inventory = {"all": {"children": {"gpu_nodes": {"hosts": {
        "dgx01": {"gpunode_hw": fleet_hw["dgx-h100"]}, "hgx01": {"gpunode_hw": fleet_hw["hgx-h100"]}}}},
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                 "cluster_objects_kubeconfig": srv.kubeconfig, "cluster_objects_sriov_rails_from_discovery": True,
                 "cluster_objects_tenants": [{"namespace": "team-a"}], **fabric(), **extra}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "play.yml").write_text(PLAY)
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".cache" / "collections"), "ANSIBLE_FORCE_COLOR": "0"}
    return subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(tmp_path / "hosts.yml"),
                           str(tmp_path / "play.yml"), *args], capture_output=True, text=True, env=env, check=False,
                          timeout=600)


def changed(proc) -> int:
    return sum(int(n) for n in re.findall(r"changed=(\d+)", proc.stdout))


def objects(srv) -> dict:
    state = json.loads((srv.state_dir / "objects.json").read_text())
    return {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in state["objects"]}


def test_apply_is_idempotent_and_prunes_stale_flavors(tmp_path, cluster, fleet_hw):
    proc = play(tmp_path, cluster, fleet_hw)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    objs = objects(cluster)
    flavors = sorted(k[2] for k in objs if k[0] == "ResourceFlavor")
    assert flavors == ["nvidia-h100-80gb-hbm3-dgx-default", "nvidia-h100-80gb-hbm3-hgx-default"]
    dgx = objs[("Node", None, "dgx01")]["metadata"]["labels"]
    assert dgx["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert dgx["node-restriction.kubernetes.io/platform"] == "dgx"
    assert objs[("LocalQueue", "team-a", "gpu")]["spec"]["clusterQueue"] == "gpu-default"
    config = json.loads(objs[("ConfigMap", "kube-system", "sriovdp-config")]["data"]["config.json"])
    assert config["resourceList"][0]["selectors"]["pfNames"] == ["ibp24s0#0-7", "enp26s0np0#0-7"]
    assert len([k for k in objs if k[0] == "NetworkAttachmentDefinition"]) == 8

    again = play(tmp_path, cluster, fleet_hw)
    assert again.returncode == 0, again.stdout[-3000:]
    assert changed(again) == 0, again.stdout[-3000:]

    # hgx01 moves to another fabric: its old flavor is stale and pruned, the new one appears.
    moved = play(tmp_path, cluster, fleet_hw, "-e", json.dumps({"gpunode_fabric": "east"}), "--limit", "all")
    assert moved.returncode == 0, moved.stdout[-3000:]
    flavors = sorted(k[2] for k in objects(cluster) if k[0] == "ResourceFlavor")
    assert flavors == ["nvidia-h100-80gb-hbm3-dgx-east", "nvidia-h100-80gb-hbm3-hgx-east"]
    assert sorted(k[2] for k in objects(cluster) if k[0] == "ClusterQueue") == ["gpu-east"]


def test_check_mode_changes_nothing(tmp_path, cluster, fleet_hw):
    before = objects(cluster)
    proc = play(tmp_path, cluster, fleet_hw, "--check")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert changed(proc) > 0
    assert objects(cluster).keys() == before.keys()


def test_render_mode_writes_manifests_and_a_kustomization(tmp_path, cluster, fleet_hw):
    # cluster_objects_render_dir left at its default: beside the inventory (tmp_path/hosts.yml), not in the
    # collection the playbook comes from.
    out = tmp_path / "rendered" / "cluster-objects"
    proc = play(tmp_path, cluster, fleet_hw, "-e", json.dumps({"cluster_objects_mode": "render"}))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    kustomization = yaml.safe_load((out / "kustomization.yaml").read_text())
    assert "resourceflavor-cluster-nvidia-h100-80gb-hbm3-dgx-default.yaml" in kustomization["resources"]
    for name in kustomization["resources"]:
        assert yaml.safe_load((out / name).read_text())["metadata"]["name"]
    assert yaml.safe_load((out / "node-labels" / "hgx01.yaml").read_text())["metadata"]["labels"][
        "nvidia.com/gpu.machine"] == "PowerEdge-XE9680"
    assert not any(k[0] == "ResourceFlavor" for k in objects(cluster))


def test_a_missing_crd_fails_before_anything_is_applied_naming_it(tmp_path, fleet_hw):
    """Only the Kueue CRDs are installed (no Multus): the CRD check names the NetworkAttachmentDefinition
    CRD and the hint, and no Node label, flavor or queue is written."""
    if not KUEUE.is_dir():
        pytest.skip(f"{KUEUE} is absent: the Kueue CRD schemas come from ../shared/schemas")
    with RunningServer(tmp_path / "kapi", free_port(16480, 16490)) as srv:
        dyn = DynamicClient(kubernetes.config.new_client_from_config(srv.kubeconfig))
        crds = dyn.resources.get(api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition")
        for path in sorted(KUEUE.glob("*.yaml")):
            crds.create(body=yaml.safe_load(path.read_text()))
        nodes = dyn.resources.get(api_version="v1", kind="Node")
        for name in ("dgx01", "hgx01"):
            nodes.create(body={"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
        proc = play(tmp_path, srv, fleet_hw)
        assert proc.returncode != 0, proc.stdout[-3000:]
        out = " ".join(proc.stdout.split())
        assert "CRDs not installed in the cluster: network-attachment-definitions.k8s.cni.cncf.io" in out, out[-3000:]
        assert "resourceflavors.kueue.x-k8s.io" not in out.split("CRDs not installed in the cluster:")[1][:200]
        assert "cluster_objects_mode: render" in out
        objs = objects(srv)
        assert not [k for k in objs if k[0] in ("ResourceFlavor", "ClusterQueue", "LocalQueue")]
        assert all(not o["metadata"].get("labels") for k, o in objs.items() if k[0] == "Node")


def test_topology_labels_the_topology_and_the_flavors_topology_name(tmp_path, cluster, fleet_hw):
    """site.yml's Contract play registered the topology (gpunode_topology): the Nodes get its labels, Kueue's
    Topology exists (validated by the emulator against Kueue's CRD) and both flavors name it; a re-run changes
    nothing."""
    keys = {"block": "gpunode.mlplatform.io/topology-block", "rack": "gpunode.mlplatform.io/topology-rack"}
    topology = {"label_keys": keys, "labels": {"dgx01": {keys["block"]: "east", keys["rack"]: "su1-leaf0"},
                                               "hgx01": {keys["block"]: "east", keys["rack"]: "su2-leaf0"}}}
    proc = play(tmp_path, cluster, fleet_hw, "-e", json.dumps({"gpunode_topology": topology}))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    objs = objects(cluster)
    assert objs[("Topology", None, "gpu-fabric")]["spec"]["levels"] == [
        {"nodeLabel": keys["block"]}, {"nodeLabel": keys["rack"]}, {"nodeLabel": "kubernetes.io/hostname"}]
    assert {o["spec"]["topologyName"] for k, o in objs.items() if k[0] == "ResourceFlavor"} == {"gpu-fabric"}
    assert objs[("Node", None, "hgx01")]["metadata"]["labels"][keys["rack"]] == "su2-leaf0"
    again = play(tmp_path, cluster, fleet_hw, "-e", json.dumps({"gpunode_topology": topology}))
    assert again.returncode == 0 and changed(again) == 0, again.stdout[-3000:]
