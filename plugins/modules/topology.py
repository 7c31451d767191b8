#!/usr/bin/python
# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: topology
short_description: The fleet's topology levels from the rails' switch neighbours, and the cabling contract
version_added: 0.3.0
description:
  - Runs on the controller (action plugin), in one pass over every host of O(hosts). For each host it takes the
    rails discovery found (C(gpunode_hw)) and the switch port at the far end of each, as the host read
    (M(mlplatform.gpunode.host_state), RV(mlplatform.gpunode.host_state#module:host_state.neighbours)) found it
    with LLDP or C(ibnetdiscover).
  - The levels of each host are the block (the host variable O(block_var), else its fabric) and the rack. In a
    top-of-rack fabric every rail of a host reaches one leaf, which is its rack. In a fabric named in
    O(rail_optimized), rail k of every host of a scalable unit reaches leaf k of that unit; the unit, named by its
    first rail's leaf, is the rack. Where no neighbour answered, the rack is the host variable O(rack_var).
  - The cabling contract of each fabric in O(rail_optimized) finds every rail that reaches another leaf than its
    unit's pattern says (the pattern most hosts of the unit share). Two swapped cables show as two rails, each on
    the other's leaf; a rail on another unit's leaf as C(foreign_leaf). C(playbooks/site.yml) stops such a host
    before join.
  - A rail without a neighbour (LLDP off or lldpd not installed, the subnet manager unreachable) is a warning
    naming the host and the rail.
author:
  - mlplatform.gpunode developers (@mlplatform)
attributes:
  check_mode:
    details: Reads published facts only; the same in check mode.
  platform:
    details: Runs on the controller; it reads the facts the hosts published.
  run_once:
    details: Meant to run once per play over every host of O(hosts).
extends_documentation_fragment:
  - mlplatform.gpunode.controller_action
  - mlplatform.gpunode.controller_action.run_once
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
options:
  hosts:
    description: The hosts (default C(ansible_play_hosts)).
    type: list
    elements: str
  rail_optimized:
    description: The fabrics (C(gpunode_fabric)) declared rail optimized, whose cabling is checked.
    type: list
    elements: str
    default: []
  fabric_var:
    description: The host variable naming its fabric (none is C(default)).
    type: str
    default: gpunode_fabric
  block_var:
    description: The host variable naming its block (a spine group); the fabric's name when not set.
    type: str
    default: gpunode_topology_block
  rack_var:
    description: The host variable naming its rack, used where no neighbour answered.
    type: str
    default: gpunode_topology_rack
  label_keys:
    description: C(block) and C(rack) to the Node label keys of RV(labels).
    type: dict
  domain:
    description: The domain of the default label keys (C(<domain>/topology-block), C(<domain>/topology-rack)).
    type: str
    default: gpunode.mlplatform.io
notes:
  - Fails naming the host when it has no discovery result, and naming the fabric when O(rail_optimized) names one no
    host is in.
  - "LLDP: lldpd, U(https://lldpd.github.io/); ibnetdiscover: U(https://github.com/linux-rdma/rdma-core);
    rail-optimized fabrics: NVIDIA DGX SuperPOD reference architecture,
    U(https://docs.nvidia.com/dgx-superpod/reference-architecture-scalable-infrastructure-h100/latest/)."
seealso:
  - module: mlplatform.gpunode.host_state
  - module: mlplatform.gpunode.fleet_contract
"""

EXAMPLES = r"""
- name: Read the topology and check the cabling
  mlplatform.gpunode.topology:
    rail_optimized: [east]
  register: topology
  run_once: true

- name: Stop a miscabled host
  ansible.builtin.assert:
    that: inventory_hostname not in topology.by_host
    fail_msg: "{{ topology.by_host[inventory_hostname] | default([]) | join('; ') }}"
"""

RETURN = r"""
levels:
  description: Host to C({block, rack, source}); C(source) is C(neighbours), C(inventory) or C(none).
  returned: always
  type: dict
  sample: {hgx1: {block: east, rack: su1-leaf0, source: neighbours}}
labels:
  description: Host to its Node labels (RV(label_keys) to the level's value; a level without a value has none).
  returned: always
  type: dict
  sample: {hgx1: {gpunode.mlplatform.io/topology-block: east, gpunode.mlplatform.io/topology-rack: su1-leaf0}}
label_keys:
  description: C(block) and C(rack) to their label keys.
  returned: always
  type: dict
miscabled:
  description:
    - Every miscabled rail, C({fabric, unit, host, rail, netdev, pci_address, expected_switch, expected_port,
      found_switch, found_port, kind}); C(kind) is C(swapped) or C(foreign_leaf); C(expected_port) is null when
      the host has no cable on the expected leaf.
  returned: always
  type: list
  elements: dict
by_host:
  description: Host to one line per miscabled rail, naming the rail, its netdev and the switch ports expected and found,
    and one line per switch port it reaches that another rail reaches too (RV(claimed_twice)).
  returned: always
  type: dict
claimed_twice:
  description:
    - Every switch port more than one rail reaches (two hosts, or two rails of one host, on one port),
      C({switch, port, rails}) with C(rails) a list of C({host, rail, netdev}). A switch is told by its id when the
      neighbour read has one, else by its name.
  returned: always
  type: list
  elements: dict
warnings:
  description: One line per rail without a neighbour, and one per switch, rack or block name that is not a valid
    label value as it is (non-ASCII letters, or nothing left), naming the label it got. Distinct names always get
    distinct labels (a digest suffix where they would collapse).
  returned: always
  type: list
  elements: str
units:
  description: Rail-optimized fabric to its scalable units, C({name, leaves, hosts}).
  returned: always
  type: dict
tree:
  description: Block to rack to its hosts, for the report.
  returned: always
  type: dict
"""
