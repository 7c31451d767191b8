"""The hook against an attacker on the provisioning network, on loopback: one test per class of attack, and a sweep.

Classes: idle or slow clients that would starve others (header/body deadlines, per-peer and total
connection limits); a shared secret that would speak for every host (the operator credential,
forwarded headers only from listed proxies); input that should not be accepted (host keys that do
not parse as their type, repeated fields and keys, nesting, counts and sizes); state lost while
serving (the database removed, a full disk); the CLI's host names; and the sweep, which sends every
attack of ``ATTACKS`` to a real ``gpunode hook serve`` and checks that each is refused or harmless
and that nothing the legitimate hosts posted is lost.
"""

from __future__ import annotations

import base64
import concurrent.futures
import socket
import sqlite3
import struct
import time
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from test_hook import (
    ECDSA,
    ED25519,
    ED25519_OTHER,
    RSA,
    SECRET,
    client_for,
    known_lines,
    make_config,
    phone_home_form,
    scan_for_secrets,
    site,
)
from test_hook_service import service

from gpunode import cli
from gpunode.hook import requests as hreq
from gpunode.hook.revalidate import select_hosts
from gpunode.hook.store import Store
from gpunode.hook.worker import Worker

__all__ = ["service", "site"]  # the fixtures, shared with test_hook and test_hook_service

OPERATOR = "operator-secret-5b1e7d0c9a8f4e21"  # noqa: S105 - a test secret the scans look for
AUTH = {"Authorization": f"Bearer {SECRET}"}
OPS = {"Authorization": f"Bearer {OPERATOR}"}
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def _openssh(private) -> str:
    public = private.public_key()
    return public.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()


def _ssh_string(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


#: A well-formed ssh-rsa line with a 512-bit modulus (too small to be a host key today).
RSA_512 = "ssh-rsa " + base64.b64encode(_ssh_string(b"ssh-rsa") + _ssh_string(b"\x01\x00\x01") + _ssh_string(
    b"\x00" + ((1 << 511) | 0x3039).to_bytes(64, "big"))).decode()
ECDSA_384 = _openssh(ec.derive_private_key(0xC0FFEE, ec.SECP384R1()))


def _blob(key: str) -> bytes:
    return base64.b64decode(key.split()[1])


def _line(kind: str, blob: bytes) -> str:
    return f"{kind} {base64.b64encode(blob).decode()}"


#: Host key values that must not be bound: the form field each is posted in, the status and the reason.
BAD_KEYS = {
    "60 KB of base64": ("pub_key_ed25519", "ssh-ed25519 " + "A" * 60_000, 413, "longer than 16384 bytes"),
    "a bare type and AAAA": ("pub_key_ed25519", "ssh-ed25519 AAAA", 400, "does not parse as an ssh-ed25519 key"),
    "an ed25519 name over an RSA blob": ("pub_key_ed25519", _line("ssh-ed25519", _blob(RSA)), 400,
                                         "does not parse as an ssh-ed25519 key"),
    "an RSA name over an ed25519 blob": ("pub_key_rsa", _line("ssh-rsa", _blob(ED25519)), 400,
                                         "does not parse as an ssh-rsa key"),
    "a nistp384 name over a nistp256 blob": ("pub_key_ecdsa", _line("ecdsa-sha2-nistp384", _blob(ECDSA)), 400,
                                             "does not parse as an ecdsa-sha2-nistp384 key"),
    "an embedded newline": ("pub_key_ed25519", ED25519 + "\nssh-ed25519 AAAA", 400,
                            "a control character or line break"),
    "a NUL byte": ("pub_key_ed25519", ED25519[:30] + "\x00" + ED25519[30:], 400, "a control character or line break"),
    "data after the key in the blob": ("pub_key_ed25519",
                                       _line("ssh-ed25519", _blob(ED25519) + b"\x00\x00\x00\x04more"), 400,
                                       "does not parse as an ssh-ed25519 key"),
    "a 512-bit RSA key": ("pub_key_rsa", RSA_512, 400, "an RSA key of 512 bits (accepted: 1024-16384)"),
    "an unknown type": ("pub_key_ed25519", "ssh-foo " + ED25519.split()[1], 400, "key type ssh-foo does not belong"),
    "not base64": ("pub_key_ed25519", "ssh-ed25519 ***", 400, "not an OpenSSH public key line"),
}


# -- idle and slow clients ----------------------------------------------------------------------

def connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
    sock.settimeout(10)
    return sock


def read_answer(sock: socket.socket) -> bytes:
    """Everything the service sends until it closes the connection ("" when it closed without an answer)."""
    data = b""
    try:
        while True:
            more = sock.recv(65536)
            if not more:
                return data
            data += more
    except (ConnectionResetError, TimeoutError):
        return data


def test_idle_and_slow_clients_cannot_starve_others_and_forwarded_headers_need_a_listed_proxy(site, service):
    svc = service(header_timeout=1.5, body_timeout=1.5, max_connections_per_peer=8).start()
    # 66 connections that send a request line and one header, then wait (from 11 addresses, 6 each).
    idle = [connect(svc.port, f"127.0.0.{2 + i // 6}") for i in range(66)]
    for sock in idle:
        sock.sendall(b"POST /v1/hosts HTTP/1.1\r\nHost: x\r\n")
    time.sleep(0.3)
    # Another machine is answered while they are held open, and X-Forwarded-For is not believed.
    resp = httpx.post(f"{svc.base}/v1/phone-home?token={SECRET}", data=phone_home_form("node-a", "i-10"),
                      headers={"X-Forwarded-For": "10.9.9.9"})
    assert resp.status_code == 202
    # A ninth connection from one address is refused at once, naming the limit.
    nine = [connect(svc.port, "127.0.0.50") for _ in range(9)]
    answer = read_answer(nine[-1])
    assert answer.startswith(b"HTTP/1.1 429")
    assert b"more than max_connections_per_peer (8) open from 127.0.0.50" in answer
    # A body that stops arriving gets 408 naming body_timeout.
    slow = connect(svc.port)
    slow.sendall(b"POST /v1/hosts HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + SECRET.encode()
                 + b"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"host\"")
    # A kept-alive connection on which no next request starts is closed without an answer of its own.
    kept = connect(svc.port)
    kept.sendall(b"GET /v1/hosts HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + SECRET.encode() + b"\r\n\r\n")
    # Every idle connection is answered 408 naming header_timeout, and closed.
    answers = [read_answer(sock) for sock in idle]
    assert all(a.startswith(b"HTTP/1.1 408") and b"header_timeout (1.5 s)" in a for a in answers), answers[0]
    assert b"body: not received within body_timeout (1.5 s)" in read_answer(slow)
    kept_answer = read_answer(kept)
    assert kept_answer.startswith(b"HTTP/1.1 200") and kept_answer.count(b"HTTP/1.1 ") == 1
    for sock in [*idle, *nine, slow, kept]:
        sock.close()
    store = Store(svc.config.db_path)
    assert [r["peer"] for r in store.requests("node-a")] == ["127.0.0.1"]
    assert store.hosts()[0]["name"] == "node-a" and len(store.requests()) == 1  # the slow body recorded nothing
    store.close()
    svc.stop()

    # With the proxy listed, its X-Forwarded-For names the peer.
    svc = service(trusted_proxies=["127.0.0.1"]).start()
    resp = httpx.post(f"{svc.base}/v1/phone-home?token={SECRET}", data=phone_home_form("node-b", "i-11"),
                      headers={"X-Forwarded-For": "10.9.9.9"})
    assert resp.status_code == 202
    store = Store(svc.config.db_path)
    assert [r["peer"] for r in store.requests("node-b")] == ["10.9.9.9"]
    store.close()


# -- what a credential may do ------------------------------------------------------------------

def test_the_shared_secret_speaks_for_no_other_host_and_operator_actions_need_the_operator(site, monkeypatch):
    monkeypatch.setenv("GPUNODE_HOOK_OPERATOR_SECRET", OPERATOR)
    config = make_config(site)
    store = Store(config.db_path)
    client = client_for(config, store)
    assert client.post(f"/v1/phone-home?token={SECRET}", data=phone_home_form("node-a")).status_code == 202
    assert client.post(f"/v1/phone-home?token={SECRET}", data=phone_home_form("node-b", "i-b")).status_code == 202
    known = config.known_hosts.read_text()
    # The site secret cannot force a re-run, post as the operator, rename a bound host or take a name.
    refusals = [
        ({"json": {"host": "node-a", "force": True}}, 403, "force: re-running a host needs the operator credential"),
        ({"json": {"host": "node-a"}, "headers": {"X-Gpunode-Source": "operator"}}, 403,
         "X-Gpunode-Source: operator needs the operator credential"),
        ({"json": {"host": "node-a", "fqdn": "node-a.elsewhere.example"}}, 409,
         "identity conflict: node-a's fqdn is node-a.gpu.example.net; changing it to node-a.elsewhere.example"
         " needs the operator credential"),
        ({"json": {"host": "evil", "fqdn": "node-b.gpu.example.net"}}, 400,
         "fqdn: node-b.gpu.example.net does not belong to host evil"),
    ]
    for kwargs, status, reason in refusals:
        headers = dict(AUTH, **kwargs.pop("headers", {}))
        resp = client.post("/v1/hosts", headers=headers, **kwargs)
        assert (resp.status_code, reason in resp.json()["error"]) == (status, True), resp.json()
    assert store.host("node-a")["fqdn"] == "node-a.gpu.example.net" and store.host("node-a")["state"] == "queued"
    assert store.host("evil") is None and config.known_hosts.read_text() == known
    # The operator can: rename node-a (known_hosts follows) and force a re-run.
    resp = client.post("/v1/hosts", json={"host": "node-a", "fqdn": "node-a.new.example"}, headers=OPS)
    assert resp.status_code == 202
    assert store.host("node-a")["fqdn"] == "node-a.new.example"
    assert all(line.startswith("node-a,node-a.new.example ") for line in known_lines(config, "node-a"))
    resp = client.post("/v1/hosts", json={"host": "node-a", "force": True}, headers=dict(OPS, **{
        "X-Gpunode-Source": "operator"}))
    assert resp.status_code == 202 and store.requests("node-a")[-1]["source"] == "operator"
    # The operator secret must not be the machines' secret.
    monkeypatch.setenv("GPUNODE_HOOK_OPERATOR_SECRET", SECRET)
    with pytest.raises(ValueError, match="must differ from the hook secret"):
        make_config(site)


# -- input ------------------------------------------------------------------------------------

@pytest.mark.parametrize("what", sorted(BAD_KEYS))
def test_host_keys_are_parsed_as_the_type_they_claim(site, what):
    field, value, status, reason = BAD_KEYS[what]
    config = make_config(site)
    store = Store(config.db_path)
    resp = client_for(config, store).post(f"/v1/phone-home?token={SECRET}",
                                          data=dict(phone_home_form("node-a"), **{field: value}))
    assert resp.status_code == status and reason in resp.json()["error"], resp.json()
    assert store.requests() == [] and not config.known_hosts.exists()


def test_real_keys_of_every_type_parse_to_their_canonical_line():
    for field, key in (("pub_key_rsa", RSA), ("pub_key_ecdsa", ECDSA), ("pub_key_ecdsa", ECDSA_384),
                       ("pub_key_ed25519", ED25519)):
        assert hreq._host_key(field, key + " root@node-a") == key


NESTED = b"[" * 25_000 + b"]" * 25_000
MANY_FIELDS = "&".join(f"f{i}=x" for i in range(5000))


@pytest.mark.parametrize(("kwargs", "status", "reason"), [
    ({"url": f"/v1/phone-home?token={SECRET}", "content": "hostname=node-a&hostname=evil", "headers": FORM}, 400,
     "phone_home: form field 'hostname' repeated"),
    ({"url": f"/v1/phone-home?token={SECRET}", "content": MANY_FIELDS, "headers": FORM}, 413,
     "phone_home: more than 16 form fields"),
    ({"url": f"/v1/phone-home?token={SECRET}", "content": "hostname=node-a&fqdn=" + "a" * 17000, "headers": FORM},
     413, "form field 'fqdn' longer than 16384 bytes"),
    ({"url": "/v1/hosts", "content": b'{"host": "node-a", "host": "evil"}', "headers": AUTH}, 400,
     "body: JSON key 'host' repeated"),
    ({"url": "/v1/hosts", "content": NESTED, "headers": AUTH}, 400, "body: JSON nested deeper than 4 levels"),
    ({"url": "/v1/hosts", "json": {"host": "node-a", "instance_id": "i" * 300}, "headers": AUTH}, 400,
     "instance_id: longer than 128 characters"),
    ({"url": "/v1/hosts", "json": {"host": "node-a", "host_keys": {f"k{i}": ED25519 for i in range(9)}},
      "headers": AUTH}, 400, "host_keys: more than 8 keys"),
])
def test_repeated_nested_and_oversized_input_gets_a_4xx_naming_the_limit(site, kwargs, status, reason):
    config = make_config(site)
    store = Store(config.db_path)
    resp = client_for(config, store).post(**kwargs)
    assert (resp.status_code, reason in resp.json()["error"]) == (status, True), resp.json()
    assert store.requests() == []


def test_oversized_ids_and_bad_names_in_urls_get_400(site):
    config = make_config(site)
    client = client_for(config, Store(config.db_path))
    resp = client.get("/v1/runs/" + "9" * 40, headers=AUTH)
    assert (resp.status_code, resp.json()["error"]) == (400, "run id: expected a number of at most 18 digits")
    resp = client.get("/v1/hosts/a;touch x", headers=AUTH)
    assert resp.status_code == 400 and resp.json()["error"] == "host: 'a;touch x' is not a valid host name"
    assert client.get("/v1/runs/12", headers=AUTH).status_code == 404


# -- state lost while serving ------------------------------------------------------------------

def test_a_removed_or_full_database_refuses_new_work_with_503_saying_why(site, caplog):
    config = make_config(site)
    store = Store(config.db_path)
    client = client_for(config, store)
    assert client.post(f"/v1/phone-home?token={SECRET}", data=phone_home_form("node-a")).status_code == 202
    config.db_path.unlink()
    resp = client.post(f"/v1/phone-home?token={SECRET}", data=phone_home_form("node-b", "i-b"))
    assert resp.status_code == 503
    assert resp.json()["error"] == (f"state database {config.db_path}: removed while the service ran;"
                                    " new requests are refused until the service is restarted")
    store.close()

    # A full disk (SQLite's SQLITE_FULL; here from a page limit on the database) is named as such.
    fresh = make_config(site, state_dir=site / "state2")
    store = Store(fresh.db_path)
    pages = store._db.execute("PRAGMA page_count").fetchone()[0]
    store._db.execute(f"PRAGMA max_page_count = {pages + 2}")
    client = client_for(fresh, store)
    statuses = []
    for i in range(200):
        statuses.append(client.post("/v1/hosts", json={"host": f"node-{i}"}, headers=AUTH))
        if statuses[-1].status_code != 202:
            break
    last = statuses[-1]
    assert last.status_code == 503, last.text
    assert last.json()["error"] == (f"state database {fresh.db_path}: the disk is full"
                                    " (SQLITE_FULL: database or disk is full)")
    assert "refusing new work: state database" in caplog.text and "the disk is full" in caplog.text
    assert "rollback" not in caplog.text.lower()
    accepted = [r.json()["host"] for r in statuses if r.status_code == 202]
    store.close()
    # Every request answered 202 is there after a restart; the refused one is not.
    with sqlite3.connect(fresh.db_path) as db:
        assert [r[0] for r in db.execute("SELECT host FROM requests ORDER BY id")] == accepted


def test_the_service_says_once_why_it_stopped_taking_work(site, service):
    svc = service().start()
    url = f"{svc.base}/v1/phone-home?token={SECRET}"
    assert httpx.post(url, data=phone_home_form("node-a", "i-a")).status_code == 202
    svc.config.db_path.unlink()
    for _ in range(3):
        resp = httpx.post(url, data=phone_home_form("node-b", "i-b"))
        assert resp.status_code == 503 and "removed while the service ran" in resp.json()["error"]
    for _ in range(300):  # the worker looks for due hosts every second, once node-a's run (if it began) is over
        if "worker: no run started" in svc.log.read_text():
            break
        time.sleep(0.1)
    time.sleep(1.5)  # ... and does not say it again
    svc.stop()
    log = svc.log.read_text()
    assert log.count("refusing new work: state database") == 3
    assert log.count("worker: no run started: state database") == 1 and "Traceback" not in log


# -- the CLI ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["../../etc", "a;touch x", "node 1", "-node", "x" * 300])
def test_cli_run_refuses_what_the_api_refuses_and_records_nothing(site, name, capsys):
    state = site / "state"
    rc = cli.main(["hook", "--state-dir", str(state), "--project-dir", str(site / "project"), "--playbook",
                   "play.yml", "--inventory", "hosts.yml", "run", "--host", "node-a", f"--host={name}"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "is not a valid host name" in err and err.startswith("gpunode: error: --host: ")
    assert not (state / "hook.db").exists() and not (state / "results").exists()
    assert not Path("a").exists() and not Path("x").exists()


def test_a_recorded_name_that_is_not_a_host_name_never_reaches_a_run(site):
    config = make_config(site, max_attempts=1)
    store = Store(config.db_path)
    for name in ("a;touch x", "node-a"):  # as a database written before names were checked might hold
        store.record_request(source="api", host=name, instance_id=None, fqdn=None, host_keys={}, peer=None)
    run = Worker(config, store).run_once(only=["a;touch x"])
    assert run["result"]["status"] == "error"
    assert run["result"]["error"] == "RequestError: inventory name: 'a;touch x' is not a valid host name"
    assert store.host("a;touch x")["state"] == "failed"  # not left running
    assert not (config.artifacts_dir / f"run-{run['id']}").exists() and list(config.results_dir.glob("*")) == []
    # A scheduled revalidation of the whole inventory excludes the hosts being provisioned by name: not this one.
    assert select_hosts(store, "inventory") == (None, ["node-a"])


def test_cli_names_are_canonical_like_the_apis():
    from gpunode.hook.service import host_names

    assert host_names(["NODE001", " node-b ", "node001"]) == ["node001", "node-b"]


# -- the sweep --------------------------------------------------------------------------------

def raw(port: int, data: bytes, *, source: str = "127.0.0.1", hold: float = 0.0) -> bytes:
    """Send bytes on a fresh connection (optionally wait); the status line of the last answer (b"" if none)."""
    with connect(port, source) as sock:
        sock.sendall(data)
        if hold:
            time.sleep(hold)
        answer = read_answer(sock)
    last = answer.rfind(b"HTTP/1.1 ")
    return answer[last:].split(b"\r\n", 1)[0] if last >= 0 else b""


def status_of(line: bytes) -> int:
    parts = line.split()
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


def _sweep_cases(base: str, port: int, client: httpx.Client) -> list[tuple[str, str, object]]:
    """``(class, name, call)``: call() returns an HTTP status (0: the connection was closed without one)."""
    ph = f"{base}/v1/phone-home"

    def post(url, **kw):
        return lambda: client.post(url, **kw).status_code

    def get(url, **kw):
        return lambda: client.get(url, **kw).status_code

    def form(host="node-a", iid="i-a", **fields):
        return dict(phone_home_form(host, iid), **fields)

    cases: list[tuple[str, str, object]] = []
    add = cases.append
    # credentials
    for name, headers in [("none", {}), ("wrong bearer", {"Authorization": "Bearer " + "x" * 28}),
                          ("secret plus a byte", {"Authorization": f"Bearer {SECRET}x"}),
                          ("secret prefix", {"Authorization": f"Bearer {SECRET[:-1]}"}),
                          ("empty bearer", {"Authorization": "Bearer"}),
                          ("basic auth", {"Authorization": "Basic " + base64.b64encode(SECRET.encode()).decode()}),
                          ("hmac headers in bearer mode", {"X-Gpunode-Signature": "sha256=" + "0" * 64})]:
        add(("credential", f"POST /v1/hosts, {name}", post(f"{base}/v1/hosts", json={"host": "evil"}, headers=headers)))
        add(("credential", f"GET /v1/hosts, {name}", get(f"{base}/v1/hosts", headers=headers)))
    add(("credential", "?token= on /v1/hosts", post(f"{base}/v1/hosts?token={SECRET}", json={"host": "evil"})))
    add(("credential", "?token= on GET", get(f"{base}/v1/hosts?token={SECRET}")))
    add(("credential", "wrong ?token=", post(f"{ph}?token=nope", data=form("evil", "i-evil"))))
    # identity
    add(("identity", "impersonate node-a from another instance", post(f"{ph}?token={SECRET}", data=form(iid="i-x"))))
    add(("identity", "substitute node-a's host key", post(f"{ph}?token={SECRET}",
                                                             data=form(pub_key_ed25519=ED25519_OTHER))))
    add(("identity", "re-key node-a by JSON", post(f"{base}/v1/hosts", headers=AUTH, json={
        "host": "node-a", "host_keys": {"ed25519": ED25519_OTHER}})))
    add(("identity", "new instance id by JSON", post(f"{base}/v1/hosts", headers=AUTH,
                                                     json={"host": "node-a", "instance_id": "i-new"})))
    add(("identity", "claim node-b's fqdn", post(f"{ph}?token={SECRET}",
                                                 data=form("evil", "i-evil", fqdn="node-b.gpu.example.net"))))
    add(("identity", "change node-a's fqdn", post(f"{base}/v1/hosts", headers=AUTH,
                                                  json={"host": "node-a", "fqdn": "node-a.evil.example"})))
    add(("identity", "force a re-run of node-b", post(f"{base}/v1/hosts", headers=AUTH,
                                                      json={"host": "node-b", "force": True})))
    add(("identity", "post as the operator", post(f"{base}/v1/hosts", json={"host": "node-b"},
                                                  headers=dict(AUTH, **{"X-Gpunode-Source": "operator"}))))
    add(("identity", "URL and form instance ids disagree", post(f"{ph}/i-b?token={SECRET}", data=form())))
    add(("identity", "node-a's fqdn for node-b", post(f"{ph}?token={SECRET}",
                                                      data=form("node-b", "i-b", fqdn="node-a.gpu.example.net"))))
    add(("identity", "X-Forwarded-For spoof (harmless: not believed)",
         post(f"{ph}?token={SECRET}", data=form(), headers={"X-Forwarded-For": "10.0.0.1"})))
    add(("identity", "a duplicate post of node-a (harmless)", post(f"{ph}?token={SECRET}", data=form())))
    # host keys
    for what, (field, value, _status, _reason) in sorted(BAD_KEYS.items()):
        add(("host key", what, post(f"{ph}?token={SECRET}", data=form(**{field: value}))))
    add(("host key", "ed25519 key in pub_key_rsa", post(f"{ph}?token={SECRET}", data=form(pub_key_rsa=ED25519))))
    add(("host key", "a nistp384 key in JSON as ed25519", post(f"{base}/v1/hosts", headers=AUTH, json={
        "host": "node-a", "host_keys": {"ed25519": _line("ssh-ed25519", _blob(ECDSA_384))}})))
    add(("host key", "a key name with a path", post(f"{base}/v1/hosts", headers=AUTH, json={
        "host": "node-a", "host_keys": {"../x": ED25519}})))
    add(("host key", "a key that is a number", post(f"{base}/v1/hosts", headers=AUTH, json={
        "host": "node-a", "host_keys": {"ed25519": 5}})))
    # names and ids
    for name in ["../../etc", "a;touch x", "node 1", "-node", "node-", "x" * 64, ("a." * 127) + "a", "nöde",
                 "node\x00a", "node/a", "$(id)", ""]:
        add(("name", f"hostname {name[:20]!r}", post(f"{base}/v1/hosts", headers=AUTH, json={"host": name})))
    for iid in ["i" * 200, "i/../x", "i x", "<i>"]:
        add(("name", f"instance_id {iid[:20]!r}", post(f"{base}/v1/hosts", headers=AUTH,
                                                        json={"host": "node-z", "instance_id": iid})))
    add(("name", "run id of 40 digits", get(f"{base}/v1/runs/{'9' * 40}", headers=AUTH)))
    add(("name", "run id -1", get(f"{base}/v1/runs/-1", headers=AUTH)))
    add(("name", "host path ..%2F..%2Fetc", get(f"{base}/v1/hosts/..%2F..%2Fetc", headers=AUTH)))
    # parsers
    add(("parser", "repeated hostname", post(f"{ph}?token={SECRET}", content="hostname=node-a&hostname=evil",
                                             headers=FORM)))
    add(("parser", "repeated key field", post(f"{ph}?token={SECRET}", headers=FORM, content=(
        "hostname=node-a&instance_id=i-a&pub_key_ed25519=" + ED25519.replace(" ", "+").replace("/", "%2F")
        + "&pub_key_ed25519=" + ED25519_OTHER.replace(" ", "+").replace("/", "%2F")))))
    add(("parser", "5,000 form fields", post(f"{ph}?token={SECRET}", content=MANY_FIELDS, headers=FORM)))
    add(("parser", "a 20 KB form field", post(f"{ph}?token={SECRET}", headers=FORM,
                                               content="hostname=node-a&x=" + "a" * 20000)))
    add(("parser", "a form that is not UTF-8", post(f"{ph}?token={SECRET}", headers=FORM,
                                                     content=b"hostname=node-\xff")))
    add(("parser", "JSON to phone_home", post(f"{ph}?token={SECRET}", json={"hostname": "node-a"})))
    add(("parser", "duplicate JSON key", post(f"{base}/v1/hosts", headers=AUTH,
                                              content=b'{"host": "node-a", "host": "evil"}')))
    add(("parser", "duplicate nested JSON key", post(f"{base}/v1/hosts", headers=AUTH, content=(
        b'{"host": "node-a", "host_keys": {"a": "%s", "a": "%s"}}' % (ED25519.encode(), ED25519_OTHER.encode())))))
    add(("parser", "25,000 nested brackets", post(f"{base}/v1/hosts", headers=AUTH, content=NESTED)))
    add(("parser", "25,000 nested objects", post(f"{base}/v1/hosts", headers=AUTH,
                                                 content=b'{"a":' * 25000 + b"1" + b"}" * 25000)))
    add(("parser", "not JSON", post(f"{base}/v1/hosts", headers=AUTH, content=b"{not json")))
    add(("parser", "a JSON array", post(f"{base}/v1/hosts", headers=AUTH, json=["node-a"])))
    add(("parser", "an unknown field", post(f"{base}/v1/hosts", headers=AUTH, json={"host": "node-a", "x": 1})))
    add(("parser", "force as a string", post(f"{base}/v1/hosts", headers=AUTH, json={"host": "node-a",
                                                                                      "force": "yes"})))
    add(("parser", "a 70 KB body", post(f"{base}/v1/hosts", headers=AUTH, content=b" " * 70000)))
    add(("parser", "a bogus X-Gpunode-Source", post(f"{base}/v1/hosts", json={"host": "node-a"},
                                                    headers=dict(AUTH, **{"X-Gpunode-Source": "x"}))))
    add(("parser", "a huge number", post(f"{base}/v1/hosts", headers=AUTH, content=b'{"host": ' + b"9" * 5000 + b"}")))
    # transport
    head = b"POST /v1/hosts HTTP/1.1\r\nHost: x\r\n"
    authed = head + b"Authorization: Bearer " + SECRET.encode() + b"\r\n"
    add(("transport", "request line and one header, then silence", lambda: status_of(raw(port, head, hold=0.2))))
    add(("transport", "nothing at all after connecting", lambda: status_of(raw(port, b""))))
    add(("transport", "headers of 20 KB", lambda: status_of(raw(port, head + b"X-A: " + b"a" * 20000 + b"\r\n\r\n"))))
    add(("transport", "a body that stops", lambda: status_of(raw(port, authed + b"Content-Length: 100\r\n\r\n{"))))
    add(("transport", "a chunked body that stops",
         lambda: status_of(raw(port, authed + b"Transfer-Encoding: chunked\r\n\r\n10\r\n{"))))
    add(("transport", "2 MB chunked, no credential",
         lambda: status_of(raw(port, head + b"Transfer-Encoding: chunked\r\n\r\n"
                               + (b"8000\r\n" + b"x" * 0x8000 + b"\r\n") * 8))))
    add(("transport", "Content-Length and Transfer-Encoding together",
         lambda: status_of(raw(port, authed + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"))))
    add(("transport", "two Content-Lengths",
         lambda: status_of(raw(port, authed + b"Content-Length: 2\r\nContent-Length: 20\r\n\r\n{}"))))
    add(("transport", "a garbage request line", lambda: status_of(raw(port, b"\x16\x03\x01\x02\x00garbage\r\n\r\n"))))
    add(("transport", "a NUL in a header", lambda: status_of(raw(port, head + b"X-A: a\x00b\r\n\r\n"))))
    add(("transport", "kept alive, then half a request",
         lambda: status_of(raw(port, b"GET /v1/hosts HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                               + SECRET.encode() + b"\r\n\r\n" + head))))

    def many_from_one_peer() -> int:
        socks = [connect(port, "127.0.0.77") for _ in range(9)]
        try:
            return status_of(read_answer(socks[-1]).split(b"\r\n", 1)[0])
        finally:
            for s in socks:
                s.close()

    add(("transport", "nine connections from one address", many_from_one_peer))

    def connect_and_close() -> int:
        for _ in range(50):
            connect(port, "127.0.0.78").close()
        return client.get(f"{base}/v1/hosts", headers=AUTH).status_code  # harmless: still answers

    add(("transport", "50 connections opened and closed at once (harmless)", connect_and_close))
    return cases


#: Statuses that mean "refused": the 4xx the hook answers with (a connection closed without an answer is not one).
REFUSED = {400, 401, 403, 404, 408, 409, 413, 415, 429, 431}


def test_attack_sweep_every_attack_is_refused_or_harmless_and_nothing_is_lost(site, service, monkeypatch):
    monkeypatch.setenv("GPUNODE_HOOK_OPERATOR_SECRET", OPERATOR)
    svc = service(header_timeout=1.0, body_timeout=1.0, max_connections_per_peer=8).start()
    for host, iid in (("node-a", "i-a"), ("node-b", "i-b")):
        resp = httpx.post(f"{svc.base}/v1/phone-home?token={SECRET}", data=phone_home_form(host, iid))
        assert resp.status_code == 202
    store = Store(svc.config.db_path)

    def bound() -> dict:
        # not updated_at: a duplicate post touches it
        keep = ("instance_id", "host_keys", "deploy_time", "bound_at", "bound_by")
        return {h: ({k: store.identity(h)[k] for k in keep}, store.host(h)["fqdn"], store.host(h)["instance_id"])
                for h in ("node-a", "node-b")}

    before = bound()
    known = sorted(svc.config.known_hosts.read_text().splitlines())

    client = httpx.Client(timeout=15)
    cases = _sweep_cases(svc.base, svc.port, client)
    started = time.monotonic()
    def timed(case) -> tuple[int, float]:
        start = time.monotonic()
        return case[2](), time.monotonic() - start

    with concurrent.futures.ThreadPoolExecutor(8) as pool:  # bounded: each case is one call with its own timeouts
        timed_results = list(pool.map(timed, cases))
    took = time.monotonic() - started
    client.close()
    results = [r[0] for r in timed_results]
    slowest = sorted(zip((t for _r, t in timed_results), (c[1] for c in cases), strict=True), reverse=True)[:3]
    outcomes = {}
    for (kind, name, _call), status in zip(cases, results, strict=True):
        verdict = "harmless" if "(harmless" in name else "refused"
        ok = status in (200, 202) if verdict == "harmless" else status in REFUSED
        assert ok, f"{kind}: {name}: HTTP {status}"
        outcomes.setdefault(kind, {}).setdefault(verdict, 0)
        outcomes[kind][verdict] += 1
    summary = {k: dict(sorted(v.items())) for k, v in sorted(outcomes.items())}
    print(f"attack sweep: {len(cases)} attacks in {took:.1f} s: {summary}; slowest: "
          + ", ".join(f"{name} {t:.1f} s" for t, name in slowest))
    # The counts the README's security section lists.
    assert len(cases) == 93
    assert sum(v.get("refused", 0) for v in outcomes.values()) == 90  # the other three are marked harmless
    statuses = {s: results.count(s) for s in sorted(set(results))}
    assert statuses == {200: 1, 202: 2, 400: 51, 401: 18, 403: 2, 404: 1, 408: 5, 409: 5, 413: 5, 415: 1, 429: 1,
                        431: 1}, statuses

    # Nothing lost, nothing changed: the bound identities, names, instance ids and known_hosts are as
    # they were; no attack created a host; the service still takes a new machine, and keeps it.
    assert bound() == before and sorted(svc.config.known_hosts.read_text().splitlines()) == known
    assert sorted(h["name"] for h in store.hosts()) == ["node-a", "node-b"]
    store.close()
    assert httpx.post(f"{svc.base}/v1/phone-home?token={SECRET}", data=phone_home_form("node-c", "i-c")).status_code \
        == 202
    assert svc.stop() == 0
    svc.start()
    names = sorted(h["name"] for h in httpx.get(f"{svc.base}/v1/hosts", headers=AUTH).json()["hosts"])
    assert names == ["node-a", "node-b", "node-c"]
    svc.stop()
    log = svc.log.read_text()
    assert "Traceback" not in log and " 500 " not in log
    assert scan_for_secrets(svc.config.state_dir, svc.log) == []
    assert OPERATOR not in log and all(OPERATOR.encode() not in p.read_bytes()
                                       for p in svc.config.state_dir.rglob("*") if p.is_file())
