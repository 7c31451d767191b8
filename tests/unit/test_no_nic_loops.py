"""No task loops over NICs: one module call handles every device of a host (issue 4).

A task loop over rails, PFs or netdevs makes the task count of a converge grow with the number of
NICs and splits one host's change into per-device steps that can stop half-way. This guard reads
every task of every role and playbook (blocks included) and fails on a loop whose expression names
NIC-side data. `bench/bench_site.py` (b) measures the same property at run time: equal task counts
on a 2-rail, an 8-rail and a 12-NIC host.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
LOOP_KEYS = ("loop", "with_items", "with_list", "with_dict", "with_subelements", "with_nested", "with_together")
# Words that only appear in an expression that walks NIC-side data.
NIC_WORDS = re.compile(r"rail|nic|netdev|pci|devices|interfaces|_targets|skipped|vfs?\b|ports?\b|mlx5|hca",
                       re.IGNORECASE)


def _tasks(node):
    if isinstance(node, list):
        for item in node:
            yield from _tasks(item)
    elif isinstance(node, dict):
        if any(key in node for key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers")):
            for key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers"):
                yield from _tasks(node.get(key) or [])
        if "name" in node or any(key in node for key in LOOP_KEYS):
            yield node


def _task_files():
    files = sorted(REPO.glob("roles/*/tasks/*.yml")) + sorted(REPO.glob("roles/*/handlers/*.yml"))
    files += sorted(REPO.glob("playbooks/*.yml"))
    return files


def _loops():
    found = []
    for path in _task_files():
        for task in _tasks(yaml.safe_load(path.read_text()) or []):
            for key in LOOP_KEYS:
                if key in task:
                    found.append((path.relative_to(REPO).as_posix(), task.get("name", "?"), yaml.safe_dump(task[key])))
    return found


def test_the_guard_sees_the_loops_it_must_see():
    loops = _loops()
    # Known, NIC-free loops exist (packages, CRDs, hosts): the walk reaches blocks and playbooks.
    assert any(path == "roles/cluster_objects/tasks/apply.yml" for path, _, _ in loops)
    assert any(path == "roles/kubernetes_node/tasks/kernel_apply.yml" for path, _, _ in loops)
    assert any(path.startswith("playbooks/") for path, _, _ in loops)
    # The pattern would catch the loops this project removed.
    assert NIC_WORDS.search("{{ roce_qos_skipped }}")
    assert NIC_WORDS.search("{{ __roce_qos_targets | selectattr('fw_version', 'in', x) | list }}")
    assert NIC_WORDS.search("{{ gpunode_hw['nics'] }}")
    assert NIC_WORDS.search("{{ sriov_rails }}")


@pytest.mark.parametrize(("path", "name", "expr"), _loops(), ids=lambda v: v if "/" in str(v) else None)
def test_no_task_loops_over_nics(path, name, expr):
    assert not NIC_WORDS.search(expr), f"{path}: task {name!r} loops over NIC-side data: {expr.strip()}"
