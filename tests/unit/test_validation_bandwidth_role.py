"""The validation role's bandwidth stage run by ansible-playbook on three local-connection hosts:
the schedule is computed once, each phase starts its servers and then runs its clients, and the
judge gets every host's results. Without perftest on the hosts every server reports that it did not
run: a harness error, which blames no host, and the pairs say so."""

from __future__ import annotations

import json
import sys

import pytest
from local_play import run_play  # tests/unit is on sys.path (rootdir-relative import mode)

PLAY = """---
- name: Measure bandwidth between the hosts
  hosts: gpu_nodes
  gather_facts: false
  environment:
    PATH: /usr/bin:/bin  # no perftest on these hosts
  tasks:
    - name: Include the bandwidth stage
      ansible.builtin.include_role:
        name: mlplatform.gpunode.validation
        tasks_from: bandwidth
    - name: Write what the stage decided
      ansible.builtin.copy:
        content: "{{ {'schedule': __validation_plan['schedule'], 'pairs': __validation_pairs} | to_json }}"
        dest: "{{ out }}"
        mode: "0644"
      run_once: true
      delegate_to: localhost
"""


def _hw(platform, rails=2):
    return {"platform": {"vendor": "NVIDIA", "product": platform},
            "rails": [{"rail": r, "rdma_device": f"mlx5_{r}", "pci_address": f"0000:{r + 16:02x}:00.0",
                       "netdev": f"eth{r}", "speed_gbps": 400} for r in range(rails)]}


@pytest.mark.parametrize("forks", [2, 3], ids=["two-waves", "phase-at-once"])
def test_bandwidth_stage_runs_the_schedule_and_a_missing_tool_is_a_harness_error(tmp_path, forks):
    """forks 2: the servers of the three hosts start first, then the clients run in two waves. forks 3: the phase
    runs at once, each host starting its servers and running its clients in one call. The judge is the same."""
    out = tmp_path / "bandwidth.json"
    hosts = {"dgx-a": {"gpunode_hw": _hw("DGXH100")}, "hgx-a": {"gpunode_hw": _hw("HGX")},
             "hgx-b": {"gpunode_hw": _hw("HGX")}}
    inventory = {"all": {"children": {"gpu_nodes": {"hosts": hosts}}, "vars": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "validation_bandwidth_address": "127.0.0.1", "validation_bandwidth_forks": forks, "out": str(out)}}}
    proc = run_play(tmp_path, inventory, PLAY)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(out.read_text())
    schedule, pairs = result["schedule"], result["pairs"]
    # ring of platform blocks: DGX, then HGX; one phase: two waves of two clients, or one of three at once
    assert [(t["server"], t["client"]) for t in schedule["tests"][::2]] == [
        ("dgx-a", "hgx-a"), ("hgx-a", "hgx-b"), ("hgx-b", "dgx-a")]
    assert schedule["max_fan_in"] == 1 and len(schedule["phases"]) == 1
    assert sorted({t["wave"] for t in schedule["tests"]}) == ([0, 1] if forks == 2 else [0])
    assert schedule["phases"][0]["together"] is (forks == 3)
    # one address for the three hosts: distinct ports
    assert sorted(t["port"] for t in schedule["tests"]) == list(range(18515, 18521))
    for host in hosts:
        entries = pairs[host]
        assert len(entries) == 4  # two rails, as server and as client
        # The test tool missing is the harness's failure, not a measurement of the rail: no host is blamed.
        assert all(p["status"] == "harness_error" for p in entries), entries
        assert not any(p["blamed"] for p in entries), entries
        assert all(p["failed_side"] == "harness" for p in entries)
        assert all("the server did not run: perftest is not installed" in p["reason"] for p in entries)
