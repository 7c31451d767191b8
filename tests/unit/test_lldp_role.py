"""The lldp role plans against the host read: a converged host costs no round trip; a missing package is the only
install, a stopped service the only start; a missing host read is a clear error."""

from __future__ import annotations

import sys

from local_play import run_play

PLAY = """---
- name: LLDP
  hosts: all
  gather_facts: false
  roles:
    - role: mlplatform.gpunode.lldp
"""


def _state(installed=True, active="active", enabled="enabled"):
    packages = {"lldpd": "1.0.16-1+deb12u1"} if installed else {}
    return {"packages": packages, "units": {"lldpd.service": {"active": active, "enabled": enabled}}}


def _run(tmp_path, state, *args):
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    if state is not None:
        host["gpunode_host_state"] = state
    return run_play(tmp_path, {"all": {"hosts": {"n1": host}}}, PLAY, *args)


def test_a_converged_host_is_not_touched(tmp_path):
    proc = _run(tmp_path, _state())
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "changed=0" in proc.stdout
    for task in ("Install lldpd", "Start lldpd and enable it at boot", "Mark the host state stale"):
        block = proc.stdout.split(f"TASK [mlplatform.gpunode.lldp : {task}")[1].split("TASK [")[0]
        assert "skipping: [n1]" in block, block


def test_the_plan_names_only_what_is_missing(tmp_path):
    def plan(state):
        # -vv prints the plan fact; the start task (check mode) is not run on this controller's systemd.
        proc = _run(tmp_path, state, "-vv", "--check", "-e", "{}")
        text = proc.stdout.split("Plan the package and the service")[1].split("TASK [")[0]
        return {line.split(":")[0].strip(): line.split(":")[1].strip() for line in text.splitlines()
                if line.strip().startswith(("install:", "service:"))}

    assert plan(_state(active="inactive")) == {"install": "false", "service": "true"}
    assert plan(_state(enabled="disabled")) == {"install": "false", "service": "true"}
    assert plan(_state(installed=False)) == {"install": "true", "service": "true"}
    assert plan(_state()) == {"install": "false", "service": "false"}


def test_without_the_host_read_it_fails_naming_the_role_to_run(tmp_path):
    proc = _run(tmp_path, None)
    assert proc.returncode != 0
    assert "n1: the lldp role needs gpunode_host_state; run the mlplatform.gpunode.discovery role first" in proc.stdout
