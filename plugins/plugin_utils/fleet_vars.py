# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Read many hosts' published facts from ``hostvars`` in one pass, without templating them again.

``hostvars[host][name]`` merges every variable source of the host and then templates the value,
walking the whole structure; for a fleet's discovery results and contracts that walk costs ~20x
serializing the same data. A value a host *published* (``set_fact``, ``register``, gathered facts)
is already the result of templating, so it is taken as it is from the variable manager's fact
caches; any other variable (inventory, group and play vars, which may hold templates) is read
through ``hostvars`` and templated as Ansible does.
"""

from __future__ import annotations


class FleetVars:
    """Per-host access to published facts, falling back to ``hostvars`` for everything else."""

    def __init__(self, hostvars):
        self._hostvars = hostvars
        manager = getattr(hostvars, "_variable_manager", None)
        self._nonpersistent = getattr(manager, "_nonpersistent_fact_cache", None)
        self._facts = getattr(manager, "_fact_cache", None)
        self._templated = {}

    def _published(self, host):
        if self._nonpersistent is None:
            return {}
        return self._nonpersistent.get(host) or {}

    def ansible_facts(self, host):
        """The host's gathered facts (``ansible_facts``)."""
        if self._facts is not None:
            try:
                facts = self._facts.get(host)
            except KeyError:
                facts = None
            if facts is not None:
                # The cache holds the facts as the setup module returned them (``ansible_processor_vcpus``);
                # ``ansible_facts`` names them without the prefix, as namespace_facts does.
                return {(k[len("ansible_"):] if k.startswith("ansible_") else k): v for k, v in facts.items()}
        return self.get(host, "ansible_facts") or {}

    def get(self, host, name, default=None):
        """The value of variable ``name`` of ``host``, ``default`` when it is not defined."""
        published = self._published(host)
        if name in published:
            return published[name]
        view = self._templated.get(host)
        if view is None:
            view = self._templated[host] = self._hostvars[host]
        try:
            if name not in view:
                return default
            value = view[name]
        except KeyError:
            return default
        return default if value is None else value
