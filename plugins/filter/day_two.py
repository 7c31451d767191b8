# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Day-two filters (documentation: the .yml file of each filter)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.mlplatform.gpunode.plugins.module_utils import remediation


def busy_nodes(pods, nodes, annotation="gpunode.mlplatform.io/revalidate"):
    if not isinstance(pods, list) or not isinstance(nodes, list):
        raise AnsibleFilterError("busy_nodes: expects the list of Pods and the list of Nodes (kubernetes.core.k8s "
                                 "lookups)")
    return remediation.busy_nodes(pods, nodes, str(annotation))


class FilterModule:
    """The day-two filters."""

    def filters(self):
        return {"busy_nodes": busy_nodes}
