"""The hook's revalidation schedule (``revalidate:`` in hook.yml): day two for the hosts it provisioned.

Every ``interval`` seconds the service runs ``playbooks/revalidate.yml`` (read-only) or, with ``remediate: true``,
``playbooks/remediate.yml`` (revalidate, then cordon, drain, re-run the pipeline and return the fixed hosts) for
the hosts it provisioned (``hosts: provisioned``, the default: hosts whose last run ended ok) or for the whole
inventory (``hosts: inventory``), through the same job child and ansible-runner as a provisioning run. The
bandwidth history, the remediation states and the events go to ``history.sqlite`` in the hook's state directory
(``GPUNODE_HISTORY_DB`` in the run's environment), 0600, so they survive restarts; each revalidation is recorded in
the hook's database and shown by ``gpunode hook status``.

A revalidation never runs a host that is queued or running for provisioning: those hosts are left out of it.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from pathlib import Path

from gpunode.hook.config import ConfigError, HookConfig
from gpunode.hook.requests import RequestError, host_name
from gpunode.hook.store import Store
from gpunode.hook.worker import execute, run_spec, run_state

log = logging.getLogger("gpunode.hook")

DEFAULT_PLAYBOOKS = {False: "playbooks/revalidate.yml", True: "playbooks/remediate.yml"}
MIN_INTERVAL = 60


@dataclasses.dataclass
class RevalidateSettings:
    """``revalidate:`` of hook.yml."""

    #: Seconds between the start of one revalidation and the next (at least 60).
    interval: float
    #: Repair what revalidation finds (remediate.yml) instead of only reporting it (revalidate.yml).
    remediate: bool = False
    #: Playbook, relative to project_dir; default by ``remediate``.
    playbook: str | None = None
    #: Hosts revalidated at a time (``gpunode_revalidate_batch``): a count or ``"N%"``.
    batch: int | str = "100%"
    #: With ``remediate``: hosts of one fabric out of service at once, and re-runs before a host is left out.
    max_unavailable: int | str = 1
    max_attempts: int = 3
    #: ``provisioned`` (hosts whose last hook run ended ok) or ``inventory`` (every host of the inventory).
    hosts: str = "provisioned"
    #: More (non-secret) variables for the run, e.g. gpunode_bandwidth_regression_pct.
    extra_vars: dict = dataclasses.field(default_factory=dict)

    @property
    def run_playbook(self) -> str:
        return self.playbook or DEFAULT_PLAYBOOKS[bool(self.remediate)]


def settings(config: HookConfig) -> RevalidateSettings | None:
    """``config.revalidate`` checked, or None when no schedule is set; ConfigError names the bad key."""
    raw = config.revalidate
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ConfigError("revalidate: expected a mapping (interval, remediate, batch, ...)")
    fields = {f.name for f in dataclasses.fields(RevalidateSettings)}
    unknown = sorted(set(raw) - fields)
    if unknown:
        raise ConfigError(f"revalidate: unknown settings: {', '.join(unknown)}")
    if "interval" not in raw:
        raise ConfigError("revalidate.interval: required (seconds between revalidations)")
    try:
        out = RevalidateSettings(**raw)
        out.interval = float(out.interval)
        out.max_attempts = int(out.max_attempts)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"revalidate: {exc}") from None
    if out.interval < MIN_INTERVAL:
        raise ConfigError(f"revalidate.interval: {out.interval:g} s is less than {MIN_INTERVAL} s")
    if out.hosts not in ("provisioned", "inventory"):
        raise ConfigError(f"revalidate.hosts: {out.hosts!r} is not one of provisioned, inventory")
    if not isinstance(out.remediate, bool):
        raise ConfigError(f"revalidate.remediate: {out.remediate!r} is not true or false")
    if out.max_attempts < 1:
        raise ConfigError("revalidate.max_attempts: must be at least 1")
    for name in ("batch", "max_unavailable"):
        value = str(getattr(out, name)).strip()
        number = value[:-1] if value.endswith("%") else value
        if (not number.isascii() or not number.isdigit() or int(number) < 1
                or (value.endswith("%") and int(number) > 100)):
            raise ConfigError(f"revalidate.{name}: {getattr(out, name)!r} is not a count or a percentage")
    if not isinstance(out.extra_vars, dict):
        raise ConfigError("revalidate.extra_vars: expected a mapping")
    return out


def history_db(config: HookConfig) -> Path:
    """The day-two database (bandwidth history, remediation states, events) in the hook's state directory."""
    return Path(config.state_dir) / "history.sqlite"


def select_hosts(store: Store, which: str) -> tuple[list[str] | None, list[str]]:
    """``(hosts, busy)`` from one read of the hook's hosts: the hosts to revalidate (provisioned ones, whose last run
    ended ok, not queued or running; None for the whole inventory) and the hosts being provisioned (queued or
    running), which a run of the whole inventory leaves out."""
    rows = []
    for row in store.hosts():
        try:
            host_name(row["name"])  # the same validation as every entry point's
        except RequestError as exc:
            log.warning("revalidation: skipping a recorded host: %s", exc.reason)
            continue
        rows.append(row)
    busy = [r["name"] for r in rows if r["state"] in ("queued", "running")]
    if which == "inventory":
        return None, busy
    return [r["name"] for r in rows if r["state"] == "ok"], busy


def revalidate_once(config: HookConfig, store: Store, stop: threading.Event | None = None,
                    now: float | None = None) -> dict | None:
    """Run one revalidation now; the recorded entry (None when there is no host to revalidate)."""
    plan = settings(config)
    if plan is None:
        raise ConfigError("revalidate: no schedule in the settings (revalidate.interval)")
    hosts, busy = select_hosts(store, plan.hosts)
    if hosts == []:  # None: the whole inventory
        log.info("revalidation: no provisioned host to revalidate")
        return None
    rid = store.start_revalidation(hosts or ["(inventory)"], plan.run_playbook, now=now)
    run = {"id": f"revalidate-{rid}", "hosts": hosts or []}
    spec = run_spec(config, run, store)
    project = Path(spec["project_dir"])
    spec["playbook"] = str(project / plan.run_playbook) if not Path(plan.run_playbook).is_absolute() \
        else plan.run_playbook
    spec["run_env"].update(GPUNODE_HISTORY_DB=str(history_db(config).resolve()), GPUNODE_RUN_ID=run["id"])
    spec["extra_vars"] = {**plan.extra_vars, "gpunode_revalidate_batch": plan.batch,
                          "gpunode_remediation_max_unavailable": plan.max_unavailable,
                          "gpunode_remediation_max_attempts": plan.max_attempts}
    # Not limited for `hosts: inventory`, but never to a host being provisioned.
    spec["exclude"] = busy if hosts is None else []
    spec["read_validation"] = False
    log.info("revalidation %d: %s for %s", rid, plan.run_playbook, ", ".join(hosts) if hosts else "the inventory")
    try:
        result = execute(config, spec, stop)
    except Exception as exc:  # the entry must not stay `running`
        log.exception("revalidation %d: could not run", rid)
        result = {"status": "error", "error": f"{exc.__class__.__name__}: {exc}", "hosts": {}}
    state = run_state(result)
    store.finish_revalidation(rid, state, result)
    log.info("revalidation %d: %s (%s)", rid, state,
             ", ".join(f"{h}={'ok' if s.get('ok_overall') else 'failed'}" for h, s in sorted(result["hosts"].items())))
    return store.revalidations(1)[0]


def due_in(store: Store, interval: float, started: float, now: float) -> float:
    """Seconds until the next revalidation is due: ``interval`` after the last one started (or after the service
    started, when none is recorded)."""
    last = store.revalidations(1)
    since = last[0]["started_at"] if last else started
    return max(0.0, since + interval - now)


class Revalidator:
    """The schedule's thread in ``gpunode hook serve``."""

    def __init__(self, config: HookConfig, store: Store, stop: threading.Event):
        self.config = config
        self.store = store
        self.stop = stop
        self.plan = settings(config)
        self._thread: threading.Thread | None = None
        self._started = time.time()

    def start(self) -> None:
        if self.plan is None:
            return
        for entry in self.store.revalidations(100):
            if entry["state"] == "running":  # the service stopped during it
                self.store.finish_revalidation(entry["id"], "interrupted", {"status": "interrupted", "hosts": {}})
        self._thread = threading.Thread(target=self._loop, name="hook-revalidate", daemon=True)
        self._thread.start()
        log.info("revalidation every %g s (%s)", self.plan.interval, self.plan.run_playbook)

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _loop(self) -> None:
        while not self.stop.is_set():
            wait = due_in(self.store, self.plan.interval, self._started, time.time())
            if wait > 0:
                self.stop.wait(min(wait, 30.0))
                continue
            try:
                if revalidate_once(self.config, self.store, self.stop) is None:
                    # nothing to revalidate: count the interval from now
                    self._started = time.time()
                    self.stop.wait(min(self.plan.interval, 30.0))
            except Exception:  # a broken revalidation must not end the schedule
                log.exception("revalidation failed")
                self.stop.wait(30.0)
