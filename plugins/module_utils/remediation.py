# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Day-two remediation: what to do with each revalidated host (pure functions, stdlib only).

The input is this run's findings per host (the ``node_health`` conditions, the bandwidth history's lines and the
validation role's failures) and what earlier runs recorded per host (``state``, ``attempts``, ``fabric``).
The plan gives every host of the run one action:

- ``none``: healthy and in service;
- ``return``: healthy again after being out (remediated, repaired, or passing on its own): uncordon, untaint;
- ``remediate``: out of service (taint, cordon, drain), then the pipeline re-run for it, then revalidated;
- ``hardware_service``: a condition a re-run cannot fix (``remedy: hardware``: Xid 79, a PCIe link below its
  width, a missing GPU ...): out of service, no re-run, the devices named;
- ``exhausted``: ``max_attempts`` re-runs did not fix it: left out of service with the reason;
- ``deferred``: it needs remediation but ``max_unavailable`` hosts of its fabric are already out, or its only
  findings are bandwidth results against a peer that has findings of its own (a drifted peer fails the test on
  both ends: the peer is fixed first, and this host is judged again in the next run).

States recorded per host: ``in_service``, ``remediating``, ``hardware_service``, ``exhausted``. A host out of
service counts against its fabric's ``max_unavailable`` until it returns; ``hardware_service`` and
``exhausted`` hosts are taken out whatever the budget (they are broken either way), and count against it.
"""

from __future__ import annotations

import math

OUT_STATES = ("remediating", "hardware_service", "exhausted")
ACTIONS = ("none", "return", "remediate", "hardware_service", "exhausted", "deferred")
# The state an action leaves the host in.
# (A deferred host keeps the state it had.)
STATE_AFTER = {"none": "in_service", "return": "in_service", "remediate": "remediating",
               "hardware_service": "hardware_service", "exhausted": "exhausted"}


class RemediationError(ValueError):
    """Input the plan cannot use; the message names the host and the field."""


def budget(max_unavailable, fabric_size):
    """Hosts of a fabric that may be out at once: an int, or ``"N%"`` of the fabric's hosts (at least 1)."""
    text = str(max_unavailable).strip()
    if text.endswith("%"):
        try:
            pct = float(text[:-1])
        except ValueError:
            raise RemediationError(f"max_unavailable: {max_unavailable!r} is not a count or a percentage") from None
        if not 0 < pct <= 100:
            raise RemediationError(f"max_unavailable: {max_unavailable!r} is not a percentage in (0, 100]")
        return max(1, math.floor(fabric_size * pct / 100))
    try:
        count = int(text)
    except ValueError:
        raise RemediationError(f"max_unavailable: {max_unavailable!r} is not a count or a percentage") from None
    if count < 1:
        raise RemediationError(f"max_unavailable: {max_unavailable!r} must be at least 1")
    return count


def reasons_of(finding):
    """Every line of a host's finding: its conditions (``type: message``), regressions and failures, no repeats."""
    lines = [f"{c.get('type')}: {c.get('message')}" for c in finding.get("conditions") or []]
    lines += [str(x) for x in (finding.get("regressions") or [])]
    lines += [str(x) for x in (finding.get("failures") or [])]
    return list(dict.fromkeys(lines))


def own_findings(finding):
    """Whether a finding is the host's own (node_health conditions or failed node checks), not only bandwidth
    results that a peer may explain."""
    return bool(finding.get("conditions") or finding.get("checks"))


def hardware_conditions(finding):
    """The conditions of a finding only hardware service can fix (``remedy: hardware``)."""
    return [c for c in finding.get("conditions") or [] if c.get("remedy") == "hardware"]


def _check(findings, fabrics, records):
    if not isinstance(findings, dict):
        raise RemediationError("findings: expected a mapping of host to its findings")
    for host, finding in findings.items():
        if not isinstance(finding, dict):
            raise RemediationError(f"{host}: findings: expected a mapping (conditions, regressions, failures)")
        for key in ("conditions", "regressions", "failures", "checks", "peers"):
            if not isinstance(finding.get(key) or [], list):
                raise RemediationError(f"{host}: findings.{key}: expected a list")
        if host not in fabrics:
            raise RemediationError(f"{host}: no fabric (gpunode_fabric) for the host")
    for host, record in records.items():
        if record.get("state") not in ("in_service", *OUT_STATES):
            raise RemediationError(f"{host}: recorded state {record.get('state')!r} is not one of in_service, "
                                   f"{', '.join(OUT_STATES)}")


def plan(findings, fabrics, records, *, max_unavailable=1, max_attempts=3):
    """The action for every host of this run.

    ``findings``: host -> ``{conditions: [node_health condition], regressions: [line], failures: [line], checks:
    [failed node check], peers: [host]}`` for every host revalidated in this run (all empty: healthy); ``peers`` are
    the hosts its failed or regressed rails were measured against, ``checks`` its own failed read-back checks.
    ``fabrics``: host -> fabric name, for the hosts of this run.
    ``records``: host -> ``{state, attempts, fabric}`` from earlier runs (any host, also hosts not in this run).
    Returns host -> ``{action, state, attempts, fabric, reasons, waits_for, hardware, message}``: ``attempts``
    counts this run's re-run when the action is ``remediate``; ``waits_for`` names the peers a host deferred for
    them waits for; ``hardware`` lists ``{type, device, message}`` of hardware conditions.
    """
    records = records or {}
    _check(findings, fabrics, records)
    if int(max_attempts) < 1:
        raise RemediationError(f"max_attempts: {max_attempts!r} must be at least 1")
    sizes = {}
    for host in set(fabrics) | {h for h, r in records.items() if r.get("fabric")}:
        fabric = str(fabrics.get(host, records.get(host, {}).get("fabric")))
        sizes[fabric] = sizes.get(fabric, 0) + 1
    # Hosts out of service now, per fabric; a host of this run that is healthy again leaves it first.
    out = {}
    for host, record in records.items():
        healthy_now = host in findings and not reasons_of(findings[host])
        if record.get("state") in OUT_STATES and not healthy_now:
            fabric = str(fabrics.get(host, record.get("fabric")))
            out.setdefault(fabric, set()).add(host)
    result = {}

    def message(host, action, attempts, hardware):
        if action == "return":
            return f"healthy again after {records[host].get('state')}: back in service"
        if action == "remediate":
            return f"remediation attempt {attempts} of {max_attempts}: the pipeline re-runs for it"
        if action == "hardware_service":
            return "needs hardware service: " + "; ".join(f"{c['type']} on {c['device']}" for c in hardware)
        if action == "exhausted":
            return f"left out of service: {attempts} remediation attempts did not fix it"
        if action == "peer":
            return ("waits: only its bandwidth results failed, against " + ", ".join(blamed_peers[host])
                    + ", which have findings of their own; judged again once they pass")
        if action == "deferred":
            return (f"waits: {budget(max_unavailable, sizes[str(fabrics[host])])} host(s) of fabric {fabrics[host]} "
                    "are out already (max_unavailable)")
        return "healthy"

    def decide(host, action, reasons, attempts, hardware=()):
        """Record ``action`` for ``host`` (``peer``: deferred until the peers it failed against pass)."""
        text = message(host, action, attempts, hardware)
        waits_for = blamed_peers[host] if action == "peer" else []
        action = "deferred" if action == "peer" else action
        state = records.get(host, {}).get("state", "in_service") if action == "deferred" else STATE_AFTER[action]
        result[host] = {"action": action, "state": state, "attempts": attempts, "fabric": str(fabrics[host]),
                        "reasons": reasons, "waits_for": waits_for,
                        "hardware": [{"type": c.get("type"), "device": c.get("device"), "message": c.get("message")}
                                     for c in hardware], "message": text}

    owners = {h for h, f in findings.items() if own_findings(f)}
    blamed_peers = {h: sorted(set(f.get("peers") or []) & owners) for h, f in findings.items()
                    if not own_findings(f) and set(f.get("peers") or []) & owners}
    failing = []
    for host in sorted(findings):
        finding = findings[host]
        record = records.get(host, {})
        attempts = int(record.get("attempts") or 0)
        reasons = reasons_of(finding)
        fabric = str(fabrics[host])
        if not reasons:
            decide(host, "return" if record.get("state") in OUT_STATES else "none", [], 0)
            continue
        hardware = hardware_conditions(finding)
        if hardware:
            out.setdefault(fabric, set()).add(host)
            decide(host, "hardware_service", reasons, attempts, hardware)
        elif attempts >= int(max_attempts):
            out.setdefault(fabric, set()).add(host)
            decide(host, "exhausted", reasons, attempts)
        else:
            failing.append(host)
    # Hosts already out first (they take no new budget), then hosts with findings of their own, then by name.
    failing.sort(key=lambda h: (h not in out.get(str(fabrics[h]), set()), h not in owners, h))
    for host in failing:
        fabric = str(fabrics[host])
        members = out.setdefault(fabric, set())
        attempts = int(records.get(host, {}).get("attempts") or 0)
        if host in blamed_peers and host not in members:
            decide(host, "peer", reasons_of(findings[host]), attempts)
        elif host in members or len(members) < budget(max_unavailable, sizes[fabric]):
            members.add(host)
            decide(host, "remediate", reasons_of(findings[host]), attempts + 1)
        else:
            decide(host, "deferred", reasons_of(findings[host]), attempts)
    return result


GPU_RESOURCE_PREFIXES = ("nvidia.com/gpu", "nvidia.com/mig-")


def _gpu_count(container):
    resources = (container or {}).get("resources") or {}
    total = 0
    for part in ("limits", "requests"):
        for name, value in ((resources.get(part) or {}).items()):
            if name.startswith(GPU_RESOURCE_PREFIXES):
                try:
                    total = max(total, int(str(value)))
                except ValueError:
                    total = max(total, 1)
    return total


def busy_nodes(pods, nodes, annotation):
    """Node name -> why it is not idle: pods that are not finished and ask for GPUs (``nvidia.com/gpu`` or a MIG
    resource) in a container, or the Node annotation ``annotation`` set to ``"false"`` (an operator's "do not
    revalidate now"). Nodes that are idle are not in it."""
    out = {}
    for pod in pods or []:
        meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        node = spec.get("nodeName")
        if not node or status.get("phase") in ("Succeeded", "Failed"):
            continue
        if any(_gpu_count(c) for c in (spec.get("containers") or []) + (spec.get("initContainers") or [])):
            out.setdefault(node, []).append(f"{meta.get('namespace', 'default')}/{meta.get('name')}")
    reasons = {node: "GPU pods " + ", ".join(sorted(names)) for node, names in out.items()}
    for node in nodes or []:
        meta = node.get("metadata") or {}
        if str((meta.get("annotations") or {}).get(annotation, "")).lower() == "false":
            name = meta.get("name")
            reasons[name] = "; ".join(filter(None, (reasons.get(name), f"annotation {annotation}=false")))
    return reasons
