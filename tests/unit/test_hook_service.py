"""The hook service as an attacker on the provisioning network meets it: the real ``gpunode hook serve``.

Each test starts the service (uvicorn, its worker, SQLite) as a process on a free loopback port and
talks to it over real sockets: identity bound at first contact (impersonation and re-key refused
with 409), replays and non-finite timestamps refused, a 200 MB unauthenticated chunked post refused
without the service's memory growing, TLS with a test CA, idle connections not counted as requests, the state files'
modes, the "re-run after interruption" mark after a SIGKILL, and no secret anywhere.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml
from test_hook import (
    ED25519,
    ED25519_OTHER,
    SECRET,
    free_port,
    known_lines,
    phone_home_form,
    scan_for_secrets,
    signed,
    site,
)
from testca import make_ca

from gpunode import cli
from gpunode.hook import requests as hreq
from gpunode.hook.config import HookConfig
from gpunode.hook.service import plain_http_warning
from gpunode.hook.store import Store

__all__ = ["site"]  # the fixture, shared with test_hook

MB = 1024 * 1024


class Service:
    """``gpunode hook serve`` in a child process, with its settings file and log."""

    def __init__(self, site: Path, **settings):
        self.site = site
        self.port = free_port(18120, 18160)  # this module's ports (test_hook.py uses 18081-18099)
        values = {"state_dir": str(site / "state"), "project_dir": str(site / "project"), "playbook": "play.yml",
                  "inventory": "hosts.yml", "run_secrets_file": str(site / "run-secrets.yml"), "batch_window": 0.2,
                  "retry_delay": 0, "max_attempts": 1, "listen_port": self.port}
        values.update(settings)
        (site / "hook.yml").write_text(yaml.safe_dump(values))
        self.config = HookConfig(state_dir=site / "state")
        self.tls = bool(values.get("tls_cert_file"))
        self.base = f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.log = site / "serve.log"

    def start(self, verify: ssl.SSLContext | bool = True) -> Service:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gpunode.cli", "hook", "-c", str(self.site / "hook.yml"), "serve"],
                stdout=log, stderr=log, env=dict(os.environ, PYTHONPATH=str(Path(cli.__file__).parents[1])))
        for _ in range(150):
            try:
                httpx.get(f"{self.base}/v1/hosts", timeout=1, verify=verify)
                return self
            except (httpx.TransportError, ssl.SSLError):
                if self.proc.poll() is not None:
                    break
                time.sleep(0.1)
        self.stop()
        raise AssertionError(f"the hook did not start:\n{self.log.read_text()[-2000:]}")

    def stop(self, sig: int = signal.SIGTERM) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(sig)
        return self.proc.wait(timeout=60)

    def rss(self) -> dict[str, int]:
        """VmRSS and VmHWM (peak) of the service process, in bytes (/proc/PID/status)."""
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines())
        return {k: int(fields[k].split()[0]) * 1024 for k in ("VmRSS", "VmHWM")}


@pytest.fixture
def service(site):
    started: list[Service] = []

    def make(**settings) -> Service:
        svc = Service(site, **settings)
        started.append(svc)
        return svc

    yield make
    for svc in started:
        svc.stop()


def chunked_flood(port: int, path: str, headers: dict[str, str], total: int = 200 * MB,
                  chunk: int = 64 * 1024) -> tuple[bytes, int]:
    """POST ``total`` bytes as a chunked body from a generator, stopping once the service answers.

    Returns the response head (b"" if the service closed without one) and the bytes sent.
    """
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nTransfer-Encoding: chunked\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    piece = b"%x\r\n" % chunk + b"x" * chunk + b"\r\n"
    pieces = (piece for _ in range(total // chunk))
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head.encode())
        answer = b""
        for data in pieces:
            readable, writable, _ = select.select([sock], [sock], [], 30)
            if readable:
                break
            assert writable, "the service neither reads nor answers"
            try:
                sock.sendall(data)
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += chunk
        try:
            while b"\r\n\r\n" not in answer:
                more = sock.recv(65536)
                if not more:
                    break
                answer += more
        except (ConnectionResetError, TimeoutError):
            pass
    return answer.split(b"\r\n\r\n", 1)[0], sent


def test_identity_is_bound_at_first_contact_and_bodies_are_limited_while_they_stream(site, service):
    svc = service(max_concurrent_requests=6).start()
    base, auth = svc.base, {"Authorization": f"Bearer {SECRET}"}
    url = f"{base}/v1/phone-home/i-10?token={SECRET}"
    assert httpx.post(url, data=phone_home_form("node-a", "i-10")).status_code == 202
    bound = Store(svc.config.db_path).identity("node-a")
    known = svc.config.known_hosts.read_text()

    # Impersonation: another machine, with the site secret, claims node-a with its own instance and key.
    attacker_key = ED25519_OTHER
    forged = dict(phone_home_form("node-a", "i-20"), pub_key_ed25519=attacker_key, pub_key_rsa="N/A",
                  pub_key_ecdsa="N/A")
    resp = httpx.post(f"{base}/v1/phone-home/i-20?token={SECRET}", data=forged)
    assert resp.status_code == 409
    assert "identity conflict: node-a was bound at first contact" in resp.json()["error"]
    assert "instance_id i-20 (bound: i-10)" in resp.json()["error"]
    # Re-key with the right instance id: a "duplicate" post carrying other keys (bearer, JSON).
    resp = httpx.post(f"{base}/v1/hosts", json={"host": "node-a", "instance_id": "i-10",
                                                "host_keys": {"ed25519": attacker_key}}, headers=auth)
    assert resp.status_code == 409 and "host keys ssh-ed25519 SHA256:" in resp.json()["error"]
    store = Store(svc.config.db_path)
    assert store.identity("node-a") == bound
    assert store.host("node-a")["instance_id"] == "i-10"
    assert svc.config.known_hosts.read_text() == known and attacker_key not in known
    refused = [r for r in store.requests("node-a") if r["outcome"] == "refused"]
    assert [r["instance_id"] for r in refused] == ["i-20", "i-10"]
    assert all(r["detail"].startswith("identity conflict: node-a") for r in refused)
    store.close()
    # ?token= is phone_home's only.
    assert httpx.get(f"{base}/v1/hosts?token={SECRET}").status_code == 401

    # 200 MB chunked, no credential: refused before the body is read; with the credential: 413 at
    # the limit while it streams. Neither grows the service.
    for _ in range(3):  # warm both paths first
        chunked_flood(svc.port, "/v1/hosts", {}, total=256 * 1024)
        chunked_flood(svc.port, "/v1/hosts", auth, total=256 * 1024)
    before = svc.rss()
    answer, sent = chunked_flood(svc.port, "/v1/hosts", {"Content-Type": "application/json"})
    assert answer.startswith(b"HTTP/1.1 401"), answer
    answer2, sent2 = chunked_flood(svc.port, "/v1/phone-home", {"Authorization": f"Bearer {SECRET}",
                                                                 "Content-Type": "application/x-www-form-urlencoded"})
    assert answer2.startswith(b"HTTP/1.1 413"), answer2
    after = svc.rss()
    growth = after["VmHWM"] - before["VmHWM"], after["VmRSS"] - before["VmRSS"]
    print(f"chunked 200 MB: sent {sent // MB} MB / {sent2 // MB} MB before the answer; "
          f"VmRSS {before['VmRSS'] / MB:.1f} -> {after['VmRSS'] / MB:.1f} MB, peak growth {growth[0] / MB:.2f} MB")
    assert max(growth) < 10 * MB

    # The cap counts requests being handled, not open connections: with 6 idle connections held
    # open (max_concurrent_requests is 6), a request is still answered.
    held = [socket.create_connection(("127.0.0.1", svc.port)) for _ in range(6)]
    try:
        time.sleep(0.3)
        assert httpx.get(f"{base}/v1/hosts", headers=auth).status_code == 200
    finally:
        for sock in held:
            sock.close()

    # node-a's run finishes; then every state file is 0600 and every directory 0700.
    for _ in range(300):
        if httpx.get(f"{base}/v1/hosts/node-a", headers=auth).json()["state"] in ("ok", "failed"):
            break
        time.sleep(0.2)
    assert httpx.get(f"{base}/v1/hosts/node-a", headers=auth).json()["state"] == "ok"
    state = svc.config.state_dir
    files = {p.name: p.stat().st_mode & 0o777 for p in [state, *state.iterdir(), *(state / "results").iterdir()]}
    assert {n: files[n] for n in ("hook.db", "hook.db-wal", "hook.db-shm", "hook.log", "known_hosts",
                                  "run-1.json")} == dict.fromkeys(("hook.db", "hook.db-wal", "hook.db-shm",
                                                                   "hook.log", "known_hosts", "run-1.json"), 0o600)
    assert {n: files[n] for n in ("state", "results", "artifacts", "jobs")} == dict.fromkeys(
        ("state", "results", "artifacts", "jobs"), 0o700)
    assert svc.stop() == 0
    log = svc.log.read_text()
    assert "refused: identity conflict: node-a" in log and "plain HTTP" not in log  # loopback: no warning
    assert scan_for_secrets(state, svc.log) == []


def test_tls_with_a_site_ca_signed_requests_once_and_no_nan(site, service, tmp_path):
    ca = make_ca(tmp_path / "ca")
    svc = service(auth="hmac", tls_cert_file=str(ca["cert"]), tls_key_file=str(ca["key"]))
    trust = ssl.create_default_context(cafile=str(ca["ca"]))
    svc.start(verify=trust)
    base = svc.base
    assert base.startswith("https://")
    with pytest.raises(httpx.ConnectError):  # the system's CAs do not know the site CA
        httpx.get(f"{base}/v1/hosts")
    with pytest.raises(httpx.TransportError):  # no plain HTTP on the TLS port
        httpx.get(f"http://127.0.0.1:{svc.port}/v1/hosts", headers=signed(b""))
    with httpx.Client(verify=trust) as client:
        sig = hreq.phone_home_signature(SECRET.encode(), "i-10", "node-a")
        assert client.post(f"{base}/v1/phone-home/i-10?sig={sig}", data=phone_home_form("node-a", "i-10")) \
            .status_code == 202
        # node-a's per-machine signature speaks for node-a only.
        resp = client.post(f"{base}/v1/phone-home/i-10?sig={sig}", data=phone_home_form("node-b", "i-10"))
        assert resp.status_code == 401
        # ... and proves node-a's instance id, not new host keys.
        new_keys = dict(phone_home_form("node-a", "i-10"), pub_key_ed25519=ED25519_OTHER)
        resp = client.post(f"{base}/v1/phone-home/i-10?sig={sig}", data=new_keys)
        assert resp.status_code == 409 and "host keys" in resp.json()["error"]
        # A signed JSON request is accepted once; the same request again is a replay.
        body = json.dumps({"host": "node-b", "instance_id": "i-b"}).encode()
        headers = signed(body)
        assert client.post(f"{base}/v1/hosts", content=body, headers=headers).status_code == 202
        replay = client.post(f"{base}/v1/hosts", content=body, headers=headers)
        assert replay.status_code == 401 and "already used" in replay.json()["error"]
        for ts in ("nan", "inf", "NaN"):
            resp = client.post(f"{base}/v1/hosts", content=body, headers=signed(body, ts=ts))
            assert resp.status_code == 401 and "finite" in resp.json()["error"], ts
        got = client.get(f"{base}/v1/hosts", headers=signed(b"")).json()
        assert sorted(h["name"] for h in got["hosts"]) == ["node-a", "node-b"]
        assert [h["requests"] for h in sorted(got["hosts"], key=lambda h: h["name"])] == [2, 1]
    store = Store(svc.config.db_path)
    assert known_lines(svc.config, "node-a") and ED25519 in store.identity("node-a")["host_keys"].values()
    store.close()
    svc.stop()
    assert "https://127.0.0.1" in svc.log.read_text()


def test_plain_http_on_a_network_address_is_warned_about():
    assert plain_http_warning(HookConfig(listen_host="10.10.0.5")).startswith("serving plain HTTP on 10.10.0.5")
    assert plain_http_warning(HookConfig(listen_host="0.0.0.0")) is not None  # noqa: S104 - the case it is for
    for host in ("127.0.0.1", "::1", "localhost"):
        assert plain_http_warning(HookConfig(listen_host=host)) is None
    assert plain_http_warning(HookConfig(listen_host="10.10.0.5", tls_cert_file=Path("c"), tls_key_file=Path("k"))) \
        is None


def test_hosts_rerun_after_a_crash_are_marked(site, service):
    inventory = yaml.safe_load((site / "project" / "hosts.yml").read_text())
    inventory["all"]["hosts"]["slow-node"]["sleep_here"] = 6
    (site / "project" / "hosts.yml").write_text(yaml.safe_dump(inventory))
    auth = {"Authorization": f"Bearer {SECRET}"}
    svc = service().start()
    httpx.post(f"{svc.base}/v1/hosts", json={"host": "slow-node"}, headers=auth).raise_for_status()
    for _ in range(150):
        if httpx.get(f"{svc.base}/v1/hosts/slow-node", headers=auth).json()["state"] == "running":
            break
        time.sleep(0.1)
    svc.stop(signal.SIGKILL)  # a crash: no cancel, the run is left `running` in the database
    svc.start()
    for _ in range(300):
        host = httpx.get(f"{svc.base}/v1/hosts/slow-node", headers=auth).json()
        if host["state"] in ("ok", "failed"):
            break
        time.sleep(0.2)
    assert (host["state"], host["interrupted_run"], host["attempts"]) == ("ok", 1, 1)
    status = subprocess.run([sys.executable, "-m", "gpunode.cli", "hook", "-c", str(site / "hook.yml"), "status"],
                            capture_output=True, text=True, check=True,
                            env=dict(os.environ, PYTHONPATH=str(Path(cli.__file__).parents[1])))
    assert "note='re-run after interruption (run 1)'" in status.stdout
    runs = httpx.get(f"{svc.base}/v1/runs", headers=auth).json()["runs"]
    assert [r["state"] for r in runs] == ["interrupted", "ok"]
    assert "recovered 1 host(s) from an interrupted run" in svc.log.read_text()
