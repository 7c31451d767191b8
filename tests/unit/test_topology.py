"""Topology from the fabric (module_utils/topology.py): levels per host from the rail neighbours and the inventory,
the cabling contract of rail-optimized fabrics, Kueue's Topology validated against Kueue's CRD."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible_collections.mlplatform.gpunode.plugins.module_utils import topology

SCHEMAS = Path(__file__).resolve().parents[3] / "shared" / "schemas" / "kueue"
KEYS = {"block": "gpunode.mlplatform.io/topology-block", "rack": "gpunode.mlplatform.io/topology-rack"}


def rail_optimized_fleet(blocks=2, leaves=4, hosts=16):
    """``blocks`` scalable units; in each, rail k of every host reaches leaf k on port <host number>."""
    fleet = {}
    for b in range(blocks):
        for h in range(hosts):
            name = f"b{b}-gpu{h:02d}"
            fleet[name] = {"fabric": "east", "block": f"block-{b}", "rack": None, "rails": [
                {"rail": k, "netdev": f"enp{k}s0np0", "pci_address": f"0000:{k:02x}:00.0",
                 "neighbour": {"switch": f"leaf-b{b}-r{k}", "port": f"swp{h + 1}"}} for k in range(leaves)]}
    return fleet


def top_of_rack_fleet(blocks=2, leaves=4, hosts=16, rails=8):
    """``blocks`` x ``leaves`` racks of ``hosts`` hosts; every rail of a host reaches its rack's leaf."""
    fleet = {}
    for b in range(blocks):
        for leaf in range(leaves):
            for h in range(hosts):
                fleet[f"b{b}-r{leaf}-gpu{h:02d}"] = {"fabric": "west", "block": f"block-{b}", "rack": None, "rails": [
                    {"rail": k, "netdev": f"enp{k}s0np0",
                     "neighbour": {"switch": f"tor-b{b}-{leaf}", "port": f"Ethernet{h * rails + k}"}}
                    for k in range(rails)]}
    return fleet


def test_two_blocks_of_four_leaves_and_sixteen_hosts_rail_optimized():
    result = topology.plan(rail_optimized_fleet(), rail_optimized={"east"})
    assert result["miscabled"] == [] and result["warnings"] == []
    assert result["levels"]["b0-gpu07"] == {"block": "block-0", "rack": "leaf-b0-r0", "source": "neighbours"}
    assert result["levels"]["b1-gpu15"] == {"block": "block-1", "rack": "leaf-b1-r0", "source": "neighbours"}
    units = result["units"]["east"]
    assert [(u["name"], u["leaves"], len(u["hosts"])) for u in units] == [
        ("leaf-b0-r0", ["leaf-b0-r0", "leaf-b0-r1", "leaf-b0-r2", "leaf-b0-r3"], 16),
        ("leaf-b1-r0", ["leaf-b1-r0", "leaf-b1-r1", "leaf-b1-r2", "leaf-b1-r3"], 16)]
    labels = topology.node_labels(result["levels"], KEYS)
    assert labels["b1-gpu03"] == {KEYS["block"]: "block-1", KEYS["rack"]: "leaf-b1-r0"}
    assert topology.tree(result)["block-0"] == {"leaf-b0-r0": [f"b0-gpu{h:02d}" for h in range(16)]}


def test_two_blocks_of_four_top_of_rack_leaves_and_sixteen_hosts_each():
    result = topology.plan(top_of_rack_fleet())
    assert result["miscabled"] == [] and len(result["levels"]) == 128
    assert result["levels"]["b1-r2-gpu05"] == {"block": "block-1", "rack": "tor-b1-2", "source": "neighbours"}
    tree = topology.tree(result)
    assert sorted(tree) == ["block-0", "block-1"] and sorted(tree["block-0"]) == [f"tor-b0-{n}" for n in range(4)]
    assert all(len(hosts) == 16 for racks in tree.values() for hosts in racks.values())


def test_a_swapped_pair_of_cables_fails_the_contract_naming_both_rails():
    fleet = rail_optimized_fleet()
    rails = fleet["b0-gpu04"]["rails"]
    rails[1]["neighbour"], rails[2]["neighbour"] = rails[2]["neighbour"], rails[1]["neighbour"]
    result = topology.plan(fleet, rail_optimized={"east"})
    assert [(m["host"], m["rail"], m["kind"]) for m in result["miscabled"]] == [
        ("b0-gpu04", 1, "swapped"), ("b0-gpu04", 2, "swapped")]
    lines = [topology.describe_miscabled(m) for m in result["miscabled"]]
    assert lines[0] == ("b0-gpu04 rail 1 (enp1s0np0): expected leaf-b0-r1 port swp5, found leaf-b0-r2 port swp5 "
                        "(cables swapped with another rail; fabric east, unit leaf-b0-r0)")
    assert lines[1].startswith("b0-gpu04 rail 2 (enp2s0np0): expected leaf-b0-r2 port swp5, found leaf-b0-r1 port swp5")
    # The host stays in its unit (its rack label is right; its cabling is not).
    assert result["levels"]["b0-gpu04"]["rack"] == "leaf-b0-r0"


def test_a_rail_on_a_foreign_leaf_fails_the_contract():
    fleet = rail_optimized_fleet()
    fleet["b1-gpu09"]["rails"][3]["neighbour"] = {"switch": "leaf-b0-r3", "port": "swp40"}
    result = topology.plan(fleet, rail_optimized={"east"})
    (entry,) = result["miscabled"]
    assert entry["kind"] == "foreign_leaf" and (entry["host"], entry["rail"]) == ("b1-gpu09", 3)
    assert topology.describe_miscabled(entry) == (
        "b1-gpu09 rail 3 (enp3s0np0): expected leaf-b1-r3 (any port), found leaf-b0-r3 port swp40 (on a leaf of "
        "another scalable unit; fabric east, unit leaf-b1-r0)")
    # Without the declaration nothing is judged.
    assert topology.plan(fleet)["miscabled"] == []


def test_without_lldp_a_warning_names_the_rail_and_the_inventory_gives_the_topology():
    fleet = rail_optimized_fleet(blocks=1, hosts=2)
    for data in fleet.values():
        for rail in data["rails"]:
            rail["neighbour"] = None
        data["rack"] = "rack A7"
    result = topology.plan(fleet, rail_optimized={"east"})
    assert len(result["warnings"]) == 8
    assert result["warnings"][0] == ("b0-gpu00: rail 0 (enp0s0np0): no neighbour (LLDP off or not answering, or the "
                                     "subnet manager not reachable); its leaf is unknown")
    assert result["levels"]["b0-gpu01"] == {"block": "block-0", "rack": "rack-A7", "source": "inventory"}
    assert result["miscabled"] == []


def test_the_topology_object_and_labels_validate_against_kueues_crd():
    jsonschema = pytest.importorskip("jsonschema")
    crd = yaml.safe_load((SCHEMAS / "kueue.x-k8s.io_topologies.yaml").read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1beta2"]
    obj = topology.topology_object("gpu-fabric", KEYS)
    assert obj["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    jsonschema.validate(obj["spec"], version["schema"]["openAPIV3Schema"]["properties"]["spec"])
    assert [lvl["nodeLabel"] for lvl in obj["spec"]["levels"]][-1] == "kubernetes.io/hostname"
    assert topology.label_value("MF0;CNTSN-POD229-QM97-IB-02:MQM9700/U1") == "MF0-CNTSN-POD229-QM97-IB-02-MQM9700-U1"


def _action(hosts_vars, **args):
    from ansible_collections.mlplatform.gpunode.plugins.action import topology as action
    from module_harness import PublishedHostVars, action_plugin

    plugin = action_plugin(action, args)
    return plugin.run(task_vars={"hostvars": PublishedHostVars(hosts_vars), "ansible_play_hosts": sorted(hosts_vars)})


def _published(fleet):
    """Each host's facts as discovery publishes them: gpunode_hw rails and the read's neighbours."""
    out = {}
    for host, data in fleet.items():
        rails = [{k: r.get(k) for k in ("rail", "netdev", "pci_address")} for r in data["rails"]]
        for n, rail in enumerate(rails):
            rail["pci_address"] = rail["pci_address"] or f"0000:{n:02x}:00.0"
        neighbours = {rail["pci_address"]: {**r["neighbour"], "via": "lldp"}
                      for rail, r in zip(rails, data["rails"], strict=True) if r["neighbour"]}
        out[host] = {"gpunode_hw": {"rails": rails}, "gpunode_fabric": data["fabric"],
                     "gpunode_topology_block": data["block"],
                     "gpunode_host_state": {"neighbours": {"rails": neighbours, "sources": {"lldp": "ok"}}}}
    return out


def test_the_action_reads_the_published_facts_and_names_the_miscabled_host():
    fleet = rail_optimized_fleet(blocks=1, hosts=4)
    rails = fleet["b0-gpu02"]["rails"]
    rails[0]["neighbour"], rails[3]["neighbour"] = rails[3]["neighbour"], rails[0]["neighbour"]
    out = _action(_published(fleet), rail_optimized=["east"])
    assert sorted(out["by_host"]) == ["b0-gpu02"] and len(out["by_host"]["b0-gpu02"]) == 2
    assert out["by_host"]["b0-gpu02"][0].startswith("b0-gpu02 rail 0 (enp0s0np0): expected leaf-b0-r0 port swp3")
    assert out["labels"]["b0-gpu01"] == {KEYS["block"]: "block-0", KEYS["rack"]: "leaf-b0-r0"}
    assert out["tree"] == {"block-0": {"leaf-b0-r0": ["b0-gpu00", "b0-gpu01", "b0-gpu02", "b0-gpu03"]}}


def test_the_action_refuses_an_unknown_fabric_and_a_host_without_discovery():
    from ansible.errors import AnsibleActionFail

    published = _published(rail_optimized_fleet(blocks=1, hosts=2))
    with pytest.raises(AnsibleActionFail, match="rail_optimized names fabric\\(s\\) no host of the play is in: west"):
        _action(published, rail_optimized=["west"])
    del published["b0-gpu01"]["gpunode_hw"]
    with pytest.raises(AnsibleActionFail, match="b0-gpu01: no discovery result"):
        _action(published)


def test_the_report_shows_the_tree_with_the_miscabled_rails_marked(tmp_path):
    from ansible_collections.mlplatform.gpunode.plugins.plugin_utils.fleet_report import write_report

    fleet = rail_optimized_fleet(blocks=2, hosts=2)
    rails = fleet["b1-gpu01"]["rails"]
    rails[1]["neighbour"], rails[2]["neighbour"] = rails[2]["neighbour"], rails[1]["neighbour"]
    result = _action(_published(fleet), rail_optimized=["east"])
    written = write_report(tmp_path / "in", tmp_path / "out", {"hosts": {}, "kueue": [], "run": {}},
                           topology=result)
    page = written["report.html"][0].read_text()
    assert '<h2 id="topology">' in page and 'data-block="block-1"' in page and 'data-rack="leaf-b1-r0"' in page
    assert page.count('class="miscabled-rail"') == 2 and 'class="host miscabled" data-host="b1-gpu01"' in page
    md = written["report.md"][0].read_text()
    assert "    - b1-gpu01 **miscabled**" in md and "      - b1-gpu01 rail 1 (enp1s0np0): expected leaf-b1-r1" in md
    plain = write_report(tmp_path / "in", tmp_path / "plain", {"hosts": {}, "kueue": [], "run": {}})
    assert 'id="topology"' not in plain["report.html"][0].read_text()


def test_a_switch_port_two_hosts_or_two_rails_claim_is_found_naming_each_rail():
    fleet = rail_optimized_fleet(blocks=1, leaves=2, hosts=3)
    # b0-gpu02's rail 0 reports the port of b0-gpu00's rail 0; b0-gpu01's two rails one port of leaf-b0-r1.
    fleet["b0-gpu02"]["rails"][0]["neighbour"] = {"switch": "leaf-b0-r0", "port": "swp1"}
    fleet["b0-gpu01"]["rails"][0]["neighbour"] = {"switch": "leaf-b0-r1", "port": "swp2"}
    result = topology.plan(fleet, rail_optimized=["east"])
    assert [(e["switch"], e["port"], [(r["host"], r["rail"]) for r in e["rails"]]) for e in result["claimed_twice"]] \
        == [("leaf-b0-r0", "swp1", [("b0-gpu00", 0), ("b0-gpu02", 0)]),
            ("leaf-b0-r1", "swp2", [("b0-gpu01", 0), ("b0-gpu01", 1)])]
    assert topology.describe_claimed_twice(result["claimed_twice"][0]) == (
        "switch leaf-b0-r0 port swp1 is reached by 2 rails: b0-gpu00 rail 0 (enp0s0np0), b0-gpu02 rail 0 (enp0s0np0)")
    # Same port name on two switches that share a name but not an id: two switches, no claim.
    other = rail_optimized_fleet(blocks=1, leaves=1, hosts=2)
    for host, switch_id in (("b0-gpu00", "aa:01"), ("b0-gpu01", "aa:02")):
        other[host]["rails"][0]["neighbour"] = {"switch": "leaf", "switch_id": switch_id, "port": "swp1"}
    assert topology.plan(other)["claimed_twice"] == []
    assert topology.plan(rail_optimized_fleet(), rail_optimized=["east"])["claimed_twice"] == []


@pytest.mark.parametrize("names", [("leaf-ä1", "leaf-ö1"), ("交换机-1", "交换机-2"), ("leaf 1", "leaf/1"),
                                   ("Ω", "λ")])
def test_distinct_switch_names_stay_distinct_racks_with_a_warning(names):
    fleet = {f"h{i}": {"fabric": "west", "block": None, "rack": None,
                       "rails": [{"rail": 0, "netdev": "eth0", "neighbour": {"switch": name, "port": "1"}}]}
             for i, name in enumerate(names)}
    result = topology.plan(fleet)
    racks = [result["levels"][f"h{i}"]["rack"] for i in range(len(names))]
    assert all(racks) and len(set(racks)) == len(names)
    assert all(topology.label_value(r) == r for r in racks)  # valid label values as they are
    assert all(len(r) <= 63 for r in racks)
    # Every name that is not its label as it is (non-ASCII letters, or a label another name has) is named, with
    # the label it got.
    for name, rack in zip(names, racks, strict=True):
        if not name.isascii() or rack != topology.label_value(name):
            assert f"switch {name!r}: not a valid label value as it is; labelled {rack!r}" in "\n".join(
                result["warnings"])
    # The same name twice is the same rack.
    again = topology.plan({**fleet, "h9": {**fleet["h0"]}})
    assert again["levels"]["h9"]["rack"] == again["levels"]["h0"]["rack"]
