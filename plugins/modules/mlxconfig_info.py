#!/usr/bin/python
# Copyright: (c) 2025, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: mlxconfig_info
short_description: Read the default, current and next-boot NV config of ConnectX devices
version_added: 0.1.0
description:
  - Runs C(mlxconfig -d <dev> -e q) for each listed device and returns every parameter with its default, current
    and next-boot value as the tool prints them (C(True(1)), C(ETH(2)), C(48), C(Array[0..7])).
  - "Parses the three-column C(-e q) layout and the one-column C(q) layout, in the wide (MFT C(mlxconfig)) and
    narrow (mstflint C(mstconfig)) widths: the public output from https://github.com/k8snetworkplumbingwg/sriov-network-operator/issues/968,
    C(mlxconfig-q-cx7-sriov-device-plugin-601.txt) and C(mstconfig-q-bf3-b3220-edcdavid-ptp-tools.txt). Rows are
    split on whitespace because long enum values overflow their column."
  - Never changes anything. Uses C(mlxconfig), or C(mstconfig) when C(mlxconfig) is absent.
author:
  - mlplatform.gpunode developers (@mlplatform)
attributes:
  check_mode:
    support: full
    details: Read-only; runs the same in check mode.
  diff_mode:
    support: none
  platform:
    support: full
    platforms: linux
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
options:
  devices:
    description:
      - PCI addresses (V(0000:18:00.0)) or mst device paths (V(/dev/mst/mt4129_pciconf0)).
    type: list
    elements: str
    required: true
  skip_unsupported:
    description:
      - Report devices that refuse mlxconfig in RV(skipped_devices) instead of failing.
    type: bool
    default: false
seealso:
  - module: mlplatform.gpunode.mlxconfig
"""

EXAMPLES = r"""
- name: Read the NV config of the compute rails
  mlplatform.gpunode.mlxconfig_info:
    devices: "{{ gpunode_hw['rails'] | map(attribute='pci_address') | list }}"
  register: __nv

- name: Show LINK_TYPE_P1 of each rail
  ansible.builtin.debug:
    msg: "{{ __nv.config | dict2items | map(attribute='value.LINK_TYPE_P1') | list }}"
"""

RETURN = r"""
config:
  description:
    - Device -> parameter -> C({default, current, next_boot}) with the values as the tool prints them. A column the
      tool did not print (the one-column C(q) layout has only next boot) is null.
  returned: always
  type: dict
  sample: {"0000:18:00.0": {"SRIOV_EN": {"default": "True(1)", "current": "True(1)", "next_boot": "True(1)"}}}
device_info:
  description: Device -> the query header (C(device_type), C(name) (the part number), C(description)).
  returned: always
  type: dict
  sample: {"0000:18:00.0": {"device_type": "ConnectX7", "name": "MCX75310AAS-NEA_Ax", "description": "..."}}
pending:
  description: Device -> parameters whose next-boot value differs from the current one (a reboot applies them).
  returned: always
  type: dict
  sample: {"0000:18:00.0": ["NUM_OF_VFS"]}
reboot_required:
  description: True when any device has a pending parameter.
  returned: always
  type: bool
skipped_devices:
  description:
    - (Not named C(skipped), because a non-empty C(skipped) key makes Ansible report the whole task as skipped.)
    - Devices that refused mlxconfig, with the tool's reason (only with O(skip_unsupported)).
  returned: always
  type: dict
  sample: {"0000:29:00.0": "Failed to open the device"}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.mlplatform.gpunode.plugins.module_utils.host_errors import name_the_host
from ansible_collections.mlplatform.gpunode.plugins.module_utils.nvconfig import (
    config_of,
    pending_params,
    query_devices,
)
from ansible_collections.mlplatform.gpunode.plugins.module_utils.parsing import ParseError


def main():
    module = AnsibleModule(
        argument_spec={
            "devices": {"type": "list", "elements": "str", "required": True},
            "skip_unsupported": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    name_the_host(module, "mlxconfig_info")
    binary = module.get_bin_path("mlxconfig") or module.get_bin_path("mstconfig", required=True)
    try:
        blocks, rejected = query_devices(
            lambda argv: module.run_command(argv, environ_update={"LC_ALL": "C"}), binary, module.params["devices"])
    except ParseError as exc:
        module.fail_json(msg=f"mlxconfig_info: cannot read the query output: {exc}")
    if rejected and not module.params["skip_unsupported"]:
        module.fail_json(msg="mlxconfig refused " + "; ".join(f"{d}: {r}" for d, r in sorted(rejected.items())),
                         rejected=rejected)
    pending = {device: pending_params(block) for device, block in blocks.items() if pending_params(block)}
    module.exit_json(
        changed=False,
        config={device: config_of(block) for device, block in blocks.items()},
        device_info={device: {key: block[key] for key in ("device_type", "name", "description")}
                     for device, block in blocks.items()},
        pending=pending,
        reboot_required=bool(pending),
        skipped_devices=rejected,
    )


if __name__ == "__main__":
    main()
