# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One read of a host (the ``host_state`` module): parsers and file digests.

Every function here either parses one tool's text (pure) or reads one local file attribute; the
module runs the tools once each and puts the pieces together. The controller-side plans that
compare this state with the wish live in ``host_plan``.

Formats:
- ``dpkg-query -W -f '${Package}\\t${Version}\\t${db:Status-Want}\\t${db:Status-Status}\\n'``
  (dpkg-query(1), "db:Status-Want", "db:Status-Status"): one line a package; ``hold`` in the want
  column is what ``apt-mark showhold`` lists.
- ``apt-cache madison PKG…`` (apt-cache(8)): ``  doca-ofed | 2.9.0-1 | file:/srv/repo ./ Packages``.
- ``systemctl show --property=Id,LoadState,UnitFileState,ActiveState UNIT…`` (systemctl(1)): one
  ``KEY=value`` block a unit, blocks separated by an empty line, in the order asked.
"""

from __future__ import annotations

import glob
import grp
import hashlib
import os
import pwd
import stat

from ansible_collections.mlplatform.gpunode.plugins.module_utils.parsing import ParseError

DPKG_FORMAT = "${Package}\\t${Version}\\t${db:Status-Want}\\t${db:Status-Status}\\n"
SYSTEMCTL_PROPERTIES = "Id,LoadState,UnitFileState,ActiveState"

# The files the collection's roles manage (README "Read once"): boot units and their drop-ins,
# the scripts they run, their configuration, and everything the install roles write.
DEFAULT_FILES = [
    "/etc/systemd/system/gpunode-*",
    "/etc/systemd/system/*.service.d/gpunode-*",
    "/usr/local/libexec/gpunode/*",
    "/usr/local/sbin/gpunode-*",
    "/etc/gpunode/*",
    "/etc/apt/keyrings/*",
    "/etc/apt/sources.list.d/*",
    "/etc/apt/preferences.d/*",
    "/etc/modules-load.d/*",
    "/etc/modprobe.d/*",
    "/etc/sysctl.d/*",
    "/etc/containerd/config.toml",
    "/etc/crictl.yaml",
    "/etc/default/kubelet",
    "/etc/kubernetes/kubelet.conf",
]
# Units the roles enable or start, besides every gpunode-* unit.
DEFAULT_UNITS = [
    "openibd.service",
    "nvidia-persistenced.service",
    "nvidia-fabricmanager.service",
    "nvidia-dcgm.service",
    "containerd.service",
    "kubelet.service",
    "lldpd.service",
    "systemd-modules-load.service",
]
DEFAULT_KERNEL_MODULES = [
    "mlx5_core", "mlx5_ib", "ib_core", "ib_uverbs", "rdma_ucm",
    "nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_peermem",
    "overlay", "br_netfilter",
]


def parse_dpkg_records(text):
    """``dpkg-query -W -f DPKG_FORMAT`` -> ``{name: {"version", "want", "status"}}``, every package dpkg
    knows (any status). A line without the four tab-separated fields raises ParseError naming it."""
    records = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 4 or not fields[0]:
            raise ParseError("dpkg-query", f"line {lineno}: expected 4 tab-separated fields, got {line!r}")
        name, version, want, status = (f.strip() for f in fields)
        records[name] = {"version": version, "want": want, "status": status}
    return records


def parse_dpkg_query(text):
    """``dpkg-query -W -f DPKG_FORMAT`` -> ``{"packages": {name: version}, "held": [names]}``.

    Only packages whose status is ``installed`` count as installed; a package with a ``hold``
    selection is listed in ``held`` whatever its status (``apt-mark showhold`` does the same).
    """
    records = parse_dpkg_records(text)
    return {"packages": {n: r["version"] for n, r in records.items() if r["status"] == "installed"},
            "held": sorted(n for n, r in records.items() if r["want"] == "hold")}


def parse_madison(text):
    """``apt-cache madison`` -> ``{package: [versions, in apt's order, without repeats]}``."""
    out = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split("|")]
        if len(cells) < 3 or not cells[0] or not cells[1]:
            raise ParseError("apt-cache madison", f"line {lineno}: expected 'package | version | source', got {line!r}")
        versions = out.setdefault(cells[0], [])
        if cells[1] not in versions:
            versions.append(cells[1])
    return out


def parse_systemctl_show(text, units):
    """``systemctl show -p SYSTEMCTL_PROPERTIES UNIT…`` -> ``{unit: {"enabled": …, "active": …}}``.

    ``enabled`` is the UnitFileState (``enabled``, ``disabled``, ``static``, ``masked``…) or
    ``not-found`` for a unit systemd has no file of; ``active`` is the ActiveState. The blocks come
    in the order of ``units``; a block's ``Id`` names it when present.
    """
    blocks = text.strip("\n").split("\n\n") if text.strip() else []
    if len(blocks) != len(units):
        raise ParseError("systemctl show", f"{len(units)} unit blocks expected, got {len(blocks)}")
    out = {}
    for index, unit in enumerate(units):
        block = blocks[index]
        props = {}
        for line in block.splitlines():
            key, sep, value = line.partition("=")
            if not sep:
                raise ParseError("systemctl show", f"expected KEY=value, got {line!r}")
            props[key.strip()] = value.strip()
        enabled = props.get("UnitFileState") or ""
        if props.get("LoadState") == "not-found" or not enabled:
            enabled = "not-found" if props.get("LoadState") == "not-found" else (enabled or "unknown")
        out[unit] = {"enabled": enabled, "active": props.get("ActiveState") or "unknown",
                     "load": props.get("LoadState") or "unknown"}
    return out


def expand_files(patterns, root="/"):
    """Absolute paths of the regular files the patterns match (a directory matched: its files).

    ``root`` prefixes every pattern (tests read a tree); the returned paths are host paths
    (without ``root``). Missing paths are simply absent.
    """
    prefix = os.path.abspath(root).rstrip("/")
    found = set()
    for pattern in patterns:
        if not pattern.startswith("/"):
            raise ValueError(f"files: {pattern!r} is not an absolute path or glob")
        for match in glob.glob(prefix + pattern):
            if os.path.isdir(match) and not os.path.islink(match):
                for dirpath, _dirs, names in os.walk(match):
                    found.update(os.path.join(dirpath, n) for n in names)
            else:
                found.add(match)
    out = []
    for path in sorted(found):
        if os.path.isfile(path):
            out.append(path[len(prefix):] if prefix else path)
    return out


def _name(lookup, ident):
    try:
        return lookup(ident)[0]
    except KeyError:
        return str(ident)


def file_entry(path):
    """``{"sha256", "mode" ("0644"), "owner", "group"}`` of one file (symlinks followed)."""
    info = os.stat(path)
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 16), b""):
            digest.update(chunk)
    return {"sha256": digest.hexdigest(), "mode": f"{stat.S_IMODE(info.st_mode):04o}",
            "owner": _name(pwd.getpwuid, info.st_uid), "group": _name(grp.getgrgid, info.st_gid)}


def read_files(patterns, root="/"):
    """``{host path: file_entry}`` for every file the patterns match."""
    prefix = os.path.abspath(root).rstrip("/")
    out = {}
    for path in expand_files(patterns, root):
        try:
            out[path] = file_entry(prefix + path)
        except (FileNotFoundError, PermissionError):
            continue
    return out


CONTENTS_LIMIT = 256 * 1024


def read_contents(paths, root="/"):
    """``{host path: text or None}``: the text of each small state file (None when it does not exist)."""
    prefix = os.path.abspath(root).rstrip("/")
    out = {}
    for path in paths:
        if not str(path).startswith("/"):
            raise ValueError(f"contents: {path!r} is not an absolute path")
        try:
            with open(prefix + path, "rb") as handle:
                data = handle.read(CONTENTS_LIMIT + 1)
        except FileNotFoundError:
            out[path] = None
            continue
        except OSError as exc:
            raise ValueError(f"contents: {path}: {exc.strerror or exc}") from exc
        if len(data) > CONTENTS_LIMIT:
            raise ValueError(f"contents: {path} is larger than {CONTENTS_LIMIT} bytes")
        out[path] = data.decode("utf-8", errors="replace")
    return out


def parse_capacity(cpuinfo, meminfo):
    """``{cpu, memory_mib}`` from the text of /proc/cpuinfo and /proc/meminfo, counted as the setup module
    counts ``processor_vcpus`` (one ``processor`` line a logical CPU) and ``memtotal_mb`` (MemTotal kB // 1024).
    A value the text does not give is None. Pure."""
    cpus = sum(1 for line in (cpuinfo or "").splitlines() if line.split(":", 1)[0].strip() == "processor")
    memory = None
    for line in (meminfo or "").splitlines():
        key, _sep, value = line.partition(":")
        if key.strip() == "MemTotal":
            fields = value.split()
            if fields and fields[0].isdigit():
                memory = int(fields[0]) // 1024
            break
    return {"cpu": cpus or None, "memory_mib": memory}


def read_capacity(root="/"):
    """The host's logical CPUs and memory (parse_capacity of /proc/cpuinfo and /proc/meminfo under ``root``)."""
    prefix = os.path.abspath(root).rstrip("/")
    texts = []
    for name in ("cpuinfo", "meminfo"):
        try:
            with open(f"{prefix}/proc/{name}", encoding="utf-8", errors="replace") as handle:
                texts.append(handle.read())
        except OSError:
            texts.append("")
    return parse_capacity(*texts)


def unit_names(files, extra):
    """The units to ask systemd about: every ``gpunode-*`` unit file in ``files`` plus ``extra``."""
    names = {os.path.basename(p) for p in files
             if os.path.dirname(p) == "/etc/systemd/system" and os.path.basename(p).startswith("gpunode-")
             and os.path.basename(p).rsplit(".", 1)[-1] in ("service", "timer", "path", "target", "socket")}
    return sorted(names | set(extra))


def read_kernel_modules(sysfs_root, names):
    """``{name: {"loaded": bool, "version": str or None}}`` from ``<sysfs_root>/module/<name>``."""
    out = {}
    for name in names:
        base = os.path.join(sysfs_root, "module", name)
        version = None
        try:
            with open(os.path.join(base, "version"), encoding="utf-8") as handle:
                version = handle.read().strip() or None
        except (FileNotFoundError, NotADirectoryError):
            pass
        out[name] = {"loaded": os.path.isdir(base), "version": version}
    return out
