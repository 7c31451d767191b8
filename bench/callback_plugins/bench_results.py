# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Record every host result of a run, by play and task line, into the JSON file named by BENCH_RESULTS_FILE.

The shape is ansible.posix.json's (``{"plays": [{"play": {"name"}, "tasks": [{"task": {"name", "id"},
"hosts": {host: result + action}}]}], "stats": {host: summary}}``), but a task line is found by its id whatever the
strategy. ansible.posix.json lines results up by task start only under the strategies it knows to be lockstep
(``linear``, ``debug``); under any other (``free``, Mitogen's), a meta task's result lands on the task line before
it. The benches (bench/bench_site.py) count task lines with this.
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: bench_results
type: aggregate
short_description: Record every host result by play and task line into BENCH_RESULTS_FILE (benches and tests)
description:
  - Records each host result with the task line's action, in ansible.posix.json's shape, into the file named by
    the E(BENCH_RESULTS_FILE) environment variable, at the end of the run. Meta tasks are recorded too.
  - E(BENCH_RESULTS_KEYS), a comma-separated list of result keys, keeps only those keys of each result (a timed
    run then does not pay for copying and writing every fact it sets); unset, every key is kept.
"""

import json
import os

from ansible.parsing.ajson import AnsibleJSONEncoder
from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "bench_results"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, display=None):
        super().__init__(display)
        self._plays = []
        self._tasks = {}  # task id -> entry of the current play
        keys = os.environ.get("BENCH_RESULTS_KEYS")
        self._keys = frozenset(k.strip() for k in keys.split(",") if k.strip()) if keys else None

    def v2_playbook_on_play_start(self, play):
        self._plays.append({"play": {"name": play.get_name(), "id": str(play._uuid)}, "tasks": []})
        self._tasks = {}

    def _record(self, result, **flags):
        task = result._task
        entry = self._tasks.get(task._uuid)
        if entry is None:
            entry = self._tasks[task._uuid] = {"task": {"name": task.get_name(), "id": task._uuid}, "hosts": {}}
            self._plays[-1]["tasks"].append(entry)
        data = result._result
        if self._keys is not None:
            data = {key: value for key, value in data.items() if key in self._keys}
        entry["hosts"][result._host.get_name()] = {**data, **flags, "action": task.action}

    def v2_runner_on_ok(self, result):
        self._record(result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._record(result, failed=True)

    def v2_runner_on_skipped(self, result):
        self._record(result, skipped=True)

    def v2_runner_on_unreachable(self, result):
        self._record(result, unreachable=True)

    def v2_playbook_on_stats(self, stats):
        path = os.environ.get("BENCH_RESULTS_FILE")
        if not path:
            return
        summary = {host: stats.summarize(host) for host in sorted(stats.processed)}
        with open(path, "w", encoding="utf-8") as handle:
            json.dump({"plays": self._plays, "stats": summary}, handle, cls=AnsibleJSONEncoder, sort_keys=True)
