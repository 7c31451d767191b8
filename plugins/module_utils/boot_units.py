# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Managed files and systemd boot units: validate, read, plan (pure) and write (stdlib only).

Used by the ``boot_units`` module (one call per role writes a role's unit files, scripts and
configuration, then one ``systemctl daemon-reload`` and one ``systemctl enable``) and by the
``boot_units_plan`` filter, which compares the same desired files and units against the
``gpunode_host_state`` fact read once per run, so that the module runs only when something differs.

The state of a file is ``{"sha256": <hex>, "mode": "0644", "owner": "root", "group": "root"}``;
``None`` means the file is missing. The state of a unit is ``{"enabled": <UnitFileState>,
"active": <ActiveState>}`` as ``systemctl show`` prints them (systemctl(1), "show";
org.freedesktop.systemd1(5) for the property values).
"""

from __future__ import annotations

import contextlib
import grp
import hashlib
import os
import posixpath
import pwd
import re
import stat
import tempfile

_MODE_RE = re.compile(r"^[0-7]{4}$")
_UNIT_RE = re.compile(r"^[A-Za-z0-9:_.\\@-]+\.(service|socket|timer|target|path|mount|automount|slice)$")
_NAME_RE = re.compile(r"^[a-z_][a-z0-9_-]*[$]?$")
UNIT_STATES = ("started", "restarted")
# UnitFileState values that mean "starts at boot" or need no enabling (systemctl(1) is-enabled table).
ENABLED_STATES = frozenset({"enabled", "static", "generated", "alias"})
# Text shown in a diff only when the file is small UTF-8 text (a binary or huge file shows its digest).
DIFF_MAX_BYTES = 256 * 1024


class BootUnitsError(Exception):
    """A file or unit that cannot be read or written; the message names the path or the unit."""


def sha256_text(content):
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


def is_unit_path(path):
    """True for a unit file or drop-in under a ``systemd/system`` directory (needs a daemon-reload)."""
    parts = path.split("/")
    return any(parts[i] == "systemd" and parts[i + 1] == "system" for i in range(len(parts) - 2))


def unit_of_path(path):
    """The unit a unit file defines (``/etc/systemd/system/x.service`` -> ``x.service``), else None."""
    if not is_unit_path(path):
        return None
    parent, name = posixpath.split(path)
    if posixpath.basename(parent) == "system" and _UNIT_RE.match(name):
        return name
    return None


# -- validation (pure) -------------------------------------------------------------------------------


def validate(files, units):
    """Check every input before anything is read or written.

    :param files: list of ``{path, content, mode, owner, group}``.
    :param units: list of ``{name, enabled, state}``.
    :returns: ``(files, units, errors)``: normalized copies (mode as a 4-digit string) and a list
        of messages, each naming the option (``files[2].mode``) and the value.
    """
    errors = []
    out_files, out_units, seen = [], [], set()
    for i, f in enumerate(files or []):
        where = f"files[{i}]"
        path = f.get("path")
        if not isinstance(path, str) or not path.startswith("/"):
            errors.append(f"{where}.path: {path!r} is not an absolute path")
            continue
        if posixpath.normpath(path) != path or path.endswith("/"):
            errors.append(f"{where}.path: {path!r} is not a normalized path (no '..', '.', '//' or trailing '/')")
            continue
        where = f"{where} ({path})"
        if path in seen:
            errors.append(f"{where}: the path is listed twice")
            continue
        seen.add(path)
        content = f.get("content")
        if not isinstance(content, str):
            errors.append(f"{where}.content: must be a string (got {type(content).__name__})")
        mode = f.get("mode")
        if not isinstance(mode, str) or not _MODE_RE.match(mode):
            errors.append(f"{where}.mode: {mode!r} is not a quoted 4-digit octal mode such as '0644'")
        for key in ("owner", "group"):
            value = f.get(key) or "root"
            if not isinstance(value, str) or not _NAME_RE.match(value):
                errors.append(f"{where}.{key}: {value!r} is not a user or group name")
        out_files.append({"path": path, "content": content, "mode": mode,
                          "owner": f.get("owner") or "root", "group": f.get("group") or "root"})
    seen_units = set()
    for i, u in enumerate(units or []):
        name = u.get("name")
        where = f"units[{i}].name"
        if not isinstance(name, str) or not _UNIT_RE.match(name):
            errors.append(f"{where}: {name!r} is not a systemd unit name with its suffix (foo.service)")
            continue
        if name in seen_units:
            errors.append(f"{where}: {name} is listed twice")
            continue
        seen_units.add(name)
        enabled = u.get("enabled")
        if enabled is not None and not isinstance(enabled, bool):
            errors.append(f"units[{i}].enabled ({name}): {enabled!r} is not true, false or null")
        state = u.get("state")
        if state is not None and state not in UNIT_STATES:
            errors.append(f"units[{i}].state ({name}): {state!r} is not one of {', '.join(UNIT_STATES)} or null")
        out_units.append({"name": name, "enabled": enabled, "state": state})
    return out_files, out_units, errors


def check_units_known(units, files, unit_state):
    """Units must be written by this call or known to systemd; errors name ``units[i].name``.

    :param unit_state: ``{name: {"load": <LoadState>, ...}}`` as read on the host.
    """
    written = {unit_of_path(f["path"]) for f in files} - {None}
    errors = []
    for i, u in enumerate(units):
        if u["name"] in written:
            continue
        if (unit_state.get(u["name"]) or {}).get("load", "not-found") == "not-found":
            errors.append(
                f"units[{i}].name: {u['name']} is neither a unit file of this call (files[].path under "
                f"systemd/system) nor a unit systemd knows"
            )
    return errors


# -- plan (pure) -------------------------------------------------------------------------------------


def desired_state(f):
    return {"sha256": sha256_text(f["content"]), "mode": f["mode"], "owner": f["owner"], "group": f["group"]}


def file_reasons(desired, current):
    """Why a file must be written: [] when it already matches, else e.g. ``["content", "mode"]``."""
    if current is None:
        return ["missing"]
    return [key for key in ("content", "mode", "owner", "group")
            if current.get("sha256" if key == "content" else key) != desired["sha256" if key == "content" else key]]


def plan_files(files, current):
    """Per file: its desired state, current state and the reasons to write it (pure).

    :param current: ``{path: state-or-None}``.
    """
    plan = []
    for f in files:
        want = desired_state(f)
        now = current.get(f["path"])
        plan.append({"path": f["path"], "before": now, "after": want, "reasons": file_reasons(want, now)})
    return plan


def unit_actions(unit, state, files_changed):
    """What one unit needs: a subset of ``enable``, ``disable``, ``start``, ``restart`` (pure).

    ``state: restarted`` restarts the unit when a file of the same call changed and starts it
    when it is not active; ``started`` only starts it when it is not active.
    """
    state = state or {}
    actions = []
    enabled_now = state.get("enabled")
    if unit.get("enabled") is True and enabled_now not in ENABLED_STATES:
        actions.append("enable")
    elif unit.get("enabled") is False and enabled_now == "enabled":
        actions.append("disable")
    if unit.get("state") == "restarted" and files_changed:
        actions.append("restart")
    elif unit.get("state") in UNIT_STATES and state.get("active") != "active":
        actions.append("start")
    return actions


def plan_units(units, unit_state, files_changed):
    return {u["name"]: unit_actions(u, unit_state.get(u["name"]), files_changed) for u in units}


def host_plan(files, units, host_state):
    """The part of a role's boot units that differs from the host state read once per run (pure).

    :param files: desired files as the module takes them.
    :param units: desired units as the module takes them.
    :param host_state: the ``gpunode_host_state`` fact (``files``: path -> state, absent = missing;
        ``units``: name -> ``{"enabled", "active"}``), or None when it was not read: then every
        file and unit is pending and the module's own read decides.
    :returns: ``{"files": {path: [reasons]}, "units": {name: [actions]}, "pending": bool}``.
    """
    files, units, errors = validate(files, units)
    if errors:
        raise BootUnitsError("; ".join(errors))
    if not isinstance(host_state, dict) or not isinstance(host_state.get("files"), dict):
        out_files = {f["path"]: ["not read"] for f in files}
        out_units = {u["name"]: ["not read"] for u in units}
        return {"files": out_files, "units": out_units, "pending": bool(out_files or out_units)}
    known_files = host_state["files"]
    known_units = host_state.get("units") or {}
    out_files = {}
    for p in plan_files(files, {f["path"]: known_files.get(f["path"]) for f in files}):
        if p["reasons"]:
            out_files[p["path"]] = p["reasons"]
    out_units = {}
    for name, actions in plan_units(units, known_units, bool(out_files)).items():
        if actions:
            out_units[name] = actions
    return {"files": out_files, "units": out_units, "pending": bool(out_files or out_units)}


def diff_entry(path, before_text, after_text, before, after):
    """One entry of the module's ``diff`` list (Ansible shows a list of diffs one after another)."""
    header_before = path if before is not None else f"{path} (missing)"
    if before is not None and after is not None and before.get("sha256") == after["sha256"]:
        # Only metadata differs: show it instead of identical text.
        before_text = "".join(f"{k}: {before.get(k)}\n" for k in ("mode", "owner", "group"))
        after_text = "".join(f"{k}: {after[k]}\n" for k in ("mode", "owner", "group"))
    return {"before_header": header_before, "after_header": path, "before": before_text, "after": after_text}


def parse_systemctl_show(text):
    """``systemctl show -p Id,LoadState,UnitFileState,ActiveState u1 u2`` -> ``{Id: {load, enabled, active}}``.

    Blocks are separated by blank lines; properties may come in any order.
    """
    out = {}
    for block in re.split(r"\n\s*\n", text.strip()):
        props = {}
        for line in block.splitlines():
            key, sep, value = line.partition("=")
            if sep:
                props[key.strip()] = value.strip()
        if props.get("Id"):
            out[props["Id"]] = {"load": props.get("LoadState", ""), "enabled": props.get("UnitFileState", ""),
                                "active": props.get("ActiveState", "")}
    return out


# -- host I/O ----------------------------------------------------------------------------------------


def read_file(path):
    """``(state, text)`` of a file: state None when missing; text None when binary or too large."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        raise BootUnitsError(f"{path}: cannot be read: {exc.strerror}") from exc
    if not stat.S_ISREG(st.st_mode):
        raise BootUnitsError(f"{path}: exists and is not a regular file")
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise BootUnitsError(f"{path}: cannot be read: {exc.strerror}") from exc
    try:
        owner = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        owner = str(st.st_uid)
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    state = {"sha256": hashlib.sha256(data).hexdigest(), "mode": f"{stat.S_IMODE(st.st_mode):04o}",
             "owner": owner, "group": group}
    text = None
    if len(data) <= DIFF_MAX_BYTES:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = None
    return state, text


def resolve_ids(owner, group):
    try:
        uid = pwd.getpwnam(owner).pw_uid
    except KeyError as exc:
        raise BootUnitsError(f"owner {owner!r} does not exist on the host") from exc
    try:
        gid = grp.getgrnam(group).gr_gid
    except KeyError as exc:
        raise BootUnitsError(f"group {group!r} does not exist on the host") from exc
    return uid, gid


def missing_dirs(path):
    """The directories to create for ``path``, outermost first (no side effects)."""
    out = []
    parent = posixpath.dirname(path)
    while parent and parent != "/" and not os.path.isdir(parent):
        if os.path.lexists(parent):
            raise BootUnitsError(f"{parent}: exists and is not a directory (needed for {path})")
        out.append(parent)
        parent = posixpath.dirname(parent)
    return list(reversed(out))


def write_file(path, content, mode, uid, gid):
    """Write atomically: a temporary file in the same directory, chmod/chown, fsync, rename."""
    directory = posixpath.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{posixpath.basename(path)}.", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(content.encode("utf-8"))
            fh.flush()
            os.fchmod(fh.fileno(), int(mode, 8))
            if os.geteuid() == 0 or (uid, gid) != (os.geteuid(), os.getegid()):
                os.fchown(fh.fileno(), uid, gid)
            os.fsync(fh.fileno())
        os.rename(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise BootUnitsError(f"{path}: cannot be written: {exc.strerror}") from exc
