"""Simulated ``mlxconfig`` / ``mstconfig``: query, set and reset the NV config of a NIC card.

Formats (../shared/real-outputs): ``mlxconfig-q-cx7-sriov-device-plugin-601.txt`` (``q``, wide
MFT layout), ``mstconfig-q-bf3-b3220-edcdavid-ptp-tools.txt`` (mstflint's narrower layout),
``mlxconfig-e-q-cx6lx-sriov-network-operator-968.txt`` (``-e q``: Default / Current / Next Boot)
and ``mlxconfig-set-cx7-sigitp-aws.txt`` (``set``: Next Boot / New, the `` Apply new Configuration?
(y/n) [n] : `` prompt, ``Applying... Done!`` and the reboot line, printed even when nothing changes).

Behaviour: values are stored per card in hw.json (``next_boot``); ``set`` never touches
``current`` (a reboot promotes). ``-E- Unknown Parameter: X`` is the real message for a key the
tool does not know (seen in public MFT notes); the bad-value and rejected-device messages are
inferred wording. Errors exit 1 and change nothing.
"""

from __future__ import annotations

import sys

from . import nvconfig
from .state import HostState

USAGE = ("Usage: {tool} [-d <device>] [-y] [-e] <q[uery] [PARAM ...] | s[et] PARAM=VALUE ... | r[eset]>\n")
WIDE = {"label": 20, "value": 20, "col": 57}
NARROW = {"label": 16, "value": 16, "col": 53}
STAR_NOTE = "The '*' shows parameters with next value different from default/current value."
PROMPT = " Apply new Configuration? (y/n) [n] : "


class ToolError(Exception):
    pass


def _parse_args(argv: list[str]):
    opts = {"device": None, "yes": False, "verbose": False}
    rest = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("-d", "--dev"):
            if i + 1 >= len(argv):
                raise ToolError("-E- Missing device after -d")
            opts["device"] = argv[i + 1]
            i += 2
            continue
        if arg in ("-y", "--yes"):
            opts["yes"] = True
        elif arg in ("-e", "--enable_verbosity"):
            opts["verbose"] = True
        elif arg.startswith("-") and not rest:
            raise ToolError(f"-E- Unknown flag: {arg}")
        else:
            rest.append(arg)
        i += 1
    if not rest:
        raise ToolError("-E- No command found. For more information please read the help message:")
    commands = {"q": "query", "query": "query", "s": "set", "set": "set", "r": "reset", "reset": "reset"}
    cmd = commands.get(rest[0].lower())
    if cmd is None:
        raise ToolError(f"-E- Unknown command: {rest[0]}")
    return opts, cmd, rest[1:]


def _visible(card: dict, name: str, param: nvconfig.Param, pending: dict | None = None) -> bool:
    if not param.hidden:
        return True
    adv = [card["next_boot"].get("ADVANCED_PCI_SETTINGS", 0), card["current"].get("ADVANCED_PCI_SETTINGS", 0)]
    if pending and "ADVANCED_PCI_SETTINGS" in pending:
        adv.append(pending["ADVANCED_PCI_SETTINGS"])
    return any(adv)


def _header(out: list[str], index: int, dev: str, card: dict, rec: dict, w: dict) -> None:
    dtype, name, desc = nvconfig.board_header(card["model"], card["ports"], card.get("psid", rec["board_id"]))
    out += ["", f"Device #{index}:", "-" * len(f"Device #{index}:"), ""]
    for label, value in (("Device type:", dtype), ("Name:", name), ("Description:", desc), ("Device:", dev)):
        out.append(label.ljust(w["label"]) + value.ljust(w["value"]))
    out.append("")


def _row(name: str, values: list[str], w: dict, star: bool = False) -> str:
    lead = "*       " if star else "        "
    return lead + name.ljust(44) + " ".join(v.ljust(w["value"]) for v in values)


def _resolve(state: HostState, dev: str) -> tuple[dict, dict]:
    rec = state.resolve_nic(dev)
    if rec is None:
        raise ToolError(f"-E- Failed to open device: {dev}. No such file or directory")
    if state.has_fault("mlxconfig_reject", rec["address"]):
        raise ToolError(f"-E- Failed to query device: {dev}. Operation not supported by the device "
                        "(configuration locked)")
    return rec, state.card_state(rec["slot"])


def _query(state: HostState, targets: list[str], opts: dict, w: dict, only: list[str]) -> list[str]:
    out: list[str] = []
    for index, dev in enumerate(targets, 1):
        rec, card = _resolve(state, dev)
        _header(out, index, dev, card, rec, w)
        titles = (["Default", "Current", "Next Boot"] if opts["verbose"] else ["Next Boot"])
        title = "Default".ljust(20) + "Current".ljust(16) + "Next Boot" if opts["verbose"] else "Next Boot"
        out.append("Configurations:".ljust(w["col"]) + title)
        params = nvconfig.card_params(card["model"], card["ports"])
        known = {n for n, _ in params}
        for name in only:
            if name.upper() not in known:
                raise ToolError(f"-E- Unknown Parameter: {name}")
        any_star = False
        for name, param in params:
            if only and name not in {o.upper() for o in only}:
                continue
            if not _visible(card, name, param):
                continue
            cols = {"Default": card["default"].get(name), "Current": card["current"].get(name),
                    "Next Boot": card["next_boot"].get(name)}
            values = [param.render(cols[t]) for t in titles]
            star = opts["verbose"] and param.kind != "array" and (
                cols["Next Boot"] != cols["Default"] or cols["Next Boot"] != cols["Current"])
            any_star = any_star or star
            out.append(_row(name, values, w, star))
        if opts["verbose"] and any_star:
            out += ["", STAR_NOTE]
    return out


def _parse_assignments(card: dict, items: list[str]) -> dict[str, int]:
    params = dict(nvconfig.card_params(card["model"], card["ports"]))
    wanted: dict[str, int] = {}
    raw: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ToolError(f"-E- Failed to parse configuration: {item}: expected PARAM=VALUE")
        raw[key.upper()] = value
    pending_adv = None
    if "ADVANCED_PCI_SETTINGS" in raw and "ADVANCED_PCI_SETTINGS" in params:
        pending_adv = {"ADVANCED_PCI_SETTINGS": params["ADVANCED_PCI_SETTINGS"].parse(raw["ADVANCED_PCI_SETTINGS"])}
    for key, value in raw.items():
        param = params.get(key)
        if param is None or param.kind == "array" or not _visible(card, key, param, pending_adv):
            raise ToolError(f"-E- Unknown Parameter: {key}")
        number = param.parse(value)
        if number is None:
            raise ToolError(f"-E- Bad value '{value}' for parameter {key}")
        wanted[key] = number
    return wanted


def _confirm(out_lines: list[str], opts: dict, question: str) -> bool:
    sys.stdout.write("\n".join(out_lines) + "\n")
    out_lines.clear()
    if opts["yes"]:
        sys.stdout.write(question + "y\n")
        return True
    sys.stdout.write(question)
    sys.stdout.flush()
    answer = sys.stdin.readline() if sys.stdin is not None else ""
    if not sys.stdin.isatty():
        sys.stdout.write(answer.strip() + "\n")
    return answer.strip().lower() in ("y", "yes")


def run(argv: list[str], tool: str = "mlxconfig") -> int:
    w = NARROW if tool == "mstconfig" else WIDE
    try:
        opts, cmd, args = _parse_args(argv)
        state = HostState()
        if cmd == "query":
            targets = [opts["device"]] if opts["device"] else [
                state.mst_name(r) if tool == "mlxconfig" else r["address"] for r in state.nics()]
            sys.stdout.write("\n".join(_query(state, targets, opts, w, args)) + "\n")
            return 0
        if not opts["device"]:
            raise ToolError("-E- Please specify the device with -d")
        rec, card = _resolve(state, opts["device"])
        if cmd == "set":
            if not args:
                raise ToolError("-E- No parameters to set")
            wanted = _parse_assignments(card, args)
            params = dict(nvconfig.card_params(card["model"], card["ports"]))
            out: list[str] = []
            _header(out, 1, opts["device"], card, rec, w)
            out.append("Configurations:".ljust(w["col"]) + "Next Boot".ljust(16) + "New")
            for name, number in wanted.items():
                out.append(_row(name, [params[name].render(card["next_boot"][name]), params[name].render(number)], w))
            out.append("")
            if not _confirm(out, opts, PROMPT):
                sys.stdout.write("-E- Aborted by user.\n")
                return 1
            with state.locked():
                hw = state.hw()
                hw["cards"][rec["slot"]]["next_boot"].update(wanted)
                state.write_json("hw.json", hw)
            sys.stdout.write("Applying... Done!\n-I- Please reboot machine to load new configurations.\n")
            return 0
        # reset
        out = [""]
        if not _confirm(out, opts, f"Reset configuration for device {opts['device']}? (y/n) [n] : "):
            sys.stdout.write("-E- Aborted by user.\n")
            return 1
        with state.locked():
            hw = state.hw()
            entry = hw["cards"][rec["slot"]]
            entry["next_boot"] = dict(entry["default"])
            state.write_json("hw.json", hw)
        sys.stdout.write("Applying... Done!\n-I- Please reboot machine to load new configurations.\n")
        return 0
    except ToolError as exc:
        sys.stdout.write(f"{exc}\n")
        if "No command found" in str(exc):
            sys.stdout.write(USAGE.format(tool=tool))
        return 1
