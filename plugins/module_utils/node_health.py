# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Day-two node health as pure functions (stdlib only): the parsers of what ``node_health`` reads
and the evaluation that turns it into Node-condition-shaped problems.

Formats (the public outputs these parsers were written against):

- kernel log, ``dmesg --time-format=iso`` (``2024-11-15T12:02:03,470068+00:00 NVRM: Xid
  (PCI:0000:19:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error ...``)
  and plain ``dmesg`` (``[6781741.548779] NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>',
  name=<unknown>, GPU has fallen off the bus.``), both from https://github.com/leptonai/gpud
  (pkg/dmesg/testdata, components/accelerator/nvidia/sxid/README.md). ``dmesg -T`` (``[Fri Nov 15
  12:02:03 2024]``) and ``dmesg -t`` (no prefix) are accepted too, and Xid lines of older drivers
  without ``PCI:`` or without ``pid=``/``name=``. An ``NVRM: Xid`` line of any other shape is an error.
- ``nvidia-smi -q`` sections ``Persistence Mode``, ``ECC Errors/Volatile``, ``Retired Pages``,
  ``Remapped Rows`` and ``Fabric`` (8x H100 HGX, driver 535.161.08, https://github.com/leptonai/gpud
  pkg/nvidia-query/testdata). ``Retired Pages`` reads ``N/A`` on GPUs that remap rows (A100, H100);
  its pending key is ``Pending Page Blacklist`` on most drivers, ``Pending Page Retirement`` or
  ``Pending`` on others. Volatile uncorrectable counts are the sum of every ``Volatile`` key with
  ``Uncorrectable`` in its name (``SRAM Uncorrectable Parity``, ``SRAM Uncorrectable SEC-DED``,
  ``DRAM Uncorrectable`` on 535; ``SRAM Uncorrectable``/``DRAM Uncorrectable`` on older drivers)
  or ``Volatile/Double Bit/Total`` on pre-Ampere drivers.
- sysfs PCIe link files ``current_link_speed``/``max_link_speed`` (``32.0 GT/s PCIe``; ``8 GT/s``
  on kernels before 5.x; ``Unknown`` or ``Unknown speed`` while the link is down) and
  ``current_link_width``/``max_link_width`` (a decimal lane count), Linux
  Documentation/ABI/testing/sysfs-bus-pci.
- ``/proc/<pid>/stat`` (``pid (comm) state ppid ...``, field 22 ``starttime`` in clock ticks since
  boot) and ``/proc/uptime`` (``350735.47 234388.90``), proc(5). The ``ps -eo pid,state,cmd``
  form (https://github.com/Azure/local-csi-driver/issues/153) is parsed by :func:`parse_ps` for
  scripts that read processes through ``ps``.

A condition is the shape of a Kubernetes Node condition plus where and what to do::

    {"type": "GPUFallenOffBus", "status": "True", "reason": "Xid79",
     "message": "GPU 0000:91:00.0: Xid 79 (GPU has fallen off the bus) 1 time since boot, ...",
     "device": "0000:91:00.0", "check": "xid", "remedy": "hardware"}

``status`` is ``True`` for a problem and ``Unknown`` when the check could not run; a healthy node
has no condition. ``remedy`` is ``hardware`` (needs hardware service: a re-run cannot fix it),
``reset`` (a GPU reset or reboot applies it), ``reconfigure`` (drift the pipeline re-applies) or
``investigate``.
"""

from __future__ import annotations

import datetime
import math
import re
import time

from ansible_collections.mlplatform.gpunode.plugins.module_utils.parsing import ParseError, text_lines

# Xid numbers and what they mean (NVIDIA Xid catalogue, https://docs.nvidia.com/deploy/xid-errors/):
# type, what the message says, remedy.
XIDS = {
    48: ("GPUDoubleBitECCError", "double bit ECC error (DBE)", "reset"),
    63: ("GPURowRemapEvent", "row remapping pending (ECC page retirement)", "reset"),
    64: ("GPURowRemapFailure", "row remapping failure", "hardware"),
    74: ("GPUNVLinkError", "NVLink error", "reset"),
    79: ("GPUFallenOffBus", "GPU has fallen off the bus", "hardware"),
    95: ("GPUUncontainedECCError", "uncontained ECC error", "reset"),
}
DEFAULT_XIDS = tuple(sorted(XIDS))
CONDITION_TYPES = (
    "GPUMissing", "GPUDriverUnavailable", "GPUQueryIncomplete", "GPUUnreachable", "GPUFieldUnreadable",
    "KernelLogUnavailable",
    *sorted({v[0] for v in XIDS.values()}), "GPUXidError",
    "GPURetiredPagesPending", "GPURowRemapFailure", "GPUUncorrectableECC", "GPUFabricNotReady",
    "GPUPersistenceModeOff", "PCIeLinkDegraded", "PCIeDeviceMissing", "RailLinkDown", "RailSpeedDegraded",
    "RailVFCountDrift", "RailRoceAcclDrift", "RailQoSDrift", "DStateProcess",
)
# The checks (a condition's ``check``) of each part ``node_health_read.observe`` reads.
PART_CHECKS = {
    "gpu": ("gpu_count", "gpu", "retired_pages", "ecc", "persistence", "fabric", "gpu_query"),
    "xid": ("xid",),
    "pcie": ("pcie",),
    "rail": ("rail",),
    "drift": ("vfs", "roce_accl", "qos"),
    "processes": ("processes",),
}
QOS_KEYS = ("trust", "pfc", "pfc_priorities", "ecn_np", "ecn_rp", "cnp_dscp", "roce_tos", "mtu")

_ISO_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[,.]\d+[+-]\d\d:?\d\d ")
_MONO_RE = re.compile(r"^\[\s*\d+\.\d+\] ")
_CTIME_RE = re.compile(r"^\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}\] ")
_XID_RE = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<addr>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.[0-7])?\): "
    r"(?P<xid>\d+)(?:, pid=(?P<pid>'<unknown>'|\d+|'[^']*'), name=(?P<name>[^,]*))?(?:, (?P<text>.*))?$")
_STAT_RE = re.compile(r"^(?P<pid>\d+) \((?P<comm>.*)\) (?P<state>[A-Za-z]) (?P<rest>.*)$")
_SPEED_RE = re.compile(r"^(?P<gts>\d+(?:\.\d+)?) GT/s(?: PCIe)?$")
_PS_HEADER_RE = re.compile(r"^\s*PID\s+(?:S|STAT)\b")
_PROMPT_RE = re.compile(r"^\S*[#$] ")


# ---------------------------------------------------------------------------------------------
# Parsers
# ---------------------------------------------------------------------------------------------


def _split_prefix(line):
    """``(timestamp text or None, message)`` of one kernel log line in any dmesg time format."""
    for pattern in (_ISO_RE, _MONO_RE, _CTIME_RE):
        match = pattern.match(line)
        if match:
            return match.group(0).strip().strip("[]").strip(), line[match.end():]
    return None, line


def _pci_of_xid(addr):
    domain, bus, dev = addr.lower().split(":")
    return f"{domain[-4:]}:{bus}:{dev}.0"


def parse_kernel_log(text, unparsed=None):
    """Xid events of a kernel log (``dmesg`` output, any of the time formats above).

    Returns ``[{"xid": 79, "pci_address": "0000:91:00.0", "time": "6781741.548779" | None,
    "pid": None | int, "process": None | str, "text": "GPU has fallen off the bus.", "line": N}]``
    in log order. Empty output is an empty log. An ``NVRM: Xid`` line of an unknown shape raises
    ParseError, or, with a list ``unparsed``, is appended to it as ``{"line": N, "text": ...}`` and the
    rest of the log is read.
    """
    if text is None or not str(text).strip():
        return []
    events = []
    for lineno, line in enumerate(text_lines(text, "dmesg"), 1):
        if "NVRM: Xid" not in line:
            continue
        stamp, message = _split_prefix(line)
        match = _XID_RE.search(message)
        if not match:
            if unparsed is not None:
                unparsed.append({"line": lineno, "text": line[:300]})
                continue
            raise ParseError("dmesg", "an Xid line like 'NVRM: Xid (PCI:0000:19:00): 48, pid=..., name=..., text'",
                             line, lineno)
        pid = match.group("pid")
        name = match.group("name")
        events.append({
            "xid": int(match.group("xid")),
            "pci_address": _pci_of_xid(match.group("addr")),
            "time": stamp,
            "pid": int(pid) if pid and pid.isdigit() else None,
            "process": None if name in (None, "<unknown>") else name,
            "text": (match.group("text") or "").strip(),
            "line": lineno,
        })
    return events


def event_epoch(stamp, boot_epoch=None):
    """Seconds since the epoch of a kernel log time stamp (``_split_prefix``): an ISO time with its offset, a ctime
    (local time, as ``dmesg -T`` prints it), or seconds since boot with ``boot_epoch``; None when it cannot be
    known."""
    if not stamp:
        return None
    text = str(stamp).strip()
    if re.match(r"^\d+\.\d+$", text):
        return None if boot_epoch is None else boot_epoch + float(text)
    iso = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:[,.](\d+))?(?:(Z)|([+-])(\d\d):?(\d\d))$", text)
    if iso:
        base = datetime.datetime.strptime(iso.group(1), "%Y-%m-%dT%H:%M:%S")
        offset = 0 if iso.group(3) else (int(iso.group(5)) * 60 + int(iso.group(6))) * (
            1 if iso.group(4) == "+" else -1)
        moment = base.replace(tzinfo=datetime.timezone(datetime.timedelta(minutes=offset)))
        return moment.timestamp() + float("0." + (iso.group(2) or "0"))
    try:
        return time.mktime(time.strptime(text, "%a %b %d %H:%M:%S %Y"))
    except ValueError:
        return None


def parse_time(value):
    """A time given by a user: seconds since the epoch (a finite number) or an ISO 8601 time with its offset;
    None when it is neither."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        number = float(value)
    else:
        text = str(value).strip()
        try:
            number = float(text)
        except ValueError:
            return event_epoch(text) if "T" in text else None
    return number if math.isfinite(number) else None


def parse_proc_stat(text):
    """``/proc/<pid>/stat`` -> ``{"pid", "comm", "state", "starttime_ticks"}``.

    ``comm`` may hold spaces and parentheses: it runs to the last ``)``. Raises ParseError on
    anything else.
    """
    line = (text or "").strip()
    head, sep, tail = line.rpartition(")")
    match = _STAT_RE.match(head + sep + tail) if sep else None
    rest = (match.group("rest").split() if match else [])
    if not match or len(rest) < 19 or not rest[18].isdigit():
        raise ParseError("/proc/<pid>/stat", "'pid (comm) state ppid ...' with starttime as field 22", line or "")
    comm = head[head.index("(") + 1:]
    return {"pid": int(match.group("pid")), "comm": comm, "state": match.group("state"),
            "starttime_ticks": int(rest[18])}


def parse_uptime(text):
    """``/proc/uptime`` (``350735.47 234388.90``) -> seconds since boot (float)."""
    parts = (text or "").split()
    try:
        return float(parts[0])
    except (IndexError, ValueError):
        raise ParseError("/proc/uptime", "'<seconds since boot> <idle seconds>'", (text or "").strip()) from None


def parse_ps(text):
    """``ps -eo pid,state[,etimes],cmd`` output (header optional) -> ``[{"pid", "state", "etimes",
    "cmd"}]``; ``etimes`` (seconds) is None without that column. Shell prompt lines
    (``root@host:/# ps ...``) are skipped; other lines must be ``<pid> <state> ...``."""
    out = []
    has_etimes = None
    for lineno, line in enumerate(text_lines(text, "ps"), 1):
        if not line.strip() or _PROMPT_RE.match(line):
            continue
        if _PS_HEADER_RE.match(line):
            has_etimes = "ELAPSED" in line.split()
            continue
        parts = line.split(None, 3 if has_etimes else 2)
        if len(parts) < 3 or not parts[0].isdigit() or not re.match(r"^[A-Za-z][<NLsl+]*$", parts[1]):
            raise ParseError("ps", "'<pid> <state> [<elapsed s>] <command>'", line, lineno)
        if has_etimes:
            if len(parts) < 4 or not parts[2].isdigit():
                raise ParseError("ps", "'<pid> <state> <elapsed s> <command>' under an ELAPSED header", line, lineno)
            out.append({"pid": int(parts[0]), "state": parts[1][0], "etimes": int(parts[2]), "cmd": parts[3]})
        else:
            out.append({"pid": int(parts[0]), "state": parts[1][0], "etimes": None, "cmd": parts[2]})
    return out


def parse_link_speed(text, path="current_link_speed"):
    """``"32.0 GT/s PCIe"`` / ``"8 GT/s"`` -> 32.0 / 8.0; ``"Unknown"``/``"Unknown speed"`` -> None."""
    value = (text or "").strip()
    if value in ("Unknown", "Unknown speed"):
        return None
    match = _SPEED_RE.match(value)
    if not match:
        raise ParseError(path, "a link speed like '32.0 GT/s PCIe', '8 GT/s' or 'Unknown'", value)
    return float(match.group("gts"))


def parse_link_width(text, path="current_link_width"):
    """``"16"`` -> 16 (``0`` while the link is down)."""
    value = (text or "").strip()
    if not value.isdigit():
        raise ParseError(path, "a decimal lane count such as 16", value)
    return int(value)


NOT_REPORTED = ("N/A", "[N/A]", "Not Available", "[Not Supported]", "Not Supported")


def _yes_no(value, path, unreadable):
    if value is None or value in NOT_REPORTED:
        return None
    if value in ("Yes", "No"):
        return value == "Yes"
    unreadable[path] = value
    return None


def _count(value, path, unreadable):
    if value is None or value in NOT_REPORTED:
        return None
    if not value.isascii() or not value.isdigit():
        unreadable[path] = value
        return None
    return int(value)


def _is_error_value(value):
    """A value nvidia-smi prints when it could not read the field: ``ERR!``, ``[Unknown Error]``, ``[GPU requires
    reset]`` ... (any bracketed text but ``[N/A]``/``[Not Supported]``)."""
    text = (value or "").strip()
    return (text == "ERR!" or "Unknown Error" in text
            or (text.startswith("[") and text.endswith("]") and text not in NOT_REPORTED))


def gpu_health_fields(fields):
    """The health facts of one GPU's ``nvidia-smi -q`` section (``parse_query_tree`` paths).

    Returns ``{"persistence_mode", "fabric_state", "fabric_status", "retired_pages_pending",
    "row_remap_pending", "row_remap_failure", "volatile_uncorrectable", "unreadable"}``; a value is
    None when the GPU does not report it (``N/A`` or the section is absent) or could not read it:
    ``unreadable`` maps each field whose value is of no known form (``ERR!``, ``[Unknown Error]``,
    ``Maybe``) to what was printed, and the other fields are read as usual.
    """
    unreadable = {}
    pending_keys = [k for k in fields if k.startswith("Retired Pages/Pending")]
    pending = None
    for key in pending_keys:
        value = _yes_no(fields[key], key, unreadable)
        pending = value if pending is None else (pending or bool(value))
    volatile = None
    for key, value in fields.items():
        if key.startswith("ECC Errors/Volatile/") and ("Uncorrectable" in key or key.endswith("Double Bit/Total")):
            if key.count("/") > 3:
                continue
            number = _count(value, key, unreadable)
            if number is not None:
                volatile = (volatile or 0) + number
    persistence = fields.get("Persistence Mode")
    if persistence is not None and persistence not in ("Enabled", "Disabled", *NOT_REPORTED):
        unreadable["Persistence Mode"] = persistence
        persistence = None
    fabric = {}
    for key in ("Fabric/State", "Fabric/Status"):
        value = fields.get(key)
        if value is not None and _is_error_value(value):
            unreadable[key] = value
            value = None
        fabric[key] = value
    return {
        "persistence_mode": persistence,
        "fabric_state": fabric["Fabric/State"],
        "fabric_status": fabric["Fabric/Status"],
        "retired_pages_pending": pending,
        "row_remap_pending": _yes_no(fields.get("Remapped Rows/Pending"), "Remapped Rows/Pending", unreadable),
        "row_remap_failure": _yes_no(fields.get("Remapped Rows/Remapping Failure Occurred"),
                                     "Remapped Rows/Remapping Failure Occurred", unreadable),
        "volatile_uncorrectable": volatile,
        "unreadable": unreadable,
    }


_HANDLE_RE = re.compile(r"Unable to determine the device handle for (?:GPU|gpu)\s*"
                        r"(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)\s*:?\s*(?P<why>.*)$")


def split_device_handle_errors(text):
    """``(rest, {pci_address: why})``: nvidia-smi's ``Unable to determine the device handle for GPU <bus id>: <why>``
    lines (a GPU the driver cannot reach; nvidia-smi prints the others and exits non-zero) taken out of its output,
    each by the GPU's PCI address."""
    rest, unreachable = [], {}
    for line in (text or "").splitlines():
        match = _HANDLE_RE.search(line)
        if match:
            bus = match.group("bus")
            if "." not in bus:
                bus += ".0"
            domain, rest_of = bus.split(":", 1)
            unreachable[f"{domain[-4:]}:{rest_of}".lower()] = match.group("why").strip() or "no reason given"
        else:
            rest.append(line)
    return "\n".join(rest) + ("\n" if rest else ""), unreachable


def query_completeness(header, sections):
    """``(why, bus id)``: why an ``nvidia-smi -q`` output looks cut short and the GPU whose section was cut (its
    fields are not to be judged), or ``(None, None)``. Cut short: a section without ``Product Name``, a last
    section without the top-level key every other section ends with (``Processes``), or fewer GPU sections than
    its ``Attached GPUs``."""
    for bus, fields in sections:
        if "Product Name" not in fields:
            return f"the section of GPU {bus} has no Product Name", bus
    if len(sections) >= 2:
        tops = [[k for k in f if "/" not in k] for _bus, f in sections]
        endings = {t[-1] for t in tops[:-1] if t}
        if len(endings) == 1:
            (ending,) = endings
            if ending not in tops[-1]:
                return (f"the section of GPU {sections[-1][0]} ends before {ending!r}, which every other section "
                        "has", sections[-1][0])
    attached = str(header.get("Attached GPUs") or "").strip()
    if not attached.isdigit():
        return f"its header has no Attached GPUs count (got {attached or 'none'})", None
    if int(attached) > len(sections):
        return f"it lists {len(sections)} GPU section(s) of Attached GPUs {attached}", None
    return None, None


# ---------------------------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------------------------


def condition(type_, reason, message, device, check, remedy, status="True"):
    return {"type": type_, "status": status, "reason": reason, "message": message, "device": device,
            "check": check, "remedy": remedy}


def _rail_label(rail):
    netdev = f" ({rail['netdev']})" if rail.get("netdev") else ""
    if rail.get("discovered_netdev") and rail.get("discovered_netdev") != rail.get("netdev"):
        netdev = (f" ({rail['netdev']}, discovered as {rail['discovered_netdev']})" if rail.get("netdev")
                  else f" (no netdev now, discovered as {rail['discovered_netdev']})")
    return f"rail {rail['rail']} NIC {rail['pci_address']}{netdev}"


def _now(rail, observed):
    """The rail with the names its PCI function has now (``observed['names']``, see node_health_read)."""
    names = (observed.get("names") or {}).get(rail["pci_address"])
    return {**rail, **names} if names else rail


def _gpu_conditions(hw, observed, expect):
    out = []
    discovered = [g["pci_address"] for g in hw.get("gpus") or []]
    if not discovered:
        return out
    smi = observed.get("nvidia_smi") or {}
    if smi.get("error"):
        if smi.get("timed_out"):
            return [condition("GPUDriverUnavailable", "NvidiaSmiTimedOut", f"nvidia-smi -q: {smi['error']}",
                              "nvidia-smi", "gpu", "investigate", status="Unknown")]
        return [condition("GPUDriverUnavailable", "NvidiaSmiFailed", f"nvidia-smi -q: {smi['error']}",
                          "nvidia-smi", "gpu", "investigate")]
    gpus = smi.get("gpus") or {}
    unreachable = smi.get("unreachable") or {}
    for pci, why in sorted(unreachable.items()):
        out.append(condition("GPUUnreachable", "DeviceHandleUnavailable",
                             f"GPU {pci}: nvidia-smi cannot reach it (Unable to determine the device handle: {why})",
                             pci, "gpu", "reset"))
    if smi.get("parse_error") or smi.get("incomplete"):
        # What is missing from a cut or unreadable output says nothing about the hardware.
        reason = "OutputUnparseable" if smi.get("parse_error") else "OutputTruncated"
        what = smi.get("parse_error") or f"the output is cut short: {smi['incomplete']}"
        out.append(condition("GPUQueryIncomplete", reason, f"nvidia-smi -q: {what}; GPUs not in it are not judged",
                             "nvidia-smi", "gpu_query", "investigate", status="Unknown"))
    else:
        for pci in discovered:
            if pci not in gpus and pci not in unreachable:
                out.append(condition("GPUMissing", "GPUNotVisible",
                                     f"GPU {pci}: discovery found it, nvidia-smi -q shows {len(gpus)} of "
                                     f"{len(discovered)} GPUs and not this one", pci, "gpu_count", "hardware"))
    for pci, gpu in sorted(gpus.items()):
        if gpu.get("unreadable"):
            out.append(condition("GPUFieldUnreadable", "UnreadableValue", f"GPU {pci}: nvidia-smi -q printed "
                                 + "; ".join(f"{v!r} for {k}" for k, v in sorted(gpu["unreadable"].items()))
                                 + " (not a value it reports; the GPU's other fields are judged)", pci, "gpu",
                                 "investigate", status="Unknown"))
    for pci, gpu in sorted(gpus.items()):
        if gpu.get("retired_pages_pending"):
            out.append(condition("GPURetiredPagesPending", "PendingPageRetirement",
                                 f"GPU {pci}: retired pages are pending (Retired Pages: Pending Yes); "
                                 "reset the GPU to retire them", pci, "retired_pages", "reset"))
        if gpu.get("row_remap_pending"):
            out.append(condition("GPURetiredPagesPending", "RowRemapPending",
                                 f"GPU {pci}: a row remap is pending (Remapped Rows: Pending Yes); "
                                 "reset the GPU to apply it", pci, "retired_pages", "reset"))
        if gpu.get("row_remap_failure"):
            out.append(condition("GPURowRemapFailure", "RowRemappingFailed",
                                 f"GPU {pci}: Remapped Rows: Remapping Failure Occurred Yes (NVIDIA RMA criterion)",
                                 pci, "retired_pages", "hardware"))
        if gpu.get("volatile_uncorrectable"):
            out.append(condition("GPUUncorrectableECC", "VolatileUncorrectableECC",
                                 f"GPU {pci}: {gpu['volatile_uncorrectable']} volatile uncorrectable ECC errors "
                                 "since the last driver load", pci, "ecc", "reset"))
        if (gpu.get("persistence_mode") or "") != "Enabled" and "Persistence Mode" not in (gpu.get("unreadable") or {}):
            out.append(condition("GPUPersistenceModeOff", "PersistenceModeDisabled",
                                 f"GPU {pci}: Persistence Mode {gpu.get('persistence_mode') or 'not reported'}, "
                                 "expected Enabled", pci, "persistence", "reconfigure"))
        fabric_unread = {"Fabric/State", "Fabric/Status"} & set(gpu.get("unreadable") or {})
        if hw.get("fabric_manager_required") and not fabric_unread:
            state, status = gpu.get("fabric_state"), gpu.get("fabric_status")
            if state != "Completed" or status not in ("Success", None):
                out.append(condition("GPUFabricNotReady", "FabricState" + re.sub(r"\W", "", str(state)),
                                     f"GPU {pci}: Fabric State {state}, Status {status}; expected Completed, "
                                     "Success (NVSwitch system: nvidia-fabricmanager)", pci, "fabric", "reconfigure"))
    return out


# Xids whose fault the GPU's state shows while it lasts, and the state that shows it is gone (a GPU reset or a
# driver reload since cleared it): Xid 48, a double bit error, counts in the volatile uncorrectable ECC errors
# (zeroed at driver load or GPU reset); Xid 63, a row remap pending, in Remapped Rows: Pending.
CLEARED_BY_STATE = {
    48: (lambda gpu: gpu.get("volatile_uncorrectable") == 0,
         "its volatile uncorrectable ECC count reads 0 now (reset since)"),
    63: (lambda gpu: gpu.get("row_remap_pending") is False, "no row remap is pending now (applied since)"),
}


def _xid_state_cleared(xid, gpu):
    """Why the GPU's current state shows an Xid handled (None when it does not, or cannot be read)."""
    rule = CLEARED_BY_STATE.get(xid)
    if not rule or not gpu or gpu.get("unreadable"):
        return None
    cleared, why = rule
    return why if cleared(gpu) else None


def _xid_conditions(hw, observed, expect):
    """One condition per GPU and Xid, judged against the GPU's current state and the last handling recorded
    (``expect['xid_handled_before']``, seconds since the epoch): events a GPU reset or a remediation since has
    handled are listed in ``observed['kernel_log']['handled']`` instead."""
    log = observed.get("kernel_log") or {}
    if log.get("error"):
        return [condition("KernelLogUnavailable", "KernelLogUnreadable", f"kernel log: {log['error']}",
                          "dmesg", "xid", "investigate", status="Unknown")]
    wanted = set(expect.get("xids", DEFAULT_XIDS))
    handled_before = expect.get("xid_handled_before")
    gpus = (observed.get("nvidia_smi") or {}).get("gpus") or {}
    groups, handled = {}, []
    for event in log.get("xids") or []:
        if event["xid"] not in wanted:
            continue
        epoch = event.get("epoch")
        if handled_before is not None and epoch is not None and epoch <= handled_before:
            handled.append({**event, "why": "logged before the last handling recorded for the host"})
            continue
        groups.setdefault((event["pci_address"], event["xid"]), []).append(event)
    out = []
    for (pci, xid), events in sorted(groups.items()):
        cleared = _xid_state_cleared(xid, gpus.get(pci))
        if cleared:
            handled += [{**e, "why": f"GPU {pci}: {cleared}"} for e in events]
            continue
        type_, meaning, remedy = XIDS.get(xid, ("GPUXidError", f"Xid {xid}", "investigate"))
        first, last = events[0], events[-1]
        when = f", first at {first['time']}, last at {last['time']}" if first["time"] else ""
        text = f": {last['text']}" if last["text"] else ""
        cond = condition(type_, f"Xid{xid}",
                         f"GPU {pci}: Xid {xid} ({meaning}) {len(events)} time(s) since boot{when}{text}",
                         pci, "xid", remedy)
        cond["last_seen"] = last.get("epoch")
        out.append(cond)
    if handled and isinstance(observed.get("kernel_log"), dict):
        observed["kernel_log"]["handled"] = handled
    return out


def _pcie_conditions(hw, observed, expect):
    out = []
    labels = {g["pci_address"]: f"GPU {g['pci_address']}" for g in hw.get("gpus") or []}
    labels.update({r["pci_address"]: _rail_label(_now(r, observed)) for r in hw.get("rails") or []})
    check_gpu_speed = expect.get("pcie_gpu_speed", True)
    gpus = {g["pci_address"] for g in hw.get("gpus") or []}
    for pci, link in sorted((observed.get("pcie") or {}).items()):
        label = labels.get(pci, pci)
        if link.get("missing"):
            out.append(condition("PCIeDeviceMissing", "NotInSysfs", f"{label}: gone from {link['missing']}",
                                 pci, "pcie", "hardware"))
            continue
        if link.get("error"):
            out.append(condition("PCIeLinkDegraded", "LinkUnreadable", f"{label}: {link['error']}", pci, "pcie",
                                 "investigate", status="Unknown"))
            continue
        width, max_width = link.get("current_width"), link.get("max_width")
        if width is not None and max_width and width < max_width:
            out.append(condition("PCIeLinkDegraded", "PCIeWidthDowngraded",
                                 f"{label}: PCIe link x{width} of x{max_width}", pci, "pcie", "hardware"))
        speed, max_speed = link.get("current_speed_gts"), link.get("max_speed_gts")
        if (pci not in gpus or check_gpu_speed) and max_speed and (speed is None or speed < max_speed):
            now = "Unknown" if speed is None else f"{speed:g} GT/s"
            out.append(condition("PCIeLinkDegraded", "PCIeSpeedDowngraded",
                                 f"{label}: PCIe link speed {now} of {max_speed:g} GT/s", pci, "pcie", "hardware"))
    return out


def _rail_conditions(hw, observed, expect):
    out = []
    rails_seen = observed.get("rails") or {}
    for rail in hw.get("rails") or []:
        rail = _now(rail, observed)
        pci, label = rail["pci_address"], _rail_label(rail)
        seen = rails_seen.get(pci)
        if seen is None:
            continue
        if seen.get("error"):
            out.append(condition("RailLinkDown", "PortUnreadable", f"{label}: {seen['error']}", pci, "rail",
                                 "investigate", status="Unknown"))
            continue
        if seen.get("state") != "ACTIVE":
            out.append(condition("RailLinkDown", "PortNotActive",
                                 f"{label}: RDMA port {rail.get('rdma_device')} state {seen.get('state')}, "
                                 "expected ACTIVE", pci, "rail", "investigate"))
        else:
            want = expect.get("link_speed_gbps") or rail.get("speed_gbps")
            rate = seen.get("rate_gbps")
            if want and rate is not None and rate < want:
                out.append(condition("RailSpeedDegraded", "RateBelowDiscovered",
                                     f"{label}: port rate {rate:g} Gb/s, discovered {want:g} Gb/s", pci, "rail",
                                     "investigate"))
        vfs = expect.get("num_vfs")
        if vfs is not None and seen.get("sriov_numvfs") != vfs:
            out.append(condition("RailVFCountDrift", "VFCountChanged",
                                 f"{label}: {seen.get('sriov_numvfs')} VFs, declared {vfs}", pci, "vfs",
                                 "reconfigure"))
        out += _drift_conditions(rail, label, observed, expect)
    return out


def _drift_conditions(rail, label, observed, expect):
    out = []
    pci = rail["pci_address"]
    accl_want = expect.get("roce_accl") or {}
    if accl_want:
        accl = (observed.get("roce_accl") or {}).get(pci) or {}
        if accl.get("error"):
            out.append(condition("RailRoceAcclDrift", "RoceAcclUnreadable", f"{label}: mlxreg: {accl['error']}",
                                 pci, "roce_accl", "investigate", status="Unknown"))
        else:
            fields = accl.get("fields") or {}
            bad = {k: fields.get(k) for k, v in sorted(accl_want.items()) if fields.get(k) != v}
            if bad:
                reason = "AdaptiveRoutingChanged" if "adaptive_routing_forced_en" in bad else "RoceAcclChanged"
                out.append(condition("RailRoceAcclDrift", reason, f"{label}: ROCE_ACCL " + "; ".join(
                    f"{k}={v}, declared {accl_want[k]}" for k, v in bad.items()), pci, "roce_accl", "reconfigure"))
    qos_want = {k: v for k, v in (expect.get("qos") or {}).items() if k in QOS_KEYS and v is not None}
    if qos_want and rail.get("link_layer") != "InfiniBand" and not rail.get("netdev") and rail.get(
            "discovered_netdev"):
        out.append(condition("RailQoSDrift", "QoSUnreadable", f"{label}: the PCI function has no netdev now, its QoS "
                             "cannot be read", pci, "qos", "investigate", status="Unknown"))
    if qos_want and rail.get("link_layer") != "InfiniBand" and rail.get("netdev"):
        qos = (observed.get("qos") or {}).get(rail["netdev"]) or {}
        if qos.get("error"):
            out.append(condition("RailQoSDrift", "QoSUnreadable", f"{label}: {qos['error']}", pci, "qos",
                                 "investigate", status="Unknown"))
        else:
            bad = [k for k in sorted(qos_want) if qos.get(k) != qos_want[k]]
            if bad:
                names = {"trust": "Trust", "pfc": "PFC", "pfc_priorities": "PFC", "ecn_np": "ECN", "ecn_rp": "ECN",
                         "cnp_dscp": "CNP", "roce_tos": "ToS", "mtu": "MTU"}
                kinds = sorted({names[k] for k in bad})
                reason = f"{kinds[0]}Changed" if len(kinds) == 1 else "QoSChanged"
                out.append(condition("RailQoSDrift", reason, f"{label}: " + "; ".join(
                    f"{k} {qos.get(k)}, declared {qos_want[k]}" for k in bad), pci, "qos", "reconfigure"))
    return out


def _process_conditions(observed, expect):
    procs = observed.get("processes") or {}
    threshold = expect.get("d_state_min_age_s", 300)
    out = []
    for text in procs.get("unparsed") or []:
        pid = text.split("/stat:")[0].rsplit("/", 1)[-1]
        out.append(condition("DStateProcess", "ProcStatUnreadable", text, f"pid {pid}", "processes", "investigate",
                             status="Unknown"))
    for proc in procs.get("d_state") or []:
        if proc["age_s"] is not None and proc["age_s"] < threshold:
            continue
        age = "unknown time" if proc["age_s"] is None else f"{int(proc['age_s'])} s"
        out.append(condition("DStateProcess", "ProcessStuckInDState",
                             f"pid {proc['pid']} ({proc['cmd']}) in uninterruptible sleep (D) for {age}, "
                             f"threshold {threshold} s", f"pid {proc['pid']}", "processes", "investigate"))
    return out


def evaluate(hw, observed, expect):
    """Every condition of a node (see the module docstring), GPU checks first, then Xid, PCIe,
    rails in rail order and processes. ``hw`` is the discovery role's ``gpunode_hw`` fact,
    ``observed`` what ``node_health`` read, ``expect`` the declared values (``num_vfs``,
    ``roce_accl``, ``qos``, ``link_speed_gbps``, ``xids``, ``d_state_min_age_s``,
    ``pcie_gpu_speed``); a declared value left out is not checked. Only the parts ``observed``
    holds are checked (``nvidia_smi``, ``kernel_log``, ``pcie``, ``rails``, ``processes``)."""
    out = []
    if "nvidia_smi" in observed:
        out += _gpu_conditions(hw, observed, expect)
    if "kernel_log" in observed:
        out += _xid_conditions(hw, observed, expect)
    if "pcie" in observed:
        out += _pcie_conditions(hw, observed, expect)
    if "rails" in observed:
        out += _rail_conditions(hw, observed, expect)
    if "processes" in observed:
        out += _process_conditions(observed, expect)
    return out
