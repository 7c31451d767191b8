# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Every error of a module names the host it ran on.

A fleet run prints hundreds of results; Ansible's ``fatal: [host]`` names the inventory host, but the
message itself travels further (``msg`` in a registered result, the run summary, the post-provision
hook's log, a report). ``name_the_host`` makes each ``fail_json`` of a module say
``<module> on <host>: <what is wrong>`` (the host as the kernel names it, which is what an operator
logged in there sees)."""

from __future__ import annotations

import socket


def name_the_host(module, name):
    """Wrap ``module.fail_json`` so its ``msg`` starts with ``<name> on <host>: `` (a message that already
    names the host is left as it is; a leading ``<name>: `` is replaced). Returns the host name."""
    host = socket.gethostname()
    original = module.fail_json
    prefix = f"{name} on {host}: "

    def fail_json(msg=None, **kwargs):
        text = "" if msg is None else str(msg)
        if f" on {host}" not in text:
            text = prefix + (text[len(name) + 2:] if text.startswith(f"{name}: ") else text)
        original(msg=text, **kwargs)

    module.fail_json = fail_json
    return host
