# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Rail neighbours: the switch and switch port at the far end of each host port (stdlib only, Python 3.9+).

Formats (the public outputs these parsers were written against):

- ``lldpctl -f keyvalue`` (lldpd): one ``lldp.<interface>.<key>=<value>`` line per TLV value, e.g.
  ``lldp.eth0.chassis.name=sw-filer-f06.dc42``, ``lldp.eth0.port.local=512``, ``lldp.eth0.port.descr=xe-0/0/1``
  (Juniper QFX5100 neighbours, https://github.com/Solvik/netbox-agent tests/fixtures/lldp/qfx.txt). The port id is
  ``port.ifname``, ``port.local``, ``port.mac`` or ``port.ip`` by its subtype (lldpd src/client/display.c);
  an interface name may itself contain dots (``bond0.100``). An interface with two neighbours repeats its keys
  from ``rid``. No output means no neighbour.
- ``lldpctl -f json`` (lldpd 0.9+): ``{"lldp": {"interface": {...} or [{name: {...}}, ...]}}``, the chassis keyed
  by its name (``{"chassis": {"sw1": {"id": {"type", "value"}, ...}}}``), and ``-f json0`` (every value a list of
  objects, ``name``/``value`` members), both as lldpd's JSON writers print them (src/client/jansson_writer.c).
- ``ibnetdiscover`` (infiniband-diags): per node a block of ``vendid=``/``devid=``/``sysimgguid=``/
  ``switchguid=``/``caguid=`` lines, a node line (``Switch	129 "S-<guid>"		# "<description>" enhanced port 0
  lid 1 lmc 0`` or ``Ca	1 "H-<guid>"		# "<host> mlx5_0"``) and one line per connected port
  (``[1]	"H-<guid>"[1](<port guid>) 		# "<host> mlx5_2" lid 22 2xNDR`` on a switch;
  ``[1](<port guid>) 	"S-<guid>"[17]		# lid 5 lmc 0 "<switch description>" lid 1 4xNDR`` on a CA), as printed
  by an MQM9700 NDR fabric (https://github.com/charlie0129/blog content/post/ib-perf-test/index.md). Lines of
  ``...`` (a published excerpt's elision) are skipped.
"""

from __future__ import annotations

import json
import re

from ansible_collections.mlplatform.gpunode.plugins.module_utils.parsing import ParseError

LLDP_TOOL = "lldpctl -f keyvalue"
LLDP_JSON_TOOL = "lldpctl -f json"
IB_TOOL = "ibnetdiscover"

# The first key of a keyvalue line after the interface name (lldpd's display.c element names).
_LLDP_KEYS = ("via", "rid", "age", "chassis", "port", "vlan", "ppvid", "pi", "unknown-tlvs", "lldp-med", "dot3",
              "dot1", "custom-tlvs", "mgmt", "status", "ttl")
_LLDP_LINE = re.compile(r"^lldp\.(?P<iface>.+?)\.(?P<key>(?:" + "|".join(re.escape(k) for k in _LLDP_KEYS)
                        + r")(?:\..*)?)=(?P<value>.*)$")


def _neighbour(values):
    """One neighbour from its keyvalue pairs: ``{switch, switch_id, port, port_id, port_descr, mgmt_ip, via}``."""
    port_id = next((values[k] for k in ("port.ifname", "port.local", "port.mac", "port.ip") if values.get(k)), None)
    descr = values.get("port.descr")
    # Juniper and others send a locally assigned number (the ifIndex) as the port id and the name as its
    # description: the name is what a person reads on the switch.
    port = values.get("port.ifname") or (descr if descr and (port_id is None or port_id.isdigit()) else port_id)
    return {"switch": values.get("chassis.name") or values.get("chassis.mac") or values.get("chassis.local"),
            "switch_id": values.get("chassis.mac") or values.get("chassis.local") or values.get("chassis.name"),
            "port": port, "port_id": port_id, "port_descr": descr,
            "mgmt_ip": values.get("chassis.mgmt-ip"), "via": values.get("via")}


def parse_lldpctl_keyvalue(text, unparsed=None):
    """``{interface: [neighbour, ...]}`` from ``lldpctl -f keyvalue``; ``{}`` for no output (no neighbour).

    A line of no known form raises ParseError, or, with a list ``unparsed``, is appended to it as
    ``{"line": N, "text": ...}`` and the other lines are read (lldpd versions add keys)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    if not isinstance(text, str):
        raise ParseError(LLDP_TOOL, f"text output, got {type(text).__name__}")
    current = {}  # interface -> list of value dicts
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if not line.strip():
            continue
        m = _LLDP_LINE.match(line)
        if not m:
            if unparsed is not None:
                unparsed.append({"line": lineno, "text": raw[:300]})
                continue
            raise ParseError(LLDP_TOOL, "lines 'lldp.<interface>.<key>=<value>'", raw, lineno)
        iface, key, value = m.group("iface"), m.group("key"), m.group("value")
        entries = current.setdefault(iface, [{}])
        if key in ("via", "rid") and key in entries[-1]:  # a second neighbour on the same interface
            entries.append({})
        entries[-1].setdefault(key, value)
    return {iface: [_neighbour(v) for v in entries] for iface, entries in current.items()}


def _first(value):
    """json0 wraps every value in a list of objects; the plain json writer does not."""
    while isinstance(value, list):
        value = value[0] if value else None
    return value


def _json_value(obj, key):
    value = _first((obj or {}).get(key))
    if isinstance(value, dict) and "value" in value:
        value = value["value"]
    return value if isinstance(value, str) else None


def _json_neighbour(name, data):
    chassis = _first(data.get("chassis")) or {}
    chassis_name = _json_value(chassis, "name")
    if chassis_name is None and len(chassis) == 1 and isinstance(next(iter(chassis.values())), dict):
        chassis_name, chassis = next(iter(chassis.items()))  # plain json: the chassis keyed by its name
    chassis_id = _first(chassis.get("id")) or {}
    port = _first(data.get("port")) or {}
    port_id = _first(port.get("id")) or {}
    values = {"chassis.name": chassis_name, "chassis.mgmt-ip": _json_value(chassis, "mgmt-ip"),
              "port.descr": _json_value(port, "descr"), "via": _json_value(data, "via")}
    if isinstance(chassis_id, dict) and chassis_id.get("value"):
        values["chassis." + ("mac" if chassis_id.get("type") == "mac" else "local")] = str(chassis_id["value"])
    if isinstance(port_id, dict) and port_id.get("value"):
        kind = {"ifname": "port.ifname", "mac": "port.mac", "ip": "port.ip"}.get(port_id.get("type"), "port.local")
        values[kind] = str(port_id["value"])
    return _neighbour({k: v for k, v in values.items() if v is not None})


def parse_lldpctl_json(text):
    """``{interface: [neighbour, ...]}`` from ``lldpctl -f json`` or ``-f json0``."""
    try:
        doc = json.loads(text) if (text or "").strip() else {}
    except ValueError as exc:
        raise ParseError(LLDP_JSON_TOOL, f"JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise ParseError(LLDP_JSON_TOOL, "a JSON object with 'lldp'")
    lldp = _first(doc.get("lldp")) or {}
    interfaces = lldp.get("interface") if isinstance(lldp, dict) else None
    out = {}
    if interfaces is None:
        return out
    if isinstance(interfaces, dict):
        interfaces = [{name: data} for name, data in interfaces.items()]
    if not isinstance(interfaces, list):
        raise ParseError(LLDP_JSON_TOOL, "'lldp.interface' as an object or a list")
    for item in interfaces:
        if not isinstance(item, dict):
            raise ParseError(LLDP_JSON_TOOL, "interface entries as objects")
        if "name" in item and isinstance(item.get("name"), str):  # json0
            out.setdefault(item["name"], []).append(_json_neighbour(item["name"], item))
            continue
        for name, data in item.items():
            for entry in data if isinstance(data, list) else [data]:
                out.setdefault(name, []).append(_json_neighbour(name, entry or {}))
    return out


_IB_HEADER = re.compile(r"^(vendid|devid|sysimgguid|switchguid|caguid|routerguid)=\S+")
_IB_NODE = re.compile(r'^(?P<type>Switch|Ca|Rt)\s+(?P<ports>\d+)\s+"(?P<kind>[SHR])-(?P<guid>[^"]+)"\s*'
                      r'#\s*"(?P<desc>.*?)"(?P<rest>.*)$')
_IB_LINK = re.compile(r'^\[(?P<port>\d+)\](?:\((?P<port_guid>[^)]*)\))?\s+"(?P<rkind>[SHR])-(?P<rguid>[^"]+)"'
                      r'\[(?P<rport>\d+)\](?:\((?P<rport_guid>[^)]*)\))?\s*#\s*(?P<comment>.*)$')
_IB_LID = re.compile(r"\blid (\d+)")
_IB_SPEED = re.compile(r"\b(\d+x[A-Z]+)\s*$")
_IB_KINDS = {"S": "Switch", "H": "Ca", "R": "Rt"}


def parse_ibnetdiscover(text):
    """``[{type, guid, desc, ports, lid, links: [{port, remote_type, remote_guid, remote_port, remote_desc,
    remote_lid, speed}]}]`` from ``ibnetdiscover``: every node and its connected ports as printed."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    if not isinstance(text, str) or not text.strip():
        raise ParseError(IB_TOOL, "the fabric's topology (no output)")
    nodes, node = [], None
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#") or line.startswith("...") or _IB_HEADER.match(line):
            continue
        m = _IB_NODE.match(line)
        if m:
            lid = _IB_LID.search(m.group("rest"))
            node = {"type": m.group("type"), "guid": m.group("guid"), "desc": m.group("desc"),
                    "ports": int(m.group("ports")), "lid": int(lid.group(1)) if lid else None, "links": []}
            nodes.append(node)
            continue
        m = _IB_LINK.match(line)
        if m and node is not None:
            comment = m.group("comment")
            quoted = re.search(r'"(.*?)"', comment)
            lids = _IB_LID.findall(comment)
            speed = _IB_SPEED.search(comment)
            # On a switch port the comment is `"<remote desc>" lid <remote lid> <speed>`; on a CA port it is
            # `lid <own lid> lmc <n> "<remote desc>" lid <remote lid> <speed>`: the remote's lid is the last one.
            node["links"].append({
                "port": int(m.group("port")), "remote_type": _IB_KINDS[m.group("rkind")],
                "remote_guid": m.group("rguid"), "remote_port": int(m.group("rport")),
                "remote_desc": quoted.group(1) if quoted else None,
                "remote_lid": int(lids[-1]) if lids else None, "speed": speed.group(1) if speed else None})
            continue
        raise ParseError(IB_TOOL, "node blocks (vendid=..., 'Switch|Ca <ports> \"<guid>\" # \"<desc>\"', "
                                  "'[port] \"<remote>\"[port]' lines)", raw, lineno)
    if not nodes:
        raise ParseError(IB_TOOL, "at least one Switch or Ca node")
    return nodes


def guid_key(guid):
    """A GUID as a comparison key: lower-case hex without ``0x`` or colons (``b83f:d203:004d:0ff0`` in sysfs,
    ``b83fd203004d0ff0`` in ibnetdiscover)."""
    text = str(guid or "").strip().lower()
    return (text[2:] if text.startswith("0x") else text).replace(":", "")


def _ca_links(nodes):
    """``(CA node guid, CA node description, {switch, switch_guid, port, speed})`` for every CA port on a switch, from
    the switches' port lines, then the CAs' own (the first seen of a CA wins where both are printed)."""
    switches = {n["guid"]: n for n in nodes if n["type"] == "Switch"}
    for node in nodes:
        if node["type"] == "Switch":
            for link in node["links"]:
                if link["remote_type"] == "Ca":
                    yield link["remote_guid"], link["remote_desc"], {
                        "switch": node["desc"], "switch_guid": node["guid"], "port": link["port"],
                        "speed": link["speed"]}
        elif node["type"] == "Ca":
            for link in node["links"]:
                if link["remote_type"] == "Switch":
                    switch = switches.get(link["remote_guid"], {})
                    yield node["guid"], node["desc"], {
                        "switch": switch.get("desc") or link["remote_desc"], "switch_guid": link["remote_guid"],
                        "port": link["remote_port"], "speed": link["speed"]}


def ib_neighbours_by_guid(nodes):
    """``{node guid key: {switch, switch_guid, port, speed}}``: the switch port each CA (by its node GUID, as sysfs
    ``node_guid`` gives it) reaches."""
    out = {}
    for guid, _desc, entry in _ca_links(nodes):
        out.setdefault(guid_key(guid), entry)
    return out


def ib_neighbours(nodes):
    """``{(host, device): {switch, switch_guid, port, speed}}``: the switch port each HCA port reaches, by the CA's
    node description ``<host> <device>`` (what ``ibnetdiscover`` prints for a CA once rdma-ndd set it: the host
    name and the RDMA device)."""
    out = {}
    for _guid, desc, entry in _ca_links(nodes):
        if desc and " " in desc.strip():
            out.setdefault(tuple(desc.strip().rsplit(" ", 1)), entry)
    return out
