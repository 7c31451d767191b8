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
