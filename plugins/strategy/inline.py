# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The linear strategy, with the task lines that never reach a host run in ansible-playbook itself."""

from __future__ import annotations

DOCUMENTATION = r"""
name: inline
short_description: The linear strategy, running the task lines that never reach a host without a worker process
version_added: 0.1.0
description:
  - Runs a play exactly as C(ansible.builtin.linear) does (every host finishes a task before any host starts
    the next), with one difference in where a task line runs.
  - C(ansible.builtin.linear) forks a worker process for every task line and host, including a C(set_fact), an
    C(assert) or a task whose C(when) is false. On a 100 MB ansible-playbook process each fork costs thousands
    of copy-on-write page faults in the worker and in ansible-playbook. The roles of this collection read a host
    once and plan on the controller, so most of an idempotent re-run is such task lines. On the three-host
    simulated fleet the forks were 2 million page faults and 8 of 20 CPU seconds of a 17 s re-run of
    C(playbooks/site.yml) (BENCHMARKS.md).
  - This strategy runs a task line in ansible-playbook's own process, with Ansible's own task executor and the
    same result path, when it cannot reach the host. That is, when the task has no loop, no C(until), no
    C(retries) and no C(delegate_to), and
  - its action is a controller-side one that does not touch the host (C(ansible.builtin.set_fact),
    C(ansible.builtin.assert), C(ansible.builtin.debug), C(ansible.builtin.fail),
    C(ansible.builtin.include_vars), C(ansible.builtin.include_tasks), C(ansible.builtin.include_role),
    C(ansible.builtin.validate_argument_spec), C(mlplatform.gpunode.role_variables),
    C(mlplatform.gpunode.checks)), or
  - it has a C(when). Ansible's task executor evaluates it here, once, on the variables it would use in a
    worker (with the connection's, such as C(ansible_host)). False, the line is reported skipped; true, the
    line goes to a worker before anything else of it is done; an error in it is reported as in a worker.
  - A host on a persistent connection (C(network_cli), C(httpapi)) runs every task line in a worker.
  - Every other task line forks a worker as C(ansible.builtin.linear) does, within C(forks).
  - The results, callbacks, C(register), handlers, failures, C(ignore_errors), C(rescue), C(any_errors_fatal)
    and C(max_fail_percentage) are those of C(ansible.builtin.linear). The inline lines run one host after the
    other; each takes milliseconds. Their results go to the strategy's list of results, where the result queue's
    reader thread puts a worker's, not through that queue and thread, once every host of the task line is queued.
    As under C(ansible.builtin.linear), another host's line of the same task sees the variables and failed hosts
    from before it.
  - It also compiles each Jinja template and conditional once instead of once per task line and host
    (ansible-core 2.19 keeps no compiled template); the forked workers inherit the compiled code.
  - The compiled templates are kept across runs in one file, C(ANSIBLE_HOME/mlplatform.gpunode/compile-cache)
    (0600, in a 0700 directory), written once when ansible-playbook exits and only when the run compiled
    something new. It is used only when it belongs to the user, nobody else can write it or its directory, and it
    was written by the same Python, ansible-core and Jinja; otherwise it is ignored and written anew. An entry
    is used only after the filters and tests it was compiled with are found the same (there or missing, and passed
    the same context); otherwise it is compiled again. Only templates from plaintext files are written to it,
    never a vaulted value, a template from a file ansible-vault encrypted whole, or one whose file is not known.
    E(GPUNODE_COMPILE_CACHE) names another file, or is C(off) to keep the compiled templates for the run only.
    C(-vvv) shows, after each play, how many templates were reused, compiled and loaded from the file.
  - It resolves each filter and test name once a run instead of once per task line and host (ansible-core 2.19
    searches a collection's filter files again for every new template environment), keeping what the loader
    found, or that it found none; a lookup that fails is not kept and fails again with Ansible's message.
  - The collection's C(ansible.cfg) selects it (C(strategy = mlplatform.gpunode.inline)). To go back to the
    built-in strategy, set E(ANSIBLE_STRATEGY=linear) or C(strategy) in C([defaults]). The playbooks do the
    same with either.
notes:
  - It relies on ansible-core's strategy and task executor classes, as every strategy plugin does, and on
    ansible-core 2.19's template compiler for the memo; C(meta/runtime.yml) pins ansible-core 2.19.
  - ansible-core 2.19 prints a deprecation warning for every strategy plugin outside C(ansible.builtin) ("Use of
    strategy plugins not included in ansible.builtin are deprecated"), once a run. The strategy works the same in
    all of 2.19; if a later ansible-core drops such plugins, C(strategy = linear) gives the same results.
  - Callbacks that recognise a lockstep strategy by its name (C(ansible.posix.json) looks for C(linear) or
    C(debug)) treat this one as they treat C(free); the default callback's output is the same as under C(linear).
  - A C(when) that holds on a line that reaches the host is evaluated twice (here, then in the worker), so a
    lookup in it runs twice.
seealso:
  - name: Ansible, controlling playbook execution (strategies and forks)
    description: Ansible's strategies, and the worker it forks for each task line and host.
    link: https://docs.ansible.com/ansible/latest/playbook_guide/playbooks_strategies.html
  - name: ansible.builtin.linear
    description: The strategy this one extends.
    link: https://docs.ansible.com/ansible/latest/collections/ansible/builtin/linear_strategy.html
"""

import os

from ansible import constants as C
from ansible._internal import _task
from ansible.executor.task_executor import TaskExecutor
from ansible.executor.task_result import _RawTaskResult
from ansible.plugins.loader import get_plugin_loader_namespace
from ansible.plugins.strategy.linear import StrategyModule as LinearStrategyModule
from ansible.utils.display import Display
from ansible_collections.mlplatform.gpunode.plugins.plugin_utils import compile_memo, plugin_lookup_memo

display = Display()

# Actions that run on the controller only and never open the host's connection, as Ansible resolves them (an
# ``ansible.legacy.*`` resolution is a local action_plugins/ override, which is not one of these).
CONTROLLER_ACTIONS = frozenset(
    "ansible.builtin." + name
    for name in ("set_fact", "assert", "debug", "fail", "include_vars", "include_tasks", "include_role",
                 "validate_argument_spec")
) | frozenset(("mlplatform.gpunode.role_variables", "mlplatform.gpunode.checks"))


# Where the compiled templates are kept across runs (compile_memo), unless GPUNODE_COMPILE_CACHE names another file
# or is "off".
CACHE_ENV = "GPUNODE_COMPILE_CACHE"


def compile_cache_path(environ=None):
    """The compile cache file of this run: E(GPUNODE_COMPILE_CACHE), None when it is ``off`` (or ``false``, ``no``,
    ``0``), else ``mlplatform.gpunode/compile-cache`` in Ansible's home directory (``ANSIBLE_HOME``, by default
    ``~/.ansible``)."""
    value = (os.environ if environ is None else environ).get(CACHE_ENV)
    if value is not None and value.strip().lower() in ("off", "false", "no", "0", ""):
        return None
    if value:
        return os.path.abspath(os.path.expanduser(value))
    return os.path.join(os.path.expanduser(C.config.get_config_value("ANSIBLE_HOME")), "mlplatform.gpunode",
                        "compile-cache")


def inline_reason(task):
    """Why ``task`` can run without a worker: ``"controller action"``, ``"conditional"`` (its ``when`` decides:
    false, the executor only reports it skipped; true, it goes to a worker), or None (fork a worker)."""
    if task.loop is not None or task.loop_with or task.until or task.retries is not None or task.delegate_to:
        return None
    # The action as linear resolved it (collections keyword, action_plugins/ overrides), not as written.
    if task.resolved_action in CONTROLLER_ACTIONS:
        return "controller action"
    if task.when:
        return "conditional"
    return None


def _stop_when_true(run_task):
    """Make the executor's evaluation of ``run_task``'s ``when`` (its first conditional, on the variables it
    adds for the connection) hand a true result to a worker before the task goes further: the executor then
    evaluates it once for a skipped line, and nothing of a line that runs is done here."""
    resolve = run_task._resolve_conditional

    def resolve_or_stop(*args, **kwargs):
        if resolve(*args, **kwargs):
            raise _NeedsWorker()
        return False

    run_task._resolve_conditional = resolve_or_stop


class _NeedsWorker(BaseException):
    """The inline executor reached the point where the task needs its host: run it in a worker instead.
    (A BaseException, so that TaskExecutor.run does not turn it into a failed result.)"""


class _InlineTaskExecutor(TaskExecutor):
    """Ansible's task executor, stopped before it would use the host's connection when that is not wanted here.

    The executor creates the connection object (without connecting) right before it runs the action, after the
    conditional and the includes. Inline, that point is only reached by a controller-only action (a task inlined
    for its ``when`` leaves at the conditional when it holds, _stop_when_true) on a connection that does not
    persist. A task on a persistent connection (network_cli, httpapi), whose daemon a worker starts, goes to a
    worker there."""

    def __init__(self, *args, controller_action, **kwargs):
        super().__init__(*args, **kwargs)
        self._gpunode_controller_action = controller_action

    def _get_connection(self, cvars, templar, current_connection):
        connection = super()._get_connection(cvars, templar, current_connection)
        if not self._gpunode_controller_action or connection.supports_persistence or connection.force_persistence:
            raise _NeedsWorker()
        return connection


class StrategyModule(LinearStrategyModule):
    """``ansible.builtin.linear``; task lines that cannot reach the host run in this process."""

    def __init__(self, tqm):
        super().__init__(tqm)
        # The results of this task line's inline lines, handed to the strategy when it waits for the line's results.
        self._gpunode_held = []
        compile_memo.install(compile_cache_path())
        plugin_lookup_memo.install()

    def run(self, iterator, play_context):
        try:
            return super().run(iterator, play_context)
        finally:
            memo = compile_memo.stats()
            display.vvv(f"inline: compile memo after this play: {memo['entries']} templates, {memo['hits']} reused, "
                        f"{memo['misses']} compiled, {memo['loaded']} loaded from {memo['cache_path']}"
                        + (f" ({memo['cache_error']})" if memo["cache_error"] else ""))
            lookups = plugin_lookup_memo.stats()
            display.vvv(f"inline: filter and test names resolved: {lookups['misses']}, reused: {lookups['hits']}")

    def _take_result(self, raw_result):
        """Keep an inline line's result for the strategy, without the result queue; it is handed over when the
        strategy waits for the task line's results (_wait_on_pending_results).

        A worker's result goes through the result queue: pickled, written to a pipe, read and unpickled by the
        strategy's reader thread, which appends it to the results the main thread polls every millisecond. For a
        line run in this process that trip is only the two threads handing the interpreter to each other: about
        1.4 ms of every inline line and host (BENCHMARKS.md). The result is converted here as the reader thread
        would. It holds no lazy template value (the executor finalizes what it templates, as it must for a worker,
        whose result is pickled), and the strategy keeps of it what it keeps of a worker's, copied the same way (a
        registered result, the facts it sets).

        It is kept back until every host of the task line is queued, as a worker's result arrives after the other
        hosts' workers have forked: another host's line of the same task sees the variables, facts and failed
        hosts from before this task line, not this host's result (a ``hostvars`` read, ``ansible_play_hosts``)."""
        self._gpunode_held.append(self._convert_wire_task_result_to_raw(raw_result.as_wire_task_result()))

    def _wait_on_pending_results(self, iterator):
        """Hand the inline results of this task line to the strategy (_take_result), then wait as linear does."""
        if self._gpunode_held:
            with self._results_lock:
                self._results.extend(self._gpunode_held)
            self._gpunode_held = []
        return super()._wait_on_pending_results(iterator)

    def _queue_task(self, host, task, task_vars, play_context):
        reason = inline_reason(task)
        if reason is None:
            return super()._queue_task(host, task, task_vars, play_context)
        display.debug(f"inline: {host.name}/{task.action} ({reason})")
        self._queued_task_cache[(host.name, task._uuid)] = {
            "host": host, "task": task, "task_vars": task_vars, "play_context": play_context}
        # The executor templates the task in place (post_validate) and adds to the variables: give it its own
        # copies, as a forked worker has. The parent blocks are copied without their task lists.
        run_task = task.copy(exclude_parent=False, exclude_tasks=True)
        if reason == "conditional":
            _stop_when_true(run_task)
        try:
            with _task.TaskContext(run_task):
                result = _InlineTaskExecutor(host, run_task, dict(task_vars), play_context, self._loader,
                                             get_plugin_loader_namespace(), self._final_q, self._variable_manager,
                                             controller_action=reason == "controller action").run()
        except _NeedsWorker:
            display.debug(f"inline: {host.name}/{task.action} needs its host: forking a worker")
            del self._queued_task_cache[(host.name, task._uuid)]
            return super()._queue_task(host, task, task_vars, play_context)
        self._tqm.send_callback("v2_runner_on_start", host, task)
        # No queue, so no send failure to stand in for (a worker reports one when its result cannot be pickled).
        self._take_result(_RawTaskResult(host=host, task=run_task, return_data=result,
                                         task_fields=run_task.dump_attrs()))
        self._pending_results += 1
        return None
