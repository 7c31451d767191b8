# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller side of ``mlplatform.gpunode.checks`` (documentation: plugins/modules/checks.py)."""

from __future__ import annotations

from ansible.plugins.action import ActionBase
from ansible_collections.mlplatform.gpunode.plugins.plugin_utils.checks import parse_checks, run_checks


class ActionModule(ActionBase):
    """Evaluate the checks in order; fail at the first that does not hold, with its message."""

    TRANSFERS_FILES = False
    _requires_connection = False
    _VALID_ARGS = frozenset(("checks",))

    @classmethod
    def finalize_task_arg(cls, name, value, templar, context):
        # The hook ansible.builtin.assert uses to keep `that` raw (ansible-core 2.19 and newer, the versions the
        # collection supports): conditions and messages are templated one by one in run().
        if name == "checks" and isinstance(value, list):
            return value
        return super().finalize_task_arg(name, value, templar, context)

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars or {})  # refuses an option outside _VALID_ARGS, naming it
        return run_checks(self._templar, parse_checks(self._task.args.get("checks")), result)
