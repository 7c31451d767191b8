# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller side of ``mlplatform.gpunode.fleet_report`` (documentation: plugins/modules/fleet_report.py)."""

from __future__ import annotations

import os

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.mlplatform.gpunode.plugins.module_utils.contract import DEFAULT_SOURCES
from ansible_collections.mlplatform.gpunode.plugins.module_utils.intent import IntentError, declared_contract
from ansible_collections.mlplatform.gpunode.plugins.module_utils.mlxconfig import normalize_value
from ansible_collections.mlplatform.gpunode.plugins.plugin_utils import action_args
from ansible_collections.mlplatform.gpunode.plugins.plugin_utils.fabric_intent import resolved_intent
from ansible_collections.mlplatform.gpunode.plugins.plugin_utils.fleet_report import (
    RESULT_FACTS,
    ReportInputError,
    inputs_from_facts,
    write_fleet_json,
    write_report,
)
from ansible_collections.mlplatform.gpunode.plugins.plugin_utils.fleet_vars import FleetVars


def _plain(name, what):
    name = str(name)
    if not name or name in (".", "..") or "/" in name or "\\" in name or name.startswith(".") or "\0" in name:
        raise ValueError(f"{what} {name!r} is not a plain file or host name")
    return name


def plan_host_files(source, host_files):
    """Check ``host_files`` (host -> the result_files module's registered result) and list what to write:
    ``[(folder, path, bytes)]`` under ``<source>/hosts/<host>/<name>``. A host whose read failed or was skipped (or
    that has no result) adds nothing. Every name is checked here, before any file is written (a host cannot name a
    path outside its directory)."""
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
    return planned


def write_planned(planned):
    """Write what ``plan_host_files`` planned, each file only when its content differs; returns the paths written,
    sorted."""
    written = []
    present: dict[str, set] = {}
    for folder, path, data in planned:
        names = present.get(folder)
        if names is None:  # one listing a host folder, not one failed open per new file
            os.makedirs(folder, exist_ok=True)
            names = present[folder] = set(os.listdir(folder))
        name = os.path.basename(path)
        if name in names:
            with open(path, "rb") as handle:
                if handle.read() == data:
                    continue
            temporary = f"{path}.tmp{os.getpid()}"
            with open(temporary, "wb") as handle:
                handle.write(data)
            os.replace(temporary, path)  # a reader sees the old file or the new one
        else:
            with open(path, "wb") as handle:  # a new file: an interrupted write differs next run and is redone
                handle.write(data)
        written.append(path)
    return sorted(written)


def write_host_files(source, host_files):
    """``plan_host_files`` then ``write_planned``: returns the paths written, sorted."""
    return write_planned(plan_host_files(source, host_files))


def gather(hostvars, hosts, sources=None, fabric_var="gpunode_fabric", result_facts=None,
           host_files_var=None):
    """One pass over ``hosts`` (plugin_utils/fleet_vars.py: published facts as they are, nothing templated
    again): ``({host: {fabric, contracts, facts, files}}, {host: registered result_files result})`` for
    ``inputs_from_facts`` and ``write_host_files``."""
    fleet = FleetVars(hostvars)
    sources = DEFAULT_SOURCES if sources is None else sources
    result_facts = RESULT_FACTS if result_facts is None else result_facts
    hosts_data, registered = {}, {}
    for host in hosts:
        contracts = {}
        for source in sources:
            value = fleet.get(host, source)
            if value is None:
                continue
            if not isinstance(value, list):
                raise ValueError(f"{host}: {source} must be a list of contract entries, got {type(value).__name__}")
            contracts[source] = value
        facts = {stem: fleet.get(host, var) for stem, var in result_facts.items()}
        files = {}
        # The first of the variables that holds a read (a registered read that was skipped or failed, or a
        # variable that is unset or null, gives way to the next).
        for name in [host_files_var] if isinstance(host_files_var, str) else (host_files_var or []):
            result = fleet.get(host, name, {})
            if isinstance(result, dict) and result and not result.get("failed") and not result.get("skipped"):
                registered[host] = result
                files = {n: e.get("content") for n, e in (result.get("files") or {}).items() if isinstance(e, dict)}
                break
        fabric = fleet.get(host, fabric_var)
        hosts_data[host] = {"fabric": str(fabric) if fabric not in (None, "") else "default",
                            "contracts": contracts, "facts": facts, "files": files}
    return hosts_data, registered


class ActionModule(ActionBase):
    """Render the fleet report on the controller: from a results directory, or from the play's facts (recording
    them in that directory first)."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("input", "output", "host_files", "from_facts", "hosts", "sources", "fabric_var",
                             "result_facts", "host_files_var", "kueue", "run", "history", "topology"))

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)  # refuses an option outside _VALID_ARGS, naming it
        args = self._task.args
        if not args.get("input"):
            raise AnsibleActionFail("fleet_report: input (the results directory) is required")
        source = os.path.abspath(os.path.expanduser(str(args["input"])))
        output = os.path.abspath(os.path.expanduser(str(args.get("output") or source)))
        from_facts = args.get("from_facts", False)
        if not isinstance(from_facts, bool):
            raise AnsibleActionFail(f"fleet_report: from_facts must be a boolean, got {from_facts!r}")
        gathered = None
        if from_facts:
            gathered = self._gather(args, task_vars)
        elif not os.path.isdir(source) and not self._task.check_mode:
            raise AnsibleActionFail(f"fleet_report: input {source} is not a directory")
        if self._task.check_mode:
            # check mode writes no results (and on a fresh fleet there is nothing to render yet)
            result.update(changed=False, files={}, output=output, host_files_written=[],
                          msg=f"fleet report: not written in check mode ({output})")
            return result
        host_files = gathered[1] if gathered else (args.get("host_files") or {})
        inputs = None
        try:
            if gathered:
                inputs = inputs_from_facts(gathered[0], args.get("kueue") or [], args.get("run") or {},
                                           self._declared(task_vars, list(gathered[0])))
            planned = plan_host_files(source, host_files)
        except ReportInputError as exc:
            raise AnsibleActionFail(f"fleet_report: {exc}") from None
        except ValueError as exc:
            raise AnsibleActionFail(f"fleet_report: host_files: {exc}") from None
        copied = write_planned(planned)
        try:
            fleet_written = write_fleet_json(source, inputs)[1] if inputs is not None else False
            topology = args.get("topology") or None
            if topology is not None and not isinstance(topology, dict):
                raise AnsibleActionFail("fleet_report: topology must be the topology action's result")
            written = write_report(source, output, inputs, history=args.get("history") or None,
                                   topology=topology if topology and not topology.get("skipped") else None)
        except ReportInputError as exc:
            raise AnsibleActionFail(f"fleet_report: {exc}") from None
        if fleet_written:
            copied.append(os.path.join(source, "fleet.json"))
        files = {name: {"path": str(path), "written": bool(done)} for name, (path, done) in written.items()}
        result.update(changed=any(f["written"] for f in files.values()) or bool(copied), files=files, output=output,
                      host_files_written=copied,
                      msg=f"fleet report: {files['report.html']['path']} (Markdown: {files['report.md']['path']})")
        return result

    @staticmethod
    def _declared(task_vars, hosts):
        """Each fabric's declared contract settings, from the run's resolved intent (the report's drift follows the
        declaration, as the fleet contract does); {} where the hosts have no declaration to resolve."""
        try:
            intent = resolved_intent(task_vars, hosts)
        except IntentError:
            return {}
        return {name: declared_contract(fabric, normalize_value) for name, fabric in intent["fabrics"].items()}

    def _gather(self, args, task_vars):
        hosts = action_args.play_hosts("fleet_report", args, task_vars,
                                       ("ansible_play_hosts_all", "ansible_play_hosts"))
        sources = args.get("sources") or list(DEFAULT_SOURCES)
        if not isinstance(sources, list) or not all(isinstance(n, str) and n for n in sources):
            raise AnsibleActionFail("fleet_report: sources must be a list of variable names")
        result_facts = args.get("result_facts")
        if result_facts is not None and (not isinstance(result_facts, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in result_facts.items())):
            raise AnsibleActionFail("fleet_report: result_facts must map result names to variable names")
        for name, kind in (("kueue", list), ("run", dict)):
            if args.get(name) is not None and not isinstance(args[name], kind):
                raise AnsibleActionFail(f"fleet_report: {name} must be a {kind.__name__}")
        host_files_var = args.get("host_files_var")
        if host_files_var is not None and not isinstance(host_files_var, str) and not (
                isinstance(host_files_var, list) and all(isinstance(n, str) for n in host_files_var)):
            raise AnsibleActionFail("fleet_report: host_files_var must be a variable name or a list of them")
        try:
            return gather(task_vars["hostvars"], hosts, sources, str(args.get("fabric_var") or "gpunode_fabric"),
                          result_facts, host_files_var)
        except ValueError as exc:
            raise AnsibleActionFail(f"fleet_report: {exc}") from None
