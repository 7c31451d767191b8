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
service, or whose Node is cordoned, counts against its fabric's ``max_unavailable`` until it is schedulable
again; ``hardware_service`` and ``exhausted`` hosts are taken out whatever the budget (they are broken either way),
and count against it.

Remediation owns only what it did: the cordon state of a Node when remediation took its host out is recorded
(``cordoned_before``), and a host returns with ``uncordon`` only when its Node was schedulable then.
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


def parse_max_unavailable(value):
    """``max_unavailable`` checked: ``("count", n)`` for a whole number of hosts (at least 1) or ``("pct", p)`` for
    ``"N%"`` of a fabric's hosts (0 < N <= 100); RemediationError naming the option otherwise."""
    if isinstance(value, bool) or value is None or isinstance(value, (list, dict)):
        raise RemediationError(f"max_unavailable: {value!r} is not a count or a percentage")
    if isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            raise RemediationError(f"max_unavailable: {value!r} is not a whole number of hosts")
        value = int(value)
    text = str(value).strip()
    if text.endswith("%"):
        try:
            pct = float(text[:-1])
        except ValueError:
            raise RemediationError(f"max_unavailable: {value!r} is not a count or a percentage") from None
        if not math.isfinite(pct) or not 0 < pct <= 100:
            raise RemediationError(f"max_unavailable: {value!r} is not a percentage in (0, 100]")
        return ("pct", pct)
    if not text.isdigit() or not text.isascii():
        raise RemediationError(f"max_unavailable: {value!r} is not a count or a percentage")
    count = int(text)
    if count < 1:
        raise RemediationError(f"max_unavailable: {value!r} must be at least 1")
    return ("count", count)


def parse_max_attempts(value):
    """``max_attempts`` checked: a whole number from 1."""
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).strip().isdigit():
        raise RemediationError(f"max_attempts: {value!r} is not a whole number")
    count = int(str(value).strip())
    if count < 1:
        raise RemediationError(f"max_attempts: {value!r} must be at least 1")
    return count


def budget(max_unavailable, fabric_size):
    """Hosts of a fabric that may be out at once: an int, or ``"N%"`` of the fabric's hosts (at least 1)."""
    kind, number = parse_max_unavailable(max_unavailable)
    if kind == "pct":
        return max(1, math.floor(fabric_size * number / 100))
    return number


def released(records, known_hosts, node_hosts=None):
    """The recorded hosts that no longer exist: not in the inventory (``known_hosts``) and, when the Nodes were
    read (``node_hosts``, the hosts that have a Node), without a Node either. Their records hold no budget."""
    return sorted(h for h in records if h not in known_hosts and (node_hosts is None or h not in node_hosts))


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


def judged_now(finding, record):
    """``(finding, handled)``: the finding without the Xid conditions whose last event is not after the last
    handling recorded for the host (``record['handled_at']``, seconds since the epoch: its last return to service),
    and those conditions. An old event judged once does not make a new remediation."""
    handled_at = (record or {}).get("handled_at")
    if handled_at is None:
        return finding, []
    keep, handled = [], []
    for cond in finding.get("conditions") or []:
        seen = cond.get("last_seen") if isinstance(cond, dict) else None
        if cond.get("check") == "xid" and isinstance(seen, (int, float)) and seen <= handled_at:
            handled.append(cond)
        else:
            keep.append(cond)
    return {**finding, "conditions": keep}, handled


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


def plan(findings, fabrics, records, *, max_unavailable=1, max_attempts=3, nodes=None):
    """The action for every host of this run.

    ``findings``: host -> ``{conditions: [node_health condition], regressions: [line], failures: [line], checks:
    [failed node check], peers: [host]}`` for every host revalidated in this run (all empty: healthy); ``peers`` are
    the hosts its failed or regressed rails were measured against, ``checks`` its own failed read-back checks.
    ``fabrics``: host -> fabric name, for the hosts of this run (and any other host of the inventory, which then
    counts in its fabric's size and, cordoned, against its budget).
    ``records``: host -> ``{state, attempts, fabric, cordoned_before, handled_at}`` from earlier runs (any host, also
    hosts not in this run); ``cordoned_before`` is whether its Node was cordoned when remediation took it out (None:
    unknown); ``handled_at`` the time it last returned to service: an Xid condition whose last event is not after it
    was handled then and is left out (``handled`` in the entry), see judged_now.
    ``nodes``: host -> ``{unschedulable: bool}`` for the hosts whose Node was read now (None: not read).

    A host counts against its fabric's ``max_unavailable`` while it is recorded out of service or its Node is
    unschedulable (cordoned, by anyone): a host that is healthy again counts until it is schedulable again, so its
    return in this run frees no slot for another host in the same run.
    Returns host -> ``{action, state, attempts, fabric, reasons, waits_for, hardware, message, cordoned_before,
    uncordon}``: ``attempts`` counts this run's re-run when the action is ``remediate``; ``waits_for`` names the
    peers a host deferred for them waits for; ``hardware`` lists ``{type, device, message}`` of hardware
    conditions; ``uncordon`` is whether returning the host may uncordon its Node (only when remediation found it
    schedulable before it cordoned it).
    """
    spec = parse_max_unavailable(max_unavailable)
    max_attempts = parse_max_attempts(max_attempts)
    records = records or {}
    _check(findings, fabrics, records)
    handled = {}
    findings = dict(findings)
    for host in findings:
        findings[host], handled[host] = judged_now(findings[host], records.get(host))
    if nodes is not None and not isinstance(nodes, dict):
        raise RemediationError("nodes: expected a mapping of host to {unschedulable}")
    nodes = nodes or {}

    def fabric_of(host):
        return str(fabrics.get(host, (records.get(host) or {}).get("fabric")))

    def allowed(fabric):
        return budget(max_unavailable, sizes[fabric]) if spec[0] == "pct" else spec[1]

    sizes = {}
    for host in set(fabrics) | {h for h, r in records.items() if r.get("fabric")}:
        sizes[fabric_of(host)] = sizes.get(fabric_of(host), 0) + 1
    # Hosts unavailable now, per fabric: recorded out of service (healthy again or not: they are out until they
    # are schedulable again), or a Node that is not schedulable.
    out = {}
    for host, record in records.items():
        if record.get("state") in OUT_STATES:
            out.setdefault(fabric_of(host), set()).add(host)
    for host, node in nodes.items():
        if (node or {}).get("unschedulable") and (host in fabrics or host in records):
            out.setdefault(fabric_of(host), set()).add(host)
    result = {}

    def cordoned_before(host):
        record = records.get(host) or {}
        if record.get("state") in OUT_STATES:
            value = record.get("cordoned_before")
            return None if value is None else bool(value)
        if host in nodes:
            return bool((nodes[host] or {}).get("unschedulable"))
        return None

    def cordon_note(host):
        before = cordoned_before(host)
        if before is None:
            return "; its Node stays cordoned: whether it was cordoned before remediation is not known"
        if before:
            return "; its Node stays cordoned: it was cordoned before remediation took it out"
        return ""

    def returned_detail(host, uncordon):
        """The event recorded when the host is back in service: what returning it did to its Node."""
        if uncordon:
            return "revalidated and back in service (uncordoned, untainted)"
        return "revalidated and back in service (untainted)" + cordon_note(host)

    def message(host, action, attempts, hardware):
        if action == "return":
            return f"healthy again after {records[host].get('state')}: back in service" + cordon_note(host)
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
            fabric = fabric_of(host)
            return (f"waits: {allowed(fabric)} host(s) of fabric {fabrics[host]} are out already "
                    f"(max_unavailable): {', '.join(sorted(out.get(fabric, ())))}")
        return "healthy"

    def decide(host, action, reasons, attempts, hardware=()):
        """Record ``action`` for ``host`` (``peer``: deferred until the peers it failed against pass)."""
        text = message(host, action, attempts, hardware)
        waits_for = blamed_peers[host] if action == "peer" else []
        action = "deferred" if action == "peer" else action
        state = records.get(host, {}).get("state", "in_service") if action == "deferred" else STATE_AFTER[action]
        before = cordoned_before(host) if state in OUT_STATES or action == "return" else None
        uncordon = action in ("return", "remediate") and before is False
        result[host] = {"action": action, "state": state, "attempts": attempts, "fabric": str(fabrics[host]),
                        "reasons": reasons, "waits_for": waits_for,
                        "hardware": [{"type": c.get("type"), "device": c.get("device"), "message": c.get("message")}
                                     for c in hardware], "message": text,
                        "handled": [f"{c.get('type')}: {c.get('message')}" for c in handled.get(host, [])],
                        "cordoned_before": before,
                        "uncordon": uncordon, "returned_detail": returned_detail(host, uncordon)}

    owners = {h for h, f in findings.items() if own_findings(f)}
    blamed_peers = {h: sorted(set(f.get("peers") or []) & owners) for h, f in findings.items()
                    if not own_findings(f) and set(f.get("peers") or []) & owners}
    failing = []
    for host in sorted(findings):
        finding = findings[host]
        record = records.get(host, {})
        attempts = int(record.get("attempts") or 0)
        reasons = reasons_of(finding)
        fabric = fabric_of(host)
        if not reasons:
            decide(host, "return" if record.get("state") in OUT_STATES else "none", [], 0)
            continue
        hardware = hardware_conditions(finding)
        if hardware:
            out.setdefault(fabric, set()).add(host)
            decide(host, "hardware_service", reasons, attempts, hardware)
        elif attempts >= max_attempts:
            out.setdefault(fabric, set()).add(host)
            decide(host, "exhausted", reasons, attempts)
        else:
            failing.append(host)
    # Hosts already out first (they take no new budget), then hosts with findings of their own, then by name.
    failing.sort(key=lambda h: (h not in out.get(fabric_of(h), set()), h not in owners, h))
    for host in failing:
        fabric = fabric_of(host)
        members = out.setdefault(fabric, set())
        attempts = int(records.get(host, {}).get("attempts") or 0)
        if host in blamed_peers and host not in members:
            decide(host, "peer", reasons_of(findings[host]), attempts)
        elif host in members or len(members) < allowed(fabric):
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
