# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Resolve each Jinja filter and test name once per ansible-playbook process instead of once per task line.

ansible-core 2.19 builds a new ``JinjaPluginIntercept`` for every template environment, and each one asks the
filter or test loader again for every name a template uses. The loader finds an ``ansible.builtin`` plugin in
its cache, but a name it has no wrapper for (Jinja's own ``length``, ``list``, ``int``, ``join``, the ``none`` and
``in`` tests) and every collection name (``mlplatform.gpunode.file_plan``) are searched anew: the collection's
routing metadata is read and every filter file of the collection is loaded and its ``filters()`` called, to
find one function (``Jinja2Loader.get_with_context``; its own comment says these results are not cached yet).
On the simulated three-host fleet that is about 1,650 lookups and half a second of an idempotent re-run, all in
the controller's main process.

``install()`` keeps the loader's answer per loader and name for the rest of the process: the plugin wrapper it
found, or that it found none (Ansible then takes Jinja's built-in). A lookup that raised (a malformed name, a
removed plugin, a collection that is not installed) is not kept: it raises again, with Ansible's message. What a
name resolves to cannot change within one process: the collection search path is fixed when ansible-playbook
starts, and a filter name does not depend on a play's ``collections`` keyword (the loader drops it). A lookup
with extra arguments goes to the loader as before. A deprecated plugin's warning is shown at its first lookup,
as Ansible's display shows each deprecation once anyway.

This hooks ``ansible.plugins.loader.Jinja2Loader``; meta/runtime.yml pins ansible-core 2.19, whose class it is.
When it is not there, ``install()`` changes nothing and returns False.
"""

from __future__ import annotations

import threading

_state = {"installed": False, "hits": 0, "misses": 0}
# (loader type: "filter" or "test", name) -> the loader's answer for it.
_memo: dict = {}
_lock = threading.Lock()


def stats():
    """``{"installed", "hits", "misses", "entries"}`` of this process (copies)."""
    with _lock:
        return dict(_state, entries=len(_memo))


def install():
    """Memoize ``Jinja2Loader.get_with_context`` for the rest of this process. Returns whether it is on."""
    if _state["installed"]:
        return True
    try:
        from ansible.plugins.loader import Jinja2Loader
        original = Jinja2Loader.get_with_context
    except (ImportError, AttributeError):
        return False

    def get_with_context(self, name, *args, **kwargs):
        if args or kwargs or not isinstance(name, str):
            return original(self, name, *args, **kwargs)
        key = (self.type, str.__str__(name))
        found = _memo.get(key)
        if found is not None:
            with _lock:
                _state["hits"] += 1
            return found
        found = original(self, name)
        _memo[key] = found
        with _lock:
            _state["misses"] += 1
        return found

    Jinja2Loader.get_with_context = get_with_context
    _state["installed"] = True
    return True
