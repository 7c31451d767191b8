# Copyright: (c) 2025, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Parse ``mlxreg -d <dev> --reg_name <REG> --get`` output (pure function, stdlib only).

Format (real-outputs ``mlxreg-roce-accl-get-adaptive-routing.txt``, register ROCE_ACCL)::

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
