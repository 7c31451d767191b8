"""The fleet_contract action plugin, run with ansible-playbook on local hosts with published contracts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = str(Path(sys.executable).with_name("ansible-playbook"))


def entries(ar, rails=("0000:18:00.0", "0000:40:00.0")):
    rows = [{"scope": "rail", "rail": i, "pci_address": pci, "netdev": f"eth{i}",
             "setting": "roce_accl.adaptive_routing_forced_en", "value": ar} for i, pci in enumerate(rails)]
    return rows + [{"scope": "host", "rail": None, "pci_address": None, "netdev": None, "setting": "rail_count",
                    "value": len(rails)}]


def play(tmp_path, contracts, fabrics=None):
    """``fabrics``: host -> (fabric name, its compute rails' adaptive routing); others are in fabric default (off)."""
    hosts = ""
    for name, contract in contracts.items():
        fabric, accl = (fabrics or {}).get(name, ("default", False))
        settings = {"transport": "roce", "nics": {"compute": {"adaptive_routing": accl}}}
        hosts += (f"        {name}:\n          ansible_connection: local\n"
                  f"          ansible_python_interpreter: {sys.executable}\n"
                  f"          nic_firmware_contract: {json.dumps(contract)}\n"
                  f"          gpunode_fabric: {fabric}\n          gpunode_fabric_settings: {json.dumps(settings)}\n")
    (tmp_path / "hosts.yml").write_text("all:\n  children:\n    gpu_nodes:\n      hosts:\n" + hosts)
    (tmp_path / "play.yml").write_text(
        "- name: Check\n  hosts: gpu_nodes\n  gather_facts: false\n  tasks:\n"
        "    - name: Compare the fleet\n      mlplatform.gpunode.fleet_contract:\n"
        f"        output: {tmp_path / 'out' / 'contract.json'}\n      run_once: true\n")
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
           "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".cache" / "collections"), "ANSIBLE_NOCOLOR": "1"}
    return subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml")],
                          capture_output=True, text=True, env=env, check=False, timeout=300)


def test_contract_holds_and_writes_json(tmp_path):
    proc = play(tmp_path, {"dgx01": entries(0), "hgx01": entries(0)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "out" / "contract.json").read_text())
    assert report["ok"] is True
    assert report["fabrics"]["default"]["expected"] == {"roce_accl.adaptive_routing_forced_en": 0, "rail_count": 2}


def test_drift_fails_naming_host_device_setting(tmp_path):
    proc = play(tmp_path, {"dgx01": entries(0), "dgx02": entries(0), "hgx01": entries(1, ("0000:1a:00.0",))})
    assert proc.returncode != 0
    out = proc.stdout
    assert "fleet contract broken" in out
    assert "hgx01  0     0000:1a:00.0  eth0    roce_accl.adaptive_routing_forced_en  0 (declared)  1" in out
    assert "hgx01  -     -             -       rail_count                            2             1" in out
    report = json.loads((tmp_path / "out" / "contract.json").read_text())
    assert report["ok"] is False
    assert {(r["host"], r["setting"]) for r in report["drift"]} == {
        ("hgx01", "roce_accl.adaptive_routing_forced_en"), ("hgx01", "rail_count")}


def test_different_fabrics_do_not_compare(tmp_path):
    proc = play(tmp_path, {"dgx01": entries(0), "hgx01": entries(1)}, fabrics={"hgx01": ("spectrum-x", True)})
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_hosts_that_agree_on_what_the_fabric_does_not_declare_break_the_contract(tmp_path):
    """The declaration, not the majority, says what a fabric's hosts must run: both hosts forcing adaptive routing
    on a fabric that declares it off is drift on every rail, marked as declared."""
    proc = play(tmp_path, {"dgx01": entries(1), "hgx01": entries(1)})
    assert proc.returncode != 0
    assert "dgx01  0     0000:18:00.0  eth0    roce_accl.adaptive_routing_forced_en  0 (declared)  1" in proc.stdout
    report = json.loads((tmp_path / "out" / "contract.json").read_text())
    assert report["fabrics"]["default"]["expected"]["roce_accl.adaptive_routing_forced_en"] == 0
    assert len(report["drift"]) == 4 and all(r["declared"] for r in report["drift"])
    # Declared on, the same hosts hold the contract.
    proc = play(tmp_path, {"dgx01": entries(1), "hgx01": entries(1)},
                fabrics={"dgx01": ("default", True), "hgx01": ("default", True)})
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_host_in_no_fabric_stops_the_contract_naming_it(tmp_path):
    inventory = tmp_path / "hosts.yml"
    proc = play(tmp_path, {"dgx01": entries(0)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    inventory.write_text(inventory.read_text().replace("gpunode_fabric: default", "gpunode_fabric: ''"))
    proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(inventory), str(tmp_path / "play.yml")], capture_output=True,
                          text=True, env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
                                          "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".cache" / "collections")},
                          check=False, timeout=300)
    assert proc.returncode != 0
    assert "dgx01: GPU node in no fabric: gpunode_fabric is not set" in " ".join(proc.stdout.split())
