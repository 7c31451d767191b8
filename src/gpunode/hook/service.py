"""``gpunode hook serve``, ``run``, ``revalidate`` and ``status``: wiring of settings, store, worker, the
revalidation schedule and the HTTP app."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import os
import signal
import sqlite3
import sys
import threading
import time
from pathlib import Path

import uvicorn

from gpunode.hook.app import Hook, create_app
from gpunode.hook.config import ConfigError, HookConfig
from gpunode.hook.maas import MaasClient, MaasError
from gpunode.hook.requests import RequestError, host_name
from gpunode.hook.revalidate import Revalidator, history_db, revalidate_once
from gpunode.hook.server import uvicorn_config
from gpunode.hook.store import Store, StoreError, private_dir
from gpunode.hook.worker import GRACE, Worker

log = logging.getLogger("gpunode.hook")


def setup_logging(config: HookConfig) -> None:
    """Log to stderr and to ``<state_dir>/hook.log`` (0600; the log a secret scan reads)."""
    private_dir(config.state_dir)
    for sub in (config.results_dir, config.artifacts_dir, Path(config.state_dir) / "jobs"):
        private_dir(sub)
    log_path = Path(config.state_dir) / "hook.log"
    os.close(os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
    log_path.chmod(0o600)
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    logger = logging.getLogger("gpunode.hook")
    logger.setLevel(logging.INFO)
    if not logger.handlers:
        for handler in (logging.StreamHandler(sys.stderr), logging.FileHandler(log_path)):
            handler.setFormatter(fmt)
            logger.addHandler(handler)


def is_loopback(host: str) -> bool:
    """Whether ``listen_host`` is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def plain_http_warning(config: HookConfig) -> str | None:
    """The warning ``serve`` logs at start when it would speak plain HTTP beyond this machine."""
    if config.tls_cert_file or is_loopback(config.listen_host):
        return None
    return (f"serving plain HTTP on {config.listen_host}: the hook's credentials and the posted host keys"
            " cross the network in clear; set tls_cert_file and tls_key_file")


def maas_client(config: HookConfig) -> MaasClient | None:
    if not (config.maas_check or config.maas_tag):
        return None
    return MaasClient(config.maas_url, config.maas_api_key())


def tag_writer(config: HookConfig, store: Store, maas: MaasClient | None):
    """A worker callback that tags the machines that finished ok in MAAS (``maas_tag``)."""
    if maas is None or not config.maas_tag:
        return None

    def on_finished(run_id: int, _result: dict, states: dict[str, str]) -> None:
        ids = [h["instance_id"] for h in (store.host(n) for n, s in states.items() if s == "ok")
               if h and h.get("instance_id")]
        if not ids:
            return
        try:
            maas.tag(config.maas_tag, ids)
            log.info("run %d: tagged %s in MAAS with %s", run_id, ", ".join(ids), config.maas_tag)
        except MaasError as exc:
            log.warning("run %d: MAAS tag write-back failed: %s", run_id, exc)

    return on_finished


def capi_writer(config: HookConfig, store: Store):
    """A worker callback that annotates the finished hosts' Cluster API Machines (``capi_annotate``)."""
    if not config.capi_annotate:
        return None
    from gpunode.hook.capi import CapiClient, CapiError, annotations_for

    def on_finished(run_id: int, result: dict, states: dict[str, str]) -> None:
        try:
            client = CapiClient(config.capi_kubeconfig)
        except CapiError as exc:
            log.warning("run %d: Cluster API write-back failed: %s", run_id, exc)
            return
        for host, state in states.items():
            if state not in ("ok", "failed"):
                continue  # queued again: the next run writes back
            row = store.host(host) or {}
            try:
                where = client.annotate(host, row.get("instance_id"),
                                        annotations_for(run_id, state, result["hosts"].get(host, {})))
                log.info("run %d: annotated Machine %s (%s)", run_id, where, state)
            except CapiError as exc:
                log.warning("run %d: Cluster API write-back for %s failed: %s", run_id, host, exc)

    return on_finished


def write_backs(*callbacks):
    """One worker callback that calls every non-None callback."""
    active = [c for c in callbacks if c is not None]
    if not active:
        return None

    def on_finished(run_id: int, result: dict, states: dict[str, str]) -> None:
        for callback in active:
            callback(run_id, result, states)

    return on_finished


def serve(config: HookConfig) -> int:
    """Run the HTTP service and the worker until SIGINT/SIGTERM (uvicorn's handlers)."""
    setup_logging(config)
    store = Store(config.db_path)
    maas = maas_client(config)
    worker = Worker(config, store, on_finished=write_backs(tag_writer(config, store, maas), capi_writer(config, store)))
    hook = Hook(config, store, worker=worker, maas=maas)
    worker.start()
    revalidator = Revalidator(config, store, worker.stop)
    revalidator.start()
    scheme = "https" if config.tls_cert_file else "http"
    log.info("hook listening on %s://%s:%d (auth %s, playbook %s, inventory %s)", scheme, config.listen_host,
             config.listen_port, config.auth, config.playbook, config.inventory)
    warning = plain_http_warning(config)
    if warning:
        log.warning("%s", warning)
    stopping = []
    # The service's own handlers: uvicorn captures SIGINT/SIGTERM while it serves and re-raises
    # them once it has stopped; these handlers take that re-raise so the worker can still cancel
    # its run and requeue the hosts below. Runs never see them (they are other processes).
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, _frame: stopping.append(signum))
    tls = {"ssl_certfile": str(config.tls_cert_file), "ssl_keyfile": str(config.tls_key_file)} \
        if config.tls_cert_file else {}
    server = uvicorn.Server(uvicorn_config(config, create_app(hook), **tls))
    try:
        server.run()
    finally:
        log.info("hook stopping: cancelling running jobs (their hosts stay queued)")
        worker.shutdown()
        revalidator.join(timeout=GRACE + 15)
        store.close()
    return 0


def revalidate_now(config: HookConfig, *, out=print) -> int:
    """``gpunode hook revalidate``: one scheduled revalidation now, in the foreground; 0 when every host passed."""
    setup_logging(config)
    store = Store(config.db_path)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        entry = revalidate_once(config, store, stop)
        if entry is None:
            out("revalidation: no provisioned host to revalidate")
            return 0
        out(format_revalidation(entry))
        for name, host in sorted(((entry["result"] or {}).get("hosts") or {}).items()):
            out(f"  {name:<20} {'ok' if host.get('ok_overall') else 'failed':<6} stage={host.get('stage') or '-'}"
                + (f" message={host['message']!r}" if host.get("message") else ""))
        return 0 if entry["state"] == "ok" else 1
    finally:
        store.close()


def day_two_events(config: HookConfig, limit: int = 10) -> list[dict]:
    """The latest remediation steps from the day-two database (``history.sqlite``), newest first; [] without one."""
    path = history_db(config)
    if not path.is_file():
        return []
    with contextlib.closing(sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True, timeout=30)) as conn:
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'events'").fetchone():
            return []
        rows = conn.execute("SELECT time, run, host, step, detail FROM events ORDER BY id DESC LIMIT ?",
                            (limit,)).fetchall()
    return [dict(zip(("time", "run", "host", "step", "detail"), r, strict=True)) for r in rows]


def format_event(event: dict) -> str:
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(event["time"]))
    return f"  {when} {event['run']} {event['host']}: {event['step']}: {event['detail'][:300]}"


def format_revalidation(entry: dict) -> str:
    """One line for a recorded revalidation."""
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(entry["started_at"]))
    took = f" {entry['finished_at'] - entry['started_at']:.0f}s" if entry.get("finished_at") else ""
    return (f"revalidation {entry['id']}: {entry['state']} {when}{took} playbook={entry['playbook']} "
            f"hosts={','.join(entry['hosts'])}")


def host_names(hosts: list[str], option: str = "--host") -> list[str]:
    """The canonical names of hosts given on the command line, by the same validation as the HTTP API's;
    ConfigError (nothing recorded) for the first invalid one."""
    try:
        return list(dict.fromkeys(host_name(h, option) for h in hosts))
    except RequestError as exc:
        raise ConfigError(exc.reason) from None


def run_hosts(config: HookConfig, hosts: list[str], *, out=print) -> int:
    """``gpunode hook run``: queue the hosts as an operator request and run them here, in the foreground."""
    hosts = host_names(hosts)
    setup_logging(config)
    store = Store(config.db_path)
    worker = Worker(config, store, on_finished=write_backs(tag_writer(config, store, maas_client(config)),
                                                           capi_writer(config, store)))
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: worker.stop.set())
    try:
        for host in hosts:
            store.record_request(source="operator", host=host, instance_id=None, fqdn=None, host_keys={}, peer=None,
                                 force=True)
        while not worker.stop.is_set():
            pending = [h for h in hosts if store.host(h)["state"] in ("queued", "running")]
            if not pending:
                break
            # An operator run does not wait for the batch window; retries keep their delay.
            if worker.run_once(now=time.time() + config.batch_window, only=hosts) is None:
                time.sleep(1.0)
        report = {h: store.host(h) for h in hosts}
        for row in report.values():
            run = store.run(row["last_run_id"]) if row["last_run_id"] else None
            out(format_host(row, run))
        return 0 if all(r["state"] == "ok" for r in report.values()) else 1
    finally:
        store.close()


def format_host(row: dict, run: dict | None) -> str:
    """One line per host: state, attempts, last run, per-host stats, stage and validation."""
    o = (row.get("outcome") or {}) if row.get("state") in ("ok", "failed", "queued") else {}
    validation = (o.get("validation") or {})
    verdict = validation.get("verdict") if validation.get("present") else "absent" if validation else "-"
    parts = [f"{row['name']:<20} {row['state']:<8} attempts={row['attempts']}",
             f"run={row['last_run_id'] or '-'}"]
    if o:
        parts.append(f"ok={o.get('ok', 0)} changed={o.get('changed', 0)} failed={o.get('failed', 0)} "
                     f"unreachable={o.get('unreachable', 0)} stage={o.get('stage') or '-'!s} validation={verdict}")
        if o.get("message"):
            parts.append(f"message={o['message']!r}")
    if run is not None and run.get("result_path"):
        parts.append(f"result={run['result_path']}")
    if row.get("refused"):
        parts.append(f"refused={row['refused']}")
    if row.get("interrupted_run"):
        parts.append(f"note='re-run after interruption (run {row['interrupted_run']})'")
    return " ".join(parts)


def forget(config: HookConfig, hosts: list[str], *, out=print) -> int:
    """``gpunode hook forget --host H``: drop the hosts' bound identities and known_hosts lines.

    For a machine re-deployed (or replaced) without MAAS to vouch for it: its next post is a first
    contact again. Refused for a host with a run in progress.
    """
    hosts = host_names(hosts)
    if not config.db_path.exists():
        out(f"no hook database at {config.db_path}")
        return 1
    store = Store(config.db_path)
    hook = Hook(config, store)
    rc = 0
    try:
        for name in hosts:
            row = store.host(name) or {}
            try:
                found = store.forget(name)
            except StoreError as exc:
                out(str(exc))
                rc = 1
                continue
            hook.forget_known_hosts(name, row.get("fqdn"))
            out(f"host {name}: {'forgotten; its next request binds its identity again' if found else 'not known'}")
            log.info("operator: forgot host %s", name)
            rc = rc if found else 1
        return rc
    finally:
        store.close()


def status(config: HookConfig, *, host: str | None = None, run_id: int | None = None, as_json: bool = False,
           out=print) -> int:
    """``gpunode hook status``: hosts (or one host, or one run) from the hook's database.

    A reader that closes the pipe early (``gpunode hook status | head``) ends it quietly.
    """
    try:
        return _status(config, host=host, run_id=run_id, as_json=as_json, out=out)
    except BrokenPipeError:
        # Python flushes stdout again at exit: point it at /dev/null so that flush cannot fail too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _status(config: HookConfig, *, host: str | None, run_id: int | None, as_json: bool, out) -> int:
    def missing(msg: str) -> int:
        out(json.dumps({"error": msg}) if as_json else msg)
        return 1

    if host is not None:
        host = host_names([host])[0]
    if not config.db_path.exists():
        return missing(f"no hook database at {config.db_path}")
    store = Store(config.db_path)
    try:
        if run_id is not None:
            run = store.run(run_id)
            if run is None:
                return missing(f"run {run_id}: not found")
            out(json.dumps(run, indent=2, sort_keys=True) if as_json else
                f"run {run['id']}: {run['state']} hosts={','.join(run['hosts'])} result={run['result_path'] or '-'}")
            if not as_json and run["result"]:
                for name, h in sorted(run["result"]["hosts"].items()):
                    out(f"  {name:<20} ok={h.get('ok', 0)} changed={h.get('changed', 0)} failed={h.get('failed', 0)} "
                        f"unreachable={h.get('unreachable', 0)} stage={h.get('stage') or '-'}")
            return 0
        rows = [store.host(host)] if host else store.hosts()
        if host and rows[0] is None:
            return missing(f"host {host}: not found")
        revalidations = [] if host else store.revalidations(5)
        if as_json:
            out(json.dumps({"hosts": rows, "counts": store.counts(), "revalidations": revalidations,
                            "day_two_events": [] if host else day_two_events(config)}, indent=2, sort_keys=True))
        else:
            for row in rows:
                out(format_host(row, store.run(row["last_run_id"]) if row["last_run_id"] else None))
            for entry in revalidations:
                out(format_revalidation(entry))
            for event in [] if host else day_two_events(config):
                out(format_event(event))
        return 0
    finally:
        store.close()
