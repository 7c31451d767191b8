#!/usr/bin/python
# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: checks
short_description: Several input checks of a role in one task, each with its own failure message
version_added: 0.2.0
description:
  - Runs on the controller (action plugin). Checks O(checks) in order, as that many C(ansible.builtin.assert) and
    C(ansible.builtin.fail) tasks one after the other would, and fails at the first one that does not hold, with
    that check's message. The checks after it are not evaluated, so a check may rely on the ones before it (for
    example that a variable is defined).
  - "Why one task: Ansible forks a worker process for every task line and host, and each line costs a fleet run
    about 10-20 ms a host even when it only compares variables. A role's preflight checks are many such lines."
  - A condition is evaluated exactly as an C(ansible.builtin.assert) C(that) entry (the same templating and the
    same error when it does not give a boolean). A message is templated only when its check fails.
author:
  - mlplatform.gpunode developers (@mlplatform)
attributes:
  check_mode:
    details: It only evaluates conditions on the controller; the same in check mode.
  platform:
    details: Runs on the controller; no host round trip.
extends_documentation_fragment:
  - mlplatform.gpunode.controller_action
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
options:
  checks:
    description:
      - The checks, in the order they are evaluated. Each has either O(checks[].that) (it fails when a condition is
        false, as C(ansible.builtin.assert)) or O(checks[].fail_when) (it fails when the condition is true, as
        C(ansible.builtin.fail) with C(when)), and a O(checks[].msg).
      - Given as a list in the task, not as a template; its conditions and messages are templated one by one.
    type: list
    elements: dict
    required: true
    suboptions:
      that:
        description: Conditions (Jinja expressions without braces, or booleans) that must all be true.
        type: list
        elements: str
      fail_when:
        description: A condition that, when true, fails the check.
        type: str
      when:
        description: Conditions that must all be true for the check to be made at all (otherwise it is passed over).
        type: list
        elements: str
      msg:
        description: The failure message; templated only when the check fails.
        type: str
        required: true
seealso:
  - module: ansible.builtin.assert
  - module: ansible.builtin.fail
"""

EXAMPLES = r"""
- name: Preflight | Check the inputs
  mlplatform.gpunode.checks:
    checks:
      - that: sriov_vfs_per_role is mapping
        msg: "{{ inventory_hostname }}: sriov_vfs_per_role must map a NIC role to a VF count"
      - fail_when: (sriov_vfs_per_role.keys() | difference(__sriov_roles)) | length > 0
        msg: >-
          {{ inventory_hostname }}: sriov_vfs_per_role names NIC roles that do not exist:
          {{ sriov_vfs_per_role.keys() | difference(__sriov_roles) | join(', ') }}
      - when: sriov_vfs_per_role | length > 0
        that: [gpunode_hw is defined]
        msg: "{{ inventory_hostname }}: run the discovery role first"
"""

RETURN = r"""
msg:
  description: The failing check's message, or C(All checks passed).
  returned: always
  type: str
  sample: "gpu-a01: sriov_vfs_per_role must map a NIC role to a VF count"
checked:
  description: How many checks were evaluated (passed over ones, whose O(checks[].when) was false, not counted).
  returned: always
  type: int
  sample: 3
failed_check:
  description: The position (from 0) in O(checks) of the check that failed.
  returned: failed
  type: int
  sample: 1
assertion:
  description: The condition that failed (a O(checks[].that) entry, or the O(checks[].fail_when) condition).
  returned: failed
  type: str
  sample: sriov_vfs_per_role is mapping
"""
