# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Load the collection's controller-side plugins once, in ansible-playbook itself, before it forks workers."""

from __future__ import annotations

DOCUMENTATION = r"""
name: preload
type: aggregate
short_description: Load the collection's filters and action plugins once per run instead of once per task
version_added: 0.1.0
description:
  - Ansible runs each task of each host in a worker process that ansible-playbook forks for that task. A plugin
    the ansible-playbook process has not loaded is loaded again in every worker that uses it, and forgotten
    when the worker exits.
  - The roles of this collection use its filters (the plans, the contract, the validation judge) and its action
    plugins on most task lines, so without this callback each such task line and host pays the import of the
    plugin and its module_utils. On the three-host simulated fleet that was about 3 s of a 19 s re-run of
    C(playbooks/site.yml) (BENCHMARKS.md).
  - When the playbook starts, this callback loads every filter, lookup and action plugin of the collection, and the
    C(ansible.builtin) action plugins the roles use, into the ansible-playbook process. Every worker forked
    after that inherits them.
  - Before each task starts, it also moves every object ansible-playbook holds into Python's permanent
    garbage-collector generation (C(gc.freeze), the CPython documentation's advice for a process that forks
    workers). A worker's collections then walk only the objects it makes itself, instead of every inherited
    one, which also spares the copy-on-write of their pages. On the three-host simulated fleet this took about
    1 s off a 17.5 s re-run (BENCHMARKS.md). The price is that a reference cycle ansible-playbook made before
    a task and dropped after it is not freed until the run ends; the run measured grew by about 2 MB of
    90 MB.
  - It prints nothing and changes no task, result or variable. A plugin that cannot be loaded is left alone
    here (logged at verbosity 3); the task that uses it reports the error as it would without this callback.
  - The collection's C(ansible.cfg) enables it. With another configuration, add
    C(mlplatform.gpunode.preload) to C(callbacks_enabled) (or E(ANSIBLE_CALLBACKS_ENABLED)); the playbooks
    work the same without it, only slower.
requirements:
  - Enabled in C(callbacks_enabled) (C([defaults]) of C(ansible.cfg)) or E(ANSIBLE_CALLBACKS_ENABLED).
seealso:
  - name: Ansible configuration, CALLBACKS_ENABLED
    description: How to enable a callback plugin.
    link: https://docs.ansible.com/ansible/latest/reference_appendices/config.html#callbacks-enabled
  - name: Python, gc.freeze
    description: Freeze all objects tracked by the garbage collector, before a fork.
    link: https://docs.python.org/3/library/gc.html#gc.freeze
  - name: Ansible, controlling playbook execution (forks and strategies)
    description: Ansible runs each task in forked worker processes.
    link: https://docs.ansible.com/ansible/latest/playbook_guide/playbooks_strategies.html
"""

import gc
import importlib
import pkgutil

from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import filter_loader, lookup_loader

COLLECTION = "mlplatform.gpunode"
_PACKAGE = "ansible_collections.mlplatform.gpunode.plugins"

# The ansible.builtin action plugins the roles and playbooks use (ansible.builtin.<name> on a task line whose
# action is controller-side, or whose module is run through the named action plugin).
BUILTIN_ACTIONS = (
    "assert", "command", "copy", "debug", "fail", "gather_facts", "group_by", "include_vars", "normal",
    "reboot", "set_fact", "template", "validate_argument_spec", "wait_for_connection",
)


def _submodules(package_name):
    """The modules of a plugin package of the collection (empty when the package is missing)."""
    try:
        package = importlib.import_module(package_name)
    except ImportError:
        return []
    return [f"{package_name}.{info.name}" for info in pkgutil.iter_modules(package.__path__) if not info.ispkg]


def preload(log=None):
    """Load the collection's filters and lookups (through Ansible's plugin loaders, so that their per-process
    caches are filled too), import its action plugins and the builtin ones in BUILTIN_ACTIONS. Returns the
    loaded filter and lookup names and the imported module names; ``log(message)`` is called for each plugin
    that did not load."""
    filters, modules = [], []
    for module_name in _submodules(f"{_PACKAGE}.filter"):
        try:
            names = sorted(importlib.import_module(module_name).FilterModule().filters())
            filters.extend(name for name in names if filter_loader.get(f"{COLLECTION}.{name}") is not None)
        except Exception as exc:  # noqa: BLE001 -- the task that uses the filter reports it; a preload must not
            if log:
                log(f"preload: {module_name} not loaded: {exc}")
    for module_name in _submodules(f"{_PACKAGE}.lookup"):
        try:
            if lookup_loader.get(f"{COLLECTION}.{module_name.rsplit('.', 1)[1]}") is not None:
                filters.append(module_name.rsplit(".", 1)[1])
        except Exception as exc:  # noqa: BLE001 -- as above: the task that uses the lookup reports the error
            if log:
                log(f"preload: {module_name} not loaded: {exc}")
    action_modules = _submodules(f"{_PACKAGE}.action") + [f"ansible.plugins.action.{name}" for name in BUILTIN_ACTIONS]
    for module_name in action_modules:
        try:
            importlib.import_module(module_name)
            modules.append(module_name)
        except Exception as exc:  # noqa: BLE001 -- as above: the task that runs the action reports the error
            if log:
                log(f"preload: {module_name} not loaded: {exc}")
    return filters, modules


class CallbackModule(CallbackBase):
    """Load the collection's plugins in the ansible-playbook process when the playbook starts."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "mlplatform.gpunode.preload"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_start(self, playbook):
        filters, modules = preload(log=self._display.vvv)
        self._display.vvv(f"preload: {len(filters)} filters and lookups and {len(modules)} action plugins loaded "
                          "before the workers fork")

    def v2_playbook_on_task_start(self, task, is_conditional):
        # The strategy forks this task's workers after this call: they inherit a frozen heap.
        gc.freeze()

    def v2_playbook_on_handler_task_start(self, task):
        gc.freeze()
