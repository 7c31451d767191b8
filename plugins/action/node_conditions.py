# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller side of ``mlplatform.gpunode.node_conditions`` (documentation: plugins/modules/node_conditions.py).

kubernetes.core's modules write an object's main resource only; a Node's conditions live in its ``status``
subresource, which the API server keeps apart (writes to the main resource leave the status as it was). This
action uses the ``kubernetes`` client kubernetes.core is built on (its dynamic client, with the same kubeconfig
handling) to read each Node once and send one strategic merge patch to ``nodes/<name>/status`` per Node whose
conditions differ: conditions merge by ``type``, so the kubelet's and Node Problem Detector's stay as they are.
"""

from __future__ import annotations

import datetime

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase


def _client_library():
    """``(kubernetes, DynamicClient, ApiException)``, imported when a task runs (the library takes about half a
    second to import; every ansible-playbook run loads this plugin, few of them patch Node conditions)."""
    try:
        import kubernetes
        import kubernetes.config
        from kubernetes.dynamic import DynamicClient
        from kubernetes.dynamic.exceptions import ApiException
    except ImportError:  # pragma: no cover - kubernetes.core needs the same library
        return None, None, None
    return kubernetes, DynamicClient, ApiException


STATUSES = ("True", "False", "Unknown")
MESSAGE_MAX = 1024


def desired_conditions(name, conditions):
    """The conditions to set on Node ``name``, checked: ``[{type, status, reason, message}]`` (message cut to
    MESSAGE_MAX characters)."""
    if not isinstance(conditions, list):
        raise AnsibleActionFail(f"node_conditions: {name}: expected a list of conditions")
    out, seen = [], set()
    for index, cond in enumerate(conditions):
        where = f"node_conditions: {name}: conditions[{index}]"
        if not isinstance(cond, dict):
            raise AnsibleActionFail(f"{where} is not a mapping")
        ctype, status, reason = cond.get("type"), str(cond.get("status", "")), cond.get("reason")
        if not isinstance(ctype, str) or not ctype or not ctype[0].isupper():
            raise AnsibleActionFail(f"{where}.type {ctype!r} is not a CamelCase condition type")
        if ctype in seen:
            raise AnsibleActionFail(f"{where}.type {ctype} is given twice")
        seen.add(ctype)
        if status not in STATUSES:
            raise AnsibleActionFail(f"{where} ({ctype}).status {status!r} is not one of {', '.join(STATUSES)}")
        if not isinstance(reason, str) or not reason or not reason.replace("_", "").isalnum():
            raise AnsibleActionFail(f"{where} ({ctype}).reason {reason!r} is not a CamelCase word")
        out.append({"type": ctype, "status": status, "reason": reason,
                    "message": str(cond.get("message") or "")[:MESSAGE_MAX]})
    return out


def condition_patch(existing, desired, now):
    """The status patch for one Node: the desired conditions that differ from ``existing`` (type -> condition),
    with ``lastTransitionTime`` kept while the status stays and ``lastHeartbeatTime`` now; ``[]`` when none differ."""
    changed = []
    for cond in desired:
        old = existing.get(cond["type"]) or {}
        if all(old.get(k) == cond[k] for k in ("status", "reason", "message")):
            continue
        transition = old.get("lastTransitionTime") if old.get("status") == cond["status"] else None
        changed.append({**cond, "lastHeartbeatTime": now, "lastTransitionTime": transition or now})
    return changed


class ActionModule(ActionBase):
    """Set conditions on Nodes through their status subresource."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("nodes", "kubeconfig", "context"))

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)  # refuses an option outside _VALID_ARGS, naming it
        args = self._task.args
        nodes = args.get("nodes")
        if not isinstance(nodes, dict) or not nodes:
            raise AnsibleActionFail("node_conditions: nodes must map Node names to their conditions")
        wanted = {str(name): desired_conditions(name, conds) for name, conds in nodes.items()}
        kubernetes, DynamicClient, ApiException = _client_library()
        if kubernetes is None:
            raise AnsibleActionFail("node_conditions: the kubernetes Python library is missing on the controller "
                                    "(kubernetes.core needs it too)")
        try:
            client = DynamicClient(kubernetes.config.new_client_from_config(
                config_file=args.get("kubeconfig") or None, context=args.get("context") or None))
            api = client.resources.get(api_version="v1", kind="Node")
        except Exception as exc:  # noqa: BLE001 - any client or kubeconfig error, reported with its text
            raise AnsibleActionFail(f"node_conditions: cannot reach the API server: {exc}") from None
        now = datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        # Every Node is read and checked before any is patched: a missing one fails the task with nothing written.
        found, problems = {}, []
        for name in sorted(wanted):
            try:
                found[name] = api.get(name=name).to_dict()
            except ApiException as exc:
                problems.append(f"no Node named {name} in the cluster" if exc.status == 404
                                else f"{name}: reading the Node failed: {exc.status} {exc.reason}")
        if problems:
            raise AnsibleActionFail("node_conditions: " + "; ".join(problems) + "; no Node was patched")
        out, written = {}, []
        for name, desired in sorted(wanted.items()):
            existing = {c.get("type"): c for c in (found[name].get("status") or {}).get("conditions") or []}
            patch = condition_patch(existing, desired, now)
            if patch and not self._task.check_mode:
                try:
                    api.status.patch(name=name, body={"status": {"conditions": patch}},
                                     content_type="application/strategic-merge-patch+json")
                except ApiException as exc:
                    done = f"patched before it: {', '.join(written)}" if written else "no Node was patched before it"
                    raise AnsibleActionFail(f"node_conditions: {name}: patching nodes/{name}/status failed: "
                                            f"{exc.status} {exc.reason} ({done})") from None
                written.append(name)
            out[name] = {"changed": bool(patch), "conditions": patch}
        result.update(changed=any(v["changed"] for v in out.values()), nodes=out)
        return result
