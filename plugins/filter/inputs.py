# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Input checks shared by the roles' preflight tasks: variables that carry a role's prefix but that
the role does not know (``nic_firmware_setings``), each with the closest known name."""

from __future__ import annotations

import difflib

from ansible.errors import AnsibleFilterError


def unknown_variables(names, known, prefix=""):
    """Names in ``names`` that are not in ``known``, each with the closest known name.

    :param names: variable names, typically ``query('ansible.builtin.varnames', '^<role>_')``.
    :param known: the names the role knows (its argument_specs options and the facts it publishes).
    :param prefix: only names starting with it are judged (the role's prefix); internal ``__`` names never are.
    :returns: ``[{"name", "closest", "message"}]`` sorted by name; ``closest`` is None when nothing is near.
    """
    if not isinstance(known, (list, tuple, set)) and not hasattr(known, "keys"):
        raise AnsibleFilterError("unknown_variables expects the known names as a list")
    known = sorted(str(k) for k in known)
    found = []
    for name in sorted({str(n) for n in names or []}):
        if name in known or name.startswith("__") or not name.startswith(prefix):
            continue
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        closest = close[0] if close else None
        hint = f"; did you mean {closest}?" if closest else f"; known: {', '.join(known)}"
        found.append({"name": name, "closest": closest,
                      "message": f"variable {name} is not a variable of this role and is ignored{hint}"})
    return found


class FilterModule:
    """Input-check filters."""

    def filters(self):
        return {"unknown_variables": unknown_variables}
