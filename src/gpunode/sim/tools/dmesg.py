"""Simulated kernel log: ``dmesg`` of a simulated host (its GPUs' NVRM lines; the host's own kernel
is the container host's and is not shown).

Formats: ``dmesg`` (``[6781741.548779] NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>',
name=<unknown>, GPU has fallen off the bus.``) from real-outputs-day-two/dmesg-xid79-sxid-gpud-readme.txt
and ``dmesg --time-format=iso`` (``2024-11-15T12:02:03,470068+00:00 NVRM: Xid ...``) from
dmesg-xid48-63-94-gpud-iso.txt; ``-T``/``--ctime`` and ``-t``/``--notime`` follow util-linux.

The log is "since boot": the boot is the time the host's sysfs tree was last materialized (its
marker file's mtime), and every ``xid`` fault of ``hw.json`` (``gpunode sim fault H xid <gpu> 79``)
shows the real line sequence of that Xid a minute after boot (or now, if the host booted less
than a minute ago). Without faults the log holds the kernel banner only.
"""

from __future__ import annotations

import os
import sys
import time

from .state import HostState

MARKER = ".gpunode-sim"
BANNER = ("Linux version 6.1.0-28-amd64 (debian-kernel@lists.debian.org) (gcc-12 (Debian 12.2.0-14) 12.2.0, "
          "GNU ld (GNU Binutils for Debian) 2.40) #1 SMP PREEMPT_DYNAMIC Debian 6.1.119-1 (2024-11-22)")
# Line texts of the real samples (the addresses and serials are the host's).
XID_TEXT = {
    48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at physAddr "
        "0x12bac1c3e0 partition 2, subpartition 1.",
    63: "Row Remapper: New row (0x00000012bac1c3e0) marked for remapping, reset gpu to activate.",
    79: "GPU has fallen off the bus.",
    94: "Contained: SM (0x1). RST: No, D-RST: No",
}


def _usage() -> int:
    sys.stderr.write("dmesg: unsupported option (simulated: [--time-format=iso|ctime|notime] [-T] [-t])\n")
    return 1


def _lines(state: HostState, booted: float, now: float) -> list[tuple[float, str]]:
    """``(seconds since boot, message)`` of every line, in order."""
    out = [(0.0, BANNER)]
    faults = (state.faults() or {}).get("xid") or {}
    if not faults:
        return out
    from .nvidia_smi import _gpus  # noqa: PLC0415 - only when a GPU fault needs its serial and UUID

    gpus = {g.rec["address"]: g for g in _gpus(state)}
    at = min(60.0, max(5.0, now - booted))
    for address, xids in sorted(faults.items()):
        gpu = gpus.get(address)
        short = address[:-2]  # 0000:91:00.0 -> 0000:91:00, as NVRM prints it
        for xid in xids:
            if xid == 79 and gpu is not None:
                out.append((at, f"NVRM: GPU at PCI:{short}: {gpu.uuid}"))
                out.append((at, f"NVRM: GPU Board Serial Number: {gpu.serial}"))
            out.append((at, f"NVRM: Xid (PCI:{short}): {xid}, pid='<unknown>', name=<unknown>, {XID_TEXT[xid]}"))
            if xid == 79:
                out.append((at, f"NVRM: GPU {address}: GPU has fallen off the bus."))
                if gpu is not None:
                    out.append((at, f"NVRM: GPU {address}: GPU serial number is {gpu.serial}."))
            at += 0.028
    return out


def _iso(epoch: float) -> str:
    micro = int(round((epoch % 1) * 1_000_000)) % 1_000_000
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch)) + f",{micro:06d}+00:00"


def run(argv: list[str], tool: str = "dmesg") -> int:
    fmt = "raw"
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--time-format="):
            fmt = arg.split("=", 1)[1]
        elif arg == "--time-format" and i + 1 < len(argv):
            fmt = argv[i + 1]
            i += 1
        elif arg in ("-T", "--ctime"):
            fmt = "ctime"
        elif arg in ("-t", "--notime"):
            fmt = "notime"
        else:
            return _usage()
        i += 1
    if fmt not in ("raw", "iso", "ctime", "notime"):
        sys.stderr.write(f"dmesg: unknown time format: {fmt}\n")
        return 1
    state = HostState()
    marker = state.sys / MARKER
    now = time.time()
    booted = os.stat(marker).st_mtime if marker.exists() else now
    for offset, message in _lines(state, booted, now):
        if fmt == "iso":
            prefix = _iso(booted + offset) + " "
        elif fmt == "ctime":
            prefix = "[" + time.strftime("%a %b %e %H:%M:%S %Y", time.gmtime(booted + offset)) + "] "
        elif fmt == "notime":
            prefix = ""
        else:
            prefix = f"[{offset:12.6f}] "
        sys.stdout.write(prefix + message + "\n")
    return 0
