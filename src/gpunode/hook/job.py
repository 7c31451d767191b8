"""One pipeline run, in its own process: ``python -m gpunode.hook.job <spec.json>``.

Why a child process and not a thread of the service: ansible-runner is built for being a
process's main program. It installs SIGINT/SIGTERM handlers when no cancel_callback is given,
configures the root logger, and on timeout or cancel SIGKILLs the whole process group of what it
started. In a child (its own session, started by ``worker.py``) none of that can reach the
service: the service's signal handlers and logging stay its own, and the worker can stop a run
with SIGTERM (this process then cancels ansible-runner through the explicit cancel_callback) or,
past a grace period, SIGKILL this session, without touching itself.

The spec (written by the worker, 0600, outside any private_data_dir) carries paths and names,
never a secret. The run's own secrets are a vars file given as ``-e @<path>``: only the path
reaches ansible-runner's ``command`` artifact. The environment is built by the worker from an
allowlist, without the hook's secret, because ansible-runner writes the whole environment into the
``command`` artifact. Each run gets a fresh private_data_dir (``env/`` files suppressed), deleted
afterwards; artifacts go to a shared directory that ansible-runner rotates.
"""

from __future__ import annotations

import base64
import json
import os
import shlex
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

import ansible_runner

_RESULT_EVENTS = {
    "runner_on_ok": "ok",
    "runner_on_failed": "failed",
    "runner_on_unreachable": "unreachable",
    "runner_on_skipped": "skipped",
}


class _Tracker:
    """Follows job events: the play each host last had a task result in (the stage reached)."""

    def __init__(self) -> None:
        self.play: str | None = None
        self.hosts: dict[str, dict] = {}

    def __call__(self, event: dict) -> bool:
        kind = event.get("event")
        data = event.get("event_data") or {}
        if kind == "playbook_on_play_start":
            self.play = data.get("play")
        elif kind in _RESULT_EVENTS and data.get("host"):
            entry = self.hosts.setdefault(data["host"], {})
            entry["stage"] = data.get("play") or self.play
            if kind in ("runner_on_failed", "runner_on_unreachable") and not data.get("ignore_errors"):
                entry["failed_task"] = data.get("task")
                entry["failed_role"] = data.get("role")
                res = data.get("res") or {}
                entry["message"] = str(res.get("msg", ""))[:500]
        return True  # keep writing the event to the artifacts


def _host_summary(stats: dict | None, tracker: _Tracker, host: str) -> dict:
    stats = stats or {}

    def n(key: str) -> int:
        return int((stats.get(key) or {}).get(host, 0))

    summary = {
        "ok": n("ok"), "changed": n("changed"), "failed": n("failures"), "unreachable": n("dark"),
        "skipped": n("skipped"), "rescued": n("rescued"), "ignored": n("ignored"),
        "processed": host in (stats.get("processed") or {}),
    }
    summary.update(tracker.hosts.get(host, {}))
    summary.setdefault("stage", None)
    return summary


def _verdict(data: object) -> str | None:
    if not isinstance(data, dict):
        return None
    for key in ("verdict", "result", "status"):
        if isinstance(data.get(key), str):
            return data[key]
    if isinstance(data.get("passed"), bool):
        return "passed" if data["passed"] else "failed"
    return None


def _read_validation(spec: dict, hosts: list[str], base_kwargs: dict) -> dict[str, dict]:
    """Slurp the validation result file from each host; ``{host: {present, verdict}}``."""
    found: dict[str, dict] = {h: {"present": False, "verdict": None} for h in hosts}
    if not hosts:
        return found

    def collect(event: dict) -> bool:
        data = event.get("event_data") or {}
        if event.get("event") == "runner_on_ok" and data.get("host") in found:
            try:
                content = json.loads(base64.b64decode(data["res"]["content"]))
            except (KeyError, ValueError, TypeError):
                content = None
            found[data["host"]] = {"present": True, "verdict": _verdict(content)}
        return True

    pdd = tempfile.mkdtemp(prefix=f"gpunode-hook-run{spec['run_id']}-validation-")
    try:
        ansible_runner.run(
            **base_kwargs, private_data_dir=pdd, ident=f"run-{spec['run_id']}-validation",
            host_pattern=",".join(hosts), module="ansible.builtin.slurp",
            module_args=f"src={spec['validation_path']}", event_handler=collect,
        )
    finally:
        shutil.rmtree(pdd, ignore_errors=True)
    return found


def command_line(spec: dict) -> str:
    """ansible-playbook's extra arguments: the run's secrets file (its path only) and the spec's extra vars
    (non-secret, as JSON)."""
    parts = []
    if spec.get("run_secrets_file"):
        parts += ["-e", "@" + spec["run_secrets_file"]]
    if spec.get("extra_vars"):
        parts += ["-e", json.dumps(spec["extra_vars"], sort_keys=True)]
    return shlex.join(parts)


def run_limit(spec: dict, names: dict[str, str]) -> str:
    """``--limit``: the spec's hosts by inventory name, or, for a run of the whole inventory, every host but the
    excluded ones (hosts being provisioned)."""
    if spec["hosts"]:
        return ",".join(names[h] for h in spec["hosts"])
    return ":".join(["all", *(f"!{h}" for h in spec.get("exclude") or [])])


def run_job(spec: dict, cancel: threading.Event) -> dict:
    """Run the playbook for ``spec['hosts']``; return (and write) the machine-readable result."""
    parent = spec.get("parent_pid")
    cancel_file = Path(spec["cancel_file"]) if spec.get("cancel_file") else None

    def cancelled() -> bool:
        # The run's own time limit is ansible-runner's `timeout` (status "timeout"), not this.
        return (cancel.is_set() or (cancel_file is not None and cancel_file.exists())
                or (parent is not None and os.getppid() != parent))

    Path(spec["artifacts_dir"]).mkdir(parents=True, exist_ok=True, mode=0o700)
    base_kwargs = {
        "artifact_dir": spec["artifacts_dir"],
        "project_dir": spec["project_dir"],
        "inventory": spec["inventory"],
        "envvars": dict(spec.get("run_env") or {}),
        "suppress_env_files": True,
        "rotate_artifacts": spec["keep_artifacts"],
        "timeout": spec["run_timeout"],
        "settings": {"idle_timeout": spec["idle_timeout"], "suppress_ansible_output": True},
        "quiet": True,
        "cancel_callback": cancelled,
    }
    tracker = _Tracker()
    names = spec.get("inventory_names") or {h: h for h in spec["hosts"]}
    started = time.time()
    pdd = tempfile.mkdtemp(prefix=f"gpunode-hook-run{spec['run_id']}-")
    try:
        cmdline = command_line(spec)
        runner = ansible_runner.run(
            **base_kwargs, private_data_dir=pdd, ident=f"run-{spec['run_id']}",
            playbook=spec["playbook"], limit=run_limit(spec, names), cmdline=cmdline or None,
            event_handler=tracker,
        )
        status, rc, stats = runner.status, runner.rc, runner.stats
    finally:
        shutil.rmtree(pdd, ignore_errors=True)
    # A run of the whole inventory (a scheduled revalidation) reports every host it processed.
    if not spec["hosts"]:
        names = {h: h for h in sorted((stats or {}).get("processed") or {})}
    hosts = {h: _host_summary(stats, tracker, names[h]) for h in names}
    stdout = Path(spec["artifacts_dir"]) / f"run-{spec['run_id']}" / "stdout"
    tail = [line for line in (stdout.read_text(errors="replace") if stdout.is_file() else "").splitlines()
            if line.strip()][-1:]
    for summary in hosts.values():
        # ansible-playbook exits 2 (a host failed) or 4 (a host unreachable) while the other hosts
        # of the batch completed: per-host stats decide; a timeout, cancel or error fails them all.
        summary["ok_overall"] = (status in ("successful", "failed") and rc in (0, 2, 4) and summary["processed"]
                                 and not summary["failed"] and not summary["unreachable"])
        if not summary["processed"]:
            summary.setdefault("message", "no task ran on this host: is it in the inventory?" if status == "successful"
                               else f"the run ended {status} before this host: {' '.join(tail)[:300]}")
    done = [h for h, s in hosts.items() if s["ok_overall"]]
    if done and not cancelled() and spec.get("read_validation", True):
        verdicts = _read_validation(spec, [names[h] for h in done], base_kwargs)
        for host in done:
            hosts[host]["validation"] = verdicts[names[host]]
    result = {
        "run_id": spec["run_id"],
        "hosts": hosts,
        "playbook": spec["playbook"],
        "inventory": spec["inventory"],
        "status": "cancelled" if status == "canceled" else status,
        "rc": rc,
        "started": started,
        "finished": time.time(),
        "artifacts": str(Path(spec["artifacts_dir"]) / f"run-{spec['run_id']}"),
    }
    out = Path(spec["result_path"])
    out.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    out.parent.chmod(0o700)
    tmp = out.with_suffix(".tmp")
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as fh:
        fh.write(json.dumps(result, indent=2, sort_keys=True) + "\n")
    tmp.chmod(0o600)
    tmp.replace(out)
    return result


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    cancel = threading.Event()

    def on_signal(_signum, _frame) -> None:
        cancel.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    run_job(spec, cancel)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
