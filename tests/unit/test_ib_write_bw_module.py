"""ib_write_bw's servers: started in the background, detached, logged, and the module does not wait for them."""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from pathlib import Path

from ansible_collections.mlplatform.gpunode.plugins.modules import ib_write_bw
from module_harness import patch_exits, run_module

# Fake ib_write_bw programs (python bodies); timeout(1) stays the real one.
SERVES_60S = ("import os, sys, time\n"
              "print('argv', *sys.argv[1:], flush=True)\n"
              "print('LC_ALL', os.environ.get('LC_ALL'), file=sys.stderr, flush=True)\n"
              "time.sleep(60)\n")
LISTENS = ("import socket, sys, time\n"  # on its -p port, as perftest does for the connection data
           "port = int(sys.argv[sys.argv.index('-p') + 1])\n"
           "sock = socket.socket(); sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
           "sock.bind(('127.0.0.1', port)); sock.listen(1)\n"
           "time.sleep(60)\n")
PORT_TAKEN = "import sys\nprint(' Couldn\\'t listen to port 18515: Address already in use', flush=True)\nsys.exit(1)\n"


def _install(tmp_path: Path, monkeypatch, body: str) -> None:
    """Put an ib_write_bw running ``body`` first on PATH, server logs in ``tmp_path``, the module's exits patched."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    tool = bindir / "ib_write_bw"
    tool.write_text(f"#!{sys.executable}\n{body}")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setattr(ib_write_bw.tempfile, "mkdtemp", lambda prefix: str(tmp_path))
    patch_exits(monkeypatch)


def _wait_for(path: Path, text: str) -> str:
    for _ in range(100):
        body = path.read_text() if path.exists() else ""
        if text in body:
            return body
        time.sleep(0.05)
    raise AssertionError(f"{path} never showed {text!r}: {body!r}")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_servers_start_detached_and_the_module_returns_at_once(tmp_path, monkeypatch):
    _install(tmp_path, monkeypatch, SERVES_60S)
    # A free port: simulated hosts share this network namespace, and their servers may hold perftest's ports.
    port = _free_port()
    began = time.monotonic()
    result = run_module(ib_write_bw.main, {"servers": [{"id": "a:0-b:0", "device": "mlx5_3", "port": port}],
                                           "timeout": 30})
    pid = result["started"]["a:0-b:0"]
    try:
        assert time.monotonic() - began < 10  # did not wait for the 60 s server
        assert result["changed"] is False and result["tests"] == {}
        log = _wait_for(tmp_path / f"{port}.log", "LC_ALL")
        assert f"argv -d mlx5_3 -p {port} --report_gbits -F" in log  # stdout and stderr both in the log
        assert "LC_ALL C" in log
        assert os.getsid(pid) == pid  # its own session: the connection's exec ending does not take it down
        assert oct((tmp_path / f"{port}.log").stat().st_mode & 0o777) == "0o600"
    finally:
        os.killpg(pid, signal.SIGKILL)  # timeout(1) and the server under it
        os.waitpid(pid, 0)


def test_servers_are_up_once_they_listen_not_after_a_fixed_wait(tmp_path, monkeypatch):
    _install(tmp_path, monkeypatch, LISTENS)
    port = _free_port()
    began = time.monotonic()
    result = run_module(ib_write_bw.main, {"servers": [{"id": "a:0-b:0", "device": "mlx5_3", "port": port}],
                                           "timeout": 30, "server_check_s": 20})
    pid = result["started"]["a:0-b:0"]
    try:
        # Returned once the port listened, long before the 20 s budget; the server is up and not an error.
        assert time.monotonic() - began < 10
        assert result["server_errors"] == {}
        assert port in ib_write_bw._listening_ports()
        assert os.waitpid(pid, os.WNOHANG) == (0, 0)
    finally:
        os.killpg(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def test_a_port_something_else_listens_on_is_refused_before_any_server_starts(tmp_path, monkeypatch):
    _install(tmp_path, monkeypatch, LISTENS)
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen(1)
        port = other.getsockname()[1]
        result = run_module(ib_write_bw.main, {"servers": [{"id": "a:0-b:0", "device": "mlx5_3", "port": port}],
                                               "timeout": 30, "server_check_s": 5})
    assert result["started"] == {}
    assert result["server_errors"] == {"a:0-b:0": f"port {port} is already in use (another process listens on it): "
                                                   "not started"}
    assert not (tmp_path / f"{port}.log").exists()  # nothing was started on it


def test_a_server_that_exits_is_a_server_error_with_its_reason(tmp_path, monkeypatch):
    _install(tmp_path, monkeypatch, PORT_TAKEN)
    result = run_module(ib_write_bw.main, {"servers": [{"id": "a:0-b:0", "device": "mlx5_3", "port": _free_port()}],
                                           "timeout": 30, "server_check_s": 10})
    assert list(result["started"]) == ["a:0-b:0"]
    assert result["server_errors"]["a:0-b:0"].startswith("exit status 1: ")
    assert "Couldn't listen to port 18515" in result["server_errors"]["a:0-b:0"]


# A client that connects to its server's -p port on 127.0.0.1 as perftest does; a refused connection is logged and
# is perftest's "Couldn't connect" failure, a connection the report of a run.
CONNECTS = ("import socket, sys, time\n"
            "port = int(sys.argv[sys.argv.index('-p') + 1])\n"
            "if sys.argv[-1] != '127.0.0.1':\n"  # a server (no peer address): serves for 60 s
            "    time.sleep(60)\n"
            "try:\n"
            "    socket.create_connection(('127.0.0.1', port), timeout=5).close()\n"
            "except OSError:\n"
            "    open(sys.argv[0] + '.refused', 'a').write('x')\n"
            "    print(f\"Couldn't connect to 127.0.0.1:{port}\")\n"
            "    sys.exit(1)\n"
            "rule = '-' * 87\n"
            "print(rule)\n"
            "print(' #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]')\n"
            "print(' 65536      5000             371.50             371.24             0.708000')\n"
            "print(rule)\n")


def test_retries_of_a_refused_connection_start_short_and_grow_to_a_quarter_second():
    assert [ib_write_bw.retry_wait_s(a) for a in range(6)] == [0.05, 0.1, 0.2, 0.25, 0.25, 0.25]


def test_one_call_starts_the_servers_then_runs_the_clients_retrying_until_the_peer_listens(tmp_path, monkeypatch):
    """A phase run at once: this host's client reaches a peer whose server starts later; the client retries the
    refused connection until it listens, and the result is the measured run."""
    _install(tmp_path, monkeypatch, CONNECTS)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        peer_port = probe.getsockname()[1]
    peer = socket.socket()
    peer.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    refused = tmp_path / "bin" / "ib_write_bw.refused"

    def start_peer_after_the_first_refusal():
        for _ in range(200):
            if refused.exists():
                break
            time.sleep(0.02)
        peer.bind(("127.0.0.1", peer_port))
        peer.listen(4)

    import threading  # noqa: PLC0415 -- only this test starts a peer

    starter = threading.Thread(target=start_peer_after_the_first_refusal)
    starter.start()
    try:
        result = run_module(ib_write_bw.main, {
            "servers": [{"id": "a:0-b:0", "device": "mlx5_0", "port": 18599}],
            "clients": [{"id": "c:0-a:0", "device": "mlx5_0", "port": peer_port, "server": "127.0.0.1"}],
            "connect_retries": 20, "server_check_s": 0.2, "timeout": 30})
    finally:
        starter.join()
        peer.close()
    os.kill(result["started"]["a:0-b:0"], signal.SIGTERM)  # the server this call started, detached
    assert result["server_errors"] == {}
    assert result["tests"]["c:0-a:0"] == {"gbps": 371.24, "peak_gbps": 371.5, "error": None, "rc": 0}
    assert len(refused.read_text()) >= 1  # refused first, then connected


# Servers whose client came at once (a peer whose phase runs at once): one ends well, one fails with its test after
# the exchange (perftest's "remote address:" line, real-outputs-day-two/ib_write_bw-cx7-roce200-*.txt).
SERVED = ("import sys\n"
          "port = int(sys.argv[sys.argv.index('-p') + 1])\n"
          "if port % 2:\n"
          "    print(' remote address: LID 0000 QPN 0x03eb PSN 0x75f6ee')\n"
          "    print(' Failed to complete run_iter_bw function successfully')\n"
          "    sys.exit(1)\n")


def test_servers_that_had_their_client_during_the_check_are_started_not_failed(tmp_path, monkeypatch):
    """Each server ends before the check sees it listen; both are reaped once, neither is a server error."""
    _install(tmp_path, monkeypatch, SERVED)
    even = _free_port() // 2 * 2
    result = run_module(ib_write_bw.main, {"servers": [{"id": "a:0-b:0", "device": "mlx5_0", "port": even},
                                                       {"id": "a:1-b:1", "device": "mlx5_1", "port": even + 1}],
                                           "timeout": 30, "server_check_s": 10})
    assert sorted(result["started"]) == ["a:0-b:0", "a:1-b:1"]
    assert result["server_errors"] == {}
