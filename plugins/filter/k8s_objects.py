# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters that turn discovered hardware into Kubernetes objects (thin wrappers of module_utils/k8s_objects).

``cluster_objects`` builds every controller-side object of a fleet, ``join_configuration`` renders and
validates a kubeadm JoinConfiguration, ``node_self_labels`` gives the labels a kubelet may report,
``sriov_rails_from_hw`` derives device-plugin rails from discovery, ``adaptive_routing_mode`` reads
the mode from read-back contract entries. Bad input raises AnsibleFilterError naming host and variable.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.mlplatform.gpunode.plugins.module_utils import k8s_objects
from ansible_collections.mlplatform.gpunode.plugins.plugin_utils.fleet_vars import FleetVars, is_hostvars


def _wrap(func):
    def inner(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except k8s_objects.K8sObjectsError as exc:
            raise AnsibleFilterError(str(exc)) from exc
        except (KeyError, TypeError, ValueError) as exc:
            raise AnsibleFilterError(f"{func.__name__}: malformed input: {exc}") from exc

    inner.__name__ = func.__name__
    inner.__doc__ = func.__doc__
    return inner


def cluster_objects(hosts, settings, play_hosts=None, vfs_per_rail=8, sriov_rails_from_discovery=False):
    """Every cluster object for a fleet; see ``k8s_objects.build``. ``hosts`` is the
    ``cluster_objects_inputs`` mapping, or ``hostvars`` with ``play_hosts``: then the inputs are read
    in the same call (one pass, and the hosts' facts are not handed from filter to filter)."""
    if is_hostvars(hosts):
        if play_hosts is None:
            raise AnsibleFilterError("cluster_objects: given hostvars, it needs play_hosts (ansible_play_hosts)")
        hosts = cluster_objects_inputs(hosts, play_hosts, vfs_per_rail, sriov_rails_from_discovery)
    return k8s_objects.build(dict(hosts), dict(settings))


class _HostView:
    def __init__(self, fleet, host):
        self.fleet, self.host = fleet, host

    def get(self, name, default=None):
        return self.fleet.get(self.host, name, default)


def cluster_objects_inputs(hostvars, hosts, vfs_per_rail=8, sriov_rails_from_discovery=False):
    """The ``cluster_objects`` input of every host in one pass over ``hostvars``: ``{host: {hw,
    node_name, fabric, transport, cpu, memory_mib, sriov_rails, adaptive_routing, topology_labels}}``."""
    out = {}
    vfs = int(vfs_per_rail)
    fleet = FleetVars(hostvars)
    for host in hosts:
        facts = _HostView(fleet, host)
        hw = facts.get("gpunode_hw")
        ansible_facts = fleet.ansible_facts(host)
        # The discovery role's host read counts them too (gpunode_host_state.capacity): no fact gathering needed.
        capacity = (facts.get("gpunode_host_state") or {}).get("capacity") or {}
        sriov = facts.get("sriov_rails")
        if sriov is None:
            sriov = k8s_objects.sriov_rails_from_hw(hw, vfs) if sriov_rails_from_discovery and hw is not None else []
        contract = list(facts.get("nic_firmware_contract") or []) + list(facts.get("roce_qos_contract") or [])
        # The fabric and its transport as the run's resolved intent has them (mlplatform.gpunode.fabric_intent).
        intent = facts.get("gpunode_intent") or {}
        fabric = (intent.get("hosts") or {}).get(host)
        if fabric is None:
            raise AnsibleFilterError(f"cluster_objects_inputs: {host} has no resolved fabric intent (gpunode_intent): "
                                     "run mlplatform.gpunode.fabric_intent for the play's hosts first")
        out[host] = {
            "hw": hw, "node_name": facts.get("kubernetes_node_name") or host,
            "fabric": fabric, "transport": intent["fabrics"][fabric]["transport"],
            "cpu": ansible_facts.get("processor_vcpus") or capacity.get("cpu") or 0,
            "memory_mib": ansible_facts.get("memtotal_mb") or capacity.get("memory_mib") or 0,
            "sriov_rails": sriov, "adaptive_routing": k8s_objects.adaptive_routing_mode(contract),
            # The topology action's labels for this host (site.yml's Contract play), when it ran.
            "topology_labels": ((facts.get("gpunode_topology") or {}).get("labels") or {}).get(host) or {},
        }
    return out


def join_configuration(labels, node_name, taints, domain, discovery,
                       cri_socket="unix:///run/containerd/containerd.sock"):
    """A validated kubeadm.k8s.io/v1beta4 JoinConfiguration; see ``k8s_objects.join_configuration``."""
    return k8s_objects.join_configuration(node_name, dict(labels), list(taints), domain, dict(discovery), cri_socket)


def kubelet_node_labels(labels, node_name, domain):
    """The labels unchanged, or AnsibleFilterError naming the node and every key the kubelet may not set."""
    errors = k8s_objects.kubelet_label_errors(dict(labels), domain)
    if errors:
        raise k8s_objects.K8sObjectsError(f"node {node_name}: kubernetes_node_labels: " + "; ".join(errors))
    return dict(labels)


def node_self_labels(hw, domain, fabric="default", transport="roce"):
    """Labels a kubelet may report about its node; see ``k8s_objects.self_labels``."""
    return k8s_objects.self_labels(hw, domain, fabric, transport)


def sriov_rails_from_hw(hw, num_vfs=8):
    """``sriov_rails`` entries from discovered rails; see ``k8s_objects.sriov_rails_from_hw``."""
    return k8s_objects.sriov_rails_from_hw(hw, int(num_vfs))


def adaptive_routing_mode(entries):
    """``enabled``/``disabled``/``mixed``/``unknown``; see ``k8s_objects.adaptive_routing_mode``."""
    return k8s_objects.adaptive_routing_mode(list(entries or []))


def k8s_apply_plan(desired, live):
    """The desired objects the cluster does not hold yet (``k8s_objects.apply_plan``)."""
    return k8s_objects.apply_plan(list(desired or []), list(live or []))


class FilterModule:
    """Kubernetes object filters."""

    def filters(self):
        funcs = (cluster_objects, cluster_objects_inputs, join_configuration, kubelet_node_labels, node_self_labels,
                 sriov_rails_from_hw,
                 adaptive_routing_mode, k8s_apply_plan)
        return {f.__name__: _wrap(f) for f in funcs}
