#!/usr/bin/python
# Copyright: (c) 2025, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_info
short_description: Discover NVIDIA GPUs and NVSwitches from sysfs
version_added: 0.1.0
description:
  - Reads Linux sysfs only (C(bus/pci/devices)); works before any GPU driver is installed and runs no command.
  - GPUs are NVIDIA (C(0x10de)) functions of PCI class C(0x0302xx) (3D controller), indexed in PCI address order;
    C(10de:2330) reads V(H100 SXM5 80GB). NVSwitches are C(10de:22a3) (class C(0x0680xx), a bridge); their presence
    means fabric manager is required (hardware-facts.md sections PCI identities and GPU side; real-outputs
    C(lspci-h100-xe9680-nvidia-mellanox-gpud.txt)).
  - RV(driver_version), RV(persistence_mode) and RV(fabric_state) come from C(nvidia-smi) once a driver exists;
    this version does not read them yet and always returns null for them.
author:
  - mlplatform.gpunode developers
extends_documentation_fragment:
  - mlplatform.gpunode.sysfs
seealso:
  - module: mlplatform.gpunode.nic_info
"""

EXAMPLES = r"""
- name: Discover GPUs and NVSwitches
  mlplatform.gpunode.gpu_info:
  register: __discovery_gpus

- name: Install fabric manager only where NVSwitches exist
  ansible.builtin.debug:
    msg: "fabric manager required: {{ __discovery_gpus.fabric_manager_required }}"
"""

RETURN = r"""
gpus:
  description: GPUs in PCI address order.
  returned: success
  type: list
  elements: dict
  contains:
    index:
      description: Position in PCI address order (rail N of nic_info serves GPU N).
      type: int
      sample: 0
    pci_address:
      description: PCI address.
      type: str
      sample: "0000:19:00.0"
    device_id:
      description: PCI device id.
      type: str
      sample: "0x2330"
    model:
      description: V(H100 SXM5 80GB) for C(0x2330), else C(NVIDIA <device_id>).
      type: str
      sample: H100 SXM5 80GB
    numa_node:
      description: NUMA node, null when the platform reports -1.
      type: int
      sample: 0
nvswitches:
  description: NVSwitches in PCI address order.
  returned: success
  type: list
  elements: dict
  contains:
    pci_address:
      description: PCI address.
      type: str
      sample: "0000:83:00.0"
    device_id:
      description: PCI device id.
      type: str
      sample: "0x22a3"
    numa_node:
      description: NUMA node, null when unknown.
      type: int
      sample: 1
gpu_count:
  description: Number of GPUs.
  returned: success
  type: int
  sample: 8
gpu_product:
  description: Model of the GPUs; null without GPUs; models joined by C(, ) when they differ.
  returned: success
  type: str
  sample: H100 SXM5 80GB
fabric_manager_required:
  description: True when NVSwitches are present (hardware-facts.md PCI identities).
  returned: success
  type: bool
  sample: true
driver_version:
  description: Always null for now; will come from C(nvidia-smi) once a driver is installed.
  returned: success
  type: str
  sample: null
persistence_mode:
  description: Always null for now; will come from C(nvidia-smi) once a driver is installed.
  returned: success
  type: bool
  sample: null
fabric_state:
  description: Always null for now; will come from C(nvidia-smi -q) (C(Fabric State)) once a driver is installed.
  returned: success
  type: str
  sample: null
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.mlplatform.gpunode.plugins.module_utils.nic_roles import gpu_inventory
from ansible_collections.mlplatform.gpunode.plugins.module_utils.pci_sysfs import SysfsError, read_sysfs


def main():
    module = AnsibleModule(
        argument_spec={"sysfs_root": {"type": "path", "default": "/sys"}},
        supports_check_mode=True,
    )
    root = module.params["sysfs_root"]
    try:
        snapshot = read_sysfs(root)
    except SysfsError as exc:
        module.fail_json(msg=f"gpu_info: {exc}", sysfs_root=root)
    gpus, nvswitches = gpu_inventory(snapshot)
    models = sorted({gpu["model"] for gpu in gpus})
    module.exit_json(
        changed=False,
        gpus=gpus,
        nvswitches=nvswitches,
        gpu_count=len(gpus),
        gpu_product=", ".join(models) if models else None,
        fabric_manager_required=bool(nvswitches),
        # From nvidia-smi once a driver exists (a later issue); sysfs alone cannot tell.
        driver_version=None,
        persistence_mode=None,
        fabric_state=None,
    )


if __name__ == "__main__":
    main()
