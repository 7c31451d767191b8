# Copyright: (c) 2025, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Desired NV config against what ``mlxconfig -d <dev> -e q`` shows (pure functions, stdlib only).

The modules ``mlxconfig`` and ``mlxconfig_info`` are thin: they run the tool through an injected
``run(argv) -> (rc, stdout, stderr)`` and hand text and dicts to the functions here.

Hardware rules (docs/hardware-facts.md "mlxconfig / NV config"; the public output from
https://github.com/sigitp-git/mellanox-nic-firmware-and-vf-creation):

- NV config belongs to the *card*: parameters without a ``_P<n>`` suffix (``SRIOV_EN``,
  ``NUM_OF_VFS``, ``ATS_ENABLED``) are shared by every function of a multi-port card (set on
  ``.0``, they show on ``.1``). They are set once per card, through its lowest listed function, and
  two functions of one card asking for different values is an error found before anything applies.
- Port parameters carry ``_P<n>``. A wish given without the suffix (``LINK_TYPE``) means the
  function's own port: function ``.0`` is port 1, ``.1`` is port 2, so ``LINK_TYPE_P2`` is only
  written where a second port exists.
- Some parameters are hidden until ``ADVANCED_PCI_SETTINGS`` is 1. A wish for a parameter the tool
  does not show is accepted only when the same wish sets ``ADVANCED_PCI_SETTINGS`` true (and the
  device has that parameter); it is then written in a second ``set`` after the first one enabled it.
- New values land in ``next_boot``; a reboot (or firmware reset) promotes them to ``current``.
  ``mlxconfig set`` prompts and prints its reboot line even when nothing changes, so "changed"
  and "reboot required" are decided from the query, never from the set output.
"""

from __future__ import annotations

import re

from ansible_collections.mlplatform.gpunode.plugins.module_utils.mlxconfig import (
    BOOLEAN_NUMBERS,
    ENUM_NUMBERS,
    normalize_value,
    parse_query,
    parse_set,
    parse_value,
    values_equal,
)
from ansible_collections.mlplatform.gpunode.plugins.module_utils.parsing import ParseError

ADVANCED = "ADVANCED_PCI_SETTINGS"
COLUMNS = ("default", "current", "next_boot")
_PORT_RE = re.compile(r"^(?P<base>.+)_P(?P<port>\d+)$")
_PCI_RE = re.compile(
    r"^(?:(?P<domain>[0-9a-fA-F]{4}):)?(?P<bus>[0-9a-fA-F]{2}):(?P<slot>[0-9a-fA-F]{2})\.(?P<function>[0-7])$")
_MST_RE = re.compile(r"^(?P<card>/dev/mst/mt\d+_pci(?:conf|_cr)\d+)(?:\.(?P<function>\d+))?$")
_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


# Ranges the firmware accepts for numeric parameters, checked against every device before any is
# written (card A must not be written when card B will be refused). NUM_OF_VFS: hardware-facts.md "accepted maximum
# seen 127"; the others are the field widths (DSCP 6 bits, 802.1p 3 bits, an 8-priority mask, a VLAN id).
NUMBER_RANGES = {"NUM_OF_VFS": (0, 127), "CNP_DSCP": (0, 63), "CNP_802P_PRIO": (0, 7), "ROCE_CC_PRIO_MASK": (0, 255),
                 "NUM_OF_PF": (1, 2), "BOOT_VLAN": (0, 4095)}


class NvConfigError(ValueError):
    """Invalid wishes; ``errors`` lists every problem found (device and parameter named in each)."""

    def __init__(self, errors):
        self.errors = list(errors)
        super().__init__("; ".join(self.errors))


def device_card(device):
    """``"0000:29:00.1"`` -> ``("0000:29:00", 1)``; ``"29:00.1"`` -> domain 0000 assumed;
    ``"/dev/mst/mt4129_pciconf0.1"`` -> ``("/dev/mst/mt4129_pciconf0", 1)``. Anything else is its
    own card, function 0 (mlxconfig accepts other spellings; we cannot tell their card)."""
    match = _PCI_RE.match(device)
    if match:
        domain = (match.group("domain") or "0000").lower()
        return f"{domain}:{match.group('bus').lower()}:{match.group('slot').lower()}", int(match.group("function"))
    match = _MST_RE.match(device)
    if match:
        return match.group("card"), int(match.group("function") or 0)
    return device, 0


def query_argv(binary, device):
    """The read: ``mlxconfig -d <dev> -e q`` (default, current and next-boot columns)."""
    return [binary, "-d", device, "-e", "q"]


def set_argv(binary, device, values):
    """``mlxconfig -d <dev> -y set K=V ...`` (``-y`` answers the prompt), keys sorted."""
    return [binary, "-d", device, "-y", "set"] + [f"{key}={values[key]}" for key in sorted(values)]


def _raw(row, column):
    value = row.get(column)
    return value["raw"] if value else None


def config_of(device):
    """A parsed device block -> ``{param: {default, current, next_boot}}`` with the printed text
    (``True(1)``); a column the tool did not print (one-column ``q``) is None."""
    return {param: {column: _raw(row, column) for column in COLUMNS} for param, row in device["params"].items()}


def block_of(device, config):
    """The inverse of ``config_of``: ``{param: {default, current, next_boot}}`` printed text -> a block whose
    rows hold the parsed values (``mlxconfig.parse_value``), what ``plan``, ``pending_params`` and
    ``unknown_current`` read. A column given as None (not printed) is left out of its row. The host read
    returns only the printed text (the parsed block is about three times its size), and the controller-side
    plan rebuilds the block from it. ParseError for text that is not one mlxconfig value."""
    return {"device": device, "params": {
        param: {column: parse_value(raw) for column, raw in (columns or {}).items() if raw is not None}
        for param, columns in (config or {}).items()}}


def read_device(text):
    """``-e q`` text for one device -> ``{"ok": True, "device": block}`` or ``{"ok": False,
    "reason": <the -E- messages>}`` when the tool refused the device. ParseError for other text."""
    result = parse_query(text)
    if result["errors"] or not result["devices"]:
        return {"ok": False, "reason": "; ".join(result["errors"]) or "no device block in the output"}
    if len(result["devices"]) != 1:
        raise ParseError("mlxconfig", f"one device block for one -d device, got {len(result['devices'])}")
    return {"ok": True, "device": result["devices"][0]}


def query_devices(run, binary, devices):
    """Query each device. Returns ``(blocks, rejected)``: device -> parsed block, and device ->
    reason for devices the tool refused (non-zero exit or ``-E-`` without a table, as a locked or
    unsupported function answers). ParseError propagates: unreadable output is never a skip."""
    blocks, rejected = {}, {}
    for device in devices:
        rc, out, err = run(query_argv(binary, device))
        if rc != 0:
            messages = [line.strip()[3:].strip() for line in f"{out}\n{err}".splitlines()
                        if line.strip().startswith("-E-")]
            rejected[device] = "; ".join(messages) or err.strip() or f"mlxconfig exited {rc}"
            continue
        read = read_device(out)
        if not read["ok"]:
            rejected[device] = read["reason"]
            continue
        blocks[device] = read["device"]
    return blocks, rejected


def pending_params(block):
    """Parameters whose next-boot value differs from the current one (a reboot is pending)."""
    pending = []
    for param, row in block["params"].items():
        current, next_boot = row.get("current"), row.get("next_boot")
        if current and next_boot and current["array"] is None and not values_equal(param, current, next_boot):
            pending.append(param)
    return sorted(pending)


def _truthy(param, value):
    try:
        return normalize_value(param, value) == 1
    except ParseError:
        return False


def _check_value(device, param, value, row):
    """Problems with a wished value, judged from the kind of value the device prints."""
    if isinstance(value, (list, dict)) or value is None:
        return f"{device}: {param}: expected a name or number, got {value!r}"
    try:
        name_number = normalize_value(param, value)
    except ParseError:
        return f"{device}: {param}: {value!r} is not a value mlxconfig accepts (a name such as ETH or a number)"
    if isinstance(value, str) and value.strip().startswith("Array["):
        return f"{device}: {param}: array parameters are not managed by this module"
    if row is None:
        return None
    printed = row["next_boot"]
    if printed["array"] is not None:
        return f"{device}: {param}: array parameters are not managed by this module"
    if printed["name"] is not None and printed["name"].upper() in BOOLEAN_NUMBERS and name_number not in (0, 1):
        return f"{device}: {param} is a boolean (prints {printed['raw']}), got {value!r}"
    if printed["name"] is None and printed["number"] is not None and not isinstance(name_number, int):
        return f"{device}: {param} is a number (prints {printed['raw']}), got {value!r}"
    base = _PORT_RE.sub(lambda m: m.group("base"), param.upper())
    limits = NUMBER_RANGES.get(base)
    if limits and printed["name"] is None and isinstance(name_number, int) \
            and not limits[0] <= name_number <= limits[1]:
        return f"{device}: {param}: {value!r} is out of range {limits[0]}..{limits[1]} (prints {printed['raw']})"
    allowed = ENUM_NUMBERS.get(base)
    if allowed and printed["name"] is not None and printed["name"].upper() in allowed \
            and name_number not in allowed.values():
        names = ", ".join(f"{k}({v})" for k, v in allowed.items())
        return f"{device}: {param}: {value!r} is not one of {names} (prints {printed['raw']})"
    return None


def set_value(param, value):
    """The text for ``K=V``: the number when known (``ETH`` -> 2, ``true`` -> 1), else the name."""
    normal = normalize_value(param, value)
    return str(normal)


def _enum_name(param, number, value):
    """The catalogue name of ``number`` for ``param`` (``LINK_TYPE_P1`` 2 -> ``ETH``), or a boolean
    name when the wish was spelled as a boolean."""
    if isinstance(value, bool) or (isinstance(value, str) and value.split("(")[0].upper() in BOOLEAN_NUMBERS):
        return {v: k.capitalize() for k, v in BOOLEAN_NUMBERS.items()}.get(number)
    base = _PORT_RE.sub(lambda m: m.group("base"), param.upper())
    return {v: k for k, v in ENUM_NUMBERS.get(base, {}).items()}.get(number)


def display_value(param, value, row=None):
    """A wished value as mlxconfig prints it when that can be known: ``8``, ``True(1)``, ``ETH(2)``
    (from the device's own rows first, then the catalogue); an unknown name prints as given."""
    normal = normalize_value(param, value)
    if row is not None:
        for column in ("next_boot", "current", "default"):
            candidate = row.get(column)
            if candidate and candidate["name"] is not None and candidate["number"] == normal:
                return candidate["raw"]
        if row["next_boot"]["name"] is None and isinstance(normal, int):
            return str(normal)
    if isinstance(normal, int):
        name = _enum_name(param, normal, value)
        return f"{name}({normal})" if name else str(normal)
    return normal


def resolve_param(key, block, port, advanced_wished):
    """The parameter a wish names on a device: ``(param, hidden)`` or raise ValueError (reason).

    ``key`` as given; else ``<key>_P<port>`` (the function's own port); else, when the same wish
    turns ADVANCED_PCI_SETTINGS on and the device has it, ``key`` as a hidden parameter."""
    params = block["params"]
    key = key.upper()
    if key in params:
        return key, False
    if not _PORT_RE.match(key) and f"{key}_P{port}" in params:
        return f"{key}_P{port}", False
    ports = sorted({int(m.group("port")) for m in map(_PORT_RE.match, params) if m})
    advanced_row = params.get(ADVANCED)
    if advanced_row is not None and not _truthy(ADVANCED, advanced_row["next_boot"]) and advanced_wished:
        if not _PORT_RE.match(key) and any(p.endswith("_P1") for p in params) and port > 1:
            return f"{key}_P{port}", True
        return key, True
    hint = ""
    if advanced_row is not None and not _truthy(ADVANCED, advanced_row["next_boot"]):
        hint = f"; if it is hidden until {ADVANCED}=1, add {ADVANCED}: true to the same settings"
    match = _PORT_RE.match(key)
    if match and ports and int(match.group("port")) not in ports:
        raise ValueError(f"{key} names port {match.group('port')} but the device has port(s) "
                         f"{', '.join(map(str, ports))}")
    raise ValueError(f"mlxconfig shows neither {key} nor {key}_P{port} on this device{hint}")


def plan(desired, blocks):
    """Decide what to write. ``desired``: ``[{"device", "settings": {PARAM: value}}]`` for devices
    that answered the query; ``blocks``: device -> parsed ``-e q`` block.

    Returns ``{"writes": [{"device", "card", "set": {param: "value"}, "hidden": {param: "value"}}],
    "changes": {device: {param: {"before", "after"}}}, "devices": {device: {"card", "port",
    "params": {param: {default, current, next_boot, desired, change}}}}}``. ``writes`` holds only
    parameters that differ from next boot. Raises NvConfigError listing every problem (unknown
    parameter, bad value, two functions of one card wanting different values, duplicate device)
    so that nothing is applied when anything is wrong.
    """
    errors = []
    seen = set()
    wishes = {}  # card -> param -> (device, value)
    order = []
    devices = {}
    for entry in desired:
        device = entry["device"]
        if device in seen:
            errors.append(f"{device}: listed twice in devices")
            continue
        seen.add(device)
        if device not in blocks:
            errors.append(f"{device}: no query result for this device")
            continue
        block = blocks[device]
        card, function = device_card(device)
        port = function + 1
        devices[device] = {"card": card, "port": port, "params": {}}
        settings = entry.get("settings") or {}
        advanced_wished = any(k.upper() == ADVANCED and _truthy(ADVANCED, v) for k, v in settings.items())
        for key, value in settings.items():
            if not isinstance(key, str) or not _NAME_RE.match(key):
                errors.append(f"{device}: {key!r} is not an mlxconfig parameter name")
                continue
            try:
                param, hidden = resolve_param(key, block, port, advanced_wished)
            except ValueError as exc:
                errors.append(f"{device}: {exc}")
                continue
            row = None if hidden else block["params"][param]
            problem = _check_value(device, param, value, row)
            if problem:
                errors.append(problem)
                continue
            previous = wishes.setdefault(card, {}).get(param)
            if previous is not None and not values_equal(param, previous[1], value):
                errors.append(f"card {card}: {previous[0]} wants {param}={previous[1]} but {device} wants "
                              f"{param}={value}; NV config is per card, both functions share it")
                continue
            if previous is None:
                wishes[card][param] = (device, value, hidden)
                order.append((card, param))
            devices[device]["params"][param] = {
                "default": _raw(row, "default") if row else None,
                "current": _raw(row, "current") if row else None,
                "next_boot": _raw(row, "next_boot") if row else None,
                "desired": display_value(param, value, row),
                "hidden": hidden,
            }
    if errors:
        raise NvConfigError(errors)
    writes = {}
    changes = {}
    for card, param in order:
        device, value, hidden = wishes[card][param]
        row = None if hidden else blocks[device]["params"][param]
        changed = hidden or not values_equal(param, value, row["next_boot"])
        for info in devices.values():
            if info["card"] == card and param in info["params"]:
                info["params"][param]["change"] = changed
        if not changed:
            continue
        write = writes.setdefault(device, {"device": device, "card": card, "set": {}, "hidden": {}})
        write["hidden" if hidden else "set"][param] = set_value(param, value)
        changes.setdefault(device, {})[param] = {
            "before": None if hidden else row["next_boot"]["raw"],
            "after": display_value(param, value, row),
        }
    return {"writes": [writes[d] for d in sorted(writes)], "changes": changes, "devices": devices}


def verify(planned, blocks):
    """After writing: ``[(device, param, wanted, next_boot)]`` for every wish the re-read next-boot
    value does not match (a wish that did not take). ``blocks`` are fresh ``-e q`` reads."""
    failures = []
    for device, info in sorted(planned["devices"].items()):
        block = blocks.get(device)
        for param, entry in sorted(info["params"].items()):
            row = block["params"].get(param) if block else None
            wanted = entry["desired"]
            if row is None:
                failures.append((device, param, wanted, None))
            elif not values_equal(param, wanted, row["next_boot"]):
                failures.append((device, param, wanted, row["next_boot"]["raw"]))
    return failures


def diff_table(planned, blocks_info=None):
    """The readable check/diff view: per device, every wished parameter with its default, current,
    next-boot and desired value; ``*`` marks a parameter that will be written."""
    lines = []
    for device, info in sorted(planned["devices"].items()):
        header = device
        if blocks_info and blocks_info.get(device):
            block = blocks_info[device]
            header += f" ({block.get('device_type') or '?'} {block.get('name') or ''})".rstrip()
        lines.append(f"{header}, card {info['card']}, port {info['port']}")
        rows = [("", "parameter", "default", "current", "next boot", "desired")]
        for param, entry in sorted(info["params"].items()):
            rows.append(("*" if entry.get("change") else " ", param,
                         entry["default"] if entry["default"] is not None else "-",
                         entry["current"] if entry["current"] is not None else "-",
                         entry["next_boot"] if entry["next_boot"] is not None else "(hidden)",
                         str(entry["desired"])))
        widths = [max(len(str(r[i])) for r in rows) for i in range(6)]
        for row in rows:
            lines.append("  " + "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines) + ("\n" if lines else "")


def diff_texts(planned):
    """``(before, after)``: ``device PARAM=value`` lines of next boot now and after the write."""
    before, after = [], []
    for device, info in sorted(planned["devices"].items()):
        for param, entry in sorted(info["params"].items()):
            before.append(f"{device} {param}={entry['next_boot'] if entry['next_boot'] is not None else '(hidden)'}")
            after.append(f"{device} {param}={entry['desired'] if entry.get('change') else entry['next_boot']}")
    return "\n".join(before) + "\n", "\n".join(after) + "\n"


def check_set_output(text):
    """``set`` output -> list of problems (``-E-`` messages, no ``Applying... Done!``)."""
    try:
        result = parse_set(text)
    except ParseError as exc:
        return [str(exc)]
    problems = list(result["errors"])
    if not result["applied"]:
        problems.append("mlxconfig did not print 'Applying... Done!'")
    return problems


def unknown_current(planned, blocks):
    """Per device the wished parameters whose current value the tool does not print (only a next-boot
    column): whether a reboot is needed is unknown, and unknown is treated as needed."""
    unknown = {}
    for device, info in planned["devices"].items():
        rows = (blocks.get(device) or {}).get("params", {})
        names = [param for param, entry in info["params"].items()
                 if not entry.get("hidden") and param in rows and rows[param].get("next_boot")
                 and not rows[param].get("current")]
        if names:
            unknown[device] = sorted(names)
    return unknown


def unknown_reason(unknown):
    """Why ``reboot_required`` is true although nothing is known to be pending (``unknown_current``), or None."""
    if not unknown:
        return None
    where = "; ".join(f"{device}: {', '.join(params)}" for device, params in sorted(unknown.items()))
    return (f"reboot_required is unknown, treated as true: mlxconfig prints no current value (only next boot) "
            f"for {where}, so whether the next-boot values are in effect cannot be told")
