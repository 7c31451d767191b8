"""Kubernetes objects generated from discovered hardware (module_utils/k8s_objects, the cluster_objects and
join_configuration filters).

The hardware facts are the real discovery role's output on the simulator's DGX H100 and HGX H100
(XE9680-like) trees; rendered objects are validated with kubernetes-validate (core kinds) and against
the Kueue v1beta2 CRD schemas in ../shared/schemas.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml
from ansible_collections.mlplatform.gpunode.plugins.module_utils import k8s_objects
from ansible_collections.mlplatform.gpunode.plugins.module_utils.intent import resolve_fleet
from local_play import fabric

from gpunode.sim.profile import load_profile
from gpunode.sim.sysfs import materialize

REPO = Path(__file__).resolve().parents[2]
KUEUE = REPO.parent / "shared" / "schemas" / "kueue"
DOMAIN = "gpunode.mlplatform.io"
TRUSTED = "node-restriction.kubernetes.io"
SETTINGS = {
    "domain": DOMAIN, "trusted_prefix": TRUSTED, "cluster_queue_prefix": "gpu", "cohort": "gpunode",
    "local_queue_name": "gpu", "tenants": [{"namespace": "team-a"}, {"namespace": "team-b"}],
    "flavor_taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
    "cpu_reserved": 4, "memory_reserved_mib": 16384, "device_plugin_namespace": "kube-system",
    "device_plugin_configmap": "sriovdp-config", "network_namespace": "default", "rail_cidr": "10.220.0.0/16",
    "resource_prefix": "nvidia.com",
}


@functools.cache
def discover(profile: str) -> dict:
    """gpunode_hw as the discovery role publishes it for a profile's materialized sysfs tree (once per session)."""
    tmp = Path(tempfile.mkdtemp(prefix=f"gpunode-k8s-{profile}-"))
    tree = tmp / "sys"
    materialize(load_profile(profile), tree)
    inventory = tmp / "hosts.yml"
    inventory.write_text("all:\n  children:\n    gpu_nodes:\n      hosts:\n        node1:\n"
                         "          ansible_connection: local\n"
                         f"          ansible_python_interpreter: {sys.executable}\n")
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
           "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".cache" / "collections")}
    proc = subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(inventory),
                           str(REPO / "playbooks" / "discover.yml"), "-e",
                           json.dumps({"discovery_sysfs_root": str(tree), "discovery_results_dir": str(tmp / "r"),
                                       **fabric()})],
                          capture_output=True, text=True, env=env, check=False, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    hw = json.loads((tmp / "r" / "discovery.json").read_text())
    shutil.rmtree(tmp, ignore_errors=True)
    return hw


@pytest.fixture(scope="module")
def fleet_hw() -> dict:
    return {p: discover(p) for p in ("dgx-h100", "hgx-h100")}


def fleet(fleet_hw, fabric_of=None) -> dict:
    fabric_of = fabric_of or {}
    hosts = {}
    for name, profile in (("dgx01", "dgx-h100"), ("dgx02", "dgx-h100"), ("hgx01", "hgx-h100")):
        hw = fleet_hw[profile]
        hosts[name] = {"hw": hw, "node_name": name, "fabric": fabric_of.get(name, "default"),
                       "transport": "roce", "cpu": 224, "memory_mib": 2097152,
                       "sriov_rails": k8s_objects.sriov_rails_from_hw(hw, 8), "adaptive_routing": "enabled"}
    return hosts


def kueue_schema(plural: str) -> dict:
    if not KUEUE.is_dir():
        pytest.skip(f"{KUEUE} is absent: the Kueue CRD schemas come from ../shared/schemas")
    crd = yaml.safe_load((KUEUE / f"kueue.x-k8s.io_{plural}.yaml").read_text())
    return next(v for v in crd["spec"]["versions"] if v["name"] == "v1beta2")["schema"]["openAPIV3Schema"]


def test_flavors_one_per_product_platform_fabric_with_trusted_labels_and_taints(fleet_hw):
    out = k8s_objects.build(fleet(fleet_hw), SETTINGS)
    flavors = {f["metadata"]["name"]: f["spec"] for f in out["resource_flavors"]}
    assert sorted(flavors) == ["nvidia-h100-80gb-hbm3-dgx-default", "nvidia-h100-80gb-hbm3-hgx-default"]
    assert flavors["nvidia-h100-80gb-hbm3-dgx-default"]["nodeLabels"] == {
        f"{TRUSTED}/gpu.product": "NVIDIA-H100-80GB-HBM3", f"{TRUSTED}/platform": "dgx", f"{TRUSTED}/fabric": "default"}
    assert flavors["nvidia-h100-80gb-hbm3-hgx-default"]["nodeTaints"] == SETTINGS["flavor_taints"]
    assert flavors["nvidia-h100-80gb-hbm3-hgx-default"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}]
    # A second fabric makes two more flavors and a second ClusterQueue.
    out2 = k8s_objects.build(fleet(fleet_hw, {"dgx02": "east"}), SETTINGS)
    assert [f["metadata"]["name"] for f in out2["resource_flavors"]] == [
        "nvidia-h100-80gb-hbm3-dgx-default", "nvidia-h100-80gb-hbm3-dgx-east", "nvidia-h100-80gb-hbm3-hgx-default"]
    assert [q["metadata"]["name"] for q in out2["cluster_queues"]] == ["gpu-default", "gpu-east"]


def test_cluster_queue_quotas_are_the_counted_totals(fleet_hw):
    out = k8s_objects.build(fleet(fleet_hw), SETTINGS)
    (cq,) = out["cluster_queues"]
    group = cq["spec"]["resourceGroups"][0]
    assert group["coveredResources"] == ["cpu", "memory", "nvidia.com/gpu"] + [f"nvidia.com/rail{n}" for n in range(8)]
    quotas = {f["name"]: {r["name"]: r["nominalQuota"] for r in f["resources"]} for f in group["flavors"]}
    dgx = quotas["nvidia-h100-80gb-hbm3-dgx-default"]
    assert dgx["nvidia.com/gpu"] == 16  # two DGX H100 x 8 GPUs
    assert dgx["cpu"] == 2 * (224 - 4)
    assert dgx["memory"] == f"{2 * (2097152 - 16384)}Mi"
    assert dgx["nvidia.com/rail0"] == 16  # 8 VFs per rail PF per host
    assert quotas["nvidia-h100-80gb-hbm3-hgx-default"]["nvidia.com/gpu"] == 8
    assert cq["spec"]["cohortName"] == "gpunode"
    assert [(q["metadata"]["namespace"], q["spec"]["clusterQueue"]) for q in out["local_queues"]] == [
        ("team-a", "gpu-default"), ("team-b", "gpu-default")]


def test_device_plugin_config_lists_each_rails_pf_of_every_host(fleet_hw):
    out = k8s_objects.build(fleet(fleet_hw), SETTINGS)
    config = json.loads(out["device_plugin_configmap"]["data"]["config.json"])
    resources = {r["resourceName"]: r for r in config["resourceList"]}
    assert sorted(resources) == [f"rail{n}" for n in range(8)]
    dgx_pfs = [r["netdev"] for r in fleet_hw["dgx-h100"]["rails"]]
    hgx_pfs = [r["netdev"] for r in fleet_hw["hgx-h100"]["rails"]]
    assert dgx_pfs[0] == "ibp24s0"  # DGX H100 rail 0 (User Guide table in real-outputs)
    for rail in range(8):
        sel = resources[f"rail{rail}"]["selectors"]
        assert sel["pfNames"] == [f"{dgx_pfs[rail]}#0-7", f"{hgx_pfs[rail]}#0-7"]
        assert sel["devices"] == ["101e"] and sel["vendors"] == ["15b3"] and sel["isRdma"] is True
        assert resources[f"rail{rail}"]["resourcePrefix"] == "nvidia.com"
    nads = out["network_attachment_definitions"]
    assert [n["metadata"]["name"] for n in nads] == [f"rail{n}" for n in range(8)]
    assert nads[3]["metadata"]["annotations"]["k8s.v1.cni.cncf.io/resourceName"] == "nvidia.com/rail3"
    assert json.loads(nads[3]["spec"]["config"])["ipam"]["range"] == "10.220.3.0/24"


def test_admin_labels_are_gfd_nfd_compatible(fleet_hw):
    out = k8s_objects.build(fleet(fleet_hw), SETTINGS)
    dgx, hgx = out["node_labels"]["dgx01"], out["node_labels"]["hgx01"]
    assert dgx["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert dgx["nvidia.com/gpu.count"] == "8"
    assert dgx["nvidia.com/gpu.machine"] == "NVIDIA-DGX-H100"
    assert hgx["nvidia.com/gpu.machine"] == "PowerEdge-XE9680"
    assert dgx["feature.node.kubernetes.io/pci-15b3.present"] == "true"
    assert dgx[f"{DOMAIN}/rail.count"] == "8"
    assert dgx[f"{DOMAIN}/adaptive-routing"] == "enabled"
    assert hgx[f"{TRUSTED}/platform"] == "hgx"


def test_rendered_objects_validate_against_real_schemas(fleet_hw):
    out = k8s_objects.build(fleet(fleet_hw), SETTINGS)
    for obj in [*out["namespaces"], out["device_plugin_configmap"]]:
        kubernetes_validate.validate(obj, "1.33", strict=True)
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "dgx01", "labels": out["node_labels"]["dgx01"]}}
    kubernetes_validate.validate(node, "1.33", strict=True)
    for plural, objs in (("resourceflavors", out["resource_flavors"]), ("clusterqueues", out["cluster_queues"]),
                         ("localqueues", out["local_queues"])):
        schema = kueue_schema(plural)
        for obj in objs:
            jsonschema.validate(obj, schema)


def test_missing_sriov_rails_names_the_host(fleet_hw):
    hosts = fleet(fleet_hw)
    hosts["hgx01"]["sriov_rails"] = []
    with pytest.raises(k8s_objects.K8sObjectsError, match="host hgx01: sriov_rails is empty"):
        k8s_objects.build(hosts, SETTINGS)


DISCOVERY = {"api_server": "127.0.0.1:16443", "token": "abcdef.0123456789abcdef",
             "ca_cert_hashes": ["sha256:" + "a" * 64]}
TAINTS = [{"key": f"{DOMAIN}/not-validated", "value": "true", "effect": "NoSchedule"}]


def test_join_configuration_carries_self_labels_and_the_not_validated_taint(fleet_hw):
    labels = k8s_objects.self_labels(fleet_hw["dgx-h100"], DOMAIN, "default", "infiniband")
    conf = k8s_objects.join_configuration("dgx01", labels, TAINTS, DOMAIN, DISCOVERY)
    assert conf["apiVersion"] == "kubeadm.k8s.io/v1beta4"
    assert conf["nodeRegistration"]["taints"] == TAINTS
    (arg,) = conf["nodeRegistration"]["kubeletExtraArgs"]
    assert arg["name"] == "node-labels"
    assert f"{DOMAIN}/rail.count=8" in arg["value"].split(",")
    assert "feature.node.kubernetes.io/pci-15b3.present=true" in arg["value"].split(",")
    assert conf["discovery"]["bootstrapToken"]["caCertHashes"] == DISCOVERY["ca_cert_hashes"]


@pytest.mark.parametrize("key", ["node-role.kubernetes.io/worker", "node-restriction.kubernetes.io/trusted"])
def test_node_role_label_in_node_labels_is_rejected_with_a_clear_message(key):
    with pytest.raises(k8s_objects.K8sObjectsError) as err:
        k8s_objects.join_configuration("dgx01", {key: "", f"{DOMAIN}/x": "1"}, TAINTS, DOMAIN, DISCOVERY)
    msg = str(err.value)
    assert msg.startswith("node dgx01: kubernetes_node_labels: ")
    assert f"label {key!r} may not be self-reported by the kubelet" in msg
    assert "cluster_objects role" in msg


@pytest.mark.parametrize(("key", "ok"), [
    ("node.kubernetes.io/instance-type", True), ("feature.node.kubernetes.io/pci-15b3.present", True),
    (f"{DOMAIN}/fabric", True), (f"sub.{DOMAIN}/x", True), ("kubernetes.io/hostname", False),
    ("kubernetes.io/foo", False), ("example.com/x", False),
])
def test_kubelet_label_rules(key, ok):
    assert (k8s_objects.kubelet_label_errors({key: "v"}, DOMAIN) == []) is ok


@pytest.mark.parametrize(("change", "message"), [
    ({"token": "not-a-token"}, "bootstrap token is not of the form"),
    ({"ca_cert_hashes": []}, "unpinned discovery is refused"),
    ({"api_server": "https://x"}, "must be host:port"),
])
def test_join_configuration_refuses_bad_discovery(change, message):
    with pytest.raises(k8s_objects.K8sObjectsError, match=message):
        k8s_objects.join_configuration("n", {}, TAINTS, DOMAIN, {**DISCOVERY, **change})


def test_adaptive_routing_mode_from_contract_entries():
    entry = {"scope": "rail", "setting": "adaptive_routing_forced_en", "value": "0x1"}
    assert k8s_objects.adaptive_routing_mode([entry, entry]) == "enabled"
    assert k8s_objects.adaptive_routing_mode([entry, {**entry, "value": "0x0"}]) == "mixed"
    assert k8s_objects.adaptive_routing_mode([]) == "unknown"


def test_cluster_objects_inputs_take_capacity_from_the_host_read_when_facts_were_not_gathered(fleet_hw):
    from ansible_collections.mlplatform.gpunode.plugins.filter import k8s_objects as k8s_filter

    hw = next(iter(fleet_hw.values()))
    intent = resolve_fleet({h: fabric() for h in ("gathered", "read", "neither")})
    hostvars = {
        # Facts gathered: they win (the setup module's processor_vcpus and memtotal_mb).
        "gathered": {"gpunode_hw": hw, "ansible_facts": {"processor_vcpus": 224, "memtotal_mb": 2063731},
                     "gpunode_host_state": {"capacity": {"cpu": 8, "memory_mib": 1024}}},
        # Not gathered: the discovery role's read counts them.
        "read": {"gpunode_hw": hw, "gpunode_host_state": {"capacity": {"cpu": 224, "memory_mib": 2063731}}},
        "neither": {"gpunode_hw": hw},
    }
    for host in hostvars.values():
        host["gpunode_intent"] = intent
    out = k8s_filter.cluster_objects_inputs(hostvars, list(hostvars))
    assert (out["gathered"]["cpu"], out["gathered"]["memory_mib"]) == (224, 2063731)
    assert (out["read"]["cpu"], out["read"]["memory_mib"]) == (224, 2063731)
    assert (out["neither"]["cpu"], out["neither"]["memory_mib"]) == (0, 0)


def test_apply_plan_keeps_only_what_the_cluster_does_not_hold():
    from ansible_collections.mlplatform.gpunode.plugins.module_utils.k8s_objects import K8sObjectsError, apply_plan

    flavor = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "h100"},
              "spec": {"nodeLabels": {"a": "1"}}}
    queue = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "gpu"},
             "spec": {"resourceGroups": [{"flavors": [{"name": "h100", "resources": [
                 {"name": "nvidia.com/gpu", "nominalQuota": 8}]}]}]}}
    local = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
             "metadata": {"name": "gpu", "namespace": "team-a"}, "spec": {"clusterQueue": "gpu"}}
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"x": "1", "old": None}}}
    # as the API returns them: server-side metadata, defaults, status, a quantity as a string
    live = [
        {**flavor, "metadata": {"name": "h100", "uid": "u1", "resourceVersion": "7"}, "status": {}},
        {**queue, "spec": {"resourceGroups": [{"flavors": [{"name": "h100", "resources": [
            {"name": "nvidia.com/gpu", "nominalQuota": "8"}]}]}], "queueingStrategy": "BestEffortFIFO"}},
        {"kind": "Node", "metadata": {"name": "n1", "labels": {"x": "1", "kubernetes.io/hostname": "n1"}}},
    ]
    assert apply_plan([flavor, queue, local, node], live) == [local]  # the LocalQueue is absent
    changed = {**flavor, "spec": {"nodeLabels": {"a": "2"}}}
    assert apply_plan([changed], live) == [changed]
    # a label to remove (None) that is still there; a list of another length; a boolean against a number
    stale = {"kind": "Node", "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": None}}}
    assert apply_plan([stale], live) == [stale]
    shorter = {**queue, "spec": {"resourceGroups": []}}
    assert apply_plan([shorter], live) == [shorter]
    flag = {"kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"on": True}}
    assert apply_plan([flag], [{"kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"on": 1}}]) == [flag]
    with pytest.raises(K8sObjectsError, match="without kind or metadata.name"):
        apply_plan([{"kind": "Node"}], live)


def test_topology_labels_a_kueue_topology_and_topology_name_on_the_flavors(fleet_hw):
    keys = {"block": "gpunode.mlplatform.io/topology-block", "rack": "gpunode.mlplatform.io/topology-rack"}
    hosts = fleet(fleet_hw)
    for name, rack in (("dgx01", "su1-leaf0"), ("dgx02", "su1-leaf0"), ("hgx01", "su2-leaf0")):
        hosts[name]["topology_labels"] = {keys["block"]: "east", keys["rack"]: rack}
    out = k8s_objects.build(hosts, {**SETTINGS, "topology": {"name": "gpu-fabric", "keys": keys}})
    (topo,) = out["topologies"]
    assert topo["spec"]["levels"] == [{"nodeLabel": keys["block"]}, {"nodeLabel": keys["rack"]},
                                      {"nodeLabel": "kubernetes.io/hostname"}]
    assert {f["spec"]["topologyName"] for f in out["resource_flavors"]} == {"gpu-fabric"}
    assert out["node_labels"]["hgx01"][keys["rack"]] == "su2-leaf0"
    # Created before the flavors that name it; both valid against Kueue's CRDs.
    kinds = [m["object"]["kind"] for m in out["manifests"]]
    assert kinds.index("Topology") < kinds.index("ResourceFlavor")
    jsonschema.validate(topo, kueue_schema("topologies"))
    for flavor in out["resource_flavors"]:
        jsonschema.validate(flavor, kueue_schema("resourceflavors"))
    # Without a topology nothing changes.
    plain = k8s_objects.build(fleet(fleet_hw), SETTINGS)
    assert plain["topologies"] == [] and all("topologyName" not in f["spec"] for f in plain["resource_flavors"])
    with pytest.raises(k8s_objects.K8sObjectsError, match="cluster_objects_topology_name 'Bad_Name'"):
        k8s_objects.build(hosts, {**SETTINGS, "topology": {"name": "Bad_Name", "keys": keys}})
