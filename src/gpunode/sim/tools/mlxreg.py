"""Simulated ``mlxreg``: the ROCE_ACCL access register (runtime, lost at reset/reboot).

Format: real-outputs/mlxreg-roce-accl-get-adaptive-routing.txt (``Sending access register...``,
``Field Name | Data`` table, 0x%08x values). The register lives in ``run/roce_accl.json`` per
function (PCI address), so a reboot (run/ deleted) brings back the firmware defaults below. Defaults: the sample's
enables read with adaptive_routing_forced_en cleared (the sample shows it after a ``--set``) —
inferred from the sample and hardware-facts.md "Adaptive routing".
"""

from __future__ import annotations

import sys

from .state import HostState

REGISTERS = ("ROCE_ACCL",)
# Field order as printed in the sample.
FIELDS = (
    "roce_adp_retrans_field_select", "roce_tx_window_field_select", "roce_slow_restart_field_select",
    "roce_slow_restart_idle_field_select", "min_ack_timeout_limit_disabled_field_select",
    "adaptive_routing_forced_en_field_select", "selective_repeat_forced_en_field_select",
    "dc_half_handshake_en_field_select", "ack_dscp_force_field_select",
    "roce_adp_retrans_en", "roce_tx_window_en", "roce_slow_restart_en", "roce_slow_restart_idle_en",
    "min_ack_timeout_limit_disabled", "adaptive_routing_forced_en", "selective_repeat_forced_en",
    "dc_half_handshake_en", "ack_dscp_force", "ack_dscp",
)
DEFAULTS = {name: 0 for name in FIELDS}
DEFAULTS.update({
    "roce_adp_retrans_field_select": 1, "roce_tx_window_field_select": 1, "roce_slow_restart_field_select": 1,
    "roce_slow_restart_idle_field_select": 1, "min_ack_timeout_limit_disabled_field_select": 1,
    "adaptive_routing_forced_en_field_select": 1, "selective_repeat_forced_en_field_select": 1,
    "roce_adp_retrans_en": 1, "roce_slow_restart_en": 1,
})
# Read-only capability bits (the *_field_select rows) and the width of each writable field.
WIDTH = {name: 1 for name in FIELDS}
WIDTH["ack_dscp"] = 6
RULE = "=" * 60


def read_register(state: HostState, address: str) -> dict[str, int]:
    """The ROCE_ACCL fields of one NIC function (defaults after every boot)."""
    return {**DEFAULTS, **state.run_get("roce_accl", {}).get(address, {})}


def _usage(tool: str) -> int:
    sys.stderr.write(f"Usage: {tool} -d <device> --reg_name ROCE_ACCL (--get | --set \"field=value[,...]\" [--yes])\n")
    return 1


def run(argv: list[str], tool: str = "mlxreg") -> int:
    dev = reg = setting = None
    get = yes = False
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("-d", "--device", "--reg_name", "--set") and i + 1 < len(argv):
            value = argv[i + 1]
            if arg in ("-d", "--device"):
                dev = value
            elif arg == "--reg_name":
                reg = value
            else:
                setting = value
            i += 2
            continue
        if arg == "--get":
            get = True
        elif arg in ("--yes", "-y"):
            yes = True
        else:
            return _usage(tool)
        i += 1
    if not dev or not reg or get == (setting is not None):
        return _usage(tool)
    state = HostState()
    rec = state.resolve_nic(dev)
    if rec is None:
        sys.stdout.write(f"-E- Failed to open device: \"{dev}\", No such file or directory\n")
        return 1
    if reg.upper() not in REGISTERS:
        sys.stdout.write(f"-E- Register: {reg} is not supported\n")
        return 1
    if get:
        fields = read_register(state, rec["address"])
        lines = ["Sending access register...", f"{'Field Name':<47}| Data", RULE]
        lines += [f"{name:<47}| 0x{fields[name]:08x}" for name in FIELDS]
        lines.append(RULE)
        sys.stdout.write("\n".join(lines) + "\n")
        return 0
    wanted = {}
    for item in setting.split(","):
        name, sep, value = item.strip().partition("=")
        if not sep or name not in FIELDS:
            sys.stdout.write(f"-E- Unknown field name: {name}\n")
            return 1
        if name.endswith("_field_select"):
            sys.stdout.write(f"-E- Field {name} is read-only\n")
            return 1
        try:
            number = int(value, 0)
        except ValueError:
            sys.stdout.write(f"-E- Invalid value: {value} for field {name}\n")
            return 1
        if not 0 <= number < (1 << WIDTH[name]):
            sys.stdout.write(f"-E- Value 0x{number:x} out of range for field {name}\n")
            return 1
        wanted[name] = number
    if not yes:
        sys.stdout.write("You are about to send access register: ROCE_ACCL with the following data:\n")
        for name, number in wanted.items():
            sys.stdout.write(f"{name:<47}| 0x{number:08x}\n")
        sys.stdout.write("Do you want to continue ? (y/n) [n] : ")
        sys.stdout.flush()
        answer = sys.stdin.readline().strip().lower()
        if not sys.stdin.isatty():
            sys.stdout.write(answer + "\n")
        if answer not in ("y", "yes"):
            sys.stdout.write("-E- Aborted by user\n")
            return 1
    with state.locked():
        data = state.run_get("roce_accl", {})
        data.setdefault(rec["address"], {}).update(wanted)
        state.run_put("roce_accl", data)
    sys.stdout.write("Sending access register...\n")
    return 0
