"""Simulated ``mlnx_qos -i <if> [--trust pcp|dscp] [--pfc a,b,c,d,e,f,g,h]`` (mlnx-tools).

Format: real-outputs/roce-lossless-l3-setup-mlnx_qos-cma_roce_tos-netarbiter.txt (DCBX mode,
trust state, the dscp2prio table with trust dscp, Cable len, the PFC table, tc/priority lines).
The state is volatile (``run/qos.json``, per netdev): after boot trust is pcp and PFC is off on
every priority; a reboot clears it. ``DCBX mode`` is ``Firmware controlled`` when the port's
current NV config has ``LLDP_NB_DCBX_P<n>`` set (mlxconfig + reboot), else ``OS controlled``.
Input errors exit 2 with an optparse-style message, as the real Python tool does (wording inferred).
"""

from __future__ import annotations

import os
import sys

from .state import HostState

USAGE = "Usage: mlnx_qos -i <interface> [options]\n\n"
DEFAULT = {"trust": "pcp", "pfc": [0] * 8}
# Default priority -> traffic class map (tc 0 holds priority 1, tc 1 priority 0; as in the sample).
PRIO_OF_TC = (1, 0, 2, 3, 4, 5, 6, 7)


def read_qos(state: HostState, netdev: str) -> dict:
    return {**DEFAULT, **state.run_get("qos", {}).get(netdev, {})}


def dcbx_mode(state: HostState, netdev: str) -> str:
    """``Firmware controlled`` when the port's current NV config has LLDP_NB_DCBX_P<n> on (the NIC
    firmware negotiates PFC with the switch), else ``OS controlled``."""
    rec = next((r for r in state.nics()
                if os.path.exists(state.sys_path("bus", "pci", "devices", r["address"], "net", netdev))), None)
    if rec is None:
        return "OS controlled"
    card = state.card_state(rec["slot"])
    firmware = card["current"].get(f"LLDP_NB_DCBX_P{rec['function'] + 1}", 0)
    return "Firmware controlled" if firmware else "OS controlled"


def render(qos: dict, dcbx: str = "OS controlled") -> str:
    lines = [f"DCBX mode: {dcbx}", f"Priority trust state: {qos['trust']}"]
    if qos["trust"] == "dscp":
        lines.append("dscp2prio mapping:")
        for prio in range(8):
            dscps = ",".join(f"{d:02d}" for d in range(prio * 8 + 7, prio * 8 - 1, -1))
            lines.append(f"        prio:{prio} dscp:{dscps},")
    lines += ["Cable len: 7", "PFC configuration:",
              "        priority    0   1   2   3   4   5   6   7",
              "        enabled     " + "".join(f"{v}   " for v in qos["pfc"])]
    for tc, prio in enumerate(PRIO_OF_TC):
        lines += [f"tc: {tc} ratelimit: unlimited, tsa: vendor", f"         priority:  {prio}"]
    return "\n".join(lines) + "\n"


def _error(msg: str) -> int:
    sys.stderr.write(USAGE + f"mlnx_qos: error: {msg}\n")
    return 2


def run(argv: list[str], tool: str = "mlnx_qos") -> int:
    opts: dict[str, str] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        key, sep, value = arg.partition("=")
        if key in ("-i", "--interface", "--trust", "--pfc", "-f"):
            if not sep:
                if i + 1 >= len(argv):
                    return _error(f"{key} option requires an argument")
                value = argv[i + 1]
                i += 1
            opts[{"-i": "interface", "--interface": "interface", "-f": "pfc"}.get(key, key.lstrip("-"))] = value
        else:
            return _error(f"no such option: {arg}")
        i += 1
    if "interface" not in opts:
        return _error("Interface name is required")
    netdev = opts["interface"]
    state = HostState()
    if not os.path.exists(state.sys_path("class", "net", netdev)):
        sys.stderr.write(f"Interface {netdev} doesn't exist\n")
        return 1
    if state.netdev_attr(netdev, "type") != "1":  # IPoIB: no DCB (no PFC on InfiniBand)
        sys.stderr.write(f"Netlink error: {netdev}: DCB is not supported on this interface\n")
        return 1
    change = {}
    if "trust" in opts:
        if opts["trust"] not in ("pcp", "dscp"):
            return _error(f"invalid trust state '{opts['trust']}' (choose pcp or dscp)")
        change["trust"] = opts["trust"]
    if "pfc" in opts:
        items = opts["pfc"].split(",")
        if len(items) != 8 or any(item not in ("0", "1") for item in items):
            return _error(f"--pfc takes 8 comma-separated values of 0 or 1, got '{opts['pfc']}'")
        change["pfc"] = [int(item) for item in items]
    if change:
        with state.locked():
            data = state.run_get("qos", {})
            data[netdev] = {**read_qos(state, netdev), **change}
            state.run_put("qos", data)
    sys.stdout.write(render(read_qos(state, netdev), dcbx_mode(state, netdev)))
    return 0
