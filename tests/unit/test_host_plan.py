"""The controller-side plans against a host_state read: empty when the host matches, before -> after when not."""

from __future__ import annotations

import hashlib

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.mlplatform.gpunode.plugins.filter.host_plan import FilterModule
from ansible_collections.mlplatform.gpunode.plugins.module_utils import host_plan

F = FilterModule().filters()
SOURCE = "Types: deb\nURIs: file:///srv/repo/\n"
KEY = "-----BEGIN PGP PUBLIC KEY BLOCK-----\n"
STATE = {
    "files": {
        "/etc/apt/sources.list.d/doca.sources": {"sha256": hashlib.sha256(SOURCE.encode()).hexdigest(),
                                                 "mode": "0644", "owner": "root", "group": "root"},
        "/etc/apt/keyrings/doca.asc": {"sha256": hashlib.sha256(KEY.encode()).hexdigest(),
                                       "mode": "0644", "owner": "root", "group": "root"},
    },
    "units": {"openibd.service": {"enabled": "enabled", "active": "active"},
              "gpunode-sriov.service": {"enabled": "disabled", "active": "inactive"}},
    "held": ["doca-ofed"],
    "apt_candidates": {"doca-ofed": ["2.9.0-1", "2.8.0-2"]},
    "kernel_modules": {"mlx5_core": {"loaded": True, "version": "24.10-1.1.4"}},
}


def test_file_plan_empty_when_content_mode_and_owner_match():
    assert F["file_plan"](STATE, "/etc/apt/sources.list.d/doca.sources", SOURCE) == {}
    assert F["file_plan"](STATE, "/etc/apt/sources.list.d/doca.sources", SOURCE, 0o644) == {}


def test_file_plan_names_what_differs():
    edited = F["file_plan"](STATE, "/etc/apt/sources.list.d/doca.sources", SOURCE + "# edited\n", "0600")
    assert edited["fields"] == ["content", "mode"]
    assert edited["before"]["mode"] == "0644" and edited["after"]["mode"] == "0600"
    missing = F["file_plan"](STATE, "/etc/gpunode/roce-accl.conf", "x")
    assert missing["before"] is None and missing["fields"] == ["content"]
    assert F["file_plan"]({}, "/etc/x", "x")["fields"] == ["content"]
    with pytest.raises(AnsibleFilterError, match="absolute path"):
        F["file_plan"](STATE, "etc/x", "x")


def test_key_plan_fetches_only_when_missing_or_different():
    digest = STATE["files"]["/etc/apt/keyrings/doca.asc"]["sha256"]
    assert F["key_plan"](STATE, "/etc/apt/keyrings/doca.asc") == {}
    assert F["key_plan"](STATE, "/etc/apt/keyrings/doca.asc", f"sha256:{digest}") == {}
    other = "0" * 64
    assert F["key_plan"](STATE, "/etc/apt/keyrings/doca.asc", f"sha256:{other}") == {
        "path": "/etc/apt/keyrings/doca.asc", "before": digest, "after": other}
    assert F["key_plan"](STATE, "/etc/apt/keyrings/cuda.asc")["before"] is None
    with pytest.raises(AnsibleFilterError, match="sha256:<64 hex digits>"):
        F["key_plan"](STATE, "/etc/apt/keyrings/doca.asc", "md5:abc")


def test_unit_plan():
    assert F["unit_plan"](STATE, "openibd.service", True, True) == {}
    assert F["unit_plan"](STATE, "gpunode-sriov.service", True) == {
        "unit": "gpunode-sriov.service", "enabled": {"before": "disabled", "after": "enabled"}}
    assert F["unit_plan"](STATE, "kubelet.service", None, True)["active"] == {"before": "unknown", "after": "active"}


def test_packages_holds_candidates_and_modules():
    facts = {"doca-ofed": [{"version": "2.9.0-1", "source": "apt"}], "mft": [{"version": "4.30.0-139"}]}
    assert F["package_versions"](facts) == {"doca-ofed": "2.9.0-1", "mft": "4.30.0-139"}
    assert F["package_versions"]({"doca-ofed": "2.9.0-1"}) == {"doca-ofed": "2.9.0-1"}
    assert F["unheld"](STATE["held"], ["mft", "doca-ofed", "mft"]) == ["mft"]
    assert F["apt_versions"](STATE, "doca-ofed") == ["2.9.0-1", "2.8.0-2"]
    assert F["apt_versions"](STATE, "nvidia-driver-550-server") is None
    assert F["apt_versions"]({}, "doca-ofed") is None
    assert F["module_version"](STATE, "mlx5_core") == "24.10-1.1.4"
    assert host_plan.module_version(STATE, "nvidia") is None


def test_sysctl_plan_keeps_only_what_differs_and_everything_when_unknown():
    items = [{"key": "net.ipv4.ip_forward", "value": "1"}, {"key": "net.bridge.bridge-nf-call-iptables", "value": "1"}]
    path = "/etc/sysctl.d/99-kubernetes.conf"
    contents = {path: "net.ipv4.ip_forward=1\nnet.bridge.bridge-nf-call-iptables = 1\n",
                "/proc/sys/net/ipv4/ip_forward": "1\n", "/proc/sys/net/bridge/bridge-nf-call-iptables": "0\n"}
    # The file has both lines; the running bridge value differs.
    assert host_plan.sysctl_plan(items, contents, path) == [items[1]]
    assert host_plan.sysctl_plan(items, contents, path, apply_now=False) == []
    assert host_plan.sysctl_plan(items, {}, path) == items
    assert host_plan.sysctl_plan(items, {path: "net.ipv4.ip_forward=0\n"}, path, apply_now=False) == items


def test_fstab_swap_sees_active_swap_lines_only():
    assert host_plan.fstab_swap({"/etc/fstab": "UUID=1 / ext4 defaults 0 1\n/swap.img none swap sw 0 0\n"})
    assert not host_plan.fstab_swap({"/etc/fstab": "UUID=1 / ext4 defaults 0 1\n# /swap.img none swap sw 0 0\n"})
    assert host_plan.fstab_swap({}) and host_plan.fstab_swap({"/etc/fstab": None})
