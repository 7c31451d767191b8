"""Benchmarks of the fleet-wide controller steps at 1,024 and 4,096 synthetic hosts, as ratios to a
floor measured in the same run.

The hosts are half DGX H100, half HGX H100 (the discovery result of the simulator's profiles, 8
rails each, four fabrics), with the contracts the roles publish. Their facts are set in a real
Ansible VariableManager as ``set_fact`` sets them, and each step runs as the role runs it:

- cluster_objects: the two ``set_fact`` expressions of roles/cluster_objects/tasks/build.yml,
  templated by Ansible's templar over ``hostvars`` (collecting every host, then building the objects);
- bandwidth schedule: the validation_schedule action of roles/validation/tasks/bandwidth.yml over
  ``hostvars`` (its arguments templated from the task), with the engine's handling of its registered
  result (the queue from the worker, the register and callback copies);
- fleet_contract: the action plugin's gathering over ``hostvars``, the comparison and the table;
- report: the ``fleet_report`` task of playbooks/report.yml (its arguments from the playbook) over the facts
  site.yml leaves: each host's fabric, contracts, discovery result, validation_result (judged ib_write_bw
  tests), nic_firmware_result and the registered result_files read (the text of discovery.json,
  validation.json, nic_firmware.json and reboot.json), and the Kueue objects. It records them in a results
  directory (fleet.json, hosts/<host>/*.json) and renders report.html, report.md and report.json: into an
  empty directory (a first run, every file written), then again (a re-run, every file compared, none written).

Floor: serializing the same facts to JSON once (what any controller-side step that reads every
host's facts pays). The report reads more than the facts the other steps read (the judged tests, every
result file's text, the Kueue objects), so it has its own floor: serializing what it reads. Each step
should stay within 2x its floor, and time at 4,096 / time at 1,024 within 5.

Writes its own section of BENCHMARKS.md between the markers below, keeping every other section.
Usage: nice python bench/bench_fleet.py [--hosts 1024,4096] [--output BENCHMARKS.md]
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "src")]
# Ansible's collection loader, as ansible-playbook sets it up: the templar resolves the collection's filters.
from ansible.plugins.loader import init_plugin_loader  # noqa: E402 after sys.path setup

init_plugin_loader([str(REPO / ".cache" / "collections")])

from ansible_collections.mlplatform.gpunode.plugins.module_utils import contract, k8s_objects  # noqa: E402 after sys.path setup
from ansible_collections.mlplatform.gpunode.plugins.module_utils.nic_roles import classify  # noqa: E402 after sys.path setup
from ansible_collections.mlplatform.gpunode.plugins.module_utils.pci_sysfs import read_sysfs  # noqa: E402 after sys.path setup

from gpunode.sim.profile import load_profile  # noqa: E402 after sys.path setup
from gpunode.sim.sysfs import materialize  # noqa: E402 after sys.path setup

BEGIN = "<!-- bench_fleet:begin -->"
END = "<!-- bench_fleet:end -->"
SETTINGS = {
    "domain": "gpunode.mlplatform.io", "trusted_prefix": "node-restriction.kubernetes.io",
    "cluster_queue_prefix": "gpu", "cohort": "gpunode", "local_queue_name": "gpu",
    "tenants": [{"namespace": "team-a"}, {"namespace": "team-b"}],
    "flavor_taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
    "cpu_reserved": 4, "memory_reserved_mib": 16384, "device_plugin_namespace": "kube-system",
    "device_plugin_configmap": "sriovdp-config", "network_namespace": "default", "rail_cidr": "10.220.0.0/16",
    "resource_prefix": "nvidia.com",
}
NV = {"SRIOV_EN": "True(1)", "NUM_OF_VFS": "8", "LINK_TYPE_P1": "ETH(2)", "ATS_ENABLED": "False(0)",
      "ROCE_CC_PRIO_MASK_P1": "255", "CNP_DSCP_P1": "48", "CNP_802P_PRIO_P1": "6"}
QOS = {"qos_trust": "dscp", "qos_pfc": [0, 0, 0, 1, 0, 0, 0, 0], "qos_ecn_np": [3], "qos_ecn_rp": [3],
       "qos_cnp_dscp": 48, "qos_roce_tos": 106, "mtu": 9000}


def discovered() -> dict[str, dict]:
    out = {}
    for name in ("dgx-h100", "hgx-h100"):
        with tempfile.TemporaryDirectory() as tmp:
            materialize(load_profile(name), Path(tmp))
            hw = classify(read_sysfs(tmp))
        hw["fabric_manager_required"] = bool(hw["nvswitches"])
        out[name] = hw
    return out


def synthetic_fleet(n: int, hws: dict[str, dict]) -> tuple[dict, dict]:
    """(contract input, k8s_objects input) for n hosts; every 97th host drifts on one rail."""
    contract_hosts, k8s_hosts = {}, {}
    for i in range(n):
        profile = "dgx-h100" if i % 2 == 0 else "hgx-h100"
        name = f"{profile[:3]}{i:05d}"
        fabric = f"fabric{i % 4}"
        hw = hws[profile]
        entries = [{"scope": "host", "rail": None, "pci_address": None, "netdev": None, "setting": "rail_count",
                    "value": len(hw["rails"])},
                   {"scope": "host", "rail": None, "pci_address": None, "netdev": None,
                    "setting": "gpu_driver_version", "value": "550.90.07"}]
        for rail in hw["rails"]:
            base = {"scope": "rail", "rail": rail["rail"], "pci_address": rail["pci_address"], "netdev": rail["netdev"]}
            for key, value in NV.items():
                entries.append({**base, "setting": f"nv_config.{key}", "value": value})
            accl = 0 if (i % 97 == 5 and rail["rail"] == 2) else 1
            entries.append({**base, "setting": "roce_accl.adaptive_routing_forced_en", "value": accl})
            for key, value in QOS.items():
                entries.append({**base, "setting": key, "value": copy.copy(value)})
            entries.append({**base, "setting": "sriov_num_vfs", "value": 8})
        contract_hosts[name] = {"fabric": fabric, "entries": entries}
        k8s_hosts[name] = {"hw": hw, "node_name": name, "fabric": fabric, "transport": "roce", "cpu": 224,
                           "memory_mib": 2097152, "sriov_rails": k8s_objects.sriov_rails_from_hw(hw, 8),
                           "adaptive_routing": "enabled"}
    return contract_hosts, k8s_hosts


def measure(func, *args) -> tuple[float, int, object]:
    """(seconds without tracing, tracemalloc peak bytes from a second traced call, result)."""
    gc.collect()
    start = time.perf_counter()
    result = func(*args)
    seconds = time.perf_counter() - start
    gc.collect()
    tracemalloc.start()
    func(*args)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return seconds, peak, result


def _expressions(path: Path, task_name: str) -> dict:
    """The ``set_fact`` arguments and ``vars`` of one task of a role's task file, as Ansible reads them."""
    import yaml

    for task in yaml.safe_load(path.read_text(encoding="utf-8")):
        if task.get("name") == task_name:
            return {**task.get("vars", {}), **task["ansible.builtin.set_fact"]}
    raise KeyError(f"{path}: no task {task_name!r}")


class Fleet:
    """N hosts' published facts in a real VariableManager, and a templar over their hostvars."""

    def __init__(self, n: int, hws: dict[str, dict]):
        from ansible.inventory.manager import InventoryManager
        from ansible.parsing.dataloader import DataLoader
        from ansible.vars.hostvars import HostVars
        from ansible.vars.manager import VariableManager

        contract_hosts, k8s_hosts = synthetic_fleet(n, hws)
        self.names = list(contract_hosts)
        self.loader = DataLoader()
        self.inventory = InventoryManager(loader=self.loader, sources=[])
        self.inventory.add_group("gpu_nodes")
        self.facts = {}
        vm = self.vm = VariableManager(loader=self.loader, inventory=self.inventory)
        for name in self.names:
            self.inventory.add_host(name, group="gpu_nodes")
            entries = contract_hosts[name]["entries"]
            facts = {"gpunode_hw": k8s_hosts[name]["hw"], "gpunode_fabric": contract_hosts[name]["fabric"],
                     "nic_firmware_contract": [e for e in entries if not e["setting"].startswith(("qos_", "mtu"))],
                     "roce_qos_contract": [e for e in entries if e["setting"].startswith(("qos_", "mtu"))],
                     "__validation_address": f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}"
                     if (i := len(self.facts)) else "10.0.0.0"}
            vm.set_host_facts(name, {"processor_vcpus": 224, "memtotal_mb": 2097152})
            vm.set_nonpersistent_facts(name, facts)
            self.facts[name] = facts
        self.hostvars = HostVars(inventory=self.inventory, variable_manager=vm, loader=self.loader)

    def template(self, expression: str, **variables):
        from ansible.template import Templar, trust_as_template

        base = {"hostvars": self.hostvars, "ansible_play_hosts": self.names, **variables}
        return Templar(loader=self.loader, variables=base).template(trust_as_template(expression))


def cluster_objects_role(fleet: Fleet) -> dict:
    build = REPO / "roles" / "cluster_objects" / "tasks" / "build.yml"
    generate = _expressions(build, "Build | Generate the objects from every host's hardware, capacity and rails")
    return fleet.template(generate["__cluster_objects"], cluster_objects_vfs_per_rail=8,
                          cluster_objects_sriov_rails_from_discovery=True, __cluster_objects_settings=SETTINGS)


def run_action(name: str, args: dict, fleet: Fleet, **task_vars) -> dict:
    """The collection's action plugin ``name`` as the task executor builds it for one task's arguments, run with
    the fleet's ``hostvars`` and ``task_vars``."""
    import importlib
    from types import SimpleNamespace

    plugin = importlib.import_module(f"ansible_collections.mlplatform.gpunode.plugins.action.{name}")
    action = plugin.ActionModule(SimpleNamespace(args=args, async_val=0, check_mode=False,
                                                 action=f"mlplatform.gpunode.{name}"),
                                 SimpleNamespace(_shell=SimpleNamespace(tmpdir=None)), None, fleet.loader, None)
    return action.run(task_vars={"hostvars": fleet.hostvars, **task_vars})


def schedule_role(fleet: Fleet) -> dict:
    """The bandwidth stage's schedule task as Ansible runs it: its arguments templated from
    roles/validation/tasks/bandwidth.yml, the validation_schedule action run over ``hostvars``, then
    what the engine does with a registered result of a run_once task: the worker's result crosses the
    process queue (pickled), the strategy keeps a cleaned copy for ``register`` and the callbacks get
    another one."""
    import pickle

    import yaml
    from ansible.vars.clean import module_response_deepcopy, strip_internal_keys

    tasks = yaml.safe_load((REPO / "roles" / "validation" / "tasks" / "bandwidth.yml").read_text(encoding="utf-8"))
    task = next(t for t in tasks if t.get("name") == "Bandwidth | Schedule the tests (every platform pair of each "
                                                       "fabric, bounded fan-in)")
    role_vars = {"validation_bandwidth_forks": 50, "validation_bandwidth_base_port": 18515,
                 "validation_bandwidth_timeout": 60, "validation_bandwidth_server_start_s": 30}
    args = {k: fleet.template(v, **role_vars) if isinstance(v, str) else v
            for k, v in task["mlplatform.gpunode.validation_schedule"].items()}
    result = run_action("validation_schedule", args, fleet, ansible_play_hosts=fleet.names)
    result = pickle.loads(pickle.dumps(result))  # noqa: S301 - our own bytes, as the worker's queue carries them
    registered = strip_internal_keys(module_response_deepcopy(result))  # the register copy
    module_response_deepcopy(result)  # the callbacks' copy
    return registered["schedule"]


def contract_action(fleet: Fleet) -> dict:
    from ansible_collections.mlplatform.gpunode.plugins.action.fleet_contract import ActionModule

    gather = ActionModule._gather  # noqa: SLF001 - the action's own gathering, without a task around it
    gathered, problems = gather(None, {"hostvars": fleet.hostvars}, fleet.names, list(contract.DEFAULT_SOURCES),
                                "gpunode_fabric", "default")
    if problems:
        raise RuntimeError(problems[:3])
    compared = contract.compare(gathered, fleet.names)
    compared["table"] = contract.format_table(compared)
    return compared


def report_facts(fleet: Fleet, schedule: dict) -> dict:
    """What site.yml's report stage finds for each host, published in the fleet's variable manager: its
    validation_result (its ib_write_bw tests judged from a measurement of 92-99% of line rate, one test in 512
    at 30%), its nic_firmware_result (the NV config read of every rail, the ROCE_ACCL fields, the contract), and
    the registered result_files read (__report_results: the text of discovery.json, validation.json,
    nic_firmware.json and reboot.json, written as the roles write them, to_nice_json). Returns, per host, the
    facts the report reads (for its floor)."""
    from ansible_collections.mlplatform.gpunode.plugins.module_utils import validation

    results = {t["id"]: {"gbps": (t["line_rate_gbps"] or 400) * (0.3 if k % 512 == 7 else 0.92 + (k % 8) / 100),
                         "error": None} for k, t in enumerate(schedule["tests"])}
    pairs = validation.judge_pairs(schedule["tests"], results, 90)
    reboot = {"attempts": 1, "consent": True, "deferred": False, "max_attempts": 2, "not_applied": {},
              "reasons": ["nic_firmware_reboot_required"], "rebooted": True, "rebooting": False, "required": False,
              "strategy": "power_cycle", "units": ["Result=success\nLoadState=loaded\nActiveState=active"]}
    read = {}
    for host, f in fleet.facts.items():
        passed = not any(p["status"] == "fail" for p in pairs.get(host, []))
        result = {"host": host, "passed": passed, "failures": [], "checks": [], "pairs": pairs.get(host, []),
                  "taint": "removed"}
        rails = f["gpunode_hw"]["rails"]
        nic_firmware = {
            "fabric": f["gpunode_fabric"], "transport": "roce", "reboot_required": False, "pending": {},
            "reboot_reason": None, "skipped": {}, "not_in_effect": {},
            "config": {r["pci_address"]: {k: {"default": v, "current": v, "next_boot": v} for k, v in NV.items()}
                       for r in rails},
            "roce_accl": {r["pci_address"]: {"adaptive_routing_forced_en": 1} for r in rails},
            "contract": f["nic_firmware_contract"]}
        files = {"discovery.json": f["gpunode_hw"], "validation.json": result, "nic_firmware.json": nic_firmware,
                 "reboot.json": reboot}
        registered = {"changed": False, "failed": False, "files": {
            name: {"content": json.dumps(data, indent=4, sort_keys=True) + "\n"} for name, data in files.items()}}
        published = {"validation_result": result, "nic_firmware_result": nic_firmware, "__report_results": registered}
        fleet.vm.set_nonpersistent_facts(host, published)
        read[host] = {**{k: f[k] for k in ("gpunode_fabric", "gpunode_hw", "nic_firmware_contract",
                                           "roce_qos_contract")}, **published}
    return read


def report_action(fleet: Fleet, workdir: Path) -> int:
    """The report stage's task as playbooks/report.yml runs it: the fleet_report action over the play's facts,
    recording them in the results directory and rendering report.html, report.md and report.json."""
    import yaml

    plays = yaml.safe_load((REPO / "playbooks" / "report.yml").read_text(encoding="utf-8"))
    task = next(t for play in plays for t in play["tasks"] if "mlplatform.gpunode.fleet_report" in t)
    args = dict(task["mlplatform.gpunode.fleet_report"])
    args.update(input=str(workdir), hosts=fleet.names, sources=plays[1]["vars"]["gpunode_report_contract_sources"],
                kueue=fleet.kueue, run={"id": "run-bench", "time": "2026-12-01 00:00:00 UTC"})
    result = run_action("fleet_report", args, fleet, ansible_play_hosts_all=fleet.names)
    if result.get("failed"):
        raise RuntimeError(result.get("msg"))
    return (workdir / "report.html").stat().st_size


def timed(func, *args) -> tuple[float, object]:
    gc.collect()
    start = time.perf_counter()
    result = func(*args)
    return time.perf_counter() - start, result


def run(n: int) -> dict:
    hws = discovered()
    fleet = Fleet(n, hws)
    floor_s, _ = timed(lambda: json.dumps(fleet.facts))
    out = {"hosts": n, "floor_s": floor_s}
    out["co_s"], objects = timed(cluster_objects_role, fleet)
    out["flavors"] = len(objects["resource_flavors"])
    fleet.kueue = [*objects["resource_flavors"], *objects["cluster_queues"], *objects["local_queues"]]
    out["schedule_s"], schedule = timed(schedule_role, fleet)
    out["tests"], out["max_fan_in"] = len(schedule["tests"]), schedule["max_fan_in"]
    out["ports"], out["waves"] = schedule["port_range"], schedule["waves"]
    out["contract_s"], compared = timed(contract_action, fleet)
    out["drift_rows"] = len(compared["drift"])
    read = report_facts(fleet, schedule)
    # the report reads more than the facts above (the judged tests, the result files, the Kueue objects): its
    # own floor too
    out["report_floor_s"], _ = timed(lambda: json.dumps({"hosts": read, "kueue": fleet.kueue}))
    with tempfile.TemporaryDirectory() as tmp:
        os.sync()  # the disk writes of the steps before (and of the last fleet's directory) are not this step's
        out["report_s"], out["report_bytes"] = timed(report_action, fleet, Path(tmp))
        out["report_rerun_s"], _ = timed(report_action, fleet, Path(tmp))
    return out


def commit() -> str:
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + (" (with uncommitted changes)" if dirty else "")


STEPS = (("cluster_objects build (role expressions over hostvars)", "co_s"),
         ("bandwidth schedule (validation_schedule action over hostvars, registered)", "schedule_s"),
         ("fleet_contract (action gathering + compare + table)", "contract_s"),
         ("report, first run (fleet_report action from the facts: record, build, render, write)", "report_s"),
         ("report, re-run (the same; every file compared, none written)", "report_rerun_s"))
# The floor each step is judged against: the report's is serializing what it reads.
FLOOR_OF = {"report_s": "report_floor_s", "report_rerun_s": "report_floor_s"}


def section(results: list[dict]) -> str:
    small, large = results[0], results[-1]
    lines = [
        BEGIN,
        "## Fleet scale: cluster objects, bandwidth schedule, contract, report (`bench/bench_fleet.py`)",
        "",
        f"Measured in one run at commit {commit()} on one machine ({platform.machine()}, Python "
        f"{platform.python_version()}, shared with other jobs, under `nice`): synthetic fleets of "
        + " and ".join(f"{r['hosts']:,}" for r in results)
        + " hosts (half DGX H100, half HGX H100 discovery results of the simulator's profiles, 8 rails each, "
        "4 fabrics; every 97th host has adaptive routing off on rail 2). Each host's facts are set in a real "
        "Ansible VariableManager as set_fact sets them; each step runs as the role runs it (its task "
        "expressions templated over hostvars, or its action over hostvars with its arguments from the task). "
        "Floor: serializing the same facts to JSON once, in the same run; the report reads more (the judged "
        "tests, the text of every host's result files, the Kueue objects), and is judged against serializing "
        "what it reads.",
        "",
        "| step | " + " | ".join(f"{r['hosts']:,} hosts: time | ÷ floor" for r in results)
        + (f" | {large['hosts']:,} ÷ {small['hosts']:,} |" if len(results) > 1 else " |"),
        "|---|" + "---|---|" * len(results) + ("---|" if len(results) > 1 else ""),
        "| JSON floor | " + " | ".join(f"{r['floor_s']:.2f} s | 1.00×" for r in results)
        + (f" | {large['floor_s'] / small['floor_s']:.2f} |" if len(results) > 1 else " |"),
    ]
    for label, key in STEPS:
        lines.append(f"| {label} | " + " | ".join(f"{r[key]:.2f} s | {r[key] / r['floor_s']:.2f}×" for r in results)
                     + (f" | {large[key] / small[key]:.2f} |" if len(results) > 1 else " |"))
    lines.append("| JSON floor of the report's own input (facts + judged tests + result files + Kueue objects) | "
                 + " | ".join(f"{r['report_floor_s']:.2f} s | {r['report_floor_s'] / r['floor_s']:.2f}×"
                              for r in results)
                 + (f" | {large['report_floor_s'] / small['report_floor_s']:.2f} |" if len(results) > 1 else " |"))
    for label, key in STEPS:
        if key in FLOOR_OF:
            lines.append(f"| {label.split(' (')[0]} ÷ its own input's floor | "
                         + " | ".join(f"| {r[key] / r[FLOOR_OF[key]]:.2f}×" for r in results)
                         + (" | |" if len(results) > 1 else " |"))
    verdicts = []
    for label, key in STEPS:
        worst = max(r[key] / r[FLOOR_OF.get(key, "floor_s")] for r in results)
        growth = large[key] / small[key] if len(results) > 1 else None
        floor = "its own input's floor" if key in FLOOR_OF else "its floor"
        verdicts.append(f"{label.split(' (')[0]}: worst {worst:.2f}× {floor} "
                        f"({'meets' if worst <= 2 else 'misses'} ≤ 2×)"
                        + (f", {large['hosts']:,} ÷ {small['hosts']:,} = {growth:.2f} "
                           f"({'meets' if growth <= 5 else 'misses'} ≤ 5)" if growth is not None else ""))
    lines += ["", "Against the acceptance: " + "; ".join(verdicts) + "."]
    lines += [
        "",
        "Outputs at " + "; ".join(
            f"{r['hosts']:,} hosts: {r['flavors']} ResourceFlavors, {r['tests']:,} ib_write_bw tests in "
            f"{r['waves']} waves of 50, at most {r['max_fan_in']} peer per host rail, ports "
            f"{r['ports'][0]}-{r['ports'][1]}, {r['drift_rows']} drift rows, report.html "
            f"{r['report_bytes'] / 1e6:.1f} MB" for r in results) + ".",
        END,
    ]
    return "\n".join(lines)


def update(path: Path, text: str) -> None:
    old = path.read_text(encoding="utf-8") if path.is_file() else "# Benchmarks\n"
    pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.S)
    new = pattern.sub(lambda _m: text, old) if pattern.search(old) else old.rstrip("\n") + "\n\n" + text
    path.write_text(new.rstrip("\n") + "\n", encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", default="1024,4096", help="comma-separated fleet sizes")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    results = []
    for n in (int(x) for x in args.hosts.split(",")):
        results.append(run(n))
        print(json.dumps(results[-1]), file=sys.stderr)
    text = section(results)
    print(text)
    if args.output:
        update(args.output, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
