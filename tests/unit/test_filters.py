"""The collection's filters: rail_map (the operator's table) and interfaces_with_address."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.mlplatform.gpunode.plugins.filter.gpunode import (
    FilterModule,
    interfaces_with_address,
    rail_map,
)

HW = {
    "platform": {"vendor": "NVIDIA", "product": "DGXH100"},
    "gpus": [
        {"index": 0, "pci_address": "0000:1b:00.0", "rail_nic": "0000:18:00.0"},
        {"index": 1, "pci_address": "0000:43:00.0", "rail_nic": None},
    ],
    "nvswitches": [{"pci_address": "0000:83:00.0"}],
    "nics": [
        {"pci_address": "0000:18:00.0", "model": "ConnectX-7", "netdev": "ibp24s0", "rdma_device": "mlx5_0",
         "link_layer": "InfiniBand", "speed_gbps": 400, "role": "compute", "rail": 0, "gpu_distance": "PXB"},
        {"pci_address": "0000:29:00.0", "model": "ConnectX-7", "netdev": "enp41s0f0np0", "rdma_device": "mlx5_1",
         "link_layer": "Ethernet", "speed_gbps": 400, "role": "storage", "rail": None,
         "role_reason": "dual-port card 0000:29:00: storage"},
    ],
    "rails": [{"rail": 0}],
    "gpus_without_rail": [{"gpu": "0000:43:00.0", "reason": "no NIC at PIX/PXB distance"}],
}


def test_rail_map_lists_rails_other_nics_and_gaps():
    text = rail_map(HW, "dgx01")
    lines = text.splitlines()
    assert lines[0] == "dgx01: NVIDIA DGXH100 - 2 GPUs, 1 rails, 1 NVSwitches"
    assert lines[1].split() == ["RAIL", "GPU", "NIC", "MODEL", "NETDEV", "RDMA", "LINK", "DIST"]
    assert lines[2].split() == ["0", "0000:1b:00.0", "0000:18:00.0", "ConnectX-7", "ibp24s0", "mlx5_0", "IB", "400G",
                                "PXB"]
    assert lines[3].split() == ["-", "0000:43:00.0", "(no", "rail)"]
    assert "Other NICs:" in lines
    storage = next(line for line in lines if line.startswith("storage"))
    assert storage.split()[:6] == ["storage", "0000:29:00.0", "ConnectX-7", "enp41s0f0np0", "mlx5_1", "Eth"]
    assert lines[-1] == "WARNING: GPU 0000:43:00.0 has no rail: no NIC at PIX/PXB distance"


def test_rail_map_rejects_something_else():
    with pytest.raises(AnsibleFilterError, match="gpunode_hw"):
        rail_map({"foo": 1})


FACTS = {
    "interfaces": ["lo", "eno1", "bond-mgmt"],
    "lo": {"device": "lo", "ipv4": {"address": "127.0.0.1"}},
    "eno1": {"device": "eno1", "ipv4": {"address": "192.0.2.10"}, "ipv6": [{"address": "2001:db8::10"}]},
    "bond_mgmt": {"device": "bond-mgmt", "ipv4": {"address": "192.0.2.20"},
                  "ipv4_secondaries": [{"address": "192.0.2.21"}]},
}


@pytest.mark.parametrize(("address", "expected"), [
    ("192.0.2.10", ["eno1"]),
    ("2001:db8::10", ["eno1"]),
    ("192.0.2.21", ["bond-mgmt"]),
    ("dgx01.example", []),
])
def test_interfaces_with_address(address, expected):
    assert interfaces_with_address(FACTS, address) == expected


def test_filters_are_registered():
    assert set(FilterModule().filters()) == {"rail_map", "interfaces_with_address"}


def test_management_from_facts_default_routes_then_the_connection_address():
    from ansible_collections.mlplatform.gpunode.plugins.module_utils.management import management_from_facts

    facts = {**FACTS, "default_ipv4": {"interface": "eno1", "address": "192.0.2.10"},
             "default_ipv6": {"interface": "eno1"}}
    assert management_from_facts(facts, "192.0.2.21") == {
        "default_route": ["eno1"], "connection": ["bond-mgmt"], "interfaces": ["eno1", "bond-mgmt"]}
    # No default route (an isolated provisioning network), a host name as the address: nothing found.
    assert management_from_facts(FACTS, "dgx01.example") == {"default_route": [], "connection": [], "interfaces": []}
