# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Which interfaces carry management traffic, from Ansible's network facts (pure).

The facts are those of ``ansible.builtin.setup`` with ``gather_subset: [network]`` (its
``default_ipv4``/``default_ipv6`` and one entry per interface with ``ipv4``, ``ipv4_secondaries`` and
``ipv6``); the host read collects them in its own run with Ansible's fact collectors
(:func:`collect_network_facts`), so discovery spends no round trip on a gather of its own. The filter
``mlplatform.gpunode.interfaces_with_address`` is :func:`interfaces_with_address`.
"""

from __future__ import annotations

# ansible.builtin.setup's minimal subset (excluded here by '!min', as the discovery role's gather did).
MINIMAL_GATHER_SUBSET = frozenset(["apparmor", "caps", "cmdline", "date_time", "distribution", "dns", "env", "fips",
                                   "local", "lsb", "pkg_mgr", "platform", "python", "selinux", "service_mgr",
                                   "ssh_pub_keys", "user"])


def interfaces_with_address(facts, address):
    """The names of the interfaces whose IPv4 or IPv6 addresses include ``address`` (a host name matches
    nothing), sorted. ``facts`` is ``ansible_facts`` with the network subset (un-prefixed keys)."""
    if not isinstance(facts, dict):
        raise TypeError("interfaces_with_address expects ansible_facts (a mapping)")
    found = []
    for name in facts.get("interfaces") or []:
        iface = facts.get(name.replace("-", "_")) or {}
        addrs = []
        if isinstance(iface.get("ipv4"), dict):
            addrs.append(iface["ipv4"].get("address"))
        addrs += [a.get("address") for a in iface.get("ipv4_secondaries") or [] if isinstance(a, dict)]
        addrs += [a.get("address") for a in iface.get("ipv6") or [] if isinstance(a, dict)]
        if address in addrs:
            found.append(name)
    return sorted(found)


def management_from_facts(facts, address):
    """``{default_route, connection, interfaces}``: the default routes' interfaces (IPv4, then IPv6), the
    interfaces holding ``address`` (what Ansible connects to), and both together, each name once."""
    default_route = []
    for family in ("default_ipv4", "default_ipv6"):
        name = (facts.get(family) or {}).get("interface")
        if isinstance(name, str) and name and name not in default_route:
            default_route.append(name)
    connection = interfaces_with_address(facts, address) if address else []
    return {"default_route": default_route, "connection": connection,
            "interfaces": list(dict.fromkeys(default_route + connection))}


def collect_network_facts(module):
    """Ansible's network facts, collected as ``setup`` with ``gather_subset: ['!all', '!min', 'network']``
    collects them (with the distribution and platform facts they depend on): ``(prefixed, plain)``, the
    first with the ``ansible_`` prefix as a module returns them in ``ansible_facts`` (as ``setup`` does), the
    second as ``ansible_facts`` holds them in a play."""
    from ansible.module_utils.facts import ansible_collector, default_collectors
    from ansible.module_utils.facts.namespace import PrefixFactNamespace

    collector = ansible_collector.get_ansible_collector(
        all_collector_classes=default_collectors.collectors,
        namespace=PrefixFactNamespace(namespace_name="ansible", prefix="ansible_"),
        filter_spec=[], gather_subset=["!all", "!min", "network"], gather_timeout=10,
        minimal_gather_subset=MINIMAL_GATHER_SUBSET)
    prefixed = collector.collect(module=module)
    return prefixed, {(k[len("ansible_"):] if k.startswith("ansible_") else k): v for k, v in prefixed.items()}
