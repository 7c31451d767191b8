"""The collection as a Galaxy user gets it: built into a tarball, installed into an empty collections path.

Everything here runs from that installed copy alone, outside this checkout (no ansible.cfg, no repository
symlink); the collections it depends on come from the ``ansible`` package, as on a user's controller.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml
from ansible_collections.mlplatform.gpunode.plugins.module_utils.intent import resolve_fleet

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
ROLES = sorted(p.name for p in (REPO / "roles").iterdir() if (p / "meta" / "argument_specs.yml").is_file())
MODULES = sorted(p.stem for p in (REPO / "plugins" / "modules").glob("*.py") if p.stem != "__init__")
# Repository-only content that must not ship.
NOT_SHIPPED = ["ansible.cfg", ".ansible-lint", ".yamllint", "Makefile", "pyproject.toml", "src", "molecule", "bench",
               ".ci", "tests/unit", "tests/e2e", "playbooks/sim_cluster.yml", "inventories/sim", "examples"]


def _env(home: Path, collections: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    return {**env, "ANSIBLE_COLLECTIONS_PATH": str(collections), "ANSIBLE_HOME": str(home), "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_DEPRECATION_WARNINGS": "0"}


def _run(argv, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=600)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    """Build the tarball and install it; later tests (e.g. the report action) can reuse this fixture."""
    work = tmp_path_factory.mktemp("galaxy")
    collections = work / "collections"
    env = _env(work / "home", collections)
    built = _run([str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(work), str(REPO)], work, env)
    assert built.returncode == 0, built.stderr
    (tarball,) = work.glob("mlplatform-gpunode-*.tar.gz")
    done = _run([str(BIN / "ansible-galaxy"), "collection", "install", "--offline", "--no-deps", "-p", str(collections),
                 str(tarball)], work, env)
    assert done.returncode == 0, done.stderr
    root = collections / "ansible_collections" / "mlplatform" / "gpunode"
    assert (root / "MANIFEST.json").is_file()
    return {"work": work, "env": env, "tarball": tarball, "root": root, "collections": collections}


def test_tarball_ships_the_collection_and_nothing_repository_only(installed):
    with tarfile.open(installed["tarball"]) as tar:
        names = set(tar.getnames())
    for kept in ("LICENSE", "README.md", "meta/runtime.yml", "meta/execution-environment.yml", "requirements.txt",
                 "bindep.txt", "playbooks/site.yml", "plugins/modules/nic_info.py", "docs/ansible.cfg.example",
                 "docs/hardware-facts.md", "docs/variables.md", "inventories/example/hosts.yml"):
        assert kept in names, kept
    for dropped in NOT_SHIPPED:
        assert not [n for n in names if n == dropped or n.startswith(dropped + "/")], dropped
    assert "GNU GENERAL PUBLIC LICENSE" in (installed["root"] / "LICENSE").read_text()


def test_ansible_doc_renders_every_module_filter_and_role(installed):
    env, work = installed["env"], installed["work"]
    for kind, expected in (("module", MODULES), ("role", ROLES)):
        listed = _run([str(BIN / "ansible-doc"), "-t", kind, "-l", "mlplatform.gpunode", "--json"], work, env)
        assert listed.returncode == 0, listed.stderr
        names = sorted(n.split(".")[-1] for n in json.loads(listed.stdout))
        assert names == expected, kind
    filters = _run([str(BIN / "ansible-doc"), "-t", "filter", "-l", "mlplatform.gpunode", "--json"], work, env)
    assert filters.returncode == 0, filters.stderr
    documented = sorted(json.loads(filters.stdout))
    shipped = sorted(f"mlplatform.gpunode.{p.stem}" for p in (REPO / "plugins" / "filter").glob("*.yml"))
    assert documented == shipped
    for kind, names in (("module", [f"mlplatform.gpunode.{m}" for m in MODULES]),
                        ("role", [f"mlplatform.gpunode.{r}" for r in ROLES]), ("filter", documented)):
        proc = _run([str(BIN / "ansible-doc"), "-t", kind, "--json", *names], work, env)
        assert proc.returncode == 0, proc.stderr
        assert "WARNING" not in proc.stderr and "ERROR" not in proc.stderr, proc.stderr
        docs = json.loads(proc.stdout)
        assert sorted(docs) == sorted(names), kind
        for name, doc in docs.items():
            # ansible-doc --json gives modules/filters {"doc": ...}, roles their entry points.
            assert doc.get("doc") or doc.get("entry_points"), name
    # One call per module as well: a multi-name call has been seen to pass over a module whose
    # DOCUMENTATION does not parse.
    for module in MODULES:
        proc = _run([str(BIN / "ansible-doc"), "-t", "module", f"mlplatform.gpunode.{module}"], work, env)
        assert proc.returncode == 0 and not proc.stderr.strip(), (module, proc.stderr)


def test_site_playbook_passes_syntax_check_from_the_installed_copy(installed):
    work = installed["work"]
    inventory = work / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {"node-a": {}}}}}}))
    proc = _run([str(BIN / "ansible-playbook"), "-i", str(inventory), "mlplatform.gpunode.site", "--syntax-check"],
                work, installed["env"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "playbook: " in proc.stdout and str(installed["root"]) in proc.stdout


def test_execution_environment_definition(installed, tmp_path):
    """ansible-builder reads meta/execution-environment.yml of the installed copy and accepts a definition using it."""
    introspect = Path(__import__("ansible_builder").__file__).parent / "_target_scripts" / "introspect.py"
    proc = _run([sys.executable, str(introspect), "introspect", str(installed["collections"])], tmp_path,
                installed["env"])
    assert proc.returncode == 0, proc.stderr
    found = yaml.safe_load(proc.stdout)
    python = " ".join(found["python"])
    assert "kubernetes>=" in python and "jsonpatch>=" in python, found
    assert any(line.startswith("python3-pip") for line in found["system"]), found
    definition = tmp_path / "execution-environment.yml"
    definition.write_text(yaml.safe_dump({
        "version": 3,
        "images": {"base_image": {"name": "quay.io/ansible/awx-ee:latest"}},
        "dependencies": {"ansible_core": {"package_pip": "ansible-core>=2.19,<2.20"},
                         "ansible_runner": {"package_pip": "ansible-runner"},
                         "galaxy": {"collections": [{"name": str(installed["tarball"]), "type": "file"}]}},
    }))
    created = _run([str(BIN / "ansible-builder"), "create", "-f", str(definition), "-c", str(tmp_path / "context")],
                   tmp_path, installed["env"])
    assert created.returncode == 0, created.stdout + created.stderr
    assert (tmp_path / "context" / "Containerfile").is_file()
    galaxy = yaml.safe_load((tmp_path / "context" / "_build" / "requirements.yml").read_text())
    assert galaxy["collections"][0]["type"] == "file"


def test_example_inventory_parses_clean_and_declares_every_fabric(installed):
    """The shipped example inventory: no warnings, about 100 GPU nodes in three fabrics (InfiniBand DGX, RoCE HGX,
    mixed RoCE), every one resolving to its fabric's intent, reboot consent off."""
    proc = _run([str(BIN / "ansible-inventory"), "-i", str(installed["root"] / "inventories" / "example"), "--list"],
                installed["work"], installed["env"])
    assert proc.returncode == 0, proc.stderr
    assert "WARNING" not in proc.stderr, proc.stderr
    inventory = json.loads(proc.stdout)
    hostvars = inventory["_meta"]["hostvars"]

    def members(group):
        return set(inventory[group].get("hosts", [])).union(*(members(g) for g in inventory[group].get("children", [])))

    nodes = members("gpu_nodes")
    assert len(nodes) == 100 and not [g for g in inventory if g.startswith("hook") or g in ("capi", "maas")]
    intent = resolve_fleet({h: hostvars[h] for h in nodes})
    fabrics = {name: f["transport"] for name, f in intent["fabrics"].items()}
    assert fabrics == {"ib-dgx": "infiniband", "roce-hgx": "roce", "roce-mixed": "roce"}
    mixed = {h for h, f in intent["hosts"].items() if f == "roce-mixed"}
    assert mixed & members("dgx_h100") and mixed & members("hgx_h100")  # DGX and HGX in one fabric
    assert intent["fabrics"]["roce-mixed"]["qos"]["mtu"] == 4200  # a fabric with its own profile
    for host in nodes:
        assert hostvars[host]["gpunode_reboot_ok"] is False and hostvars[host]["kubernetes_node_api_server"], host


def test_report_action_renders_from_the_installed_copy(installed, tmp_path):
    """The fleet report belongs to the collection: its action and templates, from the installed copy alone, render
    a results directory (one host's discovery result and validation, its contract, a drifting second host)."""
    results = tmp_path / "results"
    (results / "hosts" / "node-a").mkdir(parents=True)
    hw = {"platform": {"vendor": "NVIDIA", "product": "DGXH100"}, "gpus": [], "nvswitches": [], "nics": [],
          "rails": []}
    (results / "hosts" / "node-a" / "discovery.json").write_text(json.dumps(hw))
    (results / "hosts" / "node-a" / "validation.json").write_text(json.dumps(
        {"host": "node-a", "passed": True, "failures": [], "checks": [], "pairs": [], "taint": "removed"}))
    contract = [{"scope": "host", "rail": None, "pci_address": None, "netdev": None, "setting": "driver_version"}]
    (results / "fleet.json").write_text(json.dumps({"hosts": {
        "node-a": {"fabric": "f1", "contracts": {"gpu_driver_contract": [{**contract[0], "value": "570.172.08"}]}},
        "node-b": {"fabric": "f1", "contracts": {"gpu_driver_contract": [{**contract[0], "value": "570.124.06"}]}},
        "node-c": {"fabric": "f1", "contracts": {"gpu_driver_contract": [{**contract[0], "value": "570.172.08"}]}}},
        "run": {"id": "run-tarball", "time": "2026-12-03 00:00:00 UTC"}}))
    play = tmp_path / "report.yml"
    play.write_text(yaml.safe_dump([{"name": "Report", "hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "Render", "mlplatform.gpunode.fleet_report": {"input": str(results), "output": str(tmp_path / "out")}}
    ]}], sort_keys=False))
    proc = _run([str(BIN / "ansible-playbook"), "-c", "local", "-i", "localhost,", str(play)], installed["work"],
                installed["env"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    md = (tmp_path / "out" / "report.md").read_text()
    version = yaml.safe_load((REPO / "galaxy.yml").read_text())["version"]
    assert f"mlplatform.gpunode {version}; results of run `run-tarball`" in md  # no commit: not a git checkout
    assert re.search(r"^\| gpu_driver \| driver_version \| f1 \| 570\.172\.08 \| node-b \| host: 570\.124\.06 \|$",
                     md, re.M), md
    page = (tmp_path / "out" / "report.html").read_text()
    assert "node-a: NVIDIA DGXH100 (0 GPUs, 0 rails, 0 NVSwitches); fabric f1" in page
