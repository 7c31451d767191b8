# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Package holds: what to hold, from the dpkg records host_state reads (pure; the package_holds module applies).

The records are ``host_state.parse_dpkg_records`` of ``dpkg-query -W -f host_state.DPKG_FORMAT``:
``{name: {"version", "want", "status"}}``."""

from __future__ import annotations

# dpkg statuses of a package whose files are on disk (dpkg-query(1)); a hold applies to them.
PRESENT = ("installed", "half-configured", "unpacked", "half-installed", "triggers-awaited", "triggers-pending")


def plan_holds(names, records, check_mode):
    """``(to_hold, errors)``: the names to put on hold, and one error per name that cannot be (not installed;
    in check mode an unknown package is taken as one the skipped install would have installed). Pure."""
    to_hold, errors = [], []
    for name in names:
        record = records.get(name) or {}
        want, status = record.get("want"), record.get("status")
        if want == "hold":
            continue
        if status not in PRESENT and not check_mode:
            errors.append(f"{name} is not an installed package (dpkg status {status or 'unknown'})")
            continue
        to_hold.append(name)
    return sorted(set(to_hold)), errors
