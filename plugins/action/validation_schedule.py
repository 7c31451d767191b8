# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller side of ``mlplatform.gpunode.validation_schedule`` (documentation:
plugins/modules/validation_schedule.py)."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.validation import check_type_int
from ansible.plugins.action import ActionBase
from ansible_collections.mlplatform.gpunode.plugins.module_utils import validation
from ansible_collections.mlplatform.gpunode.plugins.plugin_utils import action_args
from ansible_collections.mlplatform.gpunode.plugins.plugin_utils.fleet_vars import FleetVars

INTEGERS = {"forks": (check_type_int, 5, 1, 10000), "base_port": (check_type_int, 18515, 1, validation.MAX_PORT),
            "test_timeout": (check_type_int, 60, 1, 86400), "server_start_s": (check_type_int, 30, 0, 86400)}


def gather(hostvars, hosts, hw_var="gpunode_hw", fabric_var="gpunode_fabric", default_fabric="default",
           address_var="__validation_address"):
    """One pass over ``hosts``: ``({host: {fabric, platform, rails}}, {host: address}, problems)``, each host's
    discovery result, fabric and address as it published them (plugin_utils/fleet_vars.py)."""
    fleet = FleetVars(hostvars)
    specs, addresses, problems = {}, {}, []
    for host in hosts:
        spec = validation.schedule_host(fleet.get(host, hw_var), fleet.get(host, fabric_var) or default_fabric)
        if spec is None:
            problems.append(f"{host}: {hw_var} is not a discovery result with rails (run the discovery role first)")
            continue
        specs[host] = spec
        address = fleet.get(host, address_var)
        if address not in (None, ""):
            addresses[host] = str(address)
    return specs, addresses, problems


class ActionModule(ActionBase):
    """Compute the fleet's ib_write_bw schedule once, on the controller, from every play host's facts."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("hosts", "hw_var", "fabric_var", "default_fabric", "address_var", *INTEGERS))

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)  # refuses an option outside _VALID_ARGS, naming it
        args = self._task.args
        numbers = action_args.numbers("validation_schedule", args, INTEGERS)
        hosts = action_args.play_hosts("validation_schedule", args, task_vars)
        given = (("hw_var", "gpunode_hw"), ("fabric_var", "gpunode_fabric"), ("default_fabric", "default"),
                 ("address_var", "__validation_address"))
        names = {k: str(args.get(k) or d) for k, d in given}
        specs, addresses, problems = gather(task_vars["hostvars"], hosts, **names)
        if problems:
            raise AnsibleActionFail("validation_schedule: " + "; ".join(problems))
        try:
            schedule = validation.bandwidth_schedule(specs, order=list(hosts), forks=numbers["forks"],
                                                     base_port=numbers["base_port"],
                                                     test_timeout=numbers["test_timeout"],
                                                     server_start_s=numbers["server_start_s"], addresses=addresses)
        except ValueError as exc:
            raise AnsibleActionFail(f"validation_schedule: {exc}") from None
        missing = sorted({t["server"] for t in schedule["tests"]} - set(addresses))
        if missing:
            raise AnsibleActionFail(f"validation_schedule: no {names['address_var']} for server host(s) "
                                    f"{', '.join(missing)}; clients could not reach them")
        result.update(changed=False, schedule=schedule, addresses=addresses,
                      msg=f"{len(schedule['tests'])} ib_write_bw test(s) in {len(schedule['phases'])} phase(s), "
                          f"{schedule['waves']} wave(s) of {numbers['forks']}, at most {schedule['max_fan_in']} "
                          f"peer(s) per host rail, ports {schedule['port_range'][0]}-{schedule['port_range'][1]}")
        return result
