# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller side of ``mlplatform.gpunode.role_variables`` (documentation: plugins/modules/role_variables.py)."""

from __future__ import annotations

import os

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.plugins.action import ActionBase
from ansible_collections.mlplatform.gpunode.plugins.filter.inputs import unknown_variables
from ansible_collections.mlplatform.gpunode.plugins.plugin_utils.checks import parse_checks, run_checks


def known_options(role_path, loader):
    """The option names of the role's ``meta/argument_specs.yml`` entry point ``main``, as Ansible's ``loader``
    (the action's) parsed the file when it loaded the role: its DataLoader keeps every file it parsed, and the
    task's worker inherits that, so the file is not parsed again per host and role."""
    path = os.path.join(role_path, "meta", "argument_specs.yml")
    try:
        specs = loader.load_from_file(path, unsafe=True) or {}  # read-only use: no deep copy
        return sorted((specs["argument_specs"]["main"].get("options") or {}).keys())
    except (OSError, AnsibleError, KeyError, TypeError, AttributeError) as exc:
        raise AnsibleActionFail(f"role_variables: cannot read the options of {path}: {exc}") from exc


class ActionModule(ActionBase):
    """Warn about variables with the role's prefix that the role does not know."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("prefix", "published", "checks"))

    @classmethod
    def finalize_task_arg(cls, name, value, templar, context):
        # checks stay raw, as in the checks action: each condition and message is templated in run(), in order.
        if name == "checks" and isinstance(value, list):
            return value
        return super().finalize_task_arg(name, value, templar, context)

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars or {})  # refuses an option outside _VALID_ARGS, naming it
        task_vars = task_vars or {}
        args = self._task.args
        prefix = args.get("prefix")
        published = args.get("published") or []
        if not isinstance(prefix, str) or not prefix.endswith("_") or prefix.startswith("_"):
            raise AnsibleActionFail(f"role_variables: prefix must be a role prefix such as ofed_, got {prefix!r}")
        if not isinstance(published, list) or not all(isinstance(n, str) for n in published):
            raise AnsibleActionFail("role_variables: published must be a list of variable names")
        # the shape of every check is judged before anything is evaluated
        checks = parse_checks(args["checks"]) if args.get("checks") is not None else []
        role = getattr(self._task, "_role", None)
        if role is None:
            raise AnsibleActionFail("role_variables: runs inside a role (it reads the role's meta/argument_specs.yml)")
        known = known_options(role._role_path, self._loader) + list(published)
        found = unknown_variables([name for name in task_vars if name.startswith(prefix)], known, prefix)
        host = task_vars.get("inventory_hostname", "?")
        result.update(changed=False, unknown=found)
        if found:
            result["warnings"] = [f"{host}: {item['message']}" for item in found]
        # The role's first input checks, after the warning (a typo it names may be why a check fails).
        return run_checks(self._templar, checks, result) if checks else result
