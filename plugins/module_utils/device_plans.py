# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Per-device plans on the controller: the wish of every NIC against the ``gpunode_host_state`` read.

The device modules (``mlxconfig``, ``roce_accl``, ``sriov_vfs``, ``roce_qos``) read, plan, apply
and read back by themselves; these functions run the *same* plan functions (``nvconfig.plan``,
``mlxreg.plan_fields``, ``sriov.plan``, ``roce_qos.validate``/``diff``) on the state read at the
start of the run, so the module runs only when its plan is non-empty. Each returns::

    {"run": bool, "reason": str, "changes": {device: {setting: {"before", "after"}}}, "result": {...}}

``run`` is true when something differs, when the state lacks what the plan needs (the tool was
not installed at read time, a device not read), or when the wish is invalid - the module then
runs and fails with its own message naming the host, device and variable. ``result`` (only when
``run`` is false) carries the keys the module returns on no change, from the state, so the roles
publish the same facts either way.
"""

from __future__ import annotations

from ansible_collections.mlplatform.gpunode.plugins.module_utils import roce_qos
from ansible_collections.mlplatform.gpunode.plugins.module_utils.mlxreg import plan_fields
from ansible_collections.mlplatform.gpunode.plugins.module_utils.nvconfig import (
    NvConfigError,
    block_of,
    config_of,
    pending_params,
    unknown_current,
    unknown_reason,
)
from ansible_collections.mlplatform.gpunode.plugins.module_utils.nvconfig import plan as nv_plan
from ansible_collections.mlplatform.gpunode.plugins.module_utils.sriov import plan as vf_plan_of
from ansible_collections.mlplatform.gpunode.plugins.module_utils.sriov import validate_request


def _run(reason, changes=None):
    return {"run": True, "reason": reason, "changes": changes or {}, "result": {}}


def _tool(state, name):
    return bool(((state or {}).get("tools") or {}).get(name))


def nv_config_plan(state, devices, skip_unsupported=False):
    """``devices`` as the ``mlxconfig`` module takes them: ``[{"device", "settings"}]``."""
    state = state or {}
    if not devices:
        return {"run": False, "reason": "no device has NV config settings", "changes": {}, "result": {}}
    if not _tool(state, "mlxconfig") or "nv_config" not in state:
        return _run("mlxconfig was not installed when the host was read")
    # The read returns the printed text (config_of); the plan reads the parsed rows.
    blocks = {device: block_of(device, config) for device, config in state["nv_config"].items()}
    refused = state.get("nv_config_refused") or {}
    missing = [d["device"] for d in devices if d["device"] not in blocks and d["device"] not in refused]
    if missing:
        return _run(f"not read: {', '.join(sorted(missing))}")
    rejected = {d["device"]: refused[d["device"]] for d in devices if d["device"] in refused}
    if rejected and not skip_unsupported:
        return _run("a device refuses mlxconfig (the module fails naming it)")
    wanted = [d for d in devices if d["device"] in blocks]
    try:
        planned = nv_plan(wanted, blocks)
    except NvConfigError:
        return _run("invalid settings (the module fails naming them)")
    if planned["writes"]:
        return _run("NV config differs", planned["changes"])
    config = {device: {param: values for param, values in config_of(blocks[device]).items()
                       if param in info["params"]}
              for device, info in planned["devices"].items()}
    pending = {d: pending_params(blocks[d]) for d in sorted(planned["devices"]) if pending_params(blocks[d])}
    # As the module says it: a wished parameter whose current value the tool does not print makes
    # reboot_required unknown, treated as true, with the reason.
    unknown = unknown_current(planned, blocks)
    return {"run": False, "reason": "every NV config setting is at its wish for next boot", "changes": {},
            "result": {"changed": False, "changes": {}, "config": config, "pending": pending,
                       "reboot_required": bool(pending) or bool(unknown), "reboot_unknown": unknown,
                       "reboot_reason": unknown_reason(unknown), "devices": planned["devices"],
                       "skipped_devices": {d: f"device refuses mlxconfig: {r}" for d, r in rejected.items()}}}


def roce_accl_plan(state, devices, skip_unsupported=False):
    """``devices`` as the ``roce_accl`` module takes them: ``[{"device", "fields"}]``."""
    state = state or {}
    if not devices:
        return {"run": False, "reason": "no device has ROCE_ACCL fields", "changes": {}, "result": {}}
    if not _tool(state, "mlxreg") or "roce_accl" not in state:
        return _run("mlxreg was not installed when the host was read")
    read = state["roce_accl"]
    refused = state.get("roce_accl_refused") or {}
    missing = [d["device"] for d in devices if d["device"] not in read and d["device"] not in refused]
    if missing:
        return _run(f"not read: {', '.join(sorted(missing))}")
    rejected = {d["device"]: refused[d["device"]] for d in devices if d["device"] in refused}
    if rejected and not skip_unsupported:
        return _run("a device refuses mlxreg (the module fails naming it)")
    wanted = [d for d in devices if d["device"] in read]
    try:
        planned = plan_fields(wanted, read)
    except ValueError:
        return _run("invalid fields (the module fails naming them)")
    if planned["changes"]:
        return _run("ROCE_ACCL differs", planned["changes"])
    return {"run": False, "reason": "ROCE_ACCL reads as wished", "changes": {},
            "result": {"changed": False, "changes": {}, "fields": {d["device"]: read[d["device"]] for d in wanted},
                       "skipped_devices": rejected}}


def vf_plan(state, pfs):
    """``pfs`` as the ``sriov_vfs`` module takes them: ``[{"pci_address", "num_vfs"}]``."""
    state = state or {}
    if not pfs:
        return {"run": False, "reason": "no PF has SR-IOV", "changes": {}, "result": {}}
    current = state.get("vfs")
    if current is None or any(p["pci_address"] not in current or current[p["pci_address"]].get("numvfs") is None
                              for p in pfs):
        return _run("VF counts not read")
    desired, errors = validate_request(pfs)
    if errors:
        return _run("invalid VF request (the module fails naming it)")
    try:
        plans, errors = vf_plan_of({k: {"numvfs": int(current[k]["numvfs"]), "totalvfs": int(current[k]["totalvfs"])}
                                    for k in desired}, desired)
    except KeyError:
        return _run("VF counts not read")
    if errors:
        return _run("invalid VF request (the module fails naming it)")
    changes = {pci: {"num_vfs": {"before": p["before"], "after": p["after"]}}
               for pci, p in plans.items() if p["writes"]}
    if changes:
        return _run("VF counts differ", changes)
    return {"run": False, "reason": "every PF has its VF count", "changes": {},
            "result": {"changed": False,
                       "pfs": {pci: {"before": p["before"], "after": p["after"], "total": p["total"]}
                               for pci, p in plans.items()}}}


def qos_plan(state, interfaces):
    """``interfaces`` as the ``roce_qos`` module takes them."""
    state = state or {}
    if not interfaces:
        return {"run": False, "reason": "no RoCE netdev", "changes": {}, "result": {}}
    current = state.get("qos")
    wanted, errors = roce_qos.validate(interfaces)
    if errors:
        return _run("invalid QoS (the module fails naming the netdev and field)")
    if current is None or any(entry["netdev"] not in current for entry in wanted):
        return _run("QoS not read (mlnx_qos missing at read time, or a netdev not read)")
    changes, left_alone = {}, {}
    for entry in wanted:
        diff, left = roce_qos.diff(current[entry["netdev"]], entry)
        if diff:
            changes[entry["netdev"]] = diff
        if left:
            left_alone[entry["netdev"]] = left
    if changes:
        return _run("QoS differs", changes)
    names = [entry["netdev"] for entry in wanted]
    return {"run": False, "reason": "every RoCE netdev reads as wished", "changes": {},
            "result": {"changed": False, "interfaces": {n: {} for n in names},
                       "current": {n: current[n] for n in names},
                       "dcbx_mode": {n: current[n].get("dcbx_mode") for n in names},
                       # The module's key: a truthy "skipped" would make `is skipped` true for this result.
                       "left_alone": left_alone}}
