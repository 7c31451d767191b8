# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Ordered input checks on the controller: the checks action, and the checks the role_variables action runs after
its warning (documentation: plugins/modules/checks.py)."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail

_KEYS = frozenset(("that", "fail_when", "when", "msg"))


def _conditions(value, where):
    """A condition or a list of them (strings, or booleans as assert takes them), as a list."""
    if isinstance(value, (str, bool)):
        return [value]
    if isinstance(value, list) and value and all(isinstance(item, (str, bool)) for item in value):
        return list(value)
    raise AnsibleActionFail(f"checks: {where} must be a condition or a list of conditions, got {value!r}")


def parse_checks(checks):
    """The checks as ``[(when, that, fail_when, msg)]``, or AnsibleActionFail naming the first malformed entry.
    Nothing is evaluated here: the shape of every entry is judged before any condition is."""
    if not isinstance(checks, list) or not checks:
        raise AnsibleActionFail(f"checks: checks must be a non-empty list of checks, got {checks!r}")
    parsed = []
    for index, entry in enumerate(checks):
        where = f"checks[{index}]"
        if not isinstance(entry, dict):
            raise AnsibleActionFail(f"checks: {where} must be a mapping, got {entry!r}")
        unknown = sorted(set(entry) - _KEYS)
        if unknown:
            raise AnsibleActionFail(f"checks: {where} has unknown keys {unknown} (known: {sorted(_KEYS)})")
        if ("that" in entry) == ("fail_when" in entry):
            raise AnsibleActionFail(f"checks: {where} needs exactly one of that and fail_when")
        if not isinstance(entry.get("msg"), str):
            raise AnsibleActionFail(f"checks: {where}.msg must be the failure message (a string)")
        when = _conditions(entry["when"], f"{where}.when") if "when" in entry else []
        that = _conditions(entry["that"], f"{where}.that") if "that" in entry else []
        if "fail_when" in entry and not isinstance(entry["fail_when"], (str, bool)):
            raise AnsibleActionFail(f"checks: {where}.fail_when must be one condition (a string)")
        fail_when = entry.get("fail_when")
        parsed.append((when, that, fail_when, entry["msg"]))
    return parsed


def run_checks(templar, checks, result):
    """Evaluate ``checks`` (as ``parse_checks`` returns them) in order with ``templar``; update ``result`` with the
    first failure (``failed``, ``msg``, ``failed_check``, ``assertion``, ``checked``) or with ``msg`` and
    ``checked`` when every check holds. Returns ``result``."""

    def evaluate(conditional):
        return templar.evaluate_conditional(conditional=conditional)

    checked = 0
    for index, (when, that, fail_when, msg) in enumerate(checks):
        if not all(evaluate(condition) for condition in when):
            continue
        checked += 1
        # the first false `that` condition (the later ones not evaluated, as assert does), else fail_when
        failed = next((condition for condition in that if not evaluate(condition)), None)
        if failed is None and fail_when is not None and evaluate(fail_when):
            failed = fail_when
        if failed is not None:
            result.update(failed=True, msg=templar.template(msg), failed_check=index, assertion=failed,
                          checked=checked, changed=False)
            return result
    result.update(changed=False, msg="All checks passed", checked=checked)
    return result
