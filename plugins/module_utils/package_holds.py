# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Package holds: the selections dpkg-query prints and what to hold (pure; the package_holds module applies)."""

from __future__ import annotations

# One line a package dpkg knows: name, wanted selection, status (installed, config-files, not-installed, ...).
QUERY_FORMAT = "${Package}\\t${db:Status-Want}\\t${db:Status-Status}\\n"


def parse_selections(text):
    """``dpkg-query -W -f QUERY_FORMAT`` -> ``{name: (want, status)}``. Pure; a line without three tab-separated
    fields raises ValueError naming it."""
    out = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) < 3:
            raise ValueError(f"unexpected dpkg-query line {line!r}")
        out[fields[0].split(":", 1)[0]] = (fields[1], fields[2])
    return out


def plan_holds(names, selections, check_mode):
    """``(to_hold, errors)``: the names to put on hold, and one error per name that cannot be (not installed;
    in check mode an unknown package is taken as one the skipped install would have installed). Pure."""
    to_hold, errors = [], []
    for name in names:
        want, status = selections.get(name, (None, None))
        if want == "hold":
            continue
        if status not in ("installed", "half-configured", "unpacked", "half-installed", "triggers-awaited",
                          "triggers-pending") and not check_mode:
            errors.append(f"{name} is not an installed package (dpkg status {status or 'unknown'})")
            continue
        to_hold.append(name)
    return sorted(set(to_hold)), errors
