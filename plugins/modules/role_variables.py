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
  - Fails when it does not run inside a role or the role's argument specs cannot be read.
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
seealso:
  - name: Role argument validation
    description: The C(meta/argument_specs.yml) the known names come from.
    link: https://docs.ansible.com/ansible/latest/playbook_guide/playbooks_reuse_roles.html#role-argument-validation
"""

EXAMPLES = r"""
- name: Warn about ofed_* variables the role does not know (typos)
  mlplatform.gpunode.role_variables:
    prefix: ofed_
    published: [ofed_version, ofed_contract, ofed_reboot_required]
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
"""
