# Copyright: (c) 2025, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Parse RDMA/NIC tool output: ibdev2netdev, ibstat, mlnx_qos, cma_roce_tos, RoCE QoS sysfs reads,
sriov_numvfs write errors and lspci (pure functions, stdlib only).

Formats (public outputs listed in docs/hardware-facts.md, "Sources"):

- ``ibdev2netdev``: ``ibdev2netdev-dgx-h100-aben20807.txt`` (``mlx5_0 port 1 ==> ibp24s0 (Up)``).
- ``ibstat``: ``ibstat-h100-roce-8xcx7-cx6dx-gpud.txt`` (``CA '<dev>'`` blocks, tab indented).
- ``mlnx_qos -i <if>`` and ``cma_roce_tos``: ``roce-lossless-l3-setup-mlnx_qos-cma_roce_tos-netarbiter.txt``
  (older mlnx_qos layout; newer versions add lines such as ``Receive buffer size``, which are read
  when known and otherwise kept in ``unparsed``); the PFC ``buffer`` row from
  ``roce-qos-sysfs-ecn-cnp-spiderpool.txt``.
- RoCE QoS sysfs reads (``/sys/class/net/<if>/ecn/roce_{np,rp}/enable/<prio>``, ``.../cnp_dscp``,
  ``/sys/class/infiniband/<dev>/tc/1/traffic_class`` = ``Global tclass=160``):
  ``roce-qos-sysfs-ecn-cnp-spiderpool.txt``; ``<path>: <value>`` dumps as in
  ``sysfs-class-infiniband-h100-ib-bf3-gpud.txt``.
- ``sriov_numvfs`` write errors: ``sriov-numvfs-ebusy-k8s-rdma-sriov-dev-plugin-12.txt``
  (``-bash: echo: write error: Device or resource busy``).
- ``lspci`` heading lines and ``lspci -vvv`` blocks: ``lspci-h100-xe9680-nvidia-mellanox-gpud.txt``,
  ``lspci-vvv-cx7-sriov-cap-xe9680-gpud.txt``, and the ``lspci`` lines (with PCI domain) in
  ``mlxconfig-set-cx7-sigitp-aws.txt``.
"""

from __future__ import annotations

import errno
import os
import re

from ansible_collections.mlplatform.gpunode.plugins.module_utils.parsing import ParseError, text_lines

# Single spaces as printed; several (``ibdev2netdev | column -t``) are accepted too.
_IBDEV_RE = re.compile(r"^(?P<dev>\S+)\s+port\s+(?P<port>\d+)\s+==>\s+(?P<netdev>\S+)\s+\((?P<state>[^()]+)\)$")
_CA_RE = re.compile(r"^CA '(?P<name>[^']+)'$")
_PORT_RE = re.compile(r"^Port (?P<port>\d+):$")
_KV_RE = re.compile(r"^(?P<key>[A-Za-z][A-Za-z ]*?):\s*(?P<value>.*)$")
_PRIO_DSCP_RE = re.compile(r"^prio:(?P<prio>\d+)\s+dscp:(?P<dscp>[\d,]*)$")
_TC_RE = re.compile(r"^tc:\s*(?P<tc>\d+)\s+ratelimit:\s*(?P<ratelimit>[^,]+),\s*tsa:\s*(?P<tsa>[^,\s]+)"
                    r"(?:,\s*bw:\s*(?P<bw>\d+)%)?$")
_TC_PRIO_RE = re.compile(r"^priority:\s*(?P<prio>\d+)$")
_TCLASS_RE = re.compile(r"^Global tclass=(?P<tc>\d+)$")
_SYSFS_READ_RE = re.compile(r"(?P<path>/sys/\S+?)(?::(?:\s+|$)|\s+=(?:\s+|$))(?P<value>.*)$")
_ECN_PATH_RE = re.compile(r"^/sys/class/net/(?P<netdev>[^/]+)/ecn/(?P<side>roce_np|roce_rp)/enable/(?P<prio>\d)$")
_CNP_PATH_RE = re.compile(r"^/sys/class/net/(?P<netdev>[^/]+)/ecn/roce_np/cnp_dscp$")
_TC_PATH_RE = re.compile(r"^/sys/class/infiniband/(?P<dev>[^/]+)/tc/(?P<port>\d+)/traffic_class$")
_LSPCI_HEAD_RE = re.compile(
    r"^(?P<slot>(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+"
    r"(?P<class>[^:\[]+?)(?:\s+\[(?P<class_id>[0-9a-fA-F]{4})\])?:\s+(?P<text>.*?)"
    r"(?:\s+\[(?P<vendor_id>[0-9a-fA-F]{4}):(?P<device_id>[0-9a-fA-F]{4})\])?"
    r"(?:\s+\(rev (?P<rev>[0-9a-fA-F]+)\))?"
    r"(?:\s+\(prog-if [^)]*\))?$")
_SRIOV_COUNTS_RE = re.compile(r"Initial VFs:\s*(?P<initial>\d+),\s*Total VFs:\s*(?P<total>\d+),\s*"
                              r"Number of VFs:\s*(?P<number>\d+)")
_VF_DEVICE_RE = re.compile(r"VF offset:\s*(?P<offset>\d+),\s*stride:\s*(?P<stride>\d+),\s*"
                           r"Device ID:\s*(?P<id>[0-9a-fA-F]{4})")
_LNK_RE = re.compile(r"^(?P<key>LnkCap|LnkSta):\s*(?:Port #\d+,\s*)?Speed (?P<speed>[\d.]+GT/s)[^,]*,\s*"
                     r"Width (?P<width>x\d+)")
_HEX4_RE = re.compile(r"^[0-9a-fA-F]{4}$")
_NUMERIC_IDS_RE = re.compile(r"^(?P<vendor_id>[0-9a-fA-F]{4}):(?P<device_id>[0-9a-fA-F]{4})$")
_VPD_RE = re.compile(r"^\[(?P<tag>[A-Z0-9]{2})\] [^:]+:\s*(?P<value>.*?)\s*$")

# Vendor names as pci.ids prints them, for the heading text; other vendors keep vendor None.
LSPCI_VENDORS = ("NVIDIA Corporation", "Mellanox Technologies", "Intel Corporation", "Broadcom Inc. and subsidiaries",
                 "Advanced Micro Devices, Inc. [AMD]", "Advanced Micro Devices, Inc. [AMD/ATI]")


# ---------------------------------------------------------------------------------------------
# ibdev2netdev, ibstat
# ---------------------------------------------------------------------------------------------


def parse_ibdev2netdev(text):
    """``ibdev2netdev`` -> ``[{"rdma_device", "port", "netdev", "state"}]`` in printed order.

    ``state`` is as printed (``Up``/``Down``). A line of any other shape raises ParseError.
    """
    tool = "ibdev2netdev"
    rows = []
    for lineno, line in enumerate(text_lines(text, tool), 1):
        if not line.strip():
            continue
        match = _IBDEV_RE.match(line.strip())
        if not match:
            raise ParseError(tool, "'<rdma dev> port <n> ==> <netdev> (Up|Down)'", line, lineno)
        rows.append({"rdma_device": match.group("dev"), "port": int(match.group("port")),
                     "netdev": match.group("netdev"), "state": match.group("state")})
    return rows


def _snake(key):
    return "_".join(key.lower().split())


def _ibstat_value(key, value):
    if key in ("number_of_ports", "base_lid", "lmc", "sm_lid", "hardware_version") and value.isdigit():
        return int(value)
    if key == "rate":
        try:
            number = float(value)
        except ValueError:
            raise ParseError("ibstat", f"a numeric port rate in Gb/s, got {value!r}") from None
        return int(number) if number.is_integer() else number
    return value


def parse_ibstat(text):
    """``ibstat`` -> ``{ca_name: {"ca_type", "number_of_ports", "firmware_version",
    "hardware_version", "node_guid", "system_image_guid", "ports": {1: {"state", "physical_state",
    "rate", "base_lid", "lmc", "sm_lid", "capability_mask", "port_guid", "link_layer"}}}}``.

    Keys are the printed labels in snake case, so labels of other ibstat versions are kept too.
    ``rate`` is a number in Gb/s (``400``). Each CA must list as many ports as it says it has.
    """
    tool = "ibstat"
    cas = {}
    current = None
    port = None
    for lineno, line in enumerate(text_lines(text, tool), 1):
        stripped = line.strip()
        if not stripped:
            continue
        match = _CA_RE.match(stripped)
        if match:
            if match.group("name") in cas:
                raise ParseError(tool, f"each CA once, {match.group('name')} repeats", line, lineno)
            current = {"ports": {}}
            cas[match.group("name")] = current
            port = None
            continue
        if current is None:
            raise ParseError(tool, "a \"CA '<name>'\" line first", line, lineno)
        match = _PORT_RE.match(stripped)
        if match:
            port = {}
            current["ports"][int(match.group("port"))] = port
            continue
        match = _KV_RE.match(stripped)
        if not match:
            raise ParseError(tool, "'Label: value' inside a CA block", line, lineno)
        key = _snake(match.group("key"))
        (port if port is not None else current)[key] = _ibstat_value(key, match.group("value").strip())
    if not cas:
        raise ParseError(tool, "at least one \"CA '<name>'\" block")
    for name, ca in cas.items():
        if "ca_type" not in ca or not ca["ports"]:
            raise ParseError(tool, f"'CA type' and at least one 'Port <n>:' in CA '{name}'")
        declared = ca.get("number_of_ports")
        if isinstance(declared, int) and declared != len(ca["ports"]):
            raise ParseError(tool, f"{declared} port blocks in CA '{name}' (Number of ports), found {len(ca['ports'])}")
    return cas


# ---------------------------------------------------------------------------------------------
# mlnx_qos, cma_roce_tos, RoCE QoS sysfs reads
# ---------------------------------------------------------------------------------------------


def _int_list(text, tool, what, line, lineno):
    items = [item for item in re.split(r"[,\s]+", text.strip()) if item]
    if not items or not all(item.isdigit() for item in items):
        raise ParseError(tool, what, line, lineno)
    return [int(item) for item in items]


def _receive_buffer(text, tool, line, lineno):
    """``130944,130944,0,0,0,0,0,0`` -> ``([sizes], {})``; newer builds append ``name=<n>`` items
    (``...,0,max_buffer_size=262016``) -> ``([sizes], {"max_buffer_size": 262016})``."""
    what = "'Receive buffer size (bytes): n,n,...[,name=n]'"
    sizes = []
    extra = {}
    for item in (part.strip() for part in text.strip().split(",")):
        name, sep, value = item.partition("=")
        if sep and name.strip() == "max_buffer_size" and value.strip().isdigit():
            extra["max_buffer_size"] = int(value)
        elif item.isdigit() and not extra:
            sizes.append(int(item))
        else:
            raise ParseError(tool, what, line, lineno)
    if not sizes:
        raise ParseError(tool, what, line, lineno)
    return sizes, extra


def mlnx_qos_read_argv(binary, netdev):
    """The QoS read of one netdev: ``mlnx_qos -i <netdev>`` (parse_mlnx_qos reads its output)."""
    return [binary, "-i", netdev]


def cma_roce_tos_read_argv(binary, rdma_device):
    """The default RoCE ToS read of one RDMA device: ``cma_roce_tos -d <device>`` (parse_cma_roce_tos)."""
    return [binary, "-d", rdma_device]


def parse_mlnx_qos(text):
    """``mlnx_qos -i <if> [...]`` -> ``{"dcbx_mode", "trust", "dscp2prio": {prio: [dscp, ...]},
    "prio_of_dscp": {dscp: prio}, "cable_len", "receive_buffer_size", "max_buffer_size",
    "pfc": {"enabled": [8 x 0/1],
    "buffer": [8 x int] or None}, "pfc_priorities": [priorities with PFC on], "tcs": {tc: {"ratelimit",
    "tsa", "bw", "priorities"}}, "unparsed": [lines not recognised]}``.

    Requires ``Priority trust state`` or ``PFC configuration``; a malformed PFC row, dscp2prio row
    or tc line raises ParseError. Newer builds' variants are read: a ``max_buffer_size=<n>`` item
    after the receive-buffer sizes, and a tc line without ``bw:`` (``tc: 6 ratelimit: unlimited,
    tsa: vendor``, bw None). Several concatenated outputs: the last one wins.
    """
    tool = "mlnx_qos"
    result = {"dcbx_mode": None, "trust": None, "dscp2prio": {}, "prio_of_dscp": {}, "cable_len": None,
              "receive_buffer_size": None, "max_buffer_size": None, "pfc": None, "pfc_priorities": None,
              "tcs": {}, "unparsed": []}
    section = None
    tc = None
    pfc_header = None
    for lineno, line in enumerate(text_lines(text, tool), 1):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("DCBX mode:"):
            # A new report: start over so concatenated outputs give the last state.
            result.update({"dscp2prio": {}, "prio_of_dscp": {}, "tcs": {}})
            result["dcbx_mode"] = stripped.split(":", 1)[1].strip()
            section = None
        elif stripped.startswith("Priority trust state:"):
            result["trust"] = stripped.split(":", 1)[1].strip()
            section = None
        elif stripped.startswith("dscp2prio mapping:"):
            section = "dscp2prio"
        elif stripped.startswith("PFC configuration:"):
            section = "pfc"
            pfc_header = None
            result["pfc"] = {"enabled": None, "buffer": None}
        elif stripped.startswith("Cable len:"):
            result["cable_len"] = _int_list(stripped.split(":", 1)[1], tool, "'Cable len: <n>'", line, lineno)[0]
            section = None
        elif stripped.startswith("Receive buffer size"):
            sizes, extra = _receive_buffer(stripped.split(":", 1)[1], tool, line, lineno)
            result["receive_buffer_size"] = sizes
            result.update(extra)
            section = None
        elif stripped.startswith("tc:"):
            match = _TC_RE.match(stripped)
            if not match:
                raise ParseError(tool, "'tc: <n> ratelimit: <rate>, tsa: <tsa>[, bw: <n>%]'", line, lineno)
            tc = {"ratelimit": match.group("ratelimit").strip(), "tsa": match.group("tsa"),
                  "bw": int(match.group("bw")) if match.group("bw") else None, "priorities": []}
            result["tcs"][int(match.group("tc"))] = tc
            section = "tc"
        elif section == "dscp2prio":
            match = _PRIO_DSCP_RE.match(stripped)
            if not match:
                raise ParseError(tool, "a dscp2prio row 'prio:<p> dscp:<d>,<d>,...'", line, lineno)
            prio = int(match.group("prio"))
            dscps = [int(d) for d in match.group("dscp").split(",") if d]
            result["dscp2prio"][prio] = dscps
            for dscp in dscps:
                result["prio_of_dscp"][dscp] = prio
        elif section == "pfc" and stripped.split()[0] in ("priority", "enabled", "buffer"):
            label, _sep, rest = stripped.partition(" ")
            values = _int_list(rest, tool, f"8 numbers after '{label}' in the PFC table", line, lineno)
            if len(values) != 8:
                raise ParseError(tool, f"8 numbers after '{label}' in the PFC table", line, lineno)
            if label == "priority":
                pfc_header = values
            elif label in ("enabled", "buffer") and pfc_header == list(range(8)):
                result["pfc"][label] = values
            else:
                raise ParseError(tool, "PFC rows 'priority 0..7', then 'enabled'/'buffer'", line, lineno)
        elif section == "tc" and _TC_PRIO_RE.match(stripped):
            tc["priorities"].append(int(_TC_PRIO_RE.match(stripped).group("prio")))
        else:
            result["unparsed"].append(stripped)
            section = None
    if result["trust"] is None and result["pfc"] is None:
        raise ParseError(tool, "'Priority trust state:' or 'PFC configuration:' (mlnx_qos -i <if> output)")
    if result["pfc"] is not None:
        if result["pfc"]["enabled"] is None:
            raise ParseError(tool, "an 'enabled' row under 'PFC configuration:'")
        result["pfc_priorities"] = [p for p in range(8) if result["pfc"]["enabled"][p]]
    return result


def parse_cma_roce_tos(text):
    """``cma_roce_tos -d <dev> [-t <tos>]`` prints the ToS alone (``106``) -> 106 (0..255)."""
    tool = "cma_roce_tos"
    lines = [line for line in text_lines(text, tool) if line.strip()]
    if len(lines) != 1 or not lines[0].strip().isdigit() or int(lines[0]) > 255:
        raise ParseError(tool, "a single ToS number 0..255", lines[0] if lines else None)
    return int(lines[0])


def tos_split(tos):
    """RoCE ToS -> ``(dscp, ecn)``: 106 -> (26, 2) (DSCP 26, ECN ECT(0)); 160 -> (40, 0)."""
    if not isinstance(tos, int) or isinstance(tos, bool) or not 0 <= tos <= 255:
        raise ParseError("tos", f"an integer ToS 0..255, got {tos!r}")
    return tos >> 2, tos & 3


def parse_traffic_class(text):
    """``/sys/class/infiniband/<dev>/tc/<port>/traffic_class`` -> int: ``"Global tclass=106"`` -> 106."""
    tool = "traffic_class"
    lines = [line for line in text_lines(text, tool) if line.strip()]
    match = _TCLASS_RE.match(lines[0].strip()) if len(lines) == 1 else None
    if not match:
        raise ParseError(tool, "'Global tclass=<n>'", lines[0] if lines else None)
    return int(match.group("tc"))


def read_traffic_class(text):
    """The content of a ``tc/<port>/traffic_class`` file -> int or None.

    None when the file is absent or empty (no ToS set); the kernel's ``"Global tclass=106"`` -> 106
    (``parse_traffic_class``); a bare ``"106"`` -> 106, which is what a plain file holds after
    ``106`` was written to it (the simulator's sysfs tree). Anything else raises ParseError.
    """
    value = (text or "").strip()
    if not value:
        return None
    return int(value) if value.isdigit() else parse_traffic_class(value)


def parse_sysfs_reads(text):
    """Find sysfs reads in a listing -> ``[(path, value)]`` in order.

    Accepts ``<path>: <value>`` (``sysfs-class-infiniband-h100-ib-bf3-gpud.txt``) and
    ``... <path> = <value>`` with any prefix (``roce-qos-sysfs-ecn-cnp-spiderpool.txt``). Lines
    without a ``/sys/`` path are not reads and are skipped; no read at all raises ParseError.
    """
    reads = []
    for line in text_lines(text, "sysfs"):
        match = _SYSFS_READ_RE.search(line)
        if match:
            reads.append((match.group("path"), match.group("value").strip()))
    if not reads:
        raise ParseError("sysfs", "'<path>: <value>' or '<path> = <value>' lines with a /sys/ path")
    return reads


def _flag(path, value):
    if value not in ("0", "1"):
        raise ParseError("sysfs", f"0 or 1 in {path}, got {value!r}")
    return value == "1"


def roce_qos_from_sysfs(reads):
    """RoCE QoS values from ``parse_sysfs_reads`` output.

    ``{"netdevs": {if: {"ecn": {"roce_np": {prio: bool}, "roce_rp": {prio: bool}}, "cnp_dscp": int}},
    "rdma": {dev: {"traffic_class": {port: int}}}}``; reads of other files are ignored.
    """
    netdevs = {}
    rdma = {}
    for path, value in reads:
        match = _ECN_PATH_RE.match(path)
        if match:
            entry = netdevs.setdefault(match.group("netdev"), {"ecn": {"roce_np": {}, "roce_rp": {}}, "cnp_dscp": None})
            entry["ecn"][match.group("side")][int(match.group("prio"))] = _flag(path, value)
            continue
        match = _CNP_PATH_RE.match(path)
        if match:
            if not value.isdigit() or int(value) > 63:
                raise ParseError("sysfs", f"a DSCP 0..63 in {path}, got {value!r}")
            entry = netdevs.setdefault(match.group("netdev"), {"ecn": {"roce_np": {}, "roce_rp": {}}, "cnp_dscp": None})
            entry["cnp_dscp"] = int(value)
            continue
        match = _TC_PATH_RE.match(path)
        if match:
            device = rdma.setdefault(match.group("dev"), {"traffic_class": {}})
            device["traffic_class"][int(match.group("port"))] = parse_traffic_class(value)
    return {"netdevs": netdevs, "rdma": rdma}


def parse_sysctl(text):
    """``sysctl -w k=v`` / ``sysctl k`` output -> ``{key: value}`` (``net.ipv4.tcp_ecn = 1``)."""
    values = {}
    for lineno, line in enumerate(text_lines(text, "sysctl"), 1):
        if not line.strip():
            continue
        key, sep, value = line.partition(" = ")
        if not sep or not re.match(r"^[a-z0-9_.\-/]+$", key.strip()):
            raise ParseError("sysctl", "'<key> = <value>'", line, lineno)
        values[key.strip()] = value.strip()
    return values


# ---------------------------------------------------------------------------------------------
# sriov_numvfs write errors
# ---------------------------------------------------------------------------------------------


def write_error(text):
    """Recognise a failed sysfs write in captured stderr (``sriov_numvfs`` above all).

    ``"-bash: echo: write error: Device or resource busy"`` -> ``{"errno": "EBUSY", "code": 16,
    "message": "Device or resource busy"}``. Python's own ``[Errno 16] Device or resource busy``
    is recognised too. Returns None when the text holds no error message (a successful write is
    silent).
    """
    if text is None:
        return None
    if not isinstance(text, str):
        raise ParseError("sysfs write", f"text, got {type(text).__name__}")
    found = re.search(r"\[Errno (\d+)\]", text)
    if found and int(found.group(1)) in errno.errorcode:
        code = int(found.group(1))
        return {"errno": errno.errorcode[code], "code": code, "message": os.strerror(code)}
    # Longest message first: "Operation not permitted" must not match inside a longer one.
    for code in sorted(errno.errorcode, key=lambda c: -len(os.strerror(c))):
        message = os.strerror(code)
        if message and message in text:
            return {"errno": errno.errorcode[code], "code": code, "message": message}
    return None


# ---------------------------------------------------------------------------------------------
# lspci
# ---------------------------------------------------------------------------------------------


def parse_lspci_heading(line):
    """One ``lspci`` heading line -> ``{"address", "slot", "class", "class_id", "text", "vendor",
    "vendor_id", "device_id", "revision"}``.

    ``"19:00.0 3D controller: NVIDIA Corporation Device 2330 (rev a1)"`` -> address
    ``0000:19:00.0``, class ``3D controller``, text ``NVIDIA Corporation Device 2330``, vendor
    ``NVIDIA Corporation``, revision ``a1``. ``-nn`` ids (``[0207]``, ``[15b3:1021]``) are read
    when present, else None.
    """
    match = _LSPCI_HEAD_RE.match(line.strip()) if isinstance(line, str) else None
    if not match:
        raise ParseError("lspci", "'<[domain:]bus:dev.fn> <class>: <vendor device text>'", line)
    slot = match.group("slot").lower()
    text = match.group("text")
    vendor = next((name for name in LSPCI_VENDORS if text.startswith(name + " ")), None)
    record = {
        "address": slot if slot.count(":") == 2 else "0000:" + slot,
        "slot": match.group("slot"),
        "class": match.group("class").strip(),
        "class_id": match.group("class_id").lower() if match.group("class_id") else None,
        "text": text,
        "vendor": vendor,
        "vendor_id": match.group("vendor_id").lower() if match.group("vendor_id") else None,
        "device_id": match.group("device_id").lower() if match.group("device_id") else None,
        "revision": match.group("rev"),
    }
    # ``lspci -n``/``-vvn`` prints the numbers alone: ``19:00.0 0207: 15b3:1021 (rev 01)``.
    if record["class_id"] is None and _HEX4_RE.match(record["class"]):
        record["class_id"] = record["class"].lower()
    ids = _NUMERIC_IDS_RE.match(text)
    if record["vendor_id"] is None and ids:
        record["vendor_id"], record["device_id"] = ids.group("vendor_id").lower(), ids.group("device_id").lower()
    return record


def parse_lspci(text):
    """``lspci [-nn] [-vvv]`` -> list of heading records (see ``parse_lspci_heading``).

    With ``-v``/``-vvv`` each record also gets ``"details"``: ``numa_node``, ``kernel_driver``,
    ``kernel_modules``, ``sriov`` (``{"initial_vfs", "total_vfs", "num_vfs", "vf_device_id",
    "vf_offset", "vf_stride"}``), ``link_cap``/``link_status`` (``{"speed", "width"}``) and
    ``vpd`` (``{"PN": ..., "SN": ...}`` plus ``product_name``); lines not listed are skipped.
    A non-indented line that is not a heading raises ParseError.
    """
    devices = []
    for lineno, line in enumerate(text_lines(text, "lspci"), 1):
        if not line.strip():
            continue
        if not line[:1].isspace():
            try:
                record = parse_lspci_heading(line)
            except ParseError:
                raise ParseError("lspci", "'<[domain:]bus:dev.fn> <class>: <text>' heading", line, lineno) from None
            record["details"] = {}
            devices.append(record)
            continue
        if not devices:
            raise ParseError("lspci", "a device heading before indented detail lines", line, lineno)
        _lspci_detail(devices[-1]["details"], line.strip())
    if not devices:
        raise ParseError("lspci", "at least one device heading line")
    return devices


def _lspci_detail(details, stripped):
    key, _sep, value = stripped.partition(":")
    value = value.strip()
    if key == "NUMA node" and value.lstrip("-").isdigit():
        details["numa_node"] = int(value)
    elif key == "Kernel driver in use":
        details["kernel_driver"] = value
    elif key == "Kernel modules":
        details["kernel_modules"] = [m.strip() for m in value.split(",") if m.strip()]
    elif key == "Product Name":
        details.setdefault("vpd", {})["product_name"] = value
    counts = _SRIOV_COUNTS_RE.search(stripped)
    if counts:
        details.setdefault("sriov", {}).update({"initial_vfs": int(counts.group("initial")),
                                                "total_vfs": int(counts.group("total")),
                                                "num_vfs": int(counts.group("number"))})
    vf = _VF_DEVICE_RE.search(stripped)
    if vf:
        details.setdefault("sriov", {}).update({"vf_offset": int(vf.group("offset")),
                                                "vf_stride": int(vf.group("stride")),
                                                "vf_device_id": vf.group("id").lower()})
    link = _LNK_RE.match(stripped)
    if link:
        name = "link_cap" if link.group("key") == "LnkCap" else "link_status"
        details[name] = {"speed": link.group("speed"), "width": link.group("width")}
    vpd = _VPD_RE.match(stripped)
    if vpd:
        details.setdefault("vpd", {})[vpd.group("tag")] = vpd.group("value")
