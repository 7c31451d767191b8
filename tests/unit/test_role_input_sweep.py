"""Bad-input sweep of the roles (issue 16), past the wrong types and typos test_bad_input_sweep.py feeds
through the roles' argument specs: out-of-range values, contradictions, keys that match nothing, values
outside their choices and missing inputs, each given to the role's own checks in one ansible-playbook run.

Each case runs the role's check tasks (the role's preflight, after the task files it depends on) on a
local host holding a simulated DGX H100's discovery result, in a block whose rescue records the
message. Every case must fail with a message naming the variable (and the host), and the run must change
nothing: the play recap counts 0 changed and the results directories stay empty. The counters are the
acceptance figures: 0 half-applied, 0 accepted in silence."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from local_play import fabric

sim_profile = pytest.importorskip("gpunode.sim.profile")
sim_sysfs = pytest.importorskip("gpunode.sim.sysfs")

from ansible_collections.mlplatform.gpunode.plugins.module_utils.nic_roles import classify  # noqa: E402 - after the importorskip of the simulator above
from ansible_collections.mlplatform.gpunode.plugins.module_utils.pci_sysfs import read_sysfs  # noqa: E402 - after the importorskip of the simulator above

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = str(Path(sys.executable).with_name("ansible-playbook"))
HOST = "sweep-dgx"
JOIN = {"kubernetes_node_api_server": "https://10.0.0.1:6443", "kubernetes_node_join_token": "abcdef.0123456789abcdef"}
SRIOV = ["set_vars", "preflight"]

# (id, role, task files in order, variables, kind, what the message must say)
CASES = [
    ("discovery-override-key", "discovery", ["main"],
     {"discovery_nic_overrides": {"29:00.0": {"role": "storage"}}}, "unknown key", "must map full lower-case"),
    ("discovery-override-role", "discovery", ["main"],
     {"discovery_nic_overrides": {"0000:29:00.0": {"role": "compte"}}}, "choices", "{role: compute|storage"),
    ("ofed-mirror", "ofed", ["main"], {"ofed_mirror_url": "ftp://mirror.example/doca"}, "out of range",
     "URL in ofed_mirror_url (got ftp://mirror.example/doca)"),
    ("ofed-pins", "ofed", ["main"], {"ofed_pinned_packages": ["mlnx-tools"]}, "contradiction",
     "doca-ofed in ofed_pinned_packages"),
    ("gpu_driver-version", "gpu_driver", ["main"], {"gpu_driver_version": "560.35.03"}, "contradiction",
     "a gpu_driver_version of that branch"),
    ("gpu_driver-fm-choice", "gpu_driver", ["main"], {"gpu_driver_fabricmanager": "sometimes"}, "choices",
     "auto/true/false in gpu_driver_fabricmanager"),
    ("gpu_driver-fm-version", "gpu_driver", ["preflight"],
     {"gpu_driver_fabricmanager_version": "570.124.06", "gpu_driver_peermem": False}, "contradiction",
     "gpu_driver_fabricmanager_version=570.124.06 differs from gpu_driver_version=570.172.08"),
    ("nic_firmware-override-pci", "nic_firmware", ["preflight"],
     {"nic_firmware_device_overrides": {"0000:99:00.0": {"NUM_OF_VFS": 4}}}, "missing path",
     "nic_firmware_device_overrides names 0000:99:00.0, which is not a Mellanox/NVIDIA NIC function"),
    ("nic_firmware-override-shape", "nic_firmware", ["preflight"],
     {"nic_firmware_device_overrides": {"0000:18:00.0": 4}}, "out of range",
     "expected nic_firmware_device_overrides as {pci_address: {PARAM: value}}"),
    ("sriov-over-firmware", "sriov", SRIOV, {"gpunode_hw": "{{ sweep_hw_totalvfs_4 }}"}, "out of range",
     "gpunode_fabric_settings.nics.compute.num_vfs=8 (fabric sweep) is more than sriov_totalvfs 4"),
    ("cluster_objects-mode", "cluster_objects", ["main"], {"cluster_objects_mode": "dry-run"}, "choices",
     "value of cluster_objects_mode must be one of: apply, render, got: dry-run"),
    ("cluster_objects-rail-cidr", "cluster_objects", ["build"],
     {"cluster_objects_rail_cidr": "10.220.0.0/33", "cluster_objects_sriov_rails_from_discovery": True},
     "out of range", "cluster_objects_rail_cidr"),
    ("validation-threshold", "validation", ["main"], {"validation_bandwidth_threshold_pct": 150},
     "out of range", "validation_bandwidth_threshold_pct in (0, 100] (got 150)"),
    ("node_reboot-strategy", "node_reboot", ["main"], {"node_reboot_strategy": "sometimes"}, "choices",
     "value of node_reboot_strategy must be one of: reboot, power_cycle, defer, got: sometimes"),
    ("node_reboot-power-cycle", "node_reboot", ["main"],
     {"node_reboot_strategy": "power_cycle", "node_reboot_power_cycle_command": []}, "contradiction",
     "power_cycle needs gpunode_power_cycle_command as an argv list"),
    ("node_reboot-attempts", "node_reboot", ["main"], {"node_reboot_max_attempts": 0}, "out of range",
     "node_reboot_max_attempts must be 1 or more (got 0)"),
    ("kubernetes_node-no-cluster", "kubernetes_node", ["main"], {}, "missing path",
     "set kubernetes_node_api_server"),
    ("kubernetes_node-label-domain", "kubernetes_node", ["preflight"],
     {**JOIN, "kubernetes_node_label_domain": "gpu.kubernetes.io"}, "out of range", "kubernetes_node_label_domain"),
    ("kubernetes_node-hostname-label", "kubernetes_node", ["preflight"],
     {**JOIN, "kubernetes_node_labels": {"kubernetes.io/hostname": "other"}}, "contradiction",
     "kubernetes.io/hostname"),
    ("node_problem_detector-part", "node_problem_detector", ["main"], {"node_problem_detector_checks": ["gpu", "nvme"]},
     "choices", "value of node_problem_detector_checks must be one or more of: gpu, xid"),
]
RESULTS_DIRS = ("discovery_results_dir", "nic_firmware_results_dir", "node_reboot_results_dir",
                "validation_results_dir")


def _dgx_hw():
    with tempfile.TemporaryDirectory() as tmp:
        sim_sysfs.materialize(sim_profile.load_profile("dgx-h100"), Path(tmp))
        hw = classify(read_sysfs(tmp))
    hw["fabric_manager_required"] = bool(hw["nvswitches"])
    for nic in hw["nics"]:  # what sriov's set_vars reads: the firmware's VF limit of each PF
        nic.setdefault("sriov_totalvfs", 16)
    return hw


def _block(name, role, files, variables):
    tasks = [{"name": f"{name}: {role} {task_file}", "ansible.builtin.include_role": {
        "name": f"mlplatform.gpunode.{role}", "tasks_from": task_file}, "vars": variables} for task_file in files]
    tasks.append({"name": f"{name}: accepted", "ansible.builtin.set_fact": {
        "sweep": f"{{{{ sweep | combine({{'{name}': 'ACCEPTED'}}) }}}}"}})
    return {"name": name, "block": tasks, "rescue": [{"name": f"{name}: refused", "ansible.builtin.set_fact": {
        "sweep": f"{{{{ sweep | combine({{'{name}': ansible_failed_result.msg | default('no message')}}) }}}}"}}]}


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("role-sweep")
    results = tmp / "results"
    results.mkdir()
    out = tmp / "sweep.json"
    hw = _dgx_hw()
    # The fabric's declaration (its own checks: tests/unit/test_fabric_intent.py); a board whose firmware allows 4 VFs.
    low = {**hw, "nics": [{**nic, "sriov_totalvfs": 4} for nic in hw["nics"]]}
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, "gpunode_hw": hw,
            "sweep_hw_totalvfs_4": low, **fabric("sweep"), **{var: str(results / var) for var in RESULTS_DIRS}}
    (tmp / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {HOST: host}}}}}))
    tasks = [{"name": "Start the record", "ansible.builtin.set_fact": {"sweep": {}}}]
    tasks += [_block(name, role, files, variables) for name, role, files, variables, _kind, _needle in CASES]
    record = [{"name": "Write the record", "ansible.builtin.copy": {
        "content": f"{{{{ hostvars['{HOST}']['sweep'] | to_json }}}}", "dest": str(out), "mode": "0644"},
        "check_mode": False}]
    # check mode: a check that let a bad value through could not change this machine
    (tmp / "play.yml").write_text(yaml.safe_dump(
        [{"name": "Sweep", "hosts": "gpu_nodes", "gather_facts": False, "tasks": tasks},
         {"name": "Record", "hosts": "localhost", "gather_facts": False, "tasks": record}], sort_keys=False))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".cache" / "collections")}
    proc = subprocess.run([ANSIBLE_PLAYBOOK, "--check", "-i", str(tmp / "hosts.yml"), str(tmp / "play.yml")],
                          capture_output=True, text=True, env=env, check=False, timeout=600)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-3000:]
    recap = re.search(rf"^{re.escape(HOST)}\s+:.*$", proc.stdout, re.M)
    return {"messages": json.loads(out.read_text()), "recap": recap.group(0) if recap else "",
            "results": sorted(str(p.relative_to(results)) for p in results.rglob("*"))}


@pytest.mark.parametrize(("name", "kind", "needle"), [(c[0], c[4], c[5]) for c in CASES], ids=[c[0] for c in CASES])
def test_role_bad_input_is_a_clear_error(swept, name, kind, needle):
    msg = swept["messages"][name]
    assert msg != "ACCEPTED", f"{kind}: accepted in silence"
    assert needle in msg, msg
    # run_once checks speak of the play, not a host; Ansible's own argument validation at role start is
    # printed under ``fatal: [host]``
    fleet_level = ("cluster_objects_",)
    assert HOST in msg or any(m in msg for m in fleet_level) or msg.startswith("Validation of arguments failed"), msg


def test_role_sweep_changed_nothing(swept):
    """0 half-applied: no task of the sweep reported a change, and no result file was written."""
    assert " changed=0 " in swept["recap"], swept["recap"]
    assert swept["results"] == []
    accepted = [name for name, msg in swept["messages"].items() if msg == "ACCEPTED"]
    assert accepted == []  # 0 accepted in silence
    assert len(swept["messages"]) == len(CASES)
