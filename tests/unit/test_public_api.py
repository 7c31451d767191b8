"""The collection runs on ansible-core's public API only: nothing under ``plugins/`` imports ``ansible._internal``
or any underscore name of ansible-core, reaches into an object's private attributes (``obj._x`` where ``obj`` is not
``self``; ``getattr(obj, "_x")``), or ships a strategy, callback or lookup that replaces ansible-core's own."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLUGINS = sorted((REPO / "plugins").rglob("*.py"))
# Python's own public names that start with an underscore.
STDLIB = {"os._exit"}


def _private(name):
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def findings(path):
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "ansible":
            if any(_private(part) for part in node.module.split(".")):
                found.append(f"{node.lineno}: from {node.module} import ...")
            found.extend(f"{node.lineno}: import of {alias.name} from {node.module}"
                         for alias in node.names if _private(alias.name))
        elif isinstance(node, ast.Import):
            found.extend(f"{node.lineno}: import {alias.name}" for alias in node.names
                         if alias.name.split(".")[0] == "ansible" and any(_private(p) for p in alias.name.split(".")))
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")) and \
                    ast.unparse(node) not in STDLIB:
                found.append(f"{node.lineno}: attribute {node.attr} of {ast.unparse(node.value)}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in (
                "getattr", "hasattr", "setattr") and len(node.args) >= 2:
            name = node.args[1]
            if isinstance(name, ast.Constant) and isinstance(name.value, str) and _private(name.value):
                found.append(f"{node.lineno}: {node.func.id}(..., {name.value!r})")
    return found


@pytest.mark.parametrize("path", PLUGINS, ids=[str(p.relative_to(REPO)) for p in PLUGINS])
def test_plugin_uses_only_public_ansible_core_names(path):
    assert findings(path) == [], path


def test_the_checker_finds_what_it_forbids(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from ansible._internal import _task\nfrom ansible.executor.task_result import _RawTaskResult\n"
                   "import ansible._internal._templating\n"
                   "def f(hostvars, task):\n    return hostvars._variable_manager, getattr(task, '_role', None)\n")
    assert [line.split(":")[0] for line in findings(bad)] == ["1", "1", "2", "3", "5", "5"]


def test_no_strategy_callback_or_lookup_replaces_ansible_core():
    for kind in ("strategy", "callback", "lookup"):
        assert not list((REPO / "plugins" / kind).glob("*.py")), kind


def test_the_plugin_unit_tests_run_on_the_oldest_and_newest_ansible_core_exist():
    """tests/unit/plugin_tests.txt: the files make unit-2.18 and unit-2.21 run (make unit leaves them out)."""
    listed = (REPO / "tests" / "unit" / "plugin_tests.txt").read_text().split()
    assert listed and len(set(listed)) == len(listed)
    assert all((REPO / name).is_file() for name in listed), [n for n in listed if not (REPO / n).is_file()]
    assert "tests/unit/test_public_api.py" in listed
