# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller side of ``mlplatform.gpunode.fleet_report`` (documentation: plugins/modules/fleet_report.py)."""

from __future__ import annotations

import os

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.mlplatform.gpunode.plugins.plugin_utils.fleet_report import ReportInputError, write_report


def _plain(name, what):
    name = str(name)
    if not name or name in (".", "..") or "/" in name or "\\" in name or name.startswith(".") or "\0" in name:
        raise ValueError(f"{what} {name!r} is not a plain file or host name")
    return name


def write_host_files(source, host_files):
    """Write ``host_files`` (host -> the result_files module's registered result) to
    ``<source>/hosts/<host>/<name>``, each file only when its content differs; returns the paths written, sorted.
    A host whose read failed or was skipped (or that has no result) adds nothing. Every name is checked before any
    file is written (a host cannot name a path outside its directory)."""
    if not isinstance(host_files, dict):
        raise ValueError("expects host -> the registered result of result_files")
    planned = []
    for host, registered in host_files.items():
        if not isinstance(registered, dict):
            raise ValueError(f"{host}: expects the registered result of result_files, got {type(registered).__name__}")
        if not registered or registered.get("failed") or registered.get("skipped"):
            continue
        files = registered.get("files")
        if not isinstance(files, dict):
            raise ValueError(f"{host}: the result has no files mapping (is it the result of result_files?)")
        folder = os.path.join(source, "hosts", _plain(host, "host"))
        for name, entry in files.items():
            text = entry.get("content") if isinstance(entry, dict) else None
            if not isinstance(text, str):
                raise ValueError(f"{host}: {name}: the content is not text")
            planned.append((folder, os.path.join(folder, _plain(name, f"{host}: file")), text.encode("utf-8")))
    written = []
    for folder, path, data in planned:
        try:
            with open(path, "rb") as handle:
                if handle.read() == data:
                    continue
        except FileNotFoundError:
            pass
        os.makedirs(folder, exist_ok=True)
        temporary = f"{path}.tmp{os.getpid()}"
        with open(temporary, "wb") as handle:
            handle.write(data)
        os.replace(temporary, path)
        written.append(path)
    return sorted(written)


class ActionModule(ActionBase):
    """Render the fleet report from a results directory on the controller."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("input", "output", "host_files"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars or {})
        args = self._task.args
        unknown = set(args) - self._VALID_ARGS
        if unknown:
            raise AnsibleActionFail(f"fleet_report: unknown option(s) {', '.join(sorted(unknown))}")
        if not args.get("input"):
            raise AnsibleActionFail("fleet_report: input (the results directory) is required")
        source = os.path.abspath(os.path.expanduser(str(args["input"])))
        output = os.path.abspath(os.path.expanduser(str(args.get("output") or source)))
        if self._task.check_mode and not os.path.isdir(source):
            # check mode writes no results, so on a fresh fleet there is nothing to render yet
            result.update(changed=False, files={}, output=output, host_files_written=[],
                          msg=f"fleet report: check mode, no results directory {source} yet; nothing written")
            return result
        if not os.path.isdir(source):
            raise AnsibleActionFail(f"fleet_report: input {source} is not a directory")
        if self._task.check_mode:
            result.update(changed=False, files={}, output=output, host_files_written=[],
                          msg=f"fleet report: not written in check mode ({output})")
            return result
        try:
            copied = write_host_files(source, args.get("host_files") or {})
        except ValueError as exc:
            raise AnsibleActionFail(f"fleet_report: host_files: {exc}") from exc
        try:
            written = write_report(source, output)
        except ReportInputError as exc:
            raise AnsibleActionFail(f"fleet_report: {exc}") from exc
        files = {name: {"path": str(path), "written": bool(done)} for name, (path, done) in written.items()}
        result.update(changed=any(f["written"] for f in files.values()) or bool(copied), files=files, output=output,
                      host_files_written=copied,
                      msg=f"fleet report: {files['report.html']['path']} (Markdown: {files['report.md']['path']})")
        return result
