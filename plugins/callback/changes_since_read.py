# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Count, per host, the task results that reported a change since this run's host read."""

from __future__ import annotations

DOCUMENTATION = r"""
name: changes_since_read
type: aggregate
short_description: Count the changes on each host since this run's read of it, for the roles to reuse the read
version_added: 0.2.0
description:
  - The discovery role reads each host once per run (M(mlplatform.gpunode.host_state)) and the later roles plan
    against that read. The validation role judges a host on the same read, without reading it back, when nothing
    changed on the host since; this callback tells it so.
  - For every task result it counts, per host, the results that reported C(changed) (a task on the host, one
    delegated for it, a loop with a changed item, a failed or unreachable result counts as well when it reported
    a change or could have; C(unreachable) always counts). A result of M(mlplatform.gpunode.host_state) that
    succeeded starts the host's count again at 0, and notes when it came (the lookup's C(max_age)).
  - The lookup P(mlplatform.gpunode.changes_since_read#lookup) returns the count. Without this callback it returns
    C(-1) and the validation role reads the host back, as it does after a change.
  - It prints nothing and changes no task, result or variable.
  - The collection's C(ansible.cfg) enables it. With another configuration, add
    C(mlplatform.gpunode.changes_since_read) to C(callbacks_enabled) (or E(ANSIBLE_CALLBACKS_ENABLED)).
requirements:
  - Enabled in C(callbacks_enabled) (C([defaults]) of C(ansible.cfg)) or E(ANSIBLE_CALLBACKS_ENABLED).
seealso:
  - name: Ansible configuration, CALLBACKS_ENABLED
    description: How to enable a callback plugin.
    link: https://docs.ansible.com/ansible/latest/reference_appendices/config.html#callbacks-enabled
"""

from ansible.plugins.callback import CallbackBase
from ansible_collections.mlplatform.gpunode.plugins.plugin_utils import changes_since_read as counts


def _action(result):
    task = result._task
    return getattr(task, "resolved_action", None) or getattr(task, "action", None)


class CallbackModule(CallbackBase):
    """Record each host's changed results since its read (plugin_utils.changes_since_read)."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "mlplatform.gpunode.changes_since_read"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        counts.enable()

    def _record(self, result, read_ok=False, changed=None):
        if changed is None:
            changed = bool(result._result.get("changed", False))
        counts.record(result._host.get_name(), _action(result), changed, read_ok=read_ok)

    def v2_runner_on_ok(self, result):
        self._record(result, read_ok=True)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        # A module that failed midway may have changed the host without saying so.
        self._record(result, changed=True)

    def v2_runner_on_unreachable(self, result):
        self._record(result, changed=True)

    def v2_runner_on_async_failed(self, result):
        self._record(result, changed=True)
