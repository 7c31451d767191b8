"""Benchmarks of the pipeline at fleet scale and on the simulated fleet, as ratios measured in one run.

(c) ``fleet_contract`` comparison (module_utils/contract.compare) and Kueue flavor/queue generation
    (module_utils/k8s_objects.build) on N synthetic hosts' facts (default 4,096; half DGX H100, half
    HGX H100, the discovery result of the simulator's profiles, 8 rails each, four fabrics), with
    peak memory (tracemalloc), against the floor of serializing the same facts to JSON once (what
    any controller-side step that reads every host's facts pays).

Writes its own section of BENCHMARKS.md between the markers below, keeping every other section.
Usage: python bench/bench_fleet.py [--hosts N] [--output BENCHMARKS.md]
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import platform
import re
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "src"), str(REPO / ".cache" / "collections")]

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


def run(n: int) -> dict:
    hws = discovered()
    contract_hosts, k8s_hosts = synthetic_fleet(n, hws)
    floor_s, floor_peak, _ = measure(lambda: json.dumps({"c": contract_hosts, "k": k8s_hosts}))
    contract_s, contract_peak, compared = measure(contract.compare, contract_hosts)
    k8s_s, k8s_peak, objects = measure(k8s_objects.build, k8s_hosts, SETTINGS)
    entries = sum(len(h["entries"]) for h in contract_hosts.values())
    return {
        "hosts": n, "entries": entries, "drift_rows": len(compared["drift"]),
        "flavors": len(objects["resource_flavors"]), "cluster_queues": len(objects["cluster_queues"]),
        "floor_s": floor_s, "floor_peak": floor_peak,
        "contract_s": contract_s, "contract_peak": contract_peak, "k8s_s": k8s_s, "k8s_peak": k8s_peak,
    }


def section(r: dict) -> str:
    mib = 1024 * 1024
    return "\n".join([
        BEGIN,
        "## Fleet scale: contract and flavor generation (`bench/bench_fleet.py`)",
        "",
        f"Measured in one run on one machine ({platform.machine()}, Python {platform.python_version()}): "
        f"{r['hosts']:,} synthetic hosts (half DGX H100, half HGX H100 discovery results of the simulator's "
        f"profiles, 8 rails each, 4 fabrics), {r['entries']:,} contract entries; every 97th host has adaptive "
        f"routing off on rail 2, giving {r['drift_rows']} drift rows. Floor: serializing the same facts to JSON "
        "once. Time is an untraced call; peak memory is tracemalloc's peak during a second, traced call.",
        "",
        "| step | time | ÷ JSON floor | peak memory | output |",
        "|---|---|---|---|---|",
        f"| JSON floor | {r['floor_s']:.2f} s | 1.00× | {r['floor_peak'] / mib:.0f} MiB | |",
        f"| fleet_contract compare | {r['contract_s']:.2f} s | {r['contract_s'] / r['floor_s']:.2f}× | "
        f"{r['contract_peak'] / mib:.0f} MiB | {r['drift_rows']} drift rows |",
        f"| Kueue flavors + queues + labels (k8s_objects.build) | {r['k8s_s']:.2f} s | "
        f"{r['k8s_s'] / r['floor_s']:.2f}× "
        f"| {r['k8s_peak'] / mib:.0f} MiB | {r['flavors']} ResourceFlavors, {r['cluster_queues']} ClusterQueues |",
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
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    text = section(run(args.hosts))
    print(text)
    if args.output:
        update(args.output, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
