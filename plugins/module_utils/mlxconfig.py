# Copyright: (c) 2025, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Parse ``mlxconfig``/``mstconfig`` output and compare NV config values (pure functions, stdlib only).

Formats (public outputs listed in docs/hardware-facts.md, "Sources"):

- ``mlxconfig -d <dev> q``: ``mlxconfig-q-cx7-sriov-device-plugin-601.txt`` (ConnectX-7) and
  ``mstconfig-q-bf3-b3220-edcdavid-ptp-tools.txt`` (BlueField-3, same format from mstflint's
  ``mstconfig``, narrower header padding). A ``Device #N:`` block with the header (``Device type``,
  ``Name``, ``Description``, ``Device``) and a ``Configurations:`` table with one ``Next Boot`` column.
- ``mlxconfig -e -d <dev> q``: ``mlxconfig-e-q-cx6lx-sriov-network-operator-968.txt``. Columns
  ``Default  Current  Next Boot``; a row starting with ``*`` differs from the default. Long enum
  values overflow their column, so rows are split on whitespace, never on column offsets.
- ``mlxconfig -d <dev> set K=V``: ``mlxconfig-set-cx7-sigitp-aws.txt``. Columns ``Next Boot  New``,
  then `` Apply new Configuration? (y/n) [n] : `` (answered ``y`` by the user or by ``-y``),
  ``Applying... Done!`` and ``-I- Please reboot machine to load new configurations.``

A value is ``{"raw": "ETH(2)", "name": "ETH", "number": 2, "array": None}``; plain numbers have
``name`` None, ``Array[0..15]`` has ``array`` ``(0, 15)`` and neither name nor number.
"""

from __future__ import annotations

import re

from ansible_collections.mlplatform.gpunode.plugins.module_utils.parsing import ParseError, text_lines, tool_messages

TOOL = "mlxconfig"

COLUMN_KEYS = {"default": "default", "current": "current", "next boot": "next_boot", "new": "new"}
_COLUMN_RE = re.compile(r"Next Boot|Default|Current|New", re.IGNORECASE)
_DEVICE_RE = re.compile(r"^Device #(\d+):$")
_HEADER_RE = re.compile(r"^(Device type|Name|Description|Device|PCI device):\s*(.*)$")
_PARAM_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*(?:\[\d+(?:\.\.\d+)?\])?$")
_ENUM_RE = re.compile(r"^(?P<name>[^\s()]+)\((?P<number>-?\d+)\)$")
_ARRAY_RE = re.compile(r"^Array\[(\d+)\.\.(\d+)\]$")
_INT_RE = re.compile(r"^-?\d+$")
_HEX_RE = re.compile(r"^0x[0-9a-fA-F]+$")
_PROMPT_RE = re.compile(r"^Apply new Configuration\?\s*\(y/n\)\s*\[(?P<default>[yn])\]\s*:\s*(?P<answer>\S*)\s*$")
_APPLYING_RE = re.compile(r"^Applying\.\.\.\s*(?P<result>.*?)\s*$")
_REBOOT_RE = re.compile(r"reboot machine to load new configurations", re.IGNORECASE)
_STAR_NOTE_RE = re.compile(r"^The '\*' shows parameters")
_HEADER_KEYS = {"Device type": "device_type", "Name": "name", "Description": "description",
                "Device": "device", "PCI device": "device"}

# Enum names whose numbers hold for every parameter that uses them, so a desired value given by
# name compares with one given by number. Booleans: every True(1)/False(0) row in the samples.
# LINK_TYPE: IB(1)/ETH(2) per docs/hardware-facts.md, VPI(3) from the mlxconfig documentation.
BOOLEAN_NUMBERS = {"FALSE": 0, "TRUE": 1}
ENUM_NUMBERS = {"LINK_TYPE": {"IB": 1, "ETH": 2, "VPI": 3}}


def parse_value(raw):
    """``"True(1)"`` -> name True / number 1; ``"48"`` -> number 48; ``"Array[0..7]"`` -> array (0, 7).

    Any other single token (a name printed without a number) keeps ``name`` only. Whitespace inside
    a value is not a value mlxconfig prints: ParseError.
    """
    if not isinstance(raw, str) or not raw.strip() or len(raw.split()) != 1:
        raise ParseError(TOOL, f"one value token such as 'True(1)', '48' or 'Array[0..7]', got {raw!r}")
    raw = raw.strip()
    value = {"raw": raw, "name": None, "number": None, "array": None}
    match = _ENUM_RE.match(raw)
    if match:
        value["name"] = match.group("name")
        value["number"] = int(match.group("number"))
        return value
    match = _ARRAY_RE.match(raw)
    if match:
        value["array"] = (int(match.group(1)), int(match.group(2)))
        return value
    if _INT_RE.match(raw):
        value["number"] = int(raw)
    elif _HEX_RE.match(raw):
        value["number"] = int(raw, 16)
    else:
        value["name"] = raw
    return value


def column_keys(header_rest):
    """``"Default   Current   Next Boot"`` -> ``["default", "current", "next_boot"]``."""
    titles = _COLUMN_RE.findall(header_rest)
    leftover = _COLUMN_RE.sub("", header_rest).strip()
    if not titles or leftover:
        raise ParseError(TOOL, "'Configurations:' followed by column titles (Default, Current, Next Boot, New)",
                         "Configurations: " + header_rest)
    return [COLUMN_KEYS[title.lower()] for title in titles]


def parse_row(line, columns, lineno=None):
    """One table row -> ``(param, {column: value, ..., "changed": bool})``.

    ``"*  SRIOV_EN  False(0)  True(1)  True(1)"`` with three columns -> changed True. Also reads
    the lone rows that ``mlxconfig q | grep NUM_OF_VFS`` prints (the public output from
    https://github.com/sigitp-git/mellanox-nic-firmware-and-vf-creation).
    """
    tokens = line.split()
    changed = False
    if tokens and tokens[0] == "*":
        changed = True
        tokens = tokens[1:]
    elif tokens and tokens[0].startswith("*"):
        changed = True
        tokens[0] = tokens[0][1:]
    expected = f"a row '<PARAM> {' '.join('<' + c + '>' for c in columns)}'"
    if len(tokens) != len(columns) + 1 or not _PARAM_RE.match(tokens[0]):
        raise ParseError(TOOL, expected, line, lineno)
    row = {"changed": changed}
    for index, column in enumerate(columns):
        row[column] = parse_value(tokens[index + 1])
    return tokens[0], row


def _parse_devices(lines):
    """Device blocks of a ``q``/``-e q``/``set`` output. Returns ``(devices, leftover lines)``."""
    devices = []
    leftover = []
    current = None
    columns = None
    for lineno, line in enumerate(lines, 1):
        stripped = line.strip()
        match = _DEVICE_RE.match(stripped)
        if match:
            current = {"index": int(match.group(1)), "device_type": None, "name": None, "description": None,
                       "device": None, "columns": None, "params": {}}
            devices.append(current)
            columns = None
            continue
        if columns is not None and (not stripped or _PROMPT_RE.match(stripped) or _APPLYING_RE.match(stripped)):
            # A blank line (or the set prompt) ends the table.
            columns = None
            current = None
        if current is None or not stripped or set(stripped) == {"-"}:
            if stripped and current is None:
                leftover.append((lineno, line))
            continue
        if columns is None:
            match = _HEADER_RE.match(stripped)
            if match:
                current[_HEADER_KEYS[match.group(1)]] = match.group(2).strip()
                continue
            if stripped.startswith("Configurations:"):
                columns = column_keys(stripped[len("Configurations:"):])
                current["columns"] = columns
                continue
            leftover.append((lineno, line))
            continue
        if line[:1].isspace() or stripped.startswith("*"):
            param, row = parse_row(line, columns, lineno)
            if param in current["params"]:
                raise ParseError(TOOL, f"each parameter once per device, {param} repeats", line, lineno)
            current["params"][param] = row
            continue
        # The table ends at the first line that is not an indented row (prompt, note, message).
        columns = None
        current = None
        leftover.append((lineno, line))
    for device in devices:
        if device["columns"] is None:
            raise ParseError(TOOL, f"a 'Configurations:' table for Device #{device['index']}")
    return devices, leftover


def _check_leftover(leftover, allowed):
    for lineno, line in leftover:
        stripped = line.strip()
        if any(pattern.search(stripped) for pattern in allowed) or stripped[:3] in ("-E-", "-W-", "-I-"):
            continue
        raise ParseError(TOOL, "device blocks, table rows or -E-/-W-/-I- messages", line, lineno)


def parse_query(text):
    """Parse ``mlxconfig [-e] -d <dev> q`` (also ``mstconfig``; several devices when ``-d`` is omitted).

    Returns ``{"devices": [device, ...], "errors": [...], "warnings": [...]}``. A device is
    ``{"index", "device_type", "name", "description", "device", "columns", "params"}`` where
    ``params`` maps a parameter to ``{"next_boot": value, ["default": value, "current": value,]
    "changed": bool}`` (see ``parse_value``). A tool failure (``-E-`` lines, no device block) is
    returned in ``errors``; text with neither raises ParseError.
    """
    lines = text_lines(text, TOOL)
    devices, leftover = _parse_devices(lines)
    _check_leftover(leftover, [_STAR_NOTE_RE])
    errors = tool_messages(lines, "-E-")
    if not devices and not errors:
        raise ParseError(TOOL, "a 'Device #1:' block (query output) or an -E- message")
    for device in devices:
        if "next_boot" not in device["columns"]:
            raise ParseError(TOOL, f"a 'Next Boot' column in the query table of Device #{device['index']}")
    return {"devices": devices, "errors": errors, "warnings": tool_messages(lines, "-W-")}


def parse_set(text):
    """Parse ``mlxconfig -d <dev> [-y] set K=V ...`` output.

    Returns ``{"devices": [...], "prompted": bool, "answer": "y"|"n"|"" |None, "applied": bool,
    "apply_result": "Done!"|None, "reboot_required": bool, "errors": [...], "warnings": [...]}``;
    devices as in ``parse_query`` with ``next_boot`` and ``new`` per row. ``applied`` is true only
    after ``Applying... Done!``. mlxconfig prompts and asks for a reboot even when no value changes:
    compare ``next_boot`` with ``new`` to know whether anything did.
    """
    lines = text_lines(text, TOOL)
    devices, leftover = _parse_devices(lines)
    result = {"devices": devices, "prompted": False, "answer": None, "applied": False, "apply_result": None,
              "reboot_required": False, "errors": tool_messages(lines, "-E-"),
              "warnings": tool_messages(lines, "-W-")}
    for lineno, line in leftover:
        stripped = line.strip()
        prompt = _PROMPT_RE.match(stripped)
        applying = _APPLYING_RE.match(stripped)
        if prompt:
            result["prompted"] = True
            result["answer"] = prompt.group("answer").lower() or prompt.group("default")
        elif applying:
            result["apply_result"] = applying.group("result") or None
            result["applied"] = applying.group("result").lower().startswith("done")
        elif _REBOOT_RE.search(stripped):
            result["reboot_required"] = True
        elif stripped[:3] not in ("-E-", "-W-", "-I-"):
            raise ParseError(TOOL, "set output: table, 'Apply new Configuration?' prompt, 'Applying...' or "
                             "-E-/-W-/-I- messages", line, lineno)
    if not devices and not result["errors"]:
        raise ParseError(TOOL, "a 'Device #1:' block (set output) or an -E- message")
    for device in devices:
        if device["columns"] != ["next_boot", "new"]:
            raise ParseError(TOOL, f"'Next Boot' and 'New' columns in the set table of Device #{device['index']}")
    if result["applied"] and not result["reboot_required"]:
        # mlxconfig always prints the reboot line after applying; its absence means a cut capture.
        raise ParseError(TOOL, "'-I- Please reboot machine to load new configurations.' after 'Applying... Done!'")
    return result


def _enum_table(param):
    base = re.sub(r"_P\d+$", "", param.upper())
    return ENUM_NUMBERS.get(base, {})


def _split(param, value):
    """Any accepted spelling -> ``(name or None, number or None)`` with catalogue numbers filled in."""
    if isinstance(value, dict) and "raw" in value:
        name, number = value.get("name"), value.get("number")
        if value.get("array") is not None:
            return value["raw"], None
    elif isinstance(value, bool):
        name, number = None, int(value)
    elif isinstance(value, int):
        name, number = None, value
    elif isinstance(value, str):
        parsed = parse_value(value)
        if parsed["array"] is not None:
            return parsed["raw"], None
        name, number = parsed["name"], parsed["number"]
    else:
        raise ParseError(TOOL, f"a value for {param} as text, number, bool or parsed value, got {value!r}")
    if name is not None:
        upper = name.upper()
        known = BOOLEAN_NUMBERS.get(upper, _enum_table(param).get(upper))
        if number is None:
            number = known
        name = upper
    return name, number


def normalize_value(param, value):
    """A comparable form of one value of ``param``: the number when known, else the upper-case name.

    ``normalize_value("LINK_TYPE_P1", x)`` is 2 for ``"ETH"``, ``"ETH(2)"``, ``"2"`` and ``2``;
    ``normalize_value("SRIOV_EN", x)`` is 1 for ``True``, ``"true"``, ``"True(1)"`` and ``"1"``.
    A name whose number is not in the catalogue stays a name (``"EMBEDDED_CPU"``): compare it
    with ``values_equal`` against the value mlxconfig printed, which carries both.
    """
    name, number = _split(param, value)
    return number if number is not None else name


def values_equal(param, left, right):
    """True when two spellings mean the same value: numbers compare when both sides have one,
    otherwise names (case-insensitive). ``values_equal("X", "EMBEDDED_CPU", "EMBEDDED_CPU(1)")``
    and ``values_equal("X", 1, "EMBEDDED_CPU(1)")`` are both true."""
    left_name, left_number = _split(param, left)
    right_name, right_number = _split(param, right)
    if left_number is not None and right_number is not None:
        return left_number == right_number
    if left_name is not None and right_name is not None:
        return left_name == right_name
    return False
