"""A rail netdev renamed after discovery: node_health finds the netdev and RDMA device of each rail from its PCI
address at each read, so its QoS is read under the new name (not reported unreadable), and every message names
the rail by its name now and the name discovery recorded."""

from __future__ import annotations

import pytest
from ansible_collections.mlplatform.gpunode.plugins.module_utils import pci_sysfs
from ansible_collections.mlplatform.gpunode.plugins.modules import node_health as module
from module_harness import ExitJson, patch_exits, run_module
from simhost import day_two_host, run_tool, state, tool_bin

PFC = [0, 0, 0, 1, 0, 0, 0, 0]
EXPECT = {"num_vfs": 8, "roce_accl": {"adaptive_routing_forced_en": 1}, "qos": {"trust": "dscp", "pfc": PFC}}


@pytest.fixture
def host(tmp_path, monkeypatch):
    bindir = tool_bin(tmp_path / "bin", ("nvidia-smi", "dmesg", "mlxreg", "mlnx_qos"))
    hdir, hw = day_two_host(tmp_path / "host", "hgx-h100", pfc=PFC)
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    monkeypatch.setenv("GPUNODE_SIM_STATE", str(hdir))
    monkeypatch.setenv("GPUNODE_SIM_NVIDIA_USERSPACE", str(tmp_path / "no-userspace-file"))
    patch_exits(monkeypatch)
    return hdir, hw


def health(hdir, hw):
    return run_module(module.main, {"sysfs_root": str(hdir / "sys"), "proc_root": str(hdir / "run" / "proc"),
                                    "hw": hw, "expect": EXPECT}, ExitJson)


def test_the_simulated_rename_keeps_the_device_and_its_qos(host):
    hdir, hw = host
    rail = hw["rails"][1]
    state(hdir).rename_netdev(rail["netdev"], "rail1")
    assert pci_sysfs.names_of_function(str(hdir / "sys"), rail["pci_address"])["netdevs"] == ["rail1"]
    assert not (hdir / "sys" / "class" / "net" / rail["netdev"]).exists()
    done = run_tool(hdir, "mlnx_qos", "-i", "rail1")
    assert done.rc == 0 and "Priority trust state: dscp" in done.out
    assert run_tool(hdir, "mlnx_qos", "-i", rail["netdev"]).rc == 1  # the old name is gone


def test_a_renamed_rail_is_read_under_its_new_name(host):
    hdir, hw = host
    rail = hw["rails"][1]
    state(hdir).rename_netdev(rail["netdev"], "rail1")
    result = health(hdir, hw)
    assert result["conditions"] == []
    assert "rail1" in result["observed"]["qos"] and rail["netdev"] not in result["observed"]["qos"]
    assert result["observed"]["names"] == {rail["pci_address"]: {
        "netdev": "rail1", "rdma_device": rail["rdma_device"], "discovered_netdev": rail["netdev"],
        "discovered_rdma_device": rail["rdma_device"]}}
    # A drift on the renamed rail names it both ways.
    assert run_tool(hdir, "mlnx_qos", "-i", "rail1", "--trust", "pcp").rc == 0
    (cond,) = health(hdir, hw)["conditions"]
    assert (cond["type"], cond["reason"], cond["device"]) == ("RailQoSDrift", "TrustChanged", rail["pci_address"])
    assert f"(rail1, discovered as {rail['netdev']})" in cond["message"]


def test_a_rail_without_a_netdev_now_is_named_not_read_under_the_old_name(host):
    hdir, hw = host
    rail = hw["rails"][2]
    netdir = hdir / "sys" / "bus" / "pci" / "devices" / rail["pci_address"] / "net"
    (hdir / "sys" / "class" / "net" / rail["netdev"]).unlink()
    (netdir / rail["netdev"]).rename(hdir / "detached")
    (cond,) = health(hdir, hw)["conditions"]
    assert (cond["type"], cond["reason"], cond["status"]) == ("RailQoSDrift", "QoSUnreadable", "Unknown")
    assert f"(no netdev now, discovered as {rail['netdev']})" in cond["message"]


def test_the_validation_read_back_reads_a_renamed_rail_under_its_new_name(host):
    from ansible_collections.mlplatform.gpunode.plugins.modules import node_validation  # noqa: PLC0415 - only this test needs the module

    hdir, hw = host
    rail = hw["rails"][3]
    state(hdir).rename_netdev(rail["netdev"], "rail3")
    result = run_module(node_validation.main, {"sysfs_root": str(hdir / "sys"), "hw": hw,
                                               "expect": {"qos": {"trust": "dscp", "pfc": PFC}}}, ExitJson)
    qos = [c for c in result["checks"] if c["check"] == "qos"]
    assert qos and all(c["status"] == "pass" for c in qos), qos
    assert "rail3" in result["observed"]["qos"]
    assert result["observed"]["names"][rail["pci_address"]]["netdev"] == "rail3"
