# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Read-backs that the read-only node modules (``node_validation``, ``node_health``) share.

Each function takes the running AnsibleModule (for ``get_bin_path`` and ``run_command``, argv
lists, ``LC_ALL=C``) and returns plain values, or ``{"error": "<one sentence>"}`` when the tool is
missing, fails or prints something the parser does not accept. Nothing here writes.
"""

from __future__ import annotations

import os

from ansible_collections.mlplatform.gpunode.plugins.module_utils import mlxreg, rdma_tools
from ansible_collections.mlplatform.gpunode.plugins.module_utils.parsing import ParseError


def run(module, argv):
    """``(rc, stdout, stderr)`` of ``argv`` under the C locale."""
    return module.run_command(argv, environ_update={"LC_ALL": "C"})


def read_text(path):
    """A sysfs/procfs file's text without surrounding blanks, or None when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return None


def read_qos(module, root, netdev, rdma_device):
    """RoCE QoS of one netdev: trust and PFC from ``mlnx_qos -i`` (rdma_tools.parse_mlnx_qos), ECN
    enables, CNP DSCP and MTU from sysfs, the RoCE traffic class from the RDMA device's
    ``tc/1/traffic_class``. Returns ``{"trust", "pfc", "pfc_priorities", "ecn_np", "ecn_rp",
    "cnp_dscp", "mtu", "roce_tos"}`` or ``{"error"}``."""
    binary = module.get_bin_path("mlnx_qos")
    if not binary:
        return {"error": "mlnx_qos not installed"}
    rc, out, err = run(module, [binary, "-i", netdev])
    if rc != 0:
        return {"error": f"mlnx_qos -i {netdev}: exit status {rc}: {(err or out).strip()}"}
    try:
        parsed = rdma_tools.parse_mlnx_qos(out)
    except ParseError as exc:
        return {"error": str(exc)}
    qos = {"trust": parsed["trust"], "pfc": (parsed["pfc"] or {}).get("enabled"),
           "pfc_priorities": parsed["pfc_priorities"]}
    base = os.path.join(root, "class", "net", netdev)
    for side, key in (("roce_np", "ecn_np"), ("roce_rp", "ecn_rp")):
        qos[key] = [p for p in range(8) if read_text(os.path.join(base, "ecn", side, "enable", str(p))) == "1"]
    cnp = read_text(os.path.join(base, "ecn", "roce_np", "cnp_dscp"))
    qos["cnp_dscp"] = int(cnp) if cnp and cnp.isdigit() else None
    mtu = read_text(os.path.join(base, "mtu"))
    qos["mtu"] = int(mtu) if mtu and mtu.isdigit() else None
    tclass = read_text(os.path.join(root, "class", "infiniband", rdma_device or "-", "tc", "1", "traffic_class"))
    try:
        qos["roce_tos"] = rdma_tools.read_traffic_class(tclass)
    except ParseError:
        qos["roce_tos"] = None
    return qos


def read_roce_accl(module, pci_address):
    """The ROCE_ACCL register of one PCI function (``mlxreg -d <pci> --reg_name ROCE_ACCL --get``):
    ``{"fields": {name: int}}`` or ``{"error"}``."""
    binary = module.get_bin_path("mlxreg")
    if not binary:
        return {"error": "mlxreg not installed"}
    rc, out, err = run(module, [binary, "-d", pci_address, "--reg_name", "ROCE_ACCL", "--get"])
    try:
        parsed = mlxreg.parse_get(out)
    except ParseError as exc:
        parsed = {"fields": {}, "errors": [f"exit status {rc}: {(err or str(exc)).strip()}"]}
    return {"error": "; ".join(parsed["errors"])} if parsed["errors"] else {"fields": parsed["fields"]}
