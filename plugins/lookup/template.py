# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""ansible.builtin.template's lookup without the deep copy of every variable of the host on each call."""

from __future__ import annotations

DOCUMENTATION = r"""
name: template
version_added: 0.1.0
short_description: Render a template file as C(ansible.builtin.template) does, without copying every host variable
description:
  - Returns the text of each template file rendered with the task's variables. The file is found, rendered and
    returned exactly as by the C(ansible.builtin.template) lookup (same search path, same variables, including
    C(ansible_managed) and C(template_path), same options), which this lookup runs.
  - The only difference is in the variables the builtin lookup is handed. It deep-copies all of them before every
    render (ansible-core 2.19 C(lib/ansible/plugins/lookup/template.py), marked C(FIXME) there). Among the
    variables of a host this collection manages is the host read (C(gpunode_host_state), about 130 KB on a DGX),
    and that copy took about 75 ms per call; the roles render seven boot-unit and configuration files per host
    and run. This lookup gives the builtin a shallow copy instead (the search path list copied as well, since
    the builtin extends it); rendering a template does not change the variables.
options:
  _terms:
    description: Template files, found as the builtin lookup finds them (the role's C(templates/) first).
    required: true
  template_vars:
    description: A dictionary, the keys become additional variables available for templating.
    type: dict
    default: {}
  variable_start_string:
    description: The string marking the beginning of a print statement.
    type: str
    default: '{{'
  variable_end_string:
    description: The string marking the end of a print statement.
    type: str
    default: '}}'
  comment_start_string:
    description: The string marking the beginning of a comment statement.
    type: str
    default: '{#'
  comment_end_string:
    description: The string marking the end of a comment statement.
    type: str
    default: '#}'
  trim_blocks:
    description: Whether the first newline after a block is removed (block, not variable tag).
    type: bool
    default: true
notes:
  - Errors are the builtin lookup's, for example C(the template file X could not be found for the lookup).
seealso:
  - plugin: ansible.builtin.template
    plugin_type: lookup
"""

EXAMPLES = r"""
- name: Render the unit on the controller and plan its write against the host read
  ansible.builtin.set_fact:
    __example_unit: "{{ lookup('mlplatform.gpunode.template', 'gpunode-sriov.service.j2') }}"
"""

RETURN = r"""
_raw:
  description: The rendered text of each template, in the order given.
  type: list
  elements: str
"""

from ansible.plugins.lookup.template import LookupModule as BuiltinTemplateLookup


class _ShallowOnDeepcopy(dict):
    """The variables as the builtin lookup receives them: its ``deepcopy`` gets a shallow copy."""

    def __deepcopy__(self, memo):
        return dict(self)


def handed_variables(variables):
    """What the builtin lookup is handed for ``variables``: a mapping whose deep copy is a shallow one, with its
    own copy of ``ansible_search_path`` (the builtin inserts the template's directory into that list)."""
    handed = _ShallowOnDeepcopy(variables or {})
    if isinstance(handed.get("ansible_search_path"), list):
        handed["ansible_search_path"] = list(handed["ansible_search_path"])
    return handed


class LookupModule(BuiltinTemplateLookup):
    """The builtin template lookup, handed variables whose deep copy is shallow."""

    def run(self, terms, variables=None, **kwargs):
        return super().run(terms, variables=handed_variables(variables), **kwargs)
