#!/usr/bin/python
# Copyright: (c) 2025, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: mlxconfig
short_description: Set the NV config (next-boot firmware parameters) of every ConnectX device of a host in one call
version_added: 0.1.0
description:
  - Reads C(mlxconfig -d <dev> -e q) (default, current and next-boot columns) for every listed device, compares
    the wished values with B(next boot), writes only the parameters that differ with C(mlxconfig -d <dev> -y set
    K=V ...), reads every device again and fails when a written value did not take.
  - Values may be given as names or numbers and compare as the firmware does, so V(ETH), V(eth), V(2) and
    C(ETH(2)) are the same C(LINK_TYPE) value and V(true), V(1) and C(True(1)) the same boolean
    (C(IB(1)/ETH(2)) from docs/hardware-facts.md "mlxconfig / NV config", C(True(1)) rows in the public output from
    https://github.com/k8snetworkplumbingwg/sriov-network-operator/issues/968).
  - NV config belongs to the card. Parameters without a C(_P<n>) suffix (C(SRIOV_EN), C(NUM_OF_VFS)) are shared
    by the functions of a multi-port card (set on C(.0) they show on C(.1), see the public output from
    https://github.com/sigitp-git/mellanox-nic-firmware-and-vf-creation);
    they are written once, through the lowest listed function. Two functions
    of one card wishing different values is rejected before anything is written.
  - A parameter named without its port suffix (V(LINK_TYPE)) means the function's own port (function C(.0) is
    port 1, C(.1) port 2), so C(LINK_TYPE_P2) is only written where a second port exists.
  - Parameters hidden until C(ADVANCED_PCI_SETTINGS=1) (docs/hardware-facts.md) are accepted when the same settings turn
    C(ADVANCED_PCI_SETTINGS) on; they are written in a second C(set) once the first one enabled it.
  - "Wishes equal to next boot give C(changed=false) and write nothing, even though C(mlxconfig set) prompts and
    prints C(-I- Please reboot machine to load new configurations.) whatever it changes (the public output from
    https://github.com/sigitp-git/mellanox-nic-firmware-and-vf-creation)."
  - New values apply at the next boot (or firmware reset). RV(reboot_required) is true when, after this call, any
    parameter of any device has a next-boot value that differs from its current one.
  - Uses C(mlxconfig) (MFT), or C(mstconfig) (mstflint) when C(mlxconfig) is absent.
author:
  - mlplatform.gpunode developers (@mlplatform)
attributes:
  check_mode:
    support: full
    details: Reads every device and reports every pending write; writes nothing.
  diff_mode:
    support: full
    details: A table per device of default, current, next-boot and desired value of each wished parameter.
  platform:
    support: full
    platforms: linux
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
options:
  devices:
    description:
      - The wished NV config of every managed device of the host, usually built from NIC roles.
    type: list
    elements: dict
    required: true
    suboptions:
      device:
        description:
          - PCI address (V(0000:18:00.0)) or mst device path (V(/dev/mst/mt4129_pciconf0)).
        type: str
        required: true
      settings:
        description:
          - "Parameter name to value, for example C({SRIOV_EN: true, NUM_OF_VFS: 8, LINK_TYPE: ETH})."
        type: dict
        required: true
  skip_unsupported:
    description:
      - When a device refuses mlxconfig (locked or unsupported function; the tool exits non-zero with C(-E-)), skip
        it and report the reason in RV(skipped_devices) instead of failing. Nothing is written to it.
      - When false such a device fails the module, naming it, before anything is written to any device.
    type: bool
    default: false
notes:
  - Output that does not parse as mlxconfig output always fails; it is never treated as an unsupported device.
seealso:
  - module: mlplatform.gpunode.mlxconfig_info
  - module: mlplatform.gpunode.roce_accl
"""

EXAMPLES = r"""
- name: Set the NV config of every compute rail in one call
  mlplatform.gpunode.mlxconfig:
    devices:
      - device: "0000:18:00.0"
        settings: {SRIOV_EN: true, NUM_OF_VFS: 8, LINK_TYPE: ETH, ATS_ENABLED: false}
      - device: "0000:40:00.0"
        settings: {SRIOV_EN: true, NUM_OF_VFS: 8, LINK_TYPE: ETH, ATS_ENABLED: false}
    skip_unsupported: true
  register: __fw

- name: Show what a reboot would change
  ansible.builtin.debug:
    msg: "{{ __fw.changes }} (reboot required: {{ __fw.reboot_required }})"
"""

RETURN = r"""
changes:
  description:
    - Parameters written (or, in check mode, to be written), per device they are written through, with the
      next-boot value before and the value after as mlxconfig prints them. Empty when nothing differed.
  returned: always
  type: dict
  sample: {"0000:18:00.0": {"NUM_OF_VFS": {"before": "16", "after": "8"}}}
reboot_required:
  description:
    - True when a next-boot value differs from the current one on any device after this call, or when that
      cannot be told because the tool prints no current value (RV(reboot_unknown)).
  returned: always
  type: bool
reboot_unknown:
  description:
    - Per device the wished parameters whose current value C(mlxconfig) does not print (a query showing only a
      next-boot column). Whether they are in effect is unknown, so RV(reboot_required) is true; RV(reboot_reason)
      says why.
  returned: always
  type: dict
  sample: {"0000:18:00.0": ["NUM_OF_VFS"]}
reboot_reason:
  description: Why RV(reboot_required) is true although nothing is known to be pending, or null.
  returned: always
  type: str
written:
  description:
    - On a failure midway, per device the parameters already set for next boot before it (every device is
      checked against its own query before the first write, so this happens only when the tool itself fails).
  returned: failure
  type: dict
  sample: {"0000:18:00.0": {"NUM_OF_VFS": "4"}}
skipped_devices:
  description:
    - (Not named C(skipped), because a non-empty C(skipped) key makes Ansible report the whole task as skipped.)
    - Devices that refused mlxconfig, with the tool's reason (only with O(skip_unsupported)).
  returned: always
  type: dict
  sample: {"0000:29:00.0": "Failed to open the device"}
config:
  description:
    - Read back after writing (the first read in check mode), per device, for each wished parameter, the values as
      the tool prints them (C(True(1))); a column the tool did not print is null.
  returned: always
  type: dict
  sample: {"0000:18:00.0": {"NUM_OF_VFS": {"default": "16", "current": "16", "next_boot": "8"}}}
devices:
  description: Per device, its card (PCI slot), port, and for each wished parameter default, current, next_boot,
    desired and whether it is written (C(change)).
  returned: always
  type: dict
  sample: {"0000:18:00.0": {"card": "0000:18:00", "port": 1, "params": {"NUM_OF_VFS": {"default": "16",
           "current": "16", "next_boot": "16", "desired": "8", "change": true, "hidden": false}}}}
pending:
  description: Per device, the parameters whose next-boot value differs from the current one.
  returned: always
  type: dict
  sample: {"0000:18:00.0": ["NUM_OF_VFS"]}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.mlplatform.gpunode.plugins.module_utils.host_errors import name_the_host
from ansible_collections.mlplatform.gpunode.plugins.module_utils.mlxconfig import values_equal
from ansible_collections.mlplatform.gpunode.plugins.module_utils.nvconfig import (
    NvConfigError,
    check_set_output,
    config_of,
    diff_table,
    diff_texts,
    pending_params,
    plan,
    query_devices,
    set_argv,
    unknown_current,
    unknown_reason,
    verify,
)
from ansible_collections.mlplatform.gpunode.plugins.module_utils.parsing import ParseError


def _binary(module):
    return module.get_bin_path("mlxconfig") or module.get_bin_path("mstconfig", required=True)


def _predicted_pending(planned, blocks):
    """Pending parameters once the planned writes are in: next boot is the wish for written ones."""
    pending = {}
    for device, block in blocks.items():
        names = set(pending_params(block))
        info = planned["devices"].get(device, {"params": {}})
        for param, entry in info["params"].items():
            if entry.get("change"):
                if entry["current"] is None or not values_equal(param, entry["desired"], entry["current"]):
                    names.add(param)
                else:
                    names.discard(param)
        if names:
            pending[device] = sorted(names)
    return pending


def main():
    module = AnsibleModule(
        argument_spec={
            "devices": {"type": "list", "elements": "dict", "required": True, "options": {
                "device": {"type": "str", "required": True},
                "settings": {"type": "dict", "required": True},
            }},
            "skip_unsupported": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    name_the_host(module, "mlxconfig")
    binary = _binary(module)

    def run(argv):
        return module.run_command(argv, environ_update={"LC_ALL": "C"})

    wanted = module.params["devices"]
    names = [entry["device"] for entry in wanted]
    try:
        blocks, rejected = query_devices(run, binary, names)
    except ParseError as exc:
        module.fail_json(msg=f"mlxconfig: cannot read the query output: {exc}")
    if rejected and not module.params["skip_unsupported"]:
        module.fail_json(msg="mlxconfig refused "
                         + "; ".join(f"{device}: {reason}" for device, reason in sorted(rejected.items()))
                         + " (set skip_unsupported to skip such devices); nothing was written",
                         skipped_devices={}, rejected=rejected)
    skipped = {device: f"device refuses mlxconfig: {reason}" for device, reason in rejected.items()}
    for device, reason in sorted(skipped.items()):
        module.warn(f"{device}: skipped, {reason}")
    wanted = [entry for entry in wanted if entry["device"] in blocks]
    try:
        planned = plan(wanted, blocks)
    except NvConfigError as exc:
        module.fail_json(msg="mlxconfig: invalid settings, nothing was written: " + "; ".join(exc.errors),
                         errors=exc.errors, skipped_devices=skipped)

    changed = bool(planned["writes"])
    before, after = diff_texts(planned)
    diff = {"before_header": "next boot (now)", "after_header": "next boot (after)", "before": before,
            "after": after, "prepared": diff_table(planned, blocks)}

    def config_for(blocks_now):
        return {device: {param: values for param, values in config_of(blocks_now[device]).items()
                         if param in info["params"]}
                for device, info in planned["devices"].items() if device in blocks_now}

    if module.check_mode or not changed:
        pending = _predicted_pending(planned, blocks)
        unknown = unknown_current(planned, blocks)
        module.exit_json(changed=changed, diff=diff, changes=planned["changes"],
                         reboot_required=bool(pending) or bool(unknown), pending=pending,
                         reboot_unknown=unknown, reboot_reason=unknown_reason(unknown),
                         skipped_devices=skipped, config=config_for(blocks), devices=planned["devices"])

    written = {}  # device -> {param: value} set for next boot so far

    def fail_midway(msg, **extra):
        # Every device was checked before the first write; if one still fails, say what is already written
        # where (next boot), so the result and nic_firmware.json tell the operator the state left behind.
        done = "; ".join(f"{d}: {', '.join(f'{k}={v}' for k, v in sorted(p.items()))}" for d, p in written.items())
        pending = {d: sorted(p) for d, p in written.items()}
        module.fail_json(msg=f"{msg}; already written for next boot: {done or 'nothing'}", written=written,
                         reboot_required=bool(written), pending=pending, changes=planned["changes"],
                         skipped_devices=skipped, **extra)

    for write in planned["writes"]:
        device = write["device"]
        for values, phase in ((write["set"], "set"), (write["hidden"], "hidden")):
            if not values:
                continue
            if phase == "hidden":
                fresh, refused = query_devices(run, binary, [device])
                missing = [p for p in values if device in refused or p not in fresh[device]["params"]]
                if missing:
                    fail_midway(f"{device}: {', '.join(sorted(missing))} still hidden after "
                                "ADVANCED_PCI_SETTINGS=1 was written")
            argv = set_argv(binary, device, values)
            rc, out, err = run(argv)
            problems = check_set_output(out) if rc == 0 else [err.strip() or out.strip() or f"exit {rc}"]
            if problems:
                fail_midway(f"{device}: mlxconfig set {' '.join(argv[5:])} failed: {'; '.join(problems)}",
                            rc=rc, stdout=out, stderr=err, cmd=argv)
            written.setdefault(device, {}).update(values)

    try:
        reread, refused = query_devices(run, binary, sorted(planned["devices"]))
    except ParseError as exc:
        module.fail_json(msg=f"mlxconfig: cannot read back after writing: {exc}", changes=planned["changes"])
    failures = verify(planned, reread)
    if refused or failures:
        detail = [f"{device}: query refused after writing ({reason})" for device, reason in sorted(refused.items())]
        detail += [f"{device}: {param} next boot is {found} after writing {wanted_value}"
                   for device, param, wanted_value, found in failures]
        module.fail_json(msg="mlxconfig: the change did not take: " + "; ".join(detail), changes=planned["changes"],
                         config=config_for(reread))
    pending = {device: pending_params(block) for device, block in reread.items() if pending_params(block)}
    unknown = unknown_current(planned, reread)
    module.exit_json(changed=True, diff=diff, changes=planned["changes"],
                     reboot_required=bool(pending) or bool(unknown), pending=pending, reboot_unknown=unknown,
                     reboot_reason=unknown_reason(unknown),
                     skipped_devices=skipped, config=config_for(reread), devices=planned["devices"])


if __name__ == "__main__":
    main()
