"""The validation role's node stage on this run's host read (roles/validation/tasks/node.yml): a host that nothing
changed since its read is judged on the read, with no read-back; a host rebooted in this run, a read older than
validation_host_read_max_age, and a host that does not pass on the read are read back (node_validation), and the
gate takes the read-back.

One simulated 2-rail host (its state directory on the controller, the simulated vendor tools on PATH), reached with
the local connection: the host_state read, then the role's node stage, as site.yml runs them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.mlplatform.gpunode.plugins.module_utils.intent import resolve_fleet
from local_play import fabric
from simhost import day_two_host, tool_bin  # tests/unit is on sys.path (rootdir-relative import mode)

from gpunode.sim import hwstate
from gpunode.sim.tools.state import HostState

pytestmark = pytest.mark.slow  # ansible-playbook runs on a materialized host (README: slow tests)

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = str(Path(sys.executable).with_name("ansible-playbook"))
DRIVER = "570.172.08"
TOOLS = ("nvidia-smi", "mlxconfig", "mlxreg", "mlnx_qos", "cma_roce_tos")

PLAY = """\
- name: Read the host, then judge it as the validation role does
  hosts: all
  gather_facts: false
  environment: "{{ sim_env }}"
  tasks:
    - name: Resolve the fabric intent the validation judges against
      mlplatform.gpunode.fabric_intent:
      register: gpunode_intent
      run_once: true

    - name: Read the host once
      mlplatform.gpunode.host_state:
        sysfs_root: "{{ tree }}/sys"
        root: "{{ tree }}/root"
        neighbours: false
        files: []
        units: []
        result_files: "{{ results }}"
      register: read

    - name: Publish the read as the discovery role does
      ansible.builtin.set_fact:
        gpunode_host_state: "{{ read['host_state'] }}"
        gpunode_hw: "{{ hw }}"

    - name: Something that changes on its own between the read and the validation (changes no task result)
      ansible.builtin.command:
        argv: "{{ between }}"
      changed_when: false
      when: between | length > 0

    - name: The node stage of the validation role
      ansible.builtin.include_role:
        name: mlplatform.gpunode.validation
        tasks_from: node
        public: true  # the role's vars (__validation_node_result, what the gate takes) after the include

    - name: Say which way the host was judged
      ansible.builtin.debug:
        msg: >-
          JUDGED read_back={{ __validation_node_live is not skipped }}
          passed={{ __validation_node_result['passed'] }}
          from_read={{ __validation_node_result['from_read'] | default(false) }}
          failures={{ __validation_node_result['failures'] | to_json }}
"""


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    root = tmp_path_factory.mktemp("judge")
    declared = fabric(link_speed_gbps=400, nics={"compute": {"adaptive_routing": True}})
    intent = resolve_fleet({"jr1": declared})["fabrics"]["default"]
    hdir, hw = day_two_host(root / "state", profile="pcie-h100-2rail", driver=DRIVER, intent=intent)
    HostState(hdir).load_module("nvidia_peermem", DRIVER)
    (hdir / "root").mkdir(exist_ok=True)
    results = root / "results"
    results.mkdir()
    (results / "reboot.json").write_text('{"required": false}\n')
    userspace = root / "nvml-version"
    userspace.write_text(f"{DRIVER}\n")
    bindir = tool_bin(root / "bin", TOOLS)
    sim_env = {"PATH": f"{bindir}:{os.environ['PATH']}", "GPUNODE_SIM_STATE": str(hdir),
               "GPUNODE_SIM_NVIDIA_USERSPACE": str(userspace), "PYTHONPATH": str(REPO / "src")}
    host_vars = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, "tree": str(hdir),
                 "results": str(results), "hw": hw, "sim_env": sim_env, "between": [],
                 "validation_sysfs_root": str(hdir / "sys"), "validation_results_dir": str(results),
                 "validation_driver_version": DRIVER, **declared}
    (root / "hosts.yml").write_text(json.dumps({"all": {"hosts": {"jr1": host_vars}}}))
    (root / "play.yml").write_text(PLAY)
    return {"root": root, "dir": hdir, "hw": hw}


def judge(host, **extra):
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
           "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".cache" / "collections"), "ANSIBLE_NOCOLOR": "1"}
    proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(host["root"] / "hosts.yml"), str(host["root"] / "play.yml"),
                           "-e", json.dumps(extra)], capture_output=True, text=True, check=False, timeout=300,
                          env=env, cwd=host["root"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = re.search(r"JUDGED read_back=(\w+) passed=(\w+) from_read=(\w+) failures=(\[.*?\])", proc.stdout, re.S)
    assert found, proc.stdout
    return {"read_back": found[1] == "True", "passed": found[2] == "True", "from_read": found[3] == "True",
            "failures": json.loads(found[4].replace("\n", " "))}


def test_a_host_nothing_changed_since_its_read_is_judged_on_the_read_without_a_read_back(host):
    assert judge(host) == {"read_back": False, "passed": True, "from_read": True, "failures": []}


@pytest.mark.parametrize("extra", [{"node_reboot_done": True}, {"validation_host_read_max_age": 0},
                                   {"validation_reuse_host_read": False}],
                         ids=["rebooted-in-this-run", "read-too-old", "reuse-off"])
def test_a_rebooted_host_an_old_read_or_reuse_off_is_read_back(host, extra):
    assert judge(host, **extra) == {"read_back": True, "passed": True, "from_read": False, "failures": []}


def test_a_host_that_fails_on_the_read_is_read_back_and_judged_as_it_is_now(host):
    """A rail link down when the host was read and up again by validation time (a link still training after a
    reboot): the read alone would fail the host; the read-back passes it. A link that stays down still fails it,
    on the read-back, with the rail named."""
    rail = host["hw"]["rails"][1]
    hwstate.set_fault(host["dir"], "link_down", rail["pci_address"])
    try:
        clear = [sys.executable, "-c", "import sys; from gpunode.sim import hwstate; from pathlib import Path; "
                 "hwstate.set_fault(Path(sys.argv[1]), 'link_down', sys.argv[2], clear=True)",
                 str(host["dir"]), rail["pci_address"]]
        assert judge(host, between=clear) == {"read_back": True, "passed": True, "from_read": False, "failures": []}
        hwstate.set_fault(host["dir"], "link_down", rail["pci_address"])
        down = judge(host)
        assert (down["read_back"], down["passed"], down["from_read"]) == (True, False, False)
        assert len(down["failures"]) == 1 and rail["pci_address"] in down["failures"][0], down["failures"]
    finally:
        hwstate.set_fault(host["dir"], "link_down", rail["pci_address"], clear=True)
    assert judge(host)["from_read"] is True
