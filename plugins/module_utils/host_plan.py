# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Plans on the controller: the wish against the ``gpunode_host_state`` read (pure functions).

Each function returns an empty value when the host already matches, so a task that changes the
host runs only ``when: <plan> | length > 0``; a non-empty plan says what changes, before -> after,
which is what check mode shows. The state is the ``host_state`` module's result (its RETURN
documents the keys); a state without the key a plan needs is "unknown" and plans the change.
"""

from __future__ import annotations

import hashlib
import re


def _files(state):
    return (state or {}).get("files") or {}


def file_plan(state, path, content, mode="0644", owner="root", group="root"):
    """``{}`` when ``path`` holds ``content`` with that mode and owner, else
    ``{"path", "before": entry or None, "after": entry, "fields": [what differs]}``.

    ``content`` is the text the task writes (compared by SHA-256 of its UTF-8 bytes).
    """
    if not isinstance(path, str) or not path.startswith("/"):
        raise ValueError(f"file_plan: an absolute path is needed, got {path!r}")
    after = {"sha256": hashlib.sha256(str(content).encode("utf-8")).hexdigest(),
             "mode": _mode(mode), "owner": owner, "group": group}
    before = _files(state).get(path)
    if before is None:
        return {"path": path, "before": None, "after": after, "fields": ["content"]}
    fields = [key for key in ("sha256", "mode", "owner", "group") if before.get(key) != after[key]]
    if not fields:
        return {}
    return {"path": path, "before": before, "after": after,
            "fields": ["content" if f == "sha256" else f for f in fields]}


def _mode(mode):
    text = str(mode)
    if isinstance(mode, int):
        text = f"{mode:o}"
    text = text.lstrip("0") or "0"
    return text.rjust(4, "0")


def key_plan(state, path, checksum=""):
    """A signing key at ``path``: ``{}`` when it is there and (no ``checksum`` given, or its digest
    matches ``sha256:<hex>``/``<hex>``), else ``{"path", "before": digest or None, "after": checksum or
    "download"}`` - the key is fetched only then."""
    entry = _files(state).get(path)
    wanted = str(checksum or "").strip().lower()
    if wanted.startswith("sha256:"):
        wanted = wanted[len("sha256:"):]
    if wanted and (len(wanted) != 64 or any(c not in "0123456789abcdef" for c in wanted)):
        raise ValueError(f"key_plan: checksum for {path} must be sha256:<64 hex digits>, got {checksum!r}")
    if entry is not None and (not wanted or entry.get("sha256") == wanted):
        return {}
    return {"path": path, "before": entry.get("sha256") if entry else None, "after": wanted or "download"}


def package_versions(packages):
    """``ansible.builtin.package_facts`` packages (name -> [{version, ...}]) -> ``{name: version}``;
    a ``{name: version}`` mapping (the host state's) is returned as it is."""
    out = {}
    for name, value in (packages or {}).items():
        if isinstance(value, list):
            if value:
                out[name] = value[0].get("version")
        else:
            out[name] = value
    return out


def unheld(held, wanted):
    """Packages of ``wanted`` (sorted) without a hold selection in ``held``."""
    have = set(held or [])
    return sorted(name for name in set(wanted or []) if name not in have)


def unit_plan(state, unit, enabled=None, active=None):
    """``{}`` when ``unit`` is as wished, else ``{"unit", "enabled": {before, after}, "active": {...}}``
    for what differs. ``enabled`` True/False (None: leave it), ``active`` True/False (None: leave it)."""
    units = (state or {}).get("units") or {}
    now = units.get(unit) or {"enabled": "unknown", "active": "unknown"}
    plan = {}
    if enabled is not None:
        is_enabled = now.get("enabled") in ("enabled", "enabled-runtime", "static", "alias", "indirect", "generated")
        if bool(enabled) != is_enabled:
            plan["enabled"] = {"before": now.get("enabled"), "after": "enabled" if enabled else "disabled"}
    if active is not None and bool(active) != (now.get("active") == "active"):
        plan["active"] = {"before": now.get("active"), "after": "active" if active else "inactive"}
    return dict(plan, unit=unit) if plan else {}


def apt_versions(state, package):
    """Versions apt offers for ``package`` per the host state, or None when the state did not ask
    apt about it (the role then reads ``apt-cache madison`` itself)."""
    candidates = (state or {}).get("apt_candidates")
    if candidates is None or package not in candidates:
        return None
    return list(candidates[package])


def module_version(state, name):
    """The loaded version of kernel module ``name`` per the host state (None: not loaded or unknown)."""
    entry = ((state or {}).get("kernel_modules") or {}).get(name) or {}
    return entry.get("version")


_SWAP_LINE = re.compile(r"^[^#\s]\S*\s+\S+\s+swap\s", re.M)


def fstab_swap(contents):
    """Does ``/etc/fstab`` (text in the host state's ``contents``) mount a swap area at boot? True also
    when the state does not have the file (the role then runs its edit, which is idempotent)."""
    text = (contents or {}).get("/etc/fstab")
    return True if text is None else bool(_SWAP_LINE.search(text))


def sysctl_plan(items, contents, path, apply_now=True):
    """The ``{key, value}`` items (``dict2items`` of the wished sysctls) that need the sysctl task: the
    line ``key=value`` is missing from ``path`` or, with ``apply_now``, the running value
    (``/proc/sys/<key with / for .>``) differs. Every item when the state lacks a file it needs."""
    contents = contents or {}
    text = contents.get(path)
    lines = None if text is None else {line.replace(" ", "") for line in text.splitlines()}
    out = []
    for item in items or []:
        key, value = str(item["key"]), str(item["value"])
        if lines is None or f"{key}={value}" not in lines:
            out.append(item)
            continue
        if apply_now:
            running = contents.get("/proc/sys/" + key.replace(".", "/"))
            if running is None or running.strip() != value:
                out.append(item)
    return out
