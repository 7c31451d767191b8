"""Benchmark of the fabric intent's resolution (``mlplatform.gpunode.fabric_intent``) at 4,096 hosts in 16 fabrics,
as a ratio to reading the same variables, measured in the same run.

An inventory on disk as a site writes it: ``hosts.yml`` with 16 fabric groups of 256 hosts (host ranges), and
``group_vars/<fabric group>/gpunode.yml`` declaring each fabric (half RoCE with a QoS profile, half InfiniBand).
Ansible's own InventoryManager, VariableManager and HostVars load it, as ansible-playbook does. Then, interleaved,
best of ``--repeats``:

- floor: reading every host's ``gpunode_fabric`` and ``gpunode_fabric_settings`` through ``hostvars``;
- resolution: what the action does, reading the same through ``hostvars`` (and every host's variable names, for the
  variables that moved or are unknown) and resolving them in one pass (module_utils/intent.py ``resolve_fleet``).

The resolution itself, apart from the reading, is reported too. Writes its own section of BENCHMARKS.md between the
markers below, keeping every other section.
Usage: nice python bench/bench_intent.py [--hosts 4096] [--fabrics 16] [--repeats 3] [--output BENCHMARKS.md]
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
from ansible.plugins.loader import init_plugin_loader  # noqa: E402 the collection loader, as ansible-playbook sets it

init_plugin_loader([str(REPO / ".cache" / "collections")])

from ansible_collections.mlplatform.gpunode.plugins.module_utils.intent import resolve_fleet  # noqa: E402 loader first
from ansible_collections.mlplatform.gpunode.plugins.plugin_utils.fabric_intent import declarations  # noqa: E402 - loader first

BEGIN = "<!-- bench_intent:begin -->"
END = "<!-- bench_intent:end -->"


def write_inventory(root: Path, hosts: int, fabrics: int) -> list[str]:
    per = hosts // fabrics
    children, names = {}, []
    for f in range(fabrics):
        group = f"fabric_{f:02d}"
        children[group] = {"hosts": {f"node-{f:02d}-[{0:04d}:{per - 1:04d}]": None}}
        names += [f"node-{f:02d}-{i:04d}" for i in range(per)]
        roce = f % 2 == 0
        settings = {"transport": "roce" if roce else "infiniband", "link_speed_gbps": 400,
                    "nics": {"compute": {"num_vfs": 8, **({"adaptive_routing": True} if roce else {})}}}
        if roce:
            settings["qos"] = {"trust": "dscp", "pfc_priorities": [3], "ecn_np_priorities": [3],
                               "ecn_rp_priorities": [3], "cnp_dscp": 48, "roce_tos": 106, "mtu": 9000}
        (root / "group_vars" / group).mkdir(parents=True)
        (root / "group_vars" / group / "gpunode.yml").write_text(
            yaml.safe_dump({"gpunode_fabric": f"fabric-{f:02d}", "gpunode_fabric_settings": settings}))
    (root / "group_vars" / "gpu_nodes.yml").write_text(yaml.safe_dump({"ansible_user": "ubuntu",
                                                                       "gpunode_reboot_ok": False}))
    (root / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"children": children}}}}))
    return names


def load(root: Path):
    from ansible.inventory.manager import InventoryManager  # noqa: PLC0415 - after the loader
    from ansible.parsing.dataloader import DataLoader  # noqa: PLC0415 - after the loader
    from ansible.vars.hostvars import HostVars  # noqa: PLC0415 - after the loader
    from ansible.vars.manager import VariableManager  # noqa: PLC0415 - after the loader

    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources=[str(root / "hosts.yml")])
    manager = VariableManager(loader=loader, inventory=inventory)
    return HostVars(inventory=inventory, variable_manager=manager, loader=loader)


def run(hosts: int, fabrics: int, repeats: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        names = write_inventory(root, hosts, fabrics)
        floors, resolutions, pure = [], [], []
        for round_ in range(repeats + 1):  # the first round warms the interpreter and the file cache, not counted
            hostvars = load(root)
            started = time.perf_counter()
            read = {}
            for host in names:
                view = hostvars[host]  # one look-up of the host's variables, as the action makes
                read[host] = (view.get("gpunode_fabric"), view.get("gpunode_fabric_settings"))
            floor = time.perf_counter() - started
            if len(read) != hosts:
                raise SystemExit(f"read {len(read)} hosts of {hosts}")
            hostvars = load(root)
            started = time.perf_counter()
            gathered = declarations(hostvars, names)
            middle = time.perf_counter()
            resolved = resolve_fleet(gathered)
            if round_:
                floors.append(floor)
                resolutions.append(time.perf_counter() - started)
                pure.append(time.perf_counter() - middle)
            if len(resolved["hosts"]) != hosts or len(resolved["fabrics"]) != fabrics:
                raise SystemExit(f"resolved {len(resolved['hosts'])} hosts in {len(resolved['fabrics'])} fabrics")
    return {"hosts": hosts, "fabrics": fabrics, "floor_s": min(floors), "resolution_s": min(resolutions),
            "resolve_only_s": min(pure), "floors": floors, "resolutions": resolutions}


def commit() -> str:
    out = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                         check=False)
    return out.stdout.strip() or "unknown"


def section(r: dict) -> str:
    ratio = r["resolution_s"] / r["floor_s"]
    return "\n".join([
        BEGIN,
        "## Fabric intent: resolution of the fleet's declarations (`bench/bench_intent.py`)",
        "",
        f"Measured at commit {commit()} on one machine ({platform.machine()}, Python {platform.python_version()}, "
        f"shared with other jobs): an inventory on disk of {r['hosts']:,} hosts in {r['fabrics']} fabric groups "
        "(host ranges; each fabric declared once in group_vars/<group>/gpunode.yml, half RoCE with a QoS profile, "
        "half InfiniBand), loaded by Ansible's InventoryManager, VariableManager and HostVars. Floor: reading every "
        "host's gpunode_fabric and gpunode_fabric_settings through hostvars. Resolution: the fabric_intent action's "
        "work, the same reads plus each host's variable names (moved or unknown variables), then resolve_fleet. "
        f"Best of {len(r['floors'])} interleaved runs each, after one that is not counted.",
        "",
        "| step | time | ÷ floor |",
        "|---|---|---|",
        f"| reading the two variables of every host (floor) | {r['floor_s']:.2f} s | 1.00× |",
        f"| resolution (reading + names + resolve_fleet) | {r['resolution_s']:.2f} s | {ratio:.2f}× |",
        f"| resolve_fleet alone (one pass; each fabric checked once) | {r['resolve_only_s'] * 1000:.1f} ms | "
        f"{r['resolve_only_s'] / r['floor_s']:.3f}× |",
        "",
        "Every run: floor " + ", ".join(f"{t:.2f}" for t in r["floors"]) + " s; resolution "
        + ", ".join(f"{t:.2f}" for t in r["resolutions"]) + " s.",
        END,
    ])


def update(path: Path, text: str) -> None:
    old = path.read_text(encoding="utf-8") if path.is_file() else "# Benchmarks\n"
    pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.S)
    new = pattern.sub(lambda _m: text, old) if pattern.search(old) else old.rstrip("\n") + "\n\n" + text
    path.write_text(new.rstrip("\n") + "\n", encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=4096)
    parser.add_argument("--fabrics", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    result = run(args.hosts, args.fabrics, args.repeats)
    print(json.dumps(result), file=sys.stderr)
    text = section(result)
    print(text)
    if args.output:
        update(args.output, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
