"""Benchmark discovery and the sysfs materializer, as ratios measured in one run.

- discovery: ``read_sysfs`` + ``classify`` on a materialized profile, against the floor of merely
  walking the same tree and reading every file in it once (what any sysfs reader must pay);
- materialize: writing a profile's tree, against the floor of creating the same numbers of
  directories, symlinks and files with no logic at all.

Each figure is the best of N interleaved repetitions, so both sides of a ratio see the same load.
Usage: python bench/bench_discovery.py [--repeat N] [--output BENCHMARKS.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "src"), str(REPO / ".cache" / "collections")]

from ansible_collections.mlplatform.gpunode.plugins.module_utils.nic_roles import classify  # noqa: E402 after sys.path setup
from ansible_collections.mlplatform.gpunode.plugins.module_utils.pci_sysfs import read_sysfs  # noqa: E402 after sys.path setup

from gpunode.sim.profile import load_profile  # noqa: E402 after sys.path setup
from gpunode.sim.sysfs import materialize  # noqa: E402 after sys.path setup


def _seconds(func, *args) -> float:
    start = time.perf_counter()
    func(*args)
    return time.perf_counter() - start


def _discover(root: Path) -> None:
    classify(read_sysfs(str(root))["devices"])


def _walk_and_read(root: Path) -> None:
    for dirpath, _dirs, files in os.walk(root, followlinks=False):
        for name in files:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                with open(path, "rb") as fh:
                    fh.read()


def _counts(root: Path) -> dict[str, int]:
    counts = {"dirs": 0, "links": 0, "files": 0}
    for dirpath, dirs, files in os.walk(root):
        for entry in dirs + files:
            path = os.path.join(dirpath, entry)
            counts["links" if os.path.islink(path) else "dirs" if os.path.isdir(path) else "files"] += 1
    return counts


def _create(root: Path, counts: dict[str, int]) -> None:
    root.mkdir()
    ndirs = max(counts["dirs"], 1)
    for i in range(counts["dirs"]):
        (root / f"d{i}").mkdir()
    for i in range(counts["links"]):
        os.symlink(f"d{i % ndirs}", root / f"l{i}")
    for i in range(counts["files"]):
        (root / f"d{i % ndirs}" / f"f{i}").write_text("0\n")


def run(repeat: int) -> list[tuple[str, float, float, dict[str, int]]]:
    rows = []
    for name in ("dgx-h100", "hgx-h100"):
        profile = load_profile(name)
        with tempfile.TemporaryDirectory() as tmp:
            base = Path(tmp)
            tree = base / "sys"
            materialize(profile, tree)
            counts = _counts(tree)
            best = {"discover": float("inf"), "walk": float("inf"), "mat": float("inf"), "floor": float("inf")}
            for i in range(repeat):  # interleaved: both sides of a ratio see the same load
                timings = {
                    "discover": _seconds(_discover, tree),
                    "walk": _seconds(_walk_and_read, tree),
                    "mat": _seconds(materialize, profile, base / f"m{i}"),
                    "floor": _seconds(_create, base / f"f{i}", counts),
                }
                best = {k: min(best[k], v) for k, v in timings.items()}
        rows.append((name, best["discover"] / best["walk"], best["mat"] / best["floor"], counts))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    rows = run(args.repeat)
    lines = [
        "| profile | sysfs entries (dirs/links/files) | discovery ÷ walk-and-read floor | materialize ÷ create floor |",
        "|---|---|---|---|",
    ]
    for name, disc, mat, c in rows:
        lines.append(f"| {name} | {c['dirs']}/{c['links']}/{c['files']} | {disc:.2f}× | {mat:.2f}× |")
    table = "\n".join(lines)
    print(table)
    if args.output:
        args.output.write_text(
            "# Benchmarks\n\n"
            "Measured by `make bench` (`bench/bench_discovery.py`), all ratios from one run on one machine "
            f"({platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}); each figure is "
            f"the best of {args.repeat} interleaved repetitions.\n\n"
            "- **discovery ÷ walk-and-read floor**: `read_sysfs` + `classify` against walking the same tree and "
            "reading every file once. Near 1× means discovery costs what reading sysfs costs.\n"
            "- **materialize ÷ create floor**: writing a profile's tree against creating the same numbers of "
            "directories, symlinks and files with no logic.\n\n" + table + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
