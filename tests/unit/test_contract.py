"""Fleet contract comparison: DGX- and HGX-like hosts of one fabric, the incident case, absent rails."""

from __future__ import annotations

import copy

import pytest
from ansible_collections.mlplatform.gpunode.plugins.module_utils import contract

DGX_RAILS = [{"rail": i, "pci_address": f"0000:{bus}:00.0", "netdev": f"ibp{int(bus, 16)}s0"}
             for i, bus in enumerate(["18", "40", "4f", "5e", "9a", "c0", "ce", "dc"])]
HGX_RAILS = [{"rail": i, "pci_address": f"0000:{bus}:00.0", "netdev": f"ens{i + 1}np0"}
             for i, bus in enumerate(["1a", "3c", "4d", "5d", "9b", "bb", "cc", "dc"])]


def nv(current="True(1)", vfs="8", link="ETH(2)"):
    return {"SRIOV_EN": {"default": "True(1)", "current": current, "next_boot": current},
            "NUM_OF_VFS": {"default": "16", "current": vfs, "next_boot": vfs},
            "LINK_TYPE_P1": {"default": "IB(1)", "current": link, "next_boot": link},
            "CNP_DSCP_P1": {"default": "48", "current": "48", "next_boot": "48"}}


def host(rails, ar=0, fabric="default", **overrides):
    config = {r["pci_address"]: nv(**overrides) for r in rails}
    fields = {r["pci_address"]: {"adaptive_routing_forced_en": ar, "adaptive_routing_forced_en_field_select": 1}
              for r in rails}
    entries = contract.firmware_entries(rails, config, fields, ["SRIOV_EN", "NUM_OF_VFS", "LINK_TYPE", "CNP_DSCP"])
    return {"fabric": fabric, "entries": [{**e, "source": "nic_firmware_contract"} for e in entries]}


def test_firmware_entries_shape():
    entries = contract.firmware_entries(DGX_RAILS[:1], {"0000:18:00.0": nv()},
                                        {"0000:18:00.0": {"adaptive_routing_forced_en": 1,
                                                          "adaptive_routing_forced_en_field_select": 1}},
                                        ["SRIOV_EN", "LINK_TYPE"])
    assert entries == [
        {"scope": "rail", "rail": 0, "pci_address": "0000:18:00.0", "netdev": "ibp24s0",
         "setting": "nv_config.SRIOV_EN", "value": 1},
        {"scope": "rail", "rail": 0, "pci_address": "0000:18:00.0", "netdev": "ibp24s0",
         "setting": "nv_config.LINK_TYPE_P1", "value": 2},
        {"scope": "rail", "rail": 0, "pci_address": "0000:18:00.0", "netdev": "ibp24s0",
         "setting": "roce_accl.adaptive_routing_forced_en", "value": 1},
        {"scope": "host", "rail": None, "pci_address": None, "netdev": None, "setting": "rail_count", "value": 1},
    ]
    assert all(not contract.check_entry(e) for e in entries)


def test_dgx_and_hgx_agree():
    result = contract.compare({"dgx01": host(DGX_RAILS), "hgx01": host(HGX_RAILS)}, ["dgx01", "hgx01"])
    assert result["ok"] is True
    assert result["fabrics"]["default"]["expected"] == {
        "nv_config.SRIOV_EN": 1, "nv_config.NUM_OF_VFS": 8, "nv_config.LINK_TYPE_P1": 2, "nv_config.CNP_DSCP_P1": 48,
        "roce_accl.adaptive_routing_forced_en": 0, "rail_count": 8}
    assert contract.format_table(result) == ""


def test_incident_adaptive_routing_on_one_vendor_only_names_every_rail():
    hosts = {"dgx01": host(DGX_RAILS), "dgx02": host(DGX_RAILS), "hgx01": host(HGX_RAILS, ar=1)}
    result = contract.compare(hosts, ["dgx01", "dgx02", "hgx01"])
    assert result["ok"] is False
    assert [(r["host"], r["rail"], r["pci_address"], r["netdev"], r["setting"], r["expected"], r["found"])
            for r in result["drift"]] == [
        ("hgx01", i, rail["pci_address"], rail["netdev"], "roce_accl.adaptive_routing_forced_en", 0, 1)
        for i, rail in enumerate(HGX_RAILS)]
    table = contract.format_table(result).splitlines()
    assert table[0] == ("fabric default: 3 hosts (dgx01, dgx02, hgx01), 1 setting(s) differ from the declaration "
                        "or the majority")
    assert table[1].split() == ["host", "rail", "pci_address", "netdev", "setting", "expected", "found"]
    assert table[2].split() == ["hgx01", "0", "0000:1a:00.0", "ens1np0", "roce_accl.adaptive_routing_forced_en",
                                "0", "1"]


def test_two_hosts_tie_goes_to_the_first_host_and_says_so():
    result = contract.compare({"dgx01": host(DGX_RAILS), "hgx01": host(HGX_RAILS, ar=1)}, ["dgx01", "hgx01"])
    assert {r["host"] for r in result["drift"]} == {"hgx01"}
    assert all(r["tie"] for r in result["drift"])
    assert "0 (tie)" in contract.format_table(result)


def test_fabrics_are_compared_separately():
    hosts = {"dgx01": host(DGX_RAILS, fabric="ib", link="IB(1)"), "hgx01": host(HGX_RAILS, fabric="roce")}
    result = contract.compare(hosts)
    assert result["ok"] is True
    assert result["fabrics"]["ib"]["expected"]["nv_config.LINK_TYPE_P1"] == 1
    assert result["fabrics"]["roce"]["expected"]["nv_config.LINK_TYPE_P1"] == 2


def test_rail_count_and_missing_rail_config():
    short = host(HGX_RAILS[:7])
    hgx = host(HGX_RAILS)
    skipped = copy.deepcopy(hgx)
    skipped["entries"] = [e for e in skipped["entries"]
                          if not (e.get("rail") == 3 and e["setting"].startswith("nv_config."))]
    result = contract.compare({"dgx01": host(DGX_RAILS), "hgx01": short, "hgx02": hgx, "hgx03": skipped},
                              ["dgx01", "hgx01", "hgx02", "hgx03"])
    rows = {(r["host"], r["setting"], r["rail"]): (r["expected"], r["found"]) for r in result["drift"]}
    assert rows[("hgx01", "rail_count", None)] == (8, 7)
    assert rows[("hgx03", "nv_config.NUM_OF_VFS", 3)] == (8, "(absent)")
    assert len(rows) == 1 + 4


@pytest.mark.parametrize(("entry", "problem"), [
    ({"scope": "node", "setting": "x", "value": 1}, "scope must be host or rail"),
    ({"scope": "rail", "setting": "x", "value": 1, "rail": None}, "integer rail"),
    ({"scope": "host", "setting": "", "value": 1}, "non-empty string"),
    ({"scope": "host", "setting": "x"}, "value is missing"),
])
def test_malformed_entries(entry, problem):
    assert any(problem in p for p in contract.check_entry(entry))
