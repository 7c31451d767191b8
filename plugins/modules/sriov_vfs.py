#!/usr/bin/python
# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sriov_vfs
short_description: Set the number of SR-IOV virtual functions of every PF of a host in one call
version_added: 0.1.0
description:
  - Reads C(sriov_numvfs) and C(sriov_totalvfs) of every PF listed in O(pfs), computes what to write, and writes
    C(/sys/bus/pci/devices/<pci_address>/sriov_numvfs).
  - No-op when the count is already right. A change of a non-zero count writes V(0) first, then the new count,
    because the kernel answers EBUSY ("Device or resource busy") to a non-zero write while VFs exist
    (docs/hardware-facts.md "SR-IOV"; the public output from https://github.com/Mellanox/k8s-rdma-sriov-dev-plugin/issues/12).
  - Validates every PF before writing to any; a PF asking for more than C(sriov_totalvfs) fails the whole call
    with a message saying that the firmware (C(SRIOV_EN)/C(NUM_OF_VFS)) must change first, which is the
    C(nic_firmware) role's job (C(sriov_totalvfs) follows the firmware's current C(NUM_OF_VFS), docs/hardware-facts.md
    "mlxconfig / NV config").
  - Reads every count back and fails naming the PF when a write did not stick.
  - VF settings such as trust and spoofchk are not handled here (the C(sriov) role sets them with C(ip link)).
author:
  - mlplatform.gpunode developers (@mlplatform)
options:
  pfs:
    description:
      - The desired VF count of each PF. PFs not listed are left alone.
    type: list
    elements: dict
    required: true
    suboptions:
      pci_address:
        description: PCI address of the PF (V(0000:18:00.0); V(18:00.0) means domain V(0000)).
        type: str
        required: true
      num_vfs:
        description: Number of VFs wanted; V(0) removes them all.
        type: int
        required: true
  sysfs_root:
    description:
      - Root of the sysfs tree. V(/sys) on a real host; a simulated host's tree elsewhere (C(gpunode_sysfs_root)).
    type: path
    default: /sys
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  platform:
    support: full
    platforms: linux
notes:
  - Removing VFs that a pod or VM uses disrupts it; the kernel may also answer EBUSY while a VF is in use. Run this
    before containerd and kubelet start (the C(sriov) role's boot unit) or drain the node first.
seealso:
  - module: mlplatform.gpunode.nic_info
"""

EXAMPLES = r"""
- name: Eight VFs on every compute rail
  mlplatform.gpunode.sriov_vfs:
    pfs: "{{ gpunode_hw['nics'] | selectattr('role', 'eq', 'compute')
             | map(attribute='pci_address') | map('community.general.dict_kv', 'pci_address')
             | map('combine', {'num_vfs': 8}) }}"

- name: Remove the VFs of one PF of a simulated host
  mlplatform.gpunode.sriov_vfs:
    sysfs_root: /var/lib/gpunode-sim/sys
    pfs:
      - pci_address: "0000:18:00.0"
        num_vfs: 0
"""

RETURN = r"""
pfs:
  description:
    - Per PCI address (as normalized, V(0000:18:00.0)), the VF count before and after the call and the firmware
      limit C(sriov_totalvfs). In check mode C(after) is the count that would be set.
  returned: success
  type: dict
  sample:
    "0000:18:00.0": {before: 0, after: 8, total: 16}
msg:
  description:
    - On failure, what went wrong naming the PCI address and the option (C(pfs[1].num_vfs)); the kernel's answer
      (EBUSY, EINVAL, EACCES) for a failed write.
  returned: failure
  type: str
  sample: "sriov_vfs on gpu01: 0000:18:00.0: 32 VFs requested but sriov_totalvfs is 16; ..."
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.mlplatform.gpunode.plugins.module_utils import sriov
from ansible_collections.mlplatform.gpunode.plugins.module_utils.host_errors import name_the_host


def main():
    module = AnsibleModule(
        argument_spec={
            "pfs": {"type": "list", "elements": "dict", "required": True,
                    "options": {"pci_address": {"type": "str", "required": True},
                                "num_vfs": {"type": "int", "required": True}}},
            "sysfs_root": {"type": "path", "default": "/sys"},
        },
        supports_check_mode=True,
    )
    host = name_the_host(module, "sriov_vfs")
    root = module.params["sysfs_root"]

    def fail(errors, **extra):
        module.fail_json(msg=f"sriov_vfs on {host}: " + "; ".join(errors), errors=errors, **extra)

    if not os.path.isdir(os.path.join(root, "bus", "pci", "devices")):
        fail([f"sysfs_root {root} does not exist" if not os.path.isdir(root)
              else f"sysfs_root {root} has no bus/pci/devices (not a sysfs tree)"], sysfs_root=root)
    desired, errors = sriov.validate_request(module.params["pfs"])
    if errors:
        fail(errors)
    current = {}
    for pci in desired:
        try:
            current[pci] = sriov.read_pf(root, pci)
        except sriov.SriovError as exc:
            errors.append(str(exc))
    if errors:
        fail(errors)
    plans, errors = sriov.plan(current, desired)
    if errors:
        fail(errors)

    result = {pci: {"before": p["before"], "after": p["after"], "total": p["total"]} for pci, p in plans.items()}
    changed = any(p["writes"] for p in plans.values())
    diff = {"before": {pci: p["before"] for pci, p in plans.items()},
            "after": {pci: p["after"] for pci, p in plans.items()}}
    if not changed or module.check_mode:
        module.exit_json(changed=changed, pfs=result, diff=diff)

    for pci, p in plans.items():
        for value in p["writes"]:
            try:
                sriov.write_numvfs(root, pci, value)
            except sriov.SriovError as exc:
                # Report what already happened so the operator knows the state.
                result[pci]["after"] = sriov.read_pf(root, pci)["numvfs"]
                fail([str(exc)], pfs=result)
    for pci, p in plans.items():
        now = sriov.read_pf(root, pci)["numvfs"]
        result[pci]["after"] = now
        if now != p["after"]:
            errors.append(f"{pci}: wrote {p['after']} to sriov_numvfs but it reads back {now}")
    if errors:
        fail(errors, pfs=result)
    module.exit_json(changed=True, pfs=result, diff=diff)


if __name__ == "__main__":
    main()
