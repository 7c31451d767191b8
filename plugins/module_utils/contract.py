# Copyright: (c) 2025, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet contract: settings hosts of one fabric must agree on (pure functions, stdlib only).

A role that owns such settings publishes ``<role>_contract``, a list of entries
``{scope: host|rail, rail: int|None, pci_address: str|None, netdev: str|None, setting: str, value: any}``
describing the state it read back. ``compare`` groups hosts by fabric and, per setting, takes the
majority value across every host (host scope) or every compute rail of every host (rail scope), and
lists each host/device that differs. A setting a host publishes for some of its rails but not for
another one is reported as absent there.
"""

from __future__ import annotations

import copy
import json
import re

from ansible_collections.mlplatform.gpunode.plugins.module_utils.mlxconfig import normalize_value, parse_value
from ansible_collections.mlplatform.gpunode.plugins.module_utils.parsing import ParseError

DEFAULT_SOURCES = ["discovery_contract", "ofed_contract", "gpu_driver_contract", "nic_firmware_contract",
                   "sriov_contract", "roce_qos_contract"]
SCOPES = ("host", "rail")
ABSENT = "(absent)"
_PORT_RE = re.compile(r"_P\d+$")
_FUNCTION_RE = re.compile(r"\.(\d)$")


def check_entry(entry):
    """Problems with one contract entry (empty list when it is well formed)."""
    if not isinstance(entry, dict):
        return [f"an entry must be a mapping, got {entry!r}"]
    problems = []
    if entry.get("scope") not in SCOPES:
        problems.append(f"scope must be host or rail, got {entry.get('scope')!r}")
    if not isinstance(entry.get("setting"), str) or not entry.get("setting"):
        problems.append(f"setting must be a non-empty string, got {entry.get('setting')!r}")
    if "value" not in entry:
        problems.append("value is missing")
    if entry.get("scope") == "rail" and (not isinstance(entry.get("rail"), int) or isinstance(entry.get("rail"), bool)):
        problems.append(f"a rail entry needs an integer rail, got {entry.get('rail')!r}")
    return problems


def _key(value):
    """Equal for values whose JSON spellings are equal: scalars with their type (1, 1.0, True and
    "1" differ, as in JSON), anything else by its JSON spelling."""
    if value is None:
        return (None, None)
    # By the base type: a value read from the inventory or a fact may be a subclass (a tagged int or str).
    for kind in (bool, int, float, str):
        if isinstance(value, kind):
            return (kind, kind(value))
    return (list, json.dumps(value, sort_keys=True, default=str))


def _observations(hosts, host_order):
    """(scope, setting) -> [observation]; an observation is a tuple ``(host, rail, pci_address,
    netdev, value, key)`` with ``key`` the value's comparison key (``_key``), or None for a host/rail
    that lacks a setting its source gives on other rails (ABSENT)."""
    observed = {}
    for host in host_order:
        by_source = {}
        for entry in hosts[host]["entries"]:
            by_source.setdefault(entry.get("source"), []).append(entry)
        for entries in by_source.values():
            rails = {}
            settings = {}
            for entry in entries:
                scope = entry["scope"]
                if scope == "rail":
                    rail = entry["rail"]
                    if rail not in rails:
                        rails[rail] = (entry.get("pci_address"), entry.get("netdev"))
                found = settings.get((scope, entry["setting"]))
                if found is None:
                    settings[(scope, entry["setting"])] = [entry]
                else:
                    found.append(entry)
            for (scope, setting), found in settings.items():
                bucket = observed.get((scope, setting))
                if bucket is None:
                    bucket = observed[(scope, setting)] = []
                is_rail = scope == "rail"
                for entry in found:
                    value = entry["value"]
                    bucket.append((host, entry.get("rail") if is_rail else None, entry.get("pci_address"),
                                   entry.get("netdev"), value, _key(value)))
                if is_rail and len(found) < len(rails):
                    seen = {entry["rail"] for entry in found}
                    for rail in sorted(set(rails) - seen):
                        bucket.append((host, rail, *rails[rail], None, None))
    return observed


def _declared_value(declared, setting):
    """The declared value of a contract setting, or (False, None): ``nv_config.LINK_TYPE_P1`` is declared as
    ``nv_config.LINK_TYPE`` (a parameter without _P<n> means the rail's own port)."""
    if setting in declared:
        return True, declared[setting]
    base = _PORT_RE.sub("", setting)
    if base != setting and setting.startswith("nv_config.") and base in declared:
        return True, declared[base]
    return False, None


def compare(hosts, host_order=None, declared=None):
    """Compare the contract of every host, per fabric.

    ``declared``: fabric -> ``{setting: value}`` (module_utils.intent.declared_contract). A declared setting's
    expected value is the declared one, not the majority: a fleet that agrees on a value nobody declared is drift
    too, and its rows say ``declared``.

    ``hosts``: host -> ``{"fabric": str, "entries": [entry, ...]}`` (each entry may carry a
    ``source``, the variable it came from). Returns ``{"ok", "fabrics": {fabric: {"hosts",
    "expected": {setting: value}, "ties": [setting], "drift": [row]}}, "drift": [row]}`` where a row
    is ``{fabric, host, scope, rail, pci_address, netdev, setting, expected, found, tie}``.

    The expected value of a setting is the one held by the most observations; a tie goes to the
    value of the first host in ``host_order`` (inventory order) that holds one of the tied values,
    and its rows say ``tie``.
    """
    host_order = [h for h in (host_order or sorted(hosts)) if h in hosts]
    rank = {h: i for i, h in enumerate(host_order)}
    fabrics = {}
    for host in host_order:
        fabrics.setdefault(str(hosts[host]["fabric"]), []).append(host)
    result = {"ok": True, "fabrics": {}, "drift": []}
    for fabric, members in sorted(fabrics.items()):
        summary = {"hosts": members, "expected": {}, "ties": [], "drift": []}
        observed = _observations({h: hosts[h] for h in members}, members)
        fabric_declared = (declared or {}).get(fabric) or {}
        for (scope, setting), observations in sorted(observed.items()):
            is_declared, declared_value = _declared_value(fabric_declared, setting)
            if is_declared:
                expected_key = _key(declared_value)
                summary["expected"][setting] = copy.deepcopy(declared_value)
                for host, rail, pci_address, netdev, value, k in observations:
                    if k != expected_key:
                        summary["drift"].append({
                            "fabric": fabric, "host": host, "scope": scope, "rail": rail,
                            "pci_address": pci_address, "netdev": netdev, "setting": setting,
                            "expected": declared_value, "found": ABSENT if k is None else value, "tie": False,
                            "declared": True})
                continue
            counts = {}
            value_of = {}
            for o in observations:
                k = o[5]
                if k is None:
                    continue
                n = counts.get(k)
                if n is None:
                    counts[k] = 1
                    value_of[k] = o[4]
                else:
                    counts[k] = n + 1
            if not counts:
                continue
            top = max(counts.values())
            tied = {k for k, n in counts.items() if n == top}
            tie = len(tied) > 1
            if tie:
                expected_key = next(o[5] for o in observations if o[5] in tied)
                summary["ties"].append(setting)
            else:
                (expected_key,) = tied
            expected = copy.deepcopy(value_of[expected_key])
            summary["expected"][setting] = expected
            for host, rail, pci_address, netdev, value, k in observations:
                if k != expected_key:
                    summary["drift"].append({
                        "fabric": fabric, "host": host, "scope": scope, "rail": rail, "pci_address": pci_address,
                        "netdev": netdev, "setting": setting, "expected": expected,
                        "found": ABSENT if k is None else value, "tie": tie})
        summary["drift"].sort(key=lambda r: (rank[r["host"]], r["setting"],
                                             -1 if r["rail"] is None else r["rail"]))
        result["fabrics"][fabric] = summary
        result["drift"].extend(summary["drift"])
    result["ok"] = not result["drift"]
    return result


def _cell(value):
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)


def format_table(result):
    """The drift as a fixed-width host x setting table, one block per fabric with drift."""
    lines = []
    for fabric, summary in sorted(result["fabrics"].items()):
        if not summary["drift"]:
            continue
        drifted = sorted({row["setting"] for row in summary["drift"]})
        lines.append(f"fabric {fabric}: {len(summary['hosts'])} hosts ({', '.join(summary['hosts'])}), "
                     f"{len(drifted)} setting(s) differ from the declaration or the majority")
        rows = [("host", "rail", "pci_address", "netdev", "setting", "expected", "found")]
        for row in summary["drift"]:
            rows.append((row["host"], _cell(row["rail"]), _cell(row["pci_address"]), _cell(row["netdev"]),
                         row["setting"], _cell(row["expected"]) + (" (tie)" if row["tie"] else "")
                         + (" (declared)" if row.get("declared") else ""),
                         _cell(row["found"])))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for row in rows:
            lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines)


def _resolve(param, device, params):
    if param in params:
        return param
    match = _FUNCTION_RE.search(device)
    port = int(match.group(1)) + 1 if match else 1
    if not _PORT_RE.search(param) and f"{param}_P{port}" in params:
        return f"{param}_P{port}"
    return None


def _comparable(param, raw):
    """``"True(1)"`` -> 1, ``"ETH(2)"`` -> 2, ``"48"`` -> 48; names without number stay names."""
    try:
        if parse_value(raw)["array"] is not None:
            return raw
        return normalize_value(param, raw)
    except ParseError:
        return raw


def firmware_entries(rails, config, fields=None, params=None, prefix="nv_config", not_in_effect=None):
    """Contract entries for the NV config and ROCE_ACCL state of the compute rails.

    ``rails``: ``gpunode_hw.rails`` (``rail``, ``pci_address``, ``netdev``); ``config``: device ->
    param -> ``{default, current, next_boot}`` as the mlxconfig modules return it; ``fields``:
    device -> ROCE_ACCL field -> int (``*_field_select`` bits are left out); ``params``: the
    parameters to include (a name without ``_P<n>`` means the rail's own port), all when None.
    The value is the *current* one (what runs), as a number when it has one. A rail missing from
    ``config`` (a skipped device) gets no NV config entry and shows as absent in the comparison.
    One host entry ``rail_count`` closes the list. ``not_in_effect`` (device -> param -> ``{note}``, the
    nic_firmware record of values set for next boot that did not take effect) adds that ``note`` to the entry.
    """
    entries = []
    for rail in sorted(rails or [], key=lambda r: r["rail"]):
        device = rail["pci_address"]
        base = {"scope": "rail", "rail": rail["rail"], "pci_address": device, "netdev": rail.get("netdev")}
        device_config = (config or {}).get(device) or {}
        wanted = params if params is not None else sorted(device_config)
        for param in wanted:
            name = _resolve(param.upper(), device, device_config)
            if name is None:
                continue
            values = device_config[name]
            raw = values.get("current") if values.get("current") is not None else values.get("next_boot")
            entry = {**base, "setting": f"{prefix}.{name}", "value": _comparable(name, raw)}
            stuck = ((not_in_effect or {}).get(device) or {}).get(name)
            if isinstance(stuck, dict) and stuck.get("note"):
                entry["note"] = stuck["note"]
            entries.append(entry)
        for field, value in sorted(((fields or {}).get(device) or {}).items()):
            if not field.endswith("_field_select"):
                entries.append({**base, "setting": f"roce_accl.{field}", "value": value})
    entries.append({"scope": "host", "rail": None, "pci_address": None, "netdev": None,
                    "setting": "rail_count", "value": len(rails or [])})
    return entries
