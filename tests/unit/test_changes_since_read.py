"""The changes_since_read callback and lookup: the changed task results of each host since this run's host read,
which the validation role needs to judge a host on the read (0) instead of reading it back."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpunode.sim import fleet

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = str(Path(sys.executable).with_name("ansible-playbook"))
ENV = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
       "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".cache" / "collections"), "ANSIBLE_NOCOLOR": "1"}

PLAY = """\
- name: Count the changes since the host read
  hosts: all
  gather_facts: false
  vars:
    __since: "{{ lookup('mlplatform.gpunode.changes_since_read', inventory_hostname) }}"
  tasks:
    - name: Before any read
      ansible.builtin.debug:
        msg: "BEFORE {{ __since }}"

    - name: Read the host
      mlplatform.gpunode.host_state: &read
        sysfs_root: "{{ tree }}/sys"
        root: "{{ tree }}/root"
        nv_config: false
        neighbours: false
        files: []
        units: []

    - name: Right after the read
      ansible.builtin.debug:
        msg: "READ {{ __since }}"

    - name: A task that changes nothing
      ansible.builtin.command: "true"
      changed_when: false

    - name: A skipped task
      ansible.builtin.command: "true"
      when: false

    - name: After tasks that changed nothing
      ansible.builtin.debug:
        msg: "UNCHANGED {{ __since }}"

    - name: A task that changes the host
      ansible.builtin.command: "true"
      changed_when: true

    - name: A loop with one changed item
      ansible.builtin.command: "true"
      changed_when: item == 2
      loop: [1, 2]

    - name: After the changes
      ansible.builtin.debug:
        msg: "CHANGED {{ __since }}"

    - name: A failed task whose error is ignored
      ansible.builtin.command: "false"
      changed_when: false
      ignore_errors: true  # noqa: ignore-errors -- the test counts it

    - name: After the failure
      ansible.builtin.debug:
        msg: "FAILED {{ __since }}"

    - name: A read of any age is too old for max_age 0
      ansible.builtin.debug:
        msg: "AGED {{ lookup('mlplatform.gpunode.changes_since_read', inventory_hostname, max_age=0) }}"

    - name: Read the host again
      mlplatform.gpunode.host_state: *read

    - name: After the second read
      ansible.builtin.debug:
        msg: "REREAD {{ __since }}"
"""


@pytest.fixture(scope="module")
def play(tmp_path_factory):
    root = tmp_path_factory.mktemp("since")
    hdir = fleet.prepare_state(root / "state", fleet.HostSpec(name="cs1", profile="pcie-h100-2rail"))
    (hdir / "root").mkdir(exist_ok=True)
    (root / "hosts.yml").write_text(f"all:\n  hosts:\n    cs1:\n      ansible_connection: local\n"
                                    f"      ansible_python_interpreter: {sys.executable}\n      tree: {hdir}\n")
    (root / "play.yml").write_text(PLAY)
    return root


def run(play, env=None):
    proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(play / "hosts.yml"), str(play / "play.yml")],
                          capture_output=True, text=True, check=False, timeout=300, env={**ENV, **(env or {})},
                          cwd=play)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return dict(re.findall(r"msg: \"?([A-Z]+) (-?\d+)", proc.stdout))


def test_the_count_starts_at_the_read_and_grows_with_each_changed_result(play):
    assert run(play) == {"BEFORE": "-1", "READ": "0", "UNCHANGED": "0", "CHANGED": "2", "FAILED": "3",
                         "AGED": "-1", "REREAD": "0"}


def test_without_the_callback_the_count_is_not_known(play):
    counts = run(play, {"ANSIBLE_CALLBACKS_ENABLED": "mlplatform.gpunode.preload"})
    assert set(counts.values()) == {"-1"}, counts


def test_the_repository_ansible_cfg_and_every_molecule_scenario_enable_it():
    assert "mlplatform.gpunode.changes_since_read" in (REPO / "ansible.cfg").read_text()
    for scenario in sorted((REPO / "molecule").glob("*/molecule.yml")):
        text = scenario.read_text()
        if "callbacks_enabled" in text:
            assert "mlplatform.gpunode.changes_since_read" in text, scenario


def test_the_lookup_names_a_bad_host_argument():
    from ansible.errors import AnsibleError
    from ansible_collections.mlplatform.gpunode.plugins.lookup.changes_since_read import LookupModule

    with pytest.raises(AnsibleError, match="give inventory host names"):
        LookupModule().run([""], variables={})


def test_the_count_is_the_same_when_a_forked_worker_runs_the_lookup(play):
    """Under ansible.builtin.linear every line runs in a worker forked after the results before it were counted."""
    assert run(play, {"ANSIBLE_STRATEGY": "linear"}) == {"BEFORE": "-1", "READ": "0", "UNCHANGED": "0",
                                                         "CHANGED": "2", "FAILED": "3", "AGED": "-1", "REREAD": "0"}


def test_a_read_older_than_max_age_is_not_known_and_a_new_read_starts_again():
    from ansible_collections.mlplatform.gpunode.plugins.plugin_utils import changes_since_read as counts

    counts.reset()
    try:
        assert counts.since_read("h1") == -1  # the callback is not loaded
        counts.enable()
        counts.record("h1", counts.READ_ACTION, changed=False, read_ok=True, now=100.0)
        counts.record("h1", "ansible.builtin.set_fact", changed=False)
        assert counts.since_read("h1", max_age=300, now=400.0) == 0
        assert counts.since_read("h1", max_age=300, now=400.5) == -1
        assert counts.since_read("h1", now=10_000.0) == 0  # no max_age: any age
        counts.record("h1", "ansible.builtin.command", changed=True)
        assert counts.since_read("h1", max_age=300, now=101.0) == 1
        counts.record("h1", counts.READ_ACTION, changed=False, read_ok=True, now=500.0)
        assert counts.since_read("h1", max_age=300, now=600.0) == 0
        assert counts.since_read("h2", max_age=300, now=600.0) == -1  # never read
    finally:
        counts.reset()

