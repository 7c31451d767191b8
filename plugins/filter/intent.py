# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""``host_intent`` and ``intent_by_role``: a host's part of the resolved fabric intent (module_utils/intent.py)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.mlplatform.gpunode.plugins.module_utils import intent as intent_utils
from ansible_collections.mlplatform.gpunode.plugins.module_utils.intent import MANAGED_ROLES


def host_intent(intent, host):
    """The resolved intent of ``host``'s fabric, from the ``fabric_intent`` result (``gpunode_intent``)."""
    if not isinstance(intent, dict) or not isinstance(intent.get("hosts"), dict) \
            or not isinstance(intent.get("fabrics"), dict):
        raise AnsibleFilterError("host_intent expects the registered result of mlplatform.gpunode.fabric_intent "
                                 "(gpunode_intent)")
    fabric = intent["hosts"].get(host)
    if fabric is None or fabric not in intent["fabrics"]:
        raise AnsibleFilterError(f"{host}: no resolved fabric intent (the host was not in the play that ran "
                                 "mlplatform.gpunode.fabric_intent)")
    return intent["fabrics"][fabric]


def intent_by_role(fabric, key):
    """``{role: nics[role][key]}`` for the NIC roles whose ``key`` is set (not null, not empty)."""
    if not isinstance(fabric, dict) or not isinstance(fabric.get("nics"), dict):
        raise AnsibleFilterError("intent_by_role expects one fabric's resolved intent (host_intent)")
    out = {}
    for role in MANAGED_ROLES:
        value = (fabric["nics"].get(role) or {}).get(key)
        if value is not None and value != {}:
            out[role] = value
    return out


def intent_devices(fabric, nics, concern, overrides=None, skipped=None):
    """What the concern's module is asked for on this host's NICs, from the fabric's resolved intent."""
    if not isinstance(fabric, dict) or not isinstance(fabric.get("nics"), dict):
        raise AnsibleFilterError("intent_devices expects one fabric's resolved intent (host_intent)")
    if not isinstance(nics, list):
        raise AnsibleFilterError("intent_devices expects gpunode_hw['nics'] (a list of NICs) as its first argument")
    skipped = list(skipped or [])
    if concern == "nv_config":
        return intent_utils.nv_config_devices(fabric, nics, overrides or {}, skipped)
    if concern == "roce_accl":
        return intent_utils.roce_accl_devices(fabric, nics, skipped)
    if concern == "vfs":
        return intent_utils.vf_pfs(fabric, nics)
    if concern == "qos":
        return intent_utils.qos_interfaces(fabric, nics)
    raise AnsibleFilterError(f"intent_devices: concern must be nv_config, roce_accl, vfs or qos, got {concern!r}")


class FilterModule:
    """The collection's fabric intent filters."""

    def filters(self):
        return {"host_intent": host_intent, "intent_by_role": intent_by_role, "intent_devices": intent_devices}
