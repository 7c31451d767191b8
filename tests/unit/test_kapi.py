"""The Kubernetes API emulator (gpunode.kapi) answers as the real API server does for what the roles use.

Driven with the official ``kubernetes`` client (the library kubernetes.core is built on) over HTTPS
with the emulator's CA, plus the store directly for the patch and selector rules.
"""

from __future__ import annotations

import base64
import datetime
import json
from pathlib import Path

import kubernetes
import pytest
import yaml
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import ApiException
from local_play import free_port  # tests/unit is on sys.path (rootdir-relative import mode)

from gpunode.kapi.server import RunningServer, spki_sha256
from gpunode.kapi.store import ApiError, Store, parse_label_selector, selector_matches, strategic_merge_patch

SCHEMAS = Path(__file__).resolve().parents[3] / "shared" / "schemas" / "kueue"


@pytest.fixture
def kapi(tmp_path):
    with RunningServer(tmp_path / "kapi", free_port(16470, 16480)) as srv:
        yield srv


def _client(kubeconfig: str) -> DynamicClient:
    return DynamicClient(kubernetes.config.new_client_from_config(kubeconfig))


def test_crud_patch_and_selectors_through_the_official_client(kapi):
    dyn = _client(kapi.kubeconfig)
    nodes = dyn.resources.get(api_version="v1", kind="Node")
    nodes.create(body={"apiVersion": "v1", "kind": "Node",
                       "metadata": {"name": "n1", "labels": {"a": "1"}},
                       "spec": {"taints": [{"key": "x/not-validated", "effect": "NoSchedule"}]}})
    nodes.create(body={"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n2", "labels": {"a": "2"}}})
    assert [n.metadata.name for n in nodes.get(label_selector="a in (1,3)").items] == ["n1"]
    assert [n.metadata.name for n in nodes.get(label_selector="a!=1").items] == ["n2"]
    rv = nodes.get(name="n1").metadata.resourceVersion
    nodes.patch(name="n1", body={"metadata": {"labels": {"b": "x"}},
                                 "spec": {"taints": [{"key": "y", "effect": "NoExecute"}]}},
                content_type="application/strategic-merge-patch+json")
    n1 = nodes.get(name="n1")
    assert dict(n1.metadata.labels) == {"a": "1", "b": "x"}
    assert [t.key for t in n1.spec.taints] == ["x/not-validated", "y"]  # taints merge by key
    assert n1.metadata.resourceVersion != rv
    with pytest.raises(ApiException) as err:
        nodes.create(body={"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    assert err.value.status == 409
    with pytest.raises(ApiException) as err:
        nodes.replace(body={"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "resourceVersion": rv}})
    assert err.value.status == 409  # stale resourceVersion
    nodes.delete(name="n2")
    assert [n.metadata.name for n in nodes.get().items] == ["n1"]
    # Everything is persisted: a new server on the same state directory sees n1.
    state = json.loads((kapi.state_dir / "objects.json").read_text())
    assert any(o["kind"] == "Node" and o["metadata"]["name"] == "n1" for o in state["objects"])


def test_json_patch_and_an_empty_merge_list(kapi):
    dyn = _client(kapi.kubeconfig)
    nodes = dyn.resources.get(api_version="v1", kind="Node")
    taint = {"key": "x/not-validated", "effect": "NoSchedule"}
    nodes.create(body={"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}, "spec": {"taints": [taint]}})
    # A strategic merge patch merges taints by key: `taints: []` removes nothing (as on a real server).
    nodes.patch(name="n1", body={"spec": {"taints": []}}, content_type="application/strategic-merge-patch+json")
    assert [t.key for t in nodes.get(name="n1").spec.taints] == ["x/not-validated"]
    # JSON patch (RFC 6902): a failed test changes nothing and answers 422; test + remove removes.
    with pytest.raises(ApiException) as err:
        nodes.patch(name="n1", body=[{"op": "test", "path": "/spec/taints/0/key", "value": "other"},
                                     {"op": "remove", "path": "/spec/taints/0"}],
                    content_type="application/json-patch+json")
    assert err.value.status == 422
    assert [t.key for t in nodes.get(name="n1").spec.taints] == ["x/not-validated"]
    nodes.patch(name="n1", body=[{"op": "test", "path": "/spec/taints/0/key", "value": "x/not-validated"},
                                 {"op": "remove", "path": "/spec/taints/0"}],
                content_type="application/json-patch+json")
    assert not nodes.get(name="n1").spec.taints
    with pytest.raises(ApiException) as err:
        nodes.patch(name="n1", body=[{"op": "remove", "path": "/spec/taints/3"}],
                    content_type="application/json-patch+json")
    assert err.value.status == 422


def test_status_subresource_and_dry_run(kapi):
    dyn = _client(kapi.kubeconfig)
    nodes = dyn.resources.get(api_version="v1", kind="Node")
    nodes.create(body={"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    ready = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    nodes.patch(name="n1", body=ready, content_type="application/merge-patch+json")
    assert nodes.get(name="n1").status is None or not nodes.get(name="n1").status.conditions
    nodes.status.patch(name="n1", body=ready, content_type="application/merge-patch+json")
    assert nodes.get(name="n1").status.conditions[0].type == "Ready"
    nodes.patch(name="n1", body={"metadata": {"labels": {"z": "1"}}}, dry_run="All",
                content_type="application/merge-patch+json")
    assert not nodes.get(name="n1").metadata.labels


def test_namespaced_objects_need_their_namespace(kapi):
    cms = _client(kapi.kubeconfig).resources.get(api_version="v1", kind="ConfigMap")
    with pytest.raises(ApiException) as err:
        cms.create(namespace="nope", body={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}})
    assert err.value.status == 404
    assert json.loads(err.value.body)["message"] == 'namespaces "nope" not found'


@pytest.fixture
def kueue_crds():
    if not SCHEMAS.is_dir():
        pytest.skip(f"{SCHEMAS} is absent: the Kueue CRD schemas come from ../shared/schemas")
    return [yaml.safe_load(p.read_text()) for p in sorted(SCHEMAS.glob("*.yaml"))]


def test_crds_are_discoverable_validated_and_refuse_strategic_merge(kapi, kueue_crds):
    dyn = _client(kapi.kubeconfig)
    crd_api = dyn.resources.get(api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition")
    for crd in kueue_crds:
        crd_api.create(body=crd)
    dyn = _client(kapi.kubeconfig)  # fresh discovery
    flavors = dyn.resources.get(api_version="kueue.x-k8s.io/v1beta2", kind="ResourceFlavor")
    flavors.create(body={"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                         "metadata": {"name": "h100"}, "spec": {"nodeLabels": {"a": "b"}}})
    with pytest.raises(ApiException) as err:  # the CRD schema: nodeTaints items need key and effect
        flavors.create(body={"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                             "metadata": {"name": "bad"}, "spec": {"nodeTaints": [{"value": "x"}]}})
    assert err.value.status == 422
    with pytest.raises(ApiException) as err:
        flavors.patch(name="h100", body={"spec": {"nodeLabels": {"c": "d"}}},
                      content_type="application/strategic-merge-patch+json")
    assert err.value.status == 415
    flavors.patch(name="h100", body={"spec": {"nodeLabels": {"c": "d"}}}, content_type="application/merge-patch+json")
    assert dict(flavors.get(name="h100").spec.nodeLabels) == {"a": "b", "c": "d"}
    assert flavors.get(name="h100").metadata.generation == 2


def _request(kapi, method, path, token=None, body=None):
    import ssl
    import urllib.request

    ctx = ssl.create_default_context(cadata=(kapi.state_dir / "ca.crt").read_text())
    data = json.dumps(body).encode() if body else None
    req = urllib.request.Request(kapi.url + path, method=method, data=data)  # noqa: S310 https URL of the test server
    req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:  # noqa: S310 https to the test server
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_bootstrap_token_csr_and_node_restriction(kapi):
    admin = kapi.creds["token"]
    assert _request(kapi, "GET", "/api/v1/nodes")[0] == 403  # anonymous
    assert _request(kapi, "GET", "/api/v1/namespaces/kube-public/configmaps/cluster-info")[0] == 200
    unknown = "abcdef.0123456789abcdef"  # well-formed, but no bootstrap-token Secret holds it yet
    assert _request(kapi, "GET", "/api/v1/nodes", unknown)[0] == 401
    expires = (datetime.datetime.now(tz=datetime.UTC) + datetime.timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
              "metadata": {"name": "bootstrap-token-abcdef", "namespace": "kube-system"},
              "stringData": {"token-id": "abcdef", "token-secret": "0123456789abcdef", "expiration": expires,
                             "usage-bootstrap-authentication": "true"}}
    assert _request(kapi, "POST", "/api/v1/namespaces/kube-system/secrets", admin, secret)[0] == 201
    stored = _request(kapi, "GET", "/api/v1/namespaces/kube-system/secrets/bootstrap-token-abcdef", admin)[1]
    assert "stringData" not in stored
    assert base64.b64decode(stored["data"]["token-secret"]) == b"0123456789abcdef"
    boot = unknown
    assert _request(kapi, "GET", "/api/v1/nodes", token=boot)[0] == 403
    csr = {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
           "metadata": {"name": "node-csr-n1"},
           "spec": {"signerName": "kubernetes.io/kube-apiserver-client-kubelet", "request": "",
                    "usages": ["client auth"], "extra": {"gpunode.sim/node-name": ["n1"]}}}
    code, issued = _request(kapi, "POST", "/apis/certificates.k8s.io/v1/certificatesigningrequests", boot, csr)
    assert code == 201, issued
    node_cred = issued["status"]["certificate"]
    forbidden = {"apiVersion": "v1", "kind": "Node",
                 "metadata": {"name": "n1", "labels": {"node-role.kubernetes.io/worker": ""}}}
    code, status = _request(kapi, "POST", "/api/v1/nodes", node_cred, forbidden)
    assert code == 403
    assert "node-role.kubernetes.io/worker" in status["message"]
    other = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n2"}}
    assert _request(kapi, "POST", "/api/v1/nodes", node_cred, other)[0] == 403
    own = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"example.com/x": "y"}}}
    assert _request(kapi, "POST", "/api/v1/nodes", node_cred, own)[0] == 201


def test_ca_cert_hash_pin_is_the_spki_sha256(kapi):
    import subprocess

    pem = (kapi.state_dir / "ca.crt").read_text()
    der_pub = subprocess.run(["openssl", "x509", "-pubkey", "-noout"], input=pem, capture_output=True, text=True,
                             check=True).stdout
    spki = subprocess.run(["openssl", "pkey", "-pubin", "-outform", "der"], input=der_pub.encode(),
                          capture_output=True, check=True).stdout
    import hashlib

    assert spki_sha256(pem) == "sha256:" + hashlib.sha256(spki).hexdigest() == kapi.creds["ca_cert_hash"]


def test_strategic_merge_deletes_by_key_and_nulls():
    merged = strategic_merge_patch({"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}], "x": 1}},
                                   {"spec": {"taints": [{"key": "a", "$patch": "delete"}], "x": None}})
    assert merged == {"spec": {"taints": []}}


@pytest.mark.parametrize(("selector", "labels", "expected"), [
    ("a=1,b", {"a": "1", "b": ""}, True),
    ("a=1,!b", {"a": "1", "b": ""}, False),
    ("a notin (1,2)", {"a": "3"}, True),
    ("a notin (1,2)", {}, True),
    ("a in (1,2)", {}, False),
    ("a==1", {"a": "1"}, True),
])
def test_label_selector(selector, labels, expected):
    assert selector_matches(parse_label_selector(selector), labels) is expected


def test_bad_label_is_rejected_like_the_api_server(tmp_path):
    store = Store(tmp_path)
    res = store.resource("", "v1", "nodes")
    with pytest.raises(ApiError) as err:
        store.create(res, None, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "labels": {"a": "b c"}}})
    assert err.value.code == 422


def test_pods_by_node_and_eviction_as_a_drain_uses_them(kapi):
    """What kubernetes.core.k8s_drain calls: cordon (patch spec.unschedulable), the node's pods by
    ``spec.nodeName`` across namespaces, a policy/v1 Eviction per pod (the pod is gone), the read that waits."""
    api_client = kubernetes.config.new_client_from_config(kapi.kubeconfig)
    core = kubernetes.client.CoreV1Api(api_client)
    core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    core.patch_node("n1", {"spec": {"unschedulable": True}})
    assert core.read_node("n1").spec.unschedulable is True
    for name, node in (("train-0", "n1"), ("train-1", "n2")):
        core.create_namespaced_pod("default", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                                               "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]}})
    on_n1 = core.list_pod_for_all_namespaces(field_selector="spec.nodeName=n1")
    assert [p.metadata.name for p in on_n1.items] == ["train-0"]
    core.create_namespaced_pod_eviction("train-0", "default", kubernetes.client.V1Eviction(
        metadata=kubernetes.client.V1ObjectMeta(name="train-0", namespace="default")))
    with pytest.raises(kubernetes.client.exceptions.ApiException) as gone:
        core.read_namespaced_pod("train-0", "default")
    assert gone.value.status == 404
    assert [p.metadata.name for p in core.list_pod_for_all_namespaces().items] == ["train-1"]
    with pytest.raises(kubernetes.client.exceptions.ApiException) as bad:
        core.list_node(field_selector="spec.nodeName=n1")
    assert bad.value.status == 400
