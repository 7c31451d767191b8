"""A hung nvidia-smi on one host does not stop the health check of the others: node_health in a play over two
simulated HGX H100 hosts, one of them with an nvidia-smi that never answers. The play ends, both hosts report, the
hung tool is a condition naming it on its host, and the other host is healthy."""

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
  tasks:
    - name: Read the node once
      mlplatform.gpunode.node_health:
        sysfs_root: "{{ sim_dir }}/sys"
        proc_root: "{{ sim_dir }}/run/proc"
        hw: "{{ sim_hw }}"
        timeout: 2
      environment:
        PATH: "{{ sim_path }}"
        GPUNODE_SIM_STATE: "{{ sim_dir }}"
        GPUNODE_SIM_NVIDIA_USERSPACE: "{{ sim_dir }}/no-userspace-file"
      register: health

    - name: Show the conditions
      ansible.builtin.debug:
        msg: "HEALTH {{ inventory_hostname }} {{ health.conditions | to_json | b64encode }}"
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
    assert [(c["type"], c["reason"], c["device"]) for c in found["hung"]] == [
        ("GPUDriverUnavailable", "NvidiaSmiTimedOut", "nvidia-smi")]
    assert "nvidia-smi timed out after 2 s" in found["hung"][0]["message"]
    assert found["fine"] == []
