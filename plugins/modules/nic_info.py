#!/usr/bin/python
# Copyright: (c) 2025, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nic_info
short_description: Discover NVIDIA/Mellanox NICs from sysfs and classify them by role
version_added: 0.1.0
description:
  - Reads Linux sysfs only (C(bus/pci/devices), C(class/net), C(class/infiniband), C(class/dmi/id)).
    Works on a bare machine before any GPU driver, DOCA-OFED or vendor tool is installed; runs no command.
  - Classifies every Mellanox/NVIDIA network physical function (PCI vendor C(0x15b3), class C(0x02xxxx), not a VF)
    as V(compute), V(storage), V(management), V(dpu) or V(ignored), from facts only, never from mlx5 indices
    or interface names. Each NIC carries a human-readable O(ignore:role_reason).
  - "Rules, first match wins: an override from O(overrides); V(management) when the PF's netdev (or a bond or
    VLAN built on it) is one of O(management_interfaces); V(dpu) for BlueField device ids (C(0xa2dc) BlueField-3,
    C(0xa2d6) BlueField-2), except a single-port BlueField in no bond that shares a PCIe switch (C(PIX)/C(PXB))
    with a GPU, which is a SuperNIC (BlueField-3 B3140H, one per GPU on Spectrum-X systems) and a rail candidate
    (the DPU/NIC operation mode is not visible in sysfs, so placement decides); V(ignored) when the PF has
    neither netdev nor RDMA device and no GPU within its PCIe switch; V(storage) for bond members and for every
    PF of a multi-port card (more than one PF in one slot); the remaining single-port PFs are rail candidates."
  - Exactly one compute rail per GPU. Each GPU, in PCI address order, takes the nearest candidate at C(PIX) or
    C(PXB) distance (C(PIX) before C(PXB), fewer PCIe hops first). Ties are broken by the model and board id
    shared by the host's other rails, then by higher link speed; a remaining tie is ambiguous and the GPU is
    reported in RV(gpus_without_rail) with its candidates. A NIC nearest to two GPUs serves the first one only.
  - A GPU with no C(PIX)/C(PXB) candidate at all (boards without PCIe switches, such as HGX H100 4-GPU servers
    whose GPUs and NICs sit on CPU root ports) falls back to C(PHB) - the same host bridge - when exactly one
    candidate is there, that candidate is C(PIX)/C(PXB) to no GPU and no other GPU has taken it; the choice is
    reported in RV(discovery_warnings). Two or more C(PHB) candidates are ambiguous (RV(gpus_without_rail)).
    The rail index is the GPU's index in PCI address order (rail i serves GPU i), not the mlx5 number.
    Candidates not chosen become V(storage) (a BlueField becomes V(dpu)).
  - "PCIe distance uses the terms of C(nvidia-smi topo -m): C(PIX) at most one PCIe switch between the devices
    (both within two levels below their deepest common bridge), C(PXB) several bridges below a common one without
    the host bridge, C(PHB) same host bridge, C(NODE) same NUMA node through different host bridges, C(SYS)
    different NUMA nodes. Sources: the public output from https://github.com/kvcache-ai/Mooncake/issues/2039
    (legend and GPU/NIC matrix) and docs/hardware-facts.md section GPU side."
  - "Hardware identities come from docs/hardware-facts.md section PCI identities (C(15b3:1021) ConnectX-7, C(15b3:101d)
    ConnectX-6 Dx, C(15b3:101f) ConnectX-6 Lx, C(15b3:a2dc) BlueField-3, C(15b3:101e) mlx5 VF, C(10de:2330)
    H100 SXM5 80GB, C(10de:22a3) NVSwitch; C(10de:2335) H200 SXM 141GB from the public pci.ids). Any NVIDIA 3D
    controller (class C(0302)) counts as a GPU. RDMA port formats (C(4: ACTIVE), C(5: LinkUp),
    and rates such as 400 Gb/sec (4X NDR)) come from the public output from https://github.com/leptonai/gpud."
  - This module never changes anything; RV(ignore:changed) is always false.
author:
  - mlplatform.gpunode developers (@mlplatform)
options:
  management_interfaces:
    description:
      - Interfaces that carry management traffic, typically the default-route interface and the one holding the
        address Ansible connects to (for example V(bond0) or V(eno1)).
      - A PF whose netdev is one of these, a slave of one of these bonds, or the lower device of one of these
        VLANs is classified V(management).
      - Each must exist under C(<sysfs_root>/class/net); one that does not fails the module (a typo would otherwise
        let the SSH NIC be classified compute).
    type: list
    elements: str
    default: []
  detected_interfaces:
    description:
      - Management interfaces found by the caller (default route, the address Ansible connects to). Used as
        O(management_interfaces), but one absent from the sysfs tree is ignored (a simulated tree holds only the
        simulated NICs).
    type: list
    elements: str
    default: []
  overrides:
    description:
      - Per-host corrections for the odd board, keyed by PCI address (V(0000:1b:00.0); V(1b:00.0) means domain
        V(0000)).
      - "Each value is a dict: C(role) (one of V(compute), V(storage), V(management), V(dpu), V(ignored)) and,
        for V(compute) only, an optional C(rail) (the index of the GPU it serves)."
      - An address that is not a Mellanox PF on this host is reported in RV(discovery_warnings), not an error;
        an invalid role or rail fails the module naming the address.
    type: dict
    default: {}
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - mlplatform.gpunode.sysfs
notes:
  - Netdev names vary with the OS naming policy and mlx5 numbering shifts when a card exposes fewer functions
    (the public output from https://github.com/aben20807/dotfiles shows 11 devices instead of 12); both are reported as
    data and never used to decide a role.
  - On some HGX boards a dual-port storage NIC sits behind the same PCIe switch as GPU0 and GPU4 (C(PIX) in
    the public output from https://github.com/kvcache-ai/Mooncake/issues/2039); affinity alone does not make a rail.
seealso:
  - module: mlplatform.gpunode.gpu_info
"""

EXAMPLES = r"""
- name: Discover NICs and their roles
  mlplatform.gpunode.nic_info:
    management_interfaces:
      - "{{ ansible_facts['default_ipv4']['interface'] }}"
  register: __discovery_nics

- name: Read a simulated host's sysfs tree
  mlplatform.gpunode.nic_info:
    sysfs_root: /srv/sim/sysfs

- name: Force the role of an odd card
  mlplatform.gpunode.nic_info:
    overrides:
      "0000:1b:00.0":
        role: compute
        rail: 0
      "0000:9d:00.0":
        role: ignored

- name: Fail when a GPU has no rail
  ansible.builtin.assert:
    that: __discovery_nics.gpus_without_rail | length == 0
    fail_msg: "{{ __discovery_nics.gpus_without_rail }}"
"""

RETURN = r"""
nics:
  description: Every Mellanox/NVIDIA physical function (VFs excluded), sorted by PCI address.
  returned: success
  type: list
  elements: dict
  contains:
    pci_address:
      description: PCI address of the function.
      type: str
      sample: "0000:18:00.0"
    vendor_id:
      description: PCI vendor id.
      type: str
      sample: "0x15b3"
    device_id:
      description: PCI device id (docs/hardware-facts.md PCI identities).
      type: str
      sample: "0x1021"
    model:
      description: V(ConnectX-7), V(ConnectX-6 Dx), V(ConnectX-6 Lx), V(BlueField-3), ... or C(Mellanox <device_id>).
      type: str
      sample: ConnectX-7
    card:
      description: Slot of the card (domain:bus:device); the PFs of one card share it.
      type: str
      sample: "0000:29:00"
    function:
      description: PCI function number.
      type: int
      sample: 0
    ports:
      description: Number of PFs on the card.
      type: int
      sample: 1
    netdev:
      description: Network interface of the PF, or null when no driver exposes one.
      type: str
      sample: ibp24s0
    rdma_device:
      description: RDMA device of the PF (a RoCE LAG device such as C(mlx5_bond_0) shows on function 0), or null.
      type: str
      sample: mlx5_0
    link_layer:
      description: V(InfiniBand) or V(Ethernet) from the RDMA port (else the netdev type), or null.
      type: str
      sample: InfiniBand
    link_state:
      description: RDMA port 1 state (the file's C(4 ACTIVE) reads V(ACTIVE)), or null without RDMA device.
      type: str
      sample: ACTIVE
    speed_gbps:
      description: Link speed in Gb/s from the RDMA port rate (else the netdev speed), or null when unknown.
      type: int
      sample: 400
    numa_node:
      description: NUMA node of the PCI function, null when the platform reports -1.
      type: int
      sample: 0
    board_id:
      description: Board id (PSID) from the RDMA device, for example C(MT_0000000838) for a CX-7 400G OSFP.
      type: str
      sample: MT_0000000838
    fw_version:
      description: Firmware version from the RDMA device.
      type: str
      sample: 28.39.1002
    sriov_totalvfs:
      description: C(sriov_totalvfs) of the PF (16 for a factory CX-7), null when absent.
      type: int
      sample: 16
    sriov_numvfs:
      description: C(sriov_numvfs) of the PF, null when absent.
      type: int
      sample: 0
    bond:
      description: Bond the PF's netdev is enslaved to, or null.
      type: str
      sample: bond0
    role:
      description: One of V(compute), V(storage), V(management), V(dpu), V(ignored).
      type: str
      sample: compute
    role_reason:
      description: Why the NIC got its role, in one sentence.
      type: str
      sample: nearest NIC to GPU 0000:1b:00.0 (PXB)
    rail:
      description: Rail index (= index of the GPU it serves), null unless compute.
      type: int
      sample: 0
    gpu:
      description: PCI address of the GPU this rail serves, null unless compute.
      type: str
      sample: "0000:1b:00.0"
    gpu_distance:
      description: Distance to the nearest GPU (V(PIX), V(PXB), V(PHB), V(NODE), V(SYS)); null without GPUs.
      type: str
      sample: PXB
gpus:
  description: GPUs (vendor C(0x10de), class C(0x0302xx)) in PCI address order.
  returned: success
  type: list
  elements: dict
  contains:
    index:
      description: Position in PCI address order; rail N serves GPU N.
      type: int
      sample: 0
    pci_address:
      description: PCI address.
      type: str
      sample: "0000:1b:00.0"
    device_id:
      description: PCI device id.
      type: str
      sample: "0x2330"
    model:
      description: V(H100 SXM5 80GB) for C(0x2330), else C(NVIDIA <device_id>).
      type: str
      sample: H100 SXM5 80GB
    numa_node:
      description: NUMA node, null when unknown.
      type: int
      sample: 0
    rail_nic:
      description: PCI address of its rail NIC, or null.
      type: str
      sample: "0000:18:00.0"
nvswitches:
  description: NVSwitches (C(10de:22a3)); their presence means fabric manager is required.
  returned: success
  type: list
  elements: dict
  sample: [{pci_address: "0000:83:00.0", device_id: "0x22a3", numa_node: 1}]
platform:
  description: DMI identity from C(class/dmi/id); each value null when absent.
  returned: success
  type: dict
  contains:
    vendor:
      description: C(sys_vendor).
      type: str
      sample: NVIDIA
    product:
      description: C(product_name); contains C(DGX H100) on a DGX (docs/hardware-facts.md DGX H100).
      type: str
      sample: DGXH100
    board_vendor:
      description: C(board_vendor).
      type: str
      sample: NVIDIA
    board_name:
      description: C(board_name).
      type: str
      sample: DGXH100
rails:
  description: The compute rails sorted by rail index.
  returned: success
  type: list
  elements: dict
  sample:
    - rail: 0
      gpu: "0000:1b:00.0"
      pci_address: "0000:18:00.0"
      netdev: ibp24s0
      rdma_device: mlx5_0
      link_layer: InfiniBand
      speed_gbps: 400
gpus_without_rail:
  description: GPUs that got no rail, with the reason and the candidate NICs (tied, or already taken).
  returned: success
  type: list
  elements: dict
  sample:
    - gpu: "0000:19:00.0"
      index: 0
      reason: 2 NICs tie at PIX distance (same model, board id and speed)
      candidates: ["0000:1a:00.0", "0000:1c:00.0"]
discovery_warnings:
  description:
    - Odd layouts found (GPU without rail, override for an absent address, rail link not active, ...). Each entry
      is also emitted as an Ansible warning.
    - This is the C(warnings) list of the classifier; C(warnings) itself is a reserved result key in Ansible.
  returned: success
  type: list
  elements: str
  sample: ["override for 0000:55:00.0: not present on this host; ignored"]
"""


from ansible.module_utils.basic import AnsibleModule
from ansible_collections.mlplatform.gpunode.plugins.module_utils.discovery import (
    ARGUMENT_SPEC,
    DiscoveryError,
    discover,
)
from ansible_collections.mlplatform.gpunode.plugins.module_utils.host_errors import name_the_host


def main():
    module = AnsibleModule(
        argument_spec={
            **ARGUMENT_SPEC,
        },
        supports_check_mode=True,
    )
    host = name_the_host(module, "nic_info")
    root = module.params["sysfs_root"]
    try:
        result = discover(root, hostname=host,
                          management_interfaces=module.params["management_interfaces"],
                          detected_interfaces=module.params["detected_interfaces"],
                          overrides=module.params["overrides"], caller="nic_info")
    except DiscoveryError as exc:
        module.fail_json(msg=str(exc), sysfs_root=root)
    # "warnings" is reserved in module results (Ansible consumes it): publish the list under its own
    # key and raise each entry as an Ansible warning too.
    notes = result.pop("warnings")
    for note in notes:
        module.warn(note)
    module.exit_json(changed=False, discovery_warnings=notes, **result)


if __name__ == "__main__":
    main()
