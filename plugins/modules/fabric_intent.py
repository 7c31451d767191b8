#!/usr/bin/python
# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fabric_intent
short_description: Resolve and check the declared intent of every GPU node's fabric, before any host is touched
version_added: 0.1.0
description:
  - Runs on the controller (action plugin). Reads, for every play host, C(gpunode_fabric) (the name of the fabric
    the host is cabled to) and C(gpunode_fabric_settings) (that fabric's declaration, set once in the fabric's
    C(group_vars)), checks every declaration against the schema in docs/variables.md and resolves it into the
    intent every role, check and day-two judgement reads (C(register) it as C(gpunode_intent)).
  - One pass over the hosts; each fabric's declaration is checked once, and every other host of the fabric is
    compared with it.
  - Fails, naming the hosts, the fabric and the variable, on a GPU node in no fabric, a fabric without a
    transport, an unknown key, a value out of range, a contradiction (ECN on a priority without PFC, the RoCE ToS
    off the PFC priorities, a CNP DSCP equal to the data DSCP, QoS or adaptive routing declared on InfiniBand),
    hosts of one fabric with different declarations, and a variable that used to declare intent elsewhere
    (C(roce_qos_trust), C(sriov_compute_num_vfs), C(nic_firmware_adaptive_routing), ...).
  - "Run it once (C(run_once: true)) and before anything else: a failure then stops every host, and nothing has
    been written on any of them."
author:
  - mlplatform.gpunode developers (@mlplatform)
attributes:
  check_mode:
    details: Read-only.
  platform:
    details: Runs on the controller; it reads the inventory.
  run_once:
    details: Meant to run once per play; it resolves every host of the play in that one run.
extends_documentation_fragment:
  - mlplatform.gpunode.controller_action
  - mlplatform.gpunode.controller_action.run_once
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
options:
  hosts:
    description: Hosts to resolve; the play's hosts (C(ansible_play_hosts_all)) when omitted. Every one is a GPU
      node and must be in a fabric.
    type: list
    elements: str
seealso:
  - module: mlplatform.gpunode.fleet_contract
"""

EXAMPLES = r"""
# group_vars/fabric_roce1/gpunode.yml
#   gpunode_fabric: roce1
#   gpunode_fabric_settings:
#     transport: roce
#     link_speed_gbps: 400
#     nics:
#       compute: {adaptive_routing: true, num_vfs: 8}
#     qos: {trust: dscp, pfc_priorities: [3], ecn_np_priorities: [3], ecn_rp_priorities: [3], mtu: 9000}
- name: Resolve the declared intent of every host's fabric
  mlplatform.gpunode.fabric_intent:
  register: gpunode_intent
  run_once: true

- name: Show the VFs a host's compute rails get
  ansible.builtin.debug:
    msg: "{{ gpunode_intent.fabrics[gpunode_fabric].nics.compute.num_vfs }}"
"""

RETURN = r"""
fabrics:
  description:
    - Per fabric name its resolved intent, every default filled in.
    - C(transport) (C(infiniband) or C(roce)), C(link_layer) (C(InfiniBand) or C(Ethernet)), C(link_speed_gbps)
      (int or null).
    - C(nics), per NIC role (C(compute), C(storage), C(dpu)), C(nv_config) (parameter -> value, next boot),
      C(adaptive_routing) (bool, or null where ROCE_ACCL is not managed), C(num_vfs), C(vf_trust), C(vf_spoofchk).
    - C(qos) (null on InfiniBand) with C(lossless), C(trust), C(pfc_priorities), C(ecn_np_priorities),
      C(ecn_rp_priorities), C(cnp_dscp), C(cnp_priority), C(roce_tos), C(mtu), C(nic_roles).
    - C(expect), the compute rails' declared values in the shape the read-back checks take
      (O(mlplatform.gpunode.node_validation#module:expect)), and C(health_expect), its rail-drift part
      (O(mlplatform.gpunode.node_health#module:expect)).
  returned: success
  type: dict
  sample:
    roce1:
      transport: roce
      link_layer: Ethernet
      link_speed_gbps: 400
      nics:
        compute:
          nv_config: {SRIOV_EN: true, NUM_OF_VFS: 8, LINK_TYPE: ETH, ATS_ENABLED: false, ROCE_CC_PRIO_MASK: 8,
                      CNP_DSCP: 48, CNP_802P_PRIO: 6}
          adaptive_routing: true
          num_vfs: 8
hosts:
  description: Host name -> the name of its fabric.
  returned: success
  type: dict
  sample: {dgx01: roce1, hgx01: roce1}
errors:
  description: One message per problem, each naming the hosts, the fabric and the variable.
  returned: failed
  type: list
  elements: str
  sample:
    - "dgx-a07: GPU node in no fabric: gpunode_fabric is not set (put the host in a fabric's inventory group, ...)"
"""
