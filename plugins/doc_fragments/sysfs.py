# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Documentation shared by the read-only sysfs discovery modules (nic_info, gpu_info)."""

from __future__ import annotations


class ModuleDocFragment:
    """The ``sysfs_root`` option and the attributes of a read-only sysfs reader."""

    DOCUMENTATION = r"""
options:
  sysfs_root:
    description:
      - Root of the sysfs tree to read. V(/sys) on a real host; a simulated host's tree elsewhere
        (the simulator's inventory sets C(gpunode_sysfs_root)).
    type: path
    default: /sys
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
    details: Read-only module, there is nothing to diff.
  platform:
    support: full
    platforms: linux
"""

    # The per-device vendor reads of host_state and node_validation.
    READ_WORKERS = r"""
options:
  read_workers:
    description:
      - How many per-device vendor reads (C(mlxconfig -e q), C(mlxreg --get), C(mlnx_qos -i), C(cma_roce_tos))
        run at the same time. Each touches one device and takes from a fraction of a second to seconds on real
        ConnectX hardware, so a host's 8-12 devices are read side by side.
      - V(1) reads one device after the other. The answers, and the handling of a device that refuses a tool,
        are the same either way.
    type: int
    default: 8
"""
