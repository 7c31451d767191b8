"""Simulated ``mlxfwreset -d <dev> [-y] [-l <level>] reset`` (MFT).

A firmware reset here promotes nothing by itself: the NV config next-boot values become current
at ``gpunode sim reboot`` (README §3), which the reboot orchestration runs after the reset. It
does what a reset does to runtime state: the card's ROCE_ACCL registers return to their defaults
(hardware-facts.md "Adaptive routing": the register is lost at reset/reboot). Output layout of MFT's
mlxfwreset (inferred; no sample in real-outputs).
"""

from __future__ import annotations

import sys

from .state import HostState


def run(argv: list[str], tool: str = "mlxfwreset") -> int:
    dev = None
    yes = False
    rest = []
    i = 0
    while i < len(argv):
        if argv[i] in ("-d", "--device") and i + 1 < len(argv):
            dev = argv[i + 1]
            i += 2
            continue
        if argv[i] in ("-l", "--level") and i + 1 < len(argv):
            i += 2
            continue
        if argv[i] in ("-y", "--yes"):
            yes = True
        else:
            rest.append(argv[i])
        i += 1
    if not dev or rest not in (["reset"], ["r"], ["q"], ["query"]):
        sys.stdout.write("-E- Usage: mlxfwreset -d <device> [-y] reset|query\n")
        return 1
    state = HostState()
    rec = state.resolve_nic(dev)
    if rec is None:
        sys.stdout.write(f"-E- Failed to open device: {dev}\n")
        return 1
    if state.has_fault("mlxconfig_reject", rec["address"]):
        sys.stdout.write(f"-E- The device {dev} does not support firmware reset (device locked)\n")
        return 1
    if rest[0] in ("q", "query"):
        sys.stdout.write("Reset-levels:\n0: Driver, PCI link, network link will remain up (\"live-Patch\")"
                         "  -Supported     (default)\n3: Driver restart and PCI reset"
                         "                                  -Supported\n")
        return 0
    sys.stdout.write(f"The reset level for device, {dev} is:\n\n3: Driver restart and PCI reset\n")
    if not yes:
        sys.stdout.write("Continue with reset?[y/N] ")
        sys.stdout.flush()
        answer = sys.stdin.readline().strip().lower()
        if not sys.stdin.isatty():
            sys.stdout.write(answer + "\n")
        if answer not in ("y", "yes"):
            sys.stdout.write("-E- Aborted by user.\n")
            return 1
    else:
        sys.stdout.write("Continue with reset?[y/N] y\n")
    card = state.card_state(rec["slot"])
    with state.locked():
        regs = state.run_get("roce_accl", {})
        for addr in card["functions"]:
            regs.pop(addr, None)
        state.run_put("roce_accl", regs)
    for step in ("Sending Reset Command To Fw", "Stopping Driver", "Resetting PCI", "Starting Driver",
                 "Restarting MST"):
        sys.stdout.write(f"-I- {step:<40}-Done\n")
    sys.stdout.write("-I- FW was loaded successfully.\n")
    return 0
