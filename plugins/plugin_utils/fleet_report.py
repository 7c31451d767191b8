# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet report, part of the collection (the ``mlplatform.gpunode.fleet_report`` action and the
``gpunode report`` CLI both call it): load the fleet's machine-readable results, shape them (pure
data, no I/O outside ``load_inputs`` and ``write_report``) and render HTML and Markdown with jinja2
(templates in ``report_templates/`` beside this file). Self-contained: it imports nothing from the
collection at import time (a report's optional sections import their code beside it), so that the ``gpunode``
Python package ships the same files (``gpunode.collection_plugins``, see pyproject.toml).

Input format (also in the ``mlplatform.gpunode.fleet_report`` documentation)::

    <input>/fleet.json                 written on the controller by playbooks/site.yml (report stage)
    <input>/hosts/<host>/<name>.json   /var/lib/gpunode/<name>.json fetched from each host
    <input>/kueue/*.json|*.yaml        Kueue objects (ResourceFlavor, ClusterQueue, LocalQueue)

Every part is optional; a host appears when any part names it.
"""

from __future__ import annotations

import html
import importlib
import json
import math
import re
import sqlite3
import subprocess
from collections import Counter
from pathlib import Path

import jinja2
import markupsafe
import yaml

CONTRACT_SUFFIX = "_contract"
KUEUE_KINDS = ("ResourceFlavor", "ClusterQueue", "LocalQueue")


class ReportInputError(ValueError):
    """An input file is missing its shape; the message names the file."""


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ReportInputError(f"{path}: not readable JSON ({exc})") from exc


def _read_objects(path: Path) -> list[dict]:
    try:
        text = path.read_text(encoding="utf-8")
        docs = list(yaml.safe_load_all(text)) if path.suffix in (".yaml", ".yml") else [json.loads(text)]
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise ReportInputError(f"{path}: not readable YAML/JSON ({exc})") from exc
    objects = []
    for doc in docs:
        if isinstance(doc, list):
            objects.extend(d for d in doc if isinstance(d, dict))
        elif isinstance(doc, dict) and doc.get("kind") == "List":
            objects.extend(doc.get("items") or [])
        elif isinstance(doc, dict):
            objects.append(doc)
    return objects


def _place_result(entry: dict, stem: str, value, contracts_win: bool = False) -> None:
    """Put one of a host's results (named by its file's stem) where the report reads it: ``discovery`` is the
    hardware, ``validation`` the validation result, anything else under ``results``; a ``<role>_contract`` list
    is also that role's contract, unless the host's contracts already have it and ``contracts_win``."""
    if stem == "discovery":
        entry["hw"] = value
    elif stem == "validation":
        entry["validation"] = value
    else:
        entry["results"][stem] = value
        if stem.endswith(CONTRACT_SUFFIX) and isinstance(value, list) and not (
                contracts_win and stem in entry["contracts"]):
            entry["contracts"][stem] = value


def load_inputs(directory: Path) -> dict:
    """Read an input directory into ``{"hosts": {host: {...}}, "kueue": [objects], "run": {id, time}}``
    (``run`` from fleet.json: the run that wrote it).

    A host entry has ``fabric``, ``hw`` (the discovery result), ``contracts`` (source ->
    entries), ``validation`` (validation.json) and ``results`` (every other fetched file by name).
    Files fetched from the host win over the same data in fleet.json.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise ReportInputError(f"{directory}: no such input directory")
    hosts: dict[str, dict] = {}
    kueue: list[dict] = []
    run: dict = {}
    declared: dict = {}

    def host(name: str) -> dict:
        return hosts.setdefault(name, {"fabric": "default", "hw": None, "contracts": {}, "validation": None,
                                       "results": {}})

    fleet_file = directory / "fleet.json"
    if fleet_file.is_file():
        fleet = _read_json(fleet_file)
        if not isinstance(fleet, dict) or not isinstance(fleet.get("hosts", {}), dict):
            raise ReportInputError(f"{fleet_file}: expected an object with a 'hosts' mapping")
        for name, data in (fleet.get("hosts") or {}).items():
            if not isinstance(data, dict):
                raise ReportInputError(f"{fleet_file}: hosts.{name} is not an object")
            entry = host(name)
            entry["fabric"] = data.get("fabric") or "default"
            entry["hw"] = data.get("hw") or entry["hw"]
            entry["validation"] = data.get("validation") or entry["validation"]
            for source, entries in (data.get("contracts") or {}).items():
                if entries is not None:
                    entry["contracts"][source] = entries
        kueue.extend(o for o in fleet.get("kueue") or [] if isinstance(o, dict))
        if isinstance(fleet.get("run"), dict):
            run = {k: fleet["run"].get(k) for k in ("id", "time")}
        if isinstance(fleet.get("declared"), dict):
            declared = fleet["declared"]

    hosts_dir = directory / "hosts"
    if hosts_dir.is_dir():
        for host_dir in sorted(p for p in hosts_dir.iterdir() if p.is_dir()):
            entry = host(host_dir.name)
            for path in sorted(host_dir.glob("*.json")):
                _place_result(entry, path.stem, _read_json(path))

    kueue_dir = directory / "kueue"
    if kueue_dir.is_dir():
        for path in sorted(kueue_dir.iterdir()):
            if path.suffix in (".json", ".yaml", ".yml"):
                kueue.extend(_read_objects(path))
    return {"hosts": dict(sorted(hosts.items())), "kueue": kueue, "run": run, "declared": declared}


def _value_key(value):
    """A hashable key equal for equal contract values, as their JSON spellings are: scalars with
    their type (1, True and "1" differ), lists and mappings item by item (mappings by sorted key)."""
    if value is None or isinstance(value, (str, int, float)):
        return (type(value), value)
    if isinstance(value, (list, tuple)):
        if not any(isinstance(v, (dict, list, tuple)) for v in value):
            return (list, repr(list(value)))  # flat: repr keeps 1, 1.0, True and "1" apart, as JSON does
        return (list, tuple(_value_key(v) for v in value))
    if isinstance(value, dict):
        return (dict, tuple(sorted((str(k), _value_key(v)) for k, v in value.items())))
    return (str, json.dumps(value, sort_keys=True, default=str))


def _majority_key(counts: dict, first: dict):
    """The key of the most common value (ties: the smallest JSON spelling, so the result is stable)."""
    if len(counts) == 1:
        return next(iter(counts))
    return min(counts, key=lambda k: (-counts[k], json.dumps(first[k], sort_keys=True, default=str)))


# The order the stages run in playbooks/site.yml; a contract of another source sorts after them.
STAGES = ("discovery", "ofed", "gpu_driver", "nic_firmware", "sriov", "roce_qos")


def stage_of(column: str) -> str:
    """The stage (the publishing role) of a contract column: ``nic_firmware.nv_config.SRIOV_EN`` ->
    ``nic_firmware``."""
    return column.split(".", 1)[0]


def _stage_rank(stage: str) -> tuple:
    return (STAGES.index(stage), "") if stage in STAGES else (len(STAGES), stage)


def stage_groups(columns: list) -> list[dict]:
    """The columns grouped by stage in the order the stages run: ``[{"stage", "columns": [column],
    "labels": [the column without its stage]}]``."""
    groups: dict[str, list] = {}
    for column in columns:
        groups.setdefault(stage_of(column), []).append(column)
    return [{"stage": stage, "columns": cols, "labels": [c.split(".", 1)[1] if "." in c else c for c in cols]}
            for stage, cols in sorted(groups.items(), key=lambda kv: _stage_rank(kv[0]))]


_SCALARS = frozenset((str, int, float, bool, type(None)))


_PORT_SUFFIX = re.compile(r"_P\d+$")


def declared_setting(declared: dict, setting: str) -> tuple:
    """``(True, value)`` when the fabric declares a contract setting, else ``(False, None)``; a parameter declared
    without _P<n> (``nv_config.LINK_TYPE``) is the rail's own port (``nv_config.LINK_TYPE_P1``), as in
    module_utils/contract.py."""
    if setting in declared:
        return True, declared[setting]
    base = _PORT_SUFFIX.sub("", setting)
    if base != setting and setting.startswith("nv_config.") and base in declared:
        return True, declared[base]
    return False, None


def _entry_key(value):
    """The comparison key of one contract value: a value read from a fact or the inventory may be a subclass of
    its scalar type (a tagged int or str), which compares as that type."""
    kind = type(value)
    if kind in _SCALARS:
        return (kind, value)
    for base in (bool, int, float, str):
        if isinstance(value, base):
            return (base, base(value))
    return _value_key(value)


def contract_table(hosts: dict, declared: dict | None = None) -> dict:
    """Compare every contract setting across the hosts of each fabric, as ``fleet_contract`` does: against the
    fabric's declaration where it declares the setting (``declared``: fabric -> {setting: value}, module_utils/intent
    ``declared_contract``), else against the majority.

    Returns ``{"fabrics": {fabric: {"hosts": [...], "columns": [...], "stages": [stage group],
    "expected": {column: majority value}, "drifting": {column: [host]}, "cells": {host: {column:
    cell}}, "drift": [finding, ...]}}}``. A cell is ``{"value", "drift", "missing"}``, with ``"rails":
    {rail: value}`` too when the host's rails differ from each other (``value`` is then None); the
    expected value is the fabric's ``expected[column]``. A host whose every entry of a column holds the
    expected value shares one cell with the others (nothing per host is built for it). A finding is
    ``{"host", "column", "rail", "pci_address", "netdev", "expected", "found"}``. A host that lacks a
    setting its fabric has drifts with found ``None``. One pass over the entries, then one over the
    cells: O(hosts x settings).
    """
    fabrics: dict[str, dict] = {}
    for name, host in hosts.items():
        fabric_name = host.get("fabric") or "default"
        fabric = fabrics.get(fabric_name)
        if fabric is None:
            fabric = fabrics[fabric_name] = {"hosts": [], "observed": {}}
        fabric["hosts"].append(name)
        observed_all = fabric["observed"]
        for source, entries in sorted((host.get("contracts") or {}).items()):
            prefix = (source[: -len(CONTRACT_SUFFIX)] if source.endswith(CONTRACT_SUFFIX) else source) + "."
            for entry in entries or []:
                try:
                    column = prefix + entry["setting"]
                except (KeyError, TypeError):
                    raise ReportInputError(f"{name}: {source} entry without 'setting': {entry!r}") from None
                observed = observed_all.get(column)
                if observed is None:
                    observed = observed_all[column] = {}
                per_host = observed.get(name)
                if per_host is None:
                    observed[name] = [entry]
                else:
                    per_host.append(entry)

    out = {}
    for fabric_name, fabric in sorted(fabrics.items()):
        cells: dict[str, dict] = {h: {} for h in fabric["hosts"]}
        drift = []
        expected_of, drifting = {}, {}
        for column, observed in sorted(fabric["observed"].items()):
            # each value's key once; the majority from their counts
            counts: dict = {}
            first: dict = {}
            keyed_hosts = {}
            for host_name, entries in observed.items():
                # entries stay in the order the host published them (the roles publish rails in order)
                keys = keyed_hosts[host_name] = []
                for entry in entries:
                    value = entry.get("value")
                    key = _entry_key(value)
                    keys.append(key)
                    count = counts.get(key)
                    if count is None:
                        counts[key] = 1
                        first[key] = value
                    else:
                        counts[key] = count + 1
            is_declared, declared_value = declared_setting((declared or {}).get(fabric_name) or {},
                                                           column.split(".", 1)[1] if "." in column else column)
            if is_declared:
                expected_key = _entry_key(declared_value)
                first[expected_key] = declared_value
            else:
                expected_key = _majority_key(counts, first)
            expected = expected_of[column] = first[expected_key]
            agreeing = {"value": expected, "drift": False, "missing": False}
            first_finding = len(drift)
            for host_name in fabric["hosts"]:
                keys = keyed_hosts.get(host_name)
                if not keys:
                    cells[host_name][column] = {"value": None, "drift": True, "missing": True}
                    drift.append({"host": host_name, "column": column, "rail": None, "pci_address": None,
                                  "netdev": None, "expected": expected, "found": None})
                    continue
                if keys.count(expected_key) == len(keys):
                    cells[host_name][column] = agreeing
                    continue
                rails = {}
                for key, entry in zip(keys, observed[host_name], strict=True):
                    rail = entry.get("rail")
                    if rail is not None:
                        rails[rail] = entry.get("value")
                    if key != expected_key:
                        drift.append({"host": host_name, "column": column, "rail": rail,
                                      "pci_address": entry.get("pci_address"), "netdev": entry.get("netdev"),
                                      "expected": expected, "found": entry.get("value")})
                if keys.count(keys[0]) == len(keys):
                    cells[host_name][column] = {"value": observed[host_name][0].get("value"), "drift": True,
                                                "missing": False}
                else:
                    cells[host_name][column] = {"value": None, "rails": rails, "drift": True, "missing": False}
            drifting[column] = list(dict.fromkeys(d["host"] for d in drift[first_finding:]))
        columns = sorted(fabric["observed"])
        out[fabric_name] = {"hosts": fabric["hosts"], "columns": columns, "stages": stage_groups(columns),
                            "expected": expected_of, "drifting": drifting, "cells": cells, "drift": drift}
    return {"fabrics": out}


def drift_groups(fabrics: dict) -> list[dict]:
    """The drift findings of every fabric grouped by setting and host, settings in stage order:
    ``[{"fabric", "stage", "column", "expected", "hosts": [{"host", "devices": [{"rail",
    "pci_address", "netdev", "found"}]}]}]`` (a missing setting is one device with rail None)."""
    groups: dict[tuple, dict] = {}
    for fabric_name, fabric in fabrics.items():
        for finding in fabric["drift"]:
            key = (fabric_name, finding["column"])
            group = groups.get(key)
            if group is None:
                group = groups[key] = {"fabric": fabric_name, "stage": stage_of(finding["column"]),
                                       "column": finding["column"], "expected": finding["expected"], "hosts": {}}
            group["hosts"].setdefault(finding["host"], []).append(
                {k: finding[k] for k in ("rail", "pci_address", "netdev", "found")})
    ordered = sorted(groups.values(), key=lambda g: (_stage_rank(g["stage"]), g["column"], g["fabric"]))
    return [{**g, "hosts": [{"host": h, "devices": d} for h, d in g["hosts"].items()]} for g in ordered]


def rail_rows(hw: dict | None, validation: dict | None = None) -> list[dict]:
    """One row per compute rail (GPU order) from the discovery result, with the rail's validation
    verdict: ``{"rail", "gpu", "gpu_model", "nic", "model", "netdev", "rdma_device", "link_layer",
    "speed_gbps", "distance", "status", "reasons"}``; a GPU without a rail gives a row with nic None."""
    if not hw:
        return []
    nics = {n.get("pci_address"): n for n in hw.get("nics") or []}
    per_rail: dict[int, list[dict]] = {}
    for check in (validation or {}).get("checks") or []:
        if check.get("rail") is not None:
            per_rail.setdefault(check["rail"], []).append(check)
    for pair in (validation or {}).get("pairs") or []:
        if pair.get("rail") is not None:
            per_rail.setdefault(pair["rail"], []).append(pair)
    rows = []
    for gpu in hw.get("gpus") or []:
        nic = nics.get(gpu.get("rail_nic") or "")
        rail = nic.get("rail") if nic else None
        checks = per_rail.get(rail, []) if rail is not None else []
        failed = [c for c in checks if c.get("status") == "fail"]
        rows.append({
            "rail": rail, "gpu": gpu.get("pci_address"), "gpu_model": gpu.get("model"),
            "nic": nic.get("pci_address") if nic else None, "model": (nic or {}).get("model"),
            "netdev": (nic or {}).get("netdev"), "rdma_device": (nic or {}).get("rdma_device"),
            "link_layer": (nic or {}).get("link_layer"), "speed_gbps": (nic or {}).get("speed_gbps"),
            "distance": (nic or {}).get("gpu_distance"),
            "status": ("fail" if failed else "pass") if checks else ("no rail" if nic is None else "not validated"),
            "reasons": [c.get("reason") for c in failed if c.get("reason")],
        })
    return rows


def kueue_summary(objects: list[dict]) -> dict:
    """Kueue objects by kind: flavors ``{"name", "node_labels", "taints", "tolerations"}``, cluster
    queues ``{"name", "cohort", "quotas": [{"flavor", "resource", "nominal"}], "resources": [names in
    first-seen order], "flavors": [{"name", "quotas": {resource: nominal}}]}`` (the flavor x resource
    table), local queues
    ``{"name", "namespace", "cluster_queue"}``; sorted by name, duplicates (same kind/ns/name) once."""
    seen = {}
    for obj in objects:
        kind = obj.get("kind")
        meta = obj.get("metadata") or {}
        if kind in KUEUE_KINDS:
            seen[(kind, meta.get("namespace"), meta.get("name"))] = obj
    flavors, queues, local = [], [], []
    for (kind, namespace, name), obj in sorted(seen.items(), key=lambda kv: tuple(str(k) for k in kv[0])):
        spec = obj.get("spec") or {}
        if kind == "ResourceFlavor":
            flavors.append({"name": name, "node_labels": spec.get("nodeLabels") or {},
                            "taints": spec.get("nodeTaints") or [], "tolerations": spec.get("tolerations") or []})
        elif kind == "ClusterQueue":
            quotas = []
            for group in spec.get("resourceGroups") or []:
                for flavor in group.get("flavors") or []:
                    for res in flavor.get("resources") or []:
                        quotas.append({"flavor": flavor.get("name"), "resource": res.get("name"),
                                       "nominal": res.get("nominalQuota")})
            resources = []
            matrix: dict[str, dict] = {}
            for quota in quotas:
                if quota["resource"] not in resources:
                    resources.append(quota["resource"])
                matrix.setdefault(quota["flavor"], {})[quota["resource"]] = quota["nominal"]
            queues.append({"name": name, "cohort": spec.get("cohortName") or spec.get("cohort"), "quotas": quotas,
                           "resources": resources,
                           "flavors": [{"name": f, "quotas": q} for f, q in matrix.items()]})
        else:
            local.append({"name": name, "namespace": namespace, "cluster_queue": spec.get("clusterQueue")})
    return {"flavors": flavors, "cluster_queues": queues, "local_queues": local}


def validation_summary(name: str, validation: dict | None) -> dict:
    """``{"host", "status": passed|failed|not validated, "failures": [...], "checks": n, "pairs": [...],
    "taint": ...}`` from one host's validation.json (see the validation role's README)."""
    if not validation:
        return {"host": name, "status": "not validated", "failures": [], "checks": 0, "failed_checks": 0,
                "pairs": [], "taint": None}
    checks = validation.get("checks") or []
    pairs = validation.get("pairs") or []
    failures = list(validation.get("failures") or [])
    if not failures:
        failures = [c.get("reason") or c.get("check") for c in checks + pairs if c.get("status") == "fail"]
    return {
        "host": name,
        "status": "passed" if validation.get("passed") else "failed",
        "failures": failures,
        "checks": len(checks),
        "failed_checks": sum(1 for c in checks if c.get("status") == "fail"),
        "pairs": [{**p, "host": p.get("host") or name} for p in pairs],
        "harness_errors": [p.get("reason") for p in pairs if p.get("status") == "harness_error"],
        "taint": validation.get("taint"),
    }


def _platform_name(platform: dict) -> str:
    """``NVIDIA`` + ``NVIDIA DGX H100`` reads ``NVIDIA DGX H100``; ``Dell Inc.`` + ``PowerEdge XE9680``
    reads ``Dell Inc. PowerEdge XE9680`` (as the rail_map filter names hosts)."""
    vendor, product = platform.get("vendor") or "", platform.get("product") or ""
    if product.startswith(vendor):
        return product or "unknown"
    return f"{vendor} {product}".strip() or "unknown"


def reboot_summary(reboot: dict | None, nic_firmware: dict | None = None) -> str:
    """One host's reboot.json as a line: ``failed: <reason>``, ``rebooted``, ``required, deferred``,
    ``still rebooting (no verdict)`` or ``not needed``; then, from nic_firmware.json's ``not_in_effect``, each
    NV config value set for next boot that did not take effect after the bounded reboots."""
    line = _reboot_line(reboot)
    stuck = (nic_firmware or {}).get("not_in_effect") if isinstance(nic_firmware, dict) else None
    if isinstance(stuck, dict) and stuck:
        parts = [f"{device} {param} {entry.get('desired')} {entry.get('note') or 'not in effect'}"
                 f" (in effect {entry.get('current')})"
                 for device, params in sorted(stuck.items()) if isinstance(params, dict)
                 for param, entry in sorted(params.items()) if isinstance(entry, dict)]
        if parts:
            line += "; " + "; ".join(parts)
    return line


def _reboot_line(reboot: dict | None) -> str:
    if not isinstance(reboot, dict) or not reboot:
        return "not needed"
    if reboot.get("failed"):
        return f"failed: {reboot.get('reason') or 'unknown'}"
    if reboot.get("rebooting"):
        return "still rebooting (no verdict)"
    if reboot.get("deferred"):
        return "required, deferred"
    if reboot.get("rebooted"):
        return "rebooted" + (", not applied: " + ", ".join(sorted(reboot["not_applied"]))
                             if reboot.get("not_applied") else "")
    return "required" if reboot.get("required") else "not needed"


def collection_info() -> dict:
    """``{"version", "commit"}`` of the collection this file belongs to: the version from galaxy.yml
    (a checkout) or MANIFEST.json (an installed collection), the commit when it is a git checkout."""
    root = Path(__file__).resolve().parents[2]
    version = None
    manifest = root / "MANIFEST.json"
    if manifest.is_file():
        version = (json.loads(manifest.read_text(encoding="utf-8")).get("collection_info") or {}).get("version")
    elif (root / "galaxy.yml").is_file():
        version = (yaml.safe_load((root / "galaxy.yml").read_text(encoding="utf-8")) or {}).get("version")
    commit = None
    if (root / ".git").exists():
        try:
            proc = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                                  text=True, check=False, timeout=10)
            commit = proc.stdout.strip() or None if proc.returncode == 0 else None
        except (OSError, subprocess.SubprocessError):
            commit = None
    return {"version": version, "commit": commit}


def bandwidth_matrix(host_views: list[dict]) -> dict:
    """Every ``ib_write_bw`` test once, as client -> server rows and rail columns: ``{"rails": [rail],
    "rows": [{"client", "server", "cells": {rail: {"gbps", "line_rate_gbps", "threshold_pct", "pct",
    "status", "failed_side", "reason"}}}], "failed": [{"client", "server", "rail", "cell"}]}``. A test
    is reported by both of its hosts (``side``); the
    client's entry is used, the server's only when the client is not in the report. A pair entry
    without ``side`` counts as its host's client entry."""
    tests: dict[tuple, dict] = {}
    server_side: dict[tuple, dict] = {}
    for view in host_views:
        for pair in view["validation"]["pairs"]:
            if pair.get("side") == "server":
                server_side[(pair.get("peer"), view["name"], pair.get("rail"))] = pair
            else:
                tests[(view["name"], pair.get("peer"), pair.get("rail"))] = pair
    for key, pair in server_side.items():
        tests.setdefault(key, pair)
    rows: dict[tuple, dict] = {}
    rails = set()
    for (client, server, rail), pair in tests.items():
        gbps, line = pair.get("gbps"), pair.get("line_rate_gbps")
        pct = round(100.0 * gbps / line, 1) if isinstance(gbps, (int, float)) and line else None
        rails.add(rail)
        row = rows.get((client, server))
        if row is None:
            row = rows[(client, server)] = {"client": client, "server": server, "cells": {}}
        row["cells"][rail] = {"gbps": gbps, "line_rate_gbps": line, "threshold_pct": pair.get("threshold_pct"),
                              "pct": pct, "status": pair.get("status"), "failed_side": pair.get("failed_side"),
                              "reason": pair.get("reason") or ""}
    ordered = [rows[k] for k in sorted(rows, key=lambda k: (str(k[0]), str(k[1])))]
    rail_list = sorted(rails, key=lambda r: (r is None, r if r is not None else 0))
    failed = [{"client": row["client"], "server": row["server"], "rail": rail, "cell": row["cells"][rail]}
              for row in ordered for rail in rail_list
              if rail in row["cells"] and row["cells"][rail]["status"] == "fail"]
    return {"rails": rail_list, "rows": ordered, "failed": failed}


def build(inputs: dict) -> dict:
    """Everything the templates render: ``fabrics`` (contract tables), ``drift`` (findings grouped by
    setting), ``hosts`` (per host: platform, fabric, rail rows, validation, reboot, drift count),
    ``bandwidth`` (the heatmap's matrix), ``kueue`` and the fleet ``summary``."""
    hosts = inputs["hosts"]
    contract = contract_table(hosts, inputs.get("declared"))
    drift_per_host = Counter(d["host"] for f in contract["fabrics"].values() for d in f["drift"])
    host_views = []
    for name, host in hosts.items():
        hw = host.get("hw") or {}
        platform = hw.get("platform") or {}
        host_views.append({
            "name": name,
            "fabric": host.get("fabric") or "default",
            "platform": _platform_name(platform),
            "gpus": len(hw.get("gpus") or []),
            "nvswitches": len(hw.get("nvswitches") or []),
            "rails": rail_rows(hw, host.get("validation")),
            "validation": validation_summary(name, host.get("validation")),
            "reboot": reboot_summary((host.get("results") or {}).get("reboot"),
                                     (host.get("results") or {}).get("nic_firmware")),
            "drift": drift_per_host.get(name, 0),
        })
    drift = drift_groups(contract["fabrics"])
    return {
        "fabrics": contract["fabrics"],
        "drift": drift,
        "hosts": host_views,
        "bandwidth": bandwidth_matrix(host_views),
        "kueue": kueue_summary(inputs.get("kueue") or []),
        "summary": {
            "hosts": len(host_views),
            "passed": sum(1 for h in host_views if h["validation"]["status"] == "passed"),
            "failed": sum(1 for h in host_views if h["validation"]["status"] == "failed"),
            "not_validated": sum(1 for h in host_views if h["validation"]["status"] == "not validated"),
            "drift": sum(len(f["drift"]) for f in contract["fabrics"].values()),
            "drift_settings": len(drift),
            "drift_hosts": len(drift_per_host),
        },
    }


TEMPLATES = Path(__file__).parent / "report_templates"

# NV config enums by number, as mlxconfig prints them (``ETH(2)``): LINK_TYPE per NVIDIA's mlxconfig
# documentation (IB 1, ETH 2, VPI 3); parameters named *_EN / *_ENABLE(D) are booleans (True(1)).
NV_ENUMS = {"LINK_TYPE": {1: "IB", 2: "ETH", 3: "VPI"}}
_PORT_SUFFIX = re.compile(r"_P\d+$")
_NV_PARAM = re.compile(r"^[A-Z][A-Z0-9_]*$")
_BOOLEAN_PARAM = re.compile(r"_(EN|ENABLE|ENABLED)$")
PFC_SETTINGS = ("pfc", "qos_pfc")


def value_text(value) -> str:
    """A contract value as an operator reads it: strings bare, ``None`` as ``-``, the rest as JSON."""
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) or (isinstance(value, float) and math.isfinite(value)):
        return repr(value)  # as JSON spells it
    return json.dumps(value, sort_keys=True)


def display_value(column: str, value) -> str:
    """A contract value as the tool that sets it names it: an NV config enum by name and number
    (``nic_firmware.nv_config.LINK_TYPE_P1`` 2 -> ``ETH(2)``, ``SRIOV_EN`` 1 -> ``True(1)``), PFC
    as the list of priorities it is enabled on (``[0, 0, 0, 1, 0, 0, 0, 0]`` -> ``[3]``); anything
    else as ``value_text``."""
    setting = column.rsplit(".", 1)[-1]
    if setting in PFC_SETTINGS and isinstance(value, list) and len(value) == 8 and all(v in (0, 1) for v in value):
        return "[" + ", ".join(str(p) for p, on in enumerate(value) if on) + "]"
    if _NV_PARAM.match(setting) and not isinstance(value, bool):
        base = _PORT_SUFFIX.sub("", setting)
        names = NV_ENUMS.get(base)
        if names is None and _BOOLEAN_PARAM.search(base):
            names = {0: "False", 1: "True"}
        if names:
            if isinstance(value, int) and value in names:
                return f"{names[value]}({value})"
            if isinstance(value, str):
                numbers = {n.upper(): k for k, n in names.items()}
                if value.upper() in numbers:
                    return f"{names[numbers[value.upper()]]}({numbers[value.upper()]})"
    return value_text(value)


def cell_text(cell: dict | None, column: str = "") -> str:
    """One host x setting cell: the value, or ``r<rail>=<value>`` per rail when the rails differ;
    ``missing`` when the host does not publish the setting."""
    if not cell:
        return ""
    if cell.get("missing"):
        return "missing"
    if cell.get("value") is not None or not cell.get("rails"):
        return display_value(column, cell.get("value"))
    return ", ".join(f"r{rail}={display_value(column, v)}" for rail, v in sorted(cell["rails"].items()))


def device_text(device: dict) -> str:
    """A drifting device: ``rail 2 0000:5e:00.0 (ibp94s0)``, ``host`` for a host-scoped setting."""
    if device.get("rail") is None and not device.get("pci_address"):
        return "host"
    parts = [f"rail {device['rail']}"] if device.get("rail") is not None else []
    if device.get("pci_address"):
        parts.append(device["pci_address"])
    if device.get("netdev"):
        parts.append(f"({device['netdev']})")
    return " ".join(parts)


def _bandwidth_fill(cell: dict) -> str:
    """Green from the threshold (light) to line rate (dark); red below the threshold; grey without a
    measurement."""
    if cell.get("pct") is None:
        return "#9e9e9e"
    if cell.get("status") == "fail":
        return "#c62828"
    low = float(cell.get("threshold_pct") or 90)
    share = max(0.0, min(1.0, (cell["pct"] - low) / max(1.0, 100.0 - low)))
    return f"hsl(130,55%,{62 - 30 * share:.0f}%)"


HEATMAP_CELL = (18, 12)


def heatmap_svg(matrix: dict) -> str:
    """The bandwidth heatmap as inline SVG: one row per client -> server host pair, one column per
    rail, each cell a ``rect`` (class ``bw-cell`` and ``pass``/``fail``/``none``, ``data-host`` the
    client, ``data-peer`` the server, ``data-rail``, ``data-gbps``) with a ``title`` tooltip."""
    rows, rails = matrix["rows"], matrix["rails"]
    width, height = HEATMAP_CELL
    labels = [f"{r['client']} \u2192 {r['server']}" for r in rows]
    label_w = 7 * max((len(t) for t in labels), default=10) + 10
    top = 18
    total_w, total_h = label_w + width * len(rails) + 4, top + height * len(rows) + 4
    esc = html.escape
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="heatmap" width="{total_w}" height="{total_h}" '
           f'viewBox="0 0 {total_w} {total_h}" role="img" aria-label="RDMA bandwidth per rail and host pair" '
           'font-family="monospace" font-size="11">']
    out.append(f'<text x="{label_w - 6}" y="12" text-anchor="end">client \u2192 server / rail</text>')
    for j, rail in enumerate(rails):
        out.append(f'<text x="{label_w + j * width + width // 2}" y="12" text-anchor="middle">{esc(str(rail))}</text>')
    for i, (row, label) in enumerate(zip(rows, labels, strict=True)):
        y = top + i * height
        out.append(f'<text x="{label_w - 6}" y="{y + height - 2}" text-anchor="end">{esc(label)}</text>')
        client, server = esc(str(row["client"])), esc(str(row["server"]))
        for j, rail in enumerate(rails):
            cell = row["cells"].get(rail)
            if cell is None:
                continue
            status = cell.get("status") if cell.get("pct") is not None else "none"
            gbps = cell.get("gbps")
            tip = (f"{row['client']} rail {rail} \u2192 {row['server']}: "
                   + (f"{gbps} Gb/s ({cell['pct']}% of {cell['line_rate_gbps']} Gb/s)" if cell.get("pct") is not None
                      else "no measurement")
                   + (f", {cell['status']}" if cell.get("status") else "")
                   + (f", failed side: {cell['failed_side']}" if cell.get("failed_side") else ""))
            out.append(f'<rect class="bw-cell {esc(str(status))}" x="{label_w + j * width}" y="{y}" '
                       f'width="{width - 1}" height="{height - 1}" fill="{_bandwidth_fill(cell)}" '
                       f'data-host="{client}" data-peer="{server}" data-rail="{esc(str(rail))}" '
                       f'data-gbps="{esc(value_text(gbps))}"><title>{esc(tip)}</title></rect>')
    out.append("</svg>")
    return "".join(out)


# The fleet-sized parts of the pages (a row per host, a table per host, a row per host pair) are written
# here in one pass each, escaped with html.escape; jinja2 lays out the rest. A template loop costs a
# filter call and a context lookup per cell, about 3x this at 1,024 hosts (bench/bench_fleet.py).


def _status_class(status: str) -> str:
    return html.escape(str(status).replace(" ", "-"))


def html_setting_rows(fabric_name: str, fabric: dict, hosts: list[dict]) -> str:
    """The contract table's rows of one fabric: host, platform, reboot, validation, drift count, then one
    cell per setting (class ``drift``/``drift missing``, the expected value under a drifting one)."""
    esc = html.escape
    columns = fabric["columns"]
    attrs = [esc(c) for c in columns]
    expected = {c: esc(display_value(c, fabric["expected"][c])) for c in columns}
    agreeing: dict[int, str] = {}  # the cells shared by every host that holds the expected value
    out = []
    for h in hosts:
        if h["fabric"] != fabric_name:
            continue
        name = esc(h["name"])
        cells = fabric["cells"].get(h["name"]) or {}
        status = h["validation"]["status"]
        failed = ' class="fail"' if h["reboot"].startswith("failed") else ""
        out.append(f'<tr data-host="{name}"><th><a href="#host-{name}">{name}</a></th><td>{esc(h["platform"])}</td>'
                   f'<td{failed}>{esc(h["reboot"])}</td>'
                   f'<td class="{_status_class(status)}">{esc(status)}</td><td>{h["drift"]}</td>\n')
        for column, attr in zip(columns, attrs, strict=True):
            cell = cells.get(column)
            head = f'<td data-host="{name}" data-setting="{attr}"'
            if not cell:
                out.append(f"{head}></td>\n")
            elif not cell.get("drift"):
                text = agreeing.get(id(cell))
                if text is None:
                    text = agreeing[id(cell)] = esc(cell_text(cell, column))
                out.append(f"{head}>{text}</td>\n")
            else:
                kind = "drift missing" if cell.get("missing") else "drift"
                out.append(f'{head} class="{kind}">{esc(cell_text(cell, column))}'
                           f"<small>expected {expected[column]}</small></td>\n")
        out.append("</tr>\n")
    return "".join(out)


def html_host_details(hosts: list[dict]) -> str:
    """One ``<details id="host-<name>">`` per host: validation failures, checks, the rail map, failed pairs."""
    esc, vt = html.escape, value_text
    out = []
    for h in hosts:
        name, v = esc(h["name"]), h["validation"]
        status = esc(v["status"])
        rails_with_nic = sum(1 for r in h["rails"] if r.get("nic"))
        out.append(f'<details id="host-{name}" data-host="{name}">\n<summary>{name}: {esc(h["platform"])} '
                   f'({h["gpus"]} GPUs, {rails_with_nic} rails, {h["nvswitches"]} NVSwitches); fabric '
                   f'{esc(h["fabric"])}; validation <span class="{_status_class(v["status"])}">{status}</span>; '
                   f'reboot {esc(h["reboot"])}</summary>\n')
        if v["failures"]:
            out.append('<ul class="failures">' + "".join(f"<li>{esc(str(f))}</li>" for f in v["failures"])
                       + "</ul>\n")
        taint = f"; not-validated taint {esc(str(v['taint']))}" if v.get("taint") else ""
        out.append(f"<p>Checks failed: {v['failed_checks']}/{v['checks']}{taint}.</p>\n")
        if h["rails"]:
            out.append(f'<table class="rails" data-host="{name}">\n<tr><th>rail</th><th>GPU</th><th>NIC</th>'
                       "<th>model</th><th>netdev</th><th>RDMA</th><th>link</th><th>distance</th><th>validation</th>"
                       "</tr>\n")
            for r in h["rails"]:
                rail = esc(vt(r["rail"]))
                reasons = f": {esc('; '.join(str(x) for x in r['reasons']))}" if r["reasons"] else ""
                out.append(f'<tr data-rail="{rail}"><td>{rail}</td><td>{esc(str(r["gpu"]))}</td>'
                           f'<td>{esc(vt(r["nic"]))}</td><td>{esc(vt(r["model"]))}</td>\n'
                           f'<td>{esc(vt(r["netdev"]))}</td><td>{esc(vt(r["rdma_device"]))}</td>'
                           f'<td>{esc(vt(r["link_layer"]))} {esc(vt(r["speed_gbps"]))}G</td>\n'
                           f'<td>{esc(vt(r["distance"]))}</td><td class="{_status_class(r["status"])}">'
                           f'{esc(str(r["status"]))}{reasons}</td></tr>\n')
            out.append("</table>\n")
        else:
            out.append("<p>No discovery result.</p>\n")
        pairs = v["pairs"]
        if v.get("harness_errors"):
            out.append('<p class="harness">Harness errors (the test harness failed, not this host; nothing was '
                       "measured):</p>\n<ul>" + "".join(f"<li>{esc(str(r))}</li>" for r in v["harness_errors"])
                       + "</ul>\n")
        if pairs:
            bad = [p for p in pairs if p.get("status") == "fail"]
            good = sum(1 for p in pairs if p.get("status") == "pass")
            out.append(f"<p><code>ib_write_bw</code>: {good} of {len(pairs)} tests passed (as "
                       "server or client; all figures in the heatmap).</p>\n")
            if bad:
                out.append('<table class="pairs">\n<tr><th>rail</th><th>side</th><th>peer</th><th>peer rail</th>'
                           "<th>Gb/s</th><th>line rate</th><th>threshold</th><th>failed side</th><th>reason</th>"
                           "</tr>\n")
                for p in bad:
                    out.append(f'<tr><td>{esc(str(p.get("rail")))}</td><td>{esc(str(p.get("side") or ""))}</td>'
                               f'<td>{esc(str(p.get("peer")))}</td><td>{esc(str(p.get("peer_rail")))}</td>'
                               f'<td>{esc(vt(p.get("gbps")))}</td>\n<td>{esc(vt(p.get("line_rate_gbps")))}</td>'
                               f'<td>{esc(vt(p.get("threshold_pct")))}%</td><td>{esc(vt(p.get("failed_side")))}</td>'
                               f'\n<td class="fail">{esc(str(p.get("reason")))}</td></tr>\n')
                out.append("</table>\n")
        out.append("</details>\n")
    return "".join(out).removesuffix("\n")  # the template ends the line


class MdText(str):
    """Markdown that is already escaped (``md_escape``) or built from escaped parts: written as it is."""

    __slots__ = ()


_MD_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")
#: Characters that start Markdown markup anywhere in a line (emphasis, code, links, tables, strike-through).
_MD_SPECIAL = re.compile(r"([\\`*\[\]|~!])")
#: ``_`` starts emphasis only where it is not inside a word.
_MD_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")


def md_escape(value) -> MdText:
    """A value written into report.md as text: no raw HTML (``& < >`` as entities), no Markdown markup
    (emphasis, code, links, images, table cells; bare ``scheme://`` and ``www.`` links broken up), on one line."""
    if isinstance(value, MdText):
        return value
    text = _MD_CONTROL.sub(" ", str(value))
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = _MD_SPECIAL.sub(r"\\\1", text)
    text = _MD_UNDERSCORE.sub(r"\\_", text)
    text = text.replace("://", "\\://")
    text = re.sub(r"(?i)\b(www)\.", r"\1\\.", text)
    return MdText(text)


def md_code(value) -> MdText:
    """A value as a Markdown code span, whatever backticks it holds (a longer fence), on one line."""
    text = _MD_CONTROL.sub(" ", str(value))
    runs = [len(r) for r in re.findall(r"`+", text)]
    fence = "`" * (max(runs, default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return MdText(f"{fence}{pad}{text}{pad}{fence}")


def _md_finalize(value):
    """report.md's finalize: every value a template writes is escaped unless it is MdText already."""
    return value if isinstance(value, MdText) else md_escape("" if value is None else value)


_md = md_escape


def md_host_rows(hosts: list[dict]) -> str:
    """The Markdown hosts table's rows."""
    return MdText("".join(
        f"| {_md(h['name'])} | {_md(h['fabric'])} | {_md(h['platform'])} | {_md(h['reboot'])} | "
        f"{_md(h['validation']['status'])} | "
        f"{_md(h['validation']['failed_checks'])}/{_md(h['validation']['checks'])} | "
        f"{_md('; '.join(str(f) for f in h['validation']['failures']))} | {_md(h['drift'])} |\n" for h in hosts
    ).removesuffix("\n"))  # the template ends the line


def md_bandwidth_rows(bandwidth: dict) -> str:
    """The Markdown bandwidth table's rows: Gb/s per rail, bold with the failed side below the threshold."""
    vt = value_text
    out = []
    for row in bandwidth["rows"]:
        cells = []
        for rail in bandwidth["rails"]:
            c = row["cells"].get(rail)
            if c is None:
                cells.append(" |")
            elif c.get("status") == "fail":
                cells.append(f" **{_md(vt(c.get('gbps')))} ({_md(c.get('failed_side') or 'failed')})** |")
            else:
                cells.append(f" {_md(vt(c.get('gbps')))} |")
        out.append(f"| {_md(row['client'])} | {_md(row['server'])} |{''.join(cells)}\n")
    return MdText("".join(out).removesuffix("\n"))  # the template ends the line


def md_rail_maps(hosts: list[dict]) -> str:
    """The Markdown rail map of every host."""
    vt = value_text
    out = []
    for h in hosts:
        rails_with_nic = sum(1 for r in h["rails"] if r.get("nic"))
        out.append(f"\n### {_md(h['name'])}: {_md(h['platform'])} ({_md(h['gpus'])} GPUs, {rails_with_nic} rails, "
                   f"{_md(h['nvswitches'])} NVSwitches)\n\n")
        if not h["rails"]:
            out.append("No discovery result.\n")
            continue
        out.append("| rail | GPU | NIC | model | netdev | RDMA | link | distance | validation |\n"
                   "|---|---|---|---|---|---|---|---|---|\n")
        for r in h["rails"]:
            reasons = f": {_md('; '.join(str(x) for x in r['reasons']))}" if r["reasons"] else ""
            keys = ("rail", "gpu", "nic", "model", "netdev", "rdma_device", "link_layer", "speed_gbps", "distance")
            cells = [_md(vt(r[k])) for k in keys]
            out.append(f"| {cells[0]} | {cells[1]} | {cells[2]} | {cells[3]} | {cells[4]} | {cells[5]} | {cells[6]} "
                       f"{cells[7]}G | {cells[8]} | {_md(r['status'])}{reasons} |\n")
    return MdText("".join(out))


def _section(name):
    """A section's code (``plugin_utils/<name>.py`` beside this file: ``day_two_report``, ``topology_report``),
    imported only for a report that has the section, from the package this file was imported from (the collection,
    or the ``gpunode`` Python package, which ships these files)."""
    return importlib.import_module(f".{name}", __package__)


def _section_renderer(module, function):
    """A template global rendering an optional section (``""`` when the report has none); HTML is markup as written,
    since the section escapes every value itself."""
    def render(part):
        if not part:
            return ""
        text = getattr(_section(module), function)(part)
        # escaped there (html.escape, md_escape)
        return markupsafe.Markup(text) if function == "html_section" else MdText(text)  # noqa: S704 - the section functions escape every value they insert

    return render


def _environment(markdown: bool = False) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        # report.html.j2 is HTML: every value a host or the inventory supplies is escaped (the extension is
        # "html.j2"; with "html" alone nothing would be)
        autoescape=jinja2.select_autoescape(enabled_extensions=("html.j2", "html"), default_for_string=False),
        # report.md.j2: every value is escaped for Markdown (md_escape) unless it is MdText already
        finalize=_md_finalize if markdown else None,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["value_text"] = value_text
    env.filters["display_value"] = lambda value, column: display_value(column, value)
    env.filters["cell_text"] = cell_text
    env.filters["device_text"] = device_text
    env.filters["md"] = _md
    env.filters["code"] = md_code
    # heatmap_svg escapes every name and value it writes (html.escape), so its SVG is markup as it is
    env.globals["heatmap_svg"] = lambda matrix: markupsafe.Markup(heatmap_svg(matrix))  # noqa: S704 - escaped above
    # the fleet-sized parts, escaped where they are written (html.escape)
    env.globals["setting_rows"] = lambda *a: markupsafe.Markup(html_setting_rows(*a))  # noqa: S704 - escaped above
    env.globals["host_details"] = lambda hosts: markupsafe.Markup(html_host_details(hosts))  # noqa: S704 - escaped
    # the optional sections (day two, topology), escaped where they are written (html.escape)
    for name, module in (("day_two", "day_two_report"), ("topology", "topology_report")):
        env.globals[f"{name}_html"] = _section_renderer(module, "html_section")
        env.globals[f"{name}_md"] = _section_renderer(module, "md_section")
    env.globals["md_host_rows"] = md_host_rows
    env.globals["md_bandwidth_rows"] = md_bandwidth_rows
    env.globals["md_rail_maps"] = md_rail_maps
    return env


def render(report: dict) -> dict[str, str]:
    """``{"report.html": text, "report.md": text}`` for a built report."""
    report = {"day_two": None, "topology": None, **report}
    return {name: _environment(markdown=name.endswith(".md")).get_template(f"{name}.j2").render(**report)
            for name in ("report.html", "report.md")}


def _write_if_changed(path: Path, text: str) -> bool:
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return False
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return True


# Results a host also publishes as a fact in the run that writes them (the file holds the same data):
# result name (the file's stem) -> the variable.
RESULT_FACTS = {"discovery": "gpunode_hw", "validation": "validation_result", "nic_firmware": "nic_firmware_result"}


def inputs_from_facts(hosts: dict, kueue: list | None = None, run: dict | None = None,
                      declared: dict | None = None) -> dict:
    """The report's input from what the hosts published, as ``load_inputs`` returns it from a results directory.

    ``hosts`` maps each host to ``{"fabric", "contracts": {source: entries}, "facts": {result name: value},
    "files": {file name: text}}``: ``facts`` are the results the host published in this run (RESULT_FACTS; the
    same data as the file of that name), ``files`` the text of the host's result files. A result comes from its
    fact when the host published one, else from its file, parsed here; a file that is not JSON fails naming the
    host and the file. Nothing is read from disk."""
    out: dict[str, dict] = {}
    for name in sorted(hosts):
        data = hosts[name]
        entry = out[name] = {"fabric": data.get("fabric") or "default", "hw": None,
                             "contracts": dict(data.get("contracts") or {}), "validation": None, "results": {}}
        facts = data.get("facts") or {}
        results = {stem: value for stem, value in facts.items() if value is not None}
        for file_name, text in sorted((data.get("files") or {}).items()):
            if not file_name.endswith(".json"):
                continue
            stem = file_name[: -len(".json")]
            if stem in results:
                continue
            try:
                results[stem] = json.loads(text)
            except (TypeError, ValueError) as exc:
                raise ReportInputError(f"{name}: {file_name}: not readable JSON ({exc})") from None
        for stem, value in sorted(results.items()):  # in file-name order, as load_inputs reads them
            _place_result(entry, stem, value, contracts_win=True)
    return {"hosts": out, "kueue": [o for o in kueue or [] if isinstance(o, dict)],
            "run": {k: (run or {}).get(k) for k in ("id", "time")}, "declared": declared or {}}


def write_fleet_json(directory: Path, inputs: dict) -> tuple[Path, bool]:
    """``<directory>/fleet.json``: each host's fabric and contracts, the Kueue objects and the run, as
    ``load_inputs`` reads them back (with the hosts' files under ``hosts/``, the directory renders the same
    report). One line, each object's keys in the order they were published (so it renders as the facts did);
    rewritten only when its content changed."""
    fleet = {"hosts": {h: {"fabric": d["fabric"], "contracts": d["contracts"]} for h, d in inputs["hosts"].items()},
             "kueue": inputs.get("kueue") or [], "run": inputs.get("run") or {},
             "declared": inputs.get("declared") or {}}
    path = Path(directory) / "fleet.json"
    Path(directory).mkdir(parents=True, exist_ok=True)
    # the C encoder (indent= would take the pure-Python one, several times slower)
    return path, _write_if_changed(path, json.dumps(fleet, default=str) + "\n")


def write_report(input_dir: Path, output_dir: Path, inputs: dict | None = None,
                 history: Path | None = None, topology: dict | None = None) -> dict[str, tuple[Path, bool]]:
    """Load ``input_dir`` (or take ``inputs``, as ``inputs_from_facts`` gives them), render, write ``report.html``,
    ``report.md`` and ``report.json`` (the built model; each host's cells only where they drift) into
    ``output_dir``, headed by the collection version and
    commit and the id and time of the run that wrote the results (fleet.json ``run``). With ``history`` (the
    day-two database), a day-two section: rails below their own history with a trend plot, hosts out of service,
    remediation events. A file whose content is unchanged is not rewritten. Returns ``{name: (path, written)}``."""
    if inputs is None:
        inputs = load_inputs(Path(input_dir))
    report = build(inputs)
    try:
        report["day_two"] = _section("day_two_report").load(history) if history else None
    except (OSError, sqlite3.Error) as exc:
        raise ReportInputError(f"history: the day-two database {history} cannot be read: {exc}") from None
    # The topology action's result (tree, miscabled rails, warnings), when the run read the topology.
    report["topology"] = {k: topology.get(k) for k in ("tree", "miscabled", "warnings")} if topology else None
    run = inputs.get("run") or {}
    report["meta"] = {**collection_info(), "run_id": run.get("id") or "unknown",
                      "generated": run.get("time") or "unknown"}
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    texts = render(report)
    # One line: the C encoder (indent= would take the pure-Python one, several times slower). A host's cells are
    # listed where they differ from the fabric's expected value; every other cell holds that value.
    model = {**report, "fabrics": {name: {**fabric, "cells": {
        host: {column: cell for column, cell in cells.items() if cell.get("drift")}
        for host, cells in fabric["cells"].items()}} for name, fabric in report["fabrics"].items()}}
    texts["report.json"] = json.dumps(model, default=str) + "\n"  # keys in the model's own (stable) order
    return {name: (output_dir / name, _write_if_changed(output_dir / name, text)) for name, text in texts.items()}
