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
    means fabric manager is required (docs/hardware-facts.md sections PCI identities and GPU side;
    the public output from
    https://github.com/leptonai/gpud).
  - Once a driver is installed, runs C(nvidia-smi -q) (the only command it runs; read-only) and adds RV(driver_version),
    RV(persistence_mode), RV(fabric_state) and each GPU's RV(gpus[].product_name) and RV(gpus[].memory_total_mib).
    The format is that of the public output from https://github.com/leptonai/gpud (C(Fabric) C(State) V(Completed)
    once fabric manager has trained the NVSwitch fabric, docs/hardware-facts.md section GPU side).
  - Without C(nvidia-smi), or when it cannot talk to the driver (module not loaded), the driver fields are null,
    RV(driver_loaded) is false and RV(nvidia_smi_error) says why; the sysfs fields are always returned.
author:
  - mlplatform.gpunode developers (@mlplatform)
options:
  nvidia_smi_path:
    description:
      - Path of C(nvidia-smi). Default is to look it up on C(PATH); when absent the driver fields are null.
    type: path
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
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
    product_name:
      description: C(Product Name) from C(nvidia-smi -q); null without a loaded driver.
      type: str
      sample: NVIDIA H100 80GB HBM3
    memory_total_mib:
      description: C(FB Memory Usage) C(Total) in MiB from C(nvidia-smi -q); null without a loaded driver.
      type: int
      sample: 81559
    persistence_mode:
      description: This GPU's persistence mode (C(Enabled) is true); null without a loaded driver.
      type: bool
      sample: true
    fabric_state:
      description: This GPU's C(Fabric) C(State); null without NVSwitch fabric section or driver.
      type: str
      sample: Completed
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
  description: True when NVSwitches are present (docs/hardware-facts.md PCI identities).
  returned: success
  type: bool
  sample: true
driver_loaded:
  description: True when C(nvidia-smi -q) answered (the NVIDIA kernel module is loaded).
  returned: success
  type: bool
  sample: true
driver_version:
  description: C(Driver Version) from C(nvidia-smi -q); null without a loaded driver.
  returned: success
  type: str
  sample: "570.172.08"
persistence_mode:
  description: True when every GPU reports persistence mode C(Enabled), false when one does not; null without driver.
  returned: success
  type: bool
  sample: true
fabric_state:
  description: >-
    The GPUs' common C(Fabric) C(State) (V(Completed) once fabric manager trained the NVSwitch fabric; the states joined
    by C(, ) when GPUs differ); null when no GPU has a Fabric section (no NVSwitch) or without driver.
  returned: success
  type: str
  sample: Completed
nvidia_smi_error:
  description: What C(nvidia-smi) printed when it failed (driver not loaded); null otherwise.
  returned: success
  type: str
  sample: "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.mlplatform.gpunode.plugins.module_utils.host_errors import name_the_host
from ansible_collections.mlplatform.gpunode.plugins.module_utils.nic_roles import gpu_inventory
from ansible_collections.mlplatform.gpunode.plugins.module_utils.nvidia_smi import driver_summary, parse_query
from ansible_collections.mlplatform.gpunode.plugins.module_utils.parsing import ParseError
from ansible_collections.mlplatform.gpunode.plugins.module_utils.pci_sysfs import SysfsError, read_sysfs


def _driver_side(module):
    """Run ``nvidia-smi -q`` when present; return (summary or None, error text or None)."""
    path = module.params["nvidia_smi_path"] or module.get_bin_path("nvidia-smi")
    if not path or not os.path.exists(path):
        return None, None
    rc, out, err = module.run_command([path, "-q"])
    if rc != 0:
        return None, (err or out).strip() or f"nvidia-smi -q exited {rc}"
    try:
        return driver_summary(parse_query(out)), None
    except ParseError as exc:
        module.fail_json(msg=f"gpu_info: cannot parse nvidia-smi -q output: {exc}", stdout=out)


def main():
    module = AnsibleModule(
        argument_spec={"sysfs_root": {"type": "path", "default": "/sys"},
                       "nvidia_smi_path": {"type": "path"}},
        supports_check_mode=True,
    )
    host = name_the_host(module, "gpu_info")
    root = module.params["sysfs_root"]
    smi = module.params["nvidia_smi_path"]
    if smi and not (os.path.isfile(smi) and os.access(smi, os.X_OK)):
        module.fail_json(msg=f"gpu_info on {host}: nvidia_smi_path {smi} "
                             f"{'is not executable' if os.path.exists(smi) else 'does not exist'}; leave it unset "
                             "to use nvidia-smi from PATH (absent before the driver is installed)", nvidia_smi_path=smi)
    try:
        snapshot = read_sysfs(root)
    except SysfsError as exc:
        module.fail_json(msg=f"gpu_info: {exc}", sysfs_root=root)
    gpus, nvswitches = gpu_inventory(snapshot)
    models = sorted({gpu["model"] for gpu in gpus})
    summary, error = _driver_side(module)
    per_gpu = (summary or {}).get("gpus", {})
    empty = {"product_name": None, "memory_total_mib": None, "persistence_mode": None, "fabric_state": None}
    gpus = [dict(gpu, **per_gpu.get(gpu["pci_address"], empty)) for gpu in gpus]
    module.exit_json(
        changed=False,
        gpus=gpus,
        nvswitches=nvswitches,
        gpu_count=len(gpus),
        gpu_product=", ".join(models) if models else None,
        fabric_manager_required=bool(nvswitches),
        driver_loaded=summary is not None,
        driver_version=summary["driver_version"] if summary else None,
        persistence_mode=summary["persistence_mode"] if summary else None,
        fabric_state=summary["fabric_state"] if summary else None,
        nvidia_smi_error=error,
    )


if __name__ == "__main__":
    main()
