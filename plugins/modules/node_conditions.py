#!/usr/bin/python
# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_conditions
short_description: Set conditions on Kubernetes Nodes through their status subresource
version_added: 0.3.0
description:
  - Runs on the controller (action plugin), with the C(kubernetes) Python client that C(kubernetes.core) uses. Reads
    each Node of O(nodes) once and, when a given condition differs from the Node's (its status, reason or message),
    sends one strategic merge patch to C(nodes/<name>/status). Conditions merge by C(type), so the kubelet's
    (C(Ready), C(MemoryPressure) ...) and Node Problem Detector's stay as they are.
  - C(lastTransitionTime) is kept while a condition's status stays the same; C(lastHeartbeatTime) is the time of
    the write.
  - kubernetes.core's modules write an object's main resource, which cannot change a Node's status; that is why this
    action exists.
author:
  - mlplatform.gpunode developers (@mlplatform)
attributes:
  check_mode:
    details: Reads the Nodes and returns the conditions it would write, writes nothing.
  platform:
    details: Runs on the controller and talks to the API server from there.
extends_documentation_fragment:
  - mlplatform.gpunode.controller_action
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
options:
  nodes:
    description:
      - Node name to the conditions to set, each C({type, status, reason, message}). C(type) and C(reason) are
        CamelCase words, C(status) is C(True), C(False) or C(Unknown), C(message) is cut to 1024 characters.
    type: dict
    required: true
  kubeconfig:
    description: Path of the kubeconfig on the controller (default the client's, C($KUBECONFIG) or C(~/.kube/config)).
    type: path
  context:
    description: The kubeconfig context (default its current context).
    type: str
notes:
  - Fails naming the Node and the condition for a bad type, status or reason (before anything is written). Every
    Node is read before any is patched, so a Node that does not exist (all of them are named) fails the task with
    nothing written; a patch the API server refuses is named with the Nodes patched before it.
  - "Node conditions: U(https://kubernetes.io/docs/reference/node/node-status/#condition); the status
    subresource: U(https://kubernetes.io/docs/reference/using-api/api-concepts/#patch-and-apply)."
requirements:
  - kubernetes (Python library, on the controller)
seealso:
  - module: mlplatform.gpunode.remediation
  - module: kubernetes.core.k8s_drain
"""

EXAMPLES = r"""
- name: Tell the cluster a rail of this node regressed
  mlplatform.gpunode.node_conditions:
    kubeconfig: /etc/gpunode/admin.conf
    nodes:
      hgx1:
        - type: RailBandwidthRegression
          status: "True"
          reason: BelowBaseline
          message: "hgx1 rail 3 (as client, peer dgx1 rail 3): 192 Gb/s is 50% below its own baseline 384 Gb/s"
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
nodes:
  description: Node name to C({changed, conditions}), C(conditions) being those written (or, in check mode, that
    would be), each with C(lastHeartbeatTime) and C(lastTransitionTime).
  returned: always
  type: dict
  sample: {hgx1: {changed: true, conditions: [{type: RailBandwidthRegression, status: "True", reason: BelowBaseline,
                                               message: "...", lastHeartbeatTime: "2026-12-03T08:00:00Z",
                                               lastTransitionTime: "2026-12-03T08:00:00Z"}]}}
"""
