"""The simulator's cabling (README §7): the simulated lldpctl prints each rail's switch port in lldpd's formats,
and the cabling faults (swapped cables, a rail on another unit's leaf, LLDP off) show in what it prints, as the
topology contract (module_utils/topology.py) reads it."""

from __future__ import annotations

import pytest
from ansible_collections.mlplatform.gpunode.plugins.module_utils import neighbors, topology
from simhost import run_tool

from gpunode.sim import hwstate
from gpunode.sim.profile import load_profile
from gpunode.sim.tools.state import HostState


@pytest.fixture
def fleet(tmp_path, monkeypatch):
    """Two simulated hosts (a DGX and an HGX) in one scalable unit, with lldpd 'installed'."""
    (tmp_path / "lldpd").write_text("")
    monkeypatch.setenv("GPUNODE_SIM_LLDPD", str(tmp_path / "lldpd"))
    hosts = {}
    for index, (name, profile) in enumerate((("dgx1", "dgx-h100"), ("hgx1", "hgx-h100"))):
        hwstate.write_state(tmp_path / name, load_profile(profile), host_index=index)
        hosts[name] = tmp_path / name
    return hosts


def _rails(hdir):
    """rail -> {rail, netdev, pci_address} from the profile's expectations and the simulated sysfs."""
    state = HostState(hdir)
    out = []
    for nic in state.nics():
        rail = (nic.get("expect") or {}).get("rail")
        if rail is not None:
            net = state.sys / "bus" / "pci" / "devices" / nic["address"] / "net"
            netdev = sorted(p.name for p in net.iterdir())[0]
            out.append({"rail": rail, "pci_address": nic["address"], "netdev": netdev})
    return sorted(out, key=lambda r: r["rail"])


def _topology_hosts(fleet):
    hosts = {}
    for name, hdir in fleet.items():
        got = run_tool(hdir, "lldpctl", "-f", "keyvalue")
        assert got.rc == 0, got.err
        heard = neighbors.parse_lldpctl_keyvalue(got.out)
        rails = _rails(hdir)
        for rail in rails:
            rail["neighbour"] = (heard.get(rail["netdev"]) or [None])[0]
        hosts[name] = {"fabric": "east", "block": None, "rack": None, "rails": rails}
    return hosts


def test_default_wiring_is_one_rail_optimized_unit(fleet):
    got = run_tool(fleet["hgx1"], "lldpctl", "-f", "keyvalue")
    heard = neighbors.parse_lldpctl_keyvalue(got.out)
    rails = _rails(fleet["hgx1"])
    assert len(rails) == 8 and len(heard) == 8
    first = heard[rails[0]["netdev"]][0]
    assert (first["switch"], first["port"], first["via"]) == ("su1-leaf0", "swp2", "LLDP")
    result = topology.plan(_topology_hosts(fleet), rail_optimized={"east"})
    assert result["miscabled"] == [] and result["warnings"] == []
    assert {h: lvl["rack"] for h, lvl in result["levels"].items()} == {"dgx1": "su1-leaf0", "hgx1": "su1-leaf0"}
    # The JSON formats say the same.
    as_json = neighbors.parse_lldpctl_json(run_tool(fleet["hgx1"], "lldpctl", "-f", "json").out)
    as_json0 = neighbors.parse_lldpctl_json(run_tool(fleet["hgx1"], "lldpctl", "-f", "json0").out)
    assert as_json == as_json0 == heard


def test_swapped_cables_and_a_foreign_leaf_fail_the_contract(fleet):
    rails = _rails(fleet["hgx1"])
    hwstate.set_fault(fleet["hgx1"], "cable_swap", rails[2]["pci_address"], params=[rails[5]["pci_address"]])
    result = topology.plan(_topology_hosts(fleet), rail_optimized={"east"})
    assert [(m["host"], m["rail"], m["netdev"], m["kind"]) for m in result["miscabled"]] == [
        ("hgx1", 2, rails[2]["netdev"], "swapped"), ("hgx1", 5, rails[5]["netdev"], "swapped")]
    assert topology.describe_miscabled(result["miscabled"][0]).startswith(
        f"hgx1 rail 2 ({rails[2]['netdev']}): expected su1-leaf2 port swp2, found su1-leaf5 port swp2")
    hwstate.set_fault(fleet["hgx1"], "cable_swap", rails[2]["pci_address"], params=[rails[5]["pci_address"]])
    hwstate.set_fault(fleet["dgx1"], "foreign_leaf", _rails(fleet["dgx1"])[7]["pci_address"],
                      params=["su2-leaf7", "swp9"])
    (entry,) = topology.plan(_topology_hosts(fleet), rail_optimized={"east"})["miscabled"]
    assert (entry["host"], entry["rail"], entry["kind"], entry["found_switch"]) == ("dgx1", 7, "foreign_leaf",
                                                                                  "su2-leaf7")


def test_lldp_off_and_lldpd_missing(fleet, monkeypatch, tmp_path):
    hwstate.set_fault(fleet["dgx1"], "lldp_off", "-")
    assert run_tool(fleet["dgx1"], "lldpctl", "-f", "keyvalue").out == ""
    result = topology.plan(_topology_hosts(fleet), rail_optimized={"east"})
    assert len(result["warnings"]) == 8 and result["warnings"][0].startswith("dgx1: rail 0 (")
    assert result["levels"]["dgx1"] == {"block": "east", "rack": None, "source": "none"}
    hwstate.set_fault(fleet["dgx1"], "lldp_off", "-", clear=True)
    assert run_tool(fleet["dgx1"], "lldpctl", "-f", "keyvalue").out
    monkeypatch.setenv("GPUNODE_SIM_LLDPD", str(tmp_path / "nowhere"))
    missing = run_tool(fleet["dgx1"], "lldpctl", "-f", "keyvalue")
    assert missing.rc == 127 and "lldpd is not installed" in missing.err


def test_recabling_and_bad_input(fleet):
    cabling = hwstate.set_cabling(fleet["hgx1"], leaf="tor-a")
    assert {link["switch"] for link in cabling["links"].values()} == {"tor-a"}
    hwstate.set_cabling(fleet["hgx1"], unit="su2")
    heard = neighbors.parse_lldpctl_keyvalue(run_tool(fleet["hgx1"], "lldpctl", "-f", "keyvalue").out)
    assert sorted({n[0]["switch"] for n in heard.values()}) == [f"su2-leaf{k}" for k in range(8)]
    with pytest.raises(hwstate.HwStateError, match="cable_swap needs the second NIC"):
        hwstate.set_fault(fleet["hgx1"], "cable_swap", _rails(fleet["hgx1"])[0]["pci_address"])
    with pytest.raises(hwstate.HwStateError, match="is not a NIC function of this host"):
        hwstate.set_cabling(fleet["hgx1"], link=("0000:ff:00.0", "x", "y"))
    assert run_tool(fleet["hgx1"], "lldpctl", "-f", "xml").rc == 1
