# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet report, part of the collection (the ``mlplatform.gpunode.fleet_report`` action and the
``gpunode report`` CLI both call it): load the fleet's machine-readable results, shape them (pure
data, no I/O outside ``load_inputs`` and ``write_report``) and render HTML and Markdown with jinja2
(templates in ``report_templates/`` beside this file). Self-contained: it imports nothing from the
collection, so the CLI can load it from a checkout by path.

Input format (also in the ``mlplatform.gpunode.fleet_report`` documentation)::

    <input>/fleet.json                 written on the controller by playbooks/site.yml (report stage)
    <input>/hosts/<host>/<name>.json   /var/lib/gpunode/<name>.json fetched from each host
    <input>/kueue/*.json|*.yaml        Kueue objects (ResourceFlavor, ClusterQueue, LocalQueue)

Every part is optional; a host appears when any part names it.
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path

import jinja2
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

    hosts_dir = directory / "hosts"
    if hosts_dir.is_dir():
        for host_dir in sorted(p for p in hosts_dir.iterdir() if p.is_dir()):
            entry = host(host_dir.name)
            for path in sorted(host_dir.glob("*.json")):
                data = _read_json(path)
                if path.stem == "discovery":
                    entry["hw"] = data
                elif path.stem == "validation":
                    entry["validation"] = data
                else:
                    entry["results"][path.stem] = data
                    if path.stem.endswith(CONTRACT_SUFFIX) and isinstance(data, list):
                        entry["contracts"][path.stem] = data

    kueue_dir = directory / "kueue"
    if kueue_dir.is_dir():
        for path in sorted(kueue_dir.iterdir()):
            if path.suffix in (".json", ".yaml", ".yml"):
                kueue.extend(_read_objects(path))
    return {"hosts": dict(sorted(hosts.items())), "kueue": kueue, "run": run}


def _value_key(value) -> str:
    return json.dumps(value, sort_keys=True)


def _majority(values: list):
    """The most common value (ties: the smallest JSON spelling, so the result is stable)."""
    counts = Counter(_value_key(v) for v in values)
    best = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
    return json.loads(best)


def _column(source: str, entry: dict) -> str:
    role = source[: -len(CONTRACT_SUFFIX)] if source.endswith(CONTRACT_SUFFIX) else source
    return f"{role}.{entry['setting']}"


def contract_table(hosts: dict) -> dict:
    """Compare every contract setting across the hosts of each fabric, as ``fleet_contract`` does.

    Returns ``{"fabrics": {fabric: {"hosts": [...], "columns": [...], "cells": {host: {column: cell}},
    "drift": [finding, ...]}}}``. A cell is ``{"value", "rails": {rail: value}, "expected", "drift",
    "missing"}``: host-scoped settings fill ``value``; rail-scoped ones fill ``rails`` (``value`` is
    set when all rails agree). A finding is ``{"host", "column", "rail", "pci_address", "netdev",
    "expected", "found"}``. A host that lacks a setting its fabric has drifts with found ``None``.
    """
    fabrics: dict[str, dict] = {}
    for name, host in hosts.items():
        fabric = fabrics.setdefault(host.get("fabric") or "default", {"hosts": [], "observed": {}})
        fabric["hosts"].append(name)
        for source, entries in sorted((host.get("contracts") or {}).items()):
            for entry in entries or []:
                if not isinstance(entry, dict) or "setting" not in entry:
                    raise ReportInputError(f"{name}: {source} entry without 'setting': {entry!r}")
                column = _column(source, entry)
                scope = entry.get("scope") or "host"
                observed = fabric["observed"].setdefault(column, {"scope": scope, "values": {}})
                observed["values"].setdefault(name, []).append(entry)

    out = {}
    for fabric_name, fabric in sorted(fabrics.items()):
        cells: dict[str, dict] = {h: {} for h in fabric["hosts"]}
        drift = []
        for column, observed in sorted(fabric["observed"].items()):
            all_values = [e.get("value") for entries in observed["values"].values() for e in entries]
            expected = _majority(all_values)
            for host_name in fabric["hosts"]:
                entries = observed["values"].get(host_name)
                if not entries:
                    cells[host_name][column] = {"value": None, "rails": {}, "expected": expected, "drift": True,
                                                "missing": True}
                    drift.append({"host": host_name, "column": column, "rail": None, "pci_address": None,
                                  "netdev": None, "expected": expected, "found": None})
                    continue
                rails = {}
                bad = False
                for entry in sorted(entries, key=lambda e: (e.get("rail") is None, e.get("rail") or 0)):
                    value = entry.get("value")
                    if entry.get("rail") is not None:
                        rails[entry["rail"]] = value
                    if _value_key(value) != _value_key(expected):
                        bad = True
                        drift.append({"host": host_name, "column": column, "rail": entry.get("rail"),
                                      "pci_address": entry.get("pci_address"), "netdev": entry.get("netdev"),
                                      "expected": expected, "found": value})
                values = {_value_key(e.get("value")) for e in entries}
                cells[host_name][column] = {
                    "value": json.loads(values.pop()) if len(values) == 1 else None,
                    "rails": rails, "expected": expected, "drift": bad, "missing": False,
                }
        out[fabric_name] = {"hosts": fabric["hosts"], "columns": sorted(fabric["observed"]), "cells": cells,
                            "drift": drift}
    return {"fabrics": out}


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
    queues ``{"name", "cohort", "quotas": [{"flavor", "resource", "nominal"}]}``, local queues
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
            queues.append({"name": name, "cohort": spec.get("cohortName") or spec.get("cohort"), "quotas": quotas})
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
        "taint": validation.get("taint"),
    }


def _platform_name(platform: dict) -> str:
    """``NVIDIA`` + ``NVIDIA DGX H100`` reads ``NVIDIA DGX H100``; ``Dell Inc.`` + ``PowerEdge XE9680``
    reads ``Dell Inc. PowerEdge XE9680`` (as the rail_map filter names hosts)."""
    vendor, product = platform.get("vendor") or "", platform.get("product") or ""
    if product.startswith(vendor):
        return product or "unknown"
    return f"{vendor} {product}".strip() or "unknown"


def reboot_summary(reboot: dict | None) -> str:
    """One host's reboot.json as a line: ``failed: <reason>``, ``rebooted``, ``required, deferred``,
    ``still rebooting (no verdict)`` or ``not needed``."""
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


def build(inputs: dict) -> dict:
    """Everything the templates render: ``fabrics`` (contract tables), ``hosts`` (per host: platform,
    fabric, rail rows, validation), ``kueue`` and the fleet ``summary``."""
    hosts = inputs["hosts"]
    contract = contract_table(hosts)
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
            "reboot": reboot_summary((host.get("results") or {}).get("reboot")),
        })
    drift = sum(len(f["drift"]) for f in contract["fabrics"].values())
    return {
        "fabrics": contract["fabrics"],
        "hosts": host_views,
        "kueue": kueue_summary(inputs.get("kueue") or []),
        "summary": {
            "hosts": len(host_views),
            "passed": sum(1 for h in host_views if h["validation"]["status"] == "passed"),
            "failed": sum(1 for h in host_views if h["validation"]["status"] == "failed"),
            "not_validated": sum(1 for h in host_views if h["validation"]["status"] == "not validated"),
            "drift": drift,
        },
    }


TEMPLATES = Path(__file__).parent / "report_templates"


def value_text(value) -> str:
    """A contract value as an operator reads it: strings bare, ``None`` as ``-``, the rest as JSON."""
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)


def cell_text(cell: dict | None) -> str:
    """One host × setting cell: the value, or ``r<rail>=<value>`` per rail when the rails differ;
    ``missing`` when the host does not publish the setting."""
    if not cell:
        return ""
    if cell.get("missing"):
        return "missing"
    if cell.get("value") is not None or not cell.get("rails"):
        return value_text(cell.get("value"))
    return ", ".join(f"r{rail}={value_text(v)}" for rail, v in sorted(cell["rails"].items()))


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=jinja2.select_autoescape(enabled_extensions=("html",), default_for_string=False),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["value_text"] = value_text
    env.filters["cell_text"] = cell_text
    env.filters["md"] = lambda text: str(text).replace("|", "\\|")
    return env


def render(report: dict) -> dict[str, str]:
    """``{"report.html": text, "report.md": text}`` for a built report."""
    env = _environment()
    return {name: env.get_template(f"{name}.j2").render(**report) for name in ("report.html", "report.md")}


def _write_if_changed(path: Path, text: str) -> bool:
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return False
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return True


def write_report(input_dir: Path, output_dir: Path) -> dict[str, tuple[Path, bool]]:
    """Load ``input_dir``, render, write ``report.html``, ``report.md`` and ``report.json`` (the
    built model) into ``output_dir``, headed by the collection version and commit and the id and
    time of the run that wrote the results (fleet.json ``run``). A file whose content is unchanged
    is not rewritten. Returns ``{name: (path, written)}``."""
    inputs = load_inputs(Path(input_dir))
    report = build(inputs)
    run = inputs.get("run") or {}
    report["meta"] = {**collection_info(), "run_id": run.get("id") or "unknown",
                      "generated": run.get("time") or "unknown"}
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    texts = render(report)
    texts["report.json"] = json.dumps(report, indent=2, sort_keys=True, default=str) + "\n"
    return {name: (output_dir / name, _write_if_changed(output_dir / name, text)) for name, text in texts.items()}
