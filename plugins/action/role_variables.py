# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller side of ``mlplatform.gpunode.role_variables`` (documentation: plugins/modules/role_variables.py)."""

from __future__ import annotations

import os

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase
from ansible_collections.mlplatform.gpunode.plugins.filter.inputs import unknown_variables
from ansible_collections.mlplatform.gpunode.plugins.plugin_utils.checks import parse_checks, run_checks


def role_options(role_path, loader):
    """The options of the role's ``meta/argument_specs.yml`` entry point ``main`` (name -> spec), as Ansible's
    ``loader`` (the action's) parsed the file when it loaded the role: its DataLoader keeps every file it parsed, and
    the task's worker inherits that, so the file is not parsed again per host and role."""
    path = os.path.join(role_path, "meta", "argument_specs.yml")
    try:
        specs = loader.load_from_file(path, unsafe=True) or {}  # read-only use: no deep copy
        options = specs["argument_specs"]["main"].get("options") or {}
        if not isinstance(options, dict):
            raise TypeError("options is not a mapping")
        return options
    except (OSError, AnsibleError, KeyError, TypeError, AttributeError) as exc:
        raise AnsibleActionFail(f"role_variables: cannot read the options of {path}: {exc}") from exc


class ActionModule(ActionBase):
    """Warn about variables with the role's prefix that the role does not know."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("prefix", "published", "checks", "validate"))

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
        validate = args.get("validate", True)
        if not isinstance(validate, bool):
            raise AnsibleActionFail(f"role_variables: validate must be a boolean, got {validate!r}")
        role_path = task_vars.get("role_path")
        if not role_path:
            raise AnsibleActionFail("role_variables: runs inside a role (it reads the role's meta/argument_specs.yml)")
        options = role_options(role_path, self._loader)
        known = sorted(options) + list(published)
        found = unknown_variables([name for name in task_vars if name.startswith(prefix)], known, prefix)
        host = task_vars.get("inventory_hostname", "?")
        result.update(changed=False, unknown=found)
        if found:
            result["warnings"] = [f"{host}: {item['message']}" for item in found]
        if validate:
            # What Ansible's own check at role start does (ansible.builtin.validate_argument_spec): the values the
            # host sees for the role's options, templated, against meta/argument_specs.yml; the same message.
            errors = ArgumentSpecValidator(options).validate(
                self._templar.template({name: task_vars[name] for name in options if name in task_vars}),
                validate_role_argument_spec=True).error_messages
            if errors:
                result.update(failed=True, msg="Validation of arguments failed:\n" + "\n".join(errors),
                              argument_errors=errors)
                return result
        # The role's first input checks, after the warning (a typo it names may be why a check fails).
        return run_checks(self._templar, checks, result) if checks else result
