# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The validation gate as pure functions (stdlib only): per-node checks, the choice of
``ib_write_bw`` pairs across a fabric, and the verdict of the pairs.

``check_node(hw, observed, expect)`` compares what a node reads back now (``observed``, gathered by
the ``node_validation`` module) with what discovery found (``hw``, the ``gpunode_hw`` fact) and what
the roles declared (``expect``). Every check is a dict::

    {"check": "link", "scope": "host" | "rail", "rail": 3 | None, "device": "0000:5e:00.0" | None,
     "netdev": "ibp94s0" | None, "status": "pass" | "fail" | "skip", "expected": ..., "found": ...,
     "reason": "rail 3 0000:5e:00.0 (ibp94s0): link DOWN, expected ACTIVE"}

``reason`` names host-independent facts (rail, PCI address, netdev, what was expected and found);
the role prefixes the host name. Hardware facts used here: Fabric State ``Completed`` and
persistence ``Enabled`` in ``nvidia-smi -q`` (the public output from https://github.com/leptonai/gpud),
fabric manager versioned as the driver (docs/hardware-facts.md "GPU side"), link state
``ACTIVE`` and rate (the public output from https://github.com/leptonai/gpud).
"""

from __future__ import annotations

import os.path
import re

from ansible_collections.mlplatform.gpunode.plugins.module_utils import perftest
from ansible_collections.mlplatform.gpunode.plugins.module_utils.mlxconfig import values_equal

CHECKS = ("gpu_count", "gpu_product", "driver_version", "fabric_manager", "fabric_state", "nvidia_peermem",
          "persistence", "link", "affinity", "nv_config", "roce_accl", "vfs", "qos")
QOS_KEYS = ("trust", "pfc", "pfc_priorities", "ecn_np", "ecn_rp", "cnp_dscp", "roce_tos", "mtu")
_FAMILY_RE = re.compile(r"^(?:[A-Z]{1,2}\d{2,4}[A-Z]?|\d+GB)$")


def _entry(check, status, expected=None, found=None, reason="", rail=None, device=None, netdev=None):
    return {"check": check, "scope": "host" if rail is None else "rail", "rail": rail, "device": device,
            "netdev": netdev, "status": status, "expected": expected, "found": found, "reason": reason}


def _rail_label(rail):
    netdev = f" ({rail['netdev']})" if rail.get("netdev") else ""
    return f"rail {rail['rail']} {rail['pci_address']}{netdev}"


def product_tokens(name):
    """The family and memory tokens that identify a GPU product in both naming schemes:
    ``"H100 SXM5 80GB"`` (discovery, from the PCI id) and ``"NVIDIA H100 80GB HBM3"`` (nvidia-smi)
    both give ``{"H100", "80GB"}``."""
    return {t for t in re.split(r"[\s-]+", name or "") if _FAMILY_RE.match(t)}


def product_matches(model, name, memory_total_mib=None):
    """Does nvidia-smi's product ``name`` (and memory) fit discovery's ``model``?

    The family tokens (``H100``) of the model must all be in the name. Its memory token (``80GB``)
    must be in the name when the name has one (``"NVIDIA H100 80GB HBM3"``); names without one
    (``"NVIDIA H100 PCIe"``) are checked against ``memory_total_mib`` instead, within 2% (an 80GB
    H100 reports 81559 MiB), and pass on the family alone when no memory is known.
    """
    want, have = product_tokens(model), product_tokens(name)
    family = {t for t in want if not t.endswith("GB")}
    if not family <= have:
        return False
    sizes = [int(t[:-2]) for t in want if t.endswith("GB")]
    if not sizes:
        return True
    if any(t.endswith("GB") for t in have):
        return all(f"{n}GB" in have for n in sizes)
    if memory_total_mib:
        return all(abs(memory_total_mib / 1024 - n) <= max(1.5, 0.02 * n) for n in sizes)
    return True


def _gpu_checks(hw, observed, expect):
    out = []
    smi = observed.get("nvidia_smi") or {}
    if smi.get("error"):
        reason = f"nvidia-smi: {smi['error']}"
        for check in ("gpu_count", "gpu_product", "driver_version", "persistence"):
            out.append(_entry(check, "fail", reason=reason))
        return out
    gpus = smi.get("gpus") or []
    discovered = sorted(g["pci_address"] for g in hw.get("gpus") or [])
    found = sorted(g["pci_address"] for g in gpus)
    if found == discovered:
        out.append(_entry("gpu_count", "pass", len(discovered), len(found)))
    else:
        missing = sorted(set(discovered) - set(found))
        extra = sorted(set(found) - set(discovered))
        out.append(_entry("gpu_count", "fail", len(discovered), len(found),
                          f"nvidia-smi shows {len(found)} GPUs, discovery found {len(discovered)}"
                          + (f"; missing {', '.join(missing)}" if missing else "")
                          + (f"; not discovered {', '.join(extra)}" if extra else "")))
    want = expect.get("gpu_product")
    models = {g["pci_address"]: g.get("model") for g in hw.get("gpus") or []}
    bad = []
    for gpu in gpus:
        name = gpu.get("product_name") or ""
        model = models.get(gpu["pci_address"]) or ""
        if (want and name != want) or (not want and not product_matches(model, name, gpu.get("memory_total_mib"))):
            bad.append(f"{gpu['pci_address']} is {name!r}")
    expected_product = want or " ".join(sorted(product_tokens(hw.get("gpu_product") or "")))
    out.append(_entry("gpu_product", "fail" if bad else "pass", expected_product,
                      sorted({g.get("product_name") for g in gpus}),
                      f"GPU product: {'; '.join(bad)}, expected {expected_product}" if bad else ""))
    driver = smi.get("driver_version")
    want_driver = expect.get("driver_version")
    if want_driver is None:
        out.append(_entry("driver_version", "pass" if driver else "fail", None, driver,
                          "" if driver else "nvidia-smi reports no driver version"))
    else:
        ok = driver == want_driver
        out.append(_entry("driver_version", "pass" if ok else "fail", want_driver, driver,
                          "" if ok else f"driver {driver}, expected {want_driver}"))
    off = [g["pci_address"] for g in gpus if (g.get("persistence_mode") or "") != "Enabled"]
    out.append(_entry("persistence", "fail" if off else "pass", "Enabled", off or "Enabled",
                      f"persistence mode is not Enabled on {', '.join(off)}" if off else ""))
    if hw.get("fabric_manager_required"):
        fm = observed.get("fabric_manager_version")
        if not fm:
            out.append(_entry("fabric_manager", "fail", driver, None,
                              "NVSwitches present but no nvidia-fabricmanager package is installed"))
        else:
            ok = driver is not None and fm.split("-")[0] == driver
            out.append(_entry("fabric_manager", "pass" if ok else "fail", driver, fm,
                              "" if ok else f"fabric manager {fm} does not match driver {driver}"))
        bad_fabric = [f"{g['pci_address']} {g.get('fabric_state')}" for g in gpus
                      if g.get("fabric_state") != "Completed"]
        out.append(_entry("fabric_state", "fail" if bad_fabric else "pass", "Completed",
                          sorted({g.get("fabric_state") for g in gpus}, key=str),
                          f"Fabric State is not Completed: {', '.join(bad_fabric)}" if bad_fabric else ""))
    return out


def _rail_checks(hw, observed, expect):
    out = []
    nics = observed.get("nics") or {}
    affinity = observed.get("affinity") or {}
    for rail in hw.get("rails") or []:
        pci, label = rail["pci_address"], _rail_label(rail)
        where = {"rail": rail["rail"], "device": pci, "netdev": rail.get("netdev")}
        nic = nics.get(pci)
        if nic is None:
            out.append(_entry("link", "fail", "present", None, f"{label}: the NIC is gone from sysfs", **where))
            continue
        speed = expect.get("link_speed_gbps") or rail.get("speed_gbps")
        layer = expect.get("link_layer")
        problems = []
        if nic.get("link_state") != "ACTIVE":
            problems.append(f"link {nic.get('link_state') or 'absent'}, expected ACTIVE")
        if speed and nic.get("speed_gbps") != speed:
            problems.append(f"speed {nic.get('speed_gbps')} Gb/s, expected {speed} Gb/s")
        if layer and nic.get("link_layer") != layer:
            problems.append(f"link layer {nic.get('link_layer')}, expected {layer}")
        out.append(_entry("link", "fail" if problems else "pass",
                          {"state": "ACTIVE", "speed_gbps": speed, "link_layer": layer},
                          {"state": nic.get("link_state"), "speed_gbps": nic.get("speed_gbps"),
                           "link_layer": nic.get("link_layer")},
                          f"{label}: {'; '.join(problems)}" if problems else "", **where))
        now = affinity.get(rail["gpu"])
        moved = f"{label}: GPU {rail['gpu']} now pairs with {now}, discovery said {pci}"
        out.append(_entry("affinity", "pass" if now == pci else "fail", pci, now, "" if now == pci else moved,
                          **where))
        out += _declared_rail_checks(rail, label, where, observed, expect, nic)
    return out


def _declared_rail_checks(rail, label, where, observed, expect, nic):
    out = []
    pci = rail["pci_address"]
    nv_want = expect.get("nv_config") or {}
    if expect.get("nv_config_settled"):
        config = (observed.get("nv_config") or {}).get(pci) or {}
        if config.get("error"):
            out.append(_entry("nv_config", "fail", "current == next boot", None,
                              f"{label}: mlxconfig: {config['error']}", **where))
        else:
            # nic_firmware verified next boot == desired when it applied; after the reboot every
            # parameter must run (current) as it was set (next boot), or it did not stick.
            pending = {p: row for p, row in sorted((config.get("params") or {}).items())
                       if row.get("next_boot") is not None and row.get("current") is not None
                       and not values_equal(p, row["next_boot"], row["current"])}
            out.append(_entry("nv_config", "fail" if pending else "pass", "current == next boot",
                              dict(pending),
                              f"{label}: NV config did not take effect: " + "; ".join(
                                  f"{p} current {r['current']}, next boot {r['next_boot']}" for p, r in pending.items())
                              if pending else "", **where))
    if nv_want:
        config = (observed.get("nv_config") or {}).get(pci) or {}
        if config.get("error"):
            out.append(_entry("nv_config", "fail", nv_want, None, f"{label}: mlxconfig: {config['error']}", **where))
        else:
            params = config.get("params") or {}
            bad, found = [], {}
            for param, value in sorted(nv_want.items()):
                # A parameter without _P<n> is the rail's own port, as the fabric declares it and mlxconfig sets it.
                row = params.get(param) or params.get(f"{param}_P{int(pci[-1]) + 1}") or {}
                current = row.get("current")
                found[param] = current
                if current is None or not values_equal(param, value, current):
                    pending = row.get("next_boot")
                    note = f" (next boot {pending})" if pending not in (None, current) else ""
                    bad.append(f"{param} current {current}, desired {value}{note}")
            out.append(_entry("nv_config", "fail" if bad else "pass", nv_want, found,
                              f"{label}: NV config {'; '.join(bad)}" if bad else "", **where))
    accl_want = expect.get("roce_accl") or {}
    if accl_want:
        accl = (observed.get("roce_accl") or {}).get(pci) or {}
        if accl.get("error"):
            out.append(_entry("roce_accl", "fail", accl_want, None, f"{label}: mlxreg: {accl['error']}", **where))
        else:
            fields = accl.get("fields") or {}
            bad = [f"{k}={fields.get(k)}, declared {v}" for k, v in sorted(accl_want.items()) if fields.get(k) != v]
            out.append(_entry("roce_accl", "fail" if bad else "pass", accl_want,
                              {k: fields.get(k) for k in accl_want},
                              f"{label}: ROCE_ACCL {'; '.join(bad)}" if bad else "", **where))
    vfs = expect.get("num_vfs")
    if vfs is not None:
        have = nic.get("sriov_numvfs")
        out.append(_entry("vfs", "pass" if have == vfs else "fail", vfs, have,
                          "" if have == vfs else f"{label}: {have} VFs, expected {vfs}", **where))
    qos_want = {k: v for k, v in (expect.get("qos") or {}).items() if k in QOS_KEYS and v is not None}
    if qos_want and nic.get("link_layer") != "InfiniBand":
        qos = (observed.get("qos") or {}).get(rail.get("netdev") or "") or {}
        if qos.get("error"):
            out.append(_entry("qos", "fail", qos_want, None, f"{label}: QoS: {qos['error']}", **where))
        else:
            bad = [f"{k} {qos.get(k)}, declared {v}" for k, v in sorted(qos_want.items()) if qos.get(k) != v]
            out.append(_entry("qos", "fail" if bad else "pass", qos_want, {k: qos.get(k) for k in qos_want},
                              f"{label}: QoS {'; '.join(bad)}" if bad else "", **where))
    return out


def check_node(hw, observed, expect):
    """Every per-node check (see the module docstring) -> list of check dicts, host checks first,
    then per rail in rail order. ``expect`` keys: ``gpu_product``, ``driver_version``,
    ``link_speed_gbps``, ``link_layer``, ``nv_config`` ({PARAM: value}), ``nv_config_settled`` (every
    parameter's current value equals its next-boot value), ``roce_accl`` ({field: int}),
    ``num_vfs``, ``qos`` ({trust, pfc, ecn_np, ecn_rp, cnp_dscp, roce_tos, mtu}); a key left None
    is not checked. NV config values compare in any spelling (``ETH`` = ``ETH(2)`` = ``2``)."""
    out = _gpu_checks(hw, observed, expect)
    loaded = (observed.get("modules") or {}).get("nvidia_peermem")
    out.append(_entry("nvidia_peermem", "pass" if loaded else "fail", True, bool(loaded),
                      "" if loaded else "kernel module nvidia_peermem is not loaded (GPUDirect RDMA)"))
    out += _rail_checks(hw, observed, expect)
    return out


def known_from_host_state(state, hw):
    """Pure: the vendor reads of ``node_validation`` that this run's host read (the ``host_state`` module's
    result) already holds, for the compute rails of ``hw``, in the shapes ``check_node`` reads::

        {"nv_config": {pci: {"params": {PARAM: {"current": raw, "next_boot": raw}}}},
         "roce_accl": {pci: {"fields": {field: int}}},
         "qos": {netdev: {trust, pfc, pfc_priorities, ecn_np, ecn_rp, cnp_dscp, roce_tos, mtu}}}

    A rail the read does not hold is left out, and the module reads it live: a tool not installed then, a role
    it did not read, and a device that refused the tool (a busy card answers once, and a live read-back gives
    the tool's own reason). ``{}`` without a state.
    """
    if not state:
        return {}
    out = {"nv_config": {}, "roce_accl": {}, "qos": {}}
    nv, accl = state.get("nv_config") or {}, state.get("roce_accl") or {}
    qos = state.get("qos") or {}
    for rail in (hw or {}).get("rails") or []:
        pci, netdev = rail["pci_address"], rail.get("netdev")
        if pci in nv:
            params = {param: {"current": row.get("current"), "next_boot": row.get("next_boot")}
                      for param, row in nv[pci].items()}
            out["nv_config"][pci] = {"params": params}
        if pci in accl:
            out["roce_accl"][pci] = {"fields": accl[pci]}
        if netdev and netdev in qos:
            read = qos[netdev]
            pfc = read.get("pfc")
            out["qos"][netdev] = {
                "trust": read.get("trust"), "pfc": pfc,
                "pfc_priorities": None if pfc is None else [p for p, on in enumerate(pfc) if on],
                # node_reads.read_qos lists no priority where the ECN directory is absent.
                "ecn_np": read.get("ecn_np") or [], "ecn_rp": read.get("ecn_rp") or [],
                "cnp_dscp": read.get("cnp_dscp"), "roce_tos": read.get("roce_tos"), "mtu": read.get("mtu")}
    return out


# node_validation's ``expect`` option (its argument spec; the validation_node_from_read filter checks its input with
# the same spec).
EXPECT_SPEC = {
    "gpu_product": {"type": "str"},
    "driver_version": {"type": "str"},
    "link_speed_gbps": {"type": "int"},
    "link_layer": {"type": "str", "choices": ["Ethernet", "InfiniBand"]},
    "nv_config": {"type": "dict"},
    "nv_config_settled": {"type": "bool"},
    "roce_accl": {"type": "dict"},
    "num_vfs": {"type": "int"},
    "qos": {"type": "dict"},
}

# The NIC facts of the node read-back (node_validation's observed["nics"]).
NIC_KEYS = ("link_state", "speed_gbps", "link_layer", "sriov_numvfs", "sriov_totalvfs", "netdev")


def fabric_manager_version(packages):
    """The version of the installed ``nvidia-fabricmanager*`` package (the first by name, as ``dpkg-query -W``
    lists them), None without one. ``packages`` maps every installed package to its version."""
    for name in sorted(packages or {}):
        if name.startswith("nvidia-fabricmanager") and packages[name]:
            return packages[name]
    return None


def observed_from_host_state(state, hw, expect, results_dir=None):
    """Pure: what node_validation reads back (``observed``, and the result files when ``results_dir`` is given),
    from this run's host read (the host_state module's result) instead of the host. ``expect`` is as
    ``check_node`` takes it. Returns ``(observed, result_files)``, or ``(None, reason)`` when the read does not
    hold everything the checks need (a read by an older collection, a rail whose tool refused it, a result file
    that could not be read): the host is read then."""
    state = state or {}
    smi = state.get("nvidia_smi")
    hardware = state.get("hardware") or {}
    if not isinstance(smi, dict) or not isinstance(state.get("affinity"), dict) or "nics" not in hardware:
        return None, "the host read holds no nvidia-smi read or GPU affinity"
    observed = {"nvidia_smi": smi, "modules": {
        "nvidia_peermem": bool(((state.get("kernel_modules") or {}).get("nvidia_peermem") or {}).get("loaded"))}}
    if hw.get("fabric_manager_required"):
        observed["fabric_manager_version"] = fabric_manager_version(state.get("packages"))
    observed["nics"] = {n["pci_address"]: {k: n.get(k) for k in NIC_KEYS} for n in hardware["nics"]}
    observed["affinity"] = dict(state["affinity"])
    known = known_from_host_state(state, hw)
    rails = hw.get("rails") or []
    wanted = []
    if expect.get("nv_config") or expect.get("nv_config_settled"):
        wanted.append(("nv_config", [r["pci_address"] for r in rails]))
    if expect.get("roce_accl"):
        wanted.append(("roce_accl", [r["pci_address"] for r in rails]))
    if expect.get("qos"):
        wanted.append(("qos", [r["netdev"] for r in rails if r.get("netdev") and r.get("link_layer") != "InfiniBand"]))
    for part, keys in wanted:
        missing = [k for k in keys if k not in known[part]]
        if missing:
            return None, f"the host read holds no {part} of {', '.join(missing)}"
        observed[part] = {k: known[part][k] for k in keys}
    files = None
    if results_dir is not None:
        read = state.get("result_files") or {}
        same_dir = bool(read.get("path")) and os.path.normpath(read["path"]) == os.path.normpath(results_dir)
        if not same_dir or "files" not in read:
            return None, read.get("error") or f"the host read holds no result files of {results_dir}"
        files = read["files"]
    return observed, files


def normalize_expect(expect):
    """``expect`` as node_validation's module takes it: the keys left unset (None, {}, "" or false) dropped.
    Raises ValueError when a ROCE_ACCL value is not an integer."""
    out = {k: v for k, v in (expect or {}).items() if v not in (None, {}, "", False)}
    bad_accl = [k for k, v in (out.get("roce_accl") or {}).items() if not isinstance(v, int) or isinstance(v, bool)]
    if bad_accl:
        raise ValueError("expect.roce_accl values must be integers: " + ", ".join(sorted(bad_accl)))
    return out


def platform_key(hw):
    """The platform a host belongs to for pair coverage: DMI vendor + product (``NVIDIA DGXH100``)."""
    platform = (hw or {}).get("platform") or {}
    return " ".join(p for p in (platform.get("vendor"), platform.get("product")) if p) or "unknown"


SCHEDULE_RAIL_KEYS = ("rail", "rdma_device", "pci_address", "netdev", "speed_gbps")


def schedule_host(hw, fabric=None):
    """One host as ``bandwidth_schedule`` takes it, from its discovery result: ``{"fabric", "platform", "rails"}``
    (``fabric`` None or empty is ``default``); None when ``hw`` is not a discovery result with rails."""
    if not isinstance(hw, dict) or not isinstance(hw.get("rails"), list):
        return None
    return {"fabric": str(fabric) if fabric not in (None, "") else "default", "platform": platform_key(hw),
            "rails": [{k: r.get(k) for k in SCHEDULE_RAIL_KEYS} for r in hw["rails"] if isinstance(r, dict)]}


MAX_PORT = 65535


def _platform_pairs(platforms, counts):
    """Every unordered platform pair a fabric must cover: each pair of distinct platforms, and a
    platform with itself when it has two hosts or more."""
    need = set()
    for i, left in enumerate(platforms):
        if counts[left] >= 2:
            need.add((left, left))
        for right in platforms[i + 1:]:
            need.add((left, right))
    return need


def _ring(names, platform_of):
    """The fabric's hosts as a ring of platform blocks (platforms in name order, hosts in play order
    within a block), and its edges (server, client): host i serves host i+1. Every host serves one
    peer and is a client of one; consecutive blocks and each block's own hosts are covered."""
    blocks = {}
    for name in names:
        blocks.setdefault(platform_of[name], []).append(name)
    ring = [h for p in sorted(blocks) for h in blocks[p]]
    if len(ring) < 2:
        return blocks, []
    return blocks, [(ring[i], ring[(i + 1) % len(ring)]) for i in range(len(ring))]


def _extra_edges(blocks, covered):
    """Edges for the platform pairs the ring leaves out (only with four platforms or more in one
    fabric), spread over each platform's hosts, each in the first later phase where its server
    serves nobody yet: ``[(phase, server, client)]``."""
    need = sorted(_platform_pairs(sorted(blocks), {p: len(h) for p, h in blocks.items()}) - covered)
    turn = dict.fromkeys(blocks, 0)
    serving = {}  # phase -> hosts serving in it
    out = []
    for left, right in need:
        server = blocks[left][turn[left] % len(blocks[left])]
        turn[left] += 1
        client = blocks[right][turn[right] % len(blocks[right])]
        turn[right] += 1
        if server == client:  # cannot happen for distinct platforms; a block of one has no self pair
            continue
        phase = 1
        while server in serving.get(phase, ()):
            phase += 1
        serving.setdefault(phase, set()).add(server)
        out.append((phase, server, client))
    return out


def bandwidth_schedule(hosts, order=None, forks=5, base_port=18515, test_timeout=60, server_start_s=30,
                       addresses=None):
    """The ``ib_write_bw`` schedule of a fleet: which host serves which on which rail, when, on which
    port and for how long. One pass over the hosts: O(N) time and memory.

    :param hosts: ``{host: {"fabric": str, "platform": str, "rails": [{"rail", "rdma_device",
        "pci_address", "netdev", "speed_gbps"}]}}``.
    :param order: the play's host order (``ansible_play_hosts``); hosts missing from it come after,
        in name order. Clients run in this order, ``forks`` at a time.
    :param forks: how many hosts Ansible runs a task on at once: one wave of clients.
    :param base_port: the lowest TCP port; ports are per address (a server's port is unique among the
        servers listening on its address), so with one address per host the highest port is
        ``base_port + rails - 1`` (``+ 2 * rails - 1`` with extra phases) whatever the fleet size.
    :param addresses: ``{host: address peers connect to}``; hosts that share an address (simulated
        hosts on one network namespace) get distinct ports. Missing hosts have their own.
    :param test_timeout: seconds one client run may take (the module's ``timeout``).
    :param server_start_s: seconds the server task may take per batch of ``forks`` hosts.
    :returns: ``{"tests": [...], "phases": [{"together": bool, "servers": {host: [server entry]}, "clients": {host:
        [client entry]}}], "untested": {host: reason}, "max_fan_in": int, "port_range": [lo, hi],
        "waves": int}``. A test is ``{"id", "fabric", "phase", "wave", "server", "client", "rail",
        "server_device", "client_device", "line_rate_gbps", "port", "server_lifetime_s"}``.

    In each fabric the hosts form a ring of platform blocks: host i serves host i+1 on every rail both
    have (rail i <-> rail i, as rail-optimized fabrics are cabled), so every host is tested once as a
    server and once as a client and each pair of adjacent platforms and each platform with itself are
    covered (phase 0). A fabric with four platforms or more gets one test per platform pair the ring
    missed, in later phases where each server serves one peer. Within a phase every host rail serves
    at most one peer at a time (``max_fan_in``; the bound is 2). A phase's servers start together, then
    its clients run in play order, ``forks`` hosts per wave; a server lives until its client's last
    possible finish: the server task's batches, the waves before its client's, and the client's runs
    up to this one. A phase whose hosts all fit in one batch of ``forks`` is ``together``: each host
    starts its servers and runs its clients in one call (one round trip a host instead of two).
    """
    forks = max(1, int(forks))
    base_port = int(base_port)
    rank = {h: i for i, h in enumerate(order or [])}
    names_all = sorted(hosts, key=lambda h: (rank.get(h, len(rank)), h))
    fabrics, platform_of = {}, {}
    for name in names_all:
        spec = hosts[name]
        fabrics.setdefault(spec.get("fabric") or "default", []).append(name)
        platform_of[name] = spec.get("platform") or "unknown"
    edges, untested = [], {}
    for fabric, names in sorted(fabrics.items()):
        if len(names) < 2:
            untested.update({h: f"alone in fabric {fabric}: no peer to test against" for h in names})
            continue
        blocks, ring = _ring(names, platform_of)
        covered = {tuple(sorted((platform_of[s], platform_of[c]))) for s, c in ring}
        edges += [(fabric, 0, s, c) for s, c in ring]
        edges += [(fabric, phase, s, c) for phase, s, c in _extra_edges(blocks, covered)]
    rails = {}
    for name in names_all:
        rails[name] = {r["rail"]: r for r in hosts[name].get("rails") or []}
    addresses = addresses or {}
    next_port = {}  # address -> ports used so far
    phases = {}
    for fabric, phase, server, client in edges:
        phases.setdefault(phase, []).append((fabric, server, client))
    tests, out_phases, max_fan_in, top_port = [], [], 0, base_port
    for phase_key in sorted(phases):
        phase = len(out_phases)
        servers, clients, fan_in = {}, {}, {}
        for fabric, server, client in phases[phase_key]:
            srails, crails = rails[server], rails[client]
            common = sorted(set(srails) & set(crails))
            if not common:
                continue
            where = addresses.get(server) or f"host:{server}"
            first = next_port.get(where, 0)
            next_port[where] = first + len(common)
            fan_in[server] = fan_in.get(server, 0) + 1
            for k, rail in enumerate(common):
                speeds = [s for s in (srails[rail].get("speed_gbps"), crails[rail].get("speed_gbps")) if s]
                port = base_port + first + k
                top_port = max(top_port, port)
                test = {
                    "id": f"{server}:{rail}-{client}:{rail}", "fabric": fabric, "phase": phase, "server": server,
                    "client": client, "rail": rail, "server_device": srails[rail].get("rdma_device"),
                    "client_device": crails[rail].get("rdma_device"),
                    "line_rate_gbps": min(speeds) if speeds else None, "port": port,
                }
                tests.append(test)
                servers.setdefault(server, []).append(test)
                clients.setdefault(client, []).append(test)
        if not clients:
            continue
        max_fan_in = max(max_fan_in, *fan_in.values())
        longest = max(len(c) for c in clients.values())
        start_s = -(-len(servers) // forks) * server_start_s
        # clients run in play order, forks hosts at a time: a client's wave is its place in that order // forks
        client_rank = {h: i for i, h in enumerate(sorted(clients, key=lambda h: (rank.get(h, len(rank)), h)))}
        for client, mine in clients.items():
            wave = client_rank[client] // forks
            for k, test in enumerate(mine):
                test["wave"] = wave
                test["server_lifetime_s"] = start_s + wave * longest * test_timeout + (k + 1) * test_timeout
        out_phases.append({
            # Every host of the phase runs at once (no more than forks): each starts its servers and runs its
            # clients in one call, the clients retrying while a peer's server starts. Otherwise the servers of
            # all hosts start first, then the clients run in waves.
            "together": len(set(servers) | set(clients)) <= forks,
            "servers": {h: [{"id": t["id"], "device": t["server_device"], "port": t["port"],
                             "lifetime": t["server_lifetime_s"]} for t in mine] for h, mine in servers.items()},
            "clients": {h: [{"id": t["id"], "device": t["client_device"], "port": t["port"], "peer": t["server"]}
                            for t in mine] for h, mine in clients.items()},
        })
    if top_port > MAX_PORT:
        raise ValueError(f"validation_bandwidth_base_port {base_port}: the schedule needs ports up to {top_port}, "
                         f"above {MAX_PORT}")
    waves = sum(1 + max(len(set(t["client"] for t in tests if t["phase"] == p)) - 1, 0) // forks
                for p in range(len(out_phases)))
    return {"tests": tests, "phases": out_phases, "untested": untested, "max_fan_in": max_fan_in,
            "port_range": [base_port, top_port], "waves": waves}


def select_pairs(hosts, base_port=18515):
    """The tests of ``bandwidth_schedule`` alone (hosts in name order)."""
    return bandwidth_schedule(hosts, base_port=base_port)["tests"]


def judge_pairs(tests, results, threshold_pct, server_errors=None):
    """Verdict of each test and which side is to blame.

    :param results: ``{test id: {"gbps": float | None, "error": str | None}}`` as the clients measured.
    :param server_errors: ``{test id: str}``: servers that did not start or died before their client
        connected (the ``ib_write_bw`` module's ``server_errors``).
    :returns: ``{host: [pair entry, ...]}`` where an entry is ``{"rail", "peer", "peer_rail", "side",
        "gbps", "line_rate_gbps", "threshold_pct", "status", "blamed", "failed_side", "reason"}``;
        ``side`` is this host's part in the test (``server`` or ``client``) and ``failed_side`` is
        ``server``, ``client``, ``both`` or ``link`` (neither host failed anything else on the rail).
        A failed test counts against a host (``blamed``) unless that host passed the same rail in
        another test: a host whose rail is broken fails both its tests (as server and as client) and
        its peers, who pass their other test, are not blamed. A server that did not start is blamed
        alone; its client is not. A failure of the harness (perftest.is_harness_failure: the port was
        taken, a bind failed, a tool is missing) is ``status`` ``harness_error`` with ``failed_side``
        ``harness``: no host is blamed for it, and it is not a measurement of the rail.
    """
    server_errors = server_errors or {}
    verdicts = []
    for test in tests:
        res = results.get(test["id"]) or {"gbps": None, "error": "no result (the test did not run)"}
        line = test.get("line_rate_gbps")
        need = line * threshold_pct / 100.0 if line else None
        gbps = res.get("gbps")
        server_down = server_errors.get(test["id"])
        if server_down and perftest.is_harness_failure(server_down):
            status, why, server_down = "harness_error", f"harness error, the server did not run: {server_down}", None
        elif not server_down and res.get("error") and perftest.is_harness_failure(res["error"]):
            status, why = "harness_error", f"harness error: {res['error']}"
        elif server_down:
            status, why = "fail", f"the server did not run: {server_down}"
        elif res.get("error"):
            status, why = "fail", f"ib_write_bw failed: {res['error']}"
        elif gbps is None or need is None:
            status, why = "fail", "ib_write_bw gave no bandwidth" if gbps is None else "line rate unknown"
        elif gbps < need:
            status, why = "fail", f"{gbps:.1f} Gb/s < {threshold_pct}% of {line} Gb/s"
        else:
            status, why = "pass", ""
        verdicts.append((test, status, why, gbps, bool(server_down)))
    passed = {(t[h], t["rail"]) for t, status, *_rest in verdicts if status == "pass" for h in ("server", "client")}
    out = {}
    for test, status, why, gbps, server_down in verdicts:
        blame = {"server": False, "client": False}
        if status == "fail":
            blame["server"] = server_down or (test["server"], test["rail"]) not in passed
            blame["client"] = not server_down and (test["client"], test["rail"]) not in passed
        failed_side = "harness" if status == "harness_error" else None
        if status == "fail":
            failed_side = ("both" if all(blame.values()) else "server" if blame["server"]
                           else "client" if blame["client"] else "link")
        for me, peer in (("server", "client"), ("client", "server")):
            out.setdefault(test[me], []).append({
                "rail": test["rail"], "peer": test[peer], "peer_rail": test["rail"], "side": me, "gbps": gbps,
                "line_rate_gbps": test.get("line_rate_gbps"), "threshold_pct": threshold_pct, "status": status,
                "blamed": blame[me], "failed_side": failed_side,
                "reason": (f"rail {test['rail']} {test[me + '_device']} as {me} <-> {test[peer]} "
                           f"{test[peer + '_device']}: {why} (failed side: {failed_side})")
                if status != "pass" else "",
            })
    return out


def harness_errors(pairs):
    """The reasons of the tests the harness failed (port taken, bind, a tool missing): reported, never the
    host's failure."""
    return list(dict.fromkeys(p["reason"] for p in pairs or [] if p.get("status") == "harness_error"))


def verdict(checks, pairs):
    """``(passed, failures)``: the node passes when no check failed and no pair is blamed on it (a harness error is
    not blamed on anyone)."""
    failures = [c["reason"] or c["check"] for c in checks if c["status"] == "fail"]
    failures += [p["reason"] for p in pairs or [] if p["status"] == "fail" and p.get("blamed")]
    failures = list(dict.fromkeys(failures))  # one line per distinct reason (nvidia-smi missing fails 4 checks)
    return not failures, failures
