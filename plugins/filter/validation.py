# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters of the validation role: the ``ib_write_bw`` pairs of a fleet, their verdict, and one
host's result. Thin wrappers over ``module_utils/validation.py`` (pure functions)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.mlplatform.gpunode.plugins.module_utils import validation


def validation_pairs(hws, fabrics=None, base_port=18515):
    """``{host: gpunode_hw}`` (+ ``{host: fabric}``) -> the tests of ``select_pairs``."""
    if not isinstance(hws, dict):
        raise AnsibleFilterError("validation_pairs expects a mapping host -> gpunode_hw")
    fabrics = fabrics or {}
    hosts = {}
    for name, hw in hws.items():
        if not isinstance(hw, dict) or not isinstance(hw.get("rails"), list):
            raise AnsibleFilterError(f"validation_pairs: {name} has no gpunode_hw (run the discovery role first)")
        hosts[name] = {
            "fabric": fabrics.get(name) or "default",
            "platform": validation.platform_key(hw),
            "rails": [{k: r.get(k) for k in ("rail", "rdma_device", "pci_address", "netdev", "speed_gbps")}
                      for r in hw["rails"]],
        }
    return validation.select_pairs(hosts, base_port=int(base_port))


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


def validation_judge(tests, results, threshold_pct=90):
    """Tests + the clients' results (a mapping, or a list of mappings to merge) -> ``{host: [pair]}``."""
    if isinstance(results, list):
        merged = {}
        for part in results:
            merged.update(part or {})
        results = merged
    return validation.judge_pairs(tests or [], results or {}, float(threshold_pct))


def validation_result(checks, pairs, host):
    """One host's validation.json content: ``{host, passed, failures, checks, pairs}``."""
    passed, failures = validation.verdict(checks or [], pairs or [])
    return {"host": host, "passed": passed, "failures": failures, "checks": checks or [], "pairs": pairs or []}


class FilterModule:
    """The validation role's filters."""

    def filters(self):
        return {"validation_pairs": validation_pairs, "validation_judge": validation_judge,
                "validation_side": validation_side,
                "validation_result": validation_result}
