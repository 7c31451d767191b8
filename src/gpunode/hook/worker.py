"""The worker: claims batches of queued hosts and runs the pipeline for each batch in a child.

Each run is ``python -m gpunode.hook.job`` in its own session (see ``job.py`` for why a child
process). The worker bounds it twice: ansible-runner's own ``timeout``/``idle_timeout`` inside,
and here a deadline of ``run_timeout`` plus a grace period, after which the child gets SIGTERM and
then SIGKILL of its whole session. On shutdown the worker cancels its run (SIGTERM → the child's
cancel_callback) and the hosts go back to the queue without losing an attempt.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from gpunode.hook.config import HookConfig
from gpunode.hook.requests import host_name
from gpunode.hook.store import Store, StoreUnavailable

log = logging.getLogger("gpunode.hook")

#: Environment variables a run inherits from the service (names, or prefixes ending in ``_``).
#: Everything else — including the hook secret's variable — is dropped, because ansible-runner
#: writes a run's whole environment into its ``command`` artifact.
ENV_ALLOW = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_", "TERM", "TMPDIR", "TZ", "ANSIBLE_",
             "CONTAINERS_", "XDG_", "VIRTUAL_ENV", "PY_COLORS", "SSH_AUTH_SOCK", "GPUNODE_SIM_DIR",
             "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")
GRACE = 30.0


def run_environment(config: HookConfig, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a run: the allowlisted part of the service's, without the secrets' variables."""
    environ = dict(os.environ if environ is None else environ)
    secrets = (config.secret_env, config.operator_secret_env)
    env = {
        k: v for k, v in environ.items()
        if k not in secrets and (k in ENV_ALLOW or any(k.startswith(p) for p in ENV_ALLOW if p.endswith("_")))
    }
    # ansible-playbook is installed beside the Python running the hook (a venv's bin/).
    bindir = str(Path(sys.executable).parent)
    path = env.get("PATH", os.defpath).split(os.pathsep)
    if bindir not in path:
        env["PATH"] = os.pathsep.join([bindir, *path])
    return env


def run_spec(config: HookConfig, run: dict, store: Store | None = None) -> dict:
    """The job spec for a claimed run (paths and names only)."""
    project = Path(config.project_dir).resolve()
    playbook = Path(config.playbook)
    inventory = Path(config.inventory)
    run_env = {
        # Host keys the machines posted are the ones SSH accepts (ssh connection plugin).
        "ANSIBLE_SSH_COMMON_ARGS": f"-o UserKnownHostsFile={config.known_hosts.resolve()} -o StrictHostKeyChecking=yes",
        "ANSIBLE_HOST_KEY_CHECKING": "True",
    }
    run_env.update(config.run_env)
    names = {}
    for host in run["hosts"]:
        row = store.host(host) if store is not None and config.limit_by == "fqdn" else None
        # The same validation as every entry point's: only a host name reaches --limit.
        names[host] = host_name((row or {}).get("fqdn") or host, "inventory name")
    return {
        "run_id": run["id"],
        "hosts": run["hosts"],
        "inventory_names": names,
        "project_dir": str(project),
        "playbook": str(playbook if playbook.is_absolute() else project / playbook),
        # An inventory may be a plugin config (maas.maas.inventory): keep it where it is.
        "inventory": str(inventory if inventory.is_absolute() else project / inventory),
        "artifacts_dir": str(config.artifacts_dir.resolve()),
        "keep_artifacts": config.keep_artifacts,
        "run_timeout": config.run_timeout,
        "idle_timeout": config.idle_timeout,
        "run_secrets_file": str(Path(config.run_secrets_file).resolve()) if config.run_secrets_file else None,
        "run_env": run_env,
        "validation_path": config.validation_path,
        "result_path": str((config.results_dir / f"run-{run['id']}.json").resolve()),
        "cancel_file": str((Path(config.state_dir) / "jobs" / f"run-{run['id']}.cancel").resolve()),
        "parent_pid": os.getpid(),
    }


def refresh_inventory(config: HookConfig) -> None:
    """Run ``inventory_refresh_command`` (with the service's environment); raise when it fails."""
    if not config.inventory_refresh_command:
        return
    env = {k: v for k, v in os.environ.items() if k not in (config.secret_env, config.operator_secret_env)}
    proc = subprocess.run(list(config.inventory_refresh_command), env=env, cwd=Path(config.project_dir),
                          capture_output=True, text=True, timeout=300, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"inventory_refresh_command exited {proc.returncode}: {proc.stderr.strip()[-500:]}")


def execute(config: HookConfig, spec: dict, stop: threading.Event | None = None) -> dict:
    """Run one job child to completion (or cancel it on ``stop``); return its result dict."""
    jobs = Path(config.state_dir) / "jobs"
    jobs.mkdir(parents=True, exist_ok=True, mode=0o700)
    spec_path = jobs / f"run-{spec['run_id']}.json"
    spec_path.write_text(json.dumps(spec))
    spec_path.chmod(0o600)
    result_path = Path(spec["result_path"])
    result_path.unlink(missing_ok=True)
    deadline = time.monotonic() + spec["run_timeout"] + GRACE
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpunode.hook.job", str(spec_path)],
        env=run_environment(config), start_new_session=True,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    stderr_lines: list[str] = []
    reader = threading.Thread(target=lambda: stderr_lines.extend(proc.stderr.read().decode(errors="replace")
                                                                .splitlines()[-20:]), daemon=True)
    reader.start()
    cancelled_by = None
    while proc.poll() is None:
        if stop is not None and stop.is_set() and cancelled_by is None:
            cancelled_by = "shutdown"
            proc.send_signal(signal.SIGTERM)
            deadline = min(deadline, time.monotonic() + GRACE)
        elif time.monotonic() > deadline:
            if cancelled_by is None:
                cancelled_by = "timeout"
                proc.send_signal(signal.SIGTERM)
                deadline = time.monotonic() + 10
            else:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                break
        time.sleep(0.2)
    reader.join(timeout=5)
    spec_path.unlink(missing_ok=True)
    Path(spec["cancel_file"]).unlink(missing_ok=True)
    if result_path.is_file():
        result = json.loads(result_path.read_text())
    else:
        result = {"run_id": spec["run_id"], "status": "error", "rc": proc.returncode,
                  "hosts": {h: {"ok_overall": False, "stage": None, "message": "the run wrote no result"}
                            for h in spec["hosts"]},
                  "error": "\n".join(stderr_lines)[-2000:]}
    if cancelled_by == "shutdown":
        result["status"] = "cancelled"
    elif result["status"] == "cancelled":  # not by this worker: an error, and the attempt counts
        result["status"] = "error"
    elif cancelled_by == "timeout" and result["status"] != "successful":
        result["status"] = "timeout"
    return result


def run_state(result: dict) -> str:
    status = result.get("status")
    if status == "successful":
        return "ok" if all(h.get("ok_overall") for h in result["hosts"].values()) else "failed"
    return {"canceled": "cancelled"}.get(status, status or "error")


class Worker:
    """Worker threads that drain the queue (``config.workers`` runs at a time, hosts disjoint)."""

    def __init__(self, config: HookConfig, store: Store, *, on_finished=None):
        self.config = config
        self.store = store
        self.stop = threading.Event()
        self.wake = threading.Event()
        self.on_finished = on_finished
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        requeued = self.store.recover()
        if requeued:
            log.info("recovered %d host(s) from an interrupted run: %s (queued to re-run after interruption;"
                     " the pipeline is idempotent)", len(requeued), ", ".join(requeued))
        for i in range(self.config.workers):
            t = threading.Thread(target=self._loop, name=f"hook-worker-{i}", daemon=True)
            t.start()
            self._threads.append(t)

    def shutdown(self, timeout: float = GRACE + 15) -> None:
        self.stop.set()
        self.wake.set()
        for t in self._threads:
            t.join(timeout=timeout)

    def notify(self) -> None:
        self.wake.set()

    def run_once(self, now: float | None = None, only: list[str] | None = None) -> dict | None:
        """Claim one due batch (of ``only`` these hosts) and run it; return the finished run or None."""
        run = self.store.claim_batch(now=time.time() if now is None else now,
                                     batch_window=self.config.batch_window, max_batch=self.config.max_batch,
                                     only=only)
        if run is None:
            return None
        log.info("run %d: starting for %s", run["id"], ", ".join(run["hosts"]))
        spec = None
        try:
            spec = run_spec(self.config, run, self.store)  # refuses a recorded name that is not a host name
            refresh_inventory(self.config)
            result = execute(self.config, spec, self.stop)
        except Exception as exc:  # the hosts must leave `running` whatever happened
            log.exception("run %d: could not run", run["id"])
            result = {"run_id": run["id"], "status": "error", "error": f"{exc.__class__.__name__}: {exc}",
                      "hosts": {h: {"ok_overall": False, "stage": None} for h in run["hosts"]}}
        state = run_state(result)
        host_ok = {h: bool(result["hosts"].get(h, {}).get("ok_overall")) for h in run["hosts"]}
        states = self.store.finish_run(run["id"], state=state, result=result,
                                       result_path=spec["result_path"] if spec else None,
                                       host_ok=host_ok, max_attempts=self.config.max_attempts,
                                       retry_delay=self.config.retry_delay)
        log.info("run %d: %s (%s)", run["id"], state, ", ".join(f"{h}={s}" for h, s in states.items()))
        if self.on_finished is not None:
            self.on_finished(run["id"], result, states)
        return self.store.run(run["id"])

    def _loop(self) -> None:
        unavailable = None
        while not self.stop.is_set():
            try:
                if self.run_once() is not None:
                    continue
                unavailable = None
            except StoreUnavailable as exc:  # logged once, not every second: the requests' 503s say it too
                if str(exc) != unavailable:
                    log.error("worker: no run started: %s", exc)
                unavailable = str(exc)
                self.stop.wait(5.0)
                continue
            except Exception:  # a broken run must not kill the worker; the hosts stay recorded
                log.exception("worker: run failed")
            due = self.store.next_due(time.time(), self.config.batch_window)
            self.wake.wait(timeout=1.0 if due is None else min(max(due, 0.05), 1.0))
            self.wake.clear()
