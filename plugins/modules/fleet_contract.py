#!/usr/bin/python
# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fleet_contract
short_description: Check that every host of a fabric agrees on the settings that must match
version_added: 0.1.0
description:
  - Runs on the controller (action plugin). Reads the contract each role published on every play host
    (O(sources), lists of C({scope, rail, pci_address, netdev, setting, value}) entries describing read-back state),
    groups the hosts by the variable O(group_by) (C(gpunode_fabric)) and compares each setting across every host
    (C(host) scope) or across every compute rail of every host (C(rail) scope).
  - The expected value of a setting is the majority value. A tie goes to the value of the first host, in inventory
    order, that holds one of the tied values, and the table marks it C((tie)).
  - On drift it fails with a table naming host, rail, PCI address, netdev, setting, expected and found value, one
    row per differing host or device. A setting a host publishes for some rails but not another is C((absent)).
  - This is the check that would have caught the incident behind this project, adaptive routing forced on the
    rails of one vendor's machines only (docs/hardware-facts.md "Adaptive routing").
  - "Run it once (C(run_once: true)); it reads every play host itself. Sources a host did not publish are ignored."
author:
  - mlplatform.gpunode developers (@mlplatform)
attributes:
  check_mode:
    details: Read-only; writes the O(output) report in check mode too.
  platform:
    details: Runs on the controller; it reads the facts the hosts published.
  run_once:
    details: Meant to run once per play; it compares every host of the play in that one run.
extends_documentation_fragment:
  - mlplatform.gpunode.controller_action
  - mlplatform.gpunode.controller_action.run_once
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
options:
  sources:
    description: Host variables holding contract entries.
    type: list
    elements: str
    default: [discovery_contract, ofed_contract, gpu_driver_contract, nic_firmware_contract, sriov_contract,
              roce_qos_contract]
  group_by:
    description: Host variable naming the fabric; hosts are compared only within one fabric.
    type: str
    default: gpunode_fabric
  default_group:
    description: Fabric of a host that does not set O(group_by).
    type: str
    default: default
  hosts:
    description: Hosts to compare; the play's hosts (C(ansible_play_hosts_all)) when omitted.
    type: list
    elements: str
  output:
    description: Path on the controller where the result is written as JSON (also when the contract holds).
    type: path
  fail_on_drift:
    description: Fail when a setting differs. With V(false) the drift is only returned.
    type: bool
    default: true
seealso:
  - module: mlplatform.gpunode.mlxconfig_info
  - module: mlplatform.gpunode.roce_accl
"""

EXAMPLES = r"""
- name: Check the fleet contract
  mlplatform.gpunode.fleet_contract:
    output: "{{ playbook_dir }}/../.cache/fleet-contract.json"
  run_once: true
"""

RETURN = r"""
contract_ok:
  description: True when every host of every fabric agrees on every setting.
  returned: always
  type: bool
drift:
  description: One row per differing host or device.
  returned: always
  type: list
  elements: dict
  sample:
    - fabric: default
      host: hgx01
      scope: rail
      rail: 0
      pci_address: "0000:1a:00.0"
      netdev: ens1np0
      setting: roce_accl.adaptive_routing_forced_en
      expected: 0
      found: 1
      tie: false
fabrics:
  description: Per fabric its C(hosts), the C(expected) value of each setting, C(ties) and C(drift).
  returned: always
  type: dict
table:
  description: The drift as a readable fixed-width table (empty when the contract holds).
  returned: always
  type: str
output:
  description: Where the JSON report was written, or null.
  returned: always
  type: str
"""
