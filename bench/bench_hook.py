"""Benchmark the post-provision hook under a flood: acceptance latency, and runs = batches, not posts.

200 cloud-init phone_home posts for 100 machines (each posts twice, as a retrying cloud-init or two
sources would), sent by 16 concurrent clients to a real ``gpunode hook serve`` on loopback whose
playbook is trivial (one debug task on local-connection hosts), so what is measured is the hook:
the time from sending a post to its 202 (the request is committed to SQLite first), and how many
ansible-runner runs the flood causes.

Usage: python bench/bench_hook.py [--posts 200] [--output BENCHMARKS.md]
(the section between the ``<!-- bench:hook -->`` markers is replaced, the rest of the file kept).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

REPO = Path(__file__).resolve().parents[1]
PORT = 18086
SECRET = "bench-hook-secret-7c41e09d2b"  # noqa: S105 - a throwaway secret for the benchmark
START, END = "<!-- bench:hook -->", "<!-- /bench:hook -->"
PLAYBOOK = """\
- name: Trivial pipeline
  hosts: all
  gather_facts: false
  tasks:
    - name: Say which host ran
      ansible.builtin.debug:
        msg: "{{ inventory_hostname }}"
"""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def flood(posts: int, machines: int, window: float, work: Path) -> dict:
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    names = [f"node-{i:03d}" for i in range(machines)]
    (work / "play.yml").write_text(PLAYBOOK)
    (work / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": {n: local for n in names},
                                                           "vars": {"ansible_forks": 50}}}))
    settings = {"state_dir": str(work / "state"), "project_dir": str(work), "playbook": "play.yml",
                "inventory": "hosts.yml", "listen_port": PORT, "batch_window": window, "max_batch": machines,
                "retry_delay": 0, "run_env": {"ANSIBLE_FORKS": "50"}}
    (work / "hook.yml").write_text(yaml.safe_dump(settings))
    env = dict(os.environ, GPUNODE_HOOK_SECRET=SECRET, PYTHONPATH=str(REPO / "src"))
    log = open(work / "serve.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([sys.executable, "-m", "gpunode.cli", "hook", "-c", str(work / "hook.yml"), "serve"],
                            env=env, stdout=log, stderr=log)
    base = f"http://127.0.0.1:{PORT}"
    auth = {"Authorization": f"Bearer {SECRET}"}
    try:
        for _ in range(200):
            try:
                httpx.get(f"{base}/v1/hosts", headers=auth, timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        order = [names[i % machines] for i in range(posts)]

        def post(name: str) -> float:
            form = {"instance_id": f"i-{name}", "hostname": name, "fqdn": f"{name}.bench.example",
                    "pub_key_rsa": "N/A", "pub_key_ecdsa": "N/A", "pub_key_ed25519": "N/A", "pub_key_dsa": "N/A"}
            with httpx.Client() as client:
                start = time.perf_counter()
                resp = client.post(f"{base}/v1/phone-home?token={SECRET}", data=form)
                elapsed = time.perf_counter() - start
            resp.raise_for_status()
            return elapsed

        started = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            latencies = list(pool.map(post, order))
        flood_seconds = time.perf_counter() - started
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            counts = httpx.get(f"{base}/v1/hosts", headers=auth).json()["counts"]
            if counts.get("ok", 0) + counts.get("failed", 0) == machines:
                break
            time.sleep(0.5)
        runs = httpx.get(f"{base}/v1/runs", headers=auth).json()["runs"]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        log.close()
    return {"posts": posts, "machines": machines, "window": window, "flood_seconds": flood_seconds,
            "p50": percentile(latencies, 50), "p99": percentile(latencies, 99), "max": max(latencies),
            "runs": len(runs), "run_sizes": [len(r["hosts"]) for r in runs], "counts": counts}


def section(r: dict) -> str:
    return "\n".join([
        START,
        "## Post-provision hook under a flood",
        "",
        f"Measured by `bench/bench_hook.py` on one machine ({platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}): {r['posts']} cloud-init phone_home posts for {r['machines']} "
        f"machines (each posts twice), 16 concurrent clients, against `gpunode hook serve` on loopback with "
        f"`batch_window: {r['window']:g}` s and a one-task playbook. A post's latency is send → 202, and the "
        "202 comes after the request is committed to SQLite (WAL, synchronous=FULL).",
        "",
        "| posts | machines | flood took | acceptance p50 | acceptance p99 | max | runs started | hosts per run "
        "| hosts ok |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| {r['posts']} | {r['machines']} | {r['flood_seconds']:.2f} s | {r['p50'] * 1000:.1f} ms | "
        f"{r['p99'] * 1000:.1f} ms | {r['max'] * 1000:.1f} ms | {r['runs']} | "
        f"{' + '.join(str(n) for n in r['run_sizes'])} | {r['counts'].get('ok', 0)} |",
        "",
        f"Runs started = batches ({r['runs']}), not posts ({r['posts']}): duplicate posts for a queued or "
        "running machine are recorded and coalesced, and machines that arrive within the batch window "
        "share one ansible-runner run.",
        END,
    ])


def write_section(path: Path, text: str) -> None:
    old = path.read_text() if path.exists() else "# Benchmarks\n"
    pattern = re.compile(re.escape(START) + r".*?" + re.escape(END), re.S)
    new = pattern.sub(lambda _m: text, old) if pattern.search(old) else old.rstrip("\n") + "\n\n" + text + "\n"
    path.write_text(new)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posts", type=int, default=200)
    parser.add_argument("--window", type=float, default=2.0)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpunode-bench-hook-") as tmp:
        result = flood(args.posts, args.posts // 2, args.window, Path(tmp))
    text = section(result)
    print(text)
    if args.output:
        write_section(args.output, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
