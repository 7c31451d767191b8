"""The simulated apt repositories: real .debs, index hashes that match, a valid signature."""

from __future__ import annotations

import gzip
import hashlib
import re
import subprocess
from pathlib import Path

import pytest

from gpunode import cli
from gpunode.sim import fleet, repo

pytestmark = pytest.mark.skipif(
    subprocess.run(["which", "dpkg-deb", "gpg", "gpgv"], capture_output=True, check=False).returncode != 0,
    reason="dpkg-deb, gpg and gpgv are needed to build the repository")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sim-repo")
    repo.build(out, force=True, log=lambda _msg: None)
    return out


def _stanzas(packages: Path) -> list[dict[str, str]]:
    result = []
    for block in packages.read_text().strip().split("\n\n"):
        fields = {}
        for line in block.splitlines():
            if not line.startswith(" "):
                key, _, value = line.partition(": ")
                fields[key] = value
        result.append(fields)
    return result


def test_definitions_expand_two_driver_versions_with_exact_fabric_manager_depends():
    defs = repo.load_definitions()
    cuda = {(p["name"], p["version"]): p for p in defs["cuda"]["packages"]}
    for version in ("570.133.20", "570.172.08"):
        fm = cuda[("nvidia-fabricmanager-570", f"{version}-1")]
        assert f"nvidia-kernel-common-570-server (= {version}-1)" in fm["depends"]
        driver = cuda[("nvidia-driver-570-server-open", f"{version}-1")]
        assert f"nvidia-utils-570-server (= {version}-1)" in driver["depends"]
        module = next(f for f in cuda[("nvidia-dkms-570-server-open", f"{version}-1")]["files"]
                      if f["path"].endswith("/nvidia.ko"))
        assert module["module"]["version"] == version
    doca = {p["name"] for p in defs["doca"]["packages"]}
    assert {"doca-ofed", "mft", "mlnx-ofed-kernel-utils", "mlnx-ofed-kernel-dkms", "mlnx-tools", "rdma-core",
            "ibverbs-utils", "infiniband-diags", "perftest", "gpunode-sim-kernel"} <= doca


def test_every_package_is_a_valid_deb_with_the_defined_control(built):
    defs = repo.load_definitions()
    debs = sorted((built / "cuda" / "debian12" / "x86_64").glob("*.deb"))
    assert len(debs) == len(defs["cuda"]["packages"])
    for deb in debs:
        info = subprocess.run(["dpkg-deb", "-I", str(deb)], capture_output=True, text=True, check=True).stdout
        name = re.search(r"^ Package: (\S+)$", info, re.M).group(1)
        version = re.search(r"^ Version: (\S+)$", info, re.M).group(1)
        assert any(p["name"] == name and p["version"] == version for p in defs["cuda"]["packages"])


def test_tool_wrappers_and_module_files_are_in_the_packages(built):
    deb = next((built / "cuda" / "debian12" / "x86_64").glob("nvidia-utils-570-server_570.172.08-1_*.deb"))
    listing = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
    assert re.search(r"^-rwxr-xr-x root/root .* \./usr/bin/nvidia-smi$", listing, re.M)
    dkms = next((built / "cuda" / "debian12" / "x86_64").glob("nvidia-dkms-570-server-open_570.172.08-1_*.deb"))
    body = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(dkms)], capture_output=True, check=True).stdout
    assert b"version=570.172.08\n" in body
    assert b"depends=nvidia,ib_core\n" in body


def test_index_sizes_and_hashes_match_the_debs(built):
    rdir = built / "doca" / "2.9.1" / "debian12" / "x86_64"
    stanzas = _stanzas(rdir / "Packages")
    assert {s["Package"] for s in stanzas} >= {"doca-ofed", "mft", "perftest"}
    for stanza in stanzas:
        data = (rdir / stanza["Filename"]).read_bytes()
        assert int(stanza["Size"]) == len(data)
        assert stanza["MD5sum"] == hashlib.md5(data).hexdigest()  # noqa: S324 - checking the apt index
        assert stanza["SHA256"] == hashlib.sha256(data).hexdigest()
    assert gzip.decompress((rdir / "Packages.gz").read_bytes()) == (rdir / "Packages").read_bytes()
    release = (rdir / "Release").read_text()
    sha = release.split("SHA256:\n", 1)[1]
    for name in ("Packages", "Packages.gz"):
        data = (rdir / name).read_bytes()
        assert f" {hashlib.sha256(data).hexdigest()} {len(data):>16} {name}" in sha


def test_release_is_signed_by_the_published_key(built, tmp_path):
    rdir = built / "cuda" / "debian12" / "x86_64"
    keyring = tmp_path / "key.gpg"
    subprocess.run(["gpg", "--batch", "--dearmor", "--output", str(keyring), str(rdir / "3bf863cc.pub")], check=True)
    for argv in (["gpgv", "--keyring", str(keyring), str(rdir / "InRelease")],
                 ["gpgv", "--keyring", str(keyring), str(rdir / "Release.gpg"), str(rdir / "Release")]):
        assert subprocess.run(argv, capture_output=True, check=False).returncode == 0
    assert (built / "doca" / "GPG-KEY-Mellanox.pub").read_bytes() == (built / "doca" / "gpg.key").read_bytes()
    tampered = tmp_path / "Release"
    tampered.write_text((rdir / "Release").read_text().replace("Label:", "Label: x"))
    assert subprocess.run(["gpgv", "--keyring", str(keyring), str(rdir / "Release.gpg"), str(tampered)],
                          capture_output=True, check=False).returncode != 0


def test_unchanged_inputs_skip_the_build(built):
    messages = []
    repo.build(built, log=messages.append)
    assert messages == [f"sim repo {built} is up to date"]


def test_unknown_placeholder_names_the_package(tmp_path):
    bad = tmp_path / "packages.yaml"
    bad.write_text("repos:\n  x:\n    packages:\n      - {name: 'p-{nope}', version: '1', description: d}\n")
    with pytest.raises(repo.RepoError, match=r"x/p-\{nope\}: unknown placeholder"):
        repo.load_definitions(bad)


def test_repo_path_command(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("GPUNODE_SIM_REPO", str(tmp_path / "r"))
    assert cli.main(["sim", "repo", "path"]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "r")


def test_inventory_points_mirrors_at_the_mounted_repo(monkeypatch, tmp_path):
    monkeypatch.setattr(fleet, "hosts", lambda: [
        {"name": "h1", "container": "gpunode-sim-h1", "profile": "pcie-h100", "state_dir": "/x/hosts/h1",
         "fleet_dir": "/x", "ssh_port": 22200, "status": "running"}])
    data = fleet.inventory(tmp_path / "hosts.yml", log=lambda _msg: None)
    gvars = data["all"]["children"]["gpu_nodes"]["vars"]
    assert gvars["ofed_mirror_url"] == "file:///srv/gpunode-repo/doca"
    assert gvars["gpu_driver_mirror_url"] == "file:///srv/gpunode-repo/cuda"
    assert gvars["kubernetes_node_mirror_url"] == "file:///srv/gpunode-repo/kubernetes"
