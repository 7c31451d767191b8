"""Simulated ``mst start|stop|status [-v]`` (MFT): lists the NIC functions as mst devices.

Device names follow MFT: ``/dev/mst/mt<part>_pciconf<N>`` per card in PCI order, ``.1`` for the
second function (``HostState.mst_name``). ``status -v`` prints one row per function with its PCI
address, RDMA device, netdev and NUMA node (layout of MFT's ``mst status -v``; inferred, no sample).
"""

from __future__ import annotations

import sys

from .state import HostState

TYPE = {"cx7": "ConnectX7", "cx6dx": "ConnectX6DX", "cx6lx": "ConnectX6LX", "bf3": "BlueField3"}


def run(argv: list[str], tool: str = "mst") -> int:
    state = HostState()
    if argv in (["start"], ["restart"]):
        sys.stdout.write("Starting MST (Mellanox Software Tools) driver set\nLoading MST PCI module - Success\n"
                         "Loading MST PCI configuration module - Success\nCreate devices\n")
        return 0
    if argv == ["stop"]:
        sys.stdout.write("Stopping MST (Mellanox Software Tools) driver set\nUnloading MST PCI module - Success\n")
        return 0
    if argv not in (["status"], ["status", "-v"]):
        sys.stderr.write(f"Usage: {tool} {{start|stop|restart|status [-v]}}\n")
        return 1
    out = ["MST modules:", "------------", "    MST PCI module is not loaded",
           "    MST PCI configuration module loaded"]
    if argv == ["status", "-v"]:
        out += ["PCI devices:", "------------",
                f"{'DEVICE_TYPE':<24}{'MST':<30}{'PCI':<10}{'RDMA':<16}{'NET':<40}NUMA"]
        for rec in state.nics():
            rdma = next((r for r in state.rdma_devices() if state.rdma_pci(r) == rec["address"]), None)
            net = state.rdma_netdev(rdma) if rdma else None
            out.append(f"{TYPE.get(rec['model'], rec['model']) + '(rev:0)':<24}{state.mst_name(rec):<30}"
                       f"{rec['address'][5:]:<10}{rdma or '':<16}{('net-' + net) if net else '':<40}"
                       f"{rec['numa_node']}")
    else:
        out += ["", "MST devices:", "------------"]
        for rec in state.nics():
            out += [f"{state.mst_name(rec):<33}- PCI configuration cycles access.",
                    f"{'':35}domain:bus:dev.fn={rec['address']} addr.reg=88 data.reg=92 cr_bar.gw_offset=-1",
                    f"{'':35}Chip revision is: 00"]
    sys.stdout.write("\n".join(out) + "\n")
    return 0
