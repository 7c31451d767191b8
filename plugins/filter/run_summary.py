# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The run summary of site.yml: one line per host (stage reached, settings changed, reboot,
validation verdict), from the facts and registered results the stages leave, in one pass."""

from __future__ import annotations

# (stage, variable whose presence says the host got through it), in pipeline order.
STAGES = (("discover", "gpunode_hw"), ("install", "gpu_driver_installed_version"),
          ("configure", "nic_firmware_contract"), ("reboot", "node_reboot_result"),
          ("network", "roce_qos_contract"), ("join", "kubernetes_node_registered"),
          ("validate", "validation_result"))
# (what changed, registered result of the stage's module)
CHANGES = (("packages", "__ofed_install"), ("driver", "__gpu_driver_install"),
           ("adaptive routing", "__nic_firmware_roce_accl"), ("VFs", "__sriov_result"), ("QoS", "__roce_qos_result"))


def _get(facts, key):
    try:
        return facts.get(key)
    except Exception:  # noqa: BLE001 - an undefined or failing template means the stage left nothing
        return None


def host_summary(host, facts):
    """``{host, stage, changed: [..], reboot, validation}`` of one host's variables (a mapping)."""
    stage = "not started"
    for name, var in STAGES:
        if _get(facts, var) is not None:
            stage = name
    changed = []
    nv = _get(facts, "__nic_firmware_nv") or {}
    params = sum(len(p) for p in (nv.get("changes") or {}).values()) if isinstance(nv, dict) else 0
    if params:
        changed.append(f"NV config ({params})")
    for label, var in CHANGES:
        result = _get(facts, var)
        if isinstance(result, dict) and result.get("changed"):
            changed.append(label)
    reboot = _get(facts, "node_reboot_result")
    if isinstance(reboot, dict) and reboot:
        if reboot.get("failed"):
            reboot_text = f"failed: {reboot.get('reason') or 'unknown'}"
        else:
            reboot_text = "rebooted, verified" if reboot.get("verified") else "rebooted"
    elif any(_get(facts, f) for f in ("nic_firmware_reboot_required", "ofed_reboot_required",
                                      "gpu_driver_reboot_required")):
        reboot_text = "required, not done (no consent or deferred)"
    else:
        reboot_text = "not needed"
    result = _get(facts, "validation_result")
    if isinstance(result, dict) and result:
        failures = result.get("failures") or []
        validation = "passed" if result.get("passed") else (
            f"failed: {failures[0]}" + (f" (+{len(failures) - 1} more)" if len(failures) > 1 else ""))
    else:
        validation = "not validated"
    return {"host": host, "stage": stage, "changed": changed, "reboot": reboot_text, "validation": validation}


def run_summary(hostvars, hosts):
    """One summary per host of ``hosts`` (``host_summary``), in that order."""
    return [host_summary(host, hostvars[host]) for host in hosts]


def run_summary_lines(summaries):
    """The summaries as aligned text lines, one per host."""
    width = max([len(s["host"]) for s in summaries] + [4])
    stage_width = max([len(s["stage"]) for s in summaries] + [5])
    lines = [f"{'host':<{width}}  {'stage':<{stage_width}}  changed | reboot | validation"]
    for s in summaries:
        lines.append(f"{s['host']:<{width}}  {s['stage']:<{stage_width}}  {', '.join(s['changed']) or 'nothing'}"
                     f" | {s['reboot']} | {s['validation']}")
    return lines


class FilterModule:
    """The run summary filters."""

    def filters(self):
        return {"run_summary": run_summary, "run_summary_lines": run_summary_lines}
