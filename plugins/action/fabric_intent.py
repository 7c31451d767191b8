# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller side of ``mlplatform.gpunode.fabric_intent`` (documentation: plugins/modules/fabric_intent.py)."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.mlplatform.gpunode.plugins.module_utils.intent import IntentError
from ansible_collections.mlplatform.gpunode.plugins.plugin_utils.fabric_intent import resolved_intent


class ActionModule(ActionBase):
    """Resolve the fabric declaration of every play host, in one pass, on the controller."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("hosts",))

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)  # refuses an option outside _VALID_ARGS, naming it
        hosts = self._task.args.get("hosts") or task_vars.get("ansible_play_hosts_all") or []
        if not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts):
            raise AnsibleActionFail(f"fabric_intent: hosts must be a list of host names, got {hosts!r}")
        unknown = [h for h in hosts if h not in task_vars["hostvars"]]
        if unknown:
            raise AnsibleActionFail(f"fabric_intent: hosts {', '.join(unknown)} are not in the inventory")
        try:
            # This run's intent when an earlier task registered it for these hosts: every role starts with this
            # task (a role may run alone), and the declaration is resolved once per run.
            resolved = resolved_intent(task_vars, hosts)
        except IntentError as exc:
            result.update(failed=True, errors=exc.errors,
                          msg="fabric intent does not hold, nothing was changed on any host:\n- "
                              + "\n- ".join(exc.errors))
            return result
        result.update(changed=False, fabrics=resolved["fabrics"], hosts=resolved["hosts"],
                      msg=f"fabric intent of {len(resolved['hosts'])} host(s) in {len(resolved['fabrics'])} "
                          f"fabric(s): " + ", ".join(f"{name} ({f['transport']})"
                                                     for name, f in resolved["fabrics"].items()))
        return result
