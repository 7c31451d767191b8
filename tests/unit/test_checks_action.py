"""mlplatform.gpunode.checks: several checks in one task, evaluated in order like separate assert/fail tasks,
each failing with its own message (templated only then); run with ansible-playbook on a local host."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from local_play import fabric

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = str(Path(sys.executable).with_name("ansible-playbook"))


def run(tmp_path, task, extra_vars=None):
    """One play with ``task`` on a local host; the task's result as the json callback reports it."""
    (tmp_path / "hosts.yml").write_text("all:\n  hosts:\n    h1:\n      ansible_connection: local\n"
                                        f"      ansible_python_interpreter: {sys.executable}\n")
    body = textwrap.indent(textwrap.dedent(task), "    ")
    (tmp_path / "play.yml").write_text("- name: Checks\n  hosts: all\n  gather_facts: false\n  tasks:\n" + body)
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".cache" / "collections"),
           "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json"}
    args = [ANSIBLE_PLAYBOOK, "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml")]
    if extra_vars:
        args += ["-e", json.dumps(extra_vars)]
    proc = subprocess.run(args, capture_output=True, text=True, env=env, check=False, timeout=300)
    return json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["h1"]


TASK = """\
- name: Check the inputs
  mlplatform.gpunode.checks:
    checks:
      - that:
          - demo_count is defined
          - demo_count is integer
        msg: "{{ inventory_hostname }}: demo_count must be an integer (got {{ demo_count | default('nothing') }})"
      - when: demo_roles is defined
        that: __demo_bad | length == 0
        msg: "{{ inventory_hostname }}: demo_roles has {{ __demo_bad | join(', ') }}, not a NIC role"
      - fail_when: demo_count > 8
        msg: "{{ inventory_hostname }}: demo_count {{ demo_count }} is more than 8"
  vars:
    __demo_bad: "{{ demo_roles | difference(['compute', 'storage']) | sort }}"
"""


def test_all_checks_pass(tmp_path):
    result = run(tmp_path, TASK, {"demo_count": 4, "demo_roles": ["compute"]})
    assert not result.get("failed"), result
    assert result["msg"] == "All checks passed"
    assert result["checked"] == 3
    assert result["changed"] is False


def test_a_check_whose_when_is_false_is_passed_over(tmp_path):
    result = run(tmp_path, TASK, {"demo_count": 4})
    assert not result.get("failed"), result
    assert result["checked"] == 2


@pytest.mark.parametrize(("extra", "index", "message", "assertion"), [
    ({}, 0, "h1: demo_count must be an integer (got nothing)", "demo_count is defined"),
    ({"demo_count": "four"}, 0, "h1: demo_count must be an integer (got four)", "demo_count is integer"),
    ({"demo_count": 2, "demo_roles": ["compute", "gpu", "dpu"]}, 1,
     "h1: demo_roles has dpu, gpu, not a NIC role", "__demo_bad | length == 0"),
    ({"demo_count": 9}, 2, "h1: demo_count 9 is more than 8", "demo_count > 8"),
])
def test_the_first_failing_check_fails_with_its_own_message(tmp_path, extra, index, message, assertion):
    result = run(tmp_path, TASK, extra)
    assert result["failed"] is True
    assert result["msg"] == message
    assert result["failed_check"] == index
    assert result["assertion"] == assertion


def test_checks_after_the_failing_one_are_not_evaluated(tmp_path):
    """demo_count is undefined: the first check fails, and the third (demo_count > 8) would be an error."""
    result = run(tmp_path, TASK, {"demo_roles": ["compute"]})
    assert result["failed_check"] == 0
    assert "undefined" not in result["msg"]


def test_a_message_is_templated_only_when_its_check_fails(tmp_path):
    task = """\
    - name: Check
      mlplatform.gpunode.checks:
        checks:
          - that: true
            msg: "{{ no_such_variable }}"
    """
    result = run(tmp_path, task)
    assert not result.get("failed"), result


@pytest.mark.parametrize(("checks", "error"), [
    ("[]", "checks must be a non-empty list"),
    ("[{msg: m}]", "needs exactly one of that and fail_when"),
    ("[{that: true, fail_when: false, msg: m}]", "needs exactly one of that and fail_when"),
    ("[{that: 'x is defined'}]", "checks[0].msg must be the failure message"),
    ("[{that: 'x is defined', msg: m, fail_msg: n}]", "checks[0] has unknown keys ['fail_msg']"),
    ("[{that: 'x is defined', msg: m}, {fail_when: ['a', 'b'], msg: m}]", "checks[1].fail_when must be one condition"),
])
def test_a_malformed_check_is_an_error_before_any_is_evaluated(tmp_path, checks, error):
    task = f"""\
    - name: Check
      mlplatform.gpunode.checks:
        checks: {checks}
    """
    result = run(tmp_path, task)
    assert result["failed"] is True
    assert error in result["msg"], result["msg"]


def test_a_condition_that_is_not_a_boolean_is_the_assert_error(tmp_path):
    task = """\
    - name: Check
      mlplatform.gpunode.checks:
        checks:
          - that: "'a string'"
            msg: never
    """
    result = run(tmp_path, task)
    assert result["failed"] is True
    assert "Conditional result" in result["msg"] and "str" in result["msg"], result["msg"]



def _first_task_of_role(tmp_path, role, extra):
    """Include ``role`` without Ansible's own argument check (as the collection's playbooks import it) on a local
    host; the result of the role's first task line, and whether it was the last task run."""
    (tmp_path / "hosts.yml").write_text("all:\n  hosts:\n    h1:\n      ansible_connection: local\n"
                                        f"      ansible_python_interpreter: {sys.executable}\n")
    (tmp_path / "play.yml").write_text(textwrap.dedent(f"""\
        - name: The first task of a role
          hosts: all
          gather_facts: false
          tasks:
            - name: Include the role without Ansible's own argument check
              ansible.builtin.include_role:
                name: mlplatform.gpunode.{role}
                rolespec_validate: false
        """))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".cache" / "collections"),
           "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json"}
    proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml"),
                           "-e", json.dumps({**fabric(), **extra})], capture_output=True, text=True, env=env,
                          check=False, timeout=300)
    assert proc.returncode != 0
    tasks = json.loads(proc.stdout)["plays"][0]["tasks"]
    first = next(t for t in tasks if f"Warn about {role}_* variables" in t["task"]["name"])
    return first["hosts"]["h1"], tasks.index(first) == len(tasks) - 1


def test_role_variables_validates_the_arguments_as_ansible_does(tmp_path):
    """The role's first task line validates its options against meta/argument_specs.yml with Ansible's message,
    and names the typo that explains the failure in the same result; nothing of the role runs after it."""
    result, last = _first_task_of_role(tmp_path, "cluster_objects",
                                       {"cluster_objects_mode": "dry-run", "cluster_objects_moed": "apply"})
    assert result["failed"] is True and last
    assert result["msg"] == ("Validation of arguments failed:\n"
                             "value of cluster_objects_mode must be one of: apply, render, got: dry-run")
    assert result["argument_errors"] == ["value of cluster_objects_mode must be one of: apply, render, got: dry-run"]
    assert [u["name"] for u in result["unknown"]] == ["cluster_objects_moed"]
    assert any("did you mean cluster_objects_mode?" in w for w in result["warnings"])


def test_role_variables_then_makes_the_roles_first_checks(tmp_path):
    """Arguments that validate, then the role's first input checks (role_variables' checks option): a failing
    check fails with its own message, with the warning about the typo in the same result."""
    result, last = _first_task_of_role(tmp_path, "validation", {"validation_bandwith_threshold_pct": 50})
    assert result["failed"] is True and last
    assert result["msg"].startswith("h1: the validation role needs the gpunode_hw fact (run the discovery role first)")
    assert result["assertion"] == "gpunode_hw is defined" and result["failed_check"] == 0
    assert "argument_errors" not in result
    assert any("did you mean validation_bandwidth_threshold_pct?" in w for w in result["warnings"])


@pytest.mark.parametrize("role", ["ofed", "gpu_driver"])
def test_an_install_role_refuses_a_distro_without_platform_data(tmp_path, role):
    """The distro's platform data file is a task var of the check and of include_vars: a distro without one is
    refused with the role's message, before anything is loaded."""
    task = f"""\
        - name: Pretend the host runs Fedora
          ansible.builtin.set_fact:
            distribution: Fedora
            distribution_version: "40"
            distribution_major_version: "40"
            kernel: 6.8.0
            cacheable: true

        - name: Run the role's preflight
          ansible.builtin.include_role:
            name: mlplatform.gpunode.{role}
            tasks_from: preflight
        """
    (tmp_path / "hosts.yml").write_text("all:\n  hosts:\n    h1:\n      ansible_connection: local\n"
                                        f"      ansible_python_interpreter: {sys.executable}\n")
    (tmp_path / "play.yml").write_text("- name: Distro\n  hosts: all\n  gather_facts: false\n  tasks:\n"
                                       + textwrap.indent(textwrap.dedent(task), "    "))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".cache" / "collections"),
           "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json"}
    proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml")],
                          capture_output=True, text=True, env=env, check=False, timeout=300)
    assert proc.returncode != 0
    tasks = json.loads(proc.stdout)["plays"][0]["tasks"]
    assert tasks[-1]["task"]["name"].endswith("Preflight | Refuse a distro the role has no platform data for")
    assert tasks[-1]["hosts"]["h1"]["msg"] == (
        f"h1: Fedora 40 is not supported by the {role} role (platform data exists for Ubuntu 22.04, Ubuntu 24.04 "
        "and Debian 12)")
