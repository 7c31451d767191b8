# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""``firmware_contract``: contract entries for the NV config and ROCE_ACCL state of compute rails.

Used by the nic_firmware role (after converging) and by ``playbooks/audit.yml`` (read-only), so a
live fleet is audited with the same entries the role publishes.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.mlplatform.gpunode.plugins.module_utils.contract import firmware_entries
from ansible_collections.mlplatform.gpunode.plugins.module_utils.not_in_effect import not_in_effect


def firmware_contract(rails, config, fields=None, params=None, not_in_effect=None):
    """See ``module_utils.contract.firmware_entries``."""
    if not isinstance(rails, list) or not all(isinstance(r, dict) and "rail" in r and "pci_address" in r
                                              for r in rails):
        raise AnsibleFilterError("firmware_contract expects gpunode_hw['rails'] (a list of {rail, pci_address, ...})")
    if not isinstance(config, dict):
        raise AnsibleFilterError("firmware_contract expects the 'config' result of mlxconfig or mlxconfig_info")
    return firmware_entries(rails, config, fields=fields, params=list(params) if params is not None else None,
                            not_in_effect=not_in_effect if isinstance(not_in_effect, dict) else None)


def nv_not_in_effect(nv, firmware=None, reboot_record=None, previous=None):
    """See ``module_utils.not_in_effect.not_in_effect``."""
    if not isinstance(nv, dict):
        raise AnsibleFilterError("nv_not_in_effect expects the result of the mlxconfig module (or its plan)")
    return not_in_effect(nv, firmware if isinstance(firmware, dict) else {}, reboot_record,
                         previous if isinstance(previous, dict) else {})


class FilterModule:
    """The collection's contract filters."""

    def filters(self):
        return {"firmware_contract": firmware_contract, "nv_not_in_effect": nv_not_in_effect}
