# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""NV config values that are set for next boot but did not take effect after the bounded reboots (pure).

A value that does not stick (a firmware that ignores it, a card that needs a firmware reset rather than a
reboot) would otherwise make every later run ask for a reboot again, and node_reboot would refuse each
time. Once node_reboot has spent its ``max_attempts`` on the nic_firmware reason and the same values are
still pending, they are recorded as *not in effect* (``nic_firmware.json`` key ``not_in_effect``) and no
longer ask for a reboot. The record stays while the wished value and the device's firmware are the same;
a new wish or a new firmware asks again.
"""

from __future__ import annotations

REASON = "nic_firmware_reboot_required"
NOTE = "set for next boot, not in effect after {reboots} reboot(s)"


def reboots_spent(reboot_record, reason=REASON):
    """The reboots node_reboot spent on ``reason`` when it has given up (attempts >= max_attempts while the
    reboot is still required for it), else 0. ``reboot_record`` is reboot.json's content (or None)."""
    if not isinstance(reboot_record, dict) or not reboot_record.get("required"):
        return 0
    if reason not in (reboot_record.get("reasons") or []):
        return 0
    try:
        attempts, limit = int(reboot_record.get("attempts") or 0), int(reboot_record.get("max_attempts") or 0)
    except (TypeError, ValueError):
        return 0
    return attempts if limit > 0 and attempts >= limit else 0


def not_in_effect(nv, firmware, reboot_record, previous):
    """``{"record", "new", "covered"}`` for the pending NV config of one host.

    ``nv``: the mlxconfig module's result (or the plan's): ``devices`` (device -> ``params`` -> ``{current,
    next_boot, desired}``), ``pending`` (device -> [param]) and ``changed``. ``firmware``: device -> firmware
    version. ``reboot_record``: reboot.json (or None). ``previous``: the last run's ``not_in_effect`` record.

    ``record``: device -> param -> ``{desired, next_boot, current, firmware, reboots, note}``, the pending
    wished values that did not take effect: kept from ``previous`` when the wish and the firmware are the same,
    new when node_reboot has spent its reboots on them and this call wrote nothing. ``new``: the part of
    ``record`` not in ``previous`` (what to warn about, once). ``covered``: every pending parameter is in
    ``record`` (nothing pending can still take effect by a reboot).
    """
    nv = nv or {}
    devices = nv.get("devices") or {}
    pending = nv.get("pending") or {}
    previous = previous if isinstance(previous, dict) else {}
    spent = 0 if nv.get("changed") else reboots_spent(reboot_record)
    record, new = {}, {}
    for device in sorted(pending):
        params = (devices.get(device) or {}).get("params") or {}
        for param in sorted(pending[device]):
            values = params.get(param) or {}
            if values.get("desired") is None:
                continue
            entry = {"desired": str(values["desired"]), "next_boot": values.get("next_boot"),
                     "current": values.get("current"), "firmware": (firmware or {}).get(device)}
            before = (previous.get(device) or {}).get(param)
            if isinstance(before, dict) and before.get("desired") == entry["desired"] \
                    and before.get("firmware") == entry["firmware"]:
                entry["reboots"] = before.get("reboots")
            elif spent:
                entry["reboots"] = spent
                new.setdefault(device, {})[param] = entry
            else:
                continue
            entry["note"] = NOTE.format(reboots=entry["reboots"])
            record.setdefault(device, {})[param] = entry
    covered = bool(pending) and all(param in record.get(device, {})
                                    for device, names in pending.items() for param in names)
    return {"record": record, "new": new, "covered": covered}
