# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The discovery step that nic_info and host_state share: read the sysfs tree, check the declared
management interfaces exist, classify every NIC by its PCIe affinity to the GPUs. Pure apart from reading
``sysfs_root``; raises :class:`DiscoveryError` with the message a module fails with."""

from __future__ import annotations

import os

from ansible_collections.mlplatform.gpunode.plugins.module_utils.nic_roles import classify
from ansible_collections.mlplatform.gpunode.plugins.module_utils.pci_sysfs import SysfsError, read_sysfs

# The options of discover() as module arguments (nic_info and host_state take the same ones).
ARGUMENT_SPEC = {
    "sysfs_root": {"type": "path", "default": "/sys"},
    "management_interfaces": {"type": "list", "elements": "str", "default": []},
    "detected_interfaces": {"type": "list", "elements": "str", "default": []},
    "overrides": {"type": "dict", "default": {}},
}


class DiscoveryError(Exception):
    """Discovery cannot answer; the message names the host, the variable and what was found."""


def discover(sysfs_root, *, hostname, management_interfaces=(), detected_interfaces=(), overrides=None, caller):
    """Return the classification (platform, gpus, nics, rails, ..., warnings) of the tree at ``sysfs_root``.

    ``management_interfaces`` must each exist under ``<sysfs_root>/class/net`` (a typo would let the SSH NIC
    be classified compute); ``detected_interfaces`` (default route, the connection address) count as
    management too, but one missing from the tree is ignored (a simulated tree holds only simulated NICs).
    """
    try:
        snapshot = read_sysfs(sysfs_root)
    except SysfsError as exc:
        raise DiscoveryError(f"{caller}: {exc}") from exc
    net_dir = os.path.join(sysfs_root, "class", "net")
    absent = [name for name in management_interfaces if not os.path.isdir(os.path.join(net_dir, name))]
    if absent:
        present = ", ".join(sorted(os.listdir(net_dir))) if os.path.isdir(net_dir) else "none"
        raise DiscoveryError(f"{caller} on {hostname}: management_interfaces {', '.join(absent)}: no such interface "
                             f"under {net_dir} (interfaces there: {present})")
    try:
        return classify(snapshot,
                        management_interfaces=list(dict.fromkeys(list(management_interfaces)
                                                                 + list(detected_interfaces))),
                        overrides=overrides or {})
    except ValueError as exc:
        raise DiscoveryError(f"{caller}: invalid override: {exc}") from exc
