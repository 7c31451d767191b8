# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Topology from the fabric: levels per host, the cabling contract of rail-optimized fabrics, Kueue's Topology
(pure functions, stdlib only).

A host's rails and the switch port at the far end of each (``neighbors.py``: LLDP on RoCE rails, ibnetdiscover on
InfiniBand) give its leaf level; the inventory gives the block (``block``) and, where there is no neighbour to read,
the rack. Two fabric designs are told apart by the neighbours themselves:

- **top of rack**: every rail of a host reaches the same leaf; the leaf is the host's rack;
- **rail optimized** (declared per fabric): rail k of every host of a scalable unit reaches leaf k of that unit.
  A unit is the set of leaves its hosts share; its hosts' rails follow one pattern, the *canonical signature*
  (the leaf of each rail), which the most hosts share. A host whose rail reaches another leaf is miscabled: two
  swapped cables show as two rails each on the other's leaf, a rail on a foreign unit's leaf as a leaf that is
  not in the unit's pattern at all. The rack level of a rail-optimized host is its unit, named by the leaf of
  the unit's first rail.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter

HOSTNAME_LABEL = "kubernetes.io/hostname"
_LABEL_VALUE_BAD = re.compile(r"[^A-Za-z0-9_.-]+")


class TopologyError(ValueError):
    """Input the topology cannot use; the message names the host and the field."""


def label_value(text):
    """``text`` as a valid label value: runs of other characters become ``-``, trimmed to 63 characters that begin
    and end alphanumeric (``MF0;POD229-QM97:MQM9700/U1`` -> ``MF0-POD229-QM97-MQM9700-U1``)."""
    value = _LABEL_VALUE_BAD.sub("-", str(text or "")).strip("-_.")[:63].strip("-_.")
    return value


class Labels:
    """Label values for names (switches, units, racks, blocks) that keep distinct names distinct: a name whose
    label_value is empty, or the same as another name's, gets a suffix of its own digest (``leaf-1-3f2a9c``), and
    a name that lost letters (non-ASCII, or nothing left) is named in a warning with the label it got."""

    def __init__(self, warnings):
        self.warnings = warnings
        self.given = {}  # name -> label
        self.owner = {}  # label -> name

    def __call__(self, name, what):
        name = str(name)
        if name in self.given:
            return self.given[name]
        value = label_value(name)
        if not value or self.owner.get(value, name) != name:
            digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:6]
            value = f"{value[:56].rstrip('-_.')}-{digest}" if value else f"x-{digest}"
        if not name.isascii() or value != label_value(name):
            self.warnings.append(f"{what} {name!r}: not a valid label value as it is; labelled {value!r}, a value "
                                 "no other name of the fleet gets")
        self.given[name] = value
        self.owner[value] = name
        return value


def _leaf_of(rail):
    neighbour = rail.get("neighbour") or {}
    return neighbour.get("switch")


def _check(hosts):
    if not isinstance(hosts, dict):
        raise TopologyError("hosts: expected a mapping of host to {fabric, block, rack, rails}")
    for host, data in hosts.items():
        if not isinstance(data, dict) or not isinstance(data.get("rails", []), list):
            raise TopologyError(f"{host}: expected {{fabric, block, rack, rails: [...]}}")
        seen = set()
        for index, rail in enumerate(data.get("rails") or []):
            if not isinstance(rail, dict) or "rail" not in rail:
                raise TopologyError(f"{host}: rails[{index}]: expected {{rail, netdev, neighbour}}")
            number = rail["rail"]
            if isinstance(number, bool) or not isinstance(number, int) or number < 0:
                raise TopologyError(f"{host}: rails[{index}].rail: {number!r} is not a rail number (a whole number "
                                    "from 0)")
            if number in seen:
                raise TopologyError(f"{host}: rails[{index}].rail: rail {number} is listed twice")
            seen.add(number)
            neighbour = rail.get("neighbour")
            if neighbour is not None and not isinstance(neighbour, dict):
                raise TopologyError(f"{host}: rail {number}: neighbour {neighbour!r} is not {{switch, port}}")
            for key in ("switch", "switch_id", "port"):
                value = (neighbour or {}).get(key)
                if value is not None and not isinstance(value, (str, int)) or isinstance(value, bool):
                    raise TopologyError(f"{host}: rail {number}: neighbour.{key} {value!r} is not a name")


def _signature(data):
    return tuple(_leaf_of(r) for r in sorted(data.get("rails") or [], key=lambda r: int(r["rail"])))


def _canonical(signatures):
    """The scalable units of one rail-optimized fabric: canonical signatures, most shared first, each using leaves
    no earlier unit uses (a miscabled host's signature shares leaves with its unit's, so it is never a unit of its
    own). Ties: the signature whose leaves sort in rail order, then by name."""
    counts = Counter(s for s in signatures if any(s))
    order = sorted(counts, key=lambda s: (-counts[s], [x or "" for x in s] != sorted(x or "" for x in s),
                                          [x or "" for x in s]))
    units, used = [], set()
    for sig in order:
        leaves = {x for x in sig if x}
        if leaves & used:
            continue
        units.append(sig)
        used |= leaves
    return units


def _matches(sig, unit):
    """Rails of ``sig`` on the same leaf as in ``unit`` (signatures of hosts with fewer rails are shorter)."""
    return sum(1 for i in range(min(len(sig), len(unit))) if sig[i] and sig[i] == unit[i])


def _nearest(sig, units):
    return max(units, key=lambda u: (_matches(sig, u), -units.index(u)))


def _port_on(data, leaf):
    """The port of ``leaf`` one of the host's rails reaches now (where a swapped cable belongs), or None."""
    for rail in data.get("rails") or []:
        neighbour = rail.get("neighbour") or {}
        if neighbour.get("switch") == leaf:
            return neighbour.get("port")
    return None


def ports_claimed_twice(hosts):
    """Switch ports more than one rail reaches (two hosts, or several rails of one, cabled to one port: a wrong
    cable, or a neighbour read that is stale): ``[{switch, port, rails: [{host, rail, netdev}]}]`` by switch and
    port. A switch is told by its id when the neighbour has one, else by its name."""
    claims = {}
    for host in sorted(hosts):
        for rail in hosts[host].get("rails") or []:
            neighbour = rail.get("neighbour") or {}
            switch, port = neighbour.get("switch"), neighbour.get("port")
            if not switch or port in (None, ""):
                continue
            key = (str(neighbour.get("switch_id") or switch), str(port))
            claims.setdefault(key, {"switch": switch, "port": port, "rails": []})["rails"].append(
                {"host": host, "rail": rail.get("rail"), "netdev": rail.get("netdev") or rail.get("pci_address")})
    return [claims[k] for k in sorted(claims) if len(claims[k]["rails"]) > 1]


def describe_claimed_twice(entry):
    """One line for a switch port several rails reach, naming each of them."""
    return (f"switch {entry['switch']} port {entry['port']} is reached by {len(entry['rails'])} rails: "
            + ", ".join(f"{r['host']} rail {r['rail']} ({r['netdev']})" for r in entry["rails"]))


def plan(hosts, rail_optimized=()):
    """Topology levels and the cabling contract of a fleet, in one pass.

    ``hosts``: host -> ``{fabric, block, rack, rails: [{rail, netdev, pci_address, neighbour: {switch, port} or
    None}]}``; ``block`` and ``rack`` come from the inventory (None when not set); ``rail_optimized``: the fabrics
    declared rail optimized. Returns ``{levels: {host: {block, rack, source}}, miscabled: [...], warnings: [...],
    units: {fabric: [{name, leaves, hosts}]}, claimed_twice: [...]}`` (ports_claimed_twice; distinct names always
    get distinct labels, see Labels); ``miscabled`` entries are ``{fabric, unit, host, rail, netdev,
    expected_switch, expected_port, found_switch, found_port, kind}`` (kind ``swapped`` when the found leaf belongs
    to the host's unit under another rail, ``foreign_leaf`` otherwise).
    """
    _check(hosts)
    rail_optimized = set(rail_optimized or ())
    levels, warnings, miscabled, units_out = {}, [], [], {}
    label = Labels(warnings)
    for host in sorted(hosts):
        for rail in hosts[host].get("rails") or []:
            if not _leaf_of(rail):
                warnings.append(f"{host}: rail {rail['rail']} ({rail.get('netdev') or rail.get('pci_address')}): no "
                                "neighbour (LLDP off or not answering, or the subnet manager not reachable); its "
                                "leaf is unknown")
    by_fabric = {}
    for host, data in hosts.items():
        by_fabric.setdefault(str(data.get("fabric") or "default"), []).append(host)
    for fabric, members in sorted(by_fabric.items()):
        if fabric in rail_optimized:
            sigs = {h: _signature(hosts[h]) for h in members}
            units = _canonical(sigs.values())
            unit_hosts = {u: [] for u in units}
            for host in sorted(members):
                sig = sigs[host]
                if not any(sig) or not units:
                    continue
                unit = _nearest(sig, units)
                unit_hosts[unit].append(host)
                unit_leaves = {x for x in unit if x}
                rails = sorted(hosts[host].get("rails") or [], key=lambda r: int(r["rail"]))
                for index, rail in enumerate(rails[:len(unit)]):
                    expected, found = unit[index], sig[index]
                    if not found or not expected or found == expected:
                        continue
                    neighbour = rail.get("neighbour") or {}
                    miscabled.append({
                        "fabric": fabric, "unit": label(next((x for x in unit if x), ""), "switch"),
                        "host": host, "rail": int(rail["rail"]),
                        "netdev": rail.get("netdev"), "pci_address": rail.get("pci_address"),
                        "expected_switch": expected, "expected_port": _port_on(hosts[host], expected),
                        "found_switch": found, "found_port": neighbour.get("port"),
                        "kind": "swapped" if found in unit_leaves else "foreign_leaf"})
            units_out[fabric] = [{"name": label(next((x for x in u if x), ""), "switch"), "leaves": list(u),
                                  "hosts": unit_hosts[u]} for u in units]
            rack_of = {h: units_out[fabric][units.index(u)]["name"] for u in units for h in unit_hosts[u]}
        else:
            rack_of = {}
            for host in members:
                leaves = [x for x in _signature(hosts[host]) if x]
                if leaves:
                    rack_of[host] = label(Counter(leaves).most_common(1)[0][0], "switch")
        for host in members:
            data = hosts[host]
            rack = rack_of.get(host)
            source = "neighbours" if rack else "inventory"
            if not rack and data.get("rack"):
                rack = label(data["rack"], f"{host}: rack")
            levels[host] = {"block": label(data.get("block") or fabric, f"{host}: block"), "rack": rack or None,
                            "source": source if rack else "none"}
    return {"levels": levels, "miscabled": miscabled, "warnings": warnings, "units": units_out,
            "claimed_twice": ports_claimed_twice(hosts)}


def describe_miscabled(entry):
    """One line for a miscabled rail, naming the host, rail, netdev and the switch ports expected and found."""
    def where(switch, port):
        return f"{switch} port {port}" if port is not None else f"{switch} (any port)"

    what = "cables swapped with another rail" if entry["kind"] == "swapped" else "on a leaf of another scalable unit"
    return (f"{entry['host']} rail {entry['rail']} ({entry.get('netdev') or entry.get('pci_address')}): expected "
            f"{where(entry['expected_switch'], entry['expected_port'])}, found "
            f"{where(entry['found_switch'], entry['found_port'])} ({what}; fabric {entry['fabric']}, unit "
            f"{entry['unit']})")


def node_labels(levels, keys):
    """host -> the Node labels of its levels: ``keys`` maps ``block``/``rack`` to label keys; a level without a value
    gets no label (``kubernetes.io/hostname`` is the kubelet's own)."""
    out = {}
    for host, level in levels.items():
        out[host] = {keys[name]: level[name] for name in ("block", "rack") if keys.get(name) and level.get(name)}
    return out


def topology_object(name, keys, api_version="kueue.x-k8s.io/v1beta2"):
    """Kueue's Topology: the levels block, rack, then ``kubernetes.io/hostname`` (the lowest, as Kueue requires)."""
    levels = [{"nodeLabel": keys[n]} for n in ("block", "rack") if keys.get(n)] + [{"nodeLabel": HOSTNAME_LABEL}]
    return {"apiVersion": api_version, "kind": "Topology", "metadata": {"name": name}, "spec": {"levels": levels}}


def tree(result):
    """The report's tree: ``{block: {rack: [host, ...]}}``, hosts and racks sorted (a host without a rack under
    ``-``)."""
    out = {}
    for host, level in sorted(result["levels"].items()):
        out.setdefault(level["block"], {}).setdefault(level["rack"] or "-", []).append(host)
    return {b: dict(sorted(r.items())) for b, r in sorted(out.items())}
