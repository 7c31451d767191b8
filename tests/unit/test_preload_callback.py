"""The preload callback: the collection's filters and action plugins are loaded in ansible-playbook itself,
before it forks a worker per task and host, and the repository's ansible.cfg enables it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = str(Path(sys.executable).with_name("ansible-playbook"))
ENV = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
       "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".cache" / "collections"), "ANSIBLE_NOCOLOR": "1"}


def documented_filters():
    """Every filter with its own documentation file (plugins/filter/<name>.yml): the collection's filters."""
    names = set()
    for path in (REPO / "plugins" / "filter").glob("*.yml"):
        names.add(yaml.safe_load(path.read_text())["DOCUMENTATION"]["name"])
    return names


# Ansible's collection loader over the repository's collection path, as ansible-playbook installs it.
FINDER = """
    import json, os, sys
    from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder
    _AnsibleCollectionFinder(paths=[os.path.join(os.getcwd(), ".cache", "collections")])._install()
"""


def run_python(code):
    """``code`` in a fresh interpreter (nothing of the collection imported yet), after FINDER; its last line of
    output, as JSON."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(FINDER) + textwrap.dedent(code)],
                          capture_output=True, text=True, env=ENV, check=False, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_preload_loads_every_filter_and_action_plugin_of_the_collection():
    out = run_python("""
        from ansible_collections.mlplatform.gpunode.plugins.callback.preload import preload
        before = sorted(m for m in sys.modules if m.startswith("ansible_collections.mlplatform.gpunode.plugins.action"))
        logged = []
        filters, modules = preload(log=logged.append)
        pid = os.fork()
        if pid == 0:  # a worker forked afterwards has them without importing anything
            ok = all(m in sys.modules for m in modules)
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"before": before, "filters": filters, "modules": modules, "logged": logged,
                          "child": os.waitstatus_to_exitcode(status)}))
    """)
    assert out["before"] == []
    assert out["logged"] == []
    missing = documented_filters() - set(out["filters"])
    assert not missing, f"filters the preload did not load: {sorted(missing)}"
    actions = {f"ansible_collections.mlplatform.gpunode.plugins.action.{p.stem}"
               for p in (REPO / "plugins" / "action").glob("*.py") if p.stem != "__init__"}
    assert actions <= set(out["modules"])
    assert {"ansible.plugins.action.set_fact", "ansible.plugins.action.assert", "ansible.plugins.action.normal",
            "ansible.plugins.action.command"} <= set(out["modules"])
    assert out["child"] == 0


def test_a_plugin_that_does_not_load_is_logged_and_left_to_the_task():
    out = run_python("""
        from ansible_collections.mlplatform.gpunode.plugins.callback import preload as plugin
        real = plugin._submodules
        plugin._submodules = lambda package: real(package) + [package + ".no_such_plugin"]
        logged = []
        filters, modules = plugin.preload(log=logged.append)
        print(json.dumps({"filters": filters, "modules": modules, "logged": logged}))
    """)
    assert any("plugins.filter.no_such_plugin not loaded" in line for line in out["logged"]), out["logged"]
    assert any("plugins.action.no_such_plugin not loaded" in line for line in out["logged"]), out["logged"]
    assert len(out["logged"]) == 2
    assert "file_plan" in out["filters"]
    assert not any(m.endswith("no_such_plugin") for m in out["modules"])


def test_the_repository_ansible_cfg_enables_it_and_a_playbook_runs_it(tmp_path):
    (tmp_path / "hosts.yml").write_text("all:\n  hosts:\n    h1:\n      ansible_connection: local\n"
                                        f"      ansible_python_interpreter: {sys.executable}\n")
    (tmp_path / "play.yml").write_text(textwrap.dedent("""\
        - name: Use a filter of the collection
          hosts: all
          gather_facts: false
          tasks:
            - name: Plan a file against an empty host state
              ansible.builtin.debug:
                msg: "{{ {'files': {}} | mlplatform.gpunode.file_plan('/etc/x', 'abc') }}"

            - name: Count the objects frozen in this task's worker
              ansible.builtin.debug:
                msg: "FROZEN {{ 0 | frozen_in_worker }}"
        """))
    # A filter runs in the worker: it reports what the worker inherited from ansible-playbook.
    (tmp_path / "filters").mkdir()
    (tmp_path / "filters" / "frozen.py").write_text(textwrap.dedent("""\
        import gc
        class FilterModule:
            def filters(self):
                return {"frozen_in_worker": lambda _: gc.get_freeze_count()}
        """))
    proc = subprocess.run([ANSIBLE_PLAYBOOK, "-vvv", "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml")],
                          capture_output=True, text=True, check=False, timeout=300,
                          env={**ENV, "ANSIBLE_FILTER_PLUGINS": str(tmp_path / "filters")})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # The worker's heap came frozen: its collections do not walk the inherited objects.
    frozen = int(re.search(r"FROZEN (\d+)", proc.stdout).group(1))
    assert frozen > 10000, frozen
    count = len(documented_filters())
    line = next(line for line in proc.stdout.splitlines() if line.startswith("preload: "))
    assert int(line.split()[1]) >= count, line
    assert "before the workers fork" in line
