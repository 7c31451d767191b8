#!/usr/bin/env python3
"""Count what the test suite checks, so a restructuring of the suite can show it kept every check.

Counted, from the source alone (nothing is run):

- pytest and testinfra ``assert`` statements (AST), per tree: tests/unit, tests/e2e and each
  molecule scenario's tests/ (the testinfra verifiers);
- ``ansible.builtin.assert`` tasks and ``fail``/``failed_when`` checks in the molecule playbooks
  (prepare, side_effect, converge; they check state too);
- test functions per tree (each ``def test_*`` once; parametrized ids are not expanded);
- molecule steps per scenario, from the ``test_sequence`` of its molecule.yml: check, converge,
  idempotence, side_effect and verify (a step listed twice counts twice);
- e2e cases: the ``test_*`` functions under tests/e2e.

``python bench/count_assertions.py`` prints a table; ``--json`` prints the numbers for a script.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
STEPS = ("check", "converge", "idempotence", "side_effect", "verify")
ASSERT_MODULES = {"ansible.builtin.assert", "assert"}


def python_counts(paths: list[Path]) -> dict[str, int]:
    asserts = tests = 0
    for path in paths:
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Assert):
                asserts += 1
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_"):
                tests += 1
    return {"asserts": asserts, "tests": tests, "files": len(paths)}


def _tasks(node):
    """Every task dict in a play list, including those nested in blocks/rescue/always."""
    if isinstance(node, list):
        for item in node:
            yield from _tasks(item)
    elif isinstance(node, dict):
        for key in ("tasks", "pre_tasks", "post_tasks", "handlers", "block", "rescue", "always"):
            if key in node:
                yield from _tasks(node[key])
        if not any(k in node for k in ("hosts", "block", "import_playbook")):
            yield node


def playbook_counts(paths: list[Path]) -> dict[str, int]:
    """ansible.builtin.assert tasks and the conditions they check; fail tasks; failed_when checks."""
    counts = {"assert_tasks": 0, "assert_conditions": 0, "fail_checks": 0}
    for path in paths:
        data = yaml.safe_load(path.read_text())
        for task in _tasks(data or []):
            module = next((k for k in task if k in ASSERT_MODULES), None)
            if module:
                that = (task[module] or {}).get("that", [])
                counts["assert_tasks"] += 1
                counts["assert_conditions"] += len(that) if isinstance(that, list) else 1
            if "ansible.builtin.fail" in task or (task.get("failed_when") not in (None, False, "false")):
                counts["fail_checks"] += 1
    return counts


def scenario_counts(scenario: Path) -> dict:
    config = yaml.safe_load((scenario / "molecule.yml").read_text())
    sequence = config.get("scenario", {}).get("test_sequence", [])
    steps = {step: sequence.count(step) for step in STEPS}
    tests = sorted((scenario / "tests").glob("test_*.py")) if (scenario / "tests").is_dir() else []
    books = sorted(p for p in scenario.glob("*.yml") if p.name != "molecule.yml")
    return {"sequence": sequence, "steps": steps, "testinfra": python_counts(tests),
            "playbooks": playbook_counts(books), "platforms": len(config.get("platforms", []))}


def count(repo: Path = REPO) -> dict:
    result = {
        "unit": python_counts(sorted((repo / "tests" / "unit").rglob("test_*.py"))),
        "e2e": python_counts(sorted((repo / "tests" / "e2e").rglob("test_*.py"))),
        "molecule": {s.name: scenario_counts(s) for s in sorted((repo / "molecule").iterdir())
                     if (s / "molecule.yml").is_file()},
    }
    mol = result["molecule"].values()
    result["total"] = {
        "pytest_asserts": result["unit"]["asserts"] + result["e2e"]["asserts"]
        + sum(s["testinfra"]["asserts"] for s in mol),
        "testinfra_asserts": sum(s["testinfra"]["asserts"] for s in mol),
        "molecule_assert_conditions": sum(s["playbooks"]["assert_conditions"] for s in mol),
        "molecule_steps": {step: sum(s["steps"][step] for s in mol) for step in STEPS},
        "e2e_cases": result["e2e"]["tests"],
        "test_functions": result["unit"]["tests"] + result["e2e"]["tests"] + sum(s["testinfra"]["tests"] for s in mol),
    }
    return result


def table(result: dict) -> str:
    lines = ["| tree | asserts | test functions | files |", "|---|---:|---:|---:|"]
    for key in ("unit", "e2e"):
        r = result[key]
        lines.append(f"| tests/{key} | {r['asserts']} | {r['tests']} | {r['files']} |")
    for name, s in result["molecule"].items():
        r = s["testinfra"]
        lines.append(f"| molecule/{name}/tests (testinfra) | {r['asserts']} | {r['tests']} | {r['files']} |")
    lines += ["", "| scenario | hosts | " + " | ".join(STEPS) + " | playbook assert tasks (conditions) |",
              "|---|---:|" + "---:|" * len(STEPS) + "---:|"]
    for name, s in result["molecule"].items():
        p = s["playbooks"]
        lines.append(f"| {name} | {s['platforms']} | " + " | ".join(str(s["steps"][k]) for k in STEPS)
                     + f" | {p['assert_tasks']} ({p['assert_conditions']}) |")
    t = result["total"]
    lines += ["", f"pytest + testinfra asserts: {t['pytest_asserts']} (testinfra {t['testinfra_asserts']}); "
              f"molecule playbook assert conditions: {t['molecule_assert_conditions']}; "
              f"test functions: {t['test_functions']}; e2e cases: {t['e2e_cases']}; molecule steps: "
              + ", ".join(f"{k} {v}" for k, v in t["molecule_steps"].items())]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of a Markdown table")
    parser.add_argument("--repo", type=Path, default=REPO)
    args = parser.parse_args(argv)
    result = count(args.repo)
    print(json.dumps(result, indent=2, sort_keys=True) if args.json else table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
