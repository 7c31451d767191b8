#!/usr/bin/python
# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: remediation
short_description: Decide and record what happens to each revalidated GPU node (remediate, hardware service, return)
version_added: 0.3.0
description:
  - Runs on the controller (action plugin), on the day-two database O(db) (SQLite, the same file as
    M(mlplatform.gpunode.bandwidth_history)'s), which keeps each host's remediation state and every step as an
    event, so attempts survive restarts.
  - With O(step=plan), reads each host's finding O(finding_var) (C({conditions, regressions, failures}) as
    C(playbooks/revalidate.yml) publishes it, with the M(mlplatform.gpunode.node_health) conditions, the bandwidth
    history's lines and the validation failures) and its fabric O(fabric_var), and gives every host one action.
    C(none) is healthy. C(return) is healthy again after being out of service. C(hardware_service) has a condition
    with C(remedy=hardware) (Xid 79, a GPU missing, a PCIe link below its width), which a re-run cannot fix; the devices
    are named. C(exhausted) means O(max_attempts) re-runs did not fix it. C(remediate) takes it out of service
    and re-runs the pipeline for it, when fewer than O(max_unavailable) hosts of its fabric are out (a host already
    out does not count twice). C(deferred) waits for the next run because its fabric's budget is used up.
  - Hosts in C(hardware_service) or C(exhausted) are out whatever the budget, and count against it. A host counts
    against the budget until its Node is schedulable again (a host healthy again but still cordoned counts, and so
    does a Node cordoned by anyone).
  - Events are judged against the last handling recorded for the host. An Xid condition of
    M(mlplatform.gpunode.node_health) whose last event (its C(last_seen)) is not after the host's last C(returned)
    event is left out of the plan (RV(plan) C(handled)).
  - Remediation owns only what it did. The plan reads every Node's cordon state (O(kubeconfig), or O(nodes)) and
    records it when it takes a host out; RV(plan) says C(uncordon=true) only for a host whose Node was schedulable
    then, so a Node an administrator had cordoned stays cordoned when its remediation ends.
  - Records of hosts that are neither in the inventory nor a Node of the cluster any more are released, with an
    event C(released) naming each (RV(released)); they hold no budget.
  - The plan reads the records and writes the new ones in one write transaction, so two plans running at once are
    serialised and cannot both take the last slot.
  - With O(step=check), only checks the options (O(max_unavailable), O(max_attempts), O(nodes)) and, read-only,
    that an existing O(db) is the day-two database; a playbook runs it before any host is read. O(step=plan)
    checks them the same way before reading any host.
  - With O(step=record), records the event O(event) for O(hosts) (for example C(drained), C(returned)) and, with
    O(state), sets their state (C(in_service) resets the attempts).
author:
  - mlplatform.gpunode developers (@mlplatform)
attributes:
  check_mode:
    details: Plans and returns the plan; writes nothing (RV(events) is empty).
  platform:
    details: Runs on the controller; it reads the facts the hosts published and writes the database there.
  run_once:
    details: Meant to run once per play over every host of O(hosts).
extends_documentation_fragment:
  - mlplatform.gpunode.controller_action
  - mlplatform.gpunode.controller_action.run_once
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
options:
  step:
    description: C(plan) the hosts' actions, C(record) a step for O(hosts), or C(check) the options only.
    type: str
    choices: [plan, record, check]
    default: plan
  db:
    description: Path of the SQLite database on the controller, created C(0600) (its directory C(0700)) when missing.
    type: path
    required: true
  hosts:
    description: The hosts (default C(ansible_play_hosts)).
    type: list
    elements: str
  finding_var:
    description: With O(step=plan), the host variable holding the host's finding.
    type: str
    default: revalidate_finding
  fabric_var:
    description: With O(step=plan), the host variable naming the host's fabric (none is C(default)).
    type: str
    default: gpunode_fabric
  max_unavailable:
    description: With O(step=plan), hosts of one fabric out of service at once, a whole number from 1 or C(N%) of
      the fabric's known hosts (0 < N <= 100; at least 1 host). Anything else (C("0"), C("150%"), C("two"), C(1.5))
      is refused before any host is read.
    type: raw
    default: 1
  kubeconfig:
    description: With O(step=plan), the kubeconfig on the controller to read the Nodes' cordon state with (default
      the client's, C($KUBECONFIG) or C(~/.kube/config)). Not read when O(nodes) is given.
    type: path
  context:
    description: With O(step=plan), the kubeconfig context (default its current context).
    type: str
  nodes:
    description:
      - With O(step=plan), the Nodes instead of reading them from the API server, as a list of Node objects (as
        C(kubernetes.core.k8s_info) returns them) or a mapping of Node name to C({unschedulable}).
    type: raw
  node_name_var:
    description: With O(step=plan), the host variable naming the host's Node (none is the inventory name).
    type: str
    default: validation_node_name
  max_attempts:
    description: With O(step=plan), pipeline re-runs for a host before it is left out of service (C(exhausted)).
    type: int
    default: 3
  event:
    description: With O(step=record), the step to record for each host (a word such as C(drained)).
    type: str
  state:
    description: With O(step=record), the state the hosts are in now.
    type: str
    choices: [in_service, remediating, hardware_service, exhausted]
  details:
    description: With O(step=record), the event's detail, one string for all hosts or host to string.
    type: raw
  run:
    description: The run's id (default C($GPUNODE_RUN_ID), else C(run-<UTC time>)).
    type: str
notes:
  - Fails naming the host when a host has no O(finding_var), or a finding is not C({conditions, regressions,
    failures}) lists; naming the option for a bad O(max_unavailable), O(max_attempts), O(state), O(step) or O(nodes);
    naming the database when it cannot be opened, or is not the day-two database (the file is then left as it is).
    Fails when the Nodes cannot be read. Nothing is written then.
  - "Node conditions and the drain: Kubernetes, Safely Drain a Node,
    U(https://kubernetes.io/docs/tasks/administer-cluster/safely-drain-node/)."
seealso:
  - module: mlplatform.gpunode.bandwidth_history
  - module: mlplatform.gpunode.node_conditions
  - module: mlplatform.gpunode.node_health
  - module: kubernetes.core.k8s_drain
"""

EXAMPLES = r"""
- name: Plan what happens to each revalidated host
  mlplatform.gpunode.remediation:
    db: /var/lib/gpunode-hook/history.sqlite
    max_unavailable: 1
    max_attempts: 3
  register: remediation
  run_once: true

- name: Record that the hosts were drained
  mlplatform.gpunode.remediation:
    step: record
    db: /var/lib/gpunode-hook/history.sqlite
    hosts: "{{ remediation.by_action.remediate }}"
    event: drained
  run_once: true
"""

RETURN = r"""
plan:
  description:
    - With O(step=plan), host to C({action, state, attempts, fabric, reasons, waits_for, hardware, message,
      cordoned_before, uncordon, returned_detail, handled}).
      C(state) is the state after the action; C(attempts) counts this run's re-run for C(remediate); C(reasons) are
      the finding's lines; C(waits_for) names the peers with findings of their own that a host deferred for them
      waits for; C(hardware) lists C({type, device, message}) of the conditions only hardware service fixes.
    - C(cordoned_before) is whether the host's Node was cordoned when remediation took it out (null when not known
      or not out); C(uncordon) is true only when returning the host may uncordon its Node (remediation cordoned it).
      C(returned_detail) is the event text recorded when the host is back in service, saying whether its Node was
      uncordoned or stays cordoned and why.
    - C(handled) lists the Xid conditions left out because their last event is not after the host's last return to
      service (the last C(returned) event recorded), so an old event judged once makes no new remediation.
  returned: when step is plan
  type: dict
  sample: {hgx1: {action: remediate, state: remediating, attempts: 1, fabric: east, hardware: [], waits_for: [],
                  reasons: ["RailRoceAcclDrift: rail 2 NIC 0000:3b:00.0 ..."], cordoned_before: false,
                  uncordon: true, returned_detail: "revalidated and back in service (uncordoned, untainted)",
                  message: "remediation attempt 1 of 3: the pipeline re-runs for it"}}
by_action:
  description: With O(step=plan), each action (none, return, remediate, hardware_service, exhausted, deferred) to
    its hosts, sorted.
  returned: when step is plan
  type: dict
  sample: {none: [dgx1], return: [], remediate: [hgx1], hardware_service: [], exhausted: [], deferred: []}
released:
  description: With O(step=plan), the recorded hosts that are neither in the inventory nor a Node any more, whose
    records were released (in check mode, that would be).
  returned: when step is plan
  type: list
  elements: str
options:
  description: With O(step=check), the options as checked (C(max_unavailable), C(max_attempts), C(nodes)).
  returned: when step is check
  type: dict
events:
  description: The events written, each C({time, run, host, step, detail}) (C(time) in seconds since the epoch).
  returned: always
  type: list
  elements: dict
run:
  description: The run id the events carry.
  returned: always
  type: str
"""
