# Copyright: (c) 2025, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Parse ``mlxreg -d <dev> --reg_name <REG> --get`` output (pure function, stdlib only).

Format (a public ``mlxreg`` output, see docs/hardware-facts.md "Sources"; register ROCE_ACCL)::

    Sending access register...
    Field Name                                     | Data
    ============================================================
    roce_adp_retrans_field_select                  | 0x00000001
    ...
    adaptive_routing_forced_en                     | 0x00000001
    ============================================================

The register is runtime state (lost at reset): read it back after every ``--set``.
"""

from __future__ import annotations

import re

from ansible_collections.mlplatform.gpunode.plugins.module_utils.parsing import ParseError, text_lines, tool_messages

TOOL = "mlxreg"

_HEADER_RE = re.compile(r"^Field Name\s*\|\s*Data$")
_ROW_RE = re.compile(r"^(?P<field>[A-Za-z_][A-Za-z0-9_.\[\]]*)\s*\|\s*(?P<data>0x[0-9a-fA-F]+)$")
_RULE_RE = re.compile(r"^=+$")


def parse_get(text):
    """``--get`` output -> ``{"fields": {name: int}, "raw": {name: "0x00000001"}, "errors": [...]}``.

    Field order is kept. A tool failure (``-E-`` lines and no table) comes back in ``errors``
    with empty fields; anything else without the ``Field Name | Data`` table, a row that is not
    ``<field> | 0x<hex>`` or a repeated field raises ParseError.
    """
    lines = text_lines(text, TOOL)
    errors = tool_messages(lines, "-E-")
    fields = {}
    raw = {}
    in_table = False
    seen_header = False
    for lineno, line in enumerate(lines, 1):
        stripped = line.strip()
        if not stripped or _RULE_RE.match(stripped):
            continue
        if _HEADER_RE.match(stripped):
            in_table = seen_header = True
            continue
        if not in_table:
            if stripped.startswith("Sending access register") or stripped[:3] in ("-E-", "-W-", "-I-"):
                continue
            raise ParseError(TOOL, "'Sending access register...' then a 'Field Name | Data' table", line, lineno)
        match = _ROW_RE.match(stripped)
        if not match:
            raise ParseError(TOOL, "a register row '<field> | 0x<hex>'", line, lineno)
        name = match.group("field")
        if name in fields:
            raise ParseError(TOOL, f"each field once, {name} repeats", line, lineno)
        raw[name] = match.group("data")
        fields[name] = int(match.group("data"), 16)
    if not seen_header and not errors:
        raise ParseError(TOOL, "a 'Field Name | Data' table or an -E- message")
    if seen_header and not fields:
        raise ParseError(TOOL, "at least one '<field> | 0x<hex>' row under 'Field Name | Data'")
    return {"fields": fields, "raw": raw, "errors": errors}


ROCE_ACCL = "ROCE_ACCL"
_FIELD_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
# The fields of the ROCE_ACCL register a user may declare (docs/hardware-facts.md "Adaptive routing"; the
# ``*_field_select`` bits are the register's own).
ROCE_ACCL_FIELDS = ("adaptive_routing_forced_en", "roce_adp_retrans_en", "roce_tx_window_en", "roce_slow_restart_en",
                    "roce_slow_restart_idle_en", "min_ack_timeout_limit_disabled", "selective_repeat_forced_en",
                    "dc_half_handshake_en", "ack_dscp_force", "ack_dscp")


def get_argv(binary, device, register=ROCE_ACCL):
    """``mlxreg -d <dev> --reg_name <REG> --get`` (docs/hardware-facts.md "Adaptive routing")."""
    return [binary, "-d", device, "--reg_name", register, "--get"]


def set_argv(binary, device, values, register=ROCE_ACCL):
    """``mlxreg -d <dev> --reg_name <REG> --set f1=0x1,f2=0x0 --yes`` (fields sorted, hex values)."""
    fields = ",".join(f"{name}={values[name]:#x}" for name in sorted(values))
    return [binary, "-d", device, "--reg_name", register, "--set", fields, "--yes"]


def field_value(value):
    """A register field value -> int: ``1``, ``True``, ``"0x1"``, ``"1"``, ``"true"``. ValueError otherwise."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"a non-negative number, got {value}")
        return value
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("true", "yes", "on"):
            return 1
        if text in ("false", "no", "off"):
            return 0
        if re.fullmatch(r"0x[0-9a-f]+", text):
            return int(text, 16)
        if text.isdigit():
            return int(text)
    raise ValueError(f"a number, 0x-hex or boolean, got {value!r}")


def field_range(name):
    """The values a ROCE_ACCL field holds: the ``*_en``/``*_disabled``/``*_force`` flags are one bit,
    ``ack_dscp`` a DSCP (6 bits); any other field is not bounded here."""
    if name == "ack_dscp":
        return 0, 63
    if name.endswith(("_en", "_disabled", "_force")):
        return 0, 1
    return 0, 2 ** 32 - 1


def plan_fields(desired, read):
    """Compare wished register fields with the ``--get`` read-back.

    ``desired``: ``[{"device", "fields": {field: value}}]``; ``read``: device -> ``{field: int}``.
    Returns ``{"writes": {device: {field: int}}, "changes": {device: {field: {"before", "after"}}}}``.
    Raises ValueError listing every problem (duplicate device, unknown field, ``*_field_select``
    written directly, bad value) so nothing is written when any wish is wrong.
    """
    errors, writes, changes, seen = [], {}, {}, set()
    for entry in desired:
        device = entry["device"]
        if device in seen:
            errors.append(f"{device}: listed twice in devices")
            continue
        seen.add(device)
        fields = read.get(device)
        if fields is None:
            errors.append(f"{device}: no register read for this device")
            continue
        for name, value in (entry.get("fields") or {}).items():
            if not isinstance(name, str) or not _FIELD_NAME_RE.match(name) or name not in fields:
                errors.append(f"{device}: the ROCE_ACCL register has no field {name!r} "
                              f"(fields: {', '.join(f for f in fields if not f.endswith('_field_select'))})")
                continue
            if name.endswith("_field_select"):
                errors.append(f"{device}: {name} is set by mlxreg itself; name the field, not its select bit")
                continue
            try:
                wanted = field_value(value)
            except ValueError as exc:
                errors.append(f"{device}: {name}: expected {exc}")
                continue
            low, high = field_range(name)
            if not low <= wanted <= high:
                errors.append(f"{device}: {name}: {value!r} is out of range {low}..{high}"
                              + (" (a one-bit flag)" if high == 1 else ""))
                continue
            if fields[name] != wanted:
                writes.setdefault(device, {})[name] = wanted
                changes.setdefault(device, {})[name] = {"before": fields[name], "after": wanted}
    if errors:
        raise ValueError("; ".join(errors))
    return {"writes": writes, "changes": changes}
