"""host_state: the parsers (dpkg-query, apt-cache madison, systemctl show), the file digests, and the
module's one read on a simulated host's sysfs tree and tools."""

from __future__ import annotations

import hashlib
import os
import socket

import pytest
from ansible.module_utils import basic
from ansible_collections.mlplatform.gpunode.plugins.module_utils import host_state as hs
from ansible_collections.mlplatform.gpunode.plugins.module_utils.parsing import ParseError
from ansible_collections.mlplatform.gpunode.plugins.modules import host_state
from module_harness import ExitJson, FailJson, patch_exits, run_module

HOST = socket.gethostname()  # every module error names the host (module_utils/host_errors.py)

simhost = pytest.importorskip("simhost")
REAL_RUN_COMMAND = basic.AnsibleModule.run_command  # before the fixtures patch it

DPKG = (
    "doca-ofed\t2.9.0-1\thold\tinstalled\n"
    "mft\t4.30.0-139\thold\tinstalled\n"
    "nvidia-driver-550-server\t550.127.08-0ubuntu1\tinstall\tinstalled\n"
    "old-thing\t1.0\thold\tconfig-files\n"
    "removed\t\tdeinstall\tnot-installed\n"
)
# apt-cache(8) madison, column-aligned as apt prints it.
MADISON = (
    " doca-ofed |    2.9.0-1 | file:/srv/gpunode-repo/doca ./ Packages\n"
    " doca-ofed |    2.8.0-2 | file:/srv/gpunode-repo/doca ./ Packages\n"
    " doca-ofed |    2.9.0-1 | file:/srv/gpunode-repo/doca ./ Sources\n"
)
SYSTEMCTL = (
    "Id=openibd.service\nLoadState=loaded\nActiveState=active\nUnitFileState=enabled\n\n"
    "Id=kubelet.service\nLoadState=not-found\nActiveState=inactive\nUnitFileState=\n\n"
    "Id=gpunode-sriov.service\nLoadState=masked\nActiveState=inactive\nUnitFileState=masked\n"
)


def test_dpkg_query_installed_versions_and_holds():
    parsed = hs.parse_dpkg_query(DPKG)
    assert parsed["packages"] == {"doca-ofed": "2.9.0-1", "mft": "4.30.0-139",
                                  "nvidia-driver-550-server": "550.127.08-0ubuntu1"}
    # A hold counts whatever the status (apt-mark showhold lists it too); a removed package is not installed.
    assert parsed["held"] == ["doca-ofed", "mft", "old-thing"]


def test_dpkg_query_unknown_line_is_an_error():
    with pytest.raises(ParseError, match="line 2: expected 4 tab-separated fields"):
        hs.parse_dpkg_query("a\t1\tinstall\tinstalled\nbroken line\n")


def test_madison_versions_in_apt_order_without_repeats():
    assert hs.parse_madison(MADISON) == {"doca-ofed": ["2.9.0-1", "2.8.0-2"]}
    assert hs.parse_madison("") == {}
    with pytest.raises(ParseError, match="package \\| version \\| source"):
        hs.parse_madison("doca-ofed 2.9.0-1\n")


def test_systemctl_show_blocks_in_order():
    units = hs.parse_systemctl_show(SYSTEMCTL, ["openibd.service", "kubelet.service", "gpunode-sriov.service"])
    assert units == {
        "openibd.service": {"enabled": "enabled", "active": "active", "load": "loaded"},
        "kubelet.service": {"enabled": "not-found", "active": "inactive", "load": "not-found"},
        "gpunode-sriov.service": {"enabled": "masked", "active": "inactive", "load": "masked"},
    }
    with pytest.raises(ParseError, match="2 unit blocks expected, got 3"):
        hs.parse_systemctl_show(SYSTEMCTL, ["a.service", "b.service"])


def _tree(root):
    (root / "etc/systemd/system/systemd-modules-load.service.d").mkdir(parents=True)
    (root / "etc/systemd/system/gpunode-sriov.service").write_text("[Unit]\n")
    (root / "etc/systemd/system/other.service").write_text("[Unit]\n")
    (root / "etc/systemd/system/systemd-modules-load.service.d/gpunode-after-openibd.conf").write_text("x\n")
    (root / "etc/gpunode/sub").mkdir(parents=True)
    (root / "etc/gpunode/roce-accl.conf").write_text("accl\n")
    (root / "etc/gpunode/sub/nested.json").write_text("{}\n")
    os.chmod(root / "etc/gpunode/roce-accl.conf", 0o600)


def test_read_files_digests_modes_and_globs(tmp_path):
    _tree(tmp_path)
    files = hs.read_files(hs.DEFAULT_FILES, str(tmp_path))
    assert sorted(files) == [
        "/etc/gpunode/roce-accl.conf",
        "/etc/gpunode/sub/nested.json",
        "/etc/systemd/system/gpunode-sriov.service",
        "/etc/systemd/system/systemd-modules-load.service.d/gpunode-after-openibd.conf",
    ]
    entry = files["/etc/gpunode/roce-accl.conf"]
    assert entry["sha256"] == hashlib.sha256(b"accl\n").hexdigest()
    assert entry["mode"] == "0600"
    assert entry["owner"] and entry["group"]
    assert hs.unit_names(files, ["openibd.service"]) == ["gpunode-sriov.service", "openibd.service"]
    with pytest.raises(ValueError, match="not an absolute path"):
        hs.read_files(["etc/gpunode/*"], str(tmp_path))


def test_kernel_modules_loaded_and_versions(tmp_path):
    (tmp_path / "module/mlx5_core").mkdir(parents=True)
    (tmp_path / "module/mlx5_core/version").write_text("24.10-1.1.4\n")
    (tmp_path / "module/nvidia_peermem").mkdir(parents=True)
    assert hs.read_kernel_modules(str(tmp_path), ["mlx5_core", "nvidia_peermem", "nvidia"]) == {
        "mlx5_core": {"loaded": True, "version": "24.10-1.1.4"},
        "nvidia_peermem": {"loaded": True, "version": None},
        "nvidia": {"loaded": False, "version": None},
    }


# -- the module: one read on a simulated host ---------------------------------------------------------

SIM_TOOLS = {"mlxconfig", "mlxreg", "mlnx_qos", "cma_roce_tos", "lldpctl", "ibnetdiscover"}


@pytest.fixture
def sim(tmp_path, monkeypatch):
    host = simhost.make_host(tmp_path / "hgx", "hgx-h100")
    (tmp_path / "lldpd").write_text("")
    monkeypatch.setenv("GPUNODE_SIM_LLDPD", str(tmp_path / "lldpd"))  # Debian's lldpd "installed"
    calls = []

    def run_command(self, argv, **kwargs):
        if argv[0] == "/usr/bin/timeout":  # timeout -k 5 <seconds> <argv>: every tool runs under timeout(1)
            assert argv[1:3] == ["-k", "5"] and argv[3].isdigit(), argv
            argv = argv[4:]
        tool = argv[0].rsplit("/", 1)[-1]
        calls.append([tool, *argv[1:]])
        if tool in SIM_TOOLS:
            res = simhost.run_tool(host, tool, *argv[1:])
            return res.rc, res.out, res.err
        if tool == "dpkg-query":
            return 0, DPKG, ""
        if tool == "apt-cache" and argv[1] == "pkgnames":
            names = "nvidia-driver-550-server\nnvidia-driver-550-server-open\n"
            return 0, names if argv[2] == "nvidia-driver-" else "", ""
        if tool == "apt-cache":
            return 0, MADISON if "doca-ofed" in argv else "", ""
        if tool == "systemctl":
            units = argv[3:]
            return 0, "\n".join(f"Id={u}\nLoadState=loaded\nActiveState=active\nUnitFileState=enabled\n"
                                for u in units), ""
        raise AssertionError(f"unexpected command {argv}")

    def get_bin_path(self, name, required=False, opt_dirs=None):
        return None if name in ("nvidia-smi", "mstconfig", "ibnetdiscover") else f"/usr/bin/{name}"

    patch_exits(monkeypatch)
    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", get_bin_path)
    files_root = tmp_path / "root"
    _tree(files_root)
    return {"host": host, "calls": calls, "files_root": files_root}


def read(sim, **extra):
    args = {"sysfs_root": str(sim["host"] / "sys"), "root": str(sim["files_root"]),
            "apt_packages": ["doca-ofed"], **extra}
    return run_module(host_state.main, args)


def test_one_read_returns_every_part(sim):
    result = read(sim)
    state = result["host_state"]
    assert result["changed"] is False
    hw = state["hardware"]
    assert [r["rail"] for r in hw["rails"]] == list(range(8))
    rails = [r["pci_address"] for r in hw["rails"]]
    assert state["packages"]["doca-ofed"] == "2.9.0-1" and "doca-ofed" in state["held"]
    assert state["apt_candidates"] == {"doca-ofed": ["2.9.0-1", "2.8.0-2"]}
    assert "/etc/systemd/system/gpunode-sriov.service" in state["files"]
    assert state["units"]["gpunode-sriov.service"]["enabled"] == "enabled"
    assert set(state["units"]) >= set(hs.DEFAULT_UNITS)
    # NV config of every non-ignored NIC, as mlxconfig -e q prints it (default/current/next boot).
    assert set(rails) <= set(state["nv_config"])
    assert state["nv_config"][rails[0]]["SRIOV_EN"]["current"] is not None
    assert state["nv_config_pending"] == {}
    # ROCE_ACCL of the compute rails only.
    assert sorted(state["roce_accl"]) == sorted(rails)
    assert "adaptive_routing_forced_en" in state["roce_accl"][rails[0]]
    # VF counts from sysfs; QoS of every Ethernet compute netdev.
    nic0 = next(n for n in hw["nics"] if n["pci_address"] == rails[0])
    assert state["vfs"][rails[0]] == {"numvfs": 0, "totalvfs": nic0["sriov_totalvfs"]}
    ethernet = [n["netdev"] for n in hw["nics"] if n["role"] == "compute" and n["link_layer"] == "Ethernet"]
    assert sorted(state["qos"]) == sorted(ethernet)
    if ethernet:
        assert set(state["qos"][ethernet[0]]) >= {"trust", "pfc", "ecn_np", "cnp_dscp", "roce_tos", "mtu"}
    assert state["gpu_driver"] == {"loaded": False, "driver_version": None, "persistence_mode": None,
                                   "fabric_state": None, "error": None, "gpu_count": 0}
    assert state["tools"]["nvidia-smi"] is None
    # The switch port at the far end of every rail, from one lldpctl (the simulator's default wiring).
    assert state["neighbours"]["sources"] == {"lldp": "ok"}
    assert state["neighbours"]["rails"][rails[3]] == {"switch": "su1-leaf3", "switch_id": state["neighbours"][
        "rails"][rails[3]]["switch_id"], "port": "swp1", "via": "lldp"}
    assert sorted(state["neighbours"]["rails"]) == sorted(rails)
    # One dpkg-query, one madison, one systemctl show and one lldpctl per read, whatever the NIC count.
    tools = [c[0] for c in sim["calls"]]
    assert (tools.count("dpkg-query"), tools.count("apt-cache"), tools.count("systemctl"),
            tools.count("lldpctl")) == (1, 1, 1, 1)


def test_device_reads_run_side_by_side_once_each_with_the_same_answer(sim, monkeypatch):
    """read_workers: the per-device vendor reads overlap (at most that many at once), each command still runs
    once, and the host state is the same as read one device after the other."""
    import threading
    import time

    inner = basic.AnsibleModule.run_command
    lock, active, peak = threading.Lock(), [0], [0]

    def overlapping(self, argv, **kwargs):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        try:
            time.sleep(0.01)  # long enough for the pool's other threads to start theirs
            return inner(self, argv, **kwargs)
        finally:
            with lock:
                active[0] -= 1

    monkeypatch.setattr(basic.AnsibleModule, "run_command", overlapping)
    one_by_one = read(sim, read_workers=1)["host_state"]
    assert peak[0] == 1
    calls_one_by_one = sorted(map(tuple, sim["calls"]))
    sim["calls"].clear()
    side_by_side = read(sim, read_workers=4)["host_state"]
    assert 1 < peak[0] <= 4
    assert side_by_side == one_by_one
    # The same commands, each once per read: a prefetched answer is taken, not run again.
    assert sorted(map(tuple, sim["calls"])) == calls_one_by_one
    devices = [n["pci_address"] for n in one_by_one["hardware"]["nics"] if n["role"] != "ignored"]
    mlxconfig = [c for c in sim["calls"] if c[0] == "mlxconfig"]
    assert sorted(c[2] for c in mlxconfig) == sorted(devices)


def test_prefetched_answers_are_taken_once():
    from ansible_collections.mlplatform.gpunode.plugins.module_utils import node_reads

    runs = []

    class Module:
        def run_command(self, argv, environ_update=None, handle_exceptions=True):
            runs.append(list(argv))
            return 0, f"{' '.join(argv)} #{len(runs)}", ""

    module = Module()
    node_reads.prefetch(module, [["a", "1"], ["b"], ["a", "1"]], workers=4)
    assert sorted(runs) == [["a", "1"], ["b"]]  # the same argv twice is run once
    assert node_reads.run(module, ["a", "1"])[1].startswith("a 1 #")
    assert node_reads.run(module, ["a", "1"]) == (0, "a 1 #3", "")  # taken once; the next run is a new run
    # One command, or one worker, runs nothing ahead.
    node_reads.prefetch(module, [["c"]], workers=4)
    node_reads.prefetch(module, [["d"], ["e"]], workers=1)
    assert len(runs) == 3


def test_prefetch_reads_one_card_at_a_time_and_leaves_a_command_that_cannot_start_to_run():
    """Both functions of a dual-port card (and mlxconfig and mlxreg on one function) share the card's firmware
    semaphore: their commands run one after the other, other cards alongside. A command that cannot start is
    not kept: run() starts it again and reports its error as it would have (no fail_json from a thread)."""
    import threading
    import time

    from ansible_collections.mlplatform.gpunode.plugins.module_utils import node_reads

    lock, active, overlap = threading.Lock(), {}, []

    class Module:
        def run_command(self, argv, environ_update=None, handle_exceptions=True):
            card = node_reads.card_of(argv)
            with lock:
                if active.get(card):
                    overlap.append(card)
                active[card] = active.get(card, 0) + 1
            time.sleep(0.01)
            with lock:
                active[card] -= 1
            if argv[0] == "missing":
                raise OSError(2, "No such file or directory")
            return 0, " ".join(argv), ""

    assert node_reads.card_of(["mlxconfig", "-d", "0000:18:00.1", "-e", "q"]) == "0000:18:00"
    assert node_reads.card_of(["mlnx_qos", "-i", "eth0"]) == ("mlnx_qos", "-i", "eth0")
    module = Module()
    argvs = [["mlxconfig", "-d", "0000:18:00.0", "-e", "q"], ["mlxconfig", "-d", "0000:18:00.1", "-e", "q"],
             ["mlxreg", "-d", "0000:18:00.0", "--reg_name", "ROCE_ACCL", "--get"],
             ["mlxconfig", "-d", "0000:29:00.0", "-e", "q"], ["missing", "-i", "eth0"]]
    node_reads.prefetch(module, argvs, workers=8)
    assert overlap == []
    kept = getattr(module, node_reads._PREFETCHED)
    assert sorted(kept) == sorted(tuple(a) for a in argvs[:4])
    with pytest.raises(OSError):
        node_reads.run(module, ["missing", "-i", "eth0"])


def test_read_sees_a_pending_nv_config_and_a_vf_change(sim):
    first = read(sim)["host_state"]
    rail = first["hardware"]["rails"][0]["pci_address"]
    res = simhost.run_tool(sim["host"], "mlxconfig", "-d", rail, "-y", "set", "NUM_OF_VFS=4")
    assert res.rc == 0, res.err
    numvfs = sim["host"] / "sys" / "bus" / "pci" / "devices" / rail / "sriov_numvfs"
    numvfs.write_text("2\n")
    again = read(sim)["host_state"]
    assert again["nv_config_pending"] == {rail: ["NUM_OF_VFS"]}
    assert again["nv_config"][rail]["NUM_OF_VFS"]["next_boot"] == "4"
    assert again["vfs"][rail]["numvfs"] == 2


def test_missing_vendor_tools_leave_their_parts_empty(sim, monkeypatch):
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, name, required=False, opt_dirs=None:
                        f"/usr/bin/{name}" if name in ("dpkg-query", "systemctl") else None)
    state = read(sim)["host_state"]
    assert state["nv_config"] == {} and state["roce_accl"] == {} and state["qos"] == {}
    assert state["apt_candidates"] == {}
    assert state["tools"]["mlxconfig"] is None
    assert state["hardware"]["rails"]
    # Without lldpd no neighbour is known, and the read says why.
    assert state["neighbours"] == {"rails": {}, "sources": {"lldp": "missing"}}


def test_lldp_off_leaves_the_rails_without_neighbours(sim):
    from gpunode.sim import hwstate

    hwstate.set_fault(sim["host"], "lldp_off", "-")
    assert read(sim)["host_state"]["neighbours"] == {"rails": {}, "sources": {"lldp": "ok"}}
    assert read(sim, neighbours=False)["host_state"]["neighbours"] == {"rails": {}, "sources": {}}


def test_unreadable_package_database_fails_naming_it(sim, monkeypatch):
    original = basic.AnsibleModule.run_command

    def broken(self, argv, **kwargs):
        if argv[4].endswith("dpkg-query"):  # under timeout -k 5 <seconds>
            return 0, "garbage\n", ""
        return original(self, argv, **kwargs)

    monkeypatch.setattr(basic.AnsibleModule, "run_command", broken)
    args = {"sysfs_root": str(sim["host"] / "sys"), "root": str(sim["files_root"])}
    result = run_module(host_state.main, args, FailJson)
    assert "cannot read the package database" in result["msg"]


def test_apt_prefix_is_expanded_in_the_same_run(sim):
    read(sim, apt_packages=["doca-ofed", "nvidia-driver-*"])
    madison = [c for c in sim["calls"] if c[:2] == ["apt-cache", "madison"]]
    assert madison == [["apt-cache", "madison", "doca-ofed", "nvidia-driver-550-server",
                        "nvidia-driver-550-server-open"]]


def test_check_mode_reads_the_same(sim):
    assert read(sim, _ansible_check_mode=True)["host_state"]["nv_config"] == read(sim)["host_state"]["nv_config"]


def test_bad_sysfs_root_fails(sim, tmp_path):
    result = run_module(host_state.main, {"sysfs_root": str(tmp_path / "nope")}, FailJson)
    assert result["msg"].startswith(f"host_state on {HOST}: ")
    assert ExitJson is not None


def test_read_contents_returns_text_none_for_missing_and_names_bad_paths(tmp_path):
    from ansible_collections.mlplatform.gpunode.plugins.module_utils import host_state as hs

    (tmp_path / "var").mkdir()
    (tmp_path / "var" / "reboot.json").write_text('{"required": false}\n')
    out = hs.read_contents(["/var/reboot.json", "/var/missing.json"], str(tmp_path))
    assert out == {"/var/reboot.json": '{"required": false}\n', "/var/missing.json": None}
    with pytest.raises(ValueError, match="contents: /var: "):
        hs.read_contents(["/var"], str(tmp_path))
    with pytest.raises(ValueError, match="not an absolute path"):
        hs.read_contents(["var/reboot.json"], str(tmp_path))
    (tmp_path / "var" / "big").write_bytes(b"x" * (hs.CONTENTS_LIMIT + 1))
    with pytest.raises(ValueError, match="larger than"):
        hs.read_contents(["/var/big"], str(tmp_path))


CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480C

processor\t: 1
vendor_id\t: GenuineIntel

processor\t: 2
vendor_id\t: GenuineIntel
"""
MEMINFO = "MemTotal:       2113261760 kB\nMemFree:        2090000000 kB\nHugePages_Total:       0\n"


def test_capacity_counts_as_the_setup_module_does():
    # processor_vcpus: one "processor" entry a logical CPU; memtotal_mb: MemTotal kB // 1024.
    assert hs.parse_capacity(CPUINFO, MEMINFO) == {"cpu": 3, "memory_mib": 2063732}
    assert hs.parse_capacity("", "MemFree: 1 kB\n") == {"cpu": None, "memory_mib": None}


def test_read_returns_the_capacity(sim):
    proc = sim["files_root"] / "proc"
    proc.mkdir(parents=True, exist_ok=True)
    (proc / "cpuinfo").write_text(CPUINFO)
    (proc / "meminfo").write_text(MEMINFO)
    assert read(sim)["host_state"]["capacity"] == {"cpu": 3, "memory_mib": 2063732}


def test_detect_management_collects_the_network_facts_in_the_same_read(sim, monkeypatch):
    """The read collects Ansible's network facts itself (this machine's real ones: no separate gather) and counts
    the default routes' interfaces and the one holding the connection address as management."""
    import json
    import subprocess

    fake = basic.AnsibleModule.run_command

    def run_command(self, argv, *args, **kwargs):
        tool = argv[0].rsplit("/", 1)[-1] if isinstance(argv, list) else str(argv).split()[0].rsplit("/", 1)[-1]
        if tool in ("ip", "ethtool"):  # the network fact collector's commands run for real
            return REAL_RUN_COMMAND(self, argv, *args, **kwargs)
        return fake(self, argv, *args, **kwargs)

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path",
                        lambda self, name, required=False, opt_dirs=None:
                        None if name in ("nvidia-smi", "mstconfig") else
                        (__import__("shutil").which(name) if name in ("ip", "ethtool") else f"/usr/bin/{name}"))
    routes = json.loads(subprocess.run(["ip", "-j", "route", "show", "default"], capture_output=True, text=True,
                                       check=True).stdout or "[]")
    expected_default = [r["dev"] for r in routes if r.get("dev")][:1]
    result = read(sim, detect_management=True, connection_address="127.0.0.1")
    management = result["host_state"]["management"]
    assert management["default_route"][:1] == expected_default
    assert management["connection"] == ["lo"] and management["connection_address"] == "127.0.0.1"
    assert management["interfaces"] == list(dict.fromkeys(management["default_route"] + ["lo"]))
    facts = result["ansible_facts"]
    assert facts["ansible_default_ipv4"].get("interface") == (expected_default or [None])[0]
    assert "lo" in facts["ansible_interfaces"] and facts["ansible_distribution"]
    # Without the option: no facts, no management entry.
    plain = read(sim)
    assert plain["ansible_facts"] == {} and plain["host_state"]["management"] is None


def test_infiniband_rails_get_their_switch_port_from_one_ibnetdiscover(tmp_path, monkeypatch):
    """A DGX H100 whose rails are InfiniBand: one ibnetdiscover, each HCA matched by its node GUID."""
    host = simhost.make_host(tmp_path / "dgx", "dgx-h100")
    calls = []

    def run_command(self, argv, **kwargs):
        tool = argv[0].rsplit("/", 1)[-1]
        calls.append(tool)
        if tool in SIM_TOOLS:
            res = simhost.run_tool(host, tool, *argv[1:])
            return res.rc, res.out, res.err
        return 0, "", ""

    patch_exits(monkeypatch)
    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, name, required=False, opt_dirs=None:
                        f"/usr/bin/{name}" if name in ("ibnetdiscover", "lldpctl") else None)
    state = run_module(host_state.main, {"sysfs_root": str(host / "sys"), "root": str(tmp_path)})["host_state"]
    rails = state["hardware"]["rails"]
    ib = [r for r in rails if r.get("link_layer") == "InfiniBand"]
    assert ib, "the DGX profile's rails come up as InfiniBand"
    assert state["neighbours"]["sources"]["ibnetdiscover"] == "ok"
    first = state["neighbours"]["rails"][ib[0]["pci_address"]]
    assert first["switch"] == f"su1-leaf{ib[0]['rail']}" and first["via"] == "ibnetdiscover"
    assert first["port"] == 1  # swp<host index + 1>, as a number on an InfiniBand switch
    assert len(state["neighbours"]["rails"]) == len(ib) and calls.count("ibnetdiscover") == 1


def test_a_failing_neighbour_tool_is_recorded_not_fatal(sim, monkeypatch, tmp_path):
    monkeypatch.setenv("GPUNODE_SIM_LLDPD", str(tmp_path / "not-installed"))
    state = read(sim)["host_state"]
    assert state["neighbours"]["rails"] == {}
    assert state["neighbours"]["sources"]["lldp"].startswith("lldpctl: lldpd is not installed")


def test_a_prefetched_answer_without_any_output_runs_again_alone():
    """ansible-core's run_command can lose a child's output (ansible/ansible#51393: select() times out, the child
    writes and exits, poll() sees it exited, the pipes are not read again); the read threads make that likely. An
    answer of status 0 with no output at all is not kept: run() runs the command again and gets its output."""
    from ansible_collections.mlplatform.gpunode.plugins.module_utils import node_reads

    runs = []

    class Module:
        def run_command(self, argv, environ_update=None, handle_exceptions=True):
            runs.append(list(argv))
            if argv[0] == "mlnx_qos" and len([r for r in runs if r[0] == "mlnx_qos"]) == 1:
                return 0, "", ""  # the lost output
            if argv[0] == "quiet":
                return 1, "", ""  # a failure without output is an answer, kept
            return 0, f"{' '.join(argv)} output", ""

    module = Module()
    node_reads.prefetch(module, [["mlnx_qos", "-i", "eth0"], ["cma_roce_tos", "-d", "mlx5_0"], ["quiet"]],
                        workers=4)
    assert sorted(getattr(module, node_reads._PREFETCHED)) == [("cma_roce_tos", "-d", "mlx5_0"), ("quiet",)]
    assert node_reads.run(module, ["mlnx_qos", "-i", "eth0"]) == (0, "mlnx_qos -i eth0 output", "")
    assert node_reads.run(module, ["quiet"]) == (1, "", "")
    assert [r[0] for r in runs].count("mlnx_qos") == 2 and [r[0] for r in runs].count("quiet") == 1


def test_a_tool_that_hangs_is_ended_and_named(sim, monkeypatch):
    """Every tool runs under timeout(1); one that hangs answers 124 and the read names it."""
    original = basic.AnsibleModule.run_command

    def hung(self, argv, **kwargs):
        if argv[4].endswith("dpkg-query"):
            assert argv[:4] == ["/usr/bin/timeout", "-k", "5", "7"]
            return 124, "", ""
        return original(self, argv, **kwargs)

    monkeypatch.setattr(basic.AnsibleModule, "run_command", hung)
    result = run_module(host_state.main, {"sysfs_root": str(sim["host"] / "sys"), "root": str(sim["files_root"]),
                                          "timeout": 7}, FailJson)
    assert "dpkg-query" in result["msg"] and "timed out after 7 s" in result["msg"]
    result = run_module(host_state.main, {"sysfs_root": str(sim["host"] / "sys"), "timeout": 0}, FailJson)
    assert result["msg"].endswith(": timeout 0 must be 1 to 3600 seconds")


def test_one_unknown_lldpctl_line_is_reported_and_the_others_read(sim, monkeypatch):
    original = basic.AnsibleModule.run_command
    warned = []

    def with_odd_line(self, argv, **kwargs):
        rc, out, err = original(self, argv, **kwargs)
        if argv[4].endswith("lldpctl"):
            out = "lldp.ens1np0.brand-new-tlv.x=1\nnot a keyvalue line\n" + out
        return rc, out, err

    monkeypatch.setattr(basic.AnsibleModule, "run_command", with_odd_line)
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, text: warned.append(text))
    state = read(sim)["host_state"]
    assert state["neighbours"]["sources"] == {"lldp": "ok"}
    assert len(state["neighbours"]["rails"]) == 8
    assert [w.split(" is of")[0] for w in warned if "lldpctl" in w] == [
        "host_state: lldpctl -f keyvalue line 1", "host_state: lldpctl -f keyvalue line 2"]


@pytest.mark.parametrize(("out", "rc", "err", "error"), [
    ("\n==============NVSMI LOG==============\n\nDriver Version : 570.172.08\n\nAttached GPUs : 8\n"
     "GPU 00000000:19:00.0\n    Product Name : NVIDIA H100 80GB HBM3\n    Processes : None\n", 0, "",
     "nvidia-smi -q: the output is cut short: it lists 1 GPU section(s) of Attached GPUs 8"),
    ("Driver Version : 570", 0, "", "nvidia-smi -q: "),
    ("", 124, "", "timed out after 60 s"),
])
def test_a_cut_hung_or_unreadable_nvidia_smi_is_an_error_of_that_read_only(sim, monkeypatch, out, rc, err, error):
    original_run, original_bin = basic.AnsibleModule.run_command, basic.AnsibleModule.get_bin_path

    def run_command(self, argv, **kwargs):
        if argv[4].endswith("nvidia-smi"):
            return rc, out, err
        return original_run(self, argv, **kwargs)

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, name, required=False, opt_dirs=None: (
        "/usr/bin/nvidia-smi" if name == "nvidia-smi" else original_bin(self, name, required, opt_dirs)))
    state = read(sim)["host_state"]
    assert error in state["nvidia_smi"]["error"] and error in state["gpu_driver"]["error"]
    assert state["gpu_driver"]["loaded"] is False
    assert state["packages"] and state["hardware"]["nics"]  # the rest of the host was read
