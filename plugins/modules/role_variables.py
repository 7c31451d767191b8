#!/usr/bin/python
# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: role_variables
short_description: Warn about variables with a role's prefix that the role does not know (typos)
version_added: 0.2.0
description:
  - Runs on the controller (action plugin), as the first task of each of the collection's roles. A variable that
    carries the role's prefix but is neither an option of the role's C(meta/argument_specs.yml) nor a fact the role
    publishes (O(published)) is most likely a typo, such as C(nic_firmware_setings); Ansible would ignore it in
    silence. Each one becomes an Ansible warning naming the host, the variable and the closest known name.
  - The names judged are the variables the host sees (inventory, group and host vars, extra vars, facts); names
    starting with C(__) are internal and never judged.
  - With O(validate) (the default), it also validates the values the host sees for the role's options against the
    role's C(meta/argument_specs.yml) entry point C(main), as the check Ansible inserts at the start of a role
    does (M(ansible.builtin.validate_argument_spec)), with the same message. The collection's playbooks import
    the roles with C(rolespec_validate=false), so this task line is the only one; a role used through C(roles:)
    is validated twice, to the same result.
  - With O(checks), it then makes the role's first input checks, as M(mlplatform.gpunode.checks) does, in the same
    task line. The warning comes first, so a typo it names is shown even when a check then fails.
  - Fails when it does not run inside a role or the role's argument specs cannot be read, when an option's value
    does not validate, and at the first check that does not hold, with that check's message. The warning comes
    first, so a typo is named even when the task then fails.
author:
  - mlplatform.gpunode developers (@mlplatform)
attributes:
  check_mode:
    details: It only reads variables on the controller.
  platform:
    details: Runs on the controller; no host round trip.
extends_documentation_fragment:
  - mlplatform.gpunode.controller_action
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
options:
  prefix:
    description: The role's variable prefix, ending in C(_), such as C(ofed_).
    type: str
    required: true
  published:
    description: The variables with the prefix the role sets itself (facts and registered results), so known.
    type: list
    elements: str
    default: []
  validate:
    description: Validate the role's options against its C(meta/argument_specs.yml) (entry point C(main)).
    type: bool
    default: true
  checks:
    description:
      - Checks made after the warning, in order, in the format of
        O(mlplatform.gpunode.checks#module:checks) (C(that) or C(fail_when), C(when), C(msg)). The first that
        does not hold fails the task with its message.
      - Given as a list in the task, not as a template; its conditions and messages are templated one by one.
    type: list
    elements: dict
seealso:
  - module: mlplatform.gpunode.checks
  - name: Role argument validation
    description: The C(meta/argument_specs.yml) the known names come from.
    link: https://docs.ansible.com/ansible/latest/playbook_guide/playbooks_reuse_roles.html#role-argument-validation
"""

EXAMPLES = r"""
- name: Warn about ofed_* variables the role does not know (typos)
  mlplatform.gpunode.role_variables:
    prefix: ofed_
    published: [ofed_version, ofed_contract, ofed_reboot_required]

- name: Warn about sriov_* variables the role does not know (typos), then check that discovery ran
  mlplatform.gpunode.role_variables:
    prefix: sriov_
    published: [sriov_rails, sriov_contract]
    checks:
      - that: [gpunode_hw is defined, "gpunode_hw['nics'] is defined"]
        msg: "{{ inventory_hostname }}: gpunode_hw is not set; run the mlplatform.gpunode.discovery role first"
"""

RETURN = r"""
unknown:
  description: One entry per unknown variable, sorted by name; C([]) when there is none.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The variable.
      type: str
    closest:
      description: The closest known name, or C(null) when none is close.
      type: str
    message:
      description: The warning text (without the host).
      type: str
  sample:
    - name: ofed_mirror_ulr
      closest: ofed_mirror_url
      message: "variable ofed_mirror_ulr is not a variable of this role and is ignored; did you mean ofed_mirror_url?"
argument_errors:
  description: The argument validation errors (the message lists them after C(Validation of arguments failed)).
  returned: when the validation failed
  type: list
  elements: str
  sample: ["value of cluster_objects_mode must be one of: apply, render, got: dry-run"]
msg:
  description:
    - With O(checks), the failing check's message, or C(All checks passed).
    - The validation's message when it failed.
  returned: when O(checks) is set, or the validation failed
  type: str
  sample: "gpu-a01: gpunode_hw is not set; run the mlplatform.gpunode.discovery role first"
checked:
  description: With O(checks), how many checks were evaluated.
  returned: when O(checks) is set
  type: int
  sample: 1
failed_check:
  description: The position (from 0) in O(checks) of the check that failed.
  returned: failed
  type: int
  sample: 0
assertion:
  description: The condition that failed.
  returned: failed
  type: str
  sample: gpunode_hw is defined
"""
