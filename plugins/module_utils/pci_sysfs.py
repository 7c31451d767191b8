# Copyright: (c) 2025, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Read a Linux sysfs tree into plain records (no AnsibleModule, no subprocess, stdlib only).

Works on a bare machine: only the kernel's PCI core, and the net/RDMA class directories when a
driver happens to be bound, are needed. No GPU driver, no OFED, no vendor tool.

``read_sysfs(root)`` returns a *snapshot*::

    {
      "root": "/sys",
      "devices": [<device record>, ...],   # every PCI function, sorted by address
      "bonds": {"bond0": {"slaves": ["enp41s0f1np1", ...], "mode": "802.3ad"}},
      "net_lowers": {"bond0.100": ["bond0"], ...},  # stacked netdevs (VLAN over bond, ...)
      "dmi": {"sys_vendor": "NVIDIA", "product_name": "DGXH100", ...},   # None values when absent
      "warnings": [str, ...],
    }

A device record (hand-made records in tests use the same keys; missing keys read as None)::

    {
      "address": "0000:1a:00.0", "vendor_id": "0x15b3", "device_id": "0x1021",
      "class_id": "0x020700", "numa_node": 0 | None,
      "host_bridge": "0000:15" | None,          # from devices/pciDDDD:BB in the resolved path
      "bridges": ["0000:15:01.0", ...],          # PCI functions between host bridge and device
      "is_vf": False, "physfn": None | "0000:1a:00.0",
      "sriov_totalvfs": 16 | None, "sriov_numvfs": 0 | None,
      "netdevs": [{"name", "speed_mbps", "operstate", "type", "master", "bond"}],
      "rdma": [{"name", "hca_type", "fw_ver", "board_id", "ports": {1: <port>}}],
    }

A port is ``{"state", "state_num", "phys_state", "phys_state_num", "rate_gbps", "rate_width",
"rate_name", "link_layer"}`` (see the parsers below; formats from
the public output from https://github.com/leptonai/gpud).
"""

from __future__ import annotations

import errno
import os
import re

BDF_RE = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
HOST_BRIDGE_RE = re.compile(r"^pci([0-9a-fA-F]{4}:[0-9a-fA-F]{2})$")
_STATE_RE = re.compile(r"^\s*(\d+)\s*:\s*(\S.*?)\s*$")
_RATE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*Gb/sec(?:\s*\(\s*(\d+X)\s*([A-Za-z0-9]*)\s*\))?\s*$")

DMI_KEYS = ("sys_vendor", "product_name", "product_version", "board_vendor", "board_name")
# VF device id of the mlx5 family (CX-6 Dx, CX-7, BF-3): docs/hardware-facts.md "PCI identities".
MLX5_VF_DEVICE_ID = "0x101e"


class SysfsError(Exception):
    """A sysfs root that cannot be read at all, or a file that exists but cannot be read."""


# ---------------------------------------------------------------------------------------------
# Parsers (pure; text in, values out)
# ---------------------------------------------------------------------------------------------


def parse_state(text):
    """Parse an RDMA port ``state``/``phys_state`` file: ``"4: ACTIVE"`` -> ``(4, "ACTIVE")``.

    Returns ``(None, None)`` for None/empty text; ``(None, text)`` when there is no number.
    """
    if text is None:
        return None, None
    text = text.strip()
    if not text:
        return None, None
    match = _STATE_RE.match(text)
    if not match:
        return None, text
    return int(match.group(1)), match.group(2)


def parse_rate(text):
    """Parse an RDMA port ``rate``: ``"400 Gb/sec (4X NDR)"`` -> ``(400, "4X", "NDR")``.

    Fractional rates (``"2.5 Gb/sec (1X SDR)"``) return a float. Unparseable -> ``(None, None, None)``.
    """
    if text is None:
        return None, None, None
    match = _RATE_RE.match(text)
    if not match:
        return None, None, None
    value = float(match.group(1))
    gbps = int(value) if value.is_integer() else value
    return gbps, match.group(2), (match.group(3) or None)


def parse_net_speed(text):
    """Parse ``class/net/<if>/speed`` (Mb/s). ``"-1"``, empty, None or garbage -> None."""
    if text is None:
        return None
    try:
        value = int(text.strip())
    except ValueError:
        return None
    return value if value > 0 else None


def parse_int(text, base=10):
    """``"0"`` -> 0, ``"-1"`` -> -1; None/garbage -> None."""
    if text is None:
        return None
    try:
        return int(text.strip(), base)
    except ValueError:
        return None


def parse_numa_node(text):
    """``numa_node`` holds -1 when the platform does not say: that reads as None."""
    value = parse_int(text)
    if value is None or value < 0:
        return None
    return value


def normalize_hex_id(text, width):
    """``"0x15B3\\n"`` -> ``"0x15b3"``; pads to ``width`` hex digits; None stays None."""
    if text is None:
        return None
    text = text.strip().lower()
    if text.startswith("0x"):
        text = text[2:]
    if not text or any(c not in "0123456789abcdef" for c in text):
        return None
    return "0x" + text.zfill(width)


def pci_chain(real_path):
    """Split a resolved device path into ``(host_bridge, [bdf, ...])``.

    ``/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:18:00.0`` ->
    ``("0000:15", ["0000:15:01.0", "0000:16:00.0", "0000:18:00.0"])`` (the last item is the
    device itself). Without a ``pciDDDD:BB`` component the host bridge is None.
    """
    parts = [p for p in real_path.split("/") if p]
    start = None
    host_bridge = None
    for i, part in enumerate(parts):
        match = HOST_BRIDGE_RE.match(part)
        if match:
            start = i
            host_bridge = match.group(1).lower()
    if start is None:
        chain = [parts[-1].lower()] if parts and BDF_RE.match(parts[-1]) else []
        return None, chain
    return host_bridge, [p.lower() for p in parts[start + 1:] if BDF_RE.match(p)]


# ---------------------------------------------------------------------------------------------
# File access
# ---------------------------------------------------------------------------------------------


def read_attr(path):
    """Read one sysfs attribute, stripped. Missing -> None. Permission problem -> SysfsError.

    The kernel answers some reads with an error instead of a value (``speed`` of a link that is
    down gives EINVAL): those read as None too. A directory where a file is expected is an
    unreadable file.
    """
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except FileNotFoundError:
        return None
    except PermissionError as exc:
        raise SysfsError(f"cannot read {path}: permission denied") from exc
    except IsADirectoryError as exc:
        raise SysfsError(f"cannot read {path}: is a directory, expected a sysfs attribute file") from exc
    except OSError as exc:
        if exc.errno in (errno.EINVAL, errno.ENODEV, errno.EOPNOTSUPP, errno.ENXIO, errno.EIO):
            return None
        raise SysfsError(f"cannot read {path}: {exc.strerror or exc}") from exc


def _listdir(path):
    try:
        return sorted(os.listdir(path))
    except FileNotFoundError:
        return []
    except NotADirectoryError:
        return []
    except PermissionError as exc:
        raise SysfsError(f"cannot list {path}: permission denied") from exc


def _link_basename(path):
    """Basename of a symlink's target (``master`` -> ``bond0``); None when absent."""
    if not os.path.islink(path):
        return None
    return os.path.basename(os.path.realpath(path))


# ---------------------------------------------------------------------------------------------
# Readers
# ---------------------------------------------------------------------------------------------


def read_rdma_port(port_dir):
    state_num, state = parse_state(read_attr(os.path.join(port_dir, "state")))
    phys_num, phys = parse_state(read_attr(os.path.join(port_dir, "phys_state")))
    gbps, width, name = parse_rate(read_attr(os.path.join(port_dir, "rate")))
    return {
        "state": state,
        "state_num": state_num,
        "phys_state": phys,
        "phys_state_num": phys_num,
        "rate_gbps": gbps,
        "rate_width": width,
        "rate_name": name,
        "link_layer": read_attr(os.path.join(port_dir, "link_layer")),
    }


def read_rdma_device(dev_dir, name):
    ports = {}
    ports_dir = os.path.join(dev_dir, "ports")
    for port in _listdir(ports_dir):
        if port.isdigit():
            ports[int(port)] = read_rdma_port(os.path.join(ports_dir, port))
    return {
        "name": name,
        "hca_type": read_attr(os.path.join(dev_dir, "hca_type")),
        "fw_ver": read_attr(os.path.join(dev_dir, "fw_ver")),
        "board_id": read_attr(os.path.join(dev_dir, "board_id")),
        "ports": ports,
    }


def read_netdev(dev_dir, name):
    return {
        "name": name,
        "speed_mbps": parse_net_speed(read_attr(os.path.join(dev_dir, "speed"))),
        "operstate": read_attr(os.path.join(dev_dir, "operstate")),
        # ARPHRD: 1 Ethernet, 32 InfiniBand (include/uapi/linux/if_arp.h)
        "type": parse_int(read_attr(os.path.join(dev_dir, "type"))),
        "master": _link_basename(os.path.join(dev_dir, "master")),
        "bond": None,  # set by read_sysfs when the master is a bond
    }


def _class_index(root, cls):
    """``{device real path: [(name, class entry dir), ...]}`` from ``class/<cls>/*/device``."""
    index = {}
    base = os.path.join(root, "class", cls)
    for name in _listdir(base):
        entry = os.path.join(base, name)
        device_link = os.path.join(entry, "device")
        if os.path.exists(device_link):
            index.setdefault(os.path.realpath(device_link), []).append((name, entry))
    return index


def _entries_for(pcidir, subdir, class_index):
    """Names and attribute dirs of netdevs/RDMA devices of one PCI function (both discovery ways)."""
    found = {}
    for name in _listdir(os.path.join(pcidir, subdir)):
        found[name] = os.path.join(pcidir, subdir, name)
    for name, entry in class_index.get(pcidir, []):
        found.setdefault(name, entry)
    return sorted(found.items())


def names_of_function(root, pci_address):
    """``{"netdevs": [...], "rdma_devices": [...]}``: the names the PCI function ``pci_address`` has now (its
    ``net/`` and ``infiniband/`` entries, or ``class/net``/``class/infiniband`` entries whose ``device`` is it), read
    at each call: a netdev renamed since discovery (udev, a new ``.link`` file) is found under its new name."""
    pcidir = os.path.join(root, "bus", "pci", "devices", pci_address)
    real = os.path.realpath(pcidir)
    out = {}
    for key, subdir in (("netdevs", "net"), ("rdma_devices", "infiniband")):
        names = set(_listdir(os.path.join(pcidir, subdir)))
        base = os.path.join(root, "class", subdir)
        for name in _listdir(base):
            link = os.path.join(base, name, "device")
            if name not in names and os.path.exists(link) and os.path.realpath(link) == real:
                names.add(name)
        out[key] = sorted(names)
    return out


def read_bonds(root):
    """Bonds from ``class/net/*/bonding/slaves`` (space separated) and ``bonding/mode``."""
    bonds = {}
    base = os.path.join(root, "class", "net")
    for name in _listdir(base):
        bonding = os.path.join(base, name, "bonding")
        if not os.path.isdir(bonding):
            continue
        slaves = (read_attr(os.path.join(bonding, "slaves")) or "").split()
        mode = read_attr(os.path.join(bonding, "mode"))
        bonds[name] = {"slaves": slaves, "mode": mode.split()[0] if mode else None}
    return bonds


def read_net_lowers(root):
    """Stacked netdevs: ``class/net/<upper>/lower_<name>`` links (VLAN on bond, bond on NIC)."""
    lowers = {}
    base = os.path.join(root, "class", "net")
    for name in _listdir(base):
        names = [entry[len("lower_"):] for entry in _listdir(os.path.join(base, name)) if entry.startswith("lower_")]
        if names:
            lowers[name] = names
    return lowers


def read_dmi(root):
    base = os.path.join(root, "class", "dmi", "id")
    return {key: (read_attr(os.path.join(base, key)) or None) for key in DMI_KEYS}


def read_pci_device(root, link, net_index, rdma_index):
    address = os.path.basename(link).lower()
    pcidir = os.path.realpath(link)
    real_root = os.path.realpath(root)
    # Only the part below the root counts (a root path could itself contain pciDDDD:BB).
    host_bridge, chain = pci_chain(pcidir[len(real_root):] if pcidir.startswith(real_root + os.sep) else pcidir)
    bridges = chain[:-1] if chain and chain[-1] == address else chain
    vendor = normalize_hex_id(read_attr(os.path.join(pcidir, "vendor")), 4)
    device = normalize_hex_id(read_attr(os.path.join(pcidir, "device")), 4)
    physfn = _link_basename(os.path.join(pcidir, "physfn"))
    record = {
        "address": address,
        "vendor_id": vendor,
        "device_id": device,
        "class_id": normalize_hex_id(read_attr(os.path.join(pcidir, "class")), 6),
        "numa_node": parse_numa_node(read_attr(os.path.join(pcidir, "numa_node"))),
        "host_bridge": host_bridge,
        "bridges": bridges,
        "physfn": physfn,
        "is_vf": physfn is not None or (vendor == "0x15b3" and device == MLX5_VF_DEVICE_ID),
        "sriov_totalvfs": parse_int(read_attr(os.path.join(pcidir, "sriov_totalvfs"))),
        "sriov_numvfs": parse_int(read_attr(os.path.join(pcidir, "sriov_numvfs"))),
        "netdevs": [read_netdev(d, n) for n, d in _entries_for(pcidir, "net", net_index)],
        "rdma": [read_rdma_device(d, n) for n, d in _entries_for(pcidir, "infiniband", rdma_index)],
    }
    return record


def read_sysfs(root="/sys"):
    """Read the whole snapshot (see the module docstring). Raises SysfsError."""
    root = os.fspath(root)
    if not os.path.isdir(root):
        raise SysfsError(f"sysfs root {root} does not exist or is not a directory")
    pci_devices = os.path.join(root, "bus", "pci", "devices")
    if not os.path.isdir(pci_devices):
        raise SysfsError(f"sysfs root {root} has no bus/pci/devices ({pci_devices} is missing)")
    net_index = _class_index(root, "net")
    rdma_index = _class_index(root, "infiniband")
    bonds = read_bonds(root)
    warnings = []
    devices = []
    for name in _listdir(pci_devices):
        link = os.path.join(pci_devices, name)
        if not BDF_RE.match(name):
            warnings.append(f"{link}: not a PCI address, skipped")
            continue
        if not os.path.isdir(link):
            warnings.append(f"{link}: dangling link, skipped")
            continue
        record = read_pci_device(root, link, net_index, rdma_index)
        if record["vendor_id"] is None:
            # Classification goes by vendor id: a device without one drops out, so say which file and why.
            vendor_file = os.path.join(link, "vendor")
            raw = read_attr(vendor_file)
            why = "unreadable or absent" if not raw else f"holds {raw[:40]!r}, not a hex PCI vendor id"
            warnings.append(f"{vendor_file}: {why}; {record['address']} is left out of NIC and GPU discovery")
        if record["host_bridge"] is None:
            warnings.append(f"{record['address']}: no pciDDDD:BB host bridge in {os.path.realpath(link)}")
        devices.append(record)
    # Bond membership from both sides: the slave's ``master`` link (when the master is a bond)
    # and the bond's bonding/slaves list (some trees carry only one of them).
    by_netdev = {nd["name"]: nd for dev in devices for nd in dev["netdevs"]}
    for name, netdev in by_netdev.items():
        master = netdev.get("master")
        if master in bonds:
            netdev["bond"] = master
            if name not in bonds[master]["slaves"]:
                bonds[master]["slaves"].append(name)
    for bond, info in bonds.items():
        for slave in info["slaves"]:
            if slave in by_netdev and not by_netdev[slave]["bond"]:
                by_netdev[slave]["bond"] = bond
    devices.sort(key=lambda d: d["address"])
    return {
        "root": root,
        "devices": devices,
        "bonds": bonds,
        "net_lowers": read_net_lowers(root),
        "dmi": read_dmi(root),
        "warnings": warnings,
    }
