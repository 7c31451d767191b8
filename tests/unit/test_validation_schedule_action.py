"""The validation_schedule action plugin, run with ansible-playbook on local hosts with published facts:
the schedule it returns, and every bad input refused with the host, the variable or the option named."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = str(Path(sys.executable).with_name("ansible-playbook"))


def _hw(product, rails=2):
    return {"platform": {"vendor": "NVIDIA", "product": product},
            "rails": [{"rail": r, "rdma_device": f"mlx5_{r}", "pci_address": f"0000:{r + 16:02x}:00.0",
                       "netdev": f"eth{r}", "speed_gbps": 400 if r else 200} for r in range(rails)]}


CASES = {
    "ok": {"forks": 2},
    "unknown_option": {"forkz": 2},
    "forks_zero": {"forks": 0},
    "port_not_int": {"base_port": "high"},
    "port_overflow": {"base_port": 65535},
    "no_hw": {"hosts": ["dgx-a", "bare"]},
    "no_address": {"hosts": ["dgx-a", "hgx-a", "noaddr"]},
}


def test_schedule_and_bad_inputs(tmp_path):
    hosts = {
        "dgx-a": {"gpunode_hw": _hw("DGXH100"), "__validation_address": "10.0.0.1", "gpunode_fabric": "f1"},
        "hgx-a": {"gpunode_hw": _hw("HGX"), "__validation_address": "10.0.0.2", "gpunode_fabric": "f1"},
        "hgx-b": {"gpunode_hw": _hw("HGX", 1), "__validation_address": "10.0.0.3", "gpunode_fabric": "f1"},
        "alone": {"gpunode_hw": _hw("HGX"), "__validation_address": "10.0.0.4", "gpunode_fabric": "f2"},
        "bare": {},
        "noaddr": {"gpunode_hw": _hw("HGX"), "gpunode_fabric": "f1"},
    }
    inventory = {"all": {"children": {"gpu_nodes": {"hosts": hosts}}, "vars": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}
    tasks = []
    for name, args in CASES.items():
        args = {"hosts": ["dgx-a", "hgx-a", "hgx-b", "alone"], **args}
        tasks.append({"name": f"Case {name}", "mlplatform.gpunode.validation_schedule": args,
                      "register": f"case_{name}", "ignore_errors": True, "run_once": True})
    out = tmp_path / "cases.json"
    tasks.append({"name": "Write the results", "run_once": True, "ansible.builtin.copy": {
        "content": "{{ {" + ", ".join(f"'{n}': case_{n}" for n in CASES) + "} | to_json }}",
        "dest": str(out), "mode": "0644"}})
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "play.yml").write_text(yaml.safe_dump(
        [{"name": "Schedule", "hosts": "dgx-a", "gather_facts": False, "tasks": tasks}], sort_keys=False))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
           "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".cache" / "collections"), "ANSIBLE_NOCOLOR": "1"}
    proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml")],
                          capture_output=True, text=True, env=env, check=False, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads(out.read_text())

    ok = results["ok"]
    assert not ok["failed"] and ok["changed"] is False
    schedule = ok["schedule"]
    # a ring in fabric f1 (DGX block, then HGX), the f2 host alone and untested
    assert sorted({(t["server"], t["client"]) for t in schedule["tests"]}) == [
        ("dgx-a", "hgx-a"), ("hgx-a", "hgx-b"), ("hgx-b", "dgx-a")]
    assert schedule["untested"] == {"alone": "alone in fabric f2: no peer to test against"}
    # hgx-b has one rail: its tests use rail 0 only, at the slower side's line rate
    assert [(t["rail"], t["line_rate_gbps"]) for t in schedule["tests"] if "hgx-b" in (t["server"], t["client"])] \
        == [(0, 200), (0, 200)]
    assert schedule["max_fan_in"] == 1 and schedule["port_range"] == [18515, 18516]
    assert sorted({t["wave"] for t in schedule["tests"]}) == [0, 1]  # three clients, forks 2
    # lifetime: 2 server batches of 30 s, then hgx-a (wave 0) runs its 2 tests of 60 s
    server = schedule["phases"][0]["servers"]["dgx-a"]
    assert server == [{"id": "dgx-a:0-hgx-a:0", "device": "mlx5_0", "port": 18515, "lifetime": 120},
                      {"id": "dgx-a:1-hgx-a:1", "device": "mlx5_1", "port": 18516, "lifetime": 180}]
    assert schedule["phases"][0]["clients"]["hgx-a"][0]["peer"] == "dgx-a"
    assert ok["addresses"] == {"dgx-a": "10.0.0.1", "hgx-a": "10.0.0.2", "hgx-b": "10.0.0.3", "alone": "10.0.0.4"}

    def refused(name):
        assert results[name]["failed"], results[name]
        assert "schedule" not in results[name]
        return results[name]["msg"]

    assert refused("unknown_option") == "Invalid options for mlplatform.gpunode.validation_schedule: forkz"
    assert refused("forks_zero") == "validation_schedule: forks 0 is out of range 1-10000"
    assert refused("port_not_int") == "validation_schedule: base_port must be an integer, got 'high'"
    assert "needs ports up to 65536, above 65535" in refused("port_overflow")
    assert refused("no_hw") == ("validation_schedule: bare: gpunode_hw is not a discovery result with rails "
                                "(run the discovery role first)")
    assert refused("no_address") == ("validation_schedule: no __validation_address for server host(s) noaddr; "
                                     "clients could not reach them")
