# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller side of ``mlplatform.gpunode.fleet_contract`` (documentation: plugins/modules/fleet_contract.py)."""

from __future__ import annotations

import json
import os
import tempfile

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.mlplatform.gpunode.plugins.module_utils.contract import (
    DEFAULT_SOURCES,
    check_entry,
    compare,
    format_table,
)
from ansible_collections.mlplatform.gpunode.plugins.module_utils.intent import IntentError, declared_contract
from ansible_collections.mlplatform.gpunode.plugins.module_utils.mlxconfig import normalize_value
from ansible_collections.mlplatform.gpunode.plugins.plugin_utils.fabric_intent import resolved_intent
from ansible_collections.mlplatform.gpunode.plugins.plugin_utils.fleet_vars import FleetVars


class ActionModule(ActionBase):
    """Compare the published contracts of every play host, grouped by fabric."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("sources", "group_by", "default_group", "hosts", "output", "fail_on_drift"))

    def _gather(self, task_vars, hosts, sources, group_by, default_group):
        """One pass over the hosts: published contracts are taken as set_fact left them, anything
        else is templated once through ``hostvars`` (plugin_utils/fleet_vars.py) -> ``({host:
        {fabric, entries}}, problems)``."""
        fleet = FleetVars(task_vars["hostvars"])
        gathered, problems = {}, []
        for host in hosts:
            entries = []
            for source in sources:
                value = fleet.get(host, source)
                if value is None:
                    continue
                if not isinstance(value, list):
                    problems.append(f"{host}: {source} must be a list of entries, got {type(value).__name__}")
                    continue
                for index, entry in enumerate(value):
                    bad = check_entry(entry)
                    for problem in bad:
                        problems.append(f"{host}: {source}[{index}]: {problem}")
                    if isinstance(entry, dict) and not bad:
                        entries.append({**entry, "source": source})
            fabric = fleet.get(host, group_by)
            gathered[host] = {"fabric": default_group if fabric is None else fabric, "entries": entries}
        return gathered, problems

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)  # refuses an option outside _VALID_ARGS, naming it
        args = self._task.args
        sources = args.get("sources") or DEFAULT_SOURCES
        group_by = args.get("group_by", "gpunode_fabric")
        default_group = args.get("default_group", "default")
        hosts = args.get("hosts") or task_vars.get("ansible_play_hosts_all") or task_vars.get("ansible_play_hosts")
        output = args.get("output")
        fail_on_drift = self._task.args.get("fail_on_drift", True)
        if isinstance(fail_on_drift, str):
            fail_on_drift = fail_on_drift.lower() in ("1", "true", "yes", "on")
        if not isinstance(sources, list) or not hosts:
            raise AnsibleActionFail("fleet_contract: sources must be a list of variable names and hosts non-empty")

        gathered, problems = self._gather(task_vars, list(hosts), sources, group_by, default_group)
        if problems:
            raise AnsibleActionFail("fleet_contract: malformed contract entries: " + "; ".join(problems))
        declared = {}
        if group_by == "gpunode_fabric":
            # Grouped by the fabrics of the run's resolved intent, and each fabric's declared settings are the
            # expected values (not the majority's): hosts that agree on what nobody declared are drift too.
            try:
                intent = resolved_intent(task_vars, list(hosts))
            except IntentError as exc:
                raise AnsibleActionFail("fleet_contract: the fabric intent does not hold: "
                                        + "; ".join(exc.errors)) from None
            for host, fabric in intent["hosts"].items():
                if host in gathered:
                    gathered[host]["fabric"] = fabric
            declared = {name: declared_contract(fabric, normalize_value) for name, fabric in intent["fabrics"].items()}
        compared = compare(gathered, list(hosts), declared)
        table = format_table(compared)
        report = {"ok": compared["ok"], "sources": sources, "group_by": group_by,
                  "hosts": {h: {"fabric": g["fabric"], "entries": len(g["entries"])} for h, g in gathered.items()},
                  "fabrics": compared["fabrics"], "drift": compared["drift"], "table": table}
        if output:
            path = os.path.expanduser(output)
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            with tempfile.NamedTemporaryFile("w", dir=os.path.dirname(os.path.abspath(path)), delete=False,
                                             prefix=".fleet_contract.", suffix=".json") as handle:
                json.dump(report, handle, indent=2, sort_keys=True, default=str)
                handle.write("\n")
            os.chmod(handle.name, 0o644)  # noqa: S103 - a report others read, like /var/lib/gpunode/*.json
            os.replace(handle.name, path)
        result.update(changed=False, contract_ok=compared["ok"], fabrics=compared["fabrics"],
                      drift=compared["drift"], table=table, output=output)
        if not compared["ok"] and fail_on_drift:
            result["failed"] = True
            result["msg"] = "fleet contract broken: hosts of one fabric disagree\n" + table
        else:
            checked = sum(len(f["expected"]) for f in compared["fabrics"].values())
            result["msg"] = (f"fleet contract holds: {checked} setting(s) agree across {len(gathered)} host(s) in "
                             f"{len(compared['fabrics'])} fabric(s)") if compared["ok"] else table
        return result
