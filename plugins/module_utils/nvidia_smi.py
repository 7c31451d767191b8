# Copyright: (c) 2025, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Parse ``nvidia-smi`` output: the default table, ``-q`` and ``topo -m`` (pure functions, stdlib only).

Formats (public outputs listed in docs/hardware-facts.md, "Sources"):

- ``nvidia-smi``: ``nvidia-smi-h100-8gpu-gpud.txt`` (driver 550.90.07): a box-drawn table, one
  block of three ``|``-separated lines per GPU (the third, ``MIG M.``, may be absent on old drivers).
- ``nvidia-smi -q``: ``nvidia-smi-q-h100-header-gpu0-gpud.txt`` (driver 535.161.08): ``Key : value``
  lines nested by 4-space indentation, one ``GPU <bus id>`` section per GPU.
- ``nvidia-smi topo -m``: ``nvidia-smi-topo-m-h100-8xcx7-2xcx6dx-mooncake-2039.txt``: a matrix of
  ``X``/``PIX``/``PXB``/``PHB``/``NODE``/``SYS``/``NV#`` cells, then ``Legend:`` and ``NIC Legend:``
  (``NIC0: mlx5_0``). Columns are separated by spaces or by tabs depending on the driver, so cells
  are split on any whitespace; the multi-word trailing headers (``CPU Affinity``...) on runs of
  two or more blanks or tabs.

Bus ids are reported both as printed (``00000000:19:00.0``) and as a sysfs PCI address
(``0000:19:00.0``, lower case) so they join with ``pci_sysfs`` records.
"""

from __future__ import annotations

import re

from ansible_collections.mlplatform.gpunode.plugins.module_utils.parsing import ParseError, text_lines

TOOL = "nvidia-smi"

_BUS_ID_RE = re.compile(r"^(?:(?P<domain>[0-9a-fA-F]{4,8}):)?(?P<bus>[0-9a-fA-F]{2}):"
                        r"(?P<dev>[0-9a-fA-F]{2})\.(?P<fn>[0-7])$")
_VERSIONS_RE = re.compile(r"NVIDIA-SMI\s+(?P<smi>\S+)\s+Driver Version:\s+(?P<driver>\S+)\s+"
                          r"CUDA Version:\s+(?P<cuda>\S+)")
_GPU_LINE1_RE = re.compile(r"^(?P<index>\d+)\s+(?P<name>.+?)\s+(?P<persistence>On|Off)$")
_GPU_LINE2_RE = re.compile(
    r"^(?P<fan>\S+)\s+(?P<temp>\S+)\s+(?P<perf>\S+)\s+(?P<usage>\S+)\s*/\s*(?P<cap>\S+)$")
_MEMORY_RE = re.compile(r"^(?P<used>\d+)MiB\s*/\s*(?P<total>\d+)MiB$")
_BUS_CELL_RE = re.compile(r"^(?P<bus>\S+)\s+(?P<disp>On|Off)$")
_UTIL_RE = re.compile(r"^(?P<util>\S+)\s+(?P<compute>\S+)$")
_QUERY_LINE_RE = re.compile(r"^(?P<indent> *)(?P<key>[^:]*?\S)\s*(?::\s?(?P<value>.*))?$")
_GPU_SECTION_RE = re.compile(r"^GPU (?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])$")
_TOPO_DEVICE_RE = re.compile(r"^(?:GPU\d+|NIC\d+|mlx5_\w+|NVSwitch\d+)$")
_TOPO_CELL_RE = re.compile(r"^(?:X|PIX|PXB|PHB|NODE|SYS|SOC|PXN|NV\d+)$")
_NIC_LEGEND_RE = re.compile(r"^(?P<nic>NIC\d+):\s*(?P<dev>\S+)$")
_LEGEND_RE = re.compile(r"^(?P<term>X|[A-Z]+#?)\s+=\s+(?P<text>.+)$")


def pci_address(bus_id):
    """``"00000000:19:00.0"`` -> ``"0000:19:00.0"``; ``"19:00.0"`` -> ``"0000:19:00.0"``."""
    match = _BUS_ID_RE.match(bus_id.strip()) if isinstance(bus_id, str) else None
    if not match:
        raise ParseError(TOOL, f"a PCI bus id like 00000000:19:00.0, got {bus_id!r}")
    domain = (match.group("domain") or "0000")[-4:]
    return f"{domain}:{match.group('bus')}:{match.group('dev')}.{match.group('fn')}".lower()


def _number(text, unit):
    """``"700W"`` with unit ``W`` -> 700; ``"27C"`` -> 27; ``"N/A"`` -> None; ``"72.5W"`` -> 72.5."""
    if text in ("N/A", "[N/A]", "ERR!", "[Unknown Error]"):
        return None
    if not text.endswith(unit):
        raise ParseError(TOOL, f"a value in {unit} such as 700{unit}, got {text!r}")
    value = float(text[: -len(unit)])
    return int(value) if value.is_integer() else value


def _cells(line):
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def parse_table(text):
    """Parse the plain ``nvidia-smi`` table.

    Returns ``{"smi_version", "driver_version", "cuda_version", "gpus": [...], "processes": [...]}``;
    a GPU is ``{"index", "name", "persistence_mode" ("On"/"Off"), "bus_id", "pci_address",
    "display_active", "ecc", "fan", "temperature_c", "perf", "power_draw_w", "power_cap_w",
    "memory_used_mib", "memory_total_mib", "gpu_util", "compute_mode", "mig_mode"}``. Processes
    are the raw rows under ``Processes:`` (empty for "No running processes found").
    """
    lines = text_lines(text, TOOL)
    versions = None
    for line in lines:
        versions = _VERSIONS_RE.search(line)
        if versions:
            break
    if not versions:
        raise ParseError(TOOL, "a '| NVIDIA-SMI <v>  Driver Version: <v>  CUDA Version: <v> |' line")
    start = next((i for i, line in enumerate(lines) if line.startswith("|=") and "+" in line), None)
    if start is None:
        raise ParseError(TOOL, "the '|====+====+====|' rule that opens the GPU table")
    gpus = []
    block = []
    index = start + 1
    while index < len(lines):
        line = lines[index]
        if line.startswith("+") or not line.strip():
            if block:
                gpus.append(_table_gpu(block))
                block = []
            if not line.strip():
                break
        elif line.startswith("|"):
            block.append((index + 1, line))
        else:
            raise ParseError(TOOL, "a '|'-framed GPU row or a '+---+' separator", line, index + 1)
        index += 1
    if block:
        gpus.append(_table_gpu(block))
    if not gpus:
        raise ParseError(TOOL, "at least one GPU block in the table (driver loaded but no GPU rows)")
    processes = []
    in_processes = False
    for line in lines[index:]:
        stripped = line.strip("|+ ")
        if stripped.startswith("Processes:"):
            in_processes = True
            continue
        if not in_processes or not stripped or set(stripped) <= {"=", "-"}:
            continue
        if stripped.startswith(("GPU ", "ID ")) or "No running processes found" in stripped:
            continue
        processes.append(stripped)
    return {"smi_version": versions.group("smi"), "driver_version": versions.group("driver"),
            "cuda_version": versions.group("cuda"), "gpus": gpus, "processes": processes}


def _table_gpu(block):
    lineno, first = block[0]
    cells = _cells(first)
    if len(block) < 2 or len(cells) != 3:
        raise ParseError(TOOL, "a GPU block of at least two '| a | b | c |' lines", first, lineno)
    head = _GPU_LINE1_RE.match(cells[0])
    bus = _BUS_CELL_RE.match(cells[1])
    if not head or not bus:
        raise ParseError(TOOL, "'<index> <name> On|Off | <bus id> On|Off | <ecc>'", first, lineno)
    lineno2, second = block[1]
    cells2 = _cells(second)
    usage = _GPU_LINE2_RE.match(cells2[0]) if len(cells2) == 3 else None
    memory = _MEMORY_RE.match(cells2[1]) if usage else None
    util = _UTIL_RE.match(cells2[2]) if memory else None
    if not util:
        raise ParseError(TOOL, "'<fan> <temp> <perf> <W> / <W> | <MiB> / <MiB> | <util> <compute mode>'",
                         second, lineno2)
    mig = _cells(block[2][1])[2] if len(block) > 2 and len(_cells(block[2][1])) == 3 else None
    return {
        "index": int(head.group("index")),
        "name": head.group("name"),
        "persistence_mode": head.group("persistence"),
        "bus_id": bus.group("bus"),
        "pci_address": pci_address(bus.group("bus")),
        "display_active": bus.group("disp"),
        "ecc": cells[2],
        "fan": usage.group("fan"),
        "temperature_c": _number(usage.group("temp"), "C"),
        "perf": usage.group("perf"),
        "power_draw_w": _number(usage.group("usage"), "W"),
        "power_cap_w": _number(usage.group("cap"), "W"),
        "memory_used_mib": int(memory.group("used")),
        "memory_total_mib": int(memory.group("total")),
        "gpu_util": util.group("util"),
        "compute_mode": util.group("compute"),
        "mig_mode": mig or None,
    }


def parse_query_tree(text):
    """``nvidia-smi -q`` -> ``(header, [(bus_id, fields)])`` where header and fields map a path
    (``"PCI/Bus Id"``, ``"Fabric/State"``) to its text. A key that has both a value and nested
    keys (``HW Slowdown : Active``) keeps the value and is also a path prefix."""
    lines = text_lines(text, TOOL)
    if not any(line.strip() == "==============NVSMI LOG==============" for line in lines):
        raise ParseError(TOOL, "the '==============NVSMI LOG==============' banner of nvidia-smi -q")
    header = {}
    gpus = []
    target = header
    stack = []  # (indent, key)
    for lineno, line in enumerate(lines, 1):
        if not line.strip() or line.strip().startswith("===="):
            continue
        section = _GPU_SECTION_RE.match(line)
        if section:
            target = {}
            gpus.append((section.group("bus"), target))
            stack = []
            continue
        match = _QUERY_LINE_RE.match(line)
        if not match or "\t" in line:
            raise ParseError(TOOL, "'Key : value' or a section name, indented by spaces", line, lineno)
        indent = len(match.group("indent"))
        if gpus and indent == 0:
            raise ParseError(TOOL, "an indented key inside a 'GPU <bus id>' section", line, lineno)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = "/".join([key for _indent, key in stack] + [match.group("key")])
        if match.group("value") is not None:
            target[path] = match.group("value").strip()
        stack.append((indent, match.group("key")))
    return header, gpus


def parse_query(text):
    """Parse ``nvidia-smi -q``.

    Returns ``{"driver_version", "cuda_version", "attached_gpus", "gpus": [...]}``; a GPU is
    ``{"bus_id", "pci_address", "product_name", "serial", "uuid", "persistence_mode", "module_id",
    "memory_total_mib", "power_limit_w", "fabric_state", "fabric_status", "fields"}``. Fabric keys
    are None when the section is absent (no NVSwitch, or a driver that predates it); ``fields``
    holds every path of the section (see ``parse_query_tree``).
    """
    header, sections = parse_query_tree(text)
    if "Driver Version" not in header:
        raise ParseError(TOOL, "'Driver Version : <version>' in the nvidia-smi -q header")
    gpus = []
    for bus_id, fields in sections:
        if "Product Name" not in fields:
            raise ParseError(TOOL, f"'Product Name' in the section of GPU {bus_id}")
        memory = fields.get("FB Memory Usage/Total")
        power = fields.get("GPU Power Readings/Current Power Limit") or fields.get("Power Readings/Power Limit")
        gpus.append({
            "bus_id": bus_id,
            "pci_address": pci_address(bus_id),
            "product_name": fields["Product Name"],
            "serial": fields.get("Serial Number"),
            "uuid": fields.get("GPU UUID"),
            "persistence_mode": fields.get("Persistence Mode"),
            "module_id": _int_or_none(fields.get("Module ID")),
            "memory_total_mib": _int_or_none((memory or "").replace(" MiB", "")),
            "power_limit_w": _float_or_none((power or "").replace(" W", "")),
            "fabric_state": fields.get("Fabric/State"),
            "fabric_status": fields.get("Fabric/Status"),
            "fields": fields,
        })
    attached = _int_or_none(header.get("Attached GPUs"))
    return {"driver_version": header["Driver Version"], "cuda_version": header.get("CUDA Version"),
            "attached_gpus": attached, "gpus": gpus}


def _int_or_none(text):
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def _float_or_none(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def parse_topo(text):
    """Parse ``nvidia-smi topo -m``.

    Returns ``{"devices": ["GPU0", ..., "NIC11"], "matrix": {row: {column: cell}},
    "affinity": {row: {"CPU Affinity": "4,6,8,10,12", "NUMA Affinity": "0", "GPU NUMA ID": "N/A"}},
    "nic_legend": {"NIC0": "mlx5_0", ...}, "legend": {"PIX": "Connection traversing ...", ...}}``.
    Every device in the header must have a row with one known cell per column.
    """
    lines = text_lines(text, TOOL)
    header_at = None
    devices = []
    trailing = []
    for i, line in enumerate(lines):
        tokens = line.split()
        count = 0
        while count < len(tokens) and _TOPO_DEVICE_RE.match(tokens[count]):
            count += 1
        # A row is "<device> <cell> ...": the header is the line of device names not followed by a cell.
        if count and (count == len(tokens) or not _TOPO_CELL_RE.match(tokens[count])):
            header_at = i
            devices = tokens[:count]
            rest = line.strip()
            for name in devices:
                rest = rest[len(name):].lstrip()
            trailing = [part.strip() for part in re.split(r"\t|\s{2,}", rest) if part.strip()]
            break
    if header_at is None:
        raise ParseError(TOOL, "a topo -m header line of GPU<n>/NIC<n> column names")
    if len(set(devices)) != len(devices):
        raise ParseError(TOOL, "distinct column names in the topo -m header", lines[header_at], header_at + 1)
    matrix = {}
    affinity = {}
    index = header_at + 1
    while index < len(lines):
        line = lines[index]
        if re.match(r"^(?:NIC )?Legend:", line.strip()):
            break
        index += 1
        tokens = line.split()
        if not tokens:
            continue
        if tokens[0] not in devices:
            raise ParseError(TOOL, "a matrix row starting with a device named in the header", line, index)
        cells = tokens[1:1 + len(devices)]
        extra = tokens[1 + len(devices):]
        if len(cells) != len(devices) or not all(_TOPO_CELL_RE.match(cell) for cell in cells) \
                or len(extra) > len(trailing):
            raise ParseError(TOOL, f"{len(devices)} cells (X, PIX, PXB, PHB, NODE, SYS or NV#) and at most "
                             f"{len(trailing)} affinity values", line, index)
        if tokens[0] in matrix:
            raise ParseError(TOOL, f"one row per device, {tokens[0]} repeats", line, index)
        matrix[tokens[0]] = {devices[j]: cells[j] for j in range(len(devices))}
        if extra:
            affinity[tokens[0]] = {trailing[j]: extra[j] for j in range(len(extra))}
    missing = [name for name in devices if name not in matrix]
    if missing:
        raise ParseError(TOOL, f"a matrix row for every header device, missing {', '.join(missing)}")
    legend = {}
    nic_legend = {}
    for line in lines[index:]:
        stripped = line.strip()
        nic = _NIC_LEGEND_RE.match(stripped)
        if nic:
            nic_legend[nic.group("nic")] = nic.group("dev")
            continue
        term = _LEGEND_RE.match(stripped)
        if term:
            legend[term.group("term")] = term.group("text")
    nics = [name for name in devices if name.startswith("NIC")]
    unnamed = [name for name in nics if name not in nic_legend]
    if unnamed:
        raise ParseError(TOOL, f"a 'NIC Legend:' entry for every NIC column, missing {', '.join(unnamed)}")
    return {"devices": devices, "matrix": matrix, "affinity": affinity, "nic_legend": nic_legend,
            "legend": legend}


def gpu_nic_distance(topo, gpu, rdma_device):
    """Distance term between ``"GPU0"`` and an RDMA device name (``"mlx5_1"``) via the NIC legend.

    Raises ParseError when either is not in the parsed matrix.
    """
    columns = {dev: nic for nic, dev in topo["nic_legend"].items()}
    column = columns.get(rdma_device, rdma_device)
    try:
        return topo["matrix"][gpu][column]
    except KeyError:
        raise ParseError(TOOL, f"{gpu} and {rdma_device} in the topo -m matrix") from None


def driver_summary(query):
    """Condense a ``parse_query`` result to the driver-side facts ``gpu_info`` returns.

    Returns ``{"driver_version", "persistence_mode", "fabric_state", "gpus": {pci_address:
    {"product_name", "memory_total_mib", "persistence_mode", "fabric_state"}}}``.
    ``persistence_mode`` is True when every GPU reports ``Enabled``, False when any reports
    ``Disabled``, None without GPUs. ``fabric_state`` is the common ``Fabric/State`` of the GPUs
    (``Completed`` once fabric manager has trained the NVSwitch fabric), the states joined by
    ``", "`` when they differ, None when no GPU has a Fabric section (no NVSwitch or an older driver).
    """
    gpus = {}
    for gpu in query["gpus"]:
        mode = gpu.get("persistence_mode")
        gpus[gpu["pci_address"]] = {
            "product_name": gpu["product_name"],
            "memory_total_mib": gpu.get("memory_total_mib"),
            "persistence_mode": None if mode is None else mode == "Enabled",
            "fabric_state": gpu.get("fabric_state"),
        }
    modes = [g["persistence_mode"] for g in gpus.values()]
    states = sorted({g["fabric_state"] for g in gpus.values() if g["fabric_state"] is not None})
    return {
        "driver_version": query["driver_version"],
        "persistence_mode": (all(modes) if None not in modes else None) if modes else None,
        "fabric_state": ", ".join(states) if states else None,
        "gpus": gpus,
    }
