# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Kubernetes objects derived from discovered hardware: pure functions, no I/O.

Used by the ``kubernetes_node`` role (labels the kubelet reports at join, the JoinConfiguration) and
the ``cluster_objects`` role (admin-only labels, Kueue ResourceFlavors/ClusterQueues/LocalQueues, the
SR-IOV device plugin ConfigMap and NetworkAttachmentDefinitions), through the filters in
``plugins/filter/k8s_objects.py``. Inputs are the ``gpunode_hw`` fact of the discovery role and
plain inventory data; every function raises :class:`K8sObjectsError` with a message naming host and
variable on bad input.

Facts used and where they come from:

- GFD label values: ``nvidia.com/gpu.product`` is the NVML product name with spaces replaced by
  ``-`` (nvidia-smi shows "NVIDIA H100 80GB HBM3" for ``10de:2330``,
  the public output from https://github.com/leptonai/gpud), ``nvidia.com/gpu.machine`` the DMI product name the
  same way, ``nvidia.com/gpu.count`` the GPU count (GPU feature discovery's label set).
- NFD: ``feature.node.kubernetes.io/pci-<vendor>.present`` for PCI vendors present
  (``15b3`` Mellanox, ``10de`` NVIDIA; docs/hardware-facts.md, PCI identities).
- SR-IOV: the mlx5 VF device id is ``101e`` (docs/hardware-facts.md); the device plugin selects VFs by
  ``vendors``/``devices``/``pfNames`` with ``<pf>#<first>-<last>`` VF ranges and ``isRdma``.
- Kubelet ``--node-labels`` rules: labels in the ``kubernetes.io``/``k8s.io`` namespaces must be
  under ``kubelet.kubernetes.io`` or ``node.kubernetes.io`` (or in a short well-known set), and the
  NodeRestriction admission plugin refuses ``node-restriction.kubernetes.io/*`` from a kubelet;
  ``node-role.kubernetes.io/*`` makes the kubelet refuse to start.
"""

from __future__ import annotations

import ipaddress
import json
import re

GPU_PRODUCTS = {"0x2330": "NVIDIA-H100-80GB-HBM3"}  # nvidia-smi name of 10de:2330, spaces -> '-'
VF_DEVICE_ID = "101e"
MELLANOX_VENDOR = "15b3"
NVIDIA_VENDOR = "10de"
FORBIDDEN_LABEL_DOMAINS = ("node-role.kubernetes.io", "node-restriction.kubernetes.io")
KUBELET_ALLOWED_DOMAINS = ("kubelet.kubernetes.io", "node.kubernetes.io")
KUBELET_ALLOWED_KEYS = frozenset({
    "kubernetes.io/hostname", "kubernetes.io/arch", "kubernetes.io/os", "beta.kubernetes.io/arch",
    "beta.kubernetes.io/os", "beta.kubernetes.io/instance-type", "node.kubernetes.io/instance-type",
    "topology.kubernetes.io/region", "topology.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region", "failure-domain.beta.kubernetes.io/zone",
})
# Namespaces the kubelet reserves: a --node-labels key under them must be in KUBELET_ALLOWED_DOMAINS or
# KUBELET_ALLOWED_KEYS, else the kubelet refuses to start.
RESERVED_LABEL_DOMAINS = ("kubernetes.io", "k8s.io")
# Keys the kubelet sets itself; a user value would fight it.
KUBELET_SET_KEYS = frozenset({"kubernetes.io/hostname"})
MANAGED_BY = {"app.kubernetes.io/managed-by": "mlplatform.gpunode"}

_NAME_PART = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_BOOTSTRAP_TOKEN = re.compile(r"^[a-z0-9]{6}\.[a-z0-9]{16}$")
_CA_HASH = re.compile(r"^sha256:[0-9a-f]{64}$")


class K8sObjectsError(ValueError):
    """Bad input: the message names the host and the variable."""


def _in_domain(prefix: str, domain: str) -> bool:
    return prefix == domain or prefix.endswith("." + domain)


def slug(text: str) -> str:
    """Lower-case DNS-label form: ``H100 SXM5 80GB`` -> ``h100-sxm5-80gb``."""
    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-")


def label_value(text: str) -> str:
    """A valid label value: spaces and other characters become ``-``, at most 63 characters."""
    value = re.sub(r"[^A-Za-z0-9_.-]+", "-", str(text)).strip("-_.")[:63]
    return value.rstrip("-_.")


def label_syntax_errors(labels: dict) -> list[str]:
    """Syntax errors of label keys/values as the API server reports them."""
    errors = []
    for key, value in labels.items():
        prefix, _sep, name = key.rpartition("/")
        if (prefix and (not _PREFIX.match(prefix) or len(prefix) > 253)) or not _NAME_PART.match(name or ""):
            errors.append(f"label key {key!r} is not a valid qualified name")
        if not isinstance(value, str) or len(value) > 63 or not _VALUE.match(value):
            errors.append(f"label {key!r}: value {value!r} must be a string of at most 63 alphanumeric "
                          "characters, '-', '_' or '.'")
    return errors


def kubelet_label_errors(labels: dict, domain: str) -> list[str]:
    """Why each key may not go into kubelet ``--node-labels`` (empty when all may).

    Allowed: ``node.kubernetes.io/…`` and ``kubelet.kubernetes.io/…`` (and their subdomains such as
    ``feature.node.kubernetes.io``), the kubelet's well-known keys, and the platform ``domain``.
    """
    errors = label_syntax_errors(labels)
    if domain and any(_in_domain(domain, d) for d in RESERVED_LABEL_DOMAINS) \
            and not any(_in_domain(domain, d) for d in KUBELET_ALLOWED_DOMAINS):
        errors.append(f"kubernetes_node_label_domain {domain!r} is under {', '.join(RESERVED_LABEL_DOMAINS)}, whose "
                      "labels the kubelet refuses in --node-labels (it would not start); use a domain of your own, "
                      "such as gpunode.example.com")
        domain = None
    for key in sorted(labels):
        prefix = key.rpartition("/")[0]
        if key in KUBELET_SET_KEYS:
            errors.append(f"label {key!r} is set by the kubelet itself (from the node name); do not set it in "
                          "kubernetes_node_labels")
        elif any(_in_domain(prefix, d) for d in FORBIDDEN_LABEL_DOMAINS):
            errors.append(
                f"label {key!r} may not be self-reported by the kubelet: {prefix} labels are refused by the "
                "kubelet (node-role) or by the NodeRestriction admission plugin (node-restriction); set "
                "them from the controller with the cluster_objects role instead")
        elif key in KUBELET_ALLOWED_KEYS or any(_in_domain(prefix, d) for d in (*KUBELET_ALLOWED_DOMAINS, domain) if d):
            continue
        else:
            errors.append(f"label {key!r} is not under node.kubernetes.io, feature.node.kubernetes.io, "
                          f"kubelet.kubernetes.io or the platform domain {domain!r}")
    return errors


def platform_class(hw: dict) -> str:
    """``dgx`` for an NVIDIA DGX, else ``hgx`` (an OEM server on an HGX baseboard)."""
    product = ((hw.get("platform") or {}).get("product") or "")
    return "dgx" if "DGX" in product.upper() else "hgx"


def gpu_product(hw: dict) -> str:
    """The GFD ``nvidia.com/gpu.product`` value of the host's GPUs (one product per host)."""
    ids = sorted({g.get("device_id") for g in hw.get("gpus") or []})
    if not ids:
        return ""
    models = sorted({g.get("model") or "" for g in hw["gpus"]})
    return label_value(GPU_PRODUCTS.get(ids[0]) or "NVIDIA-" + models[0])


def rails_of(hw: dict) -> list[dict]:
    return sorted(hw.get("rails") or [], key=lambda r: r["rail"])


def self_labels(hw: dict, domain: str, fabric: str, transport: str) -> dict:
    """Labels a node reports about itself at join (``--node-labels``); never trusted for scheduling."""
    vendors = {(n.get("vendor_id") or "").replace("0x", "") for n in hw.get("nics") or []}
    labels = {
        f"{domain}/gpu.count": str(len(hw.get("gpus") or [])),
        f"{domain}/rail.count": str(len(rails_of(hw))),
        f"{domain}/fabric": label_value(fabric),
        f"{domain}/fabric.transport": label_value(transport),
        f"{domain}/platform": platform_class(hw),
    }
    if MELLANOX_VENDOR in vendors:
        labels[f"feature.node.kubernetes.io/pci-{MELLANOX_VENDOR}.present"] = "true"
    if hw.get("gpus"):
        labels[f"feature.node.kubernetes.io/pci-{NVIDIA_VENDOR}.present"] = "true"
    return labels


def admin_labels(hw: dict, domain: str, trusted_prefix: str, fabric: str, adaptive_routing: str) -> dict:
    """Labels only an administrator may set (from the controller): trusted scheduling labels under
    ``trusted_prefix`` (``node-restriction.kubernetes.io`` by default, which a kubelet cannot write),
    GFD/NFD-compatible GPU/NIC labels, rail count, fabric and adaptive-routing mode."""
    product = gpu_product(hw)
    machine = label_value((hw.get("platform") or {}).get("product") or "")
    labels = {
        "nvidia.com/gpu.present": "true" if hw.get("gpus") else "false",
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.count": str(len(hw.get("gpus") or [])),
        "nvidia.com/gpu.machine": machine,
        f"feature.node.kubernetes.io/pci-{MELLANOX_VENDOR}.present": "true" if any(
            (n.get("vendor_id") or "").endswith(MELLANOX_VENDOR) for n in hw.get("nics") or []) else "false",
        f"{domain}/rail.count": str(len(rails_of(hw))),
        f"{domain}/fabric": label_value(fabric),
        f"{domain}/adaptive-routing": label_value(adaptive_routing),
        f"{trusted_prefix}/gpu.product": product,
        f"{trusted_prefix}/platform": platform_class(hw),
        f"{trusted_prefix}/fabric": label_value(fabric),
    }
    return labels


def adaptive_routing_mode(contract_entries: list) -> str:
    """``enabled``/``disabled``/``mixed`` from read-back contract entries, ``unknown`` without any."""
    values = set()
    for entry in contract_entries or []:
        if entry.get("setting") in ("adaptive_routing_forced_en", "ROCE_ADAPTIVE_ROUTING_EN",
                                    "roce_accl.adaptive_routing_forced_en"):
            value = str(entry.get("value")).lower()
            values.add("enabled" if value in ("1", "0x1", "true", "true(1)") else "disabled")
    if not values:
        return "unknown"
    return values.pop() if len(values) == 1 else "mixed"


def sriov_rails_from_hw(hw: dict, num_vfs: int) -> list:
    """``sriov_rails`` shaped entries from discovered rails, for when the sriov role did not run."""
    return [{"rail": r["rail"], "pci_address": r["pci_address"], "pf_name": r["netdev"],
             "rdma_device": r.get("rdma_device"), "num_vfs": num_vfs, "vf_range": f"0-{num_vfs - 1}"}
            for r in rails_of(hw)]


def _quantity_mi(mib: int) -> str:
    return f"{max(int(mib), 0)}Mi"


def _check_host(name: str, host: dict) -> None:
    hw = host.get("hw")
    if not isinstance(hw, dict) or "gpus" not in hw or "rails" not in hw:
        raise K8sObjectsError(f"host {name}: gpunode_hw is missing or incomplete (run the discovery role first)")
    if not host.get("sriov_rails"):
        raise K8sObjectsError(f"host {name}: sriov_rails is empty (run the sriov role, or set "
                              "cluster_objects_sriov_rails_from_discovery)")
    rails = {r["rail"] for r in rails_of(hw)}
    for entry in host["sriov_rails"]:
        if entry.get("rail") not in rails:
            raise K8sObjectsError(f"host {name}: sriov_rails entry {entry.get('pf_name')} names rail "
                                  f"{entry.get('rail')}, which discovery did not find")
        if not re.fullmatch(r"\d+-\d+", str(entry.get("vf_range") or "")):
            raise K8sObjectsError(f"host {name}: sriov_rails rail {entry.get('rail')} has vf_range "
                                  f"{entry.get('vf_range')!r}; expected '<first>-<last>'")


def build(hosts: dict, settings: dict) -> dict:
    """Every cluster object for a fleet.

    :param hosts: ``{inventory_name: {hw, node_name, fabric, transport, cpu, memory_mib, sriov_rails,
        adaptive_routing}}`` (``cpu`` in cores, ``memory_mib`` in MiB, both allocatable totals).
    :param settings: ``domain``, ``trusted_prefix``, ``cluster_queue_prefix``, ``cohort``,
        ``local_queue_name``, ``tenants`` (list of ``{namespace, fabric?}``), ``flavor_taints``,
        ``cpu_reserved``, ``memory_reserved_mib`` (per node), ``device_plugin_namespace``,
        ``device_plugin_configmap``, ``network_namespace``, ``rail_cidr`` (split into a /24 per rail),
        ``resource_prefix``; ``topology`` (optional): ``{name, keys: {block, rack}}`` when the hosts carry
        ``topology_labels`` (the topology action's labels): they join the Node labels, a Kueue ``Topology`` of
        that name (levels block, rack, ``kubernetes.io/hostname``) is made and every ResourceFlavor names it.
    :returns: ``node_labels`` ({node: labels}), ``node_objects`` (Node patches carrying those labels),
        ``manifests`` (``{file, object}`` for every object but Nodes, in apply order),
        ``resource_flavors``, ``cluster_queues``, ``namespaces``,
        ``local_queues``, ``device_plugin_configmap``, ``network_attachment_definitions`` (objects).
    """
    domain, trusted = settings["domain"], settings["trusted_prefix"]
    prefix = settings.get("resource_prefix", "nvidia.com")
    taints = [dict(t) for t in settings.get("flavor_taints") or []]
    for name in sorted(hosts):
        _check_host(name, hosts[name])
    topology = settings.get("topology") or None
    topology_name = topology.get("name") if topology else None
    if topology and not (isinstance(topology_name, str) and len(topology_name) <= 253 and _PREFIX.match(topology_name)):
        raise K8sObjectsError(f"cluster_objects_topology_name {topology.get('name')!r} is not a DNS subdomain name")
    node_labels, flavors, members = {}, {}, {}
    for name in sorted(hosts):
        host = hosts[name]
        hw = host["hw"]
        labels = admin_labels(hw, domain, trusted, host["fabric"], host.get("adaptive_routing") or "unknown")
        if topology:
            labels.update(host.get("topology_labels") or {})
        errors = label_syntax_errors(labels)
        if errors:
            raise K8sObjectsError(f"host {name}: " + "; ".join(errors))
        node_labels[host.get("node_name") or name] = labels
        key = (slug(labels["nvidia.com/gpu.product"]), platform_class(hw), slug(host["fabric"]))
        flavor = "-".join(key)
        flavors[flavor] = {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
            "metadata": {"name": flavor, "labels": dict(MANAGED_BY)},
            "spec": {
                "nodeLabels": {k: labels[k] for k in (f"{trusted}/gpu.product", f"{trusted}/platform",
                                                      f"{trusted}/fabric")},
                **({"nodeTaints": taints,
                    "tolerations": [{"key": t["key"], "operator": "Equal", "value": t.get("value", ""),
                                     "effect": t["effect"]} for t in taints]} if taints else {}),
            },
        }
        if topology:
            flavors[flavor]["spec"]["topologyName"] = topology["name"]
        members.setdefault(host["fabric"], {}).setdefault(flavor, []).append(name)

    max_rails = max(len(rails_of(h["hw"])) for h in hosts.values()) if hosts else 0
    rail_resources = [f"{prefix}/rail{n}" for n in range(max_rails)]
    covered = ["cpu", "memory", f"{prefix}/gpu", *rail_resources]
    queues = {}
    for fabric in sorted(members):
        flavor_entries = []
        for flavor in sorted(members[fabric]):
            names = members[fabric][flavor]
            cpu = sum(max(int(hosts[n]["cpu"]) - int(settings.get("cpu_reserved", 0)), 0) for n in names)
            mem = sum(max(int(hosts[n]["memory_mib"]) - int(settings.get("memory_reserved_mib", 0)), 0)
                      for n in names)
            gpus = sum(len(hosts[n]["hw"]["gpus"]) for n in names)
            vfs = {r: 0 for r in rail_resources}
            for n in names:
                for entry in hosts[n]["sriov_rails"]:
                    vfs[f"{prefix}/rail{entry['rail']}"] += int(entry["num_vfs"])
            quotas = [{"name": "cpu", "nominalQuota": cpu}, {"name": "memory", "nominalQuota": _quantity_mi(mem)},
                      {"name": f"{prefix}/gpu", "nominalQuota": gpus}]
            quotas += [{"name": r, "nominalQuota": vfs[r]} for r in rail_resources]
            flavor_entries.append({"name": flavor, "resources": quotas})
        cq = f"{settings['cluster_queue_prefix']}-{slug(fabric)}"
        queues[fabric] = {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
            "metadata": {"name": cq, "labels": dict(MANAGED_BY)},
            "spec": {"cohortName": settings["cohort"], "namespaceSelector": {},
                     "resourceGroups": [{"coveredResources": covered, "flavors": flavor_entries}]},
        }

    namespaces, local_queues = [], []
    fabrics = sorted(queues)
    for tenant in settings.get("tenants") or []:
        ns = tenant.get("namespace")
        fabric = tenant.get("fabric") or (fabrics[0] if fabrics else None)
        if not ns or fabric not in queues:
            raise K8sObjectsError(f"cluster_objects_tenants: tenant {tenant!r} needs a namespace and a fabric "
                                  f"of the fleet (fabrics: {', '.join(fabrics) or 'none'})")
        namespaces.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        local_queues.append({
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
            "metadata": {"name": settings["local_queue_name"], "namespace": ns, "labels": dict(MANAGED_BY)},
            "spec": {"clusterQueue": queues[fabric]["metadata"]["name"]},
        })

    # One device plugin resource per rail; pfNames lists each host's PF of that rail once.
    rail_pfs: dict[int, list[str]] = {}
    link = {}
    for name in sorted(hosts):
        transport = hosts[name].get("transport") or "roce"
        for entry in sorted(hosts[name]["sriov_rails"], key=lambda e: e["rail"]):
            pf = f"{entry['pf_name']}#{entry['vf_range']}"
            if pf not in rail_pfs.setdefault(entry["rail"], []):
                rail_pfs[entry["rail"]].append(pf)
            link.setdefault(entry["rail"], set()).add(transport)
    resource_list = [{"resourceName": f"rail{rail}", "resourcePrefix": prefix,
                      "selectors": {"vendors": [MELLANOX_VENDOR], "devices": [VF_DEVICE_ID],
                                    "drivers": ["mlx5_core"], "pfNames": pfs, "isRdma": True}}
                     for rail, pfs in sorted(rail_pfs.items())]
    configmap = {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": settings["device_plugin_configmap"], "namespace": settings["device_plugin_namespace"],
                     "labels": dict(MANAGED_BY)},
        "data": {"config.json": json.dumps({"resourceList": resource_list}, indent=2, sort_keys=True)},
    }
    try:
        net = ipaddress.ip_network(settings.get("rail_cidr", "10.220.0.0/16"))
    except ValueError as exc:
        raise K8sObjectsError(f"cluster_objects_rail_cidr {settings.get('rail_cidr')!r} is not a network "
                              f"such as 10.220.0.0/16 ({exc})") from None
    subnets = list(net.subnets(new_prefix=max(net.prefixlen, 24)))
    nads = []
    for rail in sorted(rail_pfs):
        if rail >= len(subnets):
            raise K8sObjectsError(f"cluster_objects_rail_cidr {net} has no /24 left for rail {rail}")
        transports = link[rail]
        cni = "ib-sriov" if transports == {"infiniband"} else "sriov"
        config = {"cniVersion": "0.4.0", "name": f"rail{rail}", "type": cni,
                  "ipam": {"type": "whereabouts", "range": str(subnets[rail])}}
        nads.append({
            "apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": f"rail{rail}", "namespace": settings["network_namespace"],
                         "labels": dict(MANAGED_BY),
                         "annotations": {"k8s.v1.cni.cncf.io/resourceName": f"{prefix}/rail{rail}"}},
            "spec": {"config": json.dumps(config, sort_keys=True)},
        })
    node_objects = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": n, "labels": labels}}
                    for n, labels in sorted(node_labels.items())]
    topologies = []
    if topology:
        keys = topology.get("keys") or {}
        levels = [{"nodeLabel": keys[n]} for n in ("block", "rack") if keys.get(n)]
        topologies = [{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology",
                       "metadata": {"name": topology["name"], "labels": dict(MANAGED_BY)},
                       "spec": {"levels": [*levels, {"nodeLabel": "kubernetes.io/hostname"}]}}]
    ordered = [*namespaces, *topologies, *[flavors[k] for k in sorted(flavors)], *[queues[k] for k in sorted(queues)],
               *local_queues, configmap, *nads]
    manifests = [{"file": "-".join((o["kind"].lower(), o["metadata"].get("namespace", "cluster"),
                                    o["metadata"]["name"])) + ".yaml", "object": o} for o in ordered]
    return {"node_labels": node_labels, "node_objects": node_objects, "manifests": manifests,
            "resource_flavors": [flavors[k] for k in sorted(flavors)],
            "cluster_queues": [queues[k] for k in sorted(queues)], "namespaces": namespaces,
            "local_queues": local_queues, "device_plugin_configmap": configmap,
            "network_attachment_definitions": nads, "topologies": topologies}


def join_configuration(node_name: str, labels: dict, taints: list, domain: str, discovery: dict,
                       cri_socket: str = "unix:///run/containerd/containerd.sock") -> dict:
    """A ``kubeadm.k8s.io/v1beta4`` JoinConfiguration; raises K8sObjectsError on what kubeadm/kubelet refuse.

    :param discovery: ``{api_server, token, ca_cert_hashes}`` (bootstrap token discovery) or
        ``{kubeconfig_file}`` (file discovery).
    """
    errors = kubelet_label_errors(labels, domain)
    if errors:
        raise K8sObjectsError(f"node {node_name}: kubernetes_node_labels: " + "; ".join(errors))
    for taint in taints:
        if taint.get("effect") not in ("NoSchedule", "PreferNoSchedule", "NoExecute") or not taint.get("key"):
            raise K8sObjectsError(f"node {node_name}: kubernetes_node_taints: {taint!r} needs a key and an effect "
                                  "of NoSchedule, PreferNoSchedule or NoExecute")
    if discovery.get("kubeconfig_file"):
        disc = {"file": {"kubeConfigPath": discovery["kubeconfig_file"]}}
    else:
        token, hashes = discovery.get("token") or "", discovery.get("ca_cert_hashes") or []
        if not _BOOTSTRAP_TOKEN.match(token):
            raise K8sObjectsError(f"node {node_name}: the bootstrap token is not of the form [a-z0-9]{{6}}."
                                  "[a-z0-9]{16}")
        if not hashes or not all(_CA_HASH.match(h) for h in hashes):
            raise K8sObjectsError(f"node {node_name}: kubernetes_node_ca_cert_hashes must be sha256:<64 hex> pins; "
                                  "unpinned discovery is refused")
        if not re.fullmatch(r"[A-Za-z0-9.\-\[\]:]+:\d+", discovery.get("api_server") or ""):
            raise K8sObjectsError(f"node {node_name}: kubernetes_node_api_server must be host:port")
        disc = {"bootstrapToken": {"apiServerEndpoint": discovery["api_server"], "token": token,
                                   "caCertHashes": list(hashes)}}
    kubelet_args = [{"name": "node-labels", "value": ",".join(f"{k}={v}" for k, v in sorted(labels.items()))}]
    return {
        "apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "JoinConfiguration",
        "discovery": disc,
        "nodeRegistration": {"name": node_name, "criSocket": cri_socket,
                             "taints": [dict(t) for t in taints], "kubeletExtraArgs": kubelet_args},
    }


def _holds(want, have):
    """Whether ``have`` (an object as the API returns it) already holds ``want`` (what an apply or a
    patch would send): every key of a mapping (a None value: the key must be absent, as a merge patch
    removes it), lists item by item at the same length, scalars equal (a number and its string, as the
    API spells quantities such as ``"8"``, are equal; a boolean only equals a boolean)."""
    if isinstance(want, dict):
        if not isinstance(have, dict):
            return False
        for key, value in want.items():
            if value is None:
                if have.get(key) is not None:
                    return False
            elif key not in have or not _holds(value, have[key]):
                return False
        return True
    if isinstance(want, list):
        return isinstance(have, list) and len(want) == len(have) and all(map(_holds, want, have))
    if isinstance(want, bool) or isinstance(have, bool):
        return want is have
    if want == have:
        return True
    return isinstance(want, (int, float, str)) and isinstance(have, (int, float, str)) and str(want) == str(have)


def _key(obj):
    meta = obj.get("metadata") or {}
    return (obj.get("kind"), meta.get("namespace"), meta.get("name"))


def apply_plan(desired, live):
    """The objects of ``desired`` that the cluster does not hold yet, in their order: absent from ``live``
    (the objects of the same kinds as the API lists them), or present with a field that differs (fields the
    API server adds, such as defaults, status and metadata, do not count). One pass over each list."""
    if not isinstance(desired, list) or not isinstance(live, list):
        raise K8sObjectsError("k8s_apply_plan: expects the desired objects and the live objects as lists")
    have = {}
    for obj in live:
        if isinstance(obj, dict):
            have[_key(obj)] = obj
    out = []
    for obj in desired:
        if not isinstance(obj, dict) or not obj.get("kind") or not (obj.get("metadata") or {}).get("name"):
            raise K8sObjectsError(f"k8s_apply_plan: a desired object without kind or metadata.name: {obj!r}")
        body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
        current = have.get(_key(obj))
        if current is None or not _holds(body, current):
            out.append(obj)
    return out
