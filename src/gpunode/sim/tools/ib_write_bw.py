"""Simulated perftest ``ib_write_bw``: a server and a client on two simulated hosts exchange their
port facts over TCP, as the real tool exchanges QP data, and the client "writes".

- Server: ``ib_write_bw -d <rdma> [-p <port>] [--report_gbits] [-D <s>] [-F] …`` listens on TCP
  (default 18515, perftest's default) for one client, then exits.
- Client: the same options plus the server's address.

Each side sends its RDMA port's link layer, state, rate (sysfs) and the ROCE_ACCL field
``adaptive_routing_forced_en`` of its function (run/, ``mlxreg``). Outcome:

- both ports ACTIVE, same link layer, same adaptive-routing setting: both print the perftest
  report (``plugins/module_utils/perftest.py`` format) with an average of 96% of the slower rate
  (inferred: typical large-message RDMA write efficiency);
- a local port down: perftest's port-state failure before connecting;
- the peer's port down or adaptive routing differing between the peers (the incident: RoCE
  packets sprayed on one side only, hardware-facts.md "Adaptive routing"): the client fails with
  perftest's completion error (status 12, transport retry counter exceeded), the server with its
  exchange failure; both exit 1.
"""

from __future__ import annotations

import os
import socket
import sys

from .mlxreg import read_register
from .state import HostState

DEFAULT_PORT = 18515
EFFICIENCY = 0.96
RULE = "-" * 87
MSG_BYTES = 65536
ITERATIONS = 5000


class Failure(Exception):
    def __init__(self, text: str, rc: int = 1) -> None:
        super().__init__(text)
        self.rc = rc


def _parse(argv: list[str]) -> dict:
    opts = {"device": None, "port": DEFAULT_PORT, "gbits": False, "duration": None, "server": None}
    takes_value = {"-d", "--ib-dev", "-p", "--port", "-D", "--duration", "-x", "--gid-index", "-q", "--qp",
                   "-s", "--size", "-n", "--iters", "-i", "--ib-port", "-m", "--mtu", "--source_ip"}
    i = 0
    while i < len(argv):
        arg = argv[i]
        key, sep, value = arg.partition("=")
        if key in takes_value:
            if not sep:
                if i + 1 >= len(argv):
                    raise Failure(f" Option {key} requires an argument", 1)
                value = argv[i + 1]
                i += 1
            if key in ("-d", "--ib-dev"):
                opts["device"] = value
            elif key in ("-p", "--port"):
                if not value.isdigit() or not 0 < int(value) < 65536:
                    raise Failure(f" Invalid port {value}", 1)
                opts["port"] = int(value)
            elif key in ("-D", "--duration"):
                opts["duration"] = value
        elif arg in ("--report_gbits", "-R"):
            opts["gbits"] = arg == "--report_gbits" or opts["gbits"]
        elif arg.startswith("-"):
            pass  # other perftest flags (-F, -a, --cpu_util, …) change nothing here
        elif opts["server"] is None:
            opts["server"] = arg
        else:
            raise Failure(f" Unexpected argument {arg}", 1)
        i += 1
    return opts


def _local(state: HostState, device: str | None) -> dict:
    if device is None:
        devices = state.rdma_devices()
        if not devices:
            raise Failure(" No IB devices found", 1)
        device = devices[0]
    if device not in state.rdma_devices():
        raise Failure(f" IB device {device} not found\n Unable to find the Infiniband/RoCE device", 1)
    port_state = (state.port_attr(device, "state") or "1: DOWN").split(":", 1)[1].strip()
    rate = (state.port_attr(device, "rate") or "0 Gb/sec").split()[0]
    address = state.rdma_pci(device)
    ar = read_register(state, address)["adaptive_routing_forced_en"] if address else 0
    return {"device": device, "state": port_state, "rate_gbps": float(rate), "link_layer": state.port_attr(
        device, "link_layer"), "adaptive_routing_forced_en": ar, "qpn": 0x100 + _random_below(0xf00),
        "psn": _random_below(0x1000000)}


def _header(me: dict, server: bool) -> list[str]:
    lines = [RULE, "                    RDMA_Write BW Test",
             f" Dual-port       : OFF\t\tDevice         : {me['device']}",
             " Number of qps   : 1\t\tTransport type : IB",
             " Connection type : RC\t\tUsing SRQ      : OFF",
             " PCIe relax order: ON",
             " ibv_wr* API     : ON"]
    if not server:
        lines.append(" TX depth        : 128")
    lines += [" CQ Moderation   : 1",
              f" Mtu             : {4096}[B]",
              f" Link type       : {'IB' if me['link_layer'] == 'InfiniBand' else 'Ethernet'}"]
    if me["link_layer"] != "InfiniBand":
        lines.append(" GID index       : 3")
    lines += [" Max inline data : 0[B]", " rdma_cm QPs\t : OFF", " Data ex. method : Ethernet", RULE]
    return lines


def _addresses(me: dict, peer: dict) -> list[str]:
    return [f" local address: LID 0000 QPN 0x{me['qpn']:04x} PSN 0x{me['psn']:06x} RKey 0x1fff00 "
            "VAddr 0x007f0d3a1b3000",
            f" remote address: LID 0000 QPN 0x{peer['qpn']:04x} PSN 0x{peer['psn']:06x} RKey 0x1fff00 "
            "VAddr 0x007f8a4c2e1000",
            RULE]


def _verdict(me: dict, peer: dict) -> str | None:
    """None when the test passes, else why the RDMA traffic fails."""
    if me["link_layer"] != peer["link_layer"]:
        return "link layer"
    if peer["state"] != "ACTIVE":
        return "peer down"
    if me["adaptive_routing_forced_en"] != peer["adaptive_routing_forced_en"]:
        return "adaptive routing"
    return None


def _result(me: dict, peer: dict, gbits: bool) -> list[str]:
    average = round(min(me["rate_gbps"], peer["rate_gbps"]) * EFFICIENCY, 2)
    peak = round(average * 1.0007, 2)
    rate = average * 1e9 / 8 / MSG_BYTES / 1e6
    unit = "Gb/sec"
    if not gbits:
        unit = "MB/sec"
        average, peak = (round(v * 1000 / 8 / 1.048576, 2) for v in (average, peak))
    return [f" #bytes     #iterations    BW peak[{unit}]    BW average[{unit}]   MsgRate[Mpps]",
            f" {MSG_BYTES:<10} {ITERATIONS:<10}       {peak:<18.2f} {average:<18.2f} {rate:.6f}", RULE]


def _random_below(bound: int) -> int:
    """A random int in [0, bound) (QPN and PSN, as the real tool draws them); os.urandom, not ``secrets``, whose
    import costs each call about 12 ms."""
    return int.from_bytes(os.urandom(4), "big") % bound


# The port facts each side sends: one line of tab-separated fields in this order (no field holds a tab).
_WIRE = ("device", "state", "rate_gbps", "link_layer", "adaptive_routing_forced_en", "qpn", "psn")


def _send(conn: socket.socket, data: dict) -> None:
    fields = ["" if data[key] is None else str(data[key]) for key in _WIRE]
    conn.sendall(("\t".join(fields) + "\n").encode())


def _recv(conn: socket.socket) -> dict:
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = conn.recv(4096)
        if not chunk:
            raise Failure(" Failed to exchange data between server and clients", 1)
        buf += chunk
    fields = buf.decode("utf-8", "replace").rstrip("\n").split("\t")
    try:
        data = dict(zip(_WIRE, fields, strict=True))
        data["rate_gbps"] = float(data["rate_gbps"])
        for key in ("adaptive_routing_forced_en", "qpn", "psn"):
            data[key] = int(data[key])
    except ValueError:
        raise Failure(" Failed to exchange data between server and clients", 1) from None
    data["link_layer"] = data["link_layer"] or None
    return data


def _server(state: HostState, opts: dict) -> int:
    me = _local(state, opts["device"])
    if me["state"] != "ACTIVE":
        raise Failure(f" Port number 1 state is {me['state'].title()}\n Couldn't set the link layer\n"
                      " Couldn't get context for the device", 1)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", opts["port"]))  # noqa: S104 - perftest listens on every address
        except OSError as exc:
            raise Failure(f" Couldn't listen to port {opts['port']}: {exc.strerror}", 1) from None
        sock.listen(1)
        sys.stdout.write("\n************************************\n* Waiting for client to connect... *\n"
                         "************************************\n")
        sys.stdout.flush()
        conn, _ = sock.accept()
        with conn:
            peer = _recv(conn)
            _send(conn, me)
            sys.stdout.write("\n".join(_header(me, server=True) + _addresses(me, peer)) + "\n")
            if _verdict(me, peer):
                raise Failure(" Failed to exchange data between server and clients\n"
                              " Failed to complete run_iter_bw function successfully", 1)
            sys.stdout.write("\n".join(_result(me, peer, opts["gbits"])) + "\n")
    return 0


def _client(state: HostState, opts: dict) -> int:
    me = _local(state, opts["device"])
    if me["state"] != "ACTIVE":
        raise Failure(f" Port number 1 state is {me['state'].title()}\n Couldn't set the link layer\n"
                      " Couldn't get context for the device", 1)
    try:
        conn = socket.create_connection((opts["server"], opts["port"]), timeout=30)
    except OSError:
        raise Failure(f"Couldn't connect to {opts['server']}:{opts['port']}\n"
                      " Unable to open file descriptor for socket connection", 1) from None
    with conn:
        _send(conn, me)
        peer = _recv(conn)
    sys.stdout.write("\n".join(_header(me, server=False) + _addresses(me, peer)) + "\n")
    why = _verdict(me, peer)
    if why == "link layer":
        raise Failure(f" Failed to modify QP 0x{me['qpn']:04x} to RTR\n Unable to Connect the HCA's through the link",
                      1)
    if why:
        raise Failure(" Completion with error at client\n"
                      f" Failed status 12: wr_id 0 syndrom 0x81\nscnt={128}, ccnt=0\n"
                      " Failed to complete run_iter_bw function successfully", 1)
    sys.stdout.write("\n".join(_result(me, peer, opts["gbits"])) + "\n")
    return 0


def run(argv: list[str], tool: str = "ib_write_bw") -> int:
    try:
        opts = _parse(argv)
        state = HostState()
        return _client(state, opts) if opts["server"] else _server(state, opts)
    except Failure as exc:
        sys.stdout.flush()
        sys.stderr.write(f"{exc}\n")
        return exc.rc
