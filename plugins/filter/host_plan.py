# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller-side plans against the ``gpunode_host_state`` read (the pure functions of
``module_utils/host_plan``): a task that changes the host runs only when its plan is non-empty."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.mlplatform.gpunode.plugins.module_utils import host_plan


def _wrap(func):
    def filter_(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except ValueError as exc:
            raise AnsibleFilterError(str(exc)) from exc

    filter_.__name__ = func.__name__
    filter_.__doc__ = func.__doc__
    return filter_


class FilterModule:
    """Host plans."""

    def filters(self):
        return {name: _wrap(getattr(host_plan, name))
                for name in ("file_plan", "key_plan", "package_versions", "unheld", "unit_plan", "apt_versions",
                             "module_version", "fstab_swap", "sysctl_plan")}
