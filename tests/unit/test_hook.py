"""The post-provision hook: requests, queue, worker runs through ansible-runner, status, secrets.

Runs use a real ansible-runner and ansible-playbook against local-connection hosts (no podman);
the end-to-end test with real cloud-init on a simulated host is tests/e2e/test_hook_e2e.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from local_play import free_port  # tests/unit is on sys.path (rootdir-relative import mode)
from starlette.testclient import TestClient

from gpunode import cli
from gpunode.hook import requests as hreq
from gpunode.hook.app import Hook, create_app
from gpunode.hook.config import HookConfig, load_config
from gpunode.hook.maas import MaasClient
from gpunode.hook.service import tag_writer
from gpunode.hook.store import Store
from gpunode.hook.worker import Worker, run_environment

SECRET = "site-secret-0123456789abcdef"  # noqa: S105 - a test secret the scans look for
RUN_TOKEN = "join-token-fedcba9876543210"  # noqa: S105 - a test token the scans look for
# Real host keys, as ssh-keygen writes them (``<type> <base64 blob>``), made from fixed private values.
def _openssh(private) -> str:
    public = private.public_key()
    return public.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()


ED25519 = _openssh(ed25519.Ed25519PrivateKey.from_private_bytes(bytes(range(32))))
#: Another machine's ed25519 key (a substituted or re-generated host key).
ED25519_OTHER = _openssh(ed25519.Ed25519PrivateKey.from_private_bytes(bytes(range(1, 33))))
ED25519_THIRD = _openssh(ed25519.Ed25519PrivateKey.from_private_bytes(bytes(range(2, 34))))
RSA = _openssh(rsa.generate_private_key(public_exponent=65537, key_size=2048))
ECDSA = _openssh(ec.derive_private_key(0x5EED5EED5EED, ec.SECP256R1()))

PLAYBOOK = """\
- name: Stage one
  hosts: all
  gather_facts: false
  tasks:
    - name: Use the run's secret without showing it
      ansible.builtin.set_fact:
        token_length: "{{ hook_test_token | length }}"
      no_log: true
- name: Stage two
  hosts: all
  gather_facts: false
  tasks:
    - name: Fail where asked
      ansible.builtin.fail:
        msg: "{{ inventory_hostname }} was asked to fail"
      when: fail_here | default(false)
    - name: Wait where asked
      ansible.builtin.wait_for:
        timeout: "{{ sleep_here | default(0) | int }}"
      when: sleep_here is defined
"""


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A project dir with a two-stage playbook, a local inventory and the run's secrets file."""
    monkeypatch.setenv("GPUNODE_HOOK_SECRET", SECRET)
    # The runs' private data dirs go to this test's own temp dir, not the /tmp that other tests
    # (pytest-xdist workers, other sessions) share: the leak check below sees only this test's runs.
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    project = tmp_path / "project"
    project.mkdir()
    (project / "play.yml").write_text(PLAYBOOK)
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = {"all": {"hosts": {
        "node-a": dict(local), "node-b": dict(local), "node-c": dict(local),
        "bad-node": dict(local, fail_here=True), "slow-node": dict(local, sleep_here=60),
    }}}
    (project / "hosts.yml").write_text(yaml.safe_dump(inventory))
    secrets = tmp_path / "run-secrets.yml"
    secrets.write_text(f"hook_test_token: {RUN_TOKEN}\n")
    secrets.chmod(0o600)
    (tmp_path / "validation").mkdir()
    (tmp_path / "validation" / "node-a.json").write_text(json.dumps({"verdict": "passed"}))
    return tmp_path


def make_config(site: Path, **kw) -> HookConfig:
    values = {
        "state_dir": site / "state", "project_dir": site / "project", "playbook": "play.yml",
        "inventory": "hosts.yml", "run_secrets_file": site / "run-secrets.yml", "batch_window": 0.0,
        "retry_delay": 0.0, "max_attempts": 2, "run_timeout": 120, "idle_timeout": 60,
        "validation_path": str(site / "validation" / "{{ inventory_hostname }}.json"),
    }
    values.update(kw)
    return HookConfig(**values).validate()


def client_for(config: HookConfig, store: Store, **kw) -> TestClient:
    return TestClient(create_app(Hook(config, store, **kw)))


def phone_home_form(host: str, instance_id: str = "i-abc123") -> dict:
    """The form cloud-init 22.4's phone_home posts with `post: all` (keys it cannot read: N/A)."""
    return {"pub_key_dsa": "N/A", "pub_key_rsa": RSA, "pub_key_ecdsa": ECDSA, "pub_key_ed25519": ED25519,
            "instance_id": instance_id, "hostname": host, "fqdn": f"{host}.gpu.example.net"}


def drain(worker: Worker, limit: int = 10) -> list[dict]:
    runs = []
    for _ in range(limit):
        run = worker.run_once()
        if run is None:
            break
        runs.append(run)
    return runs


def scan_for_secrets(*roots: Path) -> list[str]:
    """Every file under the roots that contains the site secret or the run's token."""
    hits = []
    for root in roots:
        for path in [root] if root.is_file() else root.rglob("*"):
            if path.is_file():
                data = path.read_bytes()
                hits += [f"{path}: {s}" for s in (SECRET, RUN_TOKEN) if s.encode() in data]
    return hits


# -- requests ----------------------------------------------------------------------------------

def test_phone_home_form_is_recorded_queued_and_seeds_known_hosts(site):
    config = make_config(site)
    store = Store(config.db_path)
    client = client_for(config, store)
    resp = client.post(f"/v1/phone-home/i-abc123?token={SECRET}", data=phone_home_form("node-a"))
    assert resp.status_code == 202, resp.text
    assert resp.json()["outcome"] == "queued"
    host = store.host("node-a")
    assert (host["state"], host["instance_id"], host["fqdn"]) == ("queued", "i-abc123", "node-a.gpu.example.net")
    [req] = store.requests("node-a")
    assert req["source"] == "phone_home"
    assert set(req["host_keys"]) == {"pub_key_rsa", "pub_key_ecdsa", "pub_key_ed25519"}
    lines = config.known_hosts.read_text().splitlines()
    assert sorted(lines) == sorted(f"node-a,node-a.gpu.example.net {k}" for k in (RSA, ECDSA, ED25519))
    assert config.known_hosts.stat().st_mode & 0o777 == 0o600
    # The site secret proves nothing about which machine posts: new keys for a known host are refused.
    client.post(f"/v1/phone-home?token={SECRET}", data=phone_home_form("node-b", "i-b"))
    new_key = ED25519_OTHER
    form = dict(phone_home_form("node-a", "i-new"), pub_key_rsa="N/A", pub_key_ecdsa="N/A", pub_key_ed25519=new_key)
    refused = client.post(f"/v1/phone-home?token={SECRET}", data=form)
    assert refused.status_code == 409
    assert "instance_id i-new (bound: i-abc123)" in refused.json()["error"]
    assert "host keys ssh-ed25519 SHA256:" in refused.json()["error"]
    assert store.host("node-a")["instance_id"] == "i-abc123"
    assert config.known_hosts.read_text().splitlines() == lines + known_lines(config, "node-b")
    # The operator re-keys it: forgotten, the next post is a first contact again; other hosts' lines stay.
    assert store.forget("node-a") is True
    Hook(config, store).forget_known_hosts("node-a", "node-a.gpu.example.net")
    assert client.post(f"/v1/phone-home?token={SECRET}", data=form).json()["outcome"] == "queued"
    assert store.host("node-a")["instance_id"] == "i-new"
    lines = config.known_hosts.read_text().splitlines()
    assert [line for line in lines if line.startswith("node-a,")] == [f"node-a,node-a.gpu.example.net {new_key}"]
    assert len([line for line in lines if line.startswith("node-b,")]) == 3


def known_lines(config: HookConfig, host: str) -> list[str]:
    return [line for line in config.known_hosts.read_text().splitlines() if line.startswith(f"{host},")]


@pytest.mark.parametrize(("kwargs", "status", "reason"), [
    ({"url": "/v1/phone-home", "data": phone_home_form("node-a")}, 401, "missing credential"),
    ({"url": "/v1/phone-home?token=wrong-secret-000000", "data": phone_home_form("node-a")}, 401, "invalid credential"),
    ({"url": "/v1/hosts", "json": {"host": "node-a"}, "headers": {"Authorization": "Bearer nope"}}, 401,
     "invalid credential"),
    ({"url": f"/v1/phone-home?token={SECRET}", "data": phone_home_form("node_a!")}, 400, "hostname"),
    ({"url": f"/v1/phone-home?token={SECRET}", "data": dict(phone_home_form("node-a"), pub_key_rsa=ED25519)}, 400,
     "pub_key_rsa: key type ssh-ed25519"),
    ({"url": f"/v1/phone-home?token={SECRET}", "data": dict(phone_home_form("node-a"), pub_key_ecdsa="garbage")}, 400,
     "pub_key_ecdsa: not an OpenSSH public key line"),
    ({"url": f"/v1/phone-home/i-other?token={SECRET}", "data": phone_home_form("node-a")}, 400, "disagree"),
    ({"url": f"/v1/phone-home?token={SECRET}", "json": {"hostname": "node-a"}}, 415, "form"),
    ({"url": "/v1/hosts", "content": b"{not json", "headers": {"Authorization": f"Bearer {SECRET}"}}, 400, "JSON"),
    ({"url": "/v1/hosts", "json": {"host": "node-a", "extra": 1}, "headers": {"Authorization": f"Bearer {SECRET}"}},
     400, "unknown fields: extra"),
    ({"url": "/v1/hosts", "json": {"host": "node-a", "force": "yes"}, "headers": {"Authorization": f"Bearer {SECRET}"}},
     400, "force"),
    ({"url": "/v1/hosts", "content": b"x" * 70000, "headers": {"Authorization": f"Bearer {SECRET}"}}, 413, "larger"),
])
def test_bad_or_unauthenticated_requests_get_4xx_with_reason_and_queue_nothing(site, kwargs, status, reason):
    config = make_config(site)
    store = Store(config.db_path)
    resp = client_for(config, store).post(**kwargs)
    assert resp.status_code == status
    assert reason in resp.json()["error"]
    assert store.hosts() == []
    assert store.requests() == []
    assert not config.known_hosts.exists()


def test_gets_need_the_credential_too(site):
    config = make_config(site)
    client = client_for(config, Store(config.db_path))
    assert client.get("/v1/hosts/node-a").status_code == 401
    assert client.get("/v1/runs/1", headers={"Authorization": f"Bearer {SECRET}"}).status_code == 404


def signed(body: bytes, *, ts: str | None = None, nonce: str | None = None, secret: bytes = SECRET.encode()) -> dict:
    """The headers of an HMAC-signed request (a fresh nonce unless given)."""
    ts = str(int(time.time())) if ts is None else ts
    nonce = os.urandom(16).hex() if nonce is None else nonce
    return {"X-Gpunode-Timestamp": ts, "X-Gpunode-Nonce": nonce,
            "X-Gpunode-Signature": hreq.body_signature(secret, ts, nonce, body), "Content-Type": "application/json"}


def test_hmac_mode_signs_phone_home_per_machine_and_json_bodies_once(site):
    config = make_config(site, auth="hmac")
    store = Store(config.db_path)
    client = client_for(config, store)
    secret = SECRET.encode()
    good = hreq.phone_home_signature(secret, "i-abc123", "node-a")
    assert client.post(f"/v1/phone-home?sig={good}", data=phone_home_form("node-a")).status_code == 202
    # The signature is node-a's: it signs its instance id and host name, so it speaks for no other host.
    for form in (phone_home_form("node-b", "i-abc123"), phone_home_form("node-b", "i-other")):
        bad = client.post(f"/v1/phone-home?sig={good}", data=form)
        assert (bad.status_code, bad.json()["error"]) == (401, "?sig=: does not match instance_id and hostname")
    body = json.dumps({"host": "node-c", "instance_id": "i-c"}).encode()
    headers = dict(signed(body), **{"X-Gpunode-Source": "capi"})
    assert client.post("/v1/hosts", content=body, headers=headers).status_code == 202
    replay = client.post("/v1/hosts", content=body, headers=headers)
    assert (replay.status_code, replay.json()["error"]) == (401, "X-Gpunode-Nonce: already used (a replayed request)")
    stale = str(int(time.time()) - 3600)
    resp = client.post("/v1/hosts", content=body, headers=signed(body, ts=stale))
    assert resp.status_code == 401 and "clock" in resp.json()["error"]
    for ts in ("nan", "inf", "-inf", "1e400", "NaN", ""):
        resp = client.post("/v1/hosts", content=body, headers=signed(body, ts=ts))
        assert resp.status_code == 401 and "not a finite number" in resp.json()["error"], ts
    resp = client.post("/v1/hosts", content=body, headers=signed(body, nonce="short"))
    assert resp.status_code == 401 and "X-Gpunode-Nonce" in resp.json()["error"]
    tampered = dict(signed(body), **{"X-Gpunode-Nonce": os.urandom(16).hex()})
    resp = client.post("/v1/hosts", content=body, headers=tampered)
    assert resp.status_code == 401 and "does not match" in resp.json()["error"]
    assert [h["name"] for h in store.hosts()] == ["node-a", "node-c"]
    assert [r["source"] for r in store.requests("node-c")] == ["capi"]
    # A body signature covers host, instance id and keys: it proves a re-deployment's new identity.
    new_keys = {"ed25519": ED25519_THIRD}
    body = json.dumps({"host": "node-a", "instance_id": "i-redeployed", "host_keys": new_keys})
    resp = client.post("/v1/hosts", content=body.encode(), headers=signed(body.encode()))
    assert (resp.status_code, resp.json()["outcome"]) == (202, "duplicate")  # still queued from the first post
    assert store.identity("node-a")["instance_id"] == "i-redeployed"
    assert known_lines(config, "node-a") == [f"node-a,node-a.gpu.example.net {ED25519_THIRD}"]
    # ?token= and ?sig= are phone_home's; the JSON endpoint and the GETs take headers only.
    assert client.get("/v1/hosts", headers=signed(b"")).status_code == 200
    assert client.get(f"/v1/hosts?sig={good}").status_code == 401


def test_query_token_is_for_phone_home_only(site):
    config = make_config(site)
    client = client_for(config, Store(config.db_path))
    resp = client.post(f"/v1/hosts?token={SECRET}", json={"host": "node-a"})
    assert resp.status_code == 401 and resp.json()["error"] == "missing credential: send Authorization: Bearer <secret>"
    assert client.get(f"/v1/hosts?token={SECRET}").status_code == 401
    assert client.post(f"/v1/phone-home?token={SECRET}", data=phone_home_form("node-a")).status_code == 202


def test_a_host_cannot_take_another_hosts_fqdn_or_keys(site):
    config = make_config(site)
    store = Store(config.db_path)
    client = client_for(config, store)
    url = f"/v1/phone-home?token={SECRET}"
    assert client.post(url, data=phone_home_form("node-a")).status_code == 202
    # A new host name claiming node-a's FQDN would replace node-a's known_hosts lines: an FQDN's first
    # label is its host's name, so the claim is refused before anything is recorded.
    resp = client.post(url, data=dict(phone_home_form("evil", "i-evil"), fqdn="node-a.gpu.example.net"))
    assert resp.status_code == 400
    assert resp.json()["error"] == ("fqdn: node-a.gpu.example.net does not belong to host evil"
                                    " (its first label must be the host name)")
    assert store.host("evil") is None and store.requests("evil") == []
    # The store refuses it too (a request that reached it by another way).
    got = store.record_request(source="api", host="evil", instance_id=None, fqdn="node-a.gpu.example.net",
                               host_keys={}, peer=None)
    assert got["outcome"] == "refused" and "fqdn node-a.gpu.example.net belongs to host node-a" in got["conflict"]
    # A JSON post with a subset of the bound keys changes nothing.
    auth = {"Authorization": f"Bearer {SECRET}"}
    resp = client.post("/v1/hosts", json={"host": "node-a", "host_keys": {"ed25519": ED25519}}, headers=auth)
    assert resp.status_code == 202
    assert len(store.identity("node-a")["host_keys"]) == 3 and len(known_lines(config, "node-a")) == 3


# -- the worker --------------------------------------------------------------------------------

def test_duplicate_posts_for_one_host_give_one_run(site):
    config = make_config(site, keep_artifacts=2)
    store = Store(config.db_path)
    client = client_for(config, store)
    for _ in range(3):  # cloud-init retries, or two sources for the same machine
        assert client.post(f"/v1/phone-home?token={SECRET}", data=phone_home_form("node-a")).status_code == 202
    auth = {"Authorization": f"Bearer {SECRET}"}
    assert client.post("/v1/hosts", json={"host": "node-a", "instance_id": "i-abc123"}, headers=auth).status_code == 202
    assert [r["outcome"] for r in store.requests("node-a")] == ["queued", "duplicate", "duplicate", "duplicate"]
    runs = drain(Worker(config, store))
    assert [(r["hosts"], r["state"]) for r in runs] == [(["node-a"], "ok")]
    # Posting again for the same deployment does not run it again; a redeployment does.
    client.post(f"/v1/phone-home?token={SECRET}", data=phone_home_form("node-a"))
    assert drain(Worker(config, store)) == []
    store.forget("node-a")  # re-deployed without MAAS to vouch for it: the operator re-keys it
    client.post(f"/v1/phone-home?token={SECRET}", data=phone_home_form("node-a", "i-redeployed"))
    [rerun] = drain(Worker(config, store))
    assert rerun["hosts"] == ["node-a"]
    # Artifacts rotate: only the newest keep_artifacts directories stay (playbook + validation runs).
    assert sorted(p.name for p in config.artifacts_dir.iterdir()) == [f"run-{rerun['id']}",
                                                                      f"run-{rerun['id']}-validation"]


def test_hosts_arriving_together_share_one_run_with_per_host_results(site):
    config = make_config(site)
    store = Store(config.db_path)
    client = client_for(config, store)
    for i, host in enumerate(("node-a", "node-b", "bad-node")):
        client.post(f"/v1/phone-home?token={SECRET}", data=phone_home_form(host, f"i-{i}"))
    [run, retry] = drain(Worker(config, store))
    assert (run["hosts"], run["state"]) == (["node-a", "node-b", "bad-node"], "failed")  # arrival order
    assert retry["hosts"] == ["bad-node"]  # bounded retries: max_attempts=2, then failed
    result = json.loads(Path(run["result_path"]).read_text())
    assert result == run["result"]
    a, bad = result["hosts"]["node-a"], result["hosts"]["bad-node"]
    assert (a["ok"], a["failed"], a["unreachable"], a["stage"], a["ok_overall"]) == (1, 0, 0, "Stage two", True)
    assert a["validation"] == {"present": True, "verdict": "passed"}
    assert result["hosts"]["node-b"]["validation"] == {"present": False, "verdict": None}
    assert (bad["failed"], bad["stage"], bad["failed_task"]) == (1, "Stage two", "Fail where asked")
    assert "bad-node was asked to fail" in bad["message"]
    assert {h["name"]: (h["state"], h["attempts"]) for h in store.hosts()} == {
        "bad-node": ("failed", 2), "node-a": ("ok", 1), "node-b": ("ok", 1)}
    auth = {"Authorization": f"Bearer {SECRET}"}
    got = client.get("/v1/hosts/node-a", headers=auth).json()
    assert (got["state"], got["last_run_id"], got["outcome"]["stage"]) == ("ok", run["id"], "Stage two")
    got = client.get(f"/v1/runs/{run['id']}", headers=auth).json()
    assert got["result"]["hosts"]["bad-node"]["failed"] == 1


def test_no_secret_in_artifacts_results_logs_or_database(site, capfd):
    config = make_config(site)
    store = Store(config.db_path)
    client = client_for(config, store)
    client.post(f"/v1/phone-home?token={SECRET}", data=phone_home_form("node-a"))
    client.post("/v1/hosts", json={"host": "node-b"}, headers={"Authorization": f"Bearer {SECRET}"})
    runs = drain(Worker(config, store))
    assert runs[0]["state"] == "ok"  # the playbook did read the run's token
    artifacts = config.artifacts_dir / f"run-{runs[0]['id']}"
    command = json.loads((artifacts / "command").read_text())
    assert f"@{site / 'run-secrets.yml'}" in " ".join(command["command"])  # the path, not the value
    assert "GPUNODE_HOOK_SECRET" not in command["env"]
    assert len(list((artifacts / "job_events").iterdir())) > 5
    store.close()
    assert scan_for_secrets(config.state_dir) == []
    out, err = capfd.readouterr()
    assert SECRET not in out + err and RUN_TOKEN not in out + err
    # private_data_dirs are gone: nothing of the run is left outside the state dir.
    assert not list((site / "tmp").glob(f"gpunode-hook-run{runs[0]['id']}-*"))
    assert tempfile.gettempdir() == str(site / "tmp")  # where job.py made them


def test_inventory_refresh_gets_credentials_the_run_never_sees_and_fqdn_names(site, monkeypatch):
    """The MAAS recipe: a refresh command renders the inventory (FQDN names) with MAAS_* credentials."""
    maas_secret = "maas-token-secret-6b1d0e77aa"  # noqa: S105 - a test credential the scan looks for
    monkeypatch.setenv("MAAS_TOKEN_SECRET", maas_secret)
    rendered = site / "rendered.yml"
    script = ("import os, sys, yaml; assert os.environ['MAAS_TOKEN_SECRET']; "
              "yaml.safe_dump({'all': {'hosts': {'node-a.gpu.example.net': {'ansible_connection': 'local', "
              f"'ansible_python_interpreter': sys.executable}}}}}}}}, open({str(rendered)!r}, 'w'))")
    config = make_config(site, inventory=str(rendered), limit_by="fqdn",
                         inventory_refresh_command=[sys.executable, "-c", script])
    store = Store(config.db_path)
    client_for(config, store).post(f"/v1/phone-home?token={SECRET}", data=phone_home_form("node-a"))
    [run] = drain(Worker(config, store))
    assert run["state"] == "ok" and run["result"]["hosts"]["node-a"]["ok"] == 1
    store.close()
    assert [p for p in config.state_dir.rglob("*") if p.is_file() and maas_secret.encode() in p.read_bytes()] == []


def test_run_environment_drops_the_secret_and_unknown_variables(site):
    config = make_config(site)
    env = run_environment(config, {"PATH": "/usr/bin", "GPUNODE_HOOK_SECRET": SECRET, "MAAS_API_KEY": "a:b:c",
                                   "ANSIBLE_CONFIG": "/x/ansible.cfg", "AWS_SECRET_ACCESS_KEY": "k"})
    assert set(env) == {"PATH", "ANSIBLE_CONFIG"}
    assert env["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)


def test_a_run_past_its_timeout_is_stopped_and_retried_a_bounded_number_of_times(site):
    config = make_config(site, run_timeout=15, max_attempts=2)  # the first plays take ~2 s; the wait 60 s
    store = Store(config.db_path)
    store.record_request(source="operator", host="slow-node", instance_id=None, fqdn=None, host_keys={}, peer=None)
    runs = drain(Worker(config, store))
    assert [(r["hosts"], r["state"]) for r in runs] == [(["slow-node"], "timeout")] * 2
    assert store.host("slow-node")["state"] == "failed"
    slow = runs[0]["result"]["hosts"]["slow-node"]
    assert (slow["stage"], slow["ok_overall"], runs[0]["result"]["status"]) == ("Stage two", False, "timeout")


def test_operator_force_while_running_queues_one_more_run(site):
    config = make_config(site)
    store = Store(config.db_path)
    store.record_request(source="operator", host="node-a", instance_id=None, fqdn=None, host_keys={}, peer=None)
    run = store.claim_batch(now=time.time(), batch_window=0, max_batch=8)
    again = store.record_request(source="operator", host="node-a", instance_id=None, fqdn=None, host_keys={},
                                 peer=None, force=True)
    assert again["outcome"] == "rerun"
    store.finish_run(run["id"], state="ok", result={"hosts": {}}, result_path=None, host_ok={"node-a": True},
                     max_attempts=2, retry_delay=0)
    assert store.host("node-a")["state"] == "queued"


# -- restart -----------------------------------------------------------------------------------

def _serve(site: Path, port: int, log) -> subprocess.Popen:
    settings = {"state_dir": str(site / "state"), "project_dir": str(site / "project"), "playbook": "play.yml",
                "inventory": "hosts.yml", "run_secrets_file": str(site / "run-secrets.yml"), "batch_window": 0.5,
                "retry_delay": 0, "listen_port": port}
    (site / "hook.yml").write_text(yaml.safe_dump(settings))
    proc = subprocess.Popen([sys.executable, "-m", "gpunode.cli", "hook", "-c", str(site / "hook.yml"), "serve"],
                            stdout=log, stderr=log, env=dict(os.environ, PYTHONPATH=str(Path(cli.__file__).parents[1])))
    for _ in range(100):
        try:
            httpx.get(f"http://127.0.0.1:{port}/v1/hosts", timeout=1)
            return proc
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise AssertionError("the hook did not start")


def test_service_restarted_mid_queue_loses_no_request(site):
    port = free_port(18081, 18100)
    auth = {"Authorization": f"Bearer {SECRET}"}
    with open(site / "serve.log", "wb") as log:
        proc = _serve(site, port, log)
        try:
            # slow-node's run is in progress when the service stops; the others wait in the queue.
            httpx.post(f"http://127.0.0.1:{port}/v1/hosts", json={"host": "slow-node"}, headers=auth).raise_for_status()
            for _ in range(100):
                if httpx.get(f"http://127.0.0.1:{port}/v1/hosts/slow-node", headers=auth).json()["state"] == "running":
                    break
                time.sleep(0.1)
            for host in ("node-a", "node-b"):
                resp = httpx.post(f"http://127.0.0.1:{port}/v1/phone-home?token={SECRET}",
                                  data=phone_home_form(host, f"i-{host}"))
                assert resp.status_code == 202
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0
        store = Store(site / "state" / "hook.db")
        assert {h["name"]: h["state"] for h in store.hosts()} == {
            "slow-node": "queued", "node-a": "queued", "node-b": "queued"}
        [cancelled] = store.runs()
        assert (cancelled["state"], cancelled["hosts"]) == ("cancelled", ["slow-node"])
        store.close()
        # Make slow-node quick, restart: every request is still there and runs.
        inventory = yaml.safe_load((site / "project" / "hosts.yml").read_text())
        del inventory["all"]["hosts"]["slow-node"]["sleep_here"]
        (site / "project" / "hosts.yml").write_text(yaml.safe_dump(inventory))
        proc = _serve(site, port, log)
        try:
            for _ in range(300):
                states = httpx.get(f"http://127.0.0.1:{port}/v1/hosts", headers=auth).json()["counts"]
                if states == {"ok": 3}:
                    break
                time.sleep(0.2)
            assert states == {"ok": 3}
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0
    store = Store(site / "state" / "hook.db")
    assert [r["state"] for r in store.runs()][0] == "cancelled"
    assert sorted(h for r in store.runs()[1:] for h in r["hosts"]) == ["node-a", "node-b", "slow-node"]
    assert len(store.requests()) == 3
    store.close()
    assert scan_for_secrets(site / "state", site / "serve.log") == []


# -- MAAS --------------------------------------------------------------------------------------

class FakeMaas:
    """A MAAS API 2.0 endpoint with two machines; records the tag calls."""

    def __init__(self):
        self.machines = {"node-a": {"system_id": "abc123", "status_name": "Deploying", "hostname": "node-a",
                                    "deploy_time": "2026-12-01T09:00:00"},
                         "node-b": {"system_id": "def456", "status_name": "Ready", "hostname": "node-b"}}
        self.tags: dict[str, list[str]] = {}

    def __call__(self, request: httpx.Request) -> httpx.Response:
        auth = request.headers.get("authorization", "")
        if 'oauth_consumer_key="ck"' not in auth or 'oauth_signature="&ts"' not in auth:
            return httpx.Response(401)
        path = request.url.path
        if path == "/MAAS/api/2.0/machines/":
            name = request.url.params.get("hostname")
            return httpx.Response(200, json=[self.machines[name]] if name in self.machines else [])
        if path == "/MAAS/api/2.0/tags/" and request.method == "POST":
            self.tags.setdefault(dict(httpx.QueryParams(request.content.decode()))["name"], [])
            return httpx.Response(200, json={})
        if path.startswith("/MAAS/api/2.0/tags/"):
            tag = path.split("/")[-2]
            if tag not in self.tags:
                return httpx.Response(404)
            if request.method == "POST" and request.url.params.get("op") == "update_nodes":
                self.tags[tag] += httpx.QueryParams(request.content.decode()).get_list("add")
            return httpx.Response(200, json={"name": tag})
        return httpx.Response(404)


def test_maas_cross_check_and_tag_write_back(site):
    (site / "maas.key").write_text("ck:tk:ts\n")
    config = make_config(site, maas_url="http://maas.example:5240/MAAS", maas_api_key_file=site / "maas.key",
                         maas_check=True, maas_tag="gpunode-validated")
    fake = FakeMaas()
    maas = MaasClient(config.maas_url, config.maas_api_key(), transport=httpx.MockTransport(fake))
    store = Store(config.db_path)
    client = client_for(config, store, maas=maas)
    url = f"/v1/phone-home?token={SECRET}"
    assert client.post(url, data=phone_home_form("node-a", "abc123")).status_code == 202
    for form, reason in ((phone_home_form("node-a", "zzz999"), "not instance_id zzz999"),
                         (phone_home_form("node-b", "def456"), "is Ready"),
                         (phone_home_form("node-c", "ghi789"), "no machine named node-c")):
        resp = client.post(url, data=form)
        assert resp.status_code == 403 and reason in resp.json()["error"]
    assert [h["name"] for h in store.hosts()] == ["node-a"]
    drain(Worker(config, store, on_finished=tag_writer(config, store, maas)))
    assert fake.tags == {"gpunode-validated": ["abc123"]}
    # New host keys for the same deployment are refused; once MAAS reports a new deploy time the
    # machine was re-deployed, and its new keys are bound and it is queued again.
    new_key = ED25519_OTHER
    rekeyed = dict(phone_home_form("node-a", "abc123"), pub_key_ed25519=new_key)
    resp = client.post(url, data=rekeyed)
    assert resp.status_code == 409 and "host keys ssh-ed25519" in resp.json()["error"]
    assert ED25519 in store.identity("node-a")["host_keys"].values()
    fake.machines["node-a"]["deploy_time"] = "2026-12-01T11:30:00"
    resp = client.post(url, data=rekeyed)
    assert (resp.status_code, resp.json()["outcome"]) == (202, "queued")
    assert store.identity("node-a")["host_keys"]["pub_key_ed25519"] == new_key
    assert f"node-a,node-a.gpu.example.net {new_key}" in known_lines(config, "node-a")


def test_capi_machine_annotation_write_back(site, tmp_path):
    """The Machine whose providerID ends in the host's instance id gets the run's outcome annotated."""
    from gpunode.hook.capi import find_machine
    from gpunode.hook.service import capi_writer
    from gpunode.kapi.server import RunningServer

    machines = [{"metadata": {"name": "m1"}, "spec": {"providerID": "maas:///az1/zzz999"}},
                {"metadata": {"name": "m2"}, "spec": {"providerID": "maas:///az1/abc123"}},
                {"metadata": {"name": "m3"}, "spec": {}, "status": {"nodeRef": {"name": "node-b"}}}]
    assert find_machine(machines, "node-a", "abc123")["metadata"]["name"] == "m2"
    assert find_machine(machines, "node-b", None)["metadata"]["name"] == "m3"
    assert find_machine(machines, "node-c", "nope") is None

    with RunningServer(tmp_path / "kapi", free_port(18081, 18100)) as kapi:
        import kubernetes
        from kubernetes.dynamic import DynamicClient

        dyn = DynamicClient(kubernetes.config.new_client_from_config(kapi.kubeconfig))
        dyn.resources.get(api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition").create(body={
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "machines.cluster.x-k8s.io"},
            "spec": {"group": "cluster.x-k8s.io", "scope": "Namespaced",
                     "names": {"plural": "machines", "singular": "machine", "kind": "Machine"},
                     "versions": [{"name": "v1beta1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                         "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}})
        dyn.resources.get(api_version="v1", kind="Namespace").create(
            body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu-cluster"}})
        dyn = DynamicClient(kubernetes.config.new_client_from_config(kapi.kubeconfig))  # rediscover the CRD
        machine_api = dyn.resources.get(api_version="cluster.x-k8s.io/v1beta1", kind="Machine")
        for name, provider_id in (("gpu-md-0-x7k2p", "maas:///az1/abc123"), ("gpu-md-0-q9z8r", "maas:///az1/def456")):
            machine_api.create(namespace="gpu-cluster", body={
                "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
                "metadata": {"name": name, "namespace": "gpu-cluster"},
                "spec": {"clusterName": "gpu", "providerID": provider_id}})
        config = make_config(site, capi_annotate=True, capi_kubeconfig=Path(kapi.kubeconfig))
        store = Store(config.db_path)
        client = client_for(config, store)
        client.post(f"/v1/phone-home?token={SECRET}", data=phone_home_form("node-a", "abc123"))
        client.post(f"/v1/phone-home?token={SECRET}", data=phone_home_form("bad-node", "def456"))
        runs = drain(Worker(make_config(site, capi_annotate=True, capi_kubeconfig=Path(kapi.kubeconfig),
                                        max_attempts=1), store, on_finished=capi_writer(config, store)))
        assert [r["hosts"] for r in runs] == [["node-a", "bad-node"]]
        got = {m.metadata.name: dict(m.metadata.annotations or {})
               for m in machine_api.get(namespace="gpu-cluster").items}
        assert got["gpu-md-0-x7k2p"] == {"gpunode.mlplatform.io/provisioning": "ok",
                                         "gpunode.mlplatform.io/hook-run": str(runs[0]["id"]),
                                         "gpunode.mlplatform.io/validation": "passed"}
        assert got["gpu-md-0-q9z8r"]["gpunode.mlplatform.io/provisioning"] == "failed"


# -- CLI ---------------------------------------------------------------------------------------

def test_cli_run_and_status(site, capsys):
    settings = {"state_dir": str(site / "state"), "project_dir": str(site / "project"), "playbook": "play.yml",
                "inventory": "hosts.yml", "run_secrets_file": str(site / "run-secrets.yml"), "retry_delay": 0,
                "max_attempts": 1, "validation_path": str(site / "validation" / "{{ inventory_hostname }}.json")}
    (site / "hook.yml").write_text(yaml.safe_dump(settings))
    assert load_config(site / "hook.yml").playbook == "play.yml"
    # A machine the service has queued is not the operator's: `run --host` runs only its hosts.
    store = Store(site / "state" / "hook.db")
    store.record_request(source="phone_home", host="node-c", instance_id="i-c", fqdn=None, host_keys={}, peer=None)
    store.close()
    assert cli.main(["hook", "-c", str(site / "hook.yml"), "run", "--host", "node-a", "--host", "bad-node"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:4] == ["node-a", "ok", "attempts=1", "run=1"]
    assert "stage=Stage two validation=passed" in out[0]
    assert out[1].split()[:2] == ["bad-node", "failed"] and "failed=1" in out[1]
    assert cli.main(["hook", "-c", str(site / "hook.yml"), "status", "--run", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("run 1: failed hosts=node-a,bad-node")
    assert cli.main(["hook", "-c", str(site / "hook.yml"), "status", "--host", "node-a", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["hosts"][0]["state"] == "ok"
    assert cli.main(["hook", "-c", str(site / "hook.yml"), "status", "--host", "nope"]) == 1
    assert capsys.readouterr().out == "host nope: not found\n"
    assert cli.main(["hook", "-c", str(site / "hook.yml"), "status", "--host", "node-c"]) == 0
    assert capsys.readouterr().out.split()[:2] == ["node-c", "queued"]
    assert cli.main(["hook", "-c", str(site / "hook.yml"), "forget", "--host", "node-c"]) == 0
    assert capsys.readouterr().out == "host node-c: forgotten; its next request binds its identity again\n"
    assert cli.main(["hook", "-c", str(site / "hook.yml"), "forget", "--host", "node-c"]) == 1
    assert cli.main(["hook", "-c", str(site / "hook.yml"), "sign", "--instance-id", "i-c", "--hostname", "node-c"]) == 0
    assert capsys.readouterr().out.split()[-1] == hreq.phone_home_signature(SECRET.encode(), "i-c", "node-c")


def test_status_into_a_closed_pipe_ends_quietly(site):
    store = Store(site / "state" / "hook.db")
    for i in range(3000):
        store.record_request(source="operator", host=f"node-{i:04d}", instance_id=None, fqdn=None, host_keys={},
                             peer=None)
    store.close()
    pipeline = f"{sys.executable} -m gpunode.cli hook --state-dir {site / 'state'} status | head -n 2"
    status = subprocess.run(["bash", "-c", pipeline], capture_output=True, text=True, check=False,
                            env=dict(os.environ, PYTHONPATH=str(Path(cli.__file__).parents[1])))
    assert status.stdout.splitlines()[0].split()[:2] == ["node-0000", "queued"]
    assert "Traceback" not in status.stderr and "BrokenPipe" not in status.stderr, status.stderr
