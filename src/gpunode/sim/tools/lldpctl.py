"""Simulated ``lldpctl`` (lldpd): the switch at the far end of each cabled port, as lldpd would have learned it.

The simulator stands in for the wire: what lldpd hears is the host's cabling (``cabling.json``, README §7), on
ports whose link is up. Formats: ``-f keyvalue`` as lldpd prints it (``lldp.<interface>.<key>=<value>``;
real-outputs-day-two/lldpctl-keyvalue-juniper-qfx-*.txt) with the port id an ``ifname`` (as Cumulus and SONiC
switches send it), ``-f json`` and ``-f json0`` as lldpd's JSON writers print them; the default ``plain`` format
is not simulated. With the switches' LLDP off (``lldp: false``) nothing is heard: no output, exit 0. Without
Debian's lldpd installed (``/usr/sbin/lldpd``) it exits 127, as a missing command would.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

from .state import HostState

DESCR = "Cumulus Linux version 5.9.1 running on NVIDIA SN5600"


def _chassis_mac(switch: str) -> str:
    digest = hashlib.sha256(switch.encode()).digest()
    return "b8:ce:f6:" + ":".join(f"{b:02x}" for b in digest[:3])


def _mgmt_ip(switch: str) -> str:
    digest = hashlib.sha256(switch.encode()).digest()
    return f"10.254.{digest[3]}.{max(1, digest[4])}"


def neighbours(state: HostState) -> list[tuple[str, dict]]:
    """``[(netdev, {"switch", "port"})]`` for each cabled port with its link up, in netdev order."""
    cabling = state.cabling()
    if not cabling.get("lldp", True):
        return []
    out = []
    for address, link in sorted((cabling.get("links") or {}).items()):
        net = state.sys / "bus" / "pci" / "devices" / address / "net"
        netdevs = sorted(p.name for p in net.iterdir()) if net.is_dir() else []
        for netdev in netdevs:
            if state.netdev_attr(netdev, "operstate") == "up":
                out.append((netdev, link))
    return sorted(out)


def keyvalue(found: list[tuple[str, dict]]) -> str:
    lines, rids = [], {}
    for netdev, link in found:
        rid = rids.setdefault(link["switch"], len(rids) + 1)
        prefix = f"lldp.{netdev}."
        lines += [f"{prefix}via=LLDP", f"{prefix}rid={rid}", f"{prefix}age=0 day, 00:42:17",
                  f"{prefix}chassis.mac={_chassis_mac(link['switch'])}", f"{prefix}chassis.name={link['switch']}",
                  f"{prefix}chassis.descr={DESCR}", f"{prefix}chassis.mgmt-ip={_mgmt_ip(link['switch'])}",
                  f"{prefix}chassis.Bridge.enabled=on", f"{prefix}chassis.Router.enabled=on",
                  f"{prefix}port.ifname={link['port']}", f"{prefix}port.descr={link['port']}",
                  f"{prefix}port.mfs=9216"]
    return "".join(line + "\n" for line in lines)


def as_json(found: list[tuple[str, dict]], json0: bool) -> str:
    if json0:
        interfaces = []
        for netdev, link in found:
            chassis = {"id": [{"type": "mac", "value": _chassis_mac(link["switch"])}],
                       "name": [{"value": link["switch"]}], "descr": [{"value": DESCR}],
                       "mgmt-ip": [{"value": _mgmt_ip(link["switch"])}]}
            port = {"id": [{"type": "ifname", "value": link["port"]}], "descr": [{"value": link["port"]}]}
            interfaces.append({"name": netdev, "via": "LLDP", "chassis": [chassis], "port": [port]})
        return json.dumps({"lldp": [{"interface": interfaces}]}, indent=2) + "\n"
    entries = {netdev: {"via": "LLDP", "rid": str(i + 1), "age": "0 day, 00:42:17",
                        "chassis": {link["switch"]: {"id": {"type": "mac", "value": _chassis_mac(link["switch"])},
                                                     "descr": DESCR, "mgmt-ip": _mgmt_ip(link["switch"])}},
                        "port": {"id": {"type": "ifname", "value": link["port"]}, "descr": link["port"]}}
               for i, (netdev, link) in enumerate(found)}
    # lldpd's writer prints one interface as an object and several as a list of one-key objects.
    interface = entries if len(entries) <= 1 else [{k: v} for k, v in entries.items()]
    return json.dumps({"lldp": {"interface": interface} if entries else {}}, indent=2) + "\n"


#: The real daemon's binary: the simulated lldpctl answers only where Debian's lldpd package is installed
#: ($GPUNODE_SIM_LLDPD overrides the path, for tests on the controller).
LLDPD = "/usr/sbin/lldpd"


def run(argv: list[str], tool: str = "lldpctl") -> int:
    lldpd = os.environ.get("GPUNODE_SIM_LLDPD", LLDPD)
    if not os.path.exists(lldpd):
        sys.stderr.write(f"{tool}: lldpd is not installed ({lldpd}); install the lldpd package\n")
        return 127
    fmt = "plain"
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg == "-f" and args:
            fmt = args.pop(0)
        elif arg.startswith("-f") and len(arg) > 2:
            fmt = arg[2:]
        elif arg.startswith("-"):
            sys.stderr.write(f"{tool}: option {arg} is not simulated (only -f keyvalue|json|json0)\n")
            return 1
    found = neighbours(HostState())
    if fmt == "keyvalue":
        sys.stdout.write(keyvalue(found))
    elif fmt in ("json", "json0"):
        sys.stdout.write(as_json(found, fmt == "json0"))
    else:
        sys.stderr.write(f"{tool}: format {fmt!r} is not simulated (keyvalue, json, json0)\n")
        return 1
    return 0
