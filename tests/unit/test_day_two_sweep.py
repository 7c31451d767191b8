"""Day-two sweep: hostile and faulty inputs across remediation, the bandwidth history, node_health, topology and
node_conditions.

Every case ends in one of two outcomes, and the counters at the end are the figures README.md quotes:
- a clear error whose message names the host, the device or the option, with nothing written (the day-two
  database byte-for-byte as before, or not created; every Node's conditions as before);
- for a faulty read on a host (a tool output node_health cannot use), a result that names the device in a condition
  or a warning, while the rest of the host is read.
"Silent" is a case accepted with nothing said; "half-applied" a case that wrote something before failing.
"""

from __future__ import annotations

import hashlib
import math
import re
import sqlite3

import kubernetes
import pytest
from ansible.errors import AnsibleActionFail
from ansible.module_utils import basic
from ansible_collections.mlplatform.gpunode.plugins.action import bandwidth_history as bw_action
from ansible_collections.mlplatform.gpunode.plugins.action import node_conditions as nc_action
from ansible_collections.mlplatform.gpunode.plugins.action import remediation as rm_action
from ansible_collections.mlplatform.gpunode.plugins.action import topology as topo_action
from ansible_collections.mlplatform.gpunode.plugins.module_utils import topology
from ansible_collections.mlplatform.gpunode.plugins.modules import node_health
from local_play import free_port
from module_harness import ExitJson, FailJson, PublishedHostVars, action_plugin, run_module
from simhost import day_two_host, run_tool, tool_bin

from gpunode.kapi.server import RunningServer

OUTCOMES = {"clear_error": 0, "named_finding": 0, "half_applied": 0, "silent": 0}
AR = {"type": "RailRoceAcclDrift", "status": "True", "reason": "RoceAcclDrift", "device": "0000:3b:00.0",
      "message": "rail 2 NIC 0000:3b:00.0: drift", "check": "roce_accl", "remedy": "reconfigure"}


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


def _error(call, needle, *, unchanged):
    """``call`` must fail with a message holding ``needle``; ``unchanged()`` must be the same before and after."""
    before = unchanged()
    try:
        result = call()
    except (AnsibleActionFail, topology.TopologyError) as exc:
        message = getattr(exc, "message", None) or str(exc)
    else:
        OUTCOMES["silent"] += 1
        pytest.fail(f"accepted: {result}")
    if unchanged() != before:
        OUTCOMES["half_applied"] += 1
        pytest.fail("something was written before the error")
    assert re.search(needle, message), message
    OUTCOMES["clear_error"] += 1


# -- remediation -------------------------------------------------------------------------------------------------


def _healthy():
    return {"conditions": [], "regressions": [], "failures": []}


REMEDIATION = [
    *[({"max_unavailable": v}, r"remediation: max_unavailable: ") for v in
      ("0", "150%", "two", 0, -1, "-1", 1.5, "1.5", "", " ", None, True, False, [1], {"n": 1}, "0%", "101%", "nan%",
       "inf%", "-5%", "1e2", "½", "１", "2 hosts", "%", "50%%")],
    *[({"max_attempts": v}, r"remediation: max_attempts ") for v in ("many", 0, -1, 101, [3], "3.5")],
    *[({"nodes": v}, r"remediation: nodes") for v in
      ("all", 5, [{"spec": {}}], [{"metadata": {}}], [5], {"a": {"unschedulable": "maybe"}}, {"a": "cordoned"},
       [{"metadata": {"name": ""}}])],
    ({"step": "fix"}, r"remediation: step 'fix' is not one of plan, record, check"),
    ({"step": None}, r"remediation: step None is not one of"),
    ({"finding_var": ["x"]}, r"remediation: finding_var must be a non-empty string"),
    ({"fabric_var": 5}, r"remediation: fabric_var must be a non-empty string"),
    ({"node_name_var": ""}, r"remediation: node_name_var must be a non-empty string"),
    ({"kubeconfig": 3}, r"remediation: kubeconfig must be a non-empty string"),
    ({"bogus": 1}, r"Invalid options for mlplatform.gpunode.remediation: bogus"),
    ({"db": ""}, r"remediation: db must be the path"),
    ({"db": 5}, r"remediation: db must be the path"),
    ({"step": "record", "hosts": ["a"]}, r"remediation: step=record needs event"),
    ({"step": "record", "hosts": ["a"], "event": "x", "state": "broken"}, r"remediation: state 'broken' is not"),
    ({"step": "record", "hosts": ["a"], "event": "x", "details": 5}, r"remediation: details must be a string"),
    ({"step": "record", "hosts": ["zz"], "event": "x", "state": "in_service"}, r"remediation: zz: no recorded"),
    ({"hosts": "a"}, r"remediation: hosts must be a non-empty list"),
    ({"hosts": [5]}, r"remediation: hosts must be a non-empty list"),
]
FINDINGS = [
    ({"conditions": "x"}, r"remediation: a: findings.conditions: expected a list"),
    ({"regressions": "slow"}, r"remediation: a: findings.regressions: expected a list"),
    ({"failures": {"x": 1}}, r"remediation: a: findings.failures: expected a list"),
    ({"checks": "qos"}, r"remediation: a: findings.checks: expected a list"),
    ({"peers": "b"}, r"remediation: a: findings.peers: expected a list"),
    ([], r"remediation: a: findings: expected a mapping"),
    ("sick", r"remediation: a: findings: expected a mapping"),
]


@pytest.fixture
def day_two_db(tmp_path):
    db = tmp_path / "d2" / "history.sqlite"
    hostvars = PublishedHostVars({"a": {"revalidate_finding": {"conditions": [AR], "regressions": [], "failures": []},
                                        "gpunode_fabric": "A"}})
    action_plugin(rm_action, {"db": str(db), "run": "r0", "nodes": {}}).run(
        task_vars={"hostvars": hostvars, "ansible_play_hosts": ["a"]})
    return db


@pytest.mark.parametrize(("args", "needle"), REMEDIATION)
def test_remediation_options(day_two_db, args, needle):
    hostvars = PublishedHostVars({"a": {"revalidate_finding": _healthy(), "gpunode_fabric": "A"}})
    plugin = action_plugin(rm_action, {"db": str(day_two_db), "run": "r1", "nodes": {}, **args})
    _error(lambda: plugin.run(task_vars={"hostvars": hostvars, "ansible_play_hosts": ["a"]}), needle,
           unchanged=lambda: _digest(day_two_db))


@pytest.mark.parametrize(("finding", "needle"), [(dict(_healthy(), **f) if isinstance(f, dict) else f, n)
                                                 for f, n in FINDINGS])
def test_remediation_findings(day_two_db, finding, needle):
    hostvars = PublishedHostVars({"a": {"revalidate_finding": finding, "gpunode_fabric": "A"}})
    plugin = action_plugin(rm_action, {"db": str(day_two_db), "run": "r1", "nodes": {}})
    _error(lambda: plugin.run(task_vars={"hostvars": hostvars, "ansible_play_hosts": ["a"]}), needle,
           unchanged=lambda: _digest(day_two_db))


@pytest.mark.parametrize(("content", "needle"), [
    (b"just text\n", r"is not an SQLite database"), (b"\x00\x01\x02", r"is not an SQLite database"),
    ("foreign", r"not the day-two history \(unknown tables customers"), ("newer", r"newer than this collection's"),
    ("directory", r"is not a regular file"), ("bad-state", r"remediation: a: recorded state 'gone' is not one of"),
])
def test_remediation_databases(tmp_path, content, needle):
    db = tmp_path / "history.sqlite"
    if content == "directory":
        db.mkdir()
    elif isinstance(content, bytes):
        db.write_bytes(content)
    else:
        action_plugin(rm_action, {"db": str(db), "run": "r0", "nodes": {}}).run(task_vars={
            "hostvars": PublishedHostVars({"a": {"revalidate_finding": {"conditions": [AR]}}}),
            "ansible_play_hosts": ["a"]})
        with sqlite3.connect(db) as conn:
            if content == "foreign":
                conn.execute("CREATE TABLE customers (name TEXT)")
                conn.execute("PRAGMA user_version = 0")
            elif content == "newer":
                conn.execute("PRAGMA user_version = 99")
            else:
                conn.execute("UPDATE remediation SET state = 'gone'")
        conn.close()
    plugin = action_plugin(rm_action, {"db": str(db), "run": "r1", "nodes": {}})
    _error(lambda: plugin.run(task_vars={"hostvars": PublishedHostVars({"a": {"revalidate_finding": _healthy()}}),
                                         "ansible_play_hosts": ["a"]}), needle,
           unchanged=lambda: None if db.is_dir() else _digest(db))


# -- the bandwidth history ---------------------------------------------------------------------------------------


def _pair(**over):
    return {"rail": 3, "peer": "dgx1", "peer_rail": 3, "side": "client", "gbps": 380.0, "line_rate_gbps": 400, **over}


HISTORY = [
    *[(_pair(gbps=v), r"pairs\[1\]\.gbps is ") for v in
      (math.nan, math.inf, -math.inf, "nan", "inf", "-inf", "NaN", 4e6, 601.0, -0.1, -400, "fast", [1], {"x": 1},
       True, "1e309")],
    *[(_pair(rail=v), r"pairs\[1\]\.rail is ") for v in (0.7, -1, "3a", True, 2.5, "", [3])],
    (_pair(rail=None), r"pairs\[1\] lacks or mistypes rail"),
    *[(_pair(peer_rail=v), r"pairs\[1\]\.peer_rail is ") for v in (1.5, -2, "x", False)],
    *[(_pair(line_rate_gbps=v), r"pairs\[1\]\.line_rate_gbps is ") for v in
      (0, -400, math.nan, math.inf, "fast", 1e9, -0.0)],
    (_pair(side="both"), r"pairs\[1\]\.side is 'both'"),
    (_pair(side=None), r"pairs\[1\] lacks or mistypes side"),
    (_pair(peer=" "), r"pairs\[1\]\.peer is empty"),
    ({"rail": 1}, r"pairs\[1\] lacks or mistypes peer, peer_rail, side"),
    ("not a pair", r"pairs\[1\] is not a mapping"),
]
HISTORY_OPTIONS = [
    ({"window": 0}, r"bandwidth_history: window 0 is out of range"), ({"window": "ten"}, r"window must be a number"),
    ({"drop_pct": 120}, r"drop_pct 120.0 is out of range"), ({"threshold_pct": -1}, r"threshold_pct -1.0 is out"),
    ({"min_points": 0}, r"min_points 0 is out of range"), ({"db": ""}, r"db must be the path"),
    ({"trend_points": 5000}, r"trend_points 5000 is out of range"), ({"bogus": 1}, r"Invalid options"),
]


@pytest.fixture
def history_db(tmp_path):
    db = tmp_path / "history.sqlite"
    hostvars = PublishedHostVars({"hgx1": {"validation_result": {"pairs": [_pair()]}}})
    action_plugin(bw_action, {"db": str(db), "run": "r0", "version": "0"}).run(
        task_vars={"hostvars": hostvars, "ansible_play_hosts": ["hgx1"]})
    return db


def _bw(path, pairs, **args):
    hostvars = PublishedHostVars({"hgx1": {"validation_result": {"pairs": pairs}}})
    plugin = action_plugin(bw_action, {"db": str(path), "run": "r1", "version": "0", **args})
    return lambda: plugin.run(task_vars={"hostvars": hostvars, "ansible_play_hosts": ["hgx1"]})


@pytest.mark.parametrize(("pair", "needle"), HISTORY)
def test_history_values(history_db, pair, needle):
    _error(_bw(history_db, [_pair(gbps=381.0), pair]), "bandwidth_history: hgx1: validation_result." + needle,
           unchanged=lambda: _digest(history_db))


@pytest.mark.parametrize(("args", "needle"), HISTORY_OPTIONS)
def test_history_options(history_db, args, needle):
    _error(_bw(history_db, [_pair()], **args), needle, unchanged=lambda: _digest(history_db))


@pytest.mark.parametrize(("result", "needle"), [
    ("passed", r"hgx1: validation_result is not a mapping"), ({"pairs": "all"}, r"hgx1: validation_result.pairs is"),
    (None, r"no validation_result for host\(s\) hgx1"),
])
def test_history_results(history_db, result, needle):
    hostvars = PublishedHostVars({"hgx1": {"validation_result": result}})
    plugin = action_plugin(bw_action, {"db": str(history_db), "run": "r1", "version": "0"})
    _error(lambda: plugin.run(task_vars={"hostvars": hostvars, "ansible_play_hosts": ["hgx1"]}), needle,
           unchanged=lambda: _digest(history_db))


# -- node_health -------------------------------------------------------------------------------------------------

PFC = [0, 0, 0, 1, 0, 0, 0, 0]
EXPECT = [
    *[({"roce_accl": {k: 1}}, r"expect\.roce_accl: the ROCE_ACCL register has no field") for k in
      ("adaptive_routing", "AR", "adaptive_routing_forced_en ", "roce_accl", "field_select")],
    *[({"roce_accl": {"adaptive_routing_forced_en": v}}, r"expect\.roce_accl\.adaptive_routing_forced_en: ") for v in
      (2, -1, "on", 1.0, True)],
    ({"roce_accl": {"ack_dscp": 64}}, r"expect\.roce_accl\.ack_dscp: 64 is not an integer 0\.\.63"),
    *[({"num_vfs": v}, r"expect\.num_vfs: ") for v in (-1, -8, 65536, 10 ** 6)],
    *[({"link_speed_gbps": v}, r"expect\.link_speed_gbps: ") for v in (0, -400, 4000)],
    *[({"qos": {"pfc": v}}, r"expect\.qos\.pfc: ") for v in
      ([0, 0, 0, 1], [0] * 9, [], [0, 0, 0, 2, 0, 0, 0, 0], [0, 0, 0, -1, 0, 0, 0, 0], "00010000", 3,
       [True, 0, 0, 0, 0, 0, 0, 0])],
    *[({"qos": {"ecn_np": v}}, r"expect\.qos\.ecn_np: ") for v in ([8], [-1], "3", [3.5])],
    ({"qos": {"ecn_rp": [9]}}, r"expect\.qos\.ecn_rp: priority 9"),
    *[({"qos": {"trust": v}}, r"expect\.qos\.trust: ") for v in ("l2", "DSCP", 1)],
    *[({"qos": {"cnp_dscp": v}}, r"expect\.qos\.cnp_dscp: ") for v in (64, -1, "x")],
    *[({"qos": {"roce_tos": v}}, r"expect\.qos\.roce_tos: ") for v in (256, -1)],
    *[({"qos": {"mtu": v}}, r"expect\.qos\.mtu: ") for v in (20000, 10)],
    *[({"qos": {"pfc_priorities": v}}, r"expect\.qos\.pfc_priorities: ") for v in ([9], [-1], "3", [True])],
    ({"qos": {"tos": 106}}, r"expect\.qos has unknown keys tos"),
]


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("day-two-sweep")
    bindir = tool_bin(tmp / "bin", ("nvidia-smi", "dmesg", "mlxreg", "mlnx_qos"))
    hdir, hw = day_two_host(tmp / "host", "hgx-h100", pfc=PFC)
    faulty = tmp / "faulty"
    faulty.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATH", f"{faulty}:{bindir}:/usr/bin:/bin")
        mp.setenv("GPUNODE_SIM_STATE", str(hdir))
        mp.setenv("GPUNODE_SIM_NVIDIA_USERSPACE", str(tmp / "no-userspace-file"))
        done = run_tool(hdir, "nvidia-smi", "-q")
        yield {"dir": hdir, "hw": hw, "faulty": faulty, "smi": done.out}


@pytest.fixture
def exits(monkeypatch):
    from module_harness import patch_exits  # noqa: PLC0415 - per test, the module fixture cannot monkeypatch

    patch_exits(monkeypatch)
    warned = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, text: warned.append(text))
    return warned


def _sys_digest(hdir):
    return hashlib.sha256(b"".join(sorted(p.read_bytes() for p in (hdir / "sys").rglob("*")
                                          if p.is_file() and not p.is_symlink()))).hexdigest()


@pytest.mark.parametrize(("expect", "needle"), EXPECT)
def test_node_health_expect(host, exits, expect, needle):
    args = {"sysfs_root": str(host["dir"] / "sys"), "proc_root": str(host["dir"] / "run" / "proc"),
            "hw": host["hw"], "expect": expect}

    def call():
        result = run_module(node_health.main, args, (ExitJson, FailJson))
        if not result.get("failed"):
            return result
        raise AnsibleActionFail(result["msg"])

    _error(call, needle, unchanged=lambda: _sys_digest(host["dir"]))


def _cut_sections(text, n):
    return "\nGPU ".join(text.split("\nGPU ")[:n])


def _set_field(text, field, value, gpu=2):
    sections = text.split("\nGPU ")
    sections[gpu + 1] = re.sub(rf"(^\s+{re.escape(field)}\s+: ).*", lambda m: m.group(1) + value,
                               sections[gpu + 1], count=1, flags=re.M)
    return "\nGPU ".join(sections)


def _faults(smi):
    lines = smi.splitlines()
    return [
        *[("nvidia-smi", _set_field(smi, f, v), 0, "", "GPUFieldUnreadable", "gpu") for f, v in
          (("Persistence Mode", "ERR!"), ("Persistence Mode", "[Unknown Error]"), ("DRAM Uncorrectable", "ERR!"),
           ("SRAM Uncorrectable Parity", "[GPU requires reset]"), ("Pending Page Blacklist", "Maybe"),
           ("State", "ERR!"),
           ("Remapping Failure Occurred", "[Unknown Error]"), ("DRAM Uncorrectable", "-1"))],
        *[("nvidia-smi", _cut_sections(smi, n), 0, "", "GPUQueryIncomplete", "nvidia-smi") for n in (1, 3, 8)],
        *[("nvidia-smi", "\n".join(lines[:n]), 0, "", "GPUQueryIncomplete", "nvidia-smi") for n in
          (len(lines) - 3, len(lines) // 2, 5)],
        ("nvidia-smi", "", 0, "", "GPUQueryIncomplete", "nvidia-smi"),
        ("nvidia-smi", "garbage\x00\x01", 0, "", "GPUQueryIncomplete", "nvidia-smi"),
        ("nvidia-smi", "", 9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver",
         "GPUDriverUnavailable", "nvidia-smi"),
        ("nvidia-smi", _cut_sections(smi, 8), 15, "Unable to determine the device handle for GPU"
         + smi.split("\nGPU ")[8].splitlines()[0].strip() + ": Unknown Error\n", "GPUUnreachable", "gpu"),
        ("dmesg", "[ 1.0] NVRM: Xid (PCI:0000:19:00): 79, pid='<unknown>', name=<unknown>, off the bus\n"
                  "[ 2.0] NVRM: Xid bogus\n", 0, "", "GPUFallenOffBus", "xid"),
        ("dmesg", "", 1, "dmesg: read kernel buffer failed: Operation not permitted", "KernelLogUnavailable", "dmesg"),
    ]


FAULT_COUNT = 20


@pytest.mark.parametrize("index", range(FAULT_COUNT))
def test_node_health_faulty_reads(host, exits, index):
    faults = _faults(host["smi"])
    assert len(faults) == FAULT_COUNT
    tool, out, rc, err, kind, where = faults[index]
    faulty = host["faulty"]
    for name in ("nvidia-smi", "dmesg"):
        (faulty / name).unlink(missing_ok=True)
    (faulty / f"{tool}.out").write_text(out)
    (faulty / f"{tool}.err").write_text(err)
    (faulty / tool).write_text(f"#!/bin/sh\ncat '{faulty}/{tool}.out'\ncat '{faulty}/{tool}.err' >&2\nexit {rc}\n")
    (faulty / tool).chmod(0o755)
    result = run_module(node_health.main, {"sysfs_root": str(host["dir"] / "sys"), "hw": host["hw"],
                                           "proc_root": str(host["dir"] / "run" / "proc"),
                                           "expect": {"num_vfs": 8}}, ExitJson)
    found = [c for c in result["conditions"] if c["type"] == kind]
    if not found:
        OUTCOMES["silent"] += 1
    assert found, result["conditions"]
    gpus = {g["pci_address"] for g in host["hw"]["gpus"]}
    assert all((c["device"] in gpus) if where in ("gpu", "xid") else c["device"] == where for c in found)
    if tool == "dmesg" and rc == 0:
        assert any("Xid bogus" in w for w in exits)  # the bad line is reported, the good one read
    assert len(result["observed"]["rails"]) == len(host["hw"]["rails"])  # the rest of the host was read
    OUTCOMES["named_finding"] += 1


# -- topology ----------------------------------------------------------------------------------------------------


def _fleet(n=2):
    return {f"h{i}": {"fabric": "east", "block": None, "rack": None, "rails": [
        {"rail": k, "netdev": f"eth{k}", "neighbour": {"switch": f"leaf{k}", "port": f"swp{i + 1}"}} for k in range(2)]}
        for i in range(n)}


def _with(host, **over):
    fleet = _fleet()
    fleet["h1"] = {**fleet["h1"], **host}
    for key, value in over.items():
        fleet["h1"]["rails"][0][key] = value
    return fleet


TOPOLOGY = [
    ("fleet", r"hosts: expected a mapping"), (["h0"], r"hosts: expected a mapping"),
    (_with({"rails": "all"}), r"h1: expected \{fabric, block, rack, rails"),
    ({**_fleet(), "h1": "x"}, r"h1: expected \{fabric, block, rack, rails"),
    (_with({"rails": [5]}), r"h1: rails\[0\]: expected \{rail, netdev, neighbour\}"),
    (_with({"rails": [{"netdev": "eth0"}]}), r"h1: rails\[0\]: expected"),
    *[(_with({}, rail=v), r"h1: rails\[0\]\.rail: .* is not a rail number") for v in ("x", -1, 0.5, True, None)],
    (_with({}, rail=1), r"h1: rails\[1\]\.rail: rail 1 is listed twice"),
    *[(_with({}, neighbour=v), r"h1: rail 0: neighbour .* is not \{switch, port\}") for v in ("leaf0", [1], 7)],
    *[(_with({}, neighbour={"switch": v, "port": "1"}), r"h1: rail 0: neighbour\.switch .* is not a name") for v in
      ([1], {"a": 1}, True, 1.5)],
    (_with({}, neighbour={"switch": "leaf0", "port": [1]}), r"h1: rail 0: neighbour\.port \[1\] is not a name"),
]


@pytest.mark.parametrize(("fleet", "needle"), TOPOLOGY)
def test_topology_input(fleet, needle):
    _error(lambda: topology.plan(fleet, rail_optimized=["east"]), needle, unchanged=lambda: None)


@pytest.mark.parametrize(("claims", "count"), [
    ((("h0", 0, "leaf0", "swp1"), ("h1", 0, "leaf0", "swp1")), 1),
    ((("h0", 0, "leaf0", "swp1"), ("h0", 1, "leaf0", "swp1")), 1),
    ((("h0", 0, "leaf0", 1), ("h1", 0, "leaf0", "1")), 1),
    ((("h0", 0, "leaf0", "swp1"), ("h1", 0, "leaf0", "swp1"), ("h1", 1, "leaf0", "swp1")), 1),
    ((("h0", 0, "leaf0", "swp1"), ("h1", 0, "leaf0", "swp1"), ("h0", 1, "leaf1", "swp9"), ("h1", 1, "leaf1", "swp9")),
     2),
])
def test_topology_ports_claimed_twice(claims, count):
    fleet = _fleet()
    for host, rail, switch, port in claims:
        fleet[host]["rails"][rail]["neighbour"] = {"switch": switch, "port": port}
    found = topology.plan(fleet)["claimed_twice"]
    if len(found) != count:
        OUTCOMES["silent"] += 1
    assert len(found) == count
    for entry in found:
        line = topology.describe_claimed_twice(entry)
        assert all(f"{r['host']} rail {r['rail']}" in line for r in entry["rails"])
    OUTCOMES["named_finding"] += 1


@pytest.mark.parametrize("names", [("leaf-ä", "leaf-ö"), ("交换机1", "交换机2"), ("Ω", "λ"), ("a b", "a/b"),
                                   ("x" * 70 + "1", "x" * 70 + "2"), ("", "-"), ("ß", "ss")])
def test_topology_switch_names(names):
    fleet = {f"h{i}": {"fabric": "west", "block": None, "rack": None,
                       "rails": [{"rail": 0, "netdev": "eth0", "neighbour": {"switch": n or None, "port": "1"}}]}
             for i, n in enumerate(names)}
    plan = topology.plan(fleet)
    racks = [plan["levels"][f"h{i}"]["rack"] for i, n in enumerate(names) if n]
    if len(set(racks)) != len(racks) or not all(racks):
        OUTCOMES["silent"] += 1
    assert len(set(racks)) == len(racks) and all(racks)
    assert all(topology.label_value(r) == r and len(r) <= 63 for r in racks)
    changed = [n for n, r in zip([n for n in names if n], racks, strict=True)
               if not n.isascii() or r != topology.label_value(n)]
    assert all(any(repr(n) in w for w in plan["warnings"]) for n in changed)
    OUTCOMES["named_finding"] += 1


@pytest.mark.parametrize(("args", "needle"), [
    ({"rail_optimized": "east"}, r"topology: rail_optimized must be a list"),
    ({"rail_optimized": ["north"]}, r"topology: rail_optimized names fabric\(s\) no host of the play is in: north"),
    ({"label_keys": {"row": "x"}}, r"topology: label_keys maps block and rack"),
    ({"label_keys": {"rack": ""}}, r"topology: label_keys maps block and rack"),
])
def test_topology_options(args, needle):
    hw = {"rails": [{"rail": 0, "netdev": "eth0", "pci_address": "0000:01:00.0"}]}
    hostvars = PublishedHostVars({"a": {"gpunode_hw": hw, "gpunode_fabric": "east"}})
    plugin = action_plugin(topo_action, args)
    _error(lambda: plugin.run(task_vars={"hostvars": hostvars, "ansible_play_hosts": ["a"]}), needle,
           unchanged=lambda: None)


# -- node_conditions ---------------------------------------------------------------------------------------------

GOOD = {"type": "GPUNodeRemediation", "status": "True", "reason": "Remediating", "message": "x"}
CONDITIONS = [
    ({"n1": [GOOD], "gone": [GOOD]}, r"no Node named gone in the cluster; no Node was patched"),
    ({"gone": [GOOD], "n1": [GOOD], "n2": [GOOD], "z": [GOOD]}, r"no Node named gone.*no Node named z"),
    ({"n1": [{**GOOD, "type": "lower"}], "n2": [GOOD]}, r"n1: conditions\[0\]\.type 'lower'"),
    ({"n2": [GOOD], "n1": [{**GOOD, "status": "yes"}]}, r"n1: conditions\[0\] \(GPUNodeRemediation\)\.status 'yes'"),
    ({"n1": [{**GOOD, "reason": "has space"}]}, r"n1: conditions\[0\] \(GPUNodeRemediation\)\.reason"),
    ({"n1": [GOOD, GOOD]}, r"n1: conditions\[1\]\.type GPUNodeRemediation is given twice"),
    ({"n1": "Ready"}, r"n1: expected a list of conditions"),
    ({"n1": [5]}, r"n1: conditions\[0\] is not a mapping"),
    ({"n1": [{**GOOD, "type": ""}]}, r"n1: conditions\[0\]\.type '' is not"),
    ({"n1": [{**GOOD, "reason": None}]}, r"n1: conditions\[0\] \(GPUNodeRemediation\)\.reason None"),
    ({}, r"node_conditions: nodes must map Node names"),
    ("n1", r"node_conditions: nodes must map Node names"),
]


@pytest.fixture(scope="module")
def kapi(tmp_path_factory):
    with RunningServer(tmp_path_factory.mktemp("kapi"), free_port(16561, 16570)) as srv:
        core = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(srv.kubeconfig))
        for name in ("n1", "n2"):
            core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
        yield srv, core


def _statuses(core):
    return [str(core.read_node_status(n).status) for n in ("n1", "n2")]


@pytest.mark.parametrize(("nodes", "needle"), CONDITIONS)
def test_node_conditions(kapi, nodes, needle):
    srv, core = kapi
    plugin = action_plugin(nc_action, {"kubeconfig": srv.kubeconfig, "nodes": nodes})
    _error(lambda: plugin.run(task_vars={}), needle, unchanged=lambda: _statuses(core))


def test_sweep_counts(request):
    """Runs last (file order): the figures README.md quotes."""
    ran = [i for i in request.session.items if i.module.__name__ == __name__ and i.name != "test_sweep_counts"]
    assert OUTCOMES["half_applied"] == 0 and OUTCOMES["silent"] == 0
    assert OUTCOMES["clear_error"] + OUTCOMES["named_finding"] == len(ran)
    if len(ran) == len([i for i in request.session.items if i.module.__name__ == __name__]) - 1:
        assert len(ran) >= 150, len(ran)
