"""The gpunode CLI and the fleet helpers that need no podman."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from gpunode import cli
from gpunode.sim import fleet, image


@pytest.mark.parametrize("text", ["dgx01", "dgx01=", "DGX_01=dgx-h100", "-x=dgx-h100"])
def test_host_spec_rejects_bad_input(text):
    with pytest.raises(fleet.FleetError, match="host spec"):
        fleet.HostSpec.parse(text)


def test_host_spec_parses():
    assert fleet.HostSpec.parse("dgx01=dgx-h100") == fleet.HostSpec("dgx01", "dgx-h100")


def test_recipe_hash_is_stable_and_follows_the_recipe():
    assert image.recipe_hash() == image.recipe_hash(dict(image.RECIPE))
    changed = {**image.RECIPE, "include": [*image.RECIPE["include"], "pciutils"]}
    assert image.recipe_hash(changed) != image.recipe_hash()
    assert image.image_ref().startswith("localhost/gpunode-sim:")


def test_materialize_command_writes_a_tree(tmp_path, capsys):
    dest = tmp_path / "sys"
    assert cli.main(["sim", "materialize", "hgx-h100", str(dest)]) == 0
    assert (dest / "class" / "dmi" / "id" / "product_name").read_text() == "PowerEdge XE9680\n"
    assert "materialized hgx-h100" in capsys.readouterr().out


def test_bad_profile_is_a_one_line_error(tmp_path, capsys):
    bad = tmp_path / "typo.yaml"
    bad.write_text(yaml.safe_dump({"name": "typo", "descriptoin": "x"}))
    assert cli.main(["sim", "materialize", str(bad), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpunode: error: ")
    assert "typo.yaml" in err


def test_profiles_command_lists_the_shipped_profiles(capsys):
    assert cli.main(["sim", "profiles"]) == 0
    names = capsys.readouterr().out.split()
    assert {"dgx-h100", "hgx-h100"} <= set(names)


def test_inventory_connects_over_ssh_to_each_hosts_loopback_port(monkeypatch, tmp_path):
    monkeypatch.setattr(fleet, "hosts", lambda: [
        {"name": "dgx01", "container": "gpunode-sim-dgx01", "profile": "dgx-h100", "state_dir": "/x/hosts/dgx01",
         "fleet_dir": "/x", "ssh_port": 22201, "status": "running"},
        {"name": "old", "container": "gpunode-sim-old", "profile": "dgx-h100", "state_dir": "/y",
         "fleet_dir": "/y", "ssh_port": 22202, "status": "exited"},
    ])
    out = tmp_path / "hosts.yml"
    fleet.inventory(out, log=lambda _msg: None)
    data = yaml.safe_load(out.read_text())
    group = data["all"]["children"]["gpu_nodes"]
    assert list(group["hosts"]) == ["dgx01"]
    host = group["hosts"]["dgx01"]
    assert (host["ansible_host"], host["ansible_port"]) == ("127.0.0.1", 22201)
    assert host["ansible_ssh_private_key_file"] == "/x/ssh/id_ed25519"
    assert "-o UserKnownHostsFile=/x/ssh/known_hosts -o StrictHostKeyChecking=yes" in host["ansible_ssh_common_args"]
    assert host["ansible_ssh_extra_args"] == "-o HostKeyAlias=dgx01"
    assert group["vars"]["ansible_connection"] == "ssh"
    assert group["vars"]["ansible_ssh_pipelining"] is True
    assert group["vars"]["gpunode_sysfs_root"] == "/var/lib/gpunode-sim/sys"


def test_inventory_refuses_a_host_without_an_ssh_port(monkeypatch, tmp_path):
    """A host an older simulator started (podman connection, no port label) must be replaced."""
    monkeypatch.setattr(fleet, "hosts", lambda: [
        {"name": "dgx01", "container": "gpunode-sim-dgx01", "profile": "dgx-h100", "state_dir": "/x",
         "fleet_dir": None, "ssh_port": None, "status": "running"}])
    with pytest.raises(fleet.FleetError, match="dgx01.*--replace"):
        fleet.inventory(tmp_path / "hosts.yml", log=lambda _msg: None)


def test_ssh_port_skips_taken_and_listening_ports():
    import socket
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", fleet.SSH_PORTS.start + 1))
        busy.listen()
        assert fleet.pick_ssh_port({fleet.SSH_PORTS.start}) == fleet.SSH_PORTS.start + 2


def test_ssh_config_and_known_hosts(monkeypatch, tmp_path):
    fleet.write_ssh_config(tmp_path / "hosts" / "h1", 22210, "ssh-ed25519 AAAA test\n")
    conf = (tmp_path / "hosts" / "h1" / "ssh" / "sshd.conf").read_text()
    assert "Port 22210\nListenAddress 127.0.0.1\n" in conf
    assert "AuthorizedKeysFile /var/lib/gpunode-sim/ssh/authorized_keys" in conf
    assert oct((tmp_path / "hosts" / "h1" / "ssh" / "authorized_keys").stat().st_mode & 0o777) == "0o600"
    (tmp_path / "ssh").mkdir()
    (tmp_path / "ssh" / "known_hosts").write_text("h1 ssh-ed25519 OLD\nh2 ssh-ed25519 KEEP\n")

    def fake_run(*args, check=True):
        return subprocess.CompletedProcess(args, 0, "ssh-ed25519 NEW root@h1\nssh-rsa RSA root@h1\n", "")
    monkeypatch.setattr(fleet.podman, "run", fake_run)
    fleet.record_host_keys(tmp_path, "h1", 22210, "gpunode-sim-h1")
    lines = (tmp_path / "ssh" / "known_hosts").read_text().splitlines()
    assert lines == ["h2 ssh-ed25519 KEEP", "[127.0.0.1]:22210 ssh-ed25519 NEW", "[127.0.0.1]:22210 ssh-rsa RSA",
                     "h1 ssh-ed25519 NEW", "h1 ssh-rsa RSA"]


def test_version_and_json_errors(tmp_path, capsys):
    """--version names the package version; with --json, errors are JSON objects on stdout."""
    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.startswith("gpunode ")
    assert cli.main(["hook", "--state-dir", str(tmp_path), "status", "--json"]) == 1
    assert json.loads(capsys.readouterr().out) == {"error": f"no hook database at {tmp_path / 'hook.db'}"}
    assert cli.main(["hook", "--config", str(tmp_path / "absent.yml"), "status", "--json"]) == 2
    assert "absent.yml" in json.loads(capsys.readouterr().out)["error"]
