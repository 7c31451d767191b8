"""Simulated ``ibstat [CA [port]]`` (infiniband-diags), read from the simulated sysfs.

Format: real-outputs/ibstat-h100-roce-8xcx7-cx6dx-gpud.txt (tab indented; ``Rate: 400``; RoCE
ports: base lid 0, capability mask 0x00010000, port GUID from the MAC with ``fffe`` in the middle).
"""

from __future__ import annotations

import sys

from .state import HostState

STATES = {"ACTIVE": "Active", "DOWN": "Down", "INIT": "Initializing", "ARMED": "Armed"}


def _hex_guid(text: str | None) -> str:
    return "0x" + (text or "0000:0000:0000:0000").replace(":", "").lower()


def _port_guid(state: HostState, rdma: str, node_guid: str) -> str:
    if state.port_attr(rdma, "link_layer") != "Ethernet":
        return node_guid
    netdev = state.rdma_netdev(rdma)
    mac = (state.netdev_attr(netdev, "address") or "") if netdev else ""
    octets = mac.split(":")
    if len(octets) != 6:
        return "0x0000000000000000"
    return "0x" + "".join(octets[:3]) + "fffe" + "".join(octets[3:])


def report(state: HostState, rdma: str) -> list[str]:
    node_guid = _hex_guid(state.rdma_attr(rdma, "node_guid"))
    port_state = (state.port_attr(rdma, "state") or "1: DOWN").split(":", 1)[1].strip()
    phys = (state.port_attr(rdma, "phys_state") or "3: Disabled").split(":", 1)[1].strip()
    rate = (state.port_attr(rdma, "rate") or "0 Gb/sec").split()[0]
    lid = int(state.port_attr(rdma, "lid") or "0", 16)
    sm_lid = int(state.port_attr(rdma, "sm_lid") or "0", 16)
    cap = int(state.port_attr(rdma, "cap_mask") or "0", 16)
    return [
        f"CA '{rdma}'",
        f"\tCA type: {state.rdma_attr(rdma, 'hca_type')}",
        "\tNumber of ports: 1",
        f"\tFirmware version: {state.rdma_attr(rdma, 'fw_ver')}",
        "\tHardware version: 0",
        f"\tNode GUID: {node_guid}",
        f"\tSystem image GUID: {_hex_guid(state.rdma_attr(rdma, 'sys_image_guid'))}",
        "\tPort 1:",
        f"\t\tState: {STATES.get(port_state, port_state.title())}",
        f"\t\tPhysical state: {phys}",
        f"\t\tRate: {rate}",
        f"\t\tBase lid: {lid}",
        "\t\tLMC: 0",
        f"\t\tSM lid: {sm_lid}",
        f"\t\tCapability mask: 0x{cap:08x}",
        f"\t\tPort GUID: {_port_guid(state, rdma, node_guid)}",
        f"\t\tLink layer: {state.port_attr(rdma, 'link_layer')}",
    ]


def run(argv: list[str], tool: str = "ibstat") -> int:
    state = HostState()
    devices = state.rdma_devices()
    if argv and argv[0].startswith("-"):
        if argv[0] in ("-l", "--list_of_cas"):
            sys.stdout.write("".join(f"{d}\n" for d in devices))
            return 0
        sys.stderr.write(f"Usage: {tool} [-l] [<ca_name>] [portnum]\n")
        return 1
    if argv:
        if argv[0] not in devices:
            sys.stderr.write(f"ibpanic: [{tool}] main: stat of IB device '{argv[0]}' failed: "
                             "No such file or directory\n")
            return 255
        devices = [argv[0]]
    lines = []
    for rdma in devices:
        lines += report(state, rdma)
    sys.stdout.write("\n".join(lines) + ("\n" if lines else ""))
    return 0
