# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What ``node_health`` reads, in one pass (the evaluation is ``node_health.evaluate``).

``observe(runner, sysfs_root, proc_root, hw, expect)`` needs from ``runner`` only what an
AnsibleModule offers: ``get_bin_path(name)`` and ``run_command(argv, environ_update=...)``, so the
Node Problem Detector check script (roles/node_problem_detector) runs the same reads with a small
subprocess runner. Tools: ``nvidia-smi -q`` and ``dmesg --time-format=iso`` once per host,
``mlxreg`` and ``mlnx_qos`` once per rail when their values are declared; the rest is sysfs and
procfs. Reads have no side effects.
"""

from __future__ import annotations

import os
import time

from ansible_collections.mlplatform.gpunode.plugins.module_utils import node_health, node_reads, nvidia_smi
from ansible_collections.mlplatform.gpunode.plugins.module_utils.parsing import ParseError
from ansible_collections.mlplatform.gpunode.plugins.module_utils.pci_sysfs import (
    names_of_function,
    parse_rate,
    parse_state,
)


class HealthReadError(Exception):
    """A file or output of a format the module does not know: the message names it."""


def _nvidia_smi(module):
    binary = module.get_bin_path("nvidia-smi")
    if not binary:
        return {"error": "not installed (no nvidia-smi on PATH)"}
    rc, out, err = node_reads.run(module, [binary, "-q"])
    if node_reads.is_timeout(rc, err):
        return {"error": err, "timed_out": True}
    rest, unreachable = node_health.split_device_handle_errors(out)
    more, unreachable_err = node_health.split_device_handle_errors(err)
    unreachable.update(unreachable_err)
    if rc != 0 and not unreachable:
        return {"error": f"exit status {rc}: {(err or out).strip()}"}
    observed = {"gpus": {}, "unreachable": unreachable}
    try:
        header, sections = nvidia_smi.parse_query_tree(rest)
    except ParseError as exc:
        return {**observed, "parse_error": str(exc)}
    incomplete, cut = node_health.query_completeness(header, sections)
    observed["gpus"] = {nvidia_smi.pci_address(bus): node_health.gpu_health_fields(fields)
                        for bus, fields in sections if bus != cut}
    # A GPU nvidia-smi could not reach is listed in Attached GPUs without a section of its own.
    attached = str(header.get("Attached GPUs", "")).strip()
    if incomplete and cut is None and unreachable and attached == str(len(sections) + len(unreachable)):
        incomplete = None
    if incomplete:
        observed["incomplete"] = incomplete
    return observed


def _boot_epoch(proc_root):
    """Seconds since the epoch at boot (now minus ``<proc_root>/uptime``), None when it cannot be read."""
    try:
        return time.time() - node_health.parse_uptime(node_reads.read_text(os.path.join(proc_root, "uptime")))
    except ParseError:
        return None


def _kernel_log(module, proc_root="/proc"):
    binary = module.get_bin_path("dmesg")
    if not binary:
        return {"error": "no dmesg on PATH"}
    rc, out, err = node_reads.run(module, [binary, "--time-format=iso"])
    if rc != 0:
        return {"error": f"dmesg --time-format=iso: exit status {rc}: {(err or out).strip()}"}
    unparsed = []
    xids = node_health.parse_kernel_log(out, unparsed)
    boot = _boot_epoch(proc_root)
    for event in xids:
        event["epoch"] = node_health.event_epoch(event["time"], boot)
    for bad in unparsed:
        # One line of an unknown shape is reported; the rest of the log is read.
        warn = getattr(module, "warn", None)
        if warn:
            warn(f"kernel log line {bad['line']} looks like an Xid line but is of no known shape, left out: "
                 f"{bad['text']}")
    return {"xids": xids, "unparsed": unparsed}


def _pcie(root, addresses):
    out = {}
    for pci in addresses:
        base = os.path.join(root, "bus", "pci", "devices", pci)
        if not os.path.isdir(base):
            out[pci] = {"missing": f"{root}/bus/pci/devices"}
            continue
        link = {}
        for key, name, parse in (("current_speed_gts", "current_link_speed", node_health.parse_link_speed),
                                 ("max_speed_gts", "max_link_speed", node_health.parse_link_speed),
                                 ("current_width", "current_link_width", node_health.parse_link_width),
                                 ("max_width", "max_link_width", node_health.parse_link_width)):
            path = os.path.join(base, name)
            text = node_reads.read_text(path)
            if text is None:  # no PCIe capability (or a kernel without the file): nothing to compare
                link[key] = None
                continue
            try:
                link[key] = parse(text, path)
            except ParseError as exc:  # one unreadable file: named for this device, the others are read
                link = {"error": str(exc)}
                break
        out[pci] = link
    return out


def _rails(root, rails):
    out = {}
    for rail in rails:
        pci = rail["pci_address"]
        port = os.path.join(root, "class", "infiniband", rail.get("rdma_device") or "-", "ports", "1")
        state_text = node_reads.read_text(os.path.join(port, "state"))
        if state_text is None:
            out[pci] = {"error": f"RDMA port {rail.get('rdma_device')} is gone ({port}/state unreadable)"}
            continue
        try:
            _num, state = parse_state(state_text)
            rate, _width, _name = parse_rate(node_reads.read_text(os.path.join(port, "rate")))
        except (ParseError, ValueError, TypeError) as exc:  # this rail's port is named; the others are read
            out[pci] = {"error": f"RDMA port {rail.get('rdma_device')}: {exc}"}
            continue
        numvfs = node_reads.read_text(os.path.join(root, "bus", "pci", "devices", pci, "sriov_numvfs"))
        out[pci] = {"state": state, "rate_gbps": rate,
                    "sriov_numvfs": int(numvfs) if numvfs and numvfs.isdigit() else None}
    return out


def _processes(proc_root):
    uptime_path = os.path.join(proc_root, "uptime")
    text = node_reads.read_text(uptime_path)
    if text is None:
        raise HealthReadError(f"{uptime_path}: cannot be read (is proc_root a proc filesystem?)")
    try:
        uptime = node_health.parse_uptime(text)
    except ParseError as exc:
        raise HealthReadError(str(exc)) from None
    ticks = os.sysconf("SC_CLK_TCK")
    found, unparsed = [], []
    for name in sorted((n for n in os.listdir(proc_root) if n.isdigit()), key=int):
        stat = node_reads.read_text(os.path.join(proc_root, name, "stat"))
        if stat is None:  # the process ended between listdir and read
            continue
        try:
            parsed = node_health.parse_proc_stat(stat)
        except ParseError as exc:  # one process is named; the others are read
            unparsed.append(f"{proc_root}/{name}/stat: {exc}")
            continue
        if parsed["state"] != "D":
            continue
        cmdline = node_reads.read_text(os.path.join(proc_root, name, "cmdline"))
        cmd = " ".join(p for p in (cmdline or "").split("\0") if p) or f"[{parsed['comm']}]"
        found.append({"pid": parsed["pid"], "cmd": cmd,
                      "age_s": round(max(0.0, uptime - parsed["starttime_ticks"] / ticks), 1)})
    return {"d_state": found, "unparsed": unparsed}


PARTS = ("gpu", "xid", "pcie", "rail", "drift", "processes")


def current_rails(root, rails):
    """``(rails, names)``: the rails with the netdev and RDMA device their PCI function has now (not the names
    discovery recorded), and ``{pci: {netdev, rdma_device, discovered_netdev, discovered_rdma_device}}`` for each
    rail whose names changed (None: the function has no such device now)."""
    out, changed = [], {}
    for rail in rails:
        now = names_of_function(root, rail["pci_address"])
        netdev = rail.get("netdev")
        if rail.get("netdev") and netdev not in now["netdevs"]:
            netdev = now["netdevs"][0] if len(now["netdevs"]) == 1 else None
        rdma = rail.get("rdma_device")
        if rail.get("rdma_device") and rdma not in now["rdma_devices"]:
            rdma = now["rdma_devices"][0] if len(now["rdma_devices"]) == 1 else None
        if (netdev, rdma) != (rail.get("netdev"), rail.get("rdma_device")):
            changed[rail["pci_address"]] = {"netdev": netdev, "rdma_device": rdma,
                                            "discovered_netdev": rail.get("netdev"),
                                            "discovered_rdma_device": rail.get("rdma_device")}
        out.append({**rail, "netdev": netdev, "rdma_device": rdma})
    return out, changed


def observe(module, root, proc_root, hw, expect, parts=PARTS):
    """Read everything the checks of ``parts`` need (one pass; tools run once per host or once per
    rail). ``observed`` has a key only for what was read, and ``node_health.evaluate`` checks only
    what is there: ``nvidia_smi`` (gpu), ``kernel_log`` (xid), ``pcie``, ``rails`` (rail, drift),
    ``roce_accl`` and ``qos`` (drift, when declared), ``processes``."""
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        raise HealthReadError(f"unknown checks {', '.join(unknown)} (known: {', '.join(PARTS)})")
    rails, observed = current_rails(root, hw.get("rails") or [])
    observed = {"names": observed} if observed else {}
    if "gpu" in parts:
        observed["nvidia_smi"] = _nvidia_smi(module) if hw.get("gpus") else {"gpus": {}}
    if "xid" in parts:
        observed["kernel_log"] = _kernel_log(module, proc_root) if hw.get("gpus") else {"xids": []}
    if "pcie" in parts:
        observed["pcie"] = _pcie(root, [g["pci_address"] for g in hw.get("gpus") or []]
                                 + [r["pci_address"] for r in rails])
    if "rail" in parts or "drift" in parts:
        observed["rails"] = _rails(root, rails)
    if "drift" in parts and expect.get("roce_accl"):
        observed["roce_accl"] = {r["pci_address"]: node_reads.read_roce_accl(module, r["pci_address"]) for r in rails}
    if "drift" in parts and expect.get("qos"):
        observed["qos"] = {r["netdev"]: node_reads.read_qos(module, root, r["netdev"], r.get("rdma_device"))
                           for r in rails if r.get("netdev") and r.get("link_layer") != "InfiniBand"}
    if "processes" in parts:
        observed["processes"] = _processes(proc_root)
    return observed
