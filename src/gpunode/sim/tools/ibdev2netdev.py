"""Simulated ``ibdev2netdev [-v]`` (mlnx-tools), read from the simulated sysfs like the real script.

Format: real-outputs/ibdev2netdev-dgx-h100-aben20807.txt (``mlx5_0 port 1 ==> ibp24s0 (Up)``,
devices in name order: mlx5_0, mlx5_1, mlx5_10, mlx5_2, …). ``-v`` adds the PCI address, board
(``MT4129 - <PSID>``) and firmware, in the script's verbose layout (inferred from its source
format; no public sample in real-outputs).
"""

from __future__ import annotations

import sys

from .state import HostState


def run(argv: list[str], tool: str = "ibdev2netdev") -> int:
    verbose = "-v" in argv
    if any(a not in ("-v",) for a in argv):
        sys.stderr.write(f"Usage: {tool} [-v]\n")
        return 1
    state = HostState()
    for rdma in state.rdma_devices():  # lexicographic, like `ls /sys/class/infiniband`
        netdev = state.rdma_netdev(rdma) or "<no netdev>"
        up = state.netdev_attr(netdev, "operstate") == "up"
        link = f"{netdev} ({'Up' if up else 'Down'})"
        if verbose:
            port = (state.port_attr(rdma, "state") or "1: DOWN").split(":", 1)[1].strip()
            sys.stdout.write(f"{state.rdma_pci(rdma)} {rdma} ({state.rdma_attr(rdma, 'hca_type')} - "
                             f"{state.rdma_attr(rdma, 'board_id')}) fw {state.rdma_attr(rdma, 'fw_ver')} "
                             f"port 1 ({port}) ==> {link}\n")
        else:
            sys.stdout.write(f"{rdma} port 1 ==> {link}\n")
    return 0
