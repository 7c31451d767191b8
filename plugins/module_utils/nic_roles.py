# Copyright: (c) 2025, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Classify the Mellanox/NVIDIA NICs of a host by role, from facts (pure functions, stdlib only).

Input: the snapshot returned by ``pci_sysfs.read_sysfs()`` or a bare list of device records in
the same shape (see that module's docstring). Nothing here reads files, runs tools, or keys
anything on mlx5 indices or interface names (design.md section 2).

Roles: ``compute`` (the rail of one GPU), ``storage``, ``management``, ``dpu``, ``ignored``.
Rules, in order (the first that applies wins):

1. an override from the caller (keyed by PCI address);
2. ``management``: the PF's netdev is a management interface, or a lower of one (bond slave,
   VLAN parent), as passed in ``management_interfaces``;
3. ``dpu``: a BlueField device id, except a single-port BlueField in no bond that shares a PCIe
   switch (PIX/PXB) with a GPU: that is a SuperNIC (B3140H, one per GPU on Spectrum-X systems) and
   goes on to rule 6 as a rail candidate;
4. ``ignored``: neither netdev nor RDMA device, and no GPU affinity (nothing to configure);
5. ``storage``: member of a bond; or a PF of a multi-port card (more than one PF per slot);
6. the remaining single-port PFs are rail candidates; each GPU (PCI order) takes the nearest
   candidate at PIX/PXB distance, ties broken by the model/board id the host's other rails share,
   then by link speed; a true tie is ambiguous (no rail, reported). A GPU with no PIX/PXB
   candidate at all (boards without PCIe switches, e.g. HGX 4-GPU) takes the candidate on its
   own host bridge (PHB) when there is exactly one, it is PIX/PXB to no GPU and no other GPU
   has taken it, with a warning; two or more are ambiguous. Unchosen candidates are
   ``storage`` (``dpu`` for a BlueField).
"""

from __future__ import annotations

from collections import Counter

MELLANOX = "0x15b3"
NVIDIA = "0x10de"

# docs/hardware-facts.md "PCI identities"; 0x101b/0x1017/0x1019/0xa2d2/0xa2d6 from the public pci.ids.
NIC_MODELS = {
    "0x1017": "ConnectX-5",
    "0x1019": "ConnectX-5 Ex",
    "0x101b": "ConnectX-6",
    "0x101d": "ConnectX-6 Dx",
    "0x101f": "ConnectX-6 Lx",
    "0x1021": "ConnectX-7",
    "0xa2d2": "BlueField",
    "0xa2d6": "BlueField-2",
    "0xa2dc": "BlueField-3",
}
BLUEFIELD_IDS = frozenset(("0xa2d2", "0xa2d6", "0xa2dc"))
MLX5_VF_DEVICE_ID = "0x101e"
# docs/hardware-facts.md "PCI identities"; 0x2335 and 0x2331 from the public pci.ids ("GH100 [H200 SXM 141GB]",
# "GH100 [H100 PCIe]", https://pci-ids.ucw.cz/read/PC/10de).
GPU_MODELS = {"0x2330": "H100 SXM5 80GB", "0x2331": "H100 PCIe 80GB", "0x2335": "H200 SXM 141GB"}
NVSWITCH_IDS = frozenset(("0x22a3",))

ROLES = ("compute", "storage", "management", "dpu", "ignored")
DISTANCES = ("PIX", "PXB", "PHB", "NODE", "SYS")
_RANK = {name: i for i, name in enumerate(DISTANCES)}
AFFINE = ("PIX", "PXB")
OVERRIDE_SOURCE = "gpunode_nic_overrides"


# ---------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------


def normalize_address(text):
    """``"1A:00.0"`` -> ``"0000:1a:00.0"``; raises ValueError when it is not a PCI address."""
    if not isinstance(text, str):
        raise ValueError(f"{text!r} is not a PCI address (expected DDDD:BB:DD.F)")
    value = text.strip().lower()
    if value.count(":") == 1:
        value = "0000:" + value
    parts = value.replace(".", ":").split(":")
    ok = (
        len(parts) == 4
        and [len(p) for p in parts] == [4, 2, 2, 1]
        and all(c in "0123456789abcdef" for c in "".join(parts))
        and int(parts[3], 16) <= 7
    )
    if not ok:
        raise ValueError(f"{text!r} is not a PCI address (expected DDDD:BB:DD.F)")
    return value


def _class_of(rec):
    return (rec.get("class_id") or "").lower()


def is_gpu(rec):
    """NVIDIA 3D controller (class 0x0302xx), e.g. 10de:2330."""
    return rec.get("vendor_id") == NVIDIA and _class_of(rec).startswith("0x0302")


def is_nvswitch(rec):
    """NVSwitch: 10de:22a3, class bridge/other (0x0680xx)."""
    return rec.get("vendor_id") == NVIDIA and (
        rec.get("device_id") in NVSWITCH_IDS or _class_of(rec).startswith("0x0680")
    )


def is_vf(rec):
    return bool(rec.get("is_vf") or rec.get("physfn")) or (
        rec.get("vendor_id") == MELLANOX and rec.get("device_id") == MLX5_VF_DEVICE_ID
    )


def is_nic_pf(rec):
    """A Mellanox network function (class 0x02xxxx) that is not a VF. Bridges inside a BlueField
    (class 0x0604) are not NICs."""
    return rec.get("vendor_id") == MELLANOX and _class_of(rec).startswith("0x02") and not is_vf(rec)


def nic_model(device_id):
    return NIC_MODELS.get(device_id) or f"Mellanox {device_id}"


def gpu_model(device_id):
    return GPU_MODELS.get(device_id) or f"NVIDIA {device_id}"


def card_of(address):
    """Slot of a function: ``0000:29:00.1`` -> ``0000:29:00``."""
    return address.rsplit(".", 1)[0]


def function_of(address):
    return int(address.rsplit(".", 1)[1], 16)


# ---------------------------------------------------------------------------------------------
# PCIe distance (nvidia-smi topo -m terms)
# ---------------------------------------------------------------------------------------------


def pcie_distance_detail(a, b):
    """``(level, hops)`` between two device records.

    - same host bridge and a common bridge below it: with C the deepest common bridge, each
      device is ``hops`` levels below C. Both within 2 (at most one PCIe switch between them:
      C is its upstream port, or they share a port) -> ``PIX``; deeper -> ``PXB`` (multiple
      bridges without the host bridge). ``hops`` is the sum of both depths.
    - same host bridge, no common bridge -> ``PHB``;
    - different host bridges, same NUMA node (or both unknown) -> ``NODE``; else ``SYS``.
    """
    hb_a, hb_b = a.get("host_bridge"), b.get("host_bridge")
    br_a, br_b = list(a.get("bridges") or []), list(b.get("bridges") or [])
    if hb_a is not None and hb_a == hb_b:
        common = 0  # no zip(strict=) here: module_utils must run on python 3.9 targets
        while common < min(len(br_a), len(br_b)) and br_a[common] == br_b[common]:
            common += 1
        depth_a = len(br_a) - common + 1
        depth_b = len(br_b) - common + 1
        if common == 0:
            return "PHB", len(br_a) + len(br_b) + 2
        level = "PIX" if max(depth_a, depth_b) <= 2 else "PXB"
        return level, depth_a + depth_b
    if a.get("numa_node") == b.get("numa_node"):
        return "NODE", None
    return "SYS", None


def pcie_distance(a, b):
    """PIX / PXB / PHB / NODE / SYS between two device records (see pcie_distance_detail)."""
    return pcie_distance_detail(a, b)[0]


def _sort_key(level, hops):
    return (_RANK[level], hops if hops is not None else 1 << 20)


# ---------------------------------------------------------------------------------------------
# Inventory of GPUs and NVSwitches (shared with gpu_info)
# ---------------------------------------------------------------------------------------------


def _as_snapshot(records):
    if isinstance(records, dict):
        return records
    return {"devices": list(records or []), "bonds": {}, "net_lowers": {}, "dmi": {}, "warnings": []}


def gpu_inventory(records):
    """``(gpus, nvswitches)`` in PCI order; GPU ``index`` is the position in that order."""
    devices = sorted(_as_snapshot(records)["devices"], key=lambda d: d["address"])
    gpus = [
        {
            "index": i,
            "pci_address": rec["address"],
            "device_id": rec.get("device_id"),
            "model": gpu_model(rec.get("device_id")),
            "numa_node": rec.get("numa_node"),
        }
        for i, rec in enumerate(d for d in devices if is_gpu(d))
    ]
    switches = [
        {"pci_address": rec["address"], "device_id": rec.get("device_id"), "numa_node": rec.get("numa_node")}
        for rec in devices
        if is_nvswitch(rec)
    ]
    return gpus, switches


def platform_of(dmi):
    dmi = dmi or {}
    return {
        "vendor": dmi.get("sys_vendor") or None,
        "product": dmi.get("product_name") or None,
        "board_vendor": dmi.get("board_vendor") or None,
        "board_name": dmi.get("board_name") or None,
    }


# ---------------------------------------------------------------------------------------------
# Overrides
# ---------------------------------------------------------------------------------------------


def normalize_overrides(overrides):
    """Validate ``{pci_address: {role, rail?}}``; returns them keyed by normalized address.

    Raises ValueError naming the address for a bad address, role, rail or key.
    """
    result = {}
    rails = {}
    for key, value in (overrides or {}).items():
        try:
            address = normalize_address(key)
        except ValueError as exc:
            raise ValueError(f"override {key!r}: {exc}") from None
        if not isinstance(value, dict):
            raise ValueError(f"override {key}: expected a dict with 'role' (and optional 'rail'), got {value!r}")
        unknown = sorted(set(value) - {"role", "rail"})
        if unknown:
            raise ValueError(f"override {key}: unknown key(s) {', '.join(unknown)} (allowed: role, rail)")
        role = value.get("role")
        if role not in ROLES:
            raise ValueError(f"override {key}: role {role!r} is not one of {', '.join(ROLES)}")
        rail = value.get("rail")
        if isinstance(rail, str) and rail.strip().isdigit():
            rail = int(rail)  # templated values arrive as strings
        if rail is not None:
            if role != "compute":
                raise ValueError(f"override {key}: 'rail' is only valid with role compute (role is {role})")
            if isinstance(rail, bool) or not isinstance(rail, int) or rail < 0:
                raise ValueError(f"override {key}: rail {rail!r} is not a non-negative integer")
            if rail in rails:
                raise ValueError(f"override {key}: rail {rail} is already given to {rails[rail]}")
            rails[rail] = key
        result[address] = {"role": role, "rail": rail}
    return result


# ---------------------------------------------------------------------------------------------
# Classification
# ---------------------------------------------------------------------------------------------


def _speed_gbps(rec, port):
    if port and port.get("rate_gbps") is not None:
        return port["rate_gbps"]
    for netdev in rec.get("netdevs") or []:
        mbps = netdev.get("speed_mbps")
        if mbps:
            value = mbps / 1000
            return int(value) if float(value).is_integer() else value
    return None


def _link_layer(rec, port):
    if port and port.get("link_layer"):
        return port["link_layer"]
    for netdev in rec.get("netdevs") or []:
        # ARPHRD_INFINIBAND 32, ARPHRD_ETHER 1 (include/uapi/linux/if_arp.h)
        if netdev.get("type") == 32:
            return "InfiniBand"
        if netdev.get("type") == 1:
            return "Ethernet"
    return None


def _nic_entry(rec, ports_per_card):
    address = rec["address"]
    netdevs = rec.get("netdevs") or []
    rdma = (rec.get("rdma") or [None])[0]
    ports = (rdma or {}).get("ports") or {}
    port = ports.get(1) or ports.get("1") or (next(iter(ports.values())) if ports else None)
    bond = next((nd.get("bond") for nd in netdevs if nd.get("bond")), None)
    return {
        "pci_address": address,
        "vendor_id": rec.get("vendor_id"),
        "device_id": rec.get("device_id"),
        "model": nic_model(rec.get("device_id")),
        "card": card_of(address),
        "function": function_of(address),
        "ports": ports_per_card[card_of(address)],
        "netdev": netdevs[0]["name"] if netdevs else None,
        "rdma_device": rdma["name"] if rdma else None,
        "link_layer": _link_layer(rec, port),
        "link_state": port.get("state") if port else None,
        "speed_gbps": _speed_gbps(rec, port),
        "numa_node": rec.get("numa_node"),
        "board_id": rdma.get("board_id") if rdma else None,
        "fw_version": rdma.get("fw_ver") if rdma else None,
        "sriov_totalvfs": rec.get("sriov_totalvfs"),
        "sriov_numvfs": rec.get("sriov_numvfs"),
        "bond": bond,
        "role": None,
        "role_reason": None,
        "rail": None,
        "gpu": None,
        "gpu_distance": None,
    }


def _management_map(management_interfaces, bonds, lowers):
    """``{netdev: management interface it serves}``, following bond slaves and lower links."""
    found = {}
    for top in management_interfaces or ():
        stack = [top]
        seen = set()
        while stack:
            name = stack.pop()
            if name in seen:
                continue
            seen.add(name)
            found.setdefault(name, top)
            stack.extend((bonds.get(name) or {}).get("slaves") or [])
            stack.extend(lowers.get(name) or [])
    return found


def _supernic(nic):
    """A BlueField that is wired like a rail: one PF in its slot (B3140H SuperNIC; the B3220/B3240
    DPUs are dual-port), in no bond, and sharing a PCIe switch with a GPU (PIX/PXB). Whether the
    card runs in DPU or NIC mode is not visible in sysfs, so placement decides."""
    return (
        nic["device_id"] in BLUEFIELD_IDS
        and nic["ports"] == 1
        and not nic["bond"]
        and nic["gpu_distance"] in AFFINE
    )


def _signature_of(nic):
    return (nic["device_id"], nic["board_id"])


def _majority(values):
    counts = Counter(values).most_common()
    if not counts:
        return None
    if len(counts) > 1 and counts[0][1] == counts[1][1]:
        return None
    return counts[0][0]


def _break_tie(group, nics, signature):
    """Pick one address out of equally near candidates, or None. Returns (address, why)."""
    if signature is not None:
        full = [a for a in group if _signature_of(nics[a]) == signature]
        if len(full) == 1:
            nic = nics[full[0]]
            return full[0], f"model {nic['model']}/board {nic['board_id']} shared by the other rails"
        if not full:
            full = [a for a in group if nics[a]["device_id"] == signature[0]]
            if len(full) == 1:
                return full[0], f"model {nics[full[0]]['model']} shared by the other rails"
        if full:
            group = full
    speeds = [nics[a]["speed_gbps"] for a in group]
    known = [s for s in speeds if s is not None]
    if known:
        top = max(known)
        fastest = [a for a in group if nics[a]["speed_gbps"] == top]
        if len(fastest) == 1:
            return fastest[0], f"higher link speed ({top} Gb/s)"
    return None, None


def classify(records, *, management_interfaces=(), overrides=None):
    """Classify every Mellanox PF; see the module docstring. Returns the documented result dict.

    Raises ValueError for an invalid override (naming the address).
    """
    snapshot = _as_snapshot(records)
    devices = sorted(snapshot.get("devices") or [], key=lambda d: d["address"])
    by_address = {d["address"]: d for d in devices}
    warnings = list(snapshot.get("warnings") or [])
    overrides = normalize_overrides(overrides)

    gpus, nvswitches = gpu_inventory(devices)
    gpu_recs = [by_address[g["pci_address"]] for g in gpus]
    pfs = [d for d in devices if is_nic_pf(d)]
    ports_per_card = Counter(card_of(d["address"]) for d in pfs)
    nics = {d["address"]: _nic_entry(d, ports_per_card) for d in pfs}

    # Bonds: from the snapshot, completed by the netdevs' own bond field (hand-made records).
    bonds = {name: {"slaves": list(info.get("slaves") or [])} for name, info in (snapshot.get("bonds") or {}).items()}
    for nic in nics.values():
        if nic["bond"]:
            slaves = bonds.setdefault(nic["bond"], {"slaves": []})["slaves"]
            if nic["netdev"] not in slaves:
                slaves.append(nic["netdev"])
    mgmt = _management_map(management_interfaces, bonds, snapshot.get("net_lowers") or {})

    # Distance to every GPU, and the nearest one.
    dist = {}
    for address, nic in nics.items():
        rec = by_address[address]
        dist[address] = [pcie_distance_detail(g, rec) for g in gpu_recs]
        if dist[address]:
            nic["gpu_distance"] = min(dist[address], key=lambda d: _sort_key(*d))[0]

    def assign(nic, role, reason):
        nic["role"] = role
        nic["role_reason"] = reason

    # 1. overrides
    for address, ov in overrides.items():
        if address not in nics:
            what = "a VF or not a Mellanox NIC function" if address in by_address else "not present on this host"
            warnings.append(f"override for {address}: {what}; ignored")
            continue
        assign(nics[address], ov["role"], f"override from {OVERRIDE_SOURCE}")
    # 2-5. facts
    for address, nic in nics.items():
        if nic["role"] is not None:
            continue
        rec = by_address[address]
        netdev_names = [nd["name"] for nd in rec.get("netdevs") or []]
        carried = next((mgmt[n] for n in netdev_names if n in mgmt), None)
        if carried is None and nic["bond"] in mgmt:
            carried = mgmt[nic["bond"]]
        if carried is not None:
            assign(nic, "management", f"carries management interface {carried}")
        elif _supernic(nic):
            pass  # single-port BlueField in a GPU's PCIe switch: a SuperNIC, rail candidate (rule 6)
        elif nic["device_id"] in BLUEFIELD_IDS:
            extra = f", member of {nic['bond']}" if nic["bond"] else ""
            assign(nic, "dpu", f"{nic['model']} DPU{extra}: never a rail")
        elif not netdev_names and not rec.get("rdma") and nic["gpu_distance"] not in AFFINE:
            assign(nic, "ignored", "no netdev and no RDMA device (no driver bound?) and no GPU affinity")
        elif nic["bond"]:
            assign(nic, "storage", f"member of {nic['bond']}")
        elif nic["ports"] > 1:
            assign(nic, "storage", f"{nic['ports']}-port card {nic['card']}: storage")

    # 6. rails
    rail_of_gpu = {}  # gpu index -> nic address
    forced = set()
    for address, ov in overrides.items():
        if address not in nics or ov["role"] != "compute":
            continue
        if ov["rail"] is None:
            forced.add(address)
            continue
        nic = nics[address]
        nic["rail"] = ov["rail"]
        if ov["rail"] < len(gpus):
            rail_of_gpu[ov["rail"]] = address
            nic["gpu"] = gpus[ov["rail"]]["pci_address"]
        else:
            warnings.append(f"override for {address}: rail {ov['rail']} but the host has {len(gpus)} GPU(s)")
    candidates = [a for a, n in nics.items() if (n["role"] is None or a in forced) and n["rail"] is None]

    best = {}  # gpu index -> (level, hops, [addresses])
    for i in range(len(gpus)):
        if i in rail_of_gpu:
            continue
        scored = [(dist[a][i], a) for a in candidates if dist[a][i][0] in AFFINE]
        if not scored:
            continue
        top = min(_sort_key(*d) for d, _pci in scored)
        group = [a for d, a in scored if _sort_key(*d) == top]
        level, hops = next(d for d, a in scored if a == group[0])
        best[i] = (level, hops, group)

    source = [a for (_level, _hops, g) in best.values() if len(g) == 1 for a in g] + list(rail_of_gpu.values())
    if not source:
        source = sorted({a for (_level, _hops, g) in best.values() for a in g})
    signature = _majority([_signature_of(nics[a]) for a in source])

    without_rail = []
    notes = {}  # address -> storage reason for candidates that were considered but not chosen
    for i, gpu in enumerate(gpus):
        gaddr = gpu["pci_address"]
        if i in rail_of_gpu:
            continue
        if i not in best:
            phb = [
                a for a in candidates
                if dist[a][i][0] == "PHB" and all(d[0] not in AFFINE for d in dist[a])
            ]
            if len(phb) == 1 and phb[0] not in rail_of_gpu.values():
                chosen = phb[0]
                rail_of_gpu[i] = chosen
                nic = nics[chosen]
                nic["rail"] = i
                nic["gpu"] = gaddr
                if nic["role"] is None:
                    assign(nic, "compute", f"only single-port NIC on the host bridge of GPU {gaddr} (PHB; "
                                           "no NIC shares a PCIe switch with it)")
                warnings.append(f"GPU {i} ({gaddr}): rail {chosen} chosen at PHB distance (same host bridge, "
                                "no shared PCIe switch)")
                continue
            if len(phb) > 1:
                reason = (f"no single-port Mellanox NIC shares a PCIe switch (PIX/PXB) with this GPU and "
                          f"{len(phb)} sit on its host bridge (PHB): ambiguous")
                without_rail.append({"gpu": gaddr, "index": i, "reason": reason, "candidates": sorted(phb)})
                for a in phb:
                    notes.setdefault(a, f"one of {len(phb)} PHB rail candidates for GPU {gaddr}: ambiguous, "
                                        "see gpus_without_rail")
                continue
            if phb:
                owner = next(g for g, a in rail_of_gpu.items() if a == phb[0])
                reason = (f"the only NIC on its host bridge (PHB), {phb[0]}, already serves GPU "
                          f"{gpus[owner]['pci_address']} (index {owner})")
                without_rail.append({"gpu": gaddr, "index": i, "reason": reason, "candidates": list(phb)})
                continue
            near = [
                f"{a} is {dist[a][i][0]} but {nics[a]['role']}"
                for a in nics
                if dist[a][i][0] in AFFINE and a not in candidates
            ]
            reason = "no single-port Mellanox NIC shares a PCIe switch (PIX/PXB) with this GPU"
            if near:
                reason += " (" + "; ".join(near) + ")"
            without_rail.append({"gpu": gaddr, "index": i, "reason": reason, "candidates": []})
            continue
        level, _hops, group = best[i]
        why = None
        chosen = group[0] if len(group) == 1 else None
        if chosen is None:
            chosen, why = _break_tie(group, nics, signature)
        if chosen is None:
            reason = f"{len(group)} NICs tie at {level} distance (same model, board id and speed): ambiguous"
            without_rail.append({"gpu": gaddr, "index": i, "reason": reason, "candidates": list(group)})
            for a in group:
                notes.setdefault(a, f"tied rail candidate for GPU {gaddr}: ambiguous, see gpus_without_rail")
            continue
        owner = next((g for g, a in rail_of_gpu.items() if a == chosen), None)
        if owner is not None:
            reason = f"nearest NIC {chosen} already serves GPU {gpus[owner]['pci_address']} (index {owner})"
            without_rail.append({"gpu": gaddr, "index": i, "reason": reason, "candidates": [chosen]})
            continue
        rail_of_gpu[i] = chosen
        nic = nics[chosen]
        nic["rail"] = i
        nic["gpu"] = gaddr
        reason = f"nearest NIC to GPU {gaddr} ({level})"
        if why:
            reason += f"; tie broken by {why}"
        if nic["role"] is None:
            assign(nic, "compute", reason)
        for a in group:
            if a != chosen:
                notes.setdefault(a, f"lost the rail of GPU {gaddr} to {chosen} ({why})")

    for address, nic in nics.items():
        if nic["role"] is not None:
            if nic["role"] == "compute" and nic["rail"] is None:
                warnings.append(f"override makes {address} compute but no GPU without a rail is near it: no rail")
            continue
        if nic["device_id"] in BLUEFIELD_IDS:
            why = notes.get(address) or "not chosen as a rail"
            assign(nic, "dpu", f"{nic['model']} single-port near a GPU but {why}: dpu")
        elif address in notes:
            assign(nic, "storage", notes[address])
        elif nic["gpu_distance"] in AFFINE:
            near = min(range(len(gpus)), key=lambda j: _sort_key(*dist[address][j]))
            other = rail_of_gpu.get(near)
            gaddr = gpus[near]["pci_address"]
            if other:
                reason = f"nearest GPU {gaddr} ({nic['gpu_distance']}) already has rail NIC {other}"
            else:
                reason = f"nearest GPU {gaddr} ({nic['gpu_distance']}) has another nearer candidate"
            assign(nic, "storage", reason)
        elif nic["gpu_distance"] is None:
            assign(nic, "storage", "no GPU on this host: not a rail")
        else:
            assign(nic, "storage", f"no GPU within its PCIe switch (nearest GPU: {nic['gpu_distance']})")

    for entry in without_rail:
        warnings.append(f"GPU {entry['index']} ({entry['gpu']}) has no rail NIC: {entry['reason']}")

    rails = []
    for address, nic in sorted(nics.items(), key=lambda kv: (kv[1]["rail"] is None, kv[1]["rail"] or 0)):
        if nic["rail"] is None:
            continue
        rails.append(
            {
                "rail": nic["rail"],
                "gpu": nic["gpu"],
                "pci_address": address,
                "netdev": nic["netdev"],
                "rdma_device": nic["rdma_device"],
                "link_layer": nic["link_layer"],
                "speed_gbps": nic["speed_gbps"],
            }
        )
        if nic["link_state"] not in (None, "ACTIVE"):
            warnings.append(f"rail {nic['rail']} ({address}) RDMA port state is {nic['link_state']}")

    for gpu in gpus:
        gpu["rail_nic"] = rail_of_gpu.get(gpu["index"])

    return {
        "nics": [nics[a] for a in sorted(nics)],
        "gpus": gpus,
        "nvswitches": nvswitches,
        "platform": platform_of(snapshot.get("dmi")),
        "rails": rails,
        "gpus_without_rail": without_rail,
        "warnings": warnings,
    }
