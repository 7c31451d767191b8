# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Per-device plans against the ``gpunode_host_state`` read (``module_utils/device_plans``): the
mlxconfig, roce_accl, sriov_vfs and roce_qos modules run only when their plan says ``run``."""

from __future__ import annotations

from ansible_collections.mlplatform.gpunode.plugins.module_utils import device_plans


class FilterModule:
    """Device plans."""

    def filters(self):
        return {name: getattr(device_plans, name)
                for name in ("nv_config_plan", "roce_accl_plan", "vf_plan", "qos_plan")}
