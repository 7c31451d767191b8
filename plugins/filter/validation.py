# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters of the validation role: the ``ib_write_bw`` pairs of a fleet, their verdict, and one
host's result. Thin wrappers over ``module_utils/validation.py`` (pure functions)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.mlplatform.gpunode.plugins.module_utils import validation
from ansible_collections.mlplatform.gpunode.plugins.plugin_utils.fleet_vars import FleetVars, is_hostvars


def _schedule_hosts(hws, fabrics, name, order=None):
    if is_hostvars(hws):
        # hostvars: each host's gpunode_hw as it published it, read in this call (plugin_utils/fleet_vars.py)
        fleet = FleetVars(hws)
        hws = {host: fleet.get(host, "gpunode_hw") for host in order or []}
    if not isinstance(hws, dict):
        raise AnsibleFilterError(f"{name} expects a mapping host -> gpunode_hw")
    fabrics = fabrics or {}
    hosts = {}
    for host, hw in hws.items():
        hosts[host] = validation.schedule_host(hw, fabrics.get(host))
        if hosts[host] is None:
            raise AnsibleFilterError(f"validation_pairs: {host} has no gpunode_hw (run the discovery role first)")
    return hosts


def validation_pairs(hws, fabrics=None, base_port=18515):
    """``{host: gpunode_hw}`` (+ ``{host: fabric}``) -> the tests of the bandwidth schedule."""
    return validation.select_pairs(_schedule_hosts(hws, fabrics, "validation_pairs"), base_port=int(base_port))


def validation_schedule(hws, fabrics=None, order=None, forks=5, base_port=18515, test_timeout=60, server_start_s=30,
                        addresses=None):
    """``{host: gpunode_hw}`` or ``hostvars`` (then the hosts of ``order``) (+ fabrics, play order, forks,
    ports, timeouts, addresses) -> ``bandwidth_schedule``."""
    hosts = _schedule_hosts(hws, fabrics, "validation_schedule", order)
    try:
        return validation.bandwidth_schedule(hosts, order=list(order or []), forks=int(forks),
                                             base_port=int(base_port), test_timeout=int(test_timeout),
                                             server_start_s=int(server_start_s), addresses=addresses or {})
    except ValueError as exc:
        raise AnsibleFilterError(f"validation_schedule: {exc}") from exc


def validation_clients(entries, addresses):
    """A host's client entries of one phase, each with its server's address (``peer`` -> ``server``)."""
    out = []
    for entry in entries or []:
        address = (addresses or {}).get(entry["peer"])
        if not address:
            raise AnsibleFilterError(f"validation_clients: no address for {entry['peer']} (test {entry['id']})")
        out.append({"id": entry["id"], "device": entry["device"], "port": entry["port"], "server": address})
    return out


def validation_side(test, side, addresses=None):
    """One test as the ib_write_bw module's ``servers`` or ``clients`` entry; a client gets its
    server's address from ``addresses`` (host -> address)."""
    if side == "server":
        return {"id": test["id"], "device": test["server_device"], "port": test["port"]}
    if side != "client":
        raise AnsibleFilterError(f"validation_side: side must be server or client, got {side!r}")
    address = (addresses or {}).get(test["server"])
    if not address:
        raise AnsibleFilterError(f"validation_side: no address for {test['server']} (test {test['id']})")
    return {"id": test["id"], "device": test["client_device"], "port": test["port"], "server": address}


def _merged(parts):
    if not isinstance(parts, list):
        return parts or {}
    merged = {}
    for part in parts:
        merged.update(part or {})
    return merged


def validation_judge(tests, results, threshold_pct=90, server_errors=None):
    """Tests + the clients' results and the servers' errors (a mapping, or a list of mappings to
    merge, one per host) -> ``{host: [pair]}``."""
    return validation.judge_pairs(tests or [], _merged(results), float(threshold_pct), _merged(server_errors))


def validation_result(checks, pairs, host):
    """One host's validation.json content: ``{host, passed, failures, checks, pairs, harness_errors}``
    (``harness_errors``: tests the harness failed, not the host, see validation.judge_pairs)."""
    passed, failures = validation.verdict(checks or [], pairs or [])
    return {"host": host, "passed": passed, "failures": failures, "checks": checks or [], "pairs": pairs or [],
            "harness_errors": validation.harness_errors(pairs or [])}


def validation_known(state, hw):
    """``gpunode_host_state`` + ``gpunode_hw`` -> the vendor reads ``node_validation`` takes as ``known``."""
    return validation.known_from_host_state(state, hw)


class FilterModule:
    """The validation role's filters."""

    def filters(self):
        return {"validation_pairs": validation_pairs, "validation_judge": validation_judge,
                "validation_schedule": validation_schedule, "validation_clients": validation_clients,
                "validation_side": validation_side,
                "validation_result": validation_result, "validation_known": validation_known}
