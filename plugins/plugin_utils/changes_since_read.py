# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""How many task results reported a change on each host since this run's host read, and how long ago that read was
(the changes_since_read callback records them in ansible-playbook; the lookup of the same name reads them, also in a
worker forked after)."""

from __future__ import annotations

import time

# The action whose result is this run's read of a host.
READ_ACTION = "mlplatform.gpunode.host_state"

_STATE = {"enabled": False, "hosts": {}}


def enable():
    """The callback is loaded: counts are known from now on (a host without a read still has none)."""
    _STATE["enabled"] = True


def reset():
    """Forget every count (tests)."""
    _STATE["enabled"] = False
    _STATE["hosts"] = {}


def record(host, action, changed, read_ok=False, now=None):
    """One task result of ``host``: the read itself (``action`` READ_ACTION, ``read_ok``) starts the count at 0 and
    notes when it came (``now``, time.monotonic() by default); any other result that reported ``changed`` adds one,
    once the host was read."""
    hosts = _STATE["hosts"]
    if action == READ_ACTION and read_ok:
        hosts[host] = [0, time.monotonic() if now is None else now]
    elif changed and host in hosts:
        hosts[host][0] += 1


def since_read(host, max_age=None, now=None):
    """The number of changed results of ``host`` since its last read in this run; -1 when that is not known (the
    callback is not enabled, or the host was not read in this run) or when the read came more than ``max_age``
    seconds ago (what changes on its own, a link or the GPU fabric, may have moved since)."""
    if not _STATE["enabled"] or host not in _STATE["hosts"]:
        return -1
    count, read_at = _STATE["hosts"][host]
    if max_age is not None and (time.monotonic() if now is None else now) - read_at > max_age:
        return -1
    return count
