# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Argument checks the collection's controller-side actions share; each error names the action and the option."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.validation import check_type_float, check_type_int

KINDS = {check_type_int: "an integer", check_type_float: "a number"}


def numbers(action, args, spec, must_be=None):
    """``{name: value}`` for ``spec`` ``{name: (check_type_int or check_type_float, default, low, high)}``: each
    option converted and within ``low``-``high``, else AnsibleActionFail naming ``action`` and the option (a value
    of the wrong type "must be" ``must_be``, by default what its check takes)."""
    out = {}
    for name, (check, default, low, high) in spec.items():
        value = args.get(name, default)
        try:
            value = check(value)
        except TypeError:
            raise AnsibleActionFail(f"{action}: {name} must be {must_be or KINDS[check]}, got {value!r}") from None
        if not low <= value <= high:
            raise AnsibleActionFail(f"{action}: {name} {value} is out of range {low}-{high}")
        out[name] = value
    return out


def play_hosts(action, args, task_vars, default_vars=("ansible_play_hosts",)):
    """The ``hosts`` option, else the first of ``default_vars`` the play sets: a non-empty list of host names."""
    hosts = args.get("hosts")
    for name in default_vars:
        hosts = hosts or task_vars.get(name)
    if not isinstance(hosts, list) or not hosts or not all(isinstance(h, str) for h in hosts):
        raise AnsibleActionFail(f"{action}: hosts must be a non-empty list of inventory host names")
    return hosts
