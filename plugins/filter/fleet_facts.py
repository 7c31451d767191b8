# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""``fleet_facts``: one variable of many hosts in one pass over hostvars (plugin_utils/fleet_vars.py)."""

from __future__ import annotations

from ansible_collections.mlplatform.gpunode.plugins.plugin_utils.fleet_vars import FleetVars


def fleet_facts(hostvars, hosts, name, default=None):
    """``{host: value of name}`` for every host of ``hosts``; ``default`` where it is not defined."""
    fleet = FleetVars(hostvars)
    return {host: fleet.get(host, name, default) for host in hosts}


class FilterModule:
    """Fleet-wide fact access."""

    def filters(self):
        return {"fleet_facts": fleet_facts}
