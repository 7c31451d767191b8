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

import re

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
                row = params.get(param) or {}
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


def platform_key(hw):
    """The platform a host belongs to for pair coverage: DMI vendor + product (``NVIDIA DGXH100``)."""
    platform = (hw or {}).get("platform") or {}
    return " ".join(p for p in (platform.get("vendor"), platform.get("product")) if p) or "unknown"


def select_pairs(hosts, base_port=18515):
    """Choose the ``ib_write_bw`` host pairs of a fleet.

    :param hosts: ``{host: {"fabric": str, "platform": str, "rails": [{"rail", "rdma_device",
        "pci_address", "netdev", "speed_gbps"}]}}``.
    :returns: a list of tests ``{"id", "fabric", "server", "client", "rail", "server_device",
        "client_device", "line_rate_gbps", "port"}``: in every fabric, one host pair per unordered
        pair of platforms (DGX<->HGX, and DGX<->DGX when two DGXs exist), then every host left
        uncovered is paired with a host of another platform (else any other host); each host pair
        tests every rail index both hosts have (rail i <-> rail i, as rail-optimized fabrics are
        cabled). Deterministic: hosts are taken in name order; ports count up from ``base_port``.
    """
    fabrics = {}
    for name in sorted(hosts):
        fabrics.setdefault(hosts[name].get("fabric") or "default", []).append(name)
    host_pairs = []
    for fabric, names in sorted(fabrics.items()):
        by_platform = {}
        for name in names:
            by_platform.setdefault(hosts[name].get("platform") or "unknown", []).append(name)
        platforms = sorted(by_platform)
        chosen = []
        for i, left in enumerate(platforms):
            for right in platforms[i:]:
                if left == right:
                    if len(by_platform[left]) >= 2:
                        chosen.append((by_platform[left][0], by_platform[left][1]))
                else:
                    chosen.append((by_platform[left][0], by_platform[right][0]))
        covered = {h for pair in chosen for h in pair}
        for name in names:
            if name in covered or len(names) < 2:
                continue
            mine = hosts[name].get("platform") or "unknown"
            others = [h for h in names if h != name and (hosts[h].get("platform") or "unknown") != mine]
            peer = (others or [h for h in names if h != name])[0]
            chosen.append((peer, name))
            covered.add(name)
        host_pairs += [(fabric, a, b) for a, b in chosen]
    tests = []
    for fabric, server, client in host_pairs:
        server_rails = {r["rail"]: r for r in hosts[server].get("rails") or []}
        client_rails = {r["rail"]: r for r in hosts[client].get("rails") or []}
        for rail in sorted(set(server_rails) & set(client_rails)):
            speeds = [s for s in (server_rails[rail].get("speed_gbps"), client_rails[rail].get("speed_gbps")) if s]
            tests.append({
                "id": f"{server}:{rail}-{client}:{rail}", "fabric": fabric, "server": server, "client": client,
                "rail": rail, "server_device": server_rails[rail].get("rdma_device"),
                "client_device": client_rails[rail].get("rdma_device"),
                "line_rate_gbps": min(speeds) if speeds else None, "port": base_port + len(tests),
            })
    return tests


def judge_pairs(tests, results, threshold_pct):
    """Verdict of each test and who is to blame.

    :param results: ``{test id: {"gbps": float | None, "error": str | None}}`` as the clients measured.
    :returns: ``{host: [pair entry, ...]}`` where an entry is ``{"rail", "peer", "peer_rail", "gbps",
        "line_rate_gbps", "threshold_pct", "status", "blamed", "reason"}``. A failed test counts
        against a host (``blamed``) unless that host passed the same rail with another peer: in a
        three-host fabric the odd host out is blamed, in a two-host fabric both are.
    """
    verdicts = []
    for test in tests:
        res = results.get(test["id"]) or {"gbps": None, "error": "no result (the test did not run)"}
        line = test.get("line_rate_gbps")
        need = line * threshold_pct / 100.0 if line else None
        gbps = res.get("gbps")
        if res.get("error"):
            status, why = "fail", f"ib_write_bw failed: {res['error']}"
        elif gbps is None or need is None:
            status, why = "fail", "ib_write_bw gave no bandwidth" if gbps is None else "line rate unknown"
        elif gbps < need:
            status, why = "fail", f"{gbps:.1f} Gb/s < {threshold_pct}% of {line} Gb/s"
        else:
            status, why = "pass", ""
        verdicts.append((test, status, why, gbps))
    passed = {(t[h], t["rail"]) for t, status, _why, _gbps in verdicts if status == "pass"
              for h in ("server", "client")}
    out = {}
    for test, status, why, gbps in verdicts:
        for me, peer in (("server", "client"), ("client", "server")):
            host = test[me]
            blamed = status == "fail" and (host, test["rail"]) not in passed
            out.setdefault(host, []).append({
                "rail": test["rail"], "peer": test[peer], "peer_rail": test["rail"], "gbps": gbps,
                "line_rate_gbps": test.get("line_rate_gbps"), "threshold_pct": threshold_pct, "status": status,
                "blamed": blamed,
                "reason": (f"rail {test['rail']} {test[me + '_device']} <-> {test[peer]} "
                           f"{test[peer + '_device']}: {why}") if status == "fail" else "",
            })
    return out


def verdict(checks, pairs):
    """``(passed, failures)``: the node passes when no check failed and no pair is blamed on it."""
    failures = [c["reason"] or c["check"] for c in checks if c["status"] == "fail"]
    failures += [p["reason"] for p in pairs or [] if p["status"] == "fail" and p.get("blamed")]
    failures = list(dict.fromkeys(failures))  # one line per distinct reason (nvidia-smi missing fails 4 checks)
    return not failures, failures
