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
  - When the playbook starts, it also forks one helper process, at low priority, that builds the payload
    (AnsiballZ) of each of the collection's modules the playbook's task lines name, in the order they appear, into
    the run's own module cache, with ansible-core's own builder, the same way and under the same lock as a worker
    does. ansible-core builds a module's payload once a run, in the first worker that needs it, while every host of
    that task line waits (on the three-host simulated fleet, about 0.3 s for C(host_state) and 0.2 s for
    C(node_validation)); the helper builds it on another core while ansible-playbook runs the task lines before
    it. A worker that finds the payload built uses it; one that comes first builds it itself, as without this
    callback. Modules named only in files included at run time (C(include_tasks)) and modules with an action plugin
    of their own are left to the workers. The helper ends when it is done, after 60 seconds at most, or when the
    playbook ends.
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
import os
import pkgutil
import signal
import sys

from ansible import constants as C
from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import action_loader, filter_loader, lookup_loader, module_loader

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


def playbook_modules(plays):
    """The collection's modules the task lines of ``plays`` name (pre_tasks, tasks, post_tasks and handlers, roles
    imported statically included), in order of appearance: ``[(fqcn, path)]``. Left out: an action plugin of the
    same name (it decides what runs) and a name no module file answers."""
    from ansible.playbook.block import Block

    names = []

    def walk(items):
        for item in items or ():
            if isinstance(item, Block):
                walk(item.block)
                walk(item.rescue)
                walk(item.always)
            else:
                action = getattr(item, "resolved_action", None) or ""
                if action.startswith(f"{COLLECTION}.") and action not in names:
                    names.append(action)

    for play in plays:
        walk(play.pre_tasks + play.tasks + play.post_tasks + play.handlers)
    found = []
    for name in names:
        if action_loader.has_plugin(name):
            continue
        context = module_loader.find_plugin_with_context(name)
        if context.resolved and context.plugin_resolved_path:
            found.append((name, context.plugin_resolved_path))
    return found


def build_payloads(modules):
    """Build each module's payload into the run's module cache (ansible-core's modify_module, which writes the
    cache under its own lock, then adds what depends on the host: that part is dropped here). Returns the names
    built or found built; a module that does not build is left to its worker, which reports the error."""
    from ansible.executor.module_common import modify_module
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    templar = Templar(loader=DataLoader())
    compression = C.config.get_config_value("DEFAULT_MODULE_COMPRESSION")
    # Only the part after the cache depends on the host (the interpreter line): any interpreter serves here.
    task_vars = {"ansible_python_interpreter": sys.executable}
    done = []
    for name, path in modules:
        try:
            modify_module(module_name=name, module_path=path, module_args={}, templar=templar, task_vars=task_vars,
                          module_compression=compression)
            done.append(name)
        except Exception:  # noqa: BLE001, S112 -- the worker builds it again and reports the error
            continue
    return done


def start_builder(modules, timeout=60):
    """Fork the helper that runs build_payloads(modules) at low priority; its pid, or None when there is nothing
    to build or it cannot fork."""
    if not modules:
        return None
    C.DEFAULT_LOCAL_TMP  # noqa: B018 -- the run's temporary directory exists before the fork: the helper writes there
    gc.freeze()
    try:
        pid = os.fork()
    except OSError:
        return None
    if pid:
        return pid
    code = 1
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.alarm(timeout)  # never outlive a stuck build: the lock it holds goes with it
        os.nice(10)
        build_payloads(modules)
        code = 0
    finally:
        os._exit(code)


def stop_builder(pid, wait=False):
    """Reap the helper (without waiting, unless ``wait``: then end it first). Returns True once it is gone."""
    if pid is None:
        return True
    try:
        if wait:
            os.kill(pid, signal.SIGTERM)
        done, _status = os.waitpid(pid, 0 if wait else os.WNOHANG)
    except (ChildProcessError, ProcessLookupError):
        return True
    return bool(done)


class CallbackModule(CallbackBase):
    """Load the collection's plugins in the ansible-playbook process when the playbook starts."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "mlplatform.gpunode.preload"
    CALLBACK_NEEDS_ENABLED = True

    _builder = None

    def v2_playbook_on_start(self, playbook):
        filters, modules = preload(log=self._display.vvv)
        self._display.vvv(f"preload: {len(filters)} filters and lookups and {len(modules)} action plugins loaded "
                          "before the workers fork")
        try:
            payloads = playbook_modules(playbook.get_plays())
        except Exception as exc:  # noqa: BLE001 -- the workers build the payloads as they would without this
            self._display.vvv(f"preload: no module payloads built ahead: {exc}")
            payloads = []
        self._builder = start_builder(payloads)
        if self._builder:
            self._display.vvv(f"preload: building {len(payloads)} module payloads ahead (pid {self._builder}): "
                              + ", ".join(name for name, _path in payloads))

    def v2_playbook_on_task_start(self, task, is_conditional):
        if self._builder and stop_builder(self._builder):
            self._builder = None
        # The strategy forks this task's workers after this call: they inherit a frozen heap.
        gc.freeze()

    def v2_playbook_on_stats(self, stats):
        if self._builder:
            stop_builder(self._builder, wait=True)
            self._builder = None

    def v2_playbook_on_handler_task_start(self, task):
        gc.freeze()
