"""Write a profile as a sysfs tree with the real Linux layout, under a root that plays ``/sys``.

What a discovery tool reads on a real host exists here at the same relative path and with the
same formatting (one value per file, newline-terminated):

- ``devices/pci<domain>:<bus>/<root port>/<switch ports>/.../<function>/`` real directories, so
  PCIe ancestry is read from the path exactly as on a real host;
- ``bus/pci/devices/<bdf>``, ``class/net/<if>``, ``class/infiniband/<dev>``, ``class/dmi/id``:
  relative symlinks into ``devices/`` (``os.path.realpath`` never leaves the root);
- per function: PCI identity, NUMA node, link speed/width, SR-IOV files and ``driver`` for NIC PFs;
- netdevs under ``<function>/net/<if>/`` and RDMA devices under ``<function>/infiniband/<dev>/``
  (port files in the formats of ro/sysfs-class-infiniband-h100-ib-bf3-gpud.txt);
- bonds under ``devices/virtual/net/<bond>/`` (RoCE LAG: the bond's RDMA device replaces the slaves');
- DMI identity under ``devices/virtual/dmi/id/`` and NUMA nodes under ``devices/system/node/``.

The root is owned by the simulator: :func:`materialize` writes a marker file there and only ever
clears a root that carries it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from gpunode.sim.profile import BOND_MODES, DEFAULT_MTU, NIC_CLASS, iter_devices, rate_for
from gpunode.sim.tools import nvconfig

MARKER = ".gpunode-sim"

# Port attribute strings (ro/sysfs-class-infiniband-h100-ib-bf3-gpud.txt for the active ones; the
# down/disabled pair is the kernel's ib_port_state / phys_state text for an unplugged port).
PORT_STATE = {"up": ("4: ACTIVE", "5: LinkUp"), "down": ("1: DOWN", "3: Disabled")}
# Netdev ARPHRD types: 1 Ethernet, 32 InfiniBand (IPoIB).
NETDEV_TYPE = {"Ethernet": 1, "InfiniBand": 32}
# Counters seen in ro/sysfs-class-infiniband-h100-ib-bf3-gpud.txt; a fresh boot reads 0.
IB_COUNTERS = ("port_rcv_data", "port_xmit_data", "link_downed", "symbol_error", "port_xmit_discards",
               "port_rcv_errors")
IB_HW_COUNTERS = ("out_of_buffer", "out_of_sequence", "local_ack_timeout_err", "rnr_nak_retry_err",
                  "roce_adp_retrans")
# RoCE ECN defaults after boot (hardware-facts.md "Lossless RoCEv2": cnp_dscp 48; CNP priority 6;
# DCQCN enabled on every priority, as in ro/roce-qos-sysfs-ecn-cnp-spiderpool.txt).
ECN_DEFAULTS = {"cnp_dscp": 48, "cnp_802p_prio": 6}
NIC_DRIVER = "mlx5_core"
BRIDGE_DRIVER = "pcieport"


class SysfsError(RuntimeError):
    """The target root cannot be (re)written safely."""


def _put(path: Path, value: Any) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    try:
        os.write(fd, f"{value}\n".encode())
    finally:
        os.close(fd)


def _link(link: Path, target: Path) -> None:
    """Create ``link`` as a relative symlink to ``target`` spelled like the kernel's sysfs links.

    The kernel walks up to the common ancestor and back down by name, so a link to an ancestor
    reads ``../../../0000:18:00.0`` rather than ``../..``.
    """
    os.symlink(os.path.join(os.path.relpath(target.parent, link.parent), target.name), link)


def _prepare_root(root: Path) -> None:
    """Make ``root`` an empty simulator-owned directory, refusing anything we did not write."""
    if root.is_symlink():
        raise SysfsError(f"{root}: is a symlink; refusing to write a simulated sysfs through it")
    if not root.exists():
        root.mkdir(parents=True)
    elif not root.is_dir():
        raise SysfsError(f"{root}: exists and is not a directory")
    entries = list(os.scandir(root))
    if not entries:
        return
    marker = root / MARKER
    if not marker.is_file() or marker.is_symlink():
        raise SysfsError(f"{root}: not empty and has no {MARKER} marker: refusing to delete a directory "
                         "the simulator did not write")
    for entry in entries:
        if entry.name == MARKER:
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)  # never follows symlinks
        else:
            os.unlink(entry.path)


class _Tree:
    """Writes one host's tree; keeps the counters and indexes a host needs (ifindex, lids)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.devices = root / "devices"
        self.bus_devices = root / "bus" / "pci" / "devices"
        self.drivers = root / "bus" / "pci" / "drivers"
        self.class_net = root / "class" / "net"
        self.class_ib = root / "class" / "infiniband"
        self.virtual_net = self.devices / "virtual" / "net"
        self.next_ifindex = 2  # 1 is lo
        self.next_lid = 1
        self.netdev_dirs: dict[str, Path] = {}
        for d in (self.bus_devices, self.class_net, self.class_ib, self.virtual_net,
                  self.drivers / NIC_DRIVER, self.drivers / BRIDGE_DRIVER):
            d.mkdir(parents=True, exist_ok=True)

    def pci_dir(self, rec: dict[str, Any]) -> Path:
        return self.devices.joinpath(*rec["parent_chain"], rec["address"])

    # -- PCI functions -----------------------------------------------------------------------

    def pci_function(self, rec: dict[str, Any], driver: str | None) -> Path:
        """Write the attributes every PCI function has (PFs today; VFs reuse this later)."""
        d = self.pci_dir(rec)
        d.mkdir()
        for key in ("vendor_id", "device_id", "subsystem_vendor_id", "subsystem_device_id"):
            _put(d / key.removesuffix("_id"), rec[key])
        _put(d / "class", rec["class"])
        _put(d / "revision", rec["revision"])
        _put(d / "numa_node", rec["numa_node"])
        for prefix in ("current", "max"):
            _put(d / f"{prefix}_link_speed", rec["pcie_link_speed"])
        # A pcie_width fault trains the link narrower than the device can (apply_hw).
        _put(d / "current_link_width", rec.get("pcie_current_link_width", rec["pcie_link_width"]))
        _put(d / "max_link_width", rec["pcie_link_width"])
        _put(d / "enable", 1)
        _link(self.bus_devices / rec["address"], d)
        _link(d / "subsystem", self.root / "bus" / "pci")
        if driver:
            _link(d / "driver", self.drivers / driver)
            _link(self.drivers / driver / rec["address"], d)
        return d

    def bridge(self, rec: dict[str, Any]) -> None:
        d = self.pci_function(rec, BRIDGE_DRIVER)
        _put(d / "secondary_bus_number", rec["secondary_bus"])
        _put(d / "subordinate_bus_number", rec["subordinate_bus"])

    def nic(self, rec: dict[str, Any], with_rdma: bool) -> None:
        d = self.pci_function(rec, NIC_DRIVER)
        _put(d / "sriov_totalvfs", rec["sriov_totalvfs"])
        _put(d / "sriov_numvfs", 0)
        _put(d / "sriov_offset", 1)
        _put(d / "sriov_stride", 1)
        _put(d / "sriov_vf_device", rec["vf_device_id"].removeprefix("0x"))
        _put(d / "sriov_drivers_autoprobe", 1)
        if rec["netdev"]:
            self.netdev(d, rec)
        if rec["rdma"] and with_rdma:
            self.rdma(d, rec["rdma"], rec, ndev=rec["netdev"])

    # -- netdevs -----------------------------------------------------------------------------

    def netdev(self, pci: Path, rec: dict[str, Any]) -> None:
        name = rec["netdev"]
        d = pci / "net" / name
        d.mkdir(parents=True)
        up = rec["link"] == "up"
        layer = rec["link_layer"]
        if layer == "InfiniBand":
            # IPoIB hardware address: 4 bytes flags/QPN, subnet prefix fe80::, then the port GUID.
            guid = rec["node_guid"].replace(":", "")
            address = ":".join(["00", "00", "10", "87", "fe", "80", "00", "00", "00", "00", "00", "00",
                                *(guid[i:i + 2] for i in range(0, 16, 2))])
        else:
            address = rec["mac"]
        ifindex = self.next_ifindex
        self.next_ifindex += 1
        for key, value in (("address", address), ("addr_len", address.count(":") + 1), ("mtu", rec["mtu"]),
                           ("operstate", "up" if up else "down"), ("carrier", int(up)),
                           ("speed", rec["speed_gbps"] * 1000 if up else -1),
                           ("duplex", "full" if up else "unknown"), ("type", NETDEV_TYPE[layer]),
                           ("ifindex", ifindex), ("iflink", ifindex), ("dev_port", 0), ("dev_id", "0x0"),
                           ("flags", "0x1003"), ("tx_queue_len", 1000 if layer == "Ethernet" else 256)):
            _put(d / key, value)
        _link(d / "device", pci)
        _link(d / "subsystem", self.class_net)
        _link(self.class_net / name, d)
        if layer == "Ethernet":
            self.ecn(d)
        self.netdev_dirs[name] = d

    @staticmethod
    def ecn(netdev: Path) -> None:
        for point in ("roce_np", "roce_rp"):
            enable = netdev / "ecn" / point / "enable"
            enable.mkdir(parents=True)
            for prio in range(8):
                _put(enable / str(prio), 1)
        for key, value in ECN_DEFAULTS.items():
            _put(netdev / "ecn" / "roce_np" / key, value)

    # -- RDMA --------------------------------------------------------------------------------

    def rdma(self, pci: Path, name: str, rec: dict[str, Any], ndev: str | None, up: bool | None = None) -> None:
        d = pci / "infiniband" / name
        port = d / "ports" / "1"
        port.mkdir(parents=True)
        _put(d / "hca_type", rec["hca_type"])
        _put(d / "fw_ver", rec["fw_version"])
        _put(d / "board_id", rec["board_id"])
        _put(d / "node_type", "1: CA")
        _put(d / "node_guid", rec["node_guid"])
        _put(d / "sys_image_guid", rec["sys_image_guid"])
        _link(d / "device", pci)
        _link(d / "subsystem", self.class_ib)
        _link(self.class_ib / name, d)
        up = rec["link"] == "up" if up is None else up
        state, phys = PORT_STATE["up" if up else "down"]
        ib = rec["link_layer"] == "InfiniBand"
        lid = 0
        if ib and up:
            lid, self.next_lid = self.next_lid, self.next_lid + 1
        for key, value in (("state", state), ("phys_state", phys), ("rate", rec["rate"]),
                           ("link_layer", rec["link_layer"]), ("lid", hex(lid)),
                           ("sm_lid", "0x1" if ib and up else "0x0"), ("lid_mask_count", 0),
                           ("cap_mask", "0x2651e848" if ib else "0x00010000")):
            _put(port / key, value)
        for sub, names in (("counters", IB_COUNTERS), ("hw_counters", IB_HW_COUNTERS)):
            (port / sub).mkdir()
            for counter in names:
                _put(port / sub / counter, 0)
        if not ib and ndev:
            (port / "gid_attrs" / "ndevs").mkdir(parents=True)
            _put(port / "gid_attrs" / "ndevs" / "0", ndev)

    # -- bonds -------------------------------------------------------------------------------

    def bond(self, bond: dict[str, Any], by_netdev: dict[str, dict[str, Any]],
             by_address: dict[str, dict[str, Any]]) -> None:
        name = bond["name"]
        d = self.virtual_net / name
        (d / "bonding").mkdir(parents=True)
        slaves = [by_netdev[s] for s in bond["slaves"]]
        up_slaves = [s for s in slaves if s["link"] == "up"]
        up = bool(up_slaves)
        ifindex = self.next_ifindex
        self.next_ifindex += 1
        for key, value in (("address", slaves[0]["mac"]), ("addr_len", 6), ("mtu", bond["mtu"]),
                           ("operstate", "up" if up else "down"), ("carrier", int(up)),
                           ("speed", sum(s["speed_gbps"] * 1000 for s in up_slaves) if up else -1),
                           ("duplex", "full" if up else "unknown"), ("type", 1), ("ifindex", ifindex),
                           ("iflink", ifindex), ("dev_port", 0), ("dev_id", "0x0"), ("flags", "0x1403"),
                           ("tx_queue_len", 1000)):
            _put(d / key, value)
        _put(d / "bonding" / "slaves", " ".join(bond["slaves"]))
        _put(d / "bonding" / "mode", f"{bond['mode']} {BOND_MODES[bond['mode']]}")
        _put(d / "bonding" / "miimon", 100)
        _link(d / "subsystem", self.class_net)
        _link(self.class_net / name, d)
        for rec in slaves:
            sd = self.netdev_dirs[rec["netdev"]]
            _link(sd / "master", d)
            _link(sd / f"upper_{name}", d)
            _link(d / f"lower_{rec['netdev']}", sd)
            (sd / "bonding_slave").mkdir()
            _put(sd / "bonding_slave" / "state", "active" if rec["link"] == "up" else "backup")
            _put(sd / "bonding_slave" / "mii_status", "up" if rec["link"] == "up" else "down")
            _put(sd / "bonding_slave" / "perm_hwaddr", rec["mac"])
        if bond["rdma"]:
            # RoCE LAG: one RDMA device for the bond, under function 0 of the slaves' card.
            f0 = by_address[slaves[0]["card_functions"][0]]
            self.rdma(self.pci_dir(f0), bond["rdma"], f0 | {"link_layer": "Ethernet", "rate": slaves[0]["rate"]},
                      ndev=name, up=up)

    # -- platform ----------------------------------------------------------------------------

    def dmi(self, dmi: dict[str, str]) -> None:
        d = self.devices / "virtual" / "dmi" / "id"
        d.mkdir(parents=True)
        for key, value in dmi.items():
            _put(d / key, value)
        (self.root / "class" / "dmi").mkdir(parents=True)
        _link(self.root / "class" / "dmi" / "id", d)

    def numa(self, count: int) -> None:
        nodes = self.devices / "system" / "node"
        for n in range(count):
            (nodes / f"node{n}").mkdir(parents=True)
        span = "0" if count == 1 else f"0-{count - 1}"
        for key in ("online", "possible", "has_cpu", "has_memory"):
            _put(nodes / key, span)


def _renamed(netdev: str, layer: str, function: int) -> str:
    """The predictable netdev name of a port whose link layer changed (``ibp24s0`` <-> ``enp24s0np0``)."""
    if layer == "InfiniBand" and netdev.startswith("en"):
        base = netdev[2:]
        cut = base.rfind("np")
        return "ib" + (base[:cut] if cut > 0 else base)
    if layer == "Ethernet" and netdev.startswith("ib"):
        return f"en{netdev[2:]}np{function}"
    return netdev


def apply_hw(records: list[dict[str, Any]], hw: dict[str, Any],
             bond_slaves: set[str] = frozenset()) -> list[dict[str, Any]]:
    """NIC records as the hardware state makes them come up (README.md §1, hw.json).

    - ``sriov_totalvfs`` is the card's current NUM_OF_VFS (0 when SRIOV_EN is off);
    - the link layer (and with it the PCI class, netdev name and default MTU) follows the current
      LINK_TYPE_P<function+1>; bond slaves keep their names;
    - a ``link_down`` fault brings the port up DOWN/Disabled;
    - a ``rail_rate`` fault trains the port at that rate, a ``pcie_width`` fault the PCIe link
      (GPU or NIC) at that width.
    """
    faults = hw.get("faults", {})
    link_down = set(faults.get("link_down", []))
    rates = faults.get("rail_rate") or {}
    widths = faults.get("pcie_width") or {}
    out = []
    for rec in records:
        if rec["address"] in widths:
            rec = {**rec, "pcie_current_link_width": widths[rec["address"]]}
        card = hw.get("cards", {}).get(rec.get("slot")) if rec["kind"] == "nic" else None
        if card is None:
            out.append(rec)
            continue
        rec = dict(rec)
        current = card["current"]
        if "NUM_OF_VFS" in current:
            rec["sriov_totalvfs"] = current["NUM_OF_VFS"] if current.get("SRIOV_EN", 1) else 0
        layer = nvconfig.link_layer_of(card, rec["function"] + 1, rec["link_layer"])
        if layer != rec["link_layer"]:
            if rec["mtu"] == DEFAULT_MTU[rec["link_layer"]]:
                rec["mtu"] = DEFAULT_MTU[layer]
            if rec["netdev"] and rec["netdev"] not in bond_slaves:
                rec["netdev"] = _renamed(rec["netdev"], layer, rec["function"])
            rec["link_layer"] = layer
            rec["class"] = NIC_CLASS[layer]
        if rec["address"] in link_down:
            rec["link"] = "down"
        if rec["address"] in rates:
            rec["speed_gbps"] = rates[rec["address"]]
            rec["rate"] = rate_for(rec["speed_gbps"])
        out.append(rec)
    return out


def materialize(profile: dict[str, Any], root: Path, *, host_index: int = 0,
                hw: dict[str, Any] | None = None) -> None:
    """Write the sysfs tree of a normalized profile (see :func:`gpunode.sim.profile.load_profile`) under ``root``.

    ``root`` plays ``/sys``. An existing root is cleared first, but only if it carries the
    ``.gpunode-sim`` marker written here (an empty directory is fine too); anything else raises
    :class:`SysfsError`. ``host_index`` makes MACs and GUIDs distinct between simulated hosts of
    one fleet. Volatile state (VFs, QoS, ECN) starts at its boot defaults, as after a reboot.
    ``hw`` (the host's hw.json) applies the current NV config and fault flags (:func:`apply_hw`).
    """
    root = Path(root)
    _prepare_root(root)
    _put(root / MARKER, f"gpunode simulated sysfs: profile {profile['name']} host {host_index}")
    tree = _Tree(root)
    for hb in profile["pcie"]:
        (tree.devices / f"pci{hb['host_bridge']}").mkdir(parents=True)
    records = list(iter_devices(profile, host_index=host_index))
    if hw is not None:
        records = apply_hw(records, hw, {s for b in profile["bonds"] for s in b["slaves"]})
    by_address = {r["address"]: r for r in records}
    by_netdev = {r["netdev"]: r for r in records if r["kind"] == "nic" and r["netdev"]}
    lag_slaves = {s for b in profile["bonds"] if b["rdma"] for s in b["slaves"]}
    for rec in records:
        kind = rec["kind"]
        if kind == "bridge":
            tree.bridge(rec)
        elif kind == "nic":
            tree.nic(rec, with_rdma=rec["netdev"] not in lag_slaves)
        else:
            tree.pci_function(rec, None)  # GPUs and NVSwitches: no driver before the driver stage
    for bond in profile["bonds"]:
        tree.bond(bond, by_netdev, by_address)
    tree.dmi(profile["dmi"])
    tree.numa(profile["numa_nodes"])
