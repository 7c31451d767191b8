"""The gpunode CLI and the fleet helpers that need no podman."""

from __future__ import annotations

import json

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


def test_inventory_uses_the_podman_connection(monkeypatch, tmp_path):
    monkeypatch.setattr(fleet, "hosts", lambda: [
        {"name": "dgx01", "container": "gpunode-sim-dgx01", "profile": "dgx-h100", "state_dir": "/x",
         "status": "running"},
        {"name": "old", "container": "gpunode-sim-old", "profile": "dgx-h100", "state_dir": "/y",
         "status": "exited"},
    ])
    out = tmp_path / "hosts.yml"
    fleet.inventory(out, log=lambda _msg: None)
    data = yaml.safe_load(out.read_text())
    group = data["all"]["children"]["gpu_nodes"]
    assert list(group["hosts"]) == ["dgx01"]
    assert group["hosts"]["dgx01"]["ansible_host"] == "gpunode-sim-dgx01"
    assert group["vars"]["ansible_connection"] == "containers.podman.podman"
    assert group["vars"]["gpunode_sysfs_root"] == "/var/lib/gpunode-sim/sys"


def test_version_and_json_errors(tmp_path, capsys):
    """--version names the package version; with --json, errors are JSON objects on stdout."""
    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.startswith("gpunode ")
    assert cli.main(["hook", "--state-dir", str(tmp_path), "status", "--json"]) == 1
    assert json.loads(capsys.readouterr().out) == {"error": f"no hook database at {tmp_path / 'hook.db'}"}
    assert cli.main(["hook", "--config", str(tmp_path / "absent.yml"), "status", "--json"]) == 2
    assert "absent.yml" in json.loads(capsys.readouterr().out)["error"]
