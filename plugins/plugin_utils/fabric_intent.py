# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Read every host's fabric declaration from ``hostvars`` and resolve it (module_utils/intent.py).

Used by the ``fabric_intent`` action, and by the fleet-wide actions (``fleet_contract``) when no play of
the run resolved the intent yet. Only the public ``hostvars`` mapping is read: one look-up of a host's
variables per host.
"""

from __future__ import annotations

from ansible_collections.mlplatform.gpunode.plugins.module_utils.intent import (
    FABRIC_VAR,
    MOVED,
    SETTINGS_VAR,
    resolve_fleet,
)

KNOWN_FABRIC_VARS = frozenset((FABRIC_VAR, SETTINGS_VAR, "gpunode_fabric_transport"))
REGISTERED = "gpunode_intent"


def declarations(hostvars, hosts):
    """``{host: {gpunode_fabric, gpunode_fabric_settings, moved, unknown}}`` from ``hostvars``."""
    out = {}
    for host in hosts:
        view = hostvars[host]
        names = list(view)
        moved = [n for n in names if n in MOVED]
        unknown = [n for n in names if n.startswith(FABRIC_VAR + "_") and n not in KNOWN_FABRIC_VARS]
        out[host] = {FABRIC_VAR: view.get(FABRIC_VAR), SETTINGS_VAR: view.get(SETTINGS_VAR),
                     "moved": moved, "unknown": unknown}
    return out


def resolved_intent(task_vars, hosts):
    """This run's resolved intent (the registered ``gpunode_intent``) when it covers ``hosts``, else resolved
    now from ``hostvars``. Raises module_utils.intent.IntentError."""
    registered = task_vars.get(REGISTERED)
    if isinstance(registered, dict) and isinstance(registered.get("hosts"), dict) \
            and all(h in registered["hosts"] for h in hosts):
        return {"fabrics": registered["fabrics"], "hosts": registered["hosts"]}
    return resolve_fleet(declarations(task_vars["hostvars"], hosts))
