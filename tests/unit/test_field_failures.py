"""Issue 16, field failures: real output variants, nothing half-applied, no silent typos.

Each test is built from the small input of one numbered item of the issue and asserts what a
human checks: the parsed values, the error text (host, device, variable) and the state of the
sysfs tree or the simulated NV config after a failure.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import fake_mft
import pytest
from ansible.module_utils import basic
from ansible_collections.mlplatform.gpunode.plugins.filter import k8s_objects as k8s_filters
from ansible_collections.mlplatform.gpunode.plugins.module_utils import k8s_objects, node_reads, rdma_tools
from ansible_collections.mlplatform.gpunode.plugins.module_utils.parsing import ParseError
from ansible_collections.mlplatform.gpunode.plugins.modules import gpu_info as gpu_info_module
from ansible_collections.mlplatform.gpunode.plugins.modules import ib_write_bw as ib_write_bw_module
from ansible_collections.mlplatform.gpunode.plugins.modules import mlxconfig as mlxconfig_module
from ansible_collections.mlplatform.gpunode.plugins.modules import nic_info as nic_info_module
from ansible_collections.mlplatform.gpunode.plugins.modules import node_validation as node_validation_module
from ansible_collections.mlplatform.gpunode.plugins.modules import result_files as result_files_module
from ansible_collections.mlplatform.gpunode.plugins.modules import roce_qos as roce_qos_module
from ansible_collections.mlplatform.gpunode.plugins.modules import sriov_vfs as sriov_vfs_module
from module_harness import FailJson, patch_exits, run_module

sim_profile = pytest.importorskip("gpunode.sim.profile")
sim_sysfs = pytest.importorskip("gpunode.sim.sysfs")

REPO = Path(__file__).resolve().parents[2]
QOS_APPLY = REPO / "roles" / "roce_qos" / "files" / "roce-qos-apply"
QOS_SAMPLE = "roce-lossless-l3-setup-mlnx_qos-cma_roce_tos-netarbiter.txt"
LOSSLESS = {"trust": "dscp", "pfc": [0, 0, 0, 1, 0, 0, 0, 0], "ecn_np": [3], "ecn_rp": [3], "cnp_dscp": 48,
            "roce_tos": 106, "mtu": 9000}
NEWER_BUFFER = "Receive buffer size (bytes): 130944,130944,0,0,0,0,0,0,max_buffer_size=262016"


def newer_mlnx_qos(real_outputs, dcbx="OS controlled", trust="dscp", pfc="0   0   0   1   0   0   0   0"):
    """The real sample's first report as a newer build prints it: a receive-buffer line with
    ``max_buffer_size=`` after the 8 sizes, and tc 6 without ``bw:`` (the sample already has none)."""
    text = (real_outputs / QOS_SAMPLE).read_text()
    start = text.index("DCBX mode:")
    block = text[start:text.index("+ sudo sh", start)]
    block = block.replace("Cable len: 7\n", f"Cable len: 7\n{NEWER_BUFFER}\n")
    block = block.replace("tc: 0 ratelimit: unlimited, tsa: vendor", "tc: 0 ratelimit: unlimited, tsa: ets, bw: 50%")
    block = block.replace("OS controlled", dcbx).replace("Priority trust state: dscp", f"Priority trust state: {trust}")
    return re.sub(r"enabled(\s+\d)+", f"enabled     {pfc}", block)


# -- 1. mlnx_qos, newer builds ---------------------------------------------------------------------


def test_1_mlnx_qos_newer_build_parses(real_outputs):
    qos = rdma_tools.parse_mlnx_qos(newer_mlnx_qos(real_outputs))
    assert qos["receive_buffer_size"] == [130944, 130944, 0, 0, 0, 0, 0, 0]
    assert qos["max_buffer_size"] == 262016
    assert qos["tcs"][6] == {"ratelimit": "unlimited", "tsa": "vendor", "bw": None, "priorities": [6]}
    assert qos["tcs"][0]["bw"] == 50 and qos["tcs"][0]["tsa"] == "ets"
    assert qos["pfc_priorities"] == [3] and qos["trust"] == "dscp"
    assert qos["unparsed"] == []


@pytest.mark.parametrize("line", [
    "Receive buffer size (bytes): 130944,130944,0,0,0,0,0,0,max_buffer_size=lots",
    "Receive buffer size (bytes): 130944,max_buffer_size=262016,0",
    "Receive buffer size (bytes): 130944,130944,0,0,0,0,0,0,colour=262016",
    "Receive buffer size (bytes): max_buffer_size=262016",
])
def test_1_mlnx_qos_truly_unknown_receive_buffer_line_still_fails(real_outputs, line):
    text = newer_mlnx_qos(real_outputs).replace(NEWER_BUFFER, line)
    with pytest.raises(ParseError, match="Receive buffer size"):
        rdma_tools.parse_mlnx_qos(text)


def test_1_mlnx_qos_unknown_tc_line_still_fails(real_outputs):
    text = newer_mlnx_qos(real_outputs).replace("tc: 6 ratelimit: unlimited, tsa: vendor", "tc: 6 weird")
    with pytest.raises(ParseError, match="'tc: <n> ratelimit"):
        rdma_tools.parse_mlnx_qos(text)


class NewerTools:
    """mlnx_qos printing the newer layout, with per-netdev trust/PFC state; cma_roce_tos."""

    def __init__(self, real_outputs, dcbx="OS controlled"):
        self.real_outputs = real_outputs
        self.dcbx = dcbx
        self.qos = {}
        self.tos = {}
        self.calls = []

    def __call__(self, module, args, **kwargs):
        if args[0].rsplit("/", 1)[-1] == "timeout":  # a read-back runs each tool under `timeout -k 5 <s>`
            args = args[4:]
        tool = args[0].rsplit("/", 1)[-1]
        self.calls.append([tool, *args[1:]])
        if tool == "mlnx_qos":
            state = self.qos.setdefault(args[2], {"trust": "pcp", "pfc": [0] * 8})
            if "--trust" in args:
                state["trust"] = args[args.index("--trust") + 1]
            if "--pfc" in args:
                state["pfc"] = [int(v) for v in args[args.index("--pfc") + 1].split(",")]
            return 0, newer_mlnx_qos(self.real_outputs, self.dcbx, state["trust"],
                                     "   ".join(str(v) for v in state["pfc"])), ""
        if tool == "cma_roce_tos":
            if "-t" in args:
                self.tos[args[2]] = int(args[args.index("-t") + 1])
            return 0, f"{self.tos.get(args[2], 0)}\n", ""
        return 127, "", f"{tool}: not found"


@pytest.fixture
def newer_tools(real_outputs, monkeypatch):
    fake = NewerTools(real_outputs)
    patch_exits(monkeypatch)
    monkeypatch.setattr(basic.AnsibleModule, "run_command", lambda self, args, **kw: fake(self, args, **kw))
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, name, required=False: f"/usr/bin/{name}")
    return fake


@pytest.fixture
def hgx(tmp_path):
    """HGX H100 sysfs tree with tc/1/traffic_class; returns (root, ethernet rail netdev, its RDMA device)."""
    root = tmp_path / "sys"
    sim_sysfs.materialize(sim_profile.load_profile("hgx-h100"), root)
    for dev in (root / "class" / "infiniband").iterdir():
        (dev / "tc" / "1").mkdir(parents=True)
        (dev / "tc" / "1" / "traffic_class").write_text("")
    net = root / "class" / "net"
    rails = [p for p in sorted(net.iterdir()) if (p / "ecn").is_dir() and (p / "device" / "infiniband").is_dir()]
    return root, [(p.name, next((p / "device" / "infiniband").iterdir()).name) for p in rails]


def test_1_roce_qos_module_configures_a_port_of_a_newer_build(hgx, newer_tools):
    root, rails = hgx
    netdev, dev = rails[0]
    args = {"sysfs_root": str(root), "interfaces": [{"netdev": netdev, "rdma_device": dev, **LOSSLESS}]}
    result = run_module(roce_qos_module.main, args)
    assert result["changed"] is True
    assert result["current"][netdev]["trust"] == "dscp" and result["current"][netdev]["pfc"] == LOSSLESS["pfc"]
    assert (root / "class" / "net" / netdev / "mtu").read_text() == "9000\n"
    assert run_module(roce_qos_module.main, args)["changed"] is False


def test_1_node_validation_reads_qos_of_a_newer_build(hgx, newer_tools):
    root, rails = hgx
    netdev, dev = rails[0]
    newer_tools.qos[netdev] = {"trust": "dscp", "pfc": [0, 0, 0, 1, 0, 0, 0, 0]}

    class Module:
        def get_bin_path(self, name, required=False):
            return f"/usr/bin/{name}"

        def run_command(self, args, **kwargs):
            return newer_tools(self, args)

    qos = node_reads.read_qos(Module(), str(root), netdev, dev)  # node_validation and node_health share it
    assert "error" not in qos
    assert qos["trust"] == "dscp" and qos["pfc_priorities"] == [3]


def test_1_node_validation_module_passes_the_qos_check_on_a_newer_build(hgx, newer_tools):
    """The module itself, end to end on the newer mlnx_qos output: the QoS check of the RoCE rail passes (it
    reported an error on this output before), with the values read."""
    root, rails = hgx
    netdev, dev = rails[0]
    newer_tools.qos[netdev] = {"trust": "dscp", "pfc": [0, 0, 0, 1, 0, 0, 0, 0]}
    hw = run_module(nic_info_module.main, {"sysfs_root": str(root)})
    hw = {k: hw[k] for k in ("platform", "gpus", "nics", "rails", "nvswitches", "gpus_without_rail")}
    expect = {"qos": {"trust": "dscp", "pfc_priorities": [3]}}
    result = run_module(node_validation_module.main, {"sysfs_root": str(root), "hw": hw, "expect": expect})
    qos = [c for c in result["checks"] if c["check"] == "qos" and c["netdev"] == netdev]
    assert len(qos) == 1 and qos[0]["status"] == "pass", qos
    assert qos[0]["found"] == {"trust": "dscp", "pfc_priorities": [3]}


def test_node_validation_returns_the_same_files_in_its_read_back(tmp_path, hgx, newer_tools):
    """The validation read-back reads the result files in the same call (the report then does not read the host
    again): the same files, digests and errors as result_files, and nothing when not asked."""
    root, _rails = hgx
    hw = run_module(nic_info_module.main, {"sysfs_root": str(root)})
    hw = {k: hw[k] for k in ("platform", "gpus", "nics", "rails", "nvswitches", "gpus_without_rail")}
    results = tmp_path / "results"
    results.mkdir()
    (results / "discovery.json").write_text('{"rails": []}\n')
    (results / "notes.txt").write_text("not a result\n")
    args = {"sysfs_root": str(root), "hw": hw}
    assert "result_files" not in run_module(node_validation_module.main, args)
    read = run_module(node_validation_module.main, {**args, "result_files": {"path": str(results)}})
    assert read["result_files"] == run_module(result_files_module.main, {"path": str(results)})["files"]
    assert list(read["result_files"]) == ["discovery.json"]
    (results / "big.json").write_text("x" * 100)
    failed = run_module(node_validation_module.main, {**args, "result_files": {"path": str(results), "max_bytes": 10}},
                        expect=FailJson)
    assert failed["msg"] == (f"node_validation on {socket.gethostname()}: result_files: {results / 'big.json'} "
                             "is larger than max_bytes (10 bytes)")


# -- 2. ibdev2netdev through column -t -------------------------------------------------------------


def test_2_ibdev2netdev_column_aligned(real_outputs):
    lines = [line for line in (real_outputs / "ibdev2netdev-dgx-h100-aben20807.txt").read_text().splitlines()
             if "==>" in line and not line.startswith("#")]
    plain = rdma_tools.parse_ibdev2netdev("\n".join(lines))
    # What `ibdev2netdev | column -t` prints: every field padded to its column's width.
    fields = [line.split() for line in lines]
    widths = [max(len(f[i]) for f in fields) for i in range(len(fields[0]))]
    aligned = "\n".join("  ".join(f[i].ljust(widths[i]) for i in range(len(f))).rstrip() for f in fields)
    assert "  port  " in aligned or "   " in aligned
    assert rdma_tools.parse_ibdev2netdev(aligned) == plain
    assert plain[0]["port"] == 1 and plain[0]["state"] in ("Up", "Down")


def test_2_ibdev2netdev_unknown_line_still_fails():
    with pytest.raises(ParseError, match="==> <netdev>"):
        rdma_tools.parse_ibdev2netdev("mlx5_0    port  1  =>  ibp24s0  (Up)\n")


# -- 3. lspci -vvn numeric forms -------------------------------------------------------------------


def test_3_lspci_numeric_heading_lands_in_ids():
    text = ("19:00.0 0207: 15b3:1021\n"
            "\tSubsystem: 15b3:0041\n"
            "\tNUMA node: 0\n"
            "\tKernel driver in use: mlx5_core\n"
            "1b:00.0 0302: 10de:2330 (rev a1)\n")
    cx7, gpu = rdma_tools.parse_lspci(text)
    assert (cx7["class_id"], cx7["vendor_id"], cx7["device_id"]) == ("0207", "15b3", "1021")
    assert cx7["address"] == "0000:19:00.0" and cx7["details"]["kernel_driver"] == "mlx5_core"
    assert (gpu["class_id"], gpu["vendor_id"], gpu["device_id"], gpu["revision"]) == ("0302", "10de", "2330", "a1")


def test_3_lspci_named_heading_keeps_its_ids():
    record = rdma_tools.parse_lspci_heading(
        "19:00.0 Infiniband controller [0207]: Mellanox Technologies MT2910 Family [ConnectX-7] [15b3:1021]")
    assert (record["class"], record["class_id"], record["vendor_id"], record["device_id"]) == (
        "Infiniband controller", "0207", "15b3", "1021")
    plain = rdma_tools.parse_lspci_heading("19:00.0 Infiniband controller: Mellanox Technologies Device 1021")
    assert plain["class_id"] is None and plain["vendor_id"] is None


# -- 5. firmware-controlled DCBX: no `skipped` key, and the boot unit leaves PFC alone too ------


def test_5_firmware_dcbx_writes_ecn_reports_pfc_left_alone_not_skipped(hgx, newer_tools):
    root, rails = hgx
    netdev, dev = rails[0]
    newer_tools.dcbx = "Firmware controlled"
    result = run_module(roce_qos_module.main, {"sysfs_root": str(root), "interfaces": [
        {"netdev": netdev, "rdma_device": dev, **LOSSLESS}]})
    assert "skipped" not in result  # a truthy `skipped` makes Ansible show the task as skipped, changed=0
    assert result["changed"] is True
    assert "firmware controlled" in result["left_alone"][netdev]["pfc"]
    assert "pfc" not in result["interfaces"][netdev]
    assert not any("--pfc" in call for call in newer_tools.calls)
    ecn = root / "class" / "net" / netdev / "ecn" / "roce_np" / "enable"
    assert [(ecn / str(p)).read_text().strip() for p in range(8)] == list("00010000")


def _fake_mlnx_qos(tmp_path, dcbx):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "calls.log"
    for tool in ("mlnx_qos", "cma_roce_tos"):
        answer = (f"print('DCBX mode: {dcbx}\\nPriority trust state: dscp')" if tool == "mlnx_qos"
                  else "print(sys.argv[sys.argv.index('-t') + 1])")
        (bindir / tool).write_text(f"#!{sys.executable}\nimport sys\n"
                                   f"open({str(log)!r}, 'a').write(' '.join(['{tool}'] + sys.argv[1:]) + '\\n')\n"
                                   f"{answer}\n")
        (bindir / tool).chmod(0o755)
    return {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}, log


@pytest.mark.parametrize(("dcbx", "trust", "pfc_set"), [
    ("Firmware controlled", "dscp", False), ("Firmware controlled", None, False),
    ("OS controlled", "dscp", True), ("OS controlled", None, True)])
def test_5_boot_unit_follows_the_module_rule_on_pfc(hgx, tmp_path, dcbx, trust, pfc_set):
    root, rails = hgx
    netdev, dev = rails[0]
    env, log = _fake_mlnx_qos(tmp_path, dcbx)
    item = {"netdev": netdev, "rdma_device": dev, "pfc": [0, 0, 0, 1, 0, 0, 0, 0], "ecn_np": [3], "mtu": 9000}
    if trust:
        item["trust"] = trust
    config = tmp_path / "roce_qos.json"
    config.write_text(json.dumps({"sysfs_root": str(root), "interfaces": [item]}))
    proc = subprocess.run([sys.executable, str(QOS_APPLY), str(config)], capture_output=True, text=True,
                          check=False, timeout=120, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    calls = log.read_text().splitlines()
    assert (f"mlnx_qos -i {netdev} --pfc 0,0,0,1,0,0,0,0" in calls) is pfc_set
    assert ("PFC left alone: DCBX mode is 'Firmware controlled'" in proc.stdout) is not pfc_set
    # ECN and MTU are applied either way.
    assert (root / "class" / "net" / netdev / "mtu").read_text() == "9000\n"
    assert (root / "class" / "net" / netdev / "ecn" / "roce_np" / "enable" / "3").read_text() == "1\n"


# -- 12. QoS: every netdev checked before any is written, the real cause named ---------------------


def test_12_second_netdev_without_mtu_file_writes_nothing_and_names_the_cause(hgx, newer_tools):
    root, rails = hgx
    (first, first_dev), (second, second_dev) = rails[:2]
    (root / "class" / "net" / second / "mtu").unlink()
    result = run_module(roce_qos_module.main, {"sysfs_root": str(root), "interfaces": [
        {"netdev": first, "rdma_device": first_dev, **LOSSLESS},
        {"netdev": second, "rdma_device": second_dev, **LOSSLESS}]}, FailJson)
    mtu = root / "class" / "net" / second / "mtu"
    assert f"netdev {second}: {mtu} is absent (the netdev has no mtu attribute" in result["msg"]
    assert "DOCA-OFED" not in result["msg"] and "nothing was written" in result["msg"]
    assert result["msg"].startswith("roce_qos on ")
    # Nothing half-applied: the first netdev is as it was.
    assert (root / "class" / "net" / first / "mtu").read_text() != "9000\n"
    ecn = root / "class" / "net" / first / "ecn" / "roce_np" / "enable"
    assert [(ecn / str(p)).read_text().strip() for p in range(8)] != list("00010000")
    assert not any("--trust" in call or "--pfc" in call or "-t" in call for call in newer_tools.calls)


def test_12_tool_failing_midway_records_what_was_applied(hgx, newer_tools, monkeypatch):
    root, rails = hgx
    (first, first_dev), (second, second_dev) = rails[:2]

    def run(self, args, **kwargs):
        if args[0].endswith("mlnx_qos") and args[2] == second and "--trust" in args:
            return 1, "", "Netlink error: Operation not supported"
        return newer_tools(self, args)

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run)
    result = run_module(roce_qos_module.main, {"sysfs_root": str(root), "interfaces": [
        {"netdev": first, "rdma_device": first_dev, **LOSSLESS},
        {"netdev": second, "rdma_device": second_dev, **LOSSLESS}]}, FailJson)
    assert f"mlnx_qos -i {second} --trust dscp failed (rc 1): Netlink error" in result["msg"]
    assert f"{root}/class/net/{first}/mtu=9000" in result["applied"][first]
    assert second not in result["applied"]
    assert (root / "class" / "net" / first / "mtu").read_text() == "9000\n"


# -- 16. contradictions given to the roce_qos module directly --------------------------------------


@pytest.mark.parametrize(("change", "needle"), [
    ({"ecn_np": [3, 5]}, "ECN (ecn_np/ecn_rp) is enabled on priorities [5] that have no PFC"),
    ({"ecn_rp": [4]}, "ECN (ecn_np/ecn_rp) is enabled on priorities [4] that have no PFC"),
    ({"roce_tos": 160, "ecn_np": [3], "ecn_rp": [3]},
     "roce_tos 160 is DSCP 40, which the default dscp2prio map puts on priority 5, but PFC is on [3]"),
    ({"cnp_dscp": 26}, "cnp_dscp 26 equals the data DSCP of roce_tos 106"),
])
def test_16_module_refuses_contradictions_before_reading(hgx, newer_tools, change, needle):
    root, rails = hgx
    netdev, dev = rails[0]
    result = run_module(roce_qos_module.main, {"sysfs_root": str(root), "interfaces": [
        {"netdev": netdev, "rdma_device": dev, **LOSSLESS, **change}]}, FailJson)
    assert f"netdev {netdev}: {needle}" in result["msg"]
    assert newer_tools.calls == []
    assert (root / "class" / "net" / netdev / "mtu").read_text() != "9000\n"


def test_16_ecn_without_pfc_is_allowed_when_not_lossless(hgx, newer_tools):
    root, rails = hgx
    netdev, dev = rails[0]
    result = run_module(roce_qos_module.main, {"sysfs_root": str(root), "lossless": False, "interfaces": [
        {"netdev": netdev, "rdma_device": dev, **LOSSLESS, "pfc": [0] * 8}]})
    assert result["changed"] is True


# -- 17. messages that mislead ---------------------------------------------------------------------


def test_17_roce_qos_missing_sysfs_root(tmp_path, newer_tools):
    result = run_module(roce_qos_module.main, {"sysfs_root": str(tmp_path / "nope"), "interfaces": [
        {"netdev": "ens1np0", "trust": "dscp"}]}, FailJson)
    assert f"sysfs_root {tmp_path / 'nope'} does not exist" in result["msg"]


# -- 11. NV config: every device checked against its own query before any is written -------------

RAIL = "0000:18:00.0"
CARD_B = "0000:29:00.0"


@pytest.fixture
def mft(monkeypatch):
    fake = fake_mft.FakeMft().add_card("0000:18:00").add_card("0000:29:00", ports=2, link=2,
                                                               name="MCX755106AS-HEA_Ax")
    patch_exits(monkeypatch)
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, name, required=False, opt_dirs=None:
                        f"/usr/bin/{name}" if name in ("mlxconfig", "mlxreg") else None)
    monkeypatch.setattr(basic.AnsibleModule, "run_command", lambda self, argv, **kw: fake.run(argv))
    return fake


@pytest.mark.parametrize(("settings_b", "needle"), [
    ({"NUM_OF_VFS": 9999}, f"{CARD_B}: NUM_OF_VFS: 9999 is out of range 0..127"),
    ({"CNP_DSCP": 64}, f"{CARD_B}: CNP_DSCP_P1: 64 is out of range 0..63"),
    ({"LINK_TYPE": 7}, f"{CARD_B}: LINK_TYPE_P1: 7 is not one of IB(1), ETH(2), VPI(3)"),
])
def test_11_bad_value_on_card_b_writes_nothing_on_card_a(mft, settings_b, needle):
    result = run_module(mlxconfig_module.main, {"devices": [
        {"device": RAIL, "settings": {"NUM_OF_VFS": 4}},
        {"device": CARD_B, "settings": settings_b}]}, FailJson)
    assert needle in result["msg"] and "nothing was written" in result["msg"]
    assert not [call for call in mft.calls if "set" in call]
    assert mft.cards["0000:18:00"]["params"]["NUM_OF_VFS"]["next_boot"] == 16  # card A untouched


def test_11_tool_failing_midway_records_what_was_written_where(mft, monkeypatch):
    def run(self, argv, **kwargs):
        if "set" in argv and CARD_B in argv:
            return 1, "", "-E- Failed to set configuration: device busy\n"
        return mft.run(argv)

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run)
    result = run_module(mlxconfig_module.main, {"devices": [
        {"device": RAIL, "settings": {"NUM_OF_VFS": 4}},
        {"device": CARD_B, "settings": {"NUM_OF_VFS": 4}}]}, FailJson)
    assert f"{CARD_B}: mlxconfig set NUM_OF_VFS=4 failed: -E- Failed to set configuration" in result["msg"]
    assert f"already written for next boot: {RAIL}: NUM_OF_VFS=4" in result["msg"]
    assert result["written"] == {RAIL: {"NUM_OF_VFS": "4"}}
    assert result["reboot_required"] is True
    assert mft.cards["0000:18:00"]["params"]["NUM_OF_VFS"]["next_boot"] == 4


# -- 8. reboot_required when mlxconfig shows no current value --------------------------------------


def _next_boot_only(text):
    """A query as `mlxconfig q` prints it on tools that show the next-boot column only."""
    out = []
    for line in text.splitlines():
        if line.startswith("Configurations:"):
            out.append("Configurations:" + " " * 42 + "Next Boot")
            continue
        match = re.match(r"^(?P<star>[* ]{8})(?P<name>[A-Z][A-Z0-9_]+)\s+(\S+)\s+(\S+)\s+(?P<next>\S+)\s*$", line)
        out.append(f"        {match.group('name'):<44}{match.group('next')}" if match else line)
    return "\n".join(out) + "\n"


def test_8_no_current_column_means_reboot_required_unknown(mft, monkeypatch):
    def run(self, argv, **kwargs):
        rc, out, err = mft.run(argv)
        return (rc, _next_boot_only(out), err) if argv[-1] == "q" else (rc, out, err)

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run)
    # Next boot already holds the wish: nothing to write, and nothing known to be pending.
    result = run_module(mlxconfig_module.main, {"devices": [{"device": RAIL, "settings": {"NUM_OF_VFS": 16}}]})
    assert result["changed"] is False and result["pending"] == {}
    assert result["reboot_required"] is True
    assert result["reboot_unknown"] == {RAIL: ["NUM_OF_VFS"]}
    assert "unknown, treated as true: mlxconfig prints no current value" in result["reboot_reason"]
    assert f"{RAIL}: NUM_OF_VFS" in result["reboot_reason"]


def test_8_with_a_current_column_there_is_no_reason(mft):
    result = run_module(mlxconfig_module.main, {"devices": [{"device": RAIL, "settings": {"NUM_OF_VFS": 16}}]})
    assert result["reboot_required"] is False and result["reboot_unknown"] == {} and result["reboot_reason"] is None


# -- 14. nic_info: management interface that does not exist; unreadable/garbage vendor file --------


@pytest.fixture
def dgx_root(tmp_path):
    root = tmp_path / "sys"
    sim_sysfs.materialize(sim_profile.load_profile("dgx-h100"), root)
    return root


def test_14_management_interface_that_does_not_exist_fails(dgx_root, monkeypatch):
    patch_exits(monkeypatch)
    result = run_module(nic_info_module.main, {"sysfs_root": str(dgx_root), "management_interfaces": ["bnod0"]},
                        FailJson)
    assert f"management_interfaces bnod0: no such interface under {dgx_root}/class/net" in result["msg"]
    assert f"nic_info on {socket.gethostname()}: " in result["msg"]  # the host, then the variable
    assert "bond0" in result["msg"]  # the interfaces that do exist are listed


def test_14_detected_interfaces_outside_the_tree_are_ignored(dgx_root, monkeypatch):
    patch_exits(monkeypatch)
    result = run_module(nic_info_module.main, {"sysfs_root": str(dgx_root), "detected_interfaces": ["eth0", "bond0"]})
    roles = {n["pci_address"]: n["role"] for n in result["nics"]}
    assert roles["0000:29:00.1"] == "management"


@pytest.mark.parametrize("content", ["garbage\n", ""])
def test_14_garbage_or_empty_vendor_file_warns_with_the_path(dgx_root, monkeypatch, content):
    patch_exits(monkeypatch)
    vendor = dgx_root / "bus" / "pci" / "devices" / "0000:18:00.0" / "vendor"
    Path(os.path.realpath(vendor)).write_text(content)
    result = run_module(nic_info_module.main, {"sysfs_root": str(dgx_root)})
    notes = [n for n in result["discovery_warnings"] if str(vendor) in n]
    assert len(notes) == 1 and "0000:18:00.0 is left out of NIC and GPU discovery" in notes[0]
    assert ("holds 'garbage', not a hex PCI vendor id" if content else "unreadable or absent") in notes[0]
    assert "0000:18:00.0" not in {n["pci_address"] for n in result["nics"]}


# -- 15. gpu_info: nvidia_smi_path must exist ------------------------------------------------------


def test_15_nvidia_smi_path_that_does_not_exist_fails(dgx_root, tmp_path, monkeypatch):
    patch_exits(monkeypatch)
    result = run_module(gpu_info_module.main, {"sysfs_root": str(dgx_root),
                                               "nvidia_smi_path": str(tmp_path / "nvidia-smi")}, FailJson)
    assert f"nvidia_smi_path {tmp_path / 'nvidia-smi'} does not exist" in result["msg"]
    assert result["msg"].startswith("gpu_info on ")


# -- 17. sysfs_root that does not exist; ib_write_bw port -----------------------------------------


def test_17_sriov_vfs_missing_sysfs_root_says_so(tmp_path, monkeypatch):
    patch_exits(monkeypatch)
    result = run_module(sriov_vfs_module.main, {"sysfs_root": str(tmp_path / "nope"),
                                                "pfs": [{"pci_address": "0000:18:00.0", "num_vfs": 8}]}, FailJson)
    assert f"sysfs_root {tmp_path / 'nope'} does not exist" in result["msg"]
    assert "no such PCI device" not in result["msg"]


@pytest.mark.parametrize("port", [0, 65536, -1, 70000])
def test_17_ib_write_bw_port_is_validated_before_use(monkeypatch, port):
    patch_exits(monkeypatch)
    calls = []
    monkeypatch.setattr(basic.AnsibleModule, "run_command", lambda self, *a, **kw: calls.append(a) or (0, "", ""))
    result = run_module(ib_write_bw_module.main, {"servers": [{"id": "dgx01:0-hgx01:0", "device": "mlx5_0",
                                                               "port": port}]}, FailJson)
    assert (f"servers[0] (id dgx01:0-hgx01:0, device mlx5_0).port: expected a TCP port 1..65535, got {port}"
            in result["msg"])
    assert calls == []


# -- 6. label domains the kubelet refuses ----------------------------------------------------------


@pytest.mark.parametrize("domain", ["gpu.kubernetes.io", "kubernetes.io", "x.k8s.io"])
def test_6_label_domain_under_kubernetes_io_is_refused_at_render_time(domain):
    hw = {"gpus": [], "nics": [], "rails": [], "platform": {"product": "DGXH100"}}
    labels = k8s_filters.node_self_labels(hw, domain)
    with pytest.raises(k8s_objects.K8sObjectsError, match=f"kubernetes_node_label_domain '{re.escape(domain)}'") as err:
        k8s_filters.kubelet_node_labels(labels, "dgx01", domain)
    assert str(err.value).startswith("node dgx01: kubernetes_node_labels: ")  # the node (host) and the variable


def test_6_allowed_domains_and_hostname_label():
    assert k8s_objects.kubelet_label_errors({"node.kubernetes.io/x": "y"}, "node.kubernetes.io") == []
    assert k8s_objects.kubelet_label_errors({"gpunode.example.com/x": "y"}, "gpunode.example.com") == []
    errors = k8s_objects.kubelet_label_errors({"kubernetes.io/hostname": "other"}, "gpunode.example.com")
    assert errors and "set by the kubelet itself" in errors[0]
    # Through the filter the role renders with: refused naming the node and the variable.
    with pytest.raises(k8s_objects.K8sObjectsError) as err:
        k8s_filters.kubelet_node_labels({"kubernetes.io/hostname": "other", "gpunode.example.com/rack": "r1"},
                                        "hgx01", "gpunode.example.com")
    assert str(err.value) == ("node hgx01: kubernetes_node_labels: label 'kubernetes.io/hostname' is set by the "
                              "kubelet itself (from the node name); do not set it in kubernetes_node_labels")


# -- 10. an expired or invalid bootstrap token -----------------------------------------------------


def _join_failure_message(stderr, **variables):
    """Render the role's join-failure message as Ansible does, from roles/kubernetes_node/tasks/join_new.yml."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    loader = DataLoader()
    task = next(t for t in loader.load_from_file(str(REPO / "roles" / "kubernetes_node" / "tasks" / "join_new.yml"))
                if t["name"] == "Join | Report a failed join without the token")
    values = {"inventory_hostname": "hgx01", "kubernetes_node_join_token": "", "kubernetes_node_control_plane_host": "",
              "kubernetes_node_api_server": "10.0.0.1:6443", "__kubernetes_node_join": {"rc": 1, "stderr": stderr},
              **variables}
    values.update({k: trust_as_template(v) for k, v in task["vars"].items()})  # the task's own vars
    return Templar(loader=loader, variables=values).template(trust_as_template(task["ansible.builtin.fail"]["msg"]))


# What kubeadm (and the simulator's kubeadm, src/gpunode/sim/tools/kubeadm.py) prints for a refused token.
REFUSED = "error execution phase kubelet-start: the TLS bootstrap failed: Unauthorized"


def test_10_refused_user_token_says_expired_and_which_variable():
    msg = _join_failure_message(REFUSED, kubernetes_node_join_token="abcdef.0123456789abcdef")  # noqa: S106 - a fake token
    assert msg.startswith("hgx01: kubeadm join failed (rc 1): " + REFUSED)
    assert "refused the bootstrap token, probably because it expired" in msg
    assert "Set a fresh kubernetes_node_join_token" in msg and "kubernetes_node_control_plane_host" in msg
    assert "0123456789abcdef" not in msg


def test_10_refused_token_made_on_the_control_plane_names_that_host():
    msg = _join_failure_message(REFUSED, kubernetes_node_control_plane_host="cp01")
    assert "The token was created just now on cp01 (kubernetes_node_control_plane_host)" in msg


@pytest.mark.parametrize("stderr", [
    # kubeadm >= 1.2x discovery, after its retries (kubernetes-sigs/kueue#10296, kubernetes-sigs/kind#2798).
    'error execution phase preflight: couldn\'t validate the identity of the API Server: could not find a JWS '
    'signature in the cluster-info ConfigMap for token ID "abcdef"',
    # kubeadm 1.9 (kubernetes/kubeadm#668).
    '[discovery] Failed to connect to API Server "10.0.0.1:6443": there is no JWS signed token in the cluster-info '
    'ConfigMap. This token id "aec65f" is invalid for this cluster, can\'t connect',
])
def test_10_a_token_unknown_at_discovery_is_refused_too(stderr):
    msg = _join_failure_message(stderr, kubernetes_node_join_token="abcdef.0123456789abcdef")  # noqa: S106 - a fake token
    assert "refused the bootstrap token, probably because it expired" in msg
    assert "Set a fresh kubernetes_node_join_token" in msg


def test_10_other_join_failures_get_no_token_hint():
    msg = _join_failure_message("error execution phase preflight: [ERROR Swap]: running with swap on")
    assert "bootstrap token" not in msg and "running with swap on" in msg


# -- 4. openibd restart while nvidia_peermem is loaded ---------------------------------------------


@pytest.fixture
def simkernel_host(tmp_path, monkeypatch):
    from gpunode.sim import simkernel

    state = tmp_path / "state"
    (state / "sys").mkdir(parents=True)
    modules = tmp_path / "modules"
    modules.mkdir()
    deps = {"mlx_compat": "", "mlxfw": "mlx_compat", "ib_core": "mlx_compat", "mlx5_core": "mlx_compat,mlxfw",
            "ib_uverbs": "ib_core", "mlx5_ib": "mlx5_core,ib_core,ib_uverbs", "ib_umad": "ib_core", "iw_cm": "ib_core",
            "ib_cm": "ib_core", "rdma_cm": "ib_core,iw_cm,ib_cm", "rdma_ucm": "rdma_cm,ib_uverbs",
            "ib_ipoib": "ib_core,ib_cm", "nvidia": "", "nvidia_peermem": "nvidia,ib_core"}
    for name, depends in deps.items():
        (modules / f"{name}.ko").write_text(f"name={name}\nversion=1\ndepends={depends}\n")
    (tmp_path / "etc").mkdir()
    monkeypatch.setenv(simkernel.STATE_ENV, str(state))
    monkeypatch.setenv(simkernel.MODULE_DIR_ENV, str(modules))
    monkeypatch.setenv(simkernel.ETC_ENV, str(tmp_path / "etc"))
    return simkernel, state / "sys" / "module"


def test_4_the_simulated_kernel_refuses_like_a_real_one_and_the_role_sequence_works(simkernel_host):
    import io

    simkernel, modules = simkernel_host
    assert simkernel.openibd(["start"], out=io.StringIO()) == 0
    simkernel.load("nvidia_peermem")
    err = io.StringIO()
    assert simkernel.openibd(["restart"], out=io.StringIO(), err=err) == 1
    assert "modules nvidia_peermem" in err.getvalue() and "Unloading ib_core:" in err.getvalue()
    assert "[FAILED]" in err.getvalue()
    with pytest.raises(simkernel.ModuleError, match="Module ib_core is in use by: nvidia_peermem"):
        simkernel.unload("ib_core")
    # What the ofed role does before a consented restart: rmmod nvidia_peermem, restart, modprobe it again.
    assert simkernel.rmmod(["nvidia_peermem"], err=io.StringIO()) == 0
    assert (modules / "nvidia").is_dir()  # rmmod, not modprobe -r: the GPU driver stays
    assert simkernel.openibd(["restart"], out=io.StringIO(), err=io.StringIO()) == 0
    assert simkernel.modprobe(["nvidia_peermem"], out=io.StringIO(), err=io.StringIO()) == 0
    assert "nvidia_peermem" in {p.name for p in (modules / "ib_core" / "holders").iterdir()}


def test_4_restart_after_an_upgrade_fails_while_peermem_holds_the_old_ib_core(simkernel_host, tmp_path):
    import io

    simkernel, modules = simkernel_host
    assert simkernel.openibd(["start"], out=io.StringIO()) == 0
    simkernel.load("nvidia_peermem")
    for ko in (tmp_path / "modules").glob("*.ko"):  # a DOCA-OFED upgrade installs new module files
        if not ko.name.startswith("nvidia"):
            ko.write_text(ko.read_text().replace("version=1", "version=2"))
    err = io.StringIO()
    assert simkernel.openibd(["restart"], out=io.StringIO(), err=err) == 1
    assert "Unloading ib_core:" in err.getvalue() and "[FAILED]" in err.getvalue()
    # systemd starts again after a failed ExecStop: the start finds the old ib_core and fails too.
    err = io.StringIO()
    assert simkernel.openibd(["start"], out=io.StringIO(), err=err) == 1
    assert "loaded version 1 disagrees with the installed 2" in err.getvalue() and "[FAILED]" in err.getvalue()
    # The role's sequence instead: rmmod nvidia_peermem, restart, modprobe nvidia_peermem.
    assert simkernel.rmmod(["nvidia_peermem"], err=io.StringIO()) == 0
    assert simkernel.openibd(["restart"], out=io.StringIO(), err=io.StringIO()) == 0
    assert simkernel.modprobe(["nvidia_peermem"], out=io.StringIO(), err=io.StringIO()) == 0
    assert simkernel.loaded_version("ib_core") == "2" and simkernel.loaded("nvidia_peermem")


def test_4_ofed_role_unloads_peermem_around_the_restart_only():
    from ansible.parsing.dataloader import DataLoader

    tasks = DataLoader().load_from_file(str(REPO / "roles" / "ofed" / "tasks" / "service_apply.yml"))
    block = next(t for t in tasks if t.get("name") == "Service | Restart openibd with nvidia_peermem out of the way")
    assert block["when"] == "__ofed_needs_reload and ofed_allow_restart | bool"  # only a consented restart
    steps = [(t["name"], t.get("ansible.builtin.command", {}).get("argv"),
              t.get("ansible.builtin.systemd_service", {}).get("state")) for t in block["block"]]
    assert [s[1] or s[2] for s in steps[1:]] == [["rmmod", "nvidia_peermem"], "restarted",
                                                 ["modprobe", "nvidia_peermem"]]
    # A failed restart loads nvidia_peermem again (when it was loaded) before failing with the reason.
    rescue = block["rescue"]
    assert rescue[0]["ansible.builtin.command"]["argv"] == ["modprobe", "nvidia_peermem"]
    assert rescue[0]["when"] == "__ofed_peermem.stat.exists | default(false)"
    assert "ansible.builtin.fail" in rescue[-1] and "inventory_hostname" in rescue[-1]["ansible.builtin.fail"]["msg"]
