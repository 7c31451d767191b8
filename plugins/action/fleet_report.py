# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller side of ``mlplatform.gpunode.fleet_report`` (documentation: plugins/modules/fleet_report.py)."""

from __future__ import annotations

import os

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.mlplatform.gpunode.plugins.plugin_utils.fleet_report import ReportInputError, write_report


class ActionModule(ActionBase):
    """Render the fleet report from a results directory on the controller."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("input", "output"))

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
            result.update(changed=False, files={}, output=output,
                          msg=f"fleet report: check mode, no results directory {source} yet; nothing written")
            return result
        if not os.path.isdir(source):
            raise AnsibleActionFail(f"fleet_report: input {source} is not a directory")
        if self._task.check_mode:
            result.update(changed=False, files={}, output=output,
                          msg=f"fleet report: not written in check mode ({output})")
            return result
        try:
            written = write_report(source, output)
        except ReportInputError as exc:
            raise AnsibleActionFail(f"fleet_report: {exc}") from exc
        files = {name: {"path": str(path), "written": bool(done)} for name, (path, done) in written.items()}
        result.update(changed=any(f["written"] for f in files.values()), files=files, output=output,
                      msg=f"fleet report: {files['report.html']['path']} (Markdown: {files['report.md']['path']})")
        return result
