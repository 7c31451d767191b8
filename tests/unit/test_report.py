"""``gpunode report`` on a realistic DGX H100 + HGX H100 fleet: the hardware comes from the
simulator's profiles through the real discovery code (materialize -> read_sysfs -> classify), the
contracts and validation results have the shapes the roles publish."""

from __future__ import annotations

import copy
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml
from ansible_collections.mlplatform.gpunode.plugins.module_utils.nic_roles import classify
from ansible_collections.mlplatform.gpunode.plugins.module_utils.pci_sysfs import read_sysfs

from gpunode.cli import main
from gpunode.report.model import ReportInputError, build, contract_table, load_inputs
from gpunode.report.render import render, write_report
from gpunode.sim.profile import load_profile
from gpunode.sim.sysfs import materialize


@pytest.fixture(scope="module")
def hw(tmp_path_factory):
    """gpunode_hw of both platforms, as the discovery role publishes it."""
    out = {}
    for name in ("dgx-h100", "hgx-h100"):
        root = tmp_path_factory.mktemp(name)
        materialize(load_profile(name), root)
        result = classify(read_sysfs(root))
        out[name] = {
            "platform": result["platform"], "gpus": result["gpus"], "nvswitches": result["nvswitches"],
            "nics": result["nics"], "rails": result["rails"], "gpus_without_rail": result["gpus_without_rail"],
        }
    return out


def _contracts(hw, accl_by_rail=None, mtu=9000):
    """nic_firmware / roce_qos / gpu_driver contract entries as read back on a converged host."""
    nicfw, qos = [], []
    for rail in hw["rails"]:
        base = {"scope": "rail", "rail": rail["rail"], "pci_address": rail["pci_address"], "netdev": rail["netdev"]}
        nicfw.append({**base, "setting": "LINK_TYPE_P1", "value": "ETH"})
        nicfw.append({**base, "setting": "NUM_OF_VFS", "value": 8})
        accl = (accl_by_rail or {}).get(rail["rail"], 1)
        nicfw.append({**base, "setting": "roce_accl.adaptive_routing_forced_en", "value": accl})
        qos.append({**base, "setting": "mtu", "value": mtu})
        qos.append({**base, "setting": "pfc", "value": [0, 0, 0, 1, 0, 0, 0, 0]})
    nicfw.append({"scope": "host", "rail": None, "pci_address": None, "netdev": None, "setting": "rail_count",
                  "value": len(hw["rails"])})
    driver = [{"scope": "host", "rail": None, "pci_address": None, "netdev": None, "setting": "driver_version",
               "value": "550.90.07"}]
    return {"nic_firmware_contract": nicfw, "roce_qos_contract": qos, "gpu_driver_contract": driver}


REPO = Path(__file__).resolve().parents[2]
FLAVOR = {
    "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
    "metadata": {"name": "h100-80gb-dgx-default"},
    "spec": {"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "gpunode.mlplatform.io/platform": "dgx"},
             "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
}
QUEUE = {
    "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "gpu"},
    "spec": {"resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
        {"name": "h100-80gb-dgx-default", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 8}]}]}]},
}


@pytest.fixture
def fleet_dir(tmp_path, hw):
    """An input directory: DGX fetched files + HGX in fleet.json; the HGX has adaptive routing off
    on rail 2 (the incident) and MTU 1500 everywhere; the DGX failed validation on rail 3."""
    dgx_dir = tmp_path / "hosts" / "dgx01"
    dgx_dir.mkdir(parents=True)
    (dgx_dir / "discovery.json").write_text(json.dumps(hw["dgx-h100"]))
    (dgx_dir / "validation.json").write_text(json.dumps({
        "host": "dgx01", "passed": False,
        "checks": [
            {"check": "gpu_count", "scope": "host", "rail": None, "device": None, "status": "pass",
             "expected": 8, "found": 8, "reason": ""},
            {"check": "link", "scope": "rail", "rail": 3, "device": "0000:5e:00.0", "status": "fail",
             "expected": "ACTIVE 400G", "found": "DOWN", "reason": "rail 3 0000:5e:00.0 (ibp94s0): link DOWN"},
        ],
        "pairs": [{"rail": 0, "peer": "hgx01", "peer_rail": 0, "gbps": 371.2, "line_rate_gbps": 400,
                   "threshold_pct": 90, "status": "pass", "reason": ""}],
        "taint": "kept",
    }))
    hgx = copy.deepcopy(hw["hgx-h100"])
    fleet = {
        "hosts": {
            "dgx01": {"fabric": "default", "contracts": _contracts(hw["dgx-h100"])},
            "hgx01": {"fabric": "default", "hw": hgx, "contracts": _contracts(hgx, accl_by_rail={2: 0}),
                      "validation": {"host": "hgx01", "passed": True, "checks": [], "pairs": [], "taint": "removed"}},
        },
        "kueue": [FLAVOR],
    }
    (tmp_path / "fleet.json").write_text(json.dumps(fleet))
    (tmp_path / "kueue").mkdir()
    (tmp_path / "kueue" / "queues.yaml").write_text(
        "---\n" + json.dumps(QUEUE) + "\n---\n" + json.dumps(FLAVOR) + "\n")
    return tmp_path


def test_load_merges_fetched_files_and_fleet_json(fleet_dir, hw):
    inputs = load_inputs(fleet_dir)
    assert list(inputs["hosts"]) == ["dgx01", "hgx01"]
    assert inputs["hosts"]["dgx01"]["hw"]["platform"] == hw["dgx-h100"]["platform"]
    assert inputs["hosts"]["dgx01"]["validation"]["passed"] is False
    assert inputs["hosts"]["hgx01"]["validation"]["passed"] is True
    assert set(inputs["hosts"]["hgx01"]["contracts"]) == {"nic_firmware_contract", "roce_qos_contract",
                                                         "gpu_driver_contract"}


def test_drift_names_the_hgx_rail_with_adaptive_routing_off(fleet_dir, hw):
    report = build(load_inputs(fleet_dir))
    fabric = report["fabrics"]["default"]
    assert fabric["hosts"] == ["dgx01", "hgx01"]
    rail2 = next(r for r in hw["hgx-h100"]["rails"] if r["rail"] == 2)
    assert fabric["drift"] == [{
        "host": "hgx01", "column": "nic_firmware.roce_accl.adaptive_routing_forced_en", "rail": 2,
        "pci_address": rail2["pci_address"], "netdev": rail2["netdev"], "expected": 1, "found": 0,
    }]
    cell = fabric["cells"]["hgx01"]["nic_firmware.roce_accl.adaptive_routing_forced_en"]
    assert cell["drift"] is True and cell["value"] is None
    assert cell["rails"] == {0: 1, 1: 1, 2: 0, 3: 1, 4: 1, 5: 1, 6: 1, 7: 1}
    # a host whose every rail holds the expected value: one shared cell, the value and no drift
    assert fabric["cells"]["dgx01"]["nic_firmware.roce_accl.adaptive_routing_forced_en"] == {
        "value": 1, "drift": False, "missing": False}
    assert fabric["expected"]["nic_firmware.roce_accl.adaptive_routing_forced_en"] == 1
    assert fabric["cells"]["dgx01"]["nic_firmware.rail_count"]["value"] == 8
    assert fabric["cells"]["hgx01"]["roce_qos.pfc"]["value"] == [0, 0, 0, 1, 0, 0, 0, 0]
    assert report["summary"] == {"hosts": 2, "passed": 1, "failed": 1, "not_validated": 0, "drift": 1,
                                 "drift_settings": 1, "drift_hosts": 1}
    # drift first: grouped by setting, then host, with the devices that differ
    assert report["drift"] == [{
        "fabric": "default", "stage": "nic_firmware", "column": "nic_firmware.roce_accl.adaptive_routing_forced_en",
        "expected": 1, "hosts": [{"host": "hgx01", "devices": [
            {"rail": 2, "pci_address": rail2["pci_address"], "netdev": rail2["netdev"], "found": 0}]}]}]
    assert [h["drift"] for h in report["hosts"]] == [0, 1]
    # settings grouped by stage in the order site.yml runs them
    assert [g["stage"] for g in fabric["stages"]] == ["gpu_driver", "nic_firmware", "roce_qos"]
    assert fabric["stages"][2]["labels"] == ["mtu", "pfc"]


def test_missing_setting_and_separate_fabrics():
    hosts = {
        "a": {"fabric": "f1", "contracts": {"x_contract": [{"scope": "host", "setting": "s", "value": 1}]}},
        "b": {"fabric": "f1", "contracts": {}},
        "c": {"fabric": "f2", "contracts": {"x_contract": [{"scope": "host", "setting": "s", "value": 2}]}},
    }
    table = contract_table(hosts)["fabrics"]
    assert table["f1"]["cells"]["b"]["x.s"]["missing"] is True
    assert [d["host"] for d in table["f1"]["drift"]] == ["b"]
    assert table["f2"]["drift"] == []  # value 2 on f2 is compared only with f2


def test_rail_rows_follow_gpu_order_with_validation(fleet_dir, hw):
    report = build(load_inputs(fleet_dir))
    dgx = next(h for h in report["hosts"] if h["name"] == "dgx01")
    assert dgx["platform"].startswith("NVIDIA")
    assert [r["rail"] for r in dgx["rails"]] == list(range(8))
    # DGX H100 rails: PCI 18, 40, 4f, 5e, 9a, c0, ce, dc; RDMA mlx5_0,3,4,5,6,9,10,11 (hardware-facts.md)
    assert [r["nic"] for r in dgx["rails"]] == [f"0000:{b}:00.0" for b in
                                                ("18", "40", "4f", "5e", "9a", "c0", "ce", "dc")]
    assert [r["rdma_device"] for r in dgx["rails"]] == [f"mlx5_{i}" for i in (0, 3, 4, 5, 6, 9, 10, 11)]
    assert dgx["rails"][3]["status"] == "fail"
    assert dgx["rails"][3]["reasons"] == ["rail 3 0000:5e:00.0 (ibp94s0): link DOWN"]
    assert dgx["rails"][0]["status"] == "pass"
    assert dgx["rails"][1]["status"] == "not validated"
    hgx = next(h for h in report["hosts"] if h["name"] == "hgx01")
    # XE9680: every CX-7 sits on the bus after its GPU (PIX); the CX-6 Dx at 1b/9d is never a rail
    assert all(r["distance"] == "PIX" and r["model"] == "ConnectX-7" for r in hgx["rails"])
    assert not any(r["nic"].startswith(("0000:1b", "0000:9d")) for r in hgx["rails"])
    assert hgx["nvswitches"] == 4 and hgx["gpus"] == 8


class _Cells(HTMLParser):
    """Collect the contract table's <td> cells: (host, setting) -> (classes, text)."""

    def __init__(self):
        super().__init__()
        self.cells, self._current, self.rails = {}, None, []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "td" and "data-setting" in attrs:
            self._current = (attrs["data-host"], attrs["data-setting"])
            self.cells[self._current] = [attrs.get("class") or "", ""]
        if tag == "tr" and "data-rail" in attrs:
            self.rails.append(attrs["data-rail"])

    def handle_endtag(self, tag):
        if tag == "td":
            self._current = None

    def handle_data(self, data):
        if self._current:
            self.cells[self._current][1] += data


def test_html_marks_drift_cells(fleet_dir):
    html = render(build(load_inputs(fleet_dir)))["report.html"]
    parser = _Cells()
    parser.feed(html)
    column = "nic_firmware.roce_accl.adaptive_routing_forced_en"
    assert parser.cells[("hgx01", column)] == ["drift", "r0=1, r1=1, r2=0, r3=1, r4=1, r5=1, r6=1, r7=1expected 1"]
    assert parser.cells[("dgx01", column)] == ["", "1"]
    assert parser.cells[("dgx01", "roce_qos.mtu")] == ["", "9000"]
    assert [c for c, (cls, _) in parser.cells.items() if "drift" in cls] == [("hgx01", column)]
    assert len(parser.rails) == 16  # 8 rails per host
    assert "rail 3 0000:5e:00.0 (ibp94s0): link DOWN" in html
    assert "h100-80gb-dgx-default" in html and "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3" in html


def test_markdown_tables(fleet_dir):
    md = render(build(load_inputs(fleet_dir)))["report.md"]

    def cells_of(line):
        return [c.strip() for c in line.strip().strip("|").split("|")]

    # drift first: one row per drifting setting and host, with its devices
    assert md.index("## Drift") < md.index("## Hosts") < md.index("## Settings per fabric")
    rail2 = next(line for line in md.splitlines() if line.startswith("| nic_firmware | roce_accl."))
    assert cells_of(rail2)[:5] == ["nic_firmware", "roce_accl.adaptive_routing_forced_en", "default", "1", "hgx01"]
    assert re.fullmatch(r"rail 2 0000:\S+ \(\S+\): 0", cells_of(rail2)[5])
    # the fabric's value per setting, grouped by stage, and the hosts that differ
    settings = md[md.index("## Settings per fabric"):]
    row = next(line for line in settings.splitlines() if line.startswith("| nic_firmware | roce_accl"))
    assert cells_of(row) == ["nic_firmware", "roce_accl.adaptive_routing_forced_en", "1", "hgx01"]
    assert "| roce_qos | pfc | \\[3\\] |  |" in settings  # PFC as the priorities it is on
    assert "| nic_firmware | LINK_TYPE_P1 | ETH(2) |  |" in settings  # an NV config enum by name and number
    assert re.search(r"^\| dgx01 \| default \| NVIDIA .* \| failed \| 1/2 \| rail 3 0000:5e:00.0.* \| 0 \|$", md, re.M)
    assert re.search(r"^\| hgx01 \| default \| Dell Inc\. PowerEdge XE9680 \| not needed \| passed \| 0/0 \|  \| 1 \|$",
                     md, re.M)
    # Kueue: flavor x resource per ClusterQueue
    assert "| ResourceFlavor | nvidia.com/gpu |" in md and "| h100-80gb-dgx-default | 8 |" in md
    # bandwidth: Gb/s per client -> server pair and rail
    assert "| client | server | rail 0 |" in md
    assert re.search(r"^\| dgx01 \| hgx01 \| 371\.2 \|$", md, re.M)
    # the flavor given twice (fleet.json and kueue/) is listed once
    assert sum(line.startswith("| h100-80gb-dgx-default | `") for line in md.splitlines()) == 1
    flavor = next(line for line in md.splitlines() if line.startswith("| h100-80gb-dgx-default | `"))
    cells = [c.strip() for c in flavor.strip().strip("|").split("|")]
    assert cells[2:] == ["", "`nvidia.com/gpu (Exists):NoSchedule`"]  # no node taints; one toleration


def test_cli_writes_the_three_files(fleet_dir, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["report", "--input", str(fleet_dir), "--output", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["report.html", "report.json", "report.md"]
    assert f"report.html: {out / 'report.html'} (written)" in capsys.readouterr().out
    assert json.loads((out / "report.json").read_text())["summary"]["drift"] == 1
    assert main(["report", "--input", str(fleet_dir), "--output", str(out)]) == 0
    assert capsys.readouterr().out.count("(unchanged)") == 3  # a re-run with the same results rewrites nothing


def test_bad_inputs_name_the_file(tmp_path, capsys):
    (tmp_path / "fleet.json").write_text("{not json")
    with pytest.raises(ReportInputError, match="fleet.json"):
        load_inputs(tmp_path)
    assert main(["report", "--input", str(tmp_path)]) == 2
    assert "fleet.json: not readable JSON" in capsys.readouterr().err
    assert main(["report", "--input", str(tmp_path / "absent")]) == 2


def test_empty_directory_gives_an_empty_report(tmp_path):
    written = write_report(tmp_path, tmp_path / "out")
    assert "0 hosts" in written["report.md"][0].read_text()


def test_fleet_report_action_renders_what_the_cli_renders(fleet_dir, tmp_path_factory):
    """The collection's fleet_report action (what playbooks/report.yml runs) writes the same files as
    ``gpunode report``, to the directory asked for, and rewrites nothing on a second run."""
    import sys

    from local_play import run_play  # tests/unit is on sys.path (rootdir-relative import mode)

    (fleet_dir / "hosts" / "dgx01" / "reboot.json").write_text(json.dumps({
        "required": True, "rebooting": False, "failed": True, "rebooted": False,
        "reason": "Reboot | Power-cycle the host from the controller: non-zero return code"}))
    fleet = json.loads((fleet_dir / "fleet.json").read_text())
    fleet["run"] = {"id": "run-20261201T150000Z", "time": "2026-12-01 15:00:00 UTC"}
    (fleet_dir / "fleet.json").write_text(json.dumps(fleet))
    out = tmp_path_factory.mktemp("action-out")
    play = ("---\n- name: Report\n  hosts: localhost\n  gather_facts: false\n  tasks:\n"
            "    - name: Write the fleet report\n      mlplatform.gpunode.fleet_report:\n"
            f"        input: {fleet_dir}\n        output: {out}\n")
    work = tmp_path_factory.mktemp("play")
    inventory = {"all": {"hosts": {"localhost": {"ansible_connection": "local",
                                                 "ansible_python_interpreter": sys.executable}}}}
    first = run_play(work, inventory, play)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "changed=1" in first.stdout
    cli_out = tmp_path_factory.mktemp("cli-out")
    write_report(fleet_dir, cli_out)
    for name in ("report.html", "report.md", "report.json"):
        assert (out / name).read_text() == (cli_out / name).read_text(), name
    md = (out / "report.md").read_text()
    galaxy = yaml.safe_load((REPO / "galaxy.yml").read_text())
    assert f"mlplatform.gpunode {galaxy['version']}" in md
    assert "results of run `run-20261201T150000Z` (2026-12-01 15:00:00 UTC)" in md
    assert "| failed: Reboot \\| Power-cycle the host from the controller: non-zero return code |" in md
    second = run_play(work, inventory, play)
    assert second.returncode == 0 and "changed=0" in second.stdout, second.stdout


def _facts_fleet(hw):
    """Two hosts as site.yml leaves them for the report stage: published facts (fabric, contracts, gpunode_hw,
    validation_result, nic_firmware_result) and the registered result_files read (every file's text)."""
    dgx_validation = {"host": "dgx01", "passed": False, "failures": ["rail 3 0000:5e:00.0 (ibp94s0): link DOWN"],
                      "checks": [], "pairs": [], "taint": "kept"}
    hgx_validation = {"host": "hgx01", "passed": True, "failures": [], "checks": [], "pairs": [], "taint": "removed"}
    nicfw = {"reboot_required": False, "not_in_effect": {}}
    facts = {}
    for name, platform, validation, accl in (("dgx01", "dgx-h100", dgx_validation, None),
                                             ("hgx01", "hgx-h100", hgx_validation, {2: 0})):
        files = {"discovery.json": hw[platform], "validation.json": validation, "nic_firmware.json": nicfw,
                 "reboot.json": {"required": True, "rebooting": False, "rebooted": True}}
        facts[name] = {"gpunode_fabric": "fab-a", **_contracts(hw[platform], accl_by_rail=accl),
                       "gpunode_hw": hw[platform], "validation_result": validation, "nic_firmware_result": nicfw,
                       "__report_results": {"changed": False, "files": {
                           n: {"content": json.dumps(v, indent=4, sort_keys=True) + "\n"} for n, v in files.items()}}}
    return facts


def _report_action(args, facts):
    from ansible_collections.mlplatform.gpunode.plugins.action import fleet_report
    from module_harness import PublishedHostVars, action_plugin  # tests/unit is on sys.path

    return action_plugin(fleet_report, args).run(
        task_vars={"hostvars": PublishedHostVars(facts), "ansible_play_hosts_all": sorted(facts)})


def test_report_from_facts_records_the_results_and_renders_what_they_render(hw, tmp_path):
    """site.yml's report stage: the action renders from the facts in memory (nothing it just wrote is read back)
    and records them (fleet.json, hosts/<host>/*.json); rendering that directory gives the same three files."""
    facts = _facts_fleet(hw)
    run = {"id": "run-20261203T020000Z", "time": "2026-12-03 02:00:00 UTC"}
    args = {"input": str(tmp_path / "results"), "from_facts": True, "host_files_var": "__report_results",
            "kueue": [FLAVOR, QUEUE], "run": run}
    first = _report_action(args, facts)
    assert first["changed"] is True, first
    results = tmp_path / "results"
    assert sorted(p.name for p in (results / "hosts" / "hgx01").iterdir()) == [
        "discovery.json", "nic_firmware.json", "reboot.json", "validation.json"]
    fleet = json.loads((results / "fleet.json").read_text())
    assert fleet["run"] == run and fleet["hosts"]["hgx01"]["fabric"] == "fab-a"
    assert set(fleet["hosts"]["hgx01"]["contracts"]) == {"nic_firmware_contract", "roce_qos_contract",
                                                         "gpu_driver_contract"}
    # the recorded directory renders the same report as the facts did
    again = tmp_path / "again"
    write_report(results, again)
    for name in ("report.html", "report.md", "report.json"):
        assert (results / name).read_text() == (again / name).read_text(), name
    model = json.loads((results / "report.json").read_text())
    assert [(d["host"], d["rail"]) for d in model["fabrics"]["fab-a"]["drift"]] == [("hgx01", 2)]
    assert model["summary"]["failed"] == 1 and model["meta"]["run_id"] == run["id"]
    assert "| dgx01 | fab-a | NVIDIA DGX H100 | rebooted | failed |" in (results / "report.md").read_text()
    # nothing changed: nothing is rewritten
    assert _report_action(args, facts)["changed"] is False


def test_report_from_facts_refuses_a_result_file_that_is_not_json_and_writes_nothing(hw, tmp_path):
    facts = _facts_fleet(hw)
    facts["hgx01"]["__report_results"]["files"]["reboot.json"]["content"] = "{not json"
    args = {"input": str(tmp_path / "results"), "from_facts": True, "host_files_var": "__report_results"}
    from ansible.errors import AnsibleActionFail

    with pytest.raises(AnsibleActionFail, match=r"fleet_report: hgx01: reboot.json: not readable JSON"):
        _report_action(args, facts)
    assert not (tmp_path / "results").exists()
    # a fact published in this run is taken instead of its file (the file is only recorded)
    facts = _facts_fleet(hw)
    facts["hgx01"]["__report_results"]["files"]["validation.json"]["content"] = "{not json"
    assert _report_action(args, facts)["changed"] is True


def test_report_takes_the_files_from_the_validation_read_back_when_its_own_read_was_skipped(hw, tmp_path):
    """site.yml: the report play's read is skipped where this run's validation read the result files
    (validation_result_files); the list of variables is tried in order per host, and the same files are recorded
    as the report's own read would record. A host with neither records no file; a name that is not a string
    list is refused."""
    from ansible.errors import AnsibleActionFail

    own = _facts_fleet(hw)
    facts = _facts_fleet(hw)
    facts["dgx01"]["validation_result_files"] = {"path": "/var/lib/gpunode",
                                                 "files": facts["dgx01"].pop("__report_results")["files"]}
    facts["dgx01"]["__report_results"] = {"changed": False, "skipped": True, "skip_reason": "Conditional result"}
    facts["hgx01"]["validation_result_files"] = None  # not read by validation: the report's own read is used
    args = {"input": str(tmp_path / "own"), "from_facts": True, "host_files_var": "__report_results"}
    _report_action(args, own)
    args = {"input": str(tmp_path / "results"), "from_facts": True,
            "host_files_var": ["__report_results", "validation_result_files"]}
    assert _report_action(args, facts)["changed"] is True
    for host in ("dgx01", "hgx01"):
        names = sorted(p.name for p in (tmp_path / "own" / "hosts" / host).iterdir())
        assert names == sorted(p.name for p in (tmp_path / "results" / "hosts" / host).iterdir())
        for name in names:
            assert ((tmp_path / "own" / "hosts" / host / name).read_text()
                    == (tmp_path / "results" / "hosts" / host / name).read_text())
    del facts["hgx01"]["__report_results"]
    _report_action({**args, "input": str(tmp_path / "neither")}, facts)
    assert not (tmp_path / "neither" / "hosts" / "hgx01").exists()
    with pytest.raises(AnsibleActionFail, match="host_files_var must be a variable name or a list of them"):
        _report_action({**args, "host_files_var": ["__report_results", 3]}, facts)


HOSTILE = {
    "name": "<script>alert(1)</script>",
    "platform": "[click](http://evil.example/x) ![img](http://evil.example/i.png)",
    "model": "`code` **loud** _em_ a|b <img src=x onerror=alert(1)>",
    "run_id": "run`<b>x</b>`\n# heading",
}


def test_markdown_escapes_every_string_a_host_supplied(fleet_dir):
    from markdown_it import MarkdownIt

    report = build(load_inputs(fleet_dir))
    host = report["hosts"][0]
    host["name"], host["platform"] = HOSTILE["name"], HOSTILE["platform"]
    for rail in host["rails"]:
        rail["model"] = HOSTILE["model"]
    report["meta"] = {"version": "1.0.0", "commit": None, "run_id": HOSTILE["run_id"], "generated": "now"}
    md = render(report)["report.md"]
    page = MarkdownIt("commonmark", {"html": True}).enable("table").render(md)
    # Nothing a host posted becomes markup: no HTML element, link, image, emphasis, code or heading of its own.
    for markup in ("<script", "<img", "<a ", "<b>", "<strong>loud</strong>", "<em>em</em>", "<code>code</code>",
                   "<h1>heading"):
        assert markup not in page, markup
    # ... and it is all still there, as text.
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "[click](http://evil.example/x) ![img](http://evil.example/i.png)" in page
    assert "`code` **loud** _em_ a|b &lt;img src=x onerror=alert(1)&gt;" in page
    assert "<code>run`&lt;b&gt;x&lt;/b&gt;` # heading</code>" in page  # the run id, in its code span, on one line
    # The hosts table keeps its 8 columns on the hostile host's row (its | is escaped).
    row = next(line for line in md.splitlines() if line.startswith("| &lt;script&gt;"))
    assert len(re.findall(r"(?<!\\)\|", row)) == 9
