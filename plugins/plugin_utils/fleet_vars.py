# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Read many hosts' variables from ``hostvars`` in one pass, each host's view made once.

``hostvars[host]`` merges every variable source of the host; a value is templated as Ansible does when it is
read. One view per host serves every name read from it in the call.
"""

from __future__ import annotations

from collections.abc import Mapping

from ansible.vars.hostvars import HostVars


def is_hostvars(value):
    """Whether ``value`` is Ansible's ``hostvars`` (not a mapping of host -> values built by a task)."""
    return isinstance(value, HostVars)


class FleetVars:
    """Per-host access to variables through ``hostvars`` (any mapping of host -> variables)."""

    def __init__(self, hostvars):
        self._hostvars = hostvars
        self._views = {}

    def _view(self, host):
        if host not in self._views:
            view = self._hostvars.get(host)
            self._views[host] = view if isinstance(view, Mapping) else {}
        return self._views[host]

    def ansible_facts(self, host):
        """The host's gathered facts (``ansible_facts``)."""
        return self.get(host, "ansible_facts") or {}

    def get(self, host, name, default=None):
        """The value of variable ``name`` of ``host``, ``default`` when it is not defined."""
        view = self._view(host)
        try:
            if name not in view:
                return default
            value = view[name]
        except KeyError:
            return default
        return default if value is None else value
