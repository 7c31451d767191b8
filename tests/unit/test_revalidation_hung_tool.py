"""A hung nvidia-smi on one host does not stop the health check or the read-back of the others: node_health and
node_validation in a play over two simulated HGX H100 hosts, one of them with an nvidia-smi that never answers. The
play ends, both hosts report, the hung tool is a condition (node_health) and the failed GPU checks (node_validation)
naming it on its host, and the other host is healthy and passes."""

from __future__ import annotations

import base64
import json
import re
import sys
import time

from local_play import run_play
from simhost import day_two_host, tool_bin

PLAY = """---
- name: Check the health of every host
  hosts: gpu_nodes
  gather_facts: false
  environment:
    PATH: "{{ sim_path }}"
    GPUNODE_SIM_STATE: "{{ sim_dir }}"
    GPUNODE_SIM_NVIDIA_USERSPACE: "{{ sim_dir }}/no-userspace-file"
  tasks:
    - name: Read the node once
      mlplatform.gpunode.node_health:
        sysfs_root: "{{ sim_dir }}/sys"
        proc_root: "{{ sim_dir }}/run/proc"
        hw: "{{ sim_hw }}"
        timeout: 2
      register: health

    - name: Read the node back as validation does
      mlplatform.gpunode.node_validation:
        sysfs_root: "{{ sim_dir }}/sys"
        hw: "{{ sim_hw }}"
        timeout: 2
      register: readback

    - name: Show the conditions
      ansible.builtin.debug:
        msg: "HEALTH {{ inventory_hostname }} {{ health.conditions | to_json | b64encode }}"

    - name: Show the failed checks
      ansible.builtin.debug:
        msg: "FAILED {{ inventory_hostname }} {{ failed | to_json | b64encode }}"
      vars:
        failed: "{{ readback.checks | selectattr('status', 'equalto', 'fail') | list }}"
"""


def test_a_hung_nvidia_smi_on_one_host_does_not_stop_the_others(tmp_path):
    hosts = {}
    for name in ("hung", "fine"):
        bindir = tool_bin(tmp_path / name / "bin", ("nvidia-smi", "dmesg", "mlxreg", "mlnx_qos"))
        hdir, hw = day_two_host(tmp_path / name / "host", "hgx-h100")
        path = f"{bindir}:/usr/bin:/bin"
        if name == "hung":
            faulty = tmp_path / name / "faulty"
            faulty.mkdir()
            (faulty / "nvidia-smi").write_text("#!/bin/sh\nexec sleep 300\n")
            (faulty / "nvidia-smi").chmod(0o755)
            path = f"{faulty}:{path}"
        hosts[name] = {"sim_dir": str(hdir), "sim_hw": hw, "sim_path": path}
    inventory = {"all": {"children": {"gpu_nodes": {"hosts": hosts}}, "vars": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}
    start = time.monotonic()
    proc = run_play(tmp_path, inventory, PLAY)
    took = time.monotonic() - start
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert took < 120, took
    found = {m.group(1): json.loads(base64.b64decode(m.group(2))) for m in re.finditer(r"HEALTH (\S+) (\S+)", out)}
    failed = {m.group(1): json.loads(base64.b64decode(m.group(2))) for m in re.finditer(r"FAILED (\S+) (\S+)", out)}
    assert [(c["type"], c["reason"], c["device"]) for c in found["hung"]] == [
        ("GPUDriverUnavailable", "NvidiaSmiTimedOut", "nvidia-smi")]
    assert "nvidia-smi timed out after 2 s" in found["hung"][0]["message"]
    assert found["fine"] == []
    # The read-back: the GPU checks that need nvidia-smi fail on the hung host, naming the tool and the timeout;
    # the other host's GPU checks pass (nvidia-smi answered).
    gpu_checks = ["driver_version", "gpu_count", "gpu_product", "persistence"]
    hung = [c for c in failed["hung"] if c["check"] in gpu_checks]
    assert sorted(c["check"] for c in hung) == gpu_checks
    assert all("nvidia-smi timed out after 2 s" in c["reason"] for c in hung), hung
    assert [c["check"] for c in failed["fine"] if c["check"] in gpu_checks] == []
