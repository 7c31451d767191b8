"""Simulated ``cma_roce_tos -d <dev> [-p <port>] [-t <tos>]`` (mlnx-tools).

Prints the RDMA-CM default RoCE ToS of the device (real-outputs/roce-lossless-l3-setup-mlnx_qos-
cma_roce_tos-netarbiter.txt: ``106``). Setting it also writes
``sys/class/infiniband/<dev>/tc/<port>/traffic_class`` as ``Global tclass=<tos>`` (the form
real-outputs/roce-qos-sysfs-ecn-cnp-spiderpool.txt reads back). Volatile: ``run/cma_tos.json``;
0 after boot. Errors exit 1 (wording inferred).
"""

from __future__ import annotations

import sys

from .state import HostState, write_atomic


def run(argv: list[str], tool: str = "cma_roce_tos") -> int:
    opts = {"-p": "1"}
    i = 0
    while i < len(argv):
        if argv[i] in ("-d", "-p", "-t") and i + 1 < len(argv):
            opts[argv[i]] = argv[i + 1]
            i += 2
            continue
        sys.stderr.write(f"Usage: {tool} -d <ib_device> [-p <port_num>] [-t <default_roce_tos>]\n")
        return 1
    state = HostState()
    dev = opts.get("-d")
    if not dev or dev not in state.rdma_devices():
        sys.stderr.write(f"Failed to find device {dev}\n")
        return 1
    if opts["-p"] != "1":
        sys.stderr.write(f"Port {opts['-p']} does not exist on {dev}\n")
        return 1
    if "-t" in opts:
        tos = opts["-t"]
        if not tos.isdigit() or int(tos) > 255:
            sys.stderr.write(f"Invalid ToS value {tos}: expected 0..255\n")
            return 1
        with state.locked():
            data = state.run_get("cma_tos", {})
            data[dev] = int(tos)
            state.run_put("cma_tos", data)
            write_atomic(state.sys / "class" / "infiniband" / dev / "tc" / "1" / "traffic_class",
                         f"Global tclass={int(tos)}\n")
    sys.stdout.write(f"{state.run_get('cma_tos', {}).get(dev, 0)}\n")
    return 0
