"""The node_reboot role with ansible-playbook on this machine: consent, defer, one reboot per run,
verification after a (fake) power cycle, and no reboot loop when a value does not stick."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import fake_mft
import pytest

pytestmark = pytest.mark.slow  # ansible-playbook runs on materialized hosts (README: slow tests)

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = str(Path(sys.executable).with_name("ansible-playbook"))
RAIL = "0000:18:00.0"


@pytest.fixture
def node(tmp_path):
    fake = fake_mft.FakeMft().add_card("0000:18:00")
    fake.cards["0000:18:00"]["params"]["NUM_OF_VFS"]["next_boot"] = 8  # a pending change
    bindir = tmp_path / "bin"
    bindir.mkdir()
    state = tmp_path / "mft.json"
    fake_mft.install(fake, bindir, state)
    cycles = tmp_path / "cycles"

    def play(**extra):
        (tmp_path / "hosts.yml").write_text(
            f"all:\n  hosts:\n    node1:\n      ansible_connection: local\n"
            f"      ansible_python_interpreter: {sys.executable}\n")
        (tmp_path / "play.yml").write_text(
            "- name: Reboot\n  hosts: node1\n  gather_facts: false\n  roles:\n"
            "    - role: mlplatform.gpunode.node_reboot\n    - role: mlplatform.gpunode.node_reboot\n")
        extra_vars = {"nic_firmware_reboot_required": True, "nic_firmware_managed_devices": [RAIL],
                      "node_reboot_results_dir": str(tmp_path / "results"), "node_reboot_verify_delay": 0,
                      "node_reboot_verify_units": [], "gpunode_reboot_strategy": "power_cycle",
                      "gpunode_power_cycle_command": ["sh", "-c", f'echo x >> {cycles} && "$0" "$@"', sys.executable,
                                                      str(Path(__file__).with_name("fake_mft.py")), "reboot",
                                                      str(state)], **extra}
        env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "PATH": f"{bindir}:{os.environ['PATH']}",
               "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".cache" / "collections"), "ANSIBLE_NOCOLOR": "1"}
        proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml"),
                               "-e", json.dumps(extra_vars)], capture_output=True, text=True, env=env, check=False,
                              timeout=300)
        report = tmp_path / "results" / "reboot.json"
        return proc, json.loads(report.read_text()) if report.exists() else None

    return {"play": play, "cycles": lambda: len(cycles.read_text().split()) if cycles.exists() else 0,
            "fake": lambda: fake_mft.load(state), "save": lambda f: fake_mft.save(f, state)}


def test_no_consent_and_defer_only_report(node):
    proc, report = node["play"]()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert node["cycles"]() == 0
    assert report["deferred"] is True and report["reasons"] == ["nic_firmware_reboot_required"]
    assert "no consent (set gpunode_reboot_ok=true)" in " ".join(proc.stdout.split())
    proc, report = node["play"](gpunode_reboot_ok=True, gpunode_reboot_strategy="defer")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert node["cycles"]() == 0
    assert "strategy defer: the caller power-cycles the machine" in " ".join(proc.stdout.split())


def test_consent_reboots_once_and_verifies(node):
    proc, report = node["play"](gpunode_reboot_ok=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert node["cycles"]() == 1  # the role is applied twice in the play: still one power cycle
    assert node["fake"]().cards["0000:18:00"]["params"]["NUM_OF_VFS"]["current"] == 8
    assert report["rebooted"] is True and report["required"] is False and report["not_applied"] == {}


def test_value_that_does_not_stick_is_reported_then_never_loops(node):
    fake = node["fake"]()
    fake.cards["0000:18:00"]["params"]["NUM_OF_VFS"]["stuck"] = True
    node["save"](fake)
    proc, report = node["play"](gpunode_reboot_ok=True)
    assert proc.returncode != 0
    assert node["cycles"]() == 1
    assert "0000:18:00.0 NUM_OF_VFS (current 16, next boot 8)" in " ".join(proc.stdout.split())
    assert report["not_applied"] == {RAIL: ["NUM_OF_VFS"]}
    proc, report = node["play"](gpunode_reboot_ok=True)
    assert node["cycles"]() == 2
    proc, report = node["play"](gpunode_reboot_ok=True)
    assert proc.returncode != 0
    assert node["cycles"]() == 2
    assert "after 2 reboot(s) by this role (node_reboot_max_attempts 2); not rebooting again" in " ".join(
        proc.stdout.split())


BATCH_PLAY = """---
- name: Reboot GPU nodes that need it
  hosts: gpu_nodes
  gather_facts: false
  serial: "{{ gpunode_reboot_serial | default('100%') }}"
  max_fail_percentage: "{{ gpunode_reboot_max_fail_percentage | default(50) }}"
  environment:
    PATH: "{{ fake_bindir }}:/usr/bin:/bin"
  roles:
    - role: mlplatform.gpunode.node_reboot
      vars:
        node_reboot_fail_host: false

- name: Reboot verdicts (as playbooks/reboot.yml)
  hosts: gpu_nodes
  gather_facts: false
  max_fail_percentage: 100
  tasks:
    - name: Fail the hosts whose reboot failed, within the failure budget
      ansible.builtin.include_role:
        name: mlplatform.gpunode.node_reboot
        tasks_from: verdict

- name: The next stage
  hosts: gpu_nodes
  gather_facts: false
  tasks:
    - name: Mark the hosts that reached it
      ansible.builtin.copy:
        content: "{{ node_reboot_result | to_json }}"
        dest: "{{ node_reboot_results_dir }}/next-stage.json"
        mode: "0644"
"""


@pytest.mark.parametrize("serial", ["100%", "1"])
def test_a_failed_power_cycle_fails_its_host_only_and_the_others_finish(tmp_path, serial):
    """Three hosts whose reboot needs a power cycle; the second one's command fails. The other two
    are power-cycled and verified, the second is reported with the reason (reboot.json, the play's
    failure), nothing is left `rebooting`, and the next stage runs for the healthy hosts."""
    hosts = {}
    for name in ("node1", "node2", "node3"):
        fake = fake_mft.FakeMft().add_card("0000:18:00")
        fake.cards["0000:18:00"]["params"]["NUM_OF_VFS"]["next_boot"] = 8
        bindir = tmp_path / name / "bin"
        bindir.mkdir(parents=True)
        state = tmp_path / name / "mft.json"
        fake_mft.install(fake, bindir, state)
        command = [sys.executable, str(Path(__file__).with_name("fake_mft.py")), "reboot", str(state)]
        if name == "node2":
            command = ["sh", "-c", "echo 'Error: Unable to establish IPMI v2 / RMCP+ session' >&2; exit 1"]
        hosts[name] = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                       "fake_bindir": str(bindir), "gpunode_power_cycle_command": command,
                       "node_reboot_results_dir": str(tmp_path / name / "results"), "state": str(state)}
    inventory = {"all": {"children": {"gpu_nodes": {"hosts": hosts}}}}
    (tmp_path / "hosts.yml").write_text(json.dumps(inventory))
    (tmp_path / "play.yml").write_text(BATCH_PLAY)
    extra_vars = {"nic_firmware_reboot_required": True, "nic_firmware_managed_devices": [RAIL],
                  "node_reboot_verify_delay": 0, "node_reboot_verify_units": [], "gpunode_reboot_ok": True,
                  "gpunode_reboot_strategy": "power_cycle", "gpunode_reboot_serial": serial}
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
           "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".cache" / "collections"), "ANSIBLE_NOCOLOR": "1"}
    proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml"),
                           "-e", json.dumps(extra_vars)], capture_output=True, text=True, env=env, check=False,
                          timeout=300)
    out = " ".join(proc.stdout.split())
    assert proc.returncode == 2, proc.stdout + proc.stderr  # a host failed; the run went on
    reports = {h: json.loads((tmp_path / h / "results" / "reboot.json").read_text()) for h in hosts}
    for healthy in ("node1", "node3"):
        assert reports[healthy]["rebooted"] is True and reports[healthy]["rebooting"] is False
        assert reports[healthy]["required"] is False and reports[healthy]["not_applied"] == {}
        assert fake_mft.load(Path(hosts[healthy]["state"])).cards["0000:18:00"]["params"]["NUM_OF_VFS"]["current"] == 8
        reached = json.loads((tmp_path / healthy / "results" / "next-stage.json").read_text())
        assert reached["rebooted"] is True and reached["verified"] is True and reached["failed"] is False
    failed = reports["node2"]
    assert failed["rebooting"] is False and failed["failed"] is True and failed["rebooted"] is False
    assert "Power-cycle the host from the controller" in failed["reason"]
    assert "Unable to establish IPMI v2 / RMCP+ session" in failed["reason"]
    assert not (tmp_path / "node2" / "results" / "next-stage.json").exists()
    assert "node2: reboot failed: Reboot | Power-cycle the host from the controller" in out
    assert "stopping the run" not in out
    assert fake_mft.load(Path(hosts["node2"]["state"])).cards["0000:18:00"]["params"]["NUM_OF_VFS"]["current"] == 16
    assert re.search(r"node1\s+: ok=\d+\s+changed=\d+\s+unreachable=0\s+failed=0", proc.stdout)
    assert re.search(r"node2\s+: ok=\d+\s+changed=\d+\s+unreachable=0\s+failed=1", proc.stdout)
