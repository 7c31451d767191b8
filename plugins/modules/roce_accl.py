#!/usr/bin/python
# Copyright: (c) 2025, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: roce_accl
short_description: Set and read back the ROCE_ACCL register (adaptive routing, RoCE accelerations) of ConnectX
version_added: 0.1.0
description:
  - Reads C(mlxreg -d <dev> --reg_name ROCE_ACCL --get) for every listed device, writes only the fields that differ
    with C(mlxreg -d <dev> --reg_name ROCE_ACCL --set f=0x1,... --yes), reads every written device again and fails
    when a field did not take.
  - "Fields (a public C(mlxreg) output, see docs/hardware-facts.md, Sources): C(adaptive_routing_forced_en),
    C(roce_adp_retrans_en), C(roce_tx_window_en), C(roce_slow_restart_en), C(roce_slow_restart_idle_en),
    C(min_ack_timeout_limit_disabled), C(selective_repeat_forced_en), C(dc_half_handshake_en), C(ack_dscp_force),
    C(ack_dscp); the C(*_field_select) bits are the register's own and cannot be wished."
  - The register is runtime state, lost at every reset or reboot (docs/hardware-facts.md "Adaptive routing"); the
    C(mlplatform.gpunode.nic_firmware) role installs a boot unit that writes it again. Peers of one fabric must
    agree on C(adaptive_routing_forced_en) or RDMA between them fails.
  - With an empty C(fields) the device is only read.
author:
  - mlplatform.gpunode developers (@mlplatform)
attributes:
  check_mode:
    support: full
    details: Reads every device and reports the fields it would write; writes nothing.
  diff_mode:
    support: full
    details: C(device field=value) lines before and after.
  platform:
    support: full
    platforms: linux
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
options:
  devices:
    description: Every device to read, with the register fields wished on it.
    type: list
    elements: dict
    required: true
    suboptions:
      device:
        description: PCI address (V(0000:18:00.0)) or mst device path.
        type: str
        required: true
      fields:
        description: Field name to value (V(1), V(true), V(0x1)). Empty reads only.
        type: dict
        default: {}
  skip_unsupported:
    description:
      - A device whose C(mlxreg) call fails (register not supported, locked function) is reported in RV(skipped_devices)
        instead of failing the module.
    type: bool
    default: false
seealso:
  - module: mlplatform.gpunode.mlxconfig
"""

EXAMPLES = r"""
- name: Force adaptive routing on every compute rail
  mlplatform.gpunode.roce_accl:
    devices:
      - device: "0000:18:00.0"
        fields: {adaptive_routing_forced_en: 1}
      - device: "0000:40:00.0"
        fields: {adaptive_routing_forced_en: 1}

- name: Read the register only
  mlplatform.gpunode.roce_accl:
    devices: [{device: "0000:18:00.0"}]
  register: __accl
"""

RETURN = r"""
fields:
  description: Device -> field -> integer value, as read back (after writing, or the first read in check mode).
  returned: always
  type: dict
  sample: {"0000:18:00.0": {"adaptive_routing_forced_en": 1, "roce_adp_retrans_en": 1}}
changes:
  description: Device -> field -> C({before, after}) for every field written (to be written in check mode).
  returned: always
  type: dict
  sample: {"0000:18:00.0": {"adaptive_routing_forced_en": {"before": 0, "after": 1}}}
skipped_devices:
  description:
    - (Not named C(skipped), because a non-empty C(skipped) key makes Ansible report the whole task as skipped.)
    - Devices whose register could not be read, with the tool's reason (only with O(skip_unsupported)).
  returned: always
  type: dict
  sample: {"0000:29:00.0": "Register ROCE_ACCL is not supported"}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.mlplatform.gpunode.plugins.module_utils.host_errors import name_the_host
from ansible_collections.mlplatform.gpunode.plugins.module_utils.mlxreg import (
    get_argv,
    parse_get,
    plan_fields,
    set_argv,
)
from ansible_collections.mlplatform.gpunode.plugins.module_utils.parsing import ParseError


def _read(module, binary, devices):
    """device -> fields, and device -> reason for devices mlxreg refused."""
    read, refused = {}, {}
    for device in devices:
        rc, out, err = module.run_command(get_argv(binary, device), environ_update={"LC_ALL": "C"})
        if rc != 0:
            messages = [ln.strip()[3:].strip() for ln in f"{out}\n{err}".splitlines() if ln.strip().startswith("-E-")]
            refused[device] = "; ".join(messages) or err.strip() or f"mlxreg exited {rc}"
            continue
        try:
            result = parse_get(out)
        except ParseError as exc:
            module.fail_json(msg=f"{device}: cannot read the ROCE_ACCL register: {exc}", stdout=out, stderr=err)
        if result["errors"]:
            refused[device] = "; ".join(result["errors"])
            continue
        read[device] = result["fields"]
    return read, refused


def main():
    module = AnsibleModule(
        argument_spec={
            "devices": {"type": "list", "elements": "dict", "required": True, "options": {
                "device": {"type": "str", "required": True},
                "fields": {"type": "dict", "default": {}},
            }},
            "skip_unsupported": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    name_the_host(module, "roce_accl")
    binary = module.get_bin_path("mlxreg", required=True)
    wanted = module.params["devices"]
    read, refused = _read(module, binary, [entry["device"] for entry in wanted])
    if refused and not module.params["skip_unsupported"]:
        module.fail_json(msg="mlxreg refused " + "; ".join(f"{d}: {r}" for d, r in sorted(refused.items()))
                         + "; nothing was written", skipped_devices={})
    try:
        planned = plan_fields([entry for entry in wanted if entry["device"] in read], read)
    except ValueError as exc:
        module.fail_json(msg=f"roce_accl: invalid fields, nothing was written: {exc}")
    changes = planned["changes"]
    rows = [(d, f, c) for d, fc in sorted(changes.items()) for f, c in sorted(fc.items())]
    diff = {"before": "".join(f"{d} {f}={c['before']}\n" for d, f, c in rows),
            "after": "".join(f"{d} {f}={c['after']}\n" for d, f, c in rows)}
    if module.check_mode or not changes:
        module.exit_json(changed=bool(changes), diff=diff, fields=read, changes=changes, skipped_devices=refused)
    for device, values in sorted(planned["writes"].items()):
        argv = set_argv(binary, device, values)
        rc, out, err = module.run_command(argv, environ_update={"LC_ALL": "C"})
        if rc != 0:
            module.fail_json(msg=f"{device}: mlxreg --set {argv[6]} failed: {err.strip() or out.strip()}",
                             rc=rc, stdout=out, stderr=err, cmd=argv, changes=changes)
    reread, refused_after = _read(module, binary, sorted(planned["writes"]))
    wrong = [f"{device}: {name} reads {reread[device][name]:#x} after writing {value:#x}"
             for device, values in sorted(planned["writes"].items()) if device in reread
             for name, value in sorted(values.items()) if reread[device].get(name) != value]
    wrong += [f"{device}: cannot read back ({reason})" for device, reason in sorted(refused_after.items())]
    if wrong:
        module.fail_json(msg="roce_accl: the change did not take: " + "; ".join(wrong), changes=changes)
    read.update(reread)
    module.exit_json(changed=True, diff=diff, fields=read, changes=changes, skipped_devices=refused)


if __name__ == "__main__":
    main()
