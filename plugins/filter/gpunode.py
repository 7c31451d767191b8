# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Pure data-shaping filters shared by the collection's roles and playbooks.

``rail_map`` renders the discovery result (the ``gpunode_hw`` fact) as the table an operator reads;
``interfaces_with_address`` finds the interfaces that hold a given address in Ansible's network
facts (the address Ansible connects to marks the management interface).
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.mlplatform.gpunode.plugins.module_utils import management


def _link(nic):
    layer = {"InfiniBand": "IB", "Ethernet": "Eth"}.get(nic.get("link_layer") or "", "-")
    speed = nic.get("speed_gbps")
    return f"{layer} {speed}G" if speed else layer


def _table(rows):
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def rail_map(hw, host=""):
    """Render a discovery result as a readable multi-line table.

    :param hw: the ``gpunode_hw`` fact (keys ``platform``, ``gpus``, ``nics``, ``rails``,
        ``nvswitches``, ``gpus_without_rail``) as published by the discovery role.
    :param host: the inventory name shown in the heading.
    :returns: one string: a heading, the rail map (rail, GPU, NIC, model, netdev, RDMA device,
        link, PCIe distance) and every other NIC with its role and the reason for it.
    :raises AnsibleFilterError: when ``hw`` is not a mapping with those keys.
    """
    if not isinstance(hw, dict) or "nics" not in hw or "gpus" not in hw:
        raise AnsibleFilterError("rail_map expects the gpunode_hw fact (a mapping with 'gpus' and 'nics')")
    platform = hw.get("platform") or {}
    nics = {n["pci_address"]: n for n in hw["nics"]}
    vendor, product = platform.get("vendor") or "?", platform.get("product") or "?"
    name = product if product.startswith(vendor) else f"{vendor} {product}"
    heading = (
        f"{host}: {name} - "
        f"{len(hw['gpus'])} GPUs, {len(hw.get('rails') or [])} rails, "
        f"{len(hw.get('nvswitches') or [])} NVSwitches"
    ).strip()
    rows = [("RAIL", "GPU", "NIC", "MODEL", "NETDEV", "RDMA", "LINK", "DIST")]
    for gpu in hw["gpus"]:
        nic = nics.get(gpu.get("rail_nic") or "")
        if nic is None:
            rows.append(("-", gpu["pci_address"], "(no rail)", "", "", "", "", ""))
            continue
        rows.append((
            nic.get("rail"), gpu["pci_address"], nic["pci_address"], nic.get("model") or "",
            nic.get("netdev") or "-", nic.get("rdma_device") or "-", _link(nic), nic.get("gpu_distance") or "-",
        ))
    lines = [heading, *_table(rows)]
    others = [n for n in hw["nics"] if n.get("role") != "compute"]
    if others:
        orow = [("ROLE", "NIC", "MODEL", "NETDEV", "RDMA", "LINK", "WHY")]
        for nic in others:
            orow.append((
                nic.get("role"), nic["pci_address"], nic.get("model") or "", nic.get("netdev") or "-",
                nic.get("rdma_device") or "-", _link(nic), nic.get("role_reason") or "",
            ))
        lines += ["", "Other NICs:", *_table(orow)]
    for missing in hw.get("gpus_without_rail") or []:
        lines.append(f"WARNING: GPU {missing.get('gpu')} has no rail: {missing.get('reason')}")
    return "\n".join(lines)


def interfaces_with_address(facts, address):
    """Return the names of the interfaces whose IPv4 or IPv6 addresses include ``address``.

    :param facts: ``ansible_facts`` gathered with the ``network`` subset.
    :param address: an IP address (e.g. ``ansible_host``); a host name matches nothing.
    :returns: a sorted list of interface names (possibly empty).
    """
    try:
        return management.interfaces_with_address(facts, address)
    except TypeError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    """The collection's filters."""

    def filters(self):
        return {"rail_map": rail_map, "interfaces_with_address": interfaces_with_address}
