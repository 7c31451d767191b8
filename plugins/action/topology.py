# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller side of ``mlplatform.gpunode.topology`` (documentation: plugins/modules/topology.py)."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible_collections.mlplatform.gpunode.plugins.module_utils import topology as topo
from ansible_collections.mlplatform.gpunode.plugins.plugin_utils import action_args
from ansible_collections.mlplatform.gpunode.plugins.plugin_utils.fleet_vars import FleetVars

display = Display()
DEFAULT_KEYS = {"block": "{domain}/topology-block", "rack": "{domain}/topology-rack"}


def host_input(host, hw, state, fabric, block, rack):
    """One host's input to ``topology.plan``: its rails (discovery) with the neighbour the read found for each."""
    if not isinstance(hw, dict) or not isinstance(hw.get("rails"), list):
        raise AnsibleActionFail(f"topology: {host}: no discovery result (gpunode_hw with rails); run the discovery "
                                "role first")
    found = ((state or {}).get("neighbours") or {}).get("rails") or {}
    rails = [{"rail": r["rail"], "netdev": r.get("netdev"), "pci_address": r.get("pci_address"),
              "neighbour": found.get(r.get("pci_address"))} for r in hw["rails"]]
    return {"fabric": str(fabric or "default"), "block": block, "rack": rack, "rails": rails}


class ActionModule(ActionBase):
    """The fleet's topology levels and the cabling contract of rail-optimized fabrics, in one pass on the controller."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("hosts", "rail_optimized", "fabric_var", "block_var", "rack_var", "label_keys",
                             "domain"))

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)  # refuses an option outside _VALID_ARGS, naming it
        args = self._task.args
        hosts = action_args.play_hosts("topology", args, task_vars)
        rail_optimized = args.get("rail_optimized") or []
        if not isinstance(rail_optimized, list) or not all(isinstance(f, str) for f in rail_optimized):
            raise AnsibleActionFail("topology: rail_optimized must be a list of fabric names")
        domain = str(args.get("domain") or "gpunode.mlplatform.io")
        keys = {k: v.format(domain=domain) for k, v in DEFAULT_KEYS.items()}
        keys.update(args.get("label_keys") or {})
        if set(keys) - {"block", "rack"} or not all(isinstance(v, str) and v for v in keys.values()):
            raise AnsibleActionFail("topology: label_keys maps block and rack to Node label keys")
        fleet = FleetVars(task_vars["hostvars"])
        fabric_var = str(args.get("fabric_var") or "gpunode_fabric")
        block_var = str(args.get("block_var") or "gpunode_topology_block")
        rack_var = str(args.get("rack_var") or "gpunode_topology_rack")
        data = {h: host_input(h, fleet.get(h, "gpunode_hw"), fleet.get(h, "gpunode_host_state"),
                              fleet.get(h, fabric_var), fleet.get(h, block_var), fleet.get(h, rack_var))
                for h in hosts}
        unknown = sorted(set(rail_optimized) - {d["fabric"] for d in data.values()})
        if unknown:
            raise AnsibleActionFail(f"topology: rail_optimized names fabric(s) no host of the play is in: "
                                    f"{', '.join(unknown)} (gpunode_fabric)")
        try:
            plan = topo.plan(data, rail_optimized=rail_optimized)
        except topo.TopologyError as exc:
            raise AnsibleActionFail(f"topology: {exc}") from None
        for warning in plan["warnings"]:
            display.warning(f"topology: {warning}")
        by_host = {}
        for entry in plan["miscabled"]:
            by_host.setdefault(entry["host"], []).append(topo.describe_miscabled(entry))
        for entry in plan["claimed_twice"]:
            for host in dict.fromkeys(r["host"] for r in entry["rails"]):
                by_host.setdefault(host, []).append(topo.describe_claimed_twice(entry))
        result.update(changed=False, levels=plan["levels"], miscabled=plan["miscabled"], by_host=by_host,
                      claimed_twice=plan["claimed_twice"],
                      warnings=plan["warnings"], units=plan["units"], tree=topo.tree(plan),
                      labels=topo.node_labels(plan["levels"], keys), label_keys=keys,
                      msg=f"{len(hosts)} host(s); {len(by_host)} miscabled; {len(plan['claimed_twice'])} switch "
                          f"port(s) reached by more than one rail; {len(plan['warnings'])} warning(s)")
        return result
