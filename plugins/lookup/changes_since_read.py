# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The number of changed task results of a host since this run's host read."""

from __future__ import annotations

DOCUMENTATION = r"""
name: changes_since_read
version_added: 0.2.0
short_description: How many task results changed a host since this run's read of it
description:
  - Returns, for each host named, the number of task results that reported a change on it since its last
    M(mlplatform.gpunode.host_state) read in this run, as the P(mlplatform.gpunode.changes_since_read#callback)
    callback counts them. C(0) means the host read is what the host holds now, for everything the collection's
    tasks change.
  - Returns C(-1) for a host when that is not known - the callback is not enabled, or the host was not read in
    this run - and when the read came more than O(max_age) seconds ago. Treat C(-1) as "changed".
options:
  _terms:
    description: Inventory host names.
    required: true
  max_age:
    description:
      - Seconds. A read older than this gives C(-1) - what changes on a host without a task (a link that goes down,
        the GPU fabric, a GPU that falls off the bus) may have moved since. Unset, a read of any age counts.
    type: float
seealso:
  - plugin: mlplatform.gpunode.changes_since_read
    plugin_type: callback
"""

EXAMPLES = r"""
- name: Judge the host on this run's read when nothing changed it since
  ansible.builtin.debug:
    msg: "{{ lookup('mlplatform.gpunode.changes_since_read', inventory_hostname, max_age=300) == 0 }}"
"""

RETURN = r"""
_list:
  description: One integer per host named, the count of changed results since the read, or C(-1) (not known, or
    older than O(max_age)).
  type: list
  elements: int
"""

from ansible.errors import AnsibleError
from ansible.plugins.lookup import LookupBase
from ansible_collections.mlplatform.gpunode.plugins.plugin_utils import changes_since_read as counts


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        bad = [t for t in terms if not isinstance(t, str) or not t]
        if bad or not terms:
            raise AnsibleError(f"changes_since_read: give inventory host names, got {terms!r}")
        max_age = self.get_option("max_age")
        if max_age is not None and max_age < 0:
            raise AnsibleError(f"changes_since_read: max_age is a number of seconds, 0 or more, got {max_age!r}")
        return [counts.since_read(term, max_age) for term in terms]
