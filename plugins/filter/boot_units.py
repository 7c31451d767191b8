# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""``boot_units_plan``: the part of a role's boot units that differs from the host state read once per run.

The logic is ``module_utils.boot_units.host_plan`` (pure), shared with the ``boot_units`` module.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.mlplatform.gpunode.plugins.module_utils import boot_units as bu


def boot_units_plan(files, units=None, host_state=None):
    """Compare desired files and units with ``gpunode_host_state``.

    :param files: the ``files`` option of the ``boot_units`` module.
    :param units: the ``units`` option of the ``boot_units`` module.
    :param host_state: the ``gpunode_host_state`` fact, or None/undefined when it was not read
        (then everything is pending and the module's own read decides).
    :returns: ``{"files": {path: [reasons]}, "units": {name: [actions]}, "pending": bool}``.
    :raises AnsibleFilterError: on input the module would refuse (relative path, bad mode, ...).
    """
    try:
        return bu.host_plan(list(files or []), list(units or []), host_state)
    except (bu.BootUnitsError, AttributeError, TypeError) as exc:
        raise AnsibleFilterError(f"boot_units_plan: {exc}") from exc


class FilterModule:
    """Boot-unit plan filter."""

    def filters(self):
        return {"boot_units_plan": boot_units_plan}
