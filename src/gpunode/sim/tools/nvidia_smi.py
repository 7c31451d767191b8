"""Simulated ``nvidia-smi``: the table, ``-q``, ``-L``, ``--query-gpu``, ``topo -m`` and ``-pm``.

Formats: real-outputs/nvidia-smi-h100-8gpu-gpud.txt (table), nvidia-smi-q-h100-header-gpu0-gpud.txt
(``-q``, with ``Fabric`` State/Status), nvidia-smi-topo-m-h100-8xcx7-2xcx6dx-mooncake-2039.txt
(``topo -m``). GPU identity comes from the profile (catalogue name, memory, power cap); driver
state from the host state (``HostState.gpu_driver()``: the loaded ``nvidia`` module's version;
``HostState.nvidia_userspace()``: the version file the utils package installs; persistence and
fabric state in run/). Failure texts and exit codes are the real ones: 9 when the driver is not
loaded, 18 on a driver/library version mismatch.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time

from . import topo
from .state import HostState

NO_DRIVER = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that "
             "the latest NVIDIA driver is installed and running.\n\n")
MISMATCH = "Failed to initialize NVML: Driver/library version mismatch\n"
# CUDA version nvidia-smi reports per driver branch (public release notes; 550 -> 12.4 and
# 535 -> 12.2 as in the real samples).
CUDA_BY_BRANCH = {"525": "12.0", "530": "12.1", "535": "12.2", "545": "12.3", "550": "12.4", "555": "12.5",
                  "560": "12.6", "565": "12.7", "570": "12.8", "575": "12.9", "580": "13.0"}
# Module IDs of an 8-GPU HGX baseboard in bus order (real-outputs/nvidia-smi-q-h100-header-gpu0-gpud.txt note).
MODULE_IDS_8 = (2, 4, 1, 3, 7, 5, 6, 8)
LEGEND = """Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks"""


class Gpu:
    def __init__(self, state: HostState, rec: dict, index: int, count: int, persistence: bool) -> None:
        self.rec = rec
        self.index = index
        self.name = rec["name"]
        self.memory = rec["memory_mib"]
        self.power_cap = rec["power_limit_w"]
        self.persistence = persistence
        domain, bus, devfn = rec["address"].split(":")
        self.bus_id = f"0000{domain}:{bus}:{devfn}".upper()
        # Distinct per host (hostname inside a simulated host, state dir on the controller) and stable.
        seed = hashlib.sha256(f"{os.uname().nodename}/{os.path.normpath(state.root_dir)}/{rec['address']}"
                          .encode()).hexdigest()
        self.serial = "165" + str(int(seed[:12], 16))[:10].rjust(10, "0")
        self.uuid = f"GPU-{seed[:8]}-{seed[8:12]}-{seed[12:16]}-{seed[16:20]}-{seed[20:32]}"
        self.module_id = MODULE_IDS_8[index] if count == 8 else index + 1
        self.vbios = state.hw().get("gpus", {}).get(rec["address"], {}).get("vbios", "96.00.74.00.0D")
        self.device_id = f"0x{rec['device_id'][2:].upper()}{rec['vendor_id'][2:].upper()}"
        self.subsys_id = f"0x{rec['subsystem_device_id'][2:].upper()}{rec['subsystem_vendor_id'][2:].upper()}"


def _gpus(state: HostState) -> list[Gpu]:
    pers = state.persistence()
    recs = state.gpus()
    return [Gpu(state, r, i, len(recs), pers[r["address"]]) for i, r in enumerate(recs)]


def _cuda(driver: str) -> str:
    return CUDA_BY_BRANCH.get(driver.split(".")[0], "12.4")


def table(state: HostState, driver: str) -> str:
    rule = "+-----------------------------------------+------------------------+----------------------+"
    lines = [time.strftime("%a %b %d %H:%M:%S %Y"),
             "+-----------------------------------------------------------------------------------------+",
             f"| NVIDIA-SMI {driver:<23}Driver Version: {driver:<15}CUDA Version: {_cuda(driver):<9}|",
             "|-----------------------------------------+------------------------+----------------------+",
             "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
             "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
             "|                                         |                        |               MIG M. |",
             "|=========================================+========================+======================|"]
    for gpu in _gpus(state):
        pm = "On" if gpu.persistence else "Off"
        temp = 24 + gpu.index % 4
        power = 70 + gpu.index % 5
        lines += [
            f"|{gpu.index:>4}  {gpu.name:<29}{pm:>4}  |{gpu.bus_id:>19} {'Off':>3} |{'0':>21} |",
            f"| {'N/A':<3}  {temp:>3}C    {'P0':<2}{power:>15}W / {gpu.power_cap:>4}W |"
            f"{1:>8}MiB / {gpu.memory:>6}MiB |{0:>7}%{'Default':>13} |",
            f"|{'':41}|{'':24}|{'Disabled':>21} |",
            rule]
    lines += ["",
              "+-----------------------------------------------------------------------------------------+",
              "| Processes:                                                                              |",
              "|  GPU   GI   CI        PID   Type   Process name                              GPU Memory |",
              "|        ID   ID                                                               Usage      |",
              "|=========================================================================================|",
              "|  No running processes found                                                             |",
              "+-----------------------------------------------------------------------------------------+"]
    return "\n".join(lines) + "\n"


def _q_lines(items: list[tuple[int, str, object]]) -> list[str]:
    out = []
    for depth, key, value in items:
        text = " " * (4 * depth) + key
        out.append(text if value is None else f"{text:<42}: {value}")
    return out


def _memory_health(state: HostState, address: str) -> list[tuple[int, str, object]]:
    """``ECC Errors``, ``Retired Pages`` and ``Remapped Rows`` of one GPU as an H100 on driver 535
    prints them (real-outputs-day-two/nvidia-smi-q-full-h100-hgx-gpud-535.161.08.txt): retired
    pages are N/A (Hopper remaps rows). Faults: an ``xid`` 48 (double bit error) counts one volatile
    and aggregate DRAM uncorrectable error; ``retired_page_pending`` is an uncorrectable error whose
    row remap waits for a GPU reset (Uncorrectable Error 1, Pending Yes)."""
    faults = state.faults() or {}
    dbe = 1 if 48 in (faults.get("xid") or {}).get(address, []) else 0
    pending = address in (faults.get("retired_page_pending") or [])
    ecc = [(3, "SRAM Correctable", 0), (3, "SRAM Uncorrectable Parity", 0), (3, "SRAM Uncorrectable SEC-DED", 0),
           (3, "DRAM Correctable", 0), (3, "DRAM Uncorrectable", dbe)]
    return [
        (1, "ECC Errors", None), (2, "Volatile", None), *ecc, (2, "Aggregate", None), *ecc,
        (3, "SRAM Threshold Exceeded", "No"),
        (2, "Aggregate Uncorrectable SRAM Sources", None), (3, "SRAM L2", 0), (3, "SRAM SM", 0),
        (3, "SRAM Microcontroller", 0), (3, "SRAM PCIE", 0), (3, "SRAM Other", 0),
        (1, "Retired Pages", None), (2, "Single Bit ECC", "N/A"), (2, "Double Bit ECC", "N/A"),
        (2, "Pending Page Blacklist", "N/A"),
        (1, "Remapped Rows", None), (2, "Correctable Error", 0), (2, "Uncorrectable Error", int(pending)),
        (2, "Pending", "Yes" if pending else "No"), (2, "Remapping Failure Occurred", "No"),
        (2, "Bank Remap Availability Histogram", None), (3, "Max", f"{2560 - int(pending)} bank(s)"),
        (3, "High", f"{int(pending)} bank(s)"), (3, "Partial", "0 bank(s)"), (3, "Low", "0 bank(s)"),
        (3, "None", "0 bank(s)"),
    ]


def query(state: HostState, driver: str) -> str:
    gpus = _gpus(state)
    fabric_state, fabric_status = state.fabric_state()
    lines = ["", "==============NVSMI LOG==============", ""]
    lines += _q_lines([(0, "Timestamp", time.strftime("%a %b %d %H:%M:%S %Y")), (0, "Driver Version", driver),
                       (0, "CUDA Version", _cuda(driver))])
    lines += ["", f"{'Attached GPUs':<42}: {len(gpus)}"]
    for gpu in gpus:
        rec = gpu.rec
        bus, dev = rec["address"].split(":")[1], rec["address"].split(":")[2].split(".")[0]
        gen = {"32.0": 5, "16.0": 4, "8.0": 3}.get(rec["pcie_link_speed"].split()[0], 5)
        lines.append(f"GPU {gpu.bus_id}")
        lines += _q_lines([
            (1, "Product Name", gpu.name), (1, "Product Brand", "NVIDIA"), (1, "Product Architecture", "Hopper"),
            (1, "Display Mode", "Enabled"), (1, "Display Active", "Disabled"),
            (1, "Persistence Mode", "Enabled" if gpu.persistence else "Disabled"),
            (1, "Addressing Mode", "None"),
            (1, "MIG Mode", None), (2, "Current", "Disabled"), (2, "Pending", "Disabled"),
            (1, "Accounting Mode", "Disabled"), (1, "Accounting Mode Buffer Size", "4000"),
            (1, "Driver Model", None), (2, "Current", "N/A"), (2, "Pending", "N/A"),
            (1, "Serial Number", gpu.serial), (1, "GPU UUID", gpu.uuid), (1, "Minor Number", gpu.index),
            (1, "VBIOS Version", gpu.vbios), (1, "MultiGPU Board", "No"), (1, "Board ID", f"0x{bus}00"),
            (1, "Board Part Number", "692-2G520-0200-000"), (1, "GPU Part Number", "2330-885-A1"),
            (1, "FRU Part Number", "N/A"), (1, "Module ID", gpu.module_id),
            (1, "GPU Operation Mode", None), (2, "Current", "N/A"), (2, "Pending", "N/A"),
            (1, "GSP Firmware Version", driver),
            (1, "GPU Reset Status", None), (2, "Reset Required", "No"), (2, "Drain and Reset Recommended", "No"),
            (1, "PCI", None), (2, "Bus", f"0x{bus.upper()}"), (2, "Device", f"0x{dev.upper()}"),
            (2, "Domain", f"0x{rec['address'][:4].upper()}"), (2, "Device Id", gpu.device_id),
            (2, "Bus Id", gpu.bus_id), (2, "Sub System Id", gpu.subsys_id),
            (2, "GPU Link Info", None), (3, "PCIe Generation", None), (4, "Max", gen), (4, "Current", gen),
            (4, "Device Current", gen), (4, "Device Max", gen), (4, "Host Max", gen),
            (3, "Link Width", None), (4, "Max", f"{rec['pcie_link_width']}x"),
            (4, "Current", f"{rec['pcie_link_width']}x"),
            (1, "Fan Speed", "N/A"), (1, "Performance State", "P0"),
            (1, "FB Memory Usage", None), (2, "Total", f"{gpu.memory} MiB"), (2, "Reserved", "551 MiB"),
            (2, "Used", "0 MiB"), (2, "Free", f"{gpu.memory - 551} MiB"),
            (1, "Compute Mode", "Default"),
            (1, "ECC Mode", None), (2, "Current", "Enabled"), (2, "Pending", "Enabled"),
            *_memory_health(state, rec["address"]),
            (1, "Temperature", None), (2, "GPU Current Temp", f"{27 + gpu.index % 4} C"),
            (1, "GPU Power Readings", None), (2, "Power Draw", f"{70 + gpu.index % 5}.00 W"),
            (2, "Current Power Limit", f"{gpu.power_cap}.00 W"),
            (2, "Requested Power Limit", f"{gpu.power_cap}.00 W"),
            (2, "Default Power Limit", f"{gpu.power_cap}.00 W"), (2, "Min Power Limit", "200.00 W"),
            (2, "Max Power Limit", f"{gpu.power_cap}.00 W"),
            (1, "Fabric", None), (2, "State", fabric_state), (2, "Status", fabric_status),
            (1, "Processes", "None"),
        ])
        lines.append("")
    return "\n".join(lines) + "\n"


QUERY_FIELDS = {
    # field: (unit header suffix, function(gpu, driver) -> (value, unit))
    "index": ("", lambda g, d: (str(g.index), "")),
    "name": ("", lambda g, d: (g.name, "")),
    "gpu_name": ("", lambda g, d: (g.name, "")),
    "pci.bus_id": ("", lambda g, d: (g.bus_id, "")),
    "gpu_bus_id": ("", lambda g, d: (g.bus_id, "")),
    "driver_version": ("", lambda g, d: (d, "")),
    "persistence_mode": ("", lambda g, d: ("Enabled" if g.persistence else "Disabled", "")),
    "memory.total": (" [MiB]", lambda g, d: (str(g.memory), " MiB")),
    "memory.used": (" [MiB]", lambda g, d: ("0", " MiB")),
    "memory.free": (" [MiB]", lambda g, d: (str(g.memory - 551), " MiB")),
    "power.limit": (" [W]", lambda g, d: (f"{g.power_cap}.00", " W")),
    "serial": ("", lambda g, d: (g.serial, "")),
    "uuid": ("", lambda g, d: (g.uuid, "")),
    "gpu_uuid": ("", lambda g, d: (g.uuid, "")),
    "vbios_version": ("", lambda g, d: (g.vbios, "")),
    "count": ("", lambda g, d: (str(g.count), "")),
    "temperature.gpu": ("", lambda g, d: (str(27 + g.index % 4), "")),
    "utilization.gpu": (" [%]", lambda g, d: ("0", " %")),
    "pcie.link.width.current": ("", lambda g, d: (str(g.rec["pcie_link_width"]), "")),
    "mig.mode.current": ("", lambda g, d: ("Disabled", "")),
    "compute_mode": ("", lambda g, d: ("Default", "")),
}


def query_gpu(state: HostState, driver: str, fields: list[str], fmt: list[str]) -> tuple[int, str]:
    for field in fields:
        if field not in QUERY_FIELDS:
            return 2, f'Field "{field}" is not a valid field to query.\n\n'
    if "csv" not in fmt:
        return 2, '"--format" option requires "csv".\n'
    gpus = _gpus(state)
    for gpu in gpus:
        gpu.count = len(gpus)
    out = []
    if "noheader" not in fmt:
        out.append(", ".join(f + QUERY_FIELDS[f][0] for f in fields))
    for gpu in gpus:
        cells = []
        for field in fields:
            value, unit = QUERY_FIELDS[field][1](gpu, driver)
            cells.append(value if "nounits" in fmt else value + unit)
        out.append(", ".join(cells))
    return 0, "\n".join(out) + "\n"


def topo_matrix(state: HostState) -> str:
    gpus = state.gpus()
    nics = []
    for rec in state.nics():
        if rec["rdma"] and os.path.exists(state.sys_path("class", "infiniband", rec["rdma"])):
            nics.append(rec)
    nics.sort(key=lambda r: (r["rdma"].rstrip("0123456789"), int("0" + "".join(c for c in r["rdma"] if c.isdigit()))))
    names = [f"GPU{i}" for i in range(len(gpus))] + [f"NIC{i}" for i in range(len(nics))]
    devs = list(gpus) + nics
    nvlink = bool(state.nvswitches())
    nodes = state.profile().get("numa_nodes", 1)
    lines = [" " * 8 + "".join(n.ljust(8) for n in names) + "CPU Affinity".ljust(17) + "NUMA Affinity".ljust(16)
             + "GPU NUMA ID"]
    for i, (name, a) in enumerate(zip(names, devs, strict=True)):
        cells = []
        for j, b in enumerate(devs):
            if i == j:
                cells.append(" X")
            elif nvlink and a["kind"] == "gpu" and b["kind"] == "gpu":
                cells.append("NV18")  # hardware-facts.md "DGX H100": all GPU pairs NV18
            else:
                cells.append(topo.distance(a, b))
        row = name.ljust(8) + "".join(c.ljust(8) for c in cells)
        if a["kind"] == "gpu":
            row += topo.cpu_list(a["numa_node"], nodes).ljust(17) + str(a["numa_node"]).ljust(16) + "N/A"
        lines.append(row.rstrip())
    lines += ["", LEGEND, "", "NIC Legend:", ""]
    lines += [f"  NIC{i}: {rec['rdma']}" for i, rec in enumerate(nics)]
    return "\n".join(lines) + "\n"


def run(argv: list[str], tool: str = "nvidia-smi") -> int:
    state = HostState()
    driver = state.gpu_driver()
    if driver is None:
        sys.stdout.write(NO_DRIVER)
        return 9
    userspace = state.nvidia_userspace()
    if userspace is not None and userspace != driver:
        sys.stdout.write(MISMATCH + f"NVML library version: {'.'.join(userspace.split('.')[:2])}\n")
        return 18
    if not argv:
        sys.stdout.write(table(state, driver))
        return 0
    if argv[0] == "topo" and argv[1:] in (["-m"], ["--matrix"]):
        sys.stdout.write(topo_matrix(state))
        return 0
    if argv in (["-q"], ["--query"]):
        sys.stdout.write(query(state, driver))
        return 0
    if argv in (["-L"], ["--list-gpus"]):
        for gpu in _gpus(state):
            sys.stdout.write(f"GPU {gpu.index}: {gpu.name} (UUID: {gpu.uuid})\n")
        return 0
    fields = fmt = None
    index = None
    pm = None
    i = 0
    while i < len(argv):
        arg = argv[i]
        key, sep, value = arg.partition("=")
        if not sep and i + 1 < len(argv) and arg in ("--query-gpu", "--format", "-pm", "--persistence-mode", "-i",
                                                      "--id"):
            value = argv[i + 1]
            i += 1
        if key == "--query-gpu":
            fields = [f.strip() for f in value.split(",") if f.strip()]
        elif key == "--format":
            fmt = [f.strip() for f in value.split(",")]
        elif key in ("-pm", "--persistence-mode"):
            pm = value
        elif key in ("-i", "--id"):
            index = value
        else:
            sys.stdout.write("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n")
            return 2
        i += 1
    gpus = _gpus(state)
    if index is not None:
        chosen = [g for g in gpus if str(g.index) == index or g.bus_id == index.upper() or g.uuid == index]
        if not chosen:
            sys.stdout.write("No devices were found\n")
            return 6
    else:
        chosen = gpus
    if pm is not None:
        if pm not in ("0", "1", "ENABLED", "DISABLED"):
            sys.stdout.write(f'Invalid value "{pm}" for persistence mode.\n')
            return 2
        enabled = pm in ("1", "ENABLED")
        state.set_persistence(enabled, [g.rec["address"] for g in chosen])
        for gpu in chosen:
            sys.stdout.write(f"{'Enabled' if enabled else 'Disabled'} persistence mode for GPU {gpu.bus_id}.\n")
        sys.stdout.write("All done.\n")
        return 0
    if fields is not None:
        code, text = query_gpu(state, driver, fields, fmt or [])
        sys.stdout.write(text)
        return code
    sys.stdout.write("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n")
    return 2
