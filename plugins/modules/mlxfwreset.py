#!/usr/bin/python
# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: mlxfwreset
short_description: Reset the firmware of ConnectX cards so that pending NV config loads
version_added: 0.1.0
description:
  - Runs C(mlxfwreset -d <dev> -y reset) once per card (the functions of a multi-port card share one firmware) for
    the listed devices, in one call. On some DGX systems a warm reboot does not reload NV config and a firmware reset
    is needed first (docs/hardware-facts.md "mlxconfig / NV config").
  - Every card is queried first (C(mlxfwreset -d <dev> query)), in check mode too; if the tool cannot open a device
    or the device refuses a reset, the module fails naming each such device and resets nothing.
  - Disruptive, the links of the card go down. Never list the card that carries the management/SSH interface.
  - Only used by the C(mlplatform.gpunode.node_reboot) role right before a reboot, with consent.
author:
  - mlplatform.gpunode developers (@mlplatform)
attributes:
  check_mode:
    support: full
    details: Reports the cards it would reset; resets nothing.
  diff_mode:
    support: none
  platform:
    support: full
    platforms: linux
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
options:
  devices:
    description: PCI addresses of the functions whose cards are reset (one reset per card).
    type: list
    elements: str
    required: true
seealso:
  - module: mlplatform.gpunode.mlxconfig
"""

EXAMPLES = r"""
- name: Reset the firmware of the cards with pending NV config
  mlplatform.gpunode.mlxfwreset:
    devices: "{{ nic_firmware_managed_devices }}"
"""

RETURN = r"""
refused:
  description: On failure before any reset, each device the query refused, with the tool's message.
  returned: failure
  type: dict
  sample: {"0000:99:00.0": "-E- Failed to open device: 0000:99:00.0"}
reset:
  description:
    - The device each card was reset through (the lowest listed function), in order.
    - On a failure midway, the cards reset before it; empty when the query refused a device.
  returned: always
  type: list
  elements: str
  sample: ["0000:18:00.0", "0000:29:00.0"]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.mlplatform.gpunode.plugins.module_utils.host_errors import name_the_host
from ansible_collections.mlplatform.gpunode.plugins.module_utils.nvconfig import device_card


def main():
    module = AnsibleModule(argument_spec={"devices": {"type": "list", "elements": "str", "required": True}},
                           supports_check_mode=True)
    name_the_host(module, "mlxfwreset")
    cards = {}
    for device in sorted(module.params["devices"], key=device_card):
        cards.setdefault(device_card(device)[0], device)
    targets = list(cards.values())
    if not targets:
        module.exit_json(changed=False, reset=[])
    binary = module.get_bin_path("mlxfwreset", required=not module.check_mode)
    if binary is None:  # check mode on a host without MFT yet: the plan is all there is to show
        module.exit_json(changed=True, reset=targets)
    # Every card is queried before any is reset (in check mode too): a device the tool cannot open, or
    # that refuses a firmware reset, fails the call with nothing reset.
    refused = {}
    for device in targets:
        rc, out, err = module.run_command([binary, "-d", device, "query"], environ_update={"LC_ALL": "C"})
        if rc != 0:
            refused[device] = (err or out).strip() or f"exit status {rc}"
    if refused:
        module.fail_json(msg="mlxfwreset cannot reset " + "; ".join(f"{d}: {why}" for d, why in refused.items())
                         + " (devices). Nothing was reset.", refused=refused, reset=[])
    if module.check_mode:
        module.exit_json(changed=True, reset=targets)
    done = []
    for device in targets:
        argv = [binary, "-d", device, "-y", "reset"]
        rc, out, err = module.run_command(argv, environ_update={"LC_ALL": "C"})
        if rc != 0:
            module.fail_json(msg=f"{device}: mlxfwreset failed: {(err or out).strip()}"
                                 + (f" (already reset: {', '.join(done)})" if done else " (nothing was reset)"),
                             rc=rc, stdout=out, stderr=err, cmd=argv, reset=done)
        done.append(device)
    module.exit_json(changed=True, reset=targets)


if __name__ == "__main__":
    main()
