"""Fault injection: the simulator's faults make validation fail for exactly the affected hosts,
with the reason.

Three simulated hosts (vf-dgx, vf-hgx, vf-hgx2) are prepared on the controller (``fleet.prepare_state``:
profile, hw.json, sysfs) and converged through the simulated vendor tools (mlxconfig ``-y set``,
reboot promotion, mlxreg ROCE_ACCL, the NVIDIA driver and services' state). The node_validation
module's read-back (``observe``) then runs the simulated ``nvidia-smi``, ``mlxconfig`` and ``mlxreg``
as executables on PATH (``GPUNODE_SIM_STATE`` selects the host), the real ``dpkg-query`` against a
package database holding the fabric manager, and reads the host's sysfs tree. Faults come from
``gpunode sim fault`` (``hwstate.set_fault``): a rail link down, a NV config value that does not stick
at reboot, and one host's adaptive routing off (the incident).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from ansible_collections.mlplatform.gpunode.plugins.module_utils import validation
from ansible_collections.mlplatform.gpunode.plugins.module_utils.nic_roles import classify
from ansible_collections.mlplatform.gpunode.plugins.module_utils.nvconfig import config_of
from ansible_collections.mlplatform.gpunode.plugins.module_utils.pci_sysfs import read_sysfs
from local_play import free_port_block  # tests/unit is on sys.path (rootdir-relative import mode)
from simhost import tool_bin

from gpunode.sim import fleet, hwstate
from gpunode.sim.tools.state import HostState

pytestmark = pytest.mark.slow  # ansible-playbook runs on materialized hosts (README: slow tests)

REPO = Path(__file__).resolve().parents[2]
DRIVER = "570.172.08"
TOOLS = ("nvidia-smi", "mlxconfig", "mlxreg", "ib_write_bw")
PORTS = (18700, 18800)  # this suite's TCP ports; each run takes a free block (three hosts x 8 rails on one address)
HOSTS = {"vf-dgx": "dgx-h100", "vf-hgx": "hgx-h100", "vf-hgx2": "hgx-h100"}
EXPECT = {"driver_version": DRIVER, "link_layer": "Ethernet", "nv_config": {"LINK_TYPE_P1": "ETH", "NUM_OF_VFS": 8},
          "nv_config_settled": True, "roce_accl": {"adaptive_routing_forced_en": 1}}
spec = importlib.util.spec_from_file_location("node_validation", REPO / "plugins" / "modules" / "node_validation.py")
node_validation = importlib.util.module_from_spec(spec)
spec.loader.exec_module(node_validation)
spec = importlib.util.spec_from_file_location("ib_write_bw", REPO / "plugins" / "modules" / "ib_write_bw.py")
ib_write_bw = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ib_write_bw)


class Runner:
    """What node_validation.observe needs from AnsibleModule: tools on a PATH, argv runs."""

    def __init__(self, bindir: Path, env: dict):
        self.bindir, self.env = bindir, env

    def get_bin_path(self, name, required=False):
        path = self.bindir / name
        if path.exists():
            return str(path)
        return shutil.which(name) if name == "timeout" else None

    def run_command(self, argv, environ_update=None):
        proc = subprocess.run(argv, capture_output=True, text=True, env={**self.env, **(environ_update or {})},
                              check=False, timeout=60)
        return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture(scope="module")
def fleet_dir(tmp_path_factory):
    """The converged three-host fleet (a fresh one per test module)."""
    root = tmp_path_factory.mktemp("vf")
    bindir = tool_bin(root / "bin", TOOLS)
    # The real dpkg-query, reading a package database where the fabric manager is installed.
    admindir = root / "dpkg"
    (admindir / "info").mkdir(parents=True)
    (admindir / "status").write_text(
        "Package: nvidia-fabricmanager-570\nStatus: hold ok installed\nPriority: optional\nSection: misc\n"
        f"Maintainer: NVIDIA\nArchitecture: amd64\nVersion: {DRIVER}-1\nDescription: Fabric Manager\n\n")
    dpkg_query = shutil.which("dpkg-query")
    if dpkg_query:
        wrapper = bindir / "dpkg-query"
        wrapper.write_text(f"#!/bin/sh\nexec {dpkg_query} --admindir={admindir} \"$@\"\n")
        wrapper.chmod(0o755)
    userspace = root / "nvml-version"
    userspace.write_text(f"{DRIVER}\n")
    hosts = {}
    for name, profile in HOSTS.items():
        hdir = fleet.prepare_state(root / "state", fleet.HostSpec(name=name, profile=profile))
        hw = classify(read_sysfs(hdir / "sys"))
        hw["fabric_manager_required"] = bool(hw["nvswitches"])
        hosts[name] = {"dir": hdir, "hw": hw}
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "GPUNODE_SIM_NVIDIA_USERSPACE": str(userspace)}
    return {"root": root, "bindir": bindir, "env": env, "hosts": hosts}


def tool(fleet_dir, host, *argv):
    env = {**fleet_dir["env"], "GPUNODE_SIM_STATE": str(fleet_dir["hosts"][host]["dir"])}
    proc = subprocess.run([str(fleet_dir["bindir"] / argv[0]), *argv[1:]], capture_output=True, text=True, env=env,
                          check=False, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def converge(fleet_dir, host, adaptive_routing=1):
    """What the install and firmware stages leave behind, done with the simulated tools."""
    hdir = fleet_dir["hosts"][host]["dir"]
    for rail in fleet_dir["hosts"][host]["hw"]["rails"]:
        tool(fleet_dir, host, "mlxconfig", "-d", rail["pci_address"], "-y", "set", "LINK_TYPE_P1=ETH", "NUM_OF_VFS=8")
    hwstate.reboot_state(hdir)
    state = HostState(hdir)
    state.load_module("nvidia", DRIVER)
    state.load_module("nvidia_peermem", DRIVER)
    state.set_gpu_runtime(fabric_state="Completed", fabric_status="Success", persistence_mode=True)
    for rail in fleet_dir["hosts"][host]["hw"]["rails"]:
        tool(fleet_dir, host, "mlxreg", "-d", rail["pci_address"], "--reg_name", "ROCE_ACCL", "--set",
             f"adaptive_routing_forced_en={adaptive_routing}", "--yes")


def validate(fleet_dir, host):
    hdir = fleet_dir["hosts"][host]["dir"]
    runner = Runner(fleet_dir["bindir"], {**fleet_dir["env"], "GPUNODE_SIM_STATE": str(hdir)})
    hw = fleet_dir["hosts"][host]["hw"]
    observed = node_validation.observe(runner, str(hdir / "sys"), hw, EXPECT)
    return validation.verdict(validation.check_node(hw, observed, EXPECT), [])


@pytest.fixture(scope="module")
def faulted(fleet_dir):
    if not (fleet_dir["bindir"] / "dpkg-query").exists():
        pytest.skip("dpkg-query is needed for the fabric manager check")
    dgx_rail3 = fleet_dir["hosts"]["vf-dgx"]["hw"]["rails"][3]
    hgx_rail1 = fleet_dir["hosts"]["vf-hgx"]["hw"]["rails"][1]
    # not sticky: set before the converge's reboot, so NUM_OF_VFS=8 stays in next boot only
    hwstate.set_fault(fleet_dir["hosts"]["vf-hgx"]["dir"], "not_sticky", hgx_rail1["pci_address"],
                      params=["NUM_OF_VFS"])
    converge(fleet_dir, "vf-dgx")
    converge(fleet_dir, "vf-hgx")
    converge(fleet_dir, "vf-hgx2", adaptive_routing=0)
    hwstate.set_fault(fleet_dir["hosts"]["vf-dgx"]["dir"], "link_down", dgx_rail3["pci_address"])
    return {host: validate(fleet_dir, host) for host in HOSTS} | {"dgx_rail3": dgx_rail3, "hgx_rail1": hgx_rail1}


def test_each_fault_fails_exactly_its_host_with_the_reason(faulted):
    dgx_passed, dgx_failures = faulted["vf-dgx"]
    hgx_passed, hgx_failures = faulted["vf-hgx"]
    hgx2_passed, hgx2_failures = faulted["vf-hgx2"]
    rail3, rail1 = faulted["dgx_rail3"], faulted["hgx_rail1"]
    assert (dgx_passed, hgx_passed, hgx2_passed) == (False, False, False)
    assert dgx_failures == [f"rail 3 {rail3['pci_address']} ({rail3['netdev']}): link DOWN, expected ACTIVE"]
    assert hgx_failures == [
        f"rail 1 {rail1['pci_address']} ({rail1['netdev']}): NV config did not take effect: "
        "NUM_OF_VFS current 16, next boot 8",
        f"rail 1 {rail1['pci_address']} ({rail1['netdev']}): NV config NUM_OF_VFS current 16, desired 8 (next boot 8)",
    ]
    # adaptive routing off on every rail of vf-hgx2 only (the incident's mismatch)
    assert len(hgx2_failures) == 8
    assert all(f.endswith("ROCE_ACCL adaptive_routing_forced_en=0, declared 1") for f in hgx2_failures)


def test_the_host_read_judges_as_the_live_read_back_without_reading_the_rails_again(fleet_dir, faulted):
    """validation_reuse_host_read: the NV config and ROCE_ACCL that the host read (host_state's reader) holds give
    node_validation the same checks as reading every rail back, with the faults still in place, and no
    mlxconfig or mlxreg runs."""
    spec = importlib.util.spec_from_file_location("host_state", REPO / "plugins" / "modules" / "host_state.py")
    host_state = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(host_state)

    class Counting(Runner):
        def __init__(self, *args):
            super().__init__(*args)
            self.tools = []

        def run_command(self, argv, environ_update=None):
            self.tools.append(Path(argv[0]).name)
            return super().run_command(argv, environ_update)

    for host in HOSTS:
        hw, hdir = fleet_dir["hosts"][host]["hw"], fleet_dir["hosts"][host]["dir"]
        env = {**fleet_dir["env"], "GPUNODE_SIM_STATE": str(hdir)}
        reader = host_state.Reader(Runner(fleet_dir["bindir"], env))
        devices = [r["pci_address"] for r in hw["rails"]]
        blocks, nv_refused = reader.nv_config(devices)
        accl, accl_refused = reader.roce_accl(devices)
        state = {"nv_config": {d: config_of(b) for d, b in blocks.items()}, "nv_config_refused": nv_refused,
                 "roce_accl": accl, "roce_accl_refused": accl_refused, "qos": {}}
        known = validation.known_from_host_state(state, hw)
        assert sorted(known["nv_config"]) == sorted(devices) == sorted(known["roce_accl"])
        live = node_validation.observe(Runner(fleet_dir["bindir"], env), str(hdir / "sys"), hw, EXPECT)
        counting = Counting(fleet_dir["bindir"], env)
        reused = node_validation.observe(counting, str(hdir / "sys"), hw, EXPECT, known=known)
        assert validation.check_node(hw, reused, EXPECT) == validation.check_node(hw, live, EXPECT), host
        assert "mlxconfig" not in counting.tools and "mlxreg" not in counting.tools
        assert "nvidia-smi" in counting.tools  # the GPUs and the driver are read live
    assert validation.verdict(validation.check_node(hw, reused, EXPECT), [])[0] is False  # vf-hgx2: AR off


def test_clearing_the_faults_passes_every_host(fleet_dir, faulted):
    dgx_rail3 = faulted["dgx_rail3"]
    hwstate.set_fault(fleet_dir["hosts"]["vf-dgx"]["dir"], "link_down", dgx_rail3["pci_address"], clear=True)
    hwstate.set_fault(fleet_dir["hosts"]["vf-hgx"]["dir"], "not_sticky", faulted["hgx_rail1"]["pci_address"],
                      clear=True)
    for host in HOSTS:
        converge(fleet_dir, host)  # a second reboot promotes the value that did not stick before
    for host in HOSTS:
        assert validate(fleet_dir, host) == (True, []), host


def test_adaptive_routing_mismatch_fails_rdma_and_blames_the_odd_host(fleet_dir, faulted, monkeypatch):
    """After the other faults are cleared, vf-hgx2 alone turns adaptive routing off (the incident).
    The schedule's ring (vf-hgx -> vf-hgx2 -> vf-dgx -> vf-hgx) covers DGX<->HGX and HGX<->HGX;
    ib_write_bw fails on every rail of both of vf-hgx2's tests, as RDMA did, passes vf-dgx -> vf-hgx,
    and only vf-hgx2 is blamed, on both sides."""
    for host in HOSTS:
        converge(fleet_dir, host, adaptive_routing=0 if host == "vf-hgx2" else 1)
    hws = {h: fleet_dir["hosts"][h]["hw"] for h in HOSTS}
    hosts = {h: {"fabric": "default", "platform": validation.platform_key(hw), "rails": hw["rails"]}
             for h, hw in hws.items()}
    # every simulated host listens on this machine: one address, distinct ports
    tests = validation.bandwidth_schedule(hosts, order=list(HOSTS), base_port=free_port_block(*PORTS, 8 * len(HOSTS)),
                                          addresses=dict.fromkeys(HOSTS, "127.0.0.1"))["tests"]
    assert {(t["server"], t["client"]) for t in tests} == {("vf-hgx", "vf-hgx2"), ("vf-hgx2", "vf-dgx"),
                                                           ("vf-dgx", "vf-hgx")}
    results = {}
    for server in sorted({t["server"] for t in tests}):
        monkeypatch.setenv("GPUNODE_SIM_STATE", str(fleet_dir["hosts"][server]["dir"]))
        monkeypatch.setenv("PYTHONPATH", str(REPO / "src"))
        runner = Runner(fleet_dir["bindir"], {**fleet_dir["env"]})
        ib_write_bw._start_servers(runner, str(fleet_dir["bindir"] / "ib_write_bw"),
                                   [{"id": t["id"], "device": t["server_device"], "port": t["port"]}
                                    for t in tests if t["server"] == server], [], 60)
    for client in sorted({t["client"] for t in tests}):
        runner = Runner(fleet_dir["bindir"], {**fleet_dir["env"],
                                              "GPUNODE_SIM_STATE": str(fleet_dir["hosts"][client]["dir"])})
        for t in tests:
            if t["client"] == client:
                results[t["id"]] = ib_write_bw._run_client(
                    runner, str(fleet_dir["bindir"] / "ib_write_bw"),
                    {"id": t["id"], "device": t["client_device"], "port": t["port"], "server": "127.0.0.1"}, [], 60, 10)
    judged = validation.judge_pairs(tests, results, 90)
    verdicts = {h: validation.verdict([], judged.get(h, [])) for h in HOSTS}
    assert verdicts["vf-dgx"] == (True, [])
    assert verdicts["vf-hgx"] == (True, [])  # it passed every rail with vf-dgx
    passed, failures = verdicts["vf-hgx2"]
    assert not passed and len(failures) == 16
    assert sum(" as client <-> vf-hgx " in f for f in failures) == 8
    assert sum(" as server <-> vf-dgx " in f for f in failures) == 8
    assert all("ib_write_bw failed" in f for f in failures)
    dgx_serves = [p for p in judged["vf-dgx"] if p["side"] == "server"]
    assert len(dgx_serves) == 8 and all(p["status"] == "pass" and p["gbps"] >= 0.9 * 400 for p in dgx_serves)
    assert all(p["failed_side"] == "server" and not p["blamed"] for p in judged["vf-dgx"] if p["side"] == "client")
