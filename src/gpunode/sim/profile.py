"""Hardware profiles of the simulated fleet: loading, validation and a flat device view.

A profile is a YAML file in ``profiles/`` (schema: ``profiles/README.md``); device models come from
``profiles/catalog.yaml``. :func:`validate_profile` rejects anything the schema does not allow and
returns a normalized copy (catalogue defaults filled in, NUMA nodes inherited down the tree), so
consumers never need to re-implement defaults. :func:`iter_devices` flattens the PCIe tree into one
record per PCI function, in tree order, with the chain of ancestors the sysfs tree is built from.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

PROFILES_DIR = Path(__file__).resolve().with_name("profiles")
CATALOG_PATH = PROFILES_DIR / "catalog.yaml"

KINDS = ("bridge", "gpu", "nvswitch", "nic", "device")
ROLES = ("compute", "storage", "management", "dpu", "ignored")
LINK_LAYERS = ("Ethernet", "InfiniBand")
BOND_MODES = {
    "balance-rr": 0,
    "active-backup": 1,
    "balance-xor": 2,
    "broadcast": 3,
    "802.3ad": 4,
    "balance-tlb": 5,
    "balance-alb": 6,
}
# PCI class codes written for NIC functions, by link layer (hardware-facts.md "PCI identities").
NIC_CLASS = {"InfiniBand": "0x020700", "Ethernet": "0x020000"}
BRIDGE_CLASS = "0x060400"
# PCIe switch port default (README): Broadcom/PLX PEX89xxx.
DEFAULT_BRIDGE_IDS = {"vendor_id": "0x1000", "device_id": "0xc030"}
DEFAULT_BRIDGE_LINK = ("32.0 GT/s PCIe", 16)
# Default netdev MTU per link layer: 1500 for Ethernet, 4092 for IPoIB with a 4K IB MTU (inferred).
DEFAULT_MTU = {"Ethernet": 1500, "InfiniBand": 4092}
# sysfs ports/<n>/rate strings by speed (ro/sysfs-class-infiniband-h100-ib-bf3-gpud.txt shows the
# 400G form; the others follow the kernel's "<n> Gb/sec (<width>X <speed>)" format, inferred).
RATE_BY_GBPS = {
    400: "400 Gb/sec (4X NDR)",
    200: "200 Gb/sec (4X HDR)",
    100: "100 Gb/sec (4X EDR)",
    50: "50 Gb/sec (2X HDR)",
    25: "25 Gb/sec (1X EDR)",
    10: "10 Gb/sec (1X QDR)",
}

_HEX4 = re.compile(r"^0x[0-9a-f]{4}$")
_HEX2 = re.compile(r"^0x[0-9a-f]{2}$")
_CLASS = re.compile(r"^0x[0-9a-f]{6}$")
_HOST_BRIDGE = re.compile(r"^([0-9a-f]{4}):([0-9a-f]{2})$")
_SLOT = re.compile(r"^([0-9a-f]{4}):([0-9a-f]{2}):([01][0-9a-f])$")
_BDF = re.compile(r"^([0-9a-f]{4}):([0-9a-f]{2}):([01][0-9a-f])\.([0-7])$")
_MAC = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")
_IFNAME = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")
_RDMA = re.compile(r"^[A-Za-z0-9_]{1,63}$")
_DMI_KEY = re.compile(r"^[a-z0-9_]+$")

_TOP = {"name": True, "description": False, "dmi": False, "numa_nodes": True, "pcie": True,
        "bonds": False, "faults": False}
_HOST_BRIDGE_KEYS = {"host_bridge": True, "numa_node": True, "children": False}
_ID_KEYS = {"vendor_id": False, "device_id": False, "subsystem_vendor_id": False, "subsystem_device_id": False}
_NODE_KEYS: dict[str, dict[str, bool]] = {
    "bridge": {"bridge": True, "numa_node": False, "children": False, **_ID_KEYS},
    "gpu": {"gpu": True, "model": True, "numa_node": False},
    "nvswitch": {"nvswitch": True, "model": True, "numa_node": False},
    "nic": {"nic": True, "model": True, "board_id": True, "fw_version": True, "link_layer": True,
            "speed_gbps": True, "functions": True, "sriov_totalvfs": False, "numa_node": False},
    "device": {"device": True, "vendor_id": True, "device_id": True, "class": True, "revision": False,
               "subsystem_vendor_id": False, "subsystem_device_id": False, "numa_node": False},
}
_FUNCTION_KEYS = {"function": True, "netdev": False, "rdma": False, "link_layer": False, "speed_gbps": False,
                  "rate": False, "link": False, "mac": False, "mtu": False, "expect": False}
_EXPECT_KEYS = {"role": True, "rail": False}
_BOND_KEYS = {"name": True, "mode": False, "slaves": True, "rdma": False, "mtu": False}

_CATALOG_KEYS: dict[str, dict[str, bool]] = {
    "nic_models": {"description": True, "lspci_name": True, "vendor_id": True, "device_id": True,
                   "subsystem_vendor_id": True, "subsystem_device_id": True, "revision": True, "hca_type": True,
                   "vendor_part_id": True, "sriov_totalvfs": True, "vf_device_id": True,
                   "pcie_link_speed": True, "pcie_link_width": True},
    "gpu_models": {"description": True, "name": True, "vendor_id": True, "device_id": True,
                   "subsystem_vendor_id": True, "subsystem_device_id": True, "class": True, "revision": True,
                   "memory_mib": True, "power_limit_w": True, "pcie_link_speed": True, "pcie_link_width": True},
    "switch_models": {"description": True, "vendor_id": True, "device_id": True, "subsystem_vendor_id": True,
                      "subsystem_device_id": True, "class": True, "revision": True,
                      "pcie_link_speed": True, "pcie_link_width": True},
}
_MODEL_SECTION = {"gpu": "gpu_models", "nvswitch": "switch_models", "nic": "nic_models"}


class ProfileError(ValueError):
    """A profile or the catalogue is malformed; the message names the file and the field path."""


# --------------------------------------------------------------------------------------------
# loading


def _read_yaml(path: Path, source: str) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProfileError(f"{source}: cannot read: {exc.strerror or exc}") from exc
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = ""
        mark = getattr(exc, "problem_mark", None)
        if mark is not None:
            where = f" (line {mark.line + 1}, column {mark.column + 1})"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ProfileError(f"{source}: YAML syntax error{where}: {problem}") from exc


def load_catalog(path: str | Path | None = None) -> dict[str, Any]:
    """Load and check the device model catalogue (``profiles/catalog.yaml`` unless ``path`` is given).

    The default catalogue is read once per process; callers get a deep copy.
    """
    if path is None:
        return copy.deepcopy(_default_catalog())
    path = Path(path)
    return _check_catalog(_read_yaml(path, path.name), path.name)


@functools.cache
def _default_catalog() -> dict[str, Any]:
    return _check_catalog(_read_yaml(CATALOG_PATH, CATALOG_PATH.name), CATALOG_PATH.name)


def _check_catalog(data: Any, source: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ProfileError(f"{source}: top level must be a mapping")
    for key in data:
        if key not in _CATALOG_KEYS:
            raise ProfileError(f"{source}: {key}: unknown key (allowed: {', '.join(_CATALOG_KEYS)})")
    out: dict[str, Any] = {}
    for section, spec in _CATALOG_KEYS.items():
        models = data.get(section) or {}
        if not isinstance(models, dict):
            raise ProfileError(f"{source}: {section}: must be a mapping of model key to model")
        out[section] = {}
        for model, entry in models.items():
            path = f"{section}.{model}"
            if not isinstance(entry, dict):
                raise ProfileError(f"{source}: {path}: must be a mapping")
            _check_keys(entry, spec, path, source)
            entry = dict(entry)
            for key in ("vendor_id", "device_id", "subsystem_vendor_id", "subsystem_device_id", "vf_device_id"):
                if key in entry:
                    entry[key] = _hex(entry[key], _HEX4, "0x1234", f"{path}.{key}", source)
            if "class" in entry:
                entry["class"] = _hex(entry["class"], _CLASS, "0x020000", f"{path}.class", source)
            entry["revision"] = _hex(entry["revision"], _HEX2, "0xa1", f"{path}.revision", source)
            out[section][str(model)] = entry
    return out


def list_profiles() -> list[str]:
    """Names of the profiles shipped in ``profiles/`` (file stems, sorted; the catalogue excluded)."""
    return sorted(p.stem for p in PROFILES_DIR.glob("*.yaml") if p.stem != "catalog")


def load_profile(name_or_path: str | Path) -> dict[str, Any]:
    """Load, validate and normalize a profile.

    A bare name (``"dgx-h100"``) is looked up in the profiles directory; anything with a path
    separator or a ``.yaml``/``.yml`` suffix is loaded as the path it is.
    """
    text = str(name_or_path)
    if isinstance(name_or_path, Path) or "/" in text or text.endswith((".yaml", ".yml")):
        path = Path(name_or_path)
        source = text
    else:
        path = PROFILES_DIR / f"{text}.yaml"
        source = path.name
        if text == "catalog" or not path.is_file():
            raise ProfileError(f"{source}: no such profile (known: {', '.join(list_profiles())})")
    return validate_profile(_read_yaml(path, source), source)


# --------------------------------------------------------------------------------------------
# validation helpers


def _fail(source: str, path: str, msg: str) -> ProfileError:
    return ProfileError(f"{source}: {path}: {msg}" if path else f"{source}: {msg}")


def _check_keys(node: dict[str, Any], spec: dict[str, bool], path: str, source: str) -> None:
    for key in node:
        if key not in spec:
            where = f"{path}.{key}" if path else str(key)
            raise _fail(source, where, f"unknown key (allowed: {', '.join(spec)})")
    for key, required in spec.items():
        if required and key not in node:
            raise _fail(source, path, f"missing required field '{key}'")


def _str(value: Any, path: str, source: str) -> str:
    if not isinstance(value, str) or not value:
        raise _fail(source, path, f"must be a non-empty string, got {value!r}")
    return value


def _int(value: Any, path: str, source: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _fail(source, path, f"must be an integer >= {minimum}, got {value!r}")
    return value


def _hex(value: Any, pattern: re.Pattern[str], example: str, path: str, source: str) -> str:
    text = value.lower() if isinstance(value, str) else value
    if not isinstance(text, str) or not pattern.match(text):
        raise _fail(source, path, f"malformed hex id {value!r} (expected a string like {example!r})")
    return text


def _list(value: Any, path: str, source: str) -> list[Any]:
    if not isinstance(value, list):
        raise _fail(source, path, f"must be a list, got {type(value).__name__}")
    return value


def _mapping(value: Any, path: str, source: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(source, path, f"must be a mapping, got {type(value).__name__}")
    return value


def rate_for(speed_gbps: int) -> str:
    """The sysfs ``ports/<n>/rate`` string for a link speed (e.g. 400 -> ``400 Gb/sec (4X NDR)``)."""
    return RATE_BY_GBPS.get(speed_gbps, f"{speed_gbps} Gb/sec")


class _Validator:
    """One validation pass over one profile; remembers where each name was first seen."""

    def __init__(self, source: str, catalog: dict[str, Any]) -> None:
        self.source = source
        self.catalog = catalog
        self.numa_nodes = 1
        self.addresses: dict[str, str] = {}
        self.netdevs: dict[str, str] = {}
        self.rdma: dict[str, str] = {}
        self.rails: dict[int, str] = {}
        self.netdev_card: dict[str, str] = {}
        self.netdev_layer: dict[str, str] = {}
        self.bond_slaves: dict[str, str] = {}

    def fail(self, path: str, msg: str) -> ProfileError:
        return _fail(self.source, path, msg)

    def unique(self, seen: dict[Any, str], value: Any, what: str, path: str) -> None:
        if value in seen:
            raise self.fail(path, f"duplicate {what} {value} (first at {seen[value]})")
        seen[value] = path

    # -- top level ---------------------------------------------------------------------------

    def profile(self, data: Any) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise self.fail("", "top level must be a mapping")
        _check_keys(data, _TOP, "", self.source)
        name = _str(data["name"], "name", self.source)
        stem = Path(self.source).stem
        if Path(self.source).suffix in (".yaml", ".yml") and name != stem:
            raise self.fail("name", f"{name!r} must equal the file stem {stem!r}")
        self.numa_nodes = _int(data["numa_nodes"], "numa_nodes", self.source, minimum=1)
        out: dict[str, Any] = {
            "name": name,
            "description": str(data.get("description") or ""),
            "dmi": self.dmi(data.get("dmi") or {}),
            "numa_nodes": self.numa_nodes,
        }
        pcie = _list(data["pcie"], "pcie", self.source)
        out["pcie"] = [self.host_bridge(hb, f"pcie[{i}]") for i, hb in enumerate(pcie)]
        bonds = _list(data.get("bonds") or [], "bonds", self.source)
        out["bonds"] = [self.bond(b, f"bonds[{i}]") for i, b in enumerate(bonds)]
        out["faults"] = copy.deepcopy(_mapping(data.get("faults") or {}, "faults", self.source))
        if out["faults"]:
            from gpunode.sim.hwstate import HwStateError, check_faults  # noqa: PLC0415 - hwstate imports this module

            records = list(iter_devices(out, self.catalog))
            nics = {r["address"] for r in records if r["kind"] == "nic"}
            try:
                check_faults(out["faults"], nics, "faults", {r["address"] for r in records if r["kind"] == "gpu"})
            except HwStateError as exc:
                raise self.fail("faults", str(exc).removeprefix("faults").lstrip(".: ")) from None
        return out

    def dmi(self, data: Any) -> dict[str, str]:
        data = _mapping(data, "dmi", self.source)
        out = {}
        for key, value in data.items():
            if not isinstance(key, str) or not _DMI_KEY.match(key):
                raise self.fail(f"dmi.{key}", "DMI keys are sysfs file names (lowercase letters, digits, _)")
            if isinstance(value, bool) or not isinstance(value, str | int):
                raise self.fail(f"dmi.{key}", f"must be a string, got {value!r}")
            out[key] = str(value)
        return out

    def numa(self, node: dict[str, Any], path: str, inherited: int | None) -> int:
        if "numa_node" not in node and inherited is not None:
            return inherited
        value = _int(node["numa_node"], f"{path}.numa_node", self.source)
        if value >= self.numa_nodes:
            raise self.fail(f"{path}.numa_node", f"{value} is out of range (numa_nodes is {self.numa_nodes})")
        return value

    # -- PCIe tree ---------------------------------------------------------------------------

    def host_bridge(self, node: Any, path: str) -> dict[str, Any]:
        node = _mapping(node, path, self.source)
        _check_keys(node, _HOST_BRIDGE_KEYS, path, self.source)
        text = node["host_bridge"]
        match = _HOST_BRIDGE.match(text.lower()) if isinstance(text, str) else None
        if not match:
            raise self.fail(f"{path}.host_bridge", f"malformed host bridge {text!r} (expected <domain>:<bus>, "
                                                   "e.g. '0000:15')")
        address = text.lower()
        self.unique(self.addresses, f"pci{address}", "host bridge", f"{path}.host_bridge")
        numa = self.numa(node, path, None)
        domain, bus = match.group(1), int(match.group(2), 16)
        children = self.children(node.get("children") or [], path, numa, domain, bus, parent_is_bridge=False)
        return {"host_bridge": address, "numa_node": numa, "children": children}

    def children(self, items: Any, path: str, numa: int, domain: str, parent_bus: int,
                 parent_is_bridge: bool) -> list[dict[str, Any]]:
        items = _list(items, f"{path}.children", self.source)
        out = []
        child_bus: int | None = None
        for i, child in enumerate(items):
            cpath = f"{path}.children[{i}]"
            child = _mapping(child, cpath, self.source)
            kinds = [k for k in KINDS if k in child]
            if len(kinds) != 1:
                raise self.fail(cpath, f"exactly one of {', '.join(KINDS)} is required, found {kinds or 'none'}")
            kind = kinds[0]
            _check_keys(child, _NODE_KEYS[kind], cpath, self.source)
            norm = self.node(kind, child, cpath, numa)
            addr = norm[kind]
            c_domain, c_bus = addr[:4], int(addr[5:7], 16)
            if c_domain != domain:
                raise self.fail(f"{cpath}.{kind}", f"{addr} is in domain {c_domain}, its parent in {domain}")
            if not parent_is_bridge and c_bus != parent_bus:
                raise self.fail(f"{cpath}.{kind}", f"{addr} must be on its host bridge's bus {parent_bus:02x}")
            if parent_is_bridge:
                if c_bus <= parent_bus:
                    raise self.fail(f"{cpath}.{kind}", f"{addr}: a bridge's secondary bus must be above its own "
                                                       f"bus {parent_bus:02x}")
                if child_bus is not None and c_bus != child_bus:
                    raise self.fail(f"{cpath}.{kind}", f"{addr} is on bus {c_bus:02x} but its siblings are on "
                                                       f"bus {child_bus:02x} (everything directly below one "
                                                       "bridge shares its secondary bus)")
            child_bus = c_bus
            out.append(norm)
        return out

    def model(self, kind: str, node: dict[str, Any], path: str) -> dict[str, Any]:
        section = _MODEL_SECTION[kind]
        key = node["model"]
        if not isinstance(key, str) or key not in self.catalog[section]:
            known = ", ".join(sorted(self.catalog[section]))
            raise self.fail(f"{path}.model", f"unknown model {key!r} (catalog.yaml {section}: {known})")
        return self.catalog[section][key]

    def bdf(self, value: Any, path: str) -> str:
        text = value.lower() if isinstance(value, str) else ""
        if not _BDF.match(text):
            raise self.fail(path, f"malformed PCI address {value!r} (expected <domain>:<bus>:<dev>.<fn>, "
                                  "e.g. '0000:18:00.0')")
        return text

    def node(self, kind: str, node: dict[str, Any], path: str, inherited_numa: int) -> dict[str, Any]:
        numa = self.numa(node, path, inherited_numa)
        if kind == "nic":
            return self.nic(node, path, numa)
        addr = self.bdf(node[kind], f"{path}.{kind}")
        self.unique(self.addresses, addr, "PCI address", f"{path}.{kind}")
        out: dict[str, Any] = {kind: addr, "numa_node": numa}
        if kind in ("gpu", "nvswitch"):
            self.model(kind, node, path)
            out["model"] = node["model"]
        elif kind == "device":
            for key in ("vendor_id", "device_id", "subsystem_vendor_id", "subsystem_device_id"):
                if key in node:
                    out[key] = _hex(node[key], _HEX4, "0x144d", f"{path}.{key}", self.source)
            out["class"] = _hex(node["class"], _CLASS, "0x010802", f"{path}.class", self.source)
            out["revision"] = _hex(node.get("revision", "0x00"), _HEX2, "0x00", f"{path}.revision", self.source)
        else:  # bridge
            for key, default in (*DEFAULT_BRIDGE_IDS.items(), ("subsystem_vendor_id", None),
                                 ("subsystem_device_id", None)):
                value = node.get(key, default)
                if value is None:
                    value = out["vendor_id"] if key == "subsystem_vendor_id" else out["device_id"]
                out[key] = _hex(value, _HEX4, "0x1000", f"{path}.{key}", self.source)
            out["children"] = self.children(node.get("children") or [], path, numa, addr[:4], int(addr[5:7], 16),
                                            parent_is_bridge=True)
        return out

    def nic(self, node: dict[str, Any], path: str, numa: int) -> dict[str, Any]:
        text = node["nic"].lower() if isinstance(node["nic"], str) else ""
        if not _SLOT.match(text):
            raise self.fail(f"{path}.nic", f"malformed NIC slot {node['nic']!r} (expected <domain>:<bus>:<dev>, "
                                           "e.g. '0000:29:00'; functions go in 'functions')")
        model = self.model("nic", node, path)
        layer = node["link_layer"]
        if layer not in LINK_LAYERS:
            raise self.fail(f"{path}.link_layer", f"must be one of {', '.join(LINK_LAYERS)}, got {layer!r}")
        out: dict[str, Any] = {
            "nic": text,
            "model": node["model"],
            "board_id": _str(node["board_id"], f"{path}.board_id", self.source),
            "fw_version": _str(str(node["fw_version"]), f"{path}.fw_version", self.source),
            "link_layer": layer,
            "speed_gbps": _int(node["speed_gbps"], f"{path}.speed_gbps", self.source, minimum=1),
            "sriov_totalvfs": _int(node.get("sriov_totalvfs", model["sriov_totalvfs"]), f"{path}.sriov_totalvfs",
                                   self.source),
            "numa_node": numa,
        }
        functions = _list(node["functions"], f"{path}.functions", self.source)
        if not functions:
            raise self.fail(f"{path}.functions", "a NIC needs at least one function")
        seen: dict[int, str] = {}
        out["functions"] = [self.function(f, f"{path}.functions[{i}]", out, seen) for i, f in enumerate(functions)]
        if 0 not in seen:
            raise self.fail(f"{path}.functions", "function 0 is required (PCI multi-function devices start at 0)")
        out["functions"].sort(key=lambda f: f["function"])
        return out

    def function(self, node: Any, path: str, card: dict[str, Any], seen: dict[int, str]) -> dict[str, Any]:
        node = _mapping(node, path, self.source)
        _check_keys(node, _FUNCTION_KEYS, path, self.source)
        fn = node["function"]
        if isinstance(fn, bool) or not isinstance(fn, int) or not 0 <= fn <= 7:
            raise self.fail(f"{path}.function", f"must be an integer 0..7, got {fn!r}")
        self.unique(seen, fn, "function", f"{path}.function")
        addr = f"{card['nic']}.{fn}"
        self.unique(self.addresses, addr, "PCI address", f"{path.rsplit('.functions[', 1)[0]}.nic")
        layer = node.get("link_layer", card["link_layer"])
        if layer not in LINK_LAYERS:
            raise self.fail(f"{path}.link_layer", f"must be one of {', '.join(LINK_LAYERS)}, got {layer!r}")
        speed = _int(node.get("speed_gbps", card["speed_gbps"]), f"{path}.speed_gbps", self.source, minimum=1)
        link = node.get("link", "up")
        if link not in ("up", "down"):
            raise self.fail(f"{path}.link", f"must be 'up' or 'down', got {link!r}")
        out: dict[str, Any] = {
            "function": fn,
            "netdev": None,
            "rdma": None,
            "link_layer": layer,
            "speed_gbps": speed,
            "rate": _str(node.get("rate", rate_for(speed)), f"{path}.rate", self.source),
            "link": link,
            "mac": None,
            "mtu": _int(node.get("mtu", DEFAULT_MTU[layer]), f"{path}.mtu", self.source, minimum=68),
            "expect": None,
        }
        netdev = node.get("netdev")
        if netdev is not None:
            if not isinstance(netdev, str) or not _IFNAME.match(netdev):
                raise self.fail(f"{path}.netdev", f"not a valid interface name: {netdev!r}")
            self.unique(self.netdevs, netdev, "netdev", f"{path}.netdev")
            self.netdev_card[netdev] = card["nic"]
            self.netdev_layer[netdev] = layer
            out["netdev"] = netdev
        rdma = node.get("rdma")
        if rdma is not None:
            if not isinstance(rdma, str) or not _RDMA.match(rdma):
                raise self.fail(f"{path}.rdma", f"not a valid RDMA device name: {rdma!r}")
            self.unique(self.rdma, rdma, "RDMA device", f"{path}.rdma")
            out["rdma"] = rdma
        if node.get("mac") is not None:
            mac = node["mac"].lower() if isinstance(node["mac"], str) else ""
            if not _MAC.match(mac):
                raise self.fail(f"{path}.mac", f"malformed MAC address {node['mac']!r}")
            out["mac"] = mac
        if node.get("expect") is not None:
            out["expect"] = self.expect(node["expect"], f"{path}.expect")
        return out

    def expect(self, node: Any, path: str) -> dict[str, Any]:
        node = _mapping(node, path, self.source)
        _check_keys(node, _EXPECT_KEYS, path, self.source)
        role = node["role"]
        if role not in ROLES:
            raise self.fail(f"{path}.role", f"must be one of {', '.join(ROLES)}, got {role!r}")
        rail = node.get("rail")
        if rail is not None:
            rail = _int(rail, f"{path}.rail", self.source)
            if role != "compute":
                raise self.fail(f"{path}.rail", f"only compute functions have a rail (role is {role})")
            self.unique(self.rails, rail, "rail", f"{path}.rail")
        return {"role": role, "rail": rail}

    # -- bonds -------------------------------------------------------------------------------

    def bond(self, node: Any, path: str) -> dict[str, Any]:
        node = _mapping(node, path, self.source)
        _check_keys(node, _BOND_KEYS, path, self.source)
        name = node["name"]
        if not isinstance(name, str) or not _IFNAME.match(name):
            raise self.fail(f"{path}.name", f"not a valid interface name: {name!r}")
        self.unique(self.netdevs, name, "netdev", f"{path}.name")
        mode = node.get("mode", "802.3ad")
        if mode not in BOND_MODES:
            raise self.fail(f"{path}.mode", f"must be one of {', '.join(BOND_MODES)}, got {mode!r}")
        slaves = _list(node["slaves"], f"{path}.slaves", self.source)
        if not slaves:
            raise self.fail(f"{path}.slaves", "a bond needs at least one slave")
        for i, slave in enumerate(slaves):
            spath = f"{path}.slaves[{i}]"
            if slave not in self.netdev_card:
                raise self.fail(spath, f"unknown bond slave {slave!r} (not a NIC function's netdev)")
            if self.netdev_layer[slave] != "Ethernet":
                raise self.fail(spath, f"{slave} is InfiniBand; only Ethernet netdevs can be bonded here")
            self.unique(self.bond_slaves, slave, "bond slave", spath)
        rdma = node.get("rdma")
        if rdma is not None:
            if not isinstance(rdma, str) or not _RDMA.match(rdma):
                raise self.fail(f"{path}.rdma", f"not a valid RDMA device name: {rdma!r}")
            cards = {self.netdev_card[s] for s in slaves}
            if len(cards) != 1:
                raise self.fail(f"{path}.rdma", f"RoCE LAG needs all slaves on one card, got {sorted(cards)}")
            self.unique(self.rdma, rdma, "RDMA device", f"{path}.rdma")
        mtu = _int(node.get("mtu", 1500), f"{path}.mtu", self.source, minimum=68)
        return {"name": name, "mode": mode, "slaves": list(slaves), "rdma": rdma, "mtu": mtu}


def validate_profile(data: dict[str, Any], source: str, catalog: dict[str, Any] | None = None) -> dict[str, Any]:
    """Validate a parsed profile and return its normalized form.

    ``source`` names the file in error messages (and its stem must equal ``name`` when it ends in
    ``.yaml``). The result carries every default explicitly (catalogue totals, link defaults, MTU,
    inherited ``numa_node``) and validates again unchanged. Raises :class:`ProfileError`.
    """
    return _Validator(source, catalog if catalog is not None else _default_catalog()).profile(data)


# --------------------------------------------------------------------------------------------
# flat device view


def default_mac(address: str, host_index: int = 0) -> str:
    """A locally administered MAC derived from a PCI function address and a host index.

    ``0000:29:00.0`` on host 0 gives ``02:00:00:00:29:00`` (bytes: 02, host, domain, bus, dev<<3|fn).
    """
    m = _BDF.match(address)
    if not m:
        raise ValueError(f"not a PCI address: {address!r}")
    domain, bus, dev, fn = (int(m.group(i), 16) for i in range(1, 5))
    octets = (0x02, (host_index >> 8) & 0xFF, host_index & 0xFF, domain & 0xFF, bus, (dev << 3) | fn)
    return ":".join(f"{o:02x}" for o in octets)


def node_guid_for(mac: str) -> str:
    """The sysfs ``node_guid`` (``xxxx:xxxx:xxxx:xxxx``) derived from a MAC: OUI, ``03:00``, NIC bytes.

    That mirrors the shape of real ConnectX node GUIDs (ro/ibstat-h100-roce-8xcx7-cx6dx-gpud.txt).
    """
    octets = mac.split(":")
    raw = "".join(octets[:3]) + "0300" + "".join(octets[3:])
    return ":".join(raw[i:i + 4] for i in range(0, 16, 4))


def iter_devices(profile: dict[str, Any], catalog: dict[str, Any] | None = None,
                 host_index: int = 0) -> Iterator[dict[str, Any]]:
    """Yield one flat record per PCI function of a normalized profile, in tree (pre-)order.

    Every record has ``kind`` (bridge, gpu, nvswitch, nic or device), ``address`` (full BDF),
    ``parent_chain`` (host bridge dir name such as ``pci0000:15``, then the BDF of every bridge above),
    ``numa_node``, ``path`` (the field path in the profile) and the PCI identity (``vendor_id``,
    ``device_id``, ``subsystem_vendor_id``, ``subsystem_device_id``, ``class``, ``revision``,
    ``pcie_link_speed``, ``pcie_link_width``). Bridges add ``secondary_bus``/``subordinate_bus``;
    GPUs and NVSwitches their catalogue fields; NICs one record per PF with the card and function
    fields (``slot``, ``function``, ``netdev``, ``rdma``, ``link_layer``, ``rate``, ``mac``,
    ``node_guid``, ``sriov_totalvfs``, ``vf_device_id``, ``hca_type``, ``expect``, ...).
    """
    catalog = catalog if catalog is not None else _default_catalog()
    for i, hb in enumerate(profile["pcie"]):
        yield from _walk(hb["children"], [f"pci{hb['host_bridge']}"], f"pcie[{i}]", catalog, host_index)


def _subordinate(node: dict[str, Any]) -> int:
    buses = [int(node["bridge"][5:7], 16)]
    for child in node.get("children", []):
        kind = next(k for k in KINDS if k in child)
        buses.append(_subordinate(child) if kind == "bridge" else int(child[kind][5:7], 16))
    return max(buses)


def _walk(children: list[dict[str, Any]], chain: list[str], path: str, catalog: dict[str, Any],
          host_index: int) -> Iterator[dict[str, Any]]:
    for i, node in enumerate(children):
        kind = next(k for k in KINDS if k in node)
        npath = f"{path}.children[{i}]"
        base = {"kind": kind, "parent_chain": list(chain), "numa_node": node["numa_node"], "path": npath}
        if kind == "bridge":
            own_bus = int(node["bridge"][5:7], 16)
            sub = node["children"]
            secondary = int(next(c[k] for c in sub for k in KINDS if k in c)[5:7], 16) if sub else own_bus + 1
            speed, width = DEFAULT_BRIDGE_LINK
            yield {**base, "address": node["bridge"], "vendor_id": node["vendor_id"], "device_id": node["device_id"],
                   "subsystem_vendor_id": node["subsystem_vendor_id"],
                   "subsystem_device_id": node["subsystem_device_id"], "class": BRIDGE_CLASS, "revision": "0x00",
                   "pcie_link_speed": speed, "pcie_link_width": width, "secondary_bus": secondary,
                   "subordinate_bus": max(secondary, _subordinate(node))}
            yield from _walk(sub, [*chain, node["bridge"]], npath, catalog, host_index)
        elif kind in ("gpu", "nvswitch"):
            model = catalog[_MODEL_SECTION[kind]][node["model"]]
            yield {**base, **{k: v for k, v in model.items() if k != "description"},
                   "address": node[kind], "model": node["model"], "description": model["description"]}
        elif kind == "device":
            yield {**base, "address": node["device"], "vendor_id": node["vendor_id"], "device_id": node["device_id"],
                   "subsystem_vendor_id": node.get("subsystem_vendor_id", node["vendor_id"]),
                   "subsystem_device_id": node.get("subsystem_device_id", node["device_id"]),
                   "class": node["class"], "revision": node["revision"],
                   "pcie_link_speed": DEFAULT_BRIDGE_LINK[0], "pcie_link_width": DEFAULT_BRIDGE_LINK[1]}
        else:
            yield from _nic_records(node, base, catalog, host_index)


def _nic_records(node: dict[str, Any], base: dict[str, Any], catalog: dict[str, Any],
                 host_index: int) -> Iterator[dict[str, Any]]:
    model = catalog["nic_models"][node["model"]]
    slot = node["nic"]
    functions = [f"{slot}.{f['function']}" for f in node["functions"]]
    first = node["functions"][0]
    card_mac = first["mac"] or default_mac(functions[0], host_index)
    for j, fn in enumerate(node["functions"]):
        address = f"{slot}.{fn['function']}"
        mac = fn["mac"] or default_mac(address, host_index)
        yield {
            **base,
            "path": f"{base['path']}.functions[{j}]",
            "address": address,
            "slot": slot,
            "function": fn["function"],
            "card_functions": functions,
            "model": node["model"],
            "description": model["description"],
            "lspci_name": model["lspci_name"],
            "vendor_id": model["vendor_id"],
            "device_id": model["device_id"],
            "subsystem_vendor_id": model["subsystem_vendor_id"],
            "subsystem_device_id": model["subsystem_device_id"],
            "revision": model["revision"],
            "class": NIC_CLASS[fn["link_layer"]],
            "hca_type": model["hca_type"],
            "vendor_part_id": model["vendor_part_id"],
            "vf_device_id": model["vf_device_id"],
            "pcie_link_speed": model["pcie_link_speed"],
            "pcie_link_width": model["pcie_link_width"],
            "board_id": node["board_id"],
            "fw_version": node["fw_version"],
            "sriov_totalvfs": node["sriov_totalvfs"],
            "link_layer": fn["link_layer"],
            "speed_gbps": fn["speed_gbps"],
            "rate": fn["rate"],
            "link": fn["link"],
            "netdev": fn["netdev"],
            "rdma": fn["rdma"],
            "mtu": fn["mtu"],
            "mac": mac,
            "node_guid": node_guid_for(mac),
            "sys_image_guid": node_guid_for(card_mac),
            "expect": fn["expect"],
        }
