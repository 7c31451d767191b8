"""Benchmarks of playbooks/site.yml on the simulated fleet, as ratios measured in one run.

Starts four simulated hosts — two 2-rail PCIe hosts (``pcie-h100-2rail``, their own fabric ``pcie``, so that
each has a bandwidth peer as the DGX and the HGX have each other), a DGX H100 (8 rails, 12 NIC functions) and an
HGX H100 (8 rails + 2 dual-port CX-6 Dx = 12 NIC functions) — plus the Kubernetes API emulator as the control plane
(``playbooks/sim_cluster.yml``), and runs:

(a) site.yml fresh, then again (the idempotent re-run), against the floor
    ``ansible all -m ansible.builtin.setup`` on the same hosts;
(b) tasks executed per host in the re-run (bench/callback_plugins/bench_results.py: a task counts once per host
    whatever its loop; skipped tasks are counted apart) — equal for every host when no task loops
    over NICs (the 2-rail hosts are their own fabric, ``pcie``: a fabric's contract compares rail counts);
(c) host round trips per host in the re-run: module executions on the host, not task lines - a task result
    that is not skipped, whose action runs on the host (not set_fact/debug/assert/include and the other
    controller-side actions), not delegated to the controller, and not a fleet-level run_once task;
(d) reboots per fresh provision and per re-run, counted where they happen: the simulated inventory's
    power-cycle command is wrapped to log each call before it runs ``gpunode sim reboot``.

(e) then (a) again on the demo fleet alone (``make demo``'s one DGX H100 and one HGX H100, hosts ``bd-``), which
    issue 13's ratio is stated for, with its own floor on its own two hosts (``--no-demo`` leaves it out).

Writes its own section of BENCHMARKS.md between the markers below. Host names start with ``bn-``.
Usage: python bench/bench_site.py [--output BENCHMARKS.md] [--keep] [--no-demo]
"""

from __future__ import annotations

import argparse
import configparser
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
BEGIN = "<!-- bench_site:begin -->"
END = "<!-- bench_site:end -->"
HOSTS = {"bn-2rail": "pcie-h100-2rail", "bn-2rail-b": "pcie-h100-2rail", "bn-dgx": "dgx-h100", "bn-hgx": "hgx-h100"}
# The 2-rail hosts' profile: a fabric contract compares rail counts, so they get a fabric of their own (pcie).
PCIE_PROFILE = "pcie-h100-2rail"
# The demo fleet (`make demo`: one DGX H100 and one HGX H100), which issue 13's ratio is stated for; measured on its
# own hosts, after the four-host run.
DEMO_HOSTS = {"bd-dgx": "dgx-h100", "bd-hgx": "hgx-h100"}
KAPI_PORT = 18645


# Actions that run on the controller only: their task lines are no host round trip.
CONTROLLER_ACTIONS = {
    "set_fact", "debug", "assert", "fail", "meta", "include_tasks", "import_tasks", "include_role", "import_role",
    "include_vars", "add_host", "group_by", "set_stats", "pause", "fleet_contract", "validate_argument_spec",
    "role_variables",  # an action plugin that only reads variables on the controller
    "checks",  # an action plugin that only evaluates conditions on the controller (_requires_connection False)
}


def _short(action: str) -> str:
    return (action or "").rsplit(".", 1)[-1]


def host_round_trip(result: dict) -> bool:
    """Did this task result execute a module on the host? (pure; one recorded host result)"""
    if result.get("skipped") or _short(result.get("action", "")) in CONTROLLER_ACTIONS:
        return False
    delegated = result.get("_ansible_delegated_vars") or {}
    if delegated.get("ansible_connection") == "local":
        return False
    # Simulated hosts are reached at 127.0.0.1 (each on its own SSH port): the delegated host's
    # inventory name says whether a task ran on the controller.
    return delegated.get("ansible_delegated_host", delegated.get("ansible_host")) not in ("localhost", "127.0.0.1")


def results_env(env, results_file):
    """The environment that has bench/callback_plugins/bench_results.py record every host result by task line into
    ``results_file`` (ansible.posix.json's shape), each result found by its task line's id whatever the strategy
    (ansible.posix.json lines results up by task start only under ``linear`` and ``debug``)."""
    enabled = (env or os.environ).get("ANSIBLE_CALLBACKS_ENABLED") or _configured_callbacks()
    return {"ANSIBLE_CALLBACK_PLUGINS": str(REPO / "bench" / "callback_plugins"),
            "ANSIBLE_CALLBACKS_ENABLED": ",".join(filter(None, (enabled, "bench_results"))),
            "BENCH_RESULTS_FILE": str(results_file),
            "BENCH_RESULTS_KEYS": ",".join(RESULT_KEYS)}


# The result keys the counts below read (playbook(), host_round_trip()): the recorder keeps only these, so that a timed
# run does not also copy and write every fact the roles set (a few MB of JSON on a three-host fleet).
RESULT_KEYS = ("skipped", "changed", "failed", "ignore_errors", "msg", "_ansible_delegated_vars")


def _configured_callbacks():
    """The callbacks the collection's ansible.cfg enables (an ANSIBLE_CALLBACKS_ENABLED replaces them)."""
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(REPO / "ansible.cfg")
    names = parser.get("defaults", "callbacks_enabled", fallback="")
    return ",".join(name.strip() for name in names.split(",") if name.strip())


def sh(argv, env=None, check=True):
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False, cwd=REPO)
    if check and proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def playbook(inventory, env, extra, vars_file, hosts=None):
    hosts = hosts or HOSTS
    results_file = Path(tempfile.mkdtemp(prefix="bench-site-")) / "results.json"
    start = time.perf_counter()
    proc = sh(["ansible-playbook", "-i", str(inventory), "playbooks/site.yml", "-e", f"@{vars_file}",
               "-e", json.dumps(extra)],
              env={**env, **results_env(env, results_file)}, check=False)
    seconds = time.perf_counter() - start
    try:
        data = json.loads(results_file.read_text())
    except (OSError, ValueError):
        raise SystemExit(f"site.yml recorded no results:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}") from None
    finally:
        shutil.rmtree(results_file.parent, ignore_errors=True)
    tasks = {h: {"executed": 0, "skipped": 0} for h in hosts}
    trips = {h: [] for h in hosts}  # host -> "play / task" lines that ran a module on the host
    status = {h: {} for h in hosts}  # host -> task name -> "executed" | "skipped"
    changed_tasks, failed_tasks = {}, {}  # task name -> hosts (with the message, for failures)
    for play in data.get("plays", []):
        for task in play.get("tasks", []):
            name = task.get("task", {}).get("name", "?")
            for host, result in task.get("hosts", {}).items():
                if host in tasks:
                    kind = "skipped" if result.get("skipped") else "executed"
                    tasks[host][kind] += 1
                    status[host][f"{play.get('play', {}).get('name', '?')} / {name}"] = kind
                    if host_round_trip(result):
                        trips[host].append(f"{play.get('play', {}).get('name', '?')} / {name}")
                    if result.get("changed"):
                        changed_tasks.setdefault(name, []).append(host)
                    if result.get("failed") and not result.get("ignore_errors"):
                        failed_tasks.setdefault(name, []).append(f"{host}: {str(result.get('msg', ''))[:300]}")
    stats = data.get("stats", {})
    return {"seconds": seconds, "rc": proc.returncode, "tasks": tasks, "status": status, "trips": trips,
            "changed_tasks": changed_tasks, "failed_tasks": failed_tasks,
            "changed": {h: stats.get(h, {}).get("changed") for h in hosts},
            "failed": {h: stats.get(h, {}).get("failures", 0) + stats.get(h, {}).get("unreachable", 0) for h in hosts}}


def reboots(log: Path, hosts=None) -> dict[str, int]:
    lines = log.read_text().split() if log.is_file() else []
    return {h: lines.count(h) for h in (hosts or HOSTS)}


def run(keep: bool, hosts=None, port=KAPI_PORT, name="bench", repeats=3) -> dict:
    hosts = hosts or HOSTS
    env = {**os.environ}
    state = REPO / ".sim" / name
    env["GPUNODE_SIM_DIR"] = str(state)
    env["GPUNODE_REPORT_DIR"] = str(state / "report")
    inventory = state / "hosts.yml"
    log = state / "power-cycles.log"
    kapi = state / "kapi"
    sh(["gpunode", "sim", "up", "--replace", *[f"{h}={p}" for h, p in hosts.items()]], env=env)
    # A fresh cluster too: an API emulator left from an earlier run still has the Nodes of the old hosts.
    sh(["gpunode", "kapi", "stop", "--state", str(kapi)], env=env, check=False)
    sh(["rm", "-rf", str(kapi), str(state / "report")], env=env)
    sh(["gpunode", "kapi", "start", "--port", str(port), "--state", str(kapi)], env=env)
    try:
        sh(["gpunode", "sim", "inventory", "-o", str(inventory), *hosts], env=env)
        # The 2-rail hosts are their own fabric: a fabric contract compares rail counts too.
        pcie = [h for h, profile in hosts.items() if profile == PCIE_PROFILE]
        if pcie:
            data = yaml.safe_load(inventory.read_text())
            for host in pcie:
                data["all"]["children"]["gpu_nodes"]["hosts"][host]["gpunode_fabric"] = "pcie"
            inventory.write_text(yaml.safe_dump(data))
        sh(["ansible-playbook", "playbooks/sim_cluster.yml",
            "-e", json.dumps({"gpunode_sim_kapi_port": port, "gpunode_sim_kapi_dir": str(kapi)})], env=env)
        log.unlink(missing_ok=True)
        extra = {"gpunode_reboot_ok": True,
                 "gpunode_power_cycle_command": ["sh", "-c", f'echo "$1" >> {log} && exec gpunode sim reboot "$1"',
                                                 "power-cycle", "{{ inventory_hostname }}"]}
        fresh = playbook(inventory, env, extra, kapi / "site-vars.yml", hosts)
        fresh_reboots = reboots(log, hosts)
        log.unlink(missing_ok=True)
        # The re-run and the floor, interleaved, REPEATS times each: on a shared 2-core machine one run varies by
        # about a second; the best of each is reported (as bench_discovery.py does), every time listed.
        reruns, floors = [], []
        for _ in range(repeats):
            reruns.append(playbook(inventory, env, extra, kapi / "site-vars.yml", hosts))
            start = time.perf_counter()
            sh(["ansible", "all", "-i", str(inventory), "-m", "ansible.builtin.setup"], env=env)
            floors.append(time.perf_counter() - start)
        rerun_reboots = reboots(log, hosts)
        rerun = dict(min(reruns, key=lambda r: r["seconds"]), all_seconds=[r["seconds"] for r in reruns])
        floor = min(floors)
    finally:
        if not keep:
            sh(["gpunode", "sim", "down", "--missing-ok", *hosts], env=env, check=False)
            sh(["gpunode", "kapi", "stop", "--state", str(kapi)], env=env, check=False)
    return {"fresh": fresh, "rerun": rerun, "floor": floor, "floors": floors, "fresh_reboots": fresh_reboots,
            "rerun_reboots": rerun_reboots}


def section(r: dict, commit: str = "?") -> str:
    fresh, rerun = r["fresh"], r["rerun"]
    # Fleet-level tasks (run_once: contract, cluster objects, report) run on the first host only.
    first = sorted(HOSTS)[0]
    once = {name for name in rerun["status"][first]
            if all(name not in rerun["status"][h] for h in HOSTS if h != first)}
    rows = []
    trips = {h: [t for t in rerun["trips"][h] if t not in once] for h in HOSTS}
    for host, profile in HOSTS.items():
        done = rerun["tasks"][host]
        per_host = done["executed"] + done["skipped"] - (len(once) if host == first else 0)
        rows.append(f"| {host} ({profile}) | {len(trips[host])} | {per_host} | {done['executed'] + done['skipped']} | "
                    f"{done['executed']} | {done['skipped']} | {rerun['changed'][host]} | {r['fresh_reboots'][host]} | "
                    f"{r['rerun_reboots'][host]} |")
    trip_names = sorted({t for ts in trips.values() for t in ts})
    trip_rows = [f"| {name} | " + " | ".join("x" if name in trips[h] else "" for h in HOSTS) + " |"
                 for name in trip_names]
    # Tasks whose outcome is not the same on every host: what makes the executed counts differ.
    names = sorted({name for st in rerun["status"].values() for name in st})
    differ = [(name, {h: rerun["status"][h].get(name, "absent") for h in HOSTS}) for name in names
              if len({rerun["status"][h].get(name, "absent") for h in HOSTS}) > 1]
    diff_rows = [f"| {name} | " + " | ".join(by_host[h] for h in HOSTS) + " |" for name, by_host in differ]
    failed = {h for run in (fresh, rerun) for h, n in run["failed"].items() if n}
    note = ""
    if rerun["changed_tasks"]:
        note += "\n\nTasks that reported changed in the re-run: " + "; ".join(
            f"{name} ({', '.join(hosts)})" for name, hosts in sorted(rerun["changed_tasks"].items())) + "."
    if failed:
        note += (f"\n\nHosts with failed tasks in these runs: {', '.join(sorted(failed))}; site.yml exit status "
                 f"fresh {fresh['rc']}, re-run {rerun['rc']}. Failures: " + "; ".join(
                     f"{name}: {' | '.join(msgs)}" for run in (fresh, rerun)
                     for name, msgs in sorted(run["failed_tasks"].items())) + ".")
    return "\n".join([
        BEGIN,
        "## site.yml on the simulated fleet (`bench/bench_site.py`)",
        "",
        f"Measured at commit {commit}. One run on one machine: a fresh provision, then the re-run, of four "
        "simulated hosts (two with 2 rails, their own fabric, bandwidth peers of each other; DGX H100, 8 "
        "rails and 12 NIC functions; HGX H100, 8 rails and 12 NIC functions), and `ansible all -m "
        "ansible.builtin.setup` on the same hosts as the floor. The re-run and the floor ran "
        f"{len(rerun.get('all_seconds') or [rerun['seconds']])} times each, interleaved; the best of each is "
        "compared (re-runs: " + ", ".join(f"{s:.1f}" for s in rerun.get("all_seconds") or [rerun["seconds"]])
        + " s; floors: " + ", ".join(f"{s:.1f}" for s in r.get("floors") or [r["floor"]]) + " s), and the task "
        "and round-trip counts below are those of the best re-run. Reboots are counted at the power-cycle command.",
        "",
        "| run | wall time | ÷ setup floor |",
        "|---|---|---|",
        f"| `ansible all -m ansible.builtin.setup` (floor) | {r['floor']:.1f} s | 1.00× |",
        f"| site.yml fresh provision | {fresh['seconds']:.1f} s | {fresh['seconds'] / r['floor']:.1f}× |",
        f"| site.yml idempotent re-run | {rerun['seconds']:.1f} s | {rerun['seconds'] / r['floor']:.1f}× |",
        *demo_rows(r.get("demo")),
        "",
        "| host | host round trips (re-run) | per-host tasks (re-run) | all tasks | executed | skipped "
        "| changed (re-run) | reboots, fresh provision | reboots, re-run |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        "A host round trip is a module executed on the host: a task result that is not skipped, whose action is "
        "not controller-side (set_fact, debug, assert, include, fleet_contract, ...) and not delegated to the "
        "controller, leaving out the fleet-level run_once tasks. The re-run's round trips:",
        "",
        "| task (re-run round trip) | " + " | ".join(HOSTS) + " |",
        "|---|" + "---|" * len(HOSTS),
        *(trip_rows or ["| (none) |" + " |" * len(HOSTS)]),
        "",
        "A task counts once per host whatever it loops over (bench/callback_plugins/bench_results.py). Per-host "
        "tasks leave out "
        f"the {len(once)} fleet-level run_once tasks (contract, cluster objects, report), which run on the first "
        f"host in name order ({first}). The per-host count is the same on 2, 8 and 12 NICs because every NIC "
        "setting is one module call per host. Tasks whose outcome is not the same on every host:",
        "",
        "| task (re-run) | " + " | ".join(HOSTS) + " |",
        "|---|" + "---|" * len(HOSTS),
        *(diff_rows or ["| (none) |" + " |" * len(HOSTS)]),
    ]) + note + "\n" + END


def demo_rows(demo: dict | None) -> list[str]:
    """The demo fleet's rows of the wall-time table (its own floor on its own two hosts), and a note below it."""
    if not demo:
        return []
    rerun = demo["rerun"]
    # As in section(): the fleet-level run_once tasks (on the first host in name order only) are no host's round trip.
    first = sorted(DEMO_HOSTS)[0]
    once = {name for name in rerun["status"][first]
            if all(name not in rerun["status"][h] for h in DEMO_HOSTS if h != first)}
    trips = {h: len([t for t in rerun["trips"][h] if t not in once]) for h in DEMO_HOSTS}
    return [
        f"| demo fleet (DGX + HGX, {', '.join(DEMO_HOSTS)}): `ansible all -m ansible.builtin.setup` (floor) | "
        f"{demo['floor']:.1f} s | 1.00× |",
        f"| demo fleet: site.yml fresh provision | {demo['fresh']['seconds']:.1f} s | "
        f"{demo['fresh']['seconds'] / demo['floor']:.1f}× |",
        f"| demo fleet: site.yml idempotent re-run | {rerun['seconds']:.1f} s | "
        f"{rerun['seconds'] / demo['floor']:.1f}× |",
        "",
        "The demo fleet's re-runs: " + ", ".join(f"{x:.1f}" for x in rerun["all_seconds"]) + " s; floors: "
        + ", ".join(f"{x:.1f}" for x in demo["floors"]) + " s (best of each compared); round trips a host in its "
        "best re-run (fleet-level run_once tasks left out): " + ", ".join(f"{h} {n}" for h, n in trips.items())
        + "; changed results: "
        + ", ".join(f"{h} {rerun['changed'][h]}" for h in rerun["changed"]) + "; reboots, fresh provision: "
        + ", ".join(f"{h} {n}" for h, n in demo["fresh_reboots"].items()) + ", re-run: "
        + ", ".join(f"{h} {n}" for h, n in demo["rerun_reboots"].items()) + ".",
    ]


SCALE_BEGIN = "<!-- bench_site_scale:begin -->"
SCALE_END = "<!-- bench_site_scale:end -->"


def scale_hosts(n: int) -> dict[str, str]:
    """``n`` simulated hosts, DGX and HGX H100 alternating (one fabric), named bs-01..."""
    return {f"bs-{i:02d}": ("dgx-h100" if i % 2 else "hgx-h100") for i in range(1, n + 1)}


def scale_section(rows: list[tuple[int, dict]], commit: str) -> str:
    lines = [SCALE_BEGIN, "## site.yml re-run at fleet sizes (`bench/bench_site.py --fleet`)", "",
             f"Commit {commit}. For each N: N simulated hosts (DGX and HGX H100 alternating, one fabric), a fresh "
             "provision, then the idempotent re-run (timed), then `ansible all -m ansible.builtin.setup` on the same "
             "hosts (the floor), at the forks of ansible.cfg.", "",
             "| hosts | re-run | per host | setup floor | ÷ floor | round trips per host (min–max) "
             "| changed (re-run) |",
             "|---|---|---|---|---|---|---|"]
    for n, r in rows:
        rerun = r["rerun"]
        trips = [len(t) for t in rerun["trips"].values()]
        lines.append(f"| {n} | {rerun['seconds']:.1f} s | {rerun['seconds'] / n:.1f} s | {r['floor']:.1f} s | "
                     f"{rerun['seconds'] / r['floor']:.1f}× | {min(trips)}–{max(trips)} | "
                     f"{sum(v or 0 for v in rerun['changed'].values())} |")
    notes = []
    for n, r in rows:  # a failed host is no idempotent re-run: say which, where and why
        for label, result in (("fresh provision", r["fresh"]), ("re-run", r["rerun"])):
            for name, msgs in sorted(result["failed_tasks"].items()):
                notes.append(f"- {n} hosts, {label}: {name}: {'; '.join(msgs)}")
    if notes:
        lines += ["", "Failed tasks (these hosts' figures are not those of an idempotent re-run):", *notes]
    return "\n".join(lines + [SCALE_END])


def update(path: Path, text: str, begin: str = BEGIN, end: str = END) -> None:
    old = path.read_text(encoding="utf-8") if path.is_file() else "# Benchmarks\n"
    pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
    new = pattern.sub(lambda _m: text, old) if pattern.search(old) else old.rstrip("\n") + "\n\n" + text
    path.write_text(new.rstrip("\n") + "\n", encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path)
    parser.add_argument("--keep", action="store_true", help="leave the hosts running (bn-, or bs- with --fleet)")
    parser.add_argument("--no-demo", action="store_true", help="leave out the demo fleet's run (DGX + HGX)")
    parser.add_argument("--fleet", help="comma-separated fleet sizes (e.g. 2,8,16): the re-run at each size "
                                        "instead of the four-host run")
    args = parser.parse_args()
    if args.fleet:
        commit = sh(["git", "rev-parse", "--short", "HEAD"]).stdout.strip()
        rows = [(n, run(args.keep, scale_hosts(n), port=KAPI_PORT + 1, name=f"bench-{n}", repeats=1))
                for n in (int(x) for x in args.fleet.split(","))]
        text = scale_section(rows, commit)
        print(text)
        if args.output:
            update(args.output, text, SCALE_BEGIN, SCALE_END)
        return 0
    result = run(args.keep)
    if not args.no_demo:
        result["demo"] = run(args.keep, DEMO_HOSTS, port=KAPI_PORT + 2, name="bench-demo")
    text = section(result, sh(["git", "rev-parse", "--short", "HEAD"]).stdout.strip())
    print(text)
    if args.output:
        update(args.output, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
