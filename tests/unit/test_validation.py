"""The validation gate's pure logic: per-node checks on DGX/HGX discovery results, the choice of
ib_write_bw pairs across a fabric, and who is blamed when a pair fails."""

from __future__ import annotations

import copy

import pytest
from ansible_collections.mlplatform.gpunode.plugins.module_utils import perftest, validation
from ansible_collections.mlplatform.gpunode.plugins.module_utils.nic_roles import classify
from ansible_collections.mlplatform.gpunode.plugins.module_utils.parsing import ParseError
from ansible_collections.mlplatform.gpunode.plugins.module_utils.pci_sysfs import read_sysfs

from gpunode.sim.profile import load_profile
from gpunode.sim.sysfs import materialize

DECLARED = {
    "driver_version": "550.90.07",
    "link_layer": "Ethernet",
    "nv_config": {"SRIOV_EN": True, "NUM_OF_VFS": 8, "LINK_TYPE_P1": "ETH"},
    "roce_accl": {"adaptive_routing_forced_en": 1},
    "num_vfs": 8,
    "qos": {"trust": "dscp", "pfc": [0, 0, 0, 1, 0, 0, 0, 0], "ecn_np": [3], "ecn_rp": [3], "cnp_dscp": 48,
            "roce_tos": 106, "mtu": 9000},
}


@pytest.fixture(scope="module")
def hw(tmp_path_factory):
    out = {}
    for name in ("dgx-h100", "hgx-h100"):
        root = tmp_path_factory.mktemp(name)
        materialize(load_profile(name), root)
        result = classify(read_sysfs(root))
        result["fabric_manager_required"] = bool(result["nvswitches"])
        result["gpu_product"] = ", ".join(sorted({g["model"] for g in result["gpus"]}))
        out[name] = result
    return out


def converged(hw):
    """What a converged RoCE node reads back: every declared value in place."""
    rails = hw["rails"]
    return {
        "nvidia_smi": {"driver_version": "550.90.07", "gpus": [
            {"pci_address": g["pci_address"], "product_name": "NVIDIA H100 80GB HBM3", "persistence_mode": "Enabled",
             "fabric_state": "Completed", "fabric_status": "Success"} for g in hw["gpus"]]},
        "fabric_manager_version": "550.90.07-1",
        "modules": {"nvidia_peermem": True},
        "nics": {r["pci_address"]: {"link_state": "ACTIVE", "speed_gbps": 400, "link_layer": "Ethernet",
                                    "sriov_numvfs": 8, "netdev": r["netdev"]} for r in rails},
        "affinity": {r["gpu"]: r["pci_address"] for r in rails},
        "nv_config": {r["pci_address"]: {"params": {"SRIOV_EN": {"current": "True(1)", "next_boot": "True(1)"},
                                                    "NUM_OF_VFS": {"current": "8", "next_boot": "8"},
                                                    "LINK_TYPE_P1": {"current": "ETH(2)", "next_boot": "ETH(2)"}}}
                      for r in rails},
        "roce_accl": {r["pci_address"]: {"fields": {"adaptive_routing_forced_en": 1, "roce_tx_window_en": 1}}
                      for r in rails},
        "qos": {r["netdev"]: {"trust": "dscp", "pfc": [0, 0, 0, 1, 0, 0, 0, 0], "ecn_np": [3], "ecn_rp": [3],
                              "cnp_dscp": 48, "roce_tos": 106, "mtu": 9000} for r in rails},
    }


def failed(checks):
    return [(c["check"], c["rail"]) for c in checks if c["status"] == "fail"]


@pytest.mark.parametrize("profile", ["dgx-h100", "hgx-h100"])
def test_converged_node_passes_every_check(hw, profile):
    checks = validation.check_node(hw[profile], converged(hw[profile]), DECLARED)
    assert failed(checks) == []
    names = {c["check"] for c in checks}
    assert names == set(validation.CHECKS)  # both profiles have NVSwitches: fabric checks included
    rail_checks = [c for c in checks if c["scope"] == "rail"]
    assert sorted({c["rail"] for c in rail_checks}) == list(range(8))
    assert len(rail_checks) == 8 * 6  # link, affinity, nv_config, roce_accl, vfs, qos per rail


def test_rail_link_down_names_rail_device_netdev(hw):
    node = hw["dgx-h100"]
    observed = converged(node)
    observed["nics"]["0000:5e:00.0"]["link_state"] = "DOWN"
    checks = validation.check_node(node, observed, DECLARED)
    assert failed(checks) == [("link", 3)]
    bad = next(c for c in checks if c["status"] == "fail")
    assert bad["reason"] == "rail 3 0000:5e:00.0 (ibp94s0): link DOWN, expected ACTIVE"
    assert bad["device"] == "0000:5e:00.0" and bad["netdev"] == "ibp94s0"


def test_slow_link_and_wrong_link_layer(hw):
    node = hw["hgx-h100"]
    observed = converged(node)
    pci = node["rails"][5]["pci_address"]
    observed["nics"][pci].update(speed_gbps=200, link_layer="InfiniBand")
    checks = validation.check_node(node, observed, DECLARED)
    assert failed(checks) == [("link", 5)]
    reason = next(c["reason"] for c in checks if c["status"] == "fail")
    assert "speed 200 Gb/s, expected 400 Gb/s" in reason and "link layer InfiniBand, expected Ethernet" in reason


def test_setting_that_did_not_stick_shows_current_and_next_boot(hw):
    node = hw["dgx-h100"]
    observed = converged(node)
    observed["nv_config"]["0000:18:00.0"]["params"]["NUM_OF_VFS"] = {"current": "16", "next_boot": "8"}
    checks = validation.check_node(node, observed, DECLARED)
    assert failed(checks) == [("nv_config", 0)]
    assert next(c["reason"] for c in checks if c["status"] == "fail") == (
        "rail 0 0000:18:00.0 (ibp24s0): NV config NUM_OF_VFS current 16, desired 8 (next boot 8)")


def test_settled_nv_config_names_every_value_that_did_not_stick(hw):
    node = hw["hgx-h100"]
    observed = converged(node)
    pci = node["rails"][4]["pci_address"]
    observed["nv_config"][pci]["params"]["NUM_OF_VFS"] = {"current": "16", "next_boot": "8"}
    checks = validation.check_node(node, observed, {"nv_config_settled": True})
    assert failed(checks) == [("nv_config", 4)]
    assert next(c["reason"] for c in checks if c["status"] == "fail").endswith(
        "NV config did not take effect: NUM_OF_VFS current 16, next boot 8")
    # spellings of one value do not count as pending
    observed["nv_config"][pci]["params"]["NUM_OF_VFS"] = {"current": "8", "next_boot": "8"}
    observed["nv_config"][pci]["params"]["LINK_TYPE_P1"] = {"current": "ETH(2)", "next_boot": "ETH(2)"}
    assert failed(validation.check_node(node, observed, {"nv_config_settled": True})) == []


def test_gpu_side_failures(hw):
    node = hw["hgx-h100"]
    observed = converged(node)
    gpus = observed["nvidia_smi"]["gpus"]
    gone = gpus.pop()
    gpus[0]["persistence_mode"] = "Disabled"
    gpus[1]["fabric_state"] = "In Progress"
    observed["nvidia_smi"]["driver_version"] = "535.161.08"
    observed["fabric_manager_version"] = "550.90.07-1"
    observed["modules"]["nvidia_peermem"] = False
    checks = validation.check_node(node, observed, DECLARED)
    reasons = {c["check"]: c["reason"] for c in checks if c["status"] == "fail"}
    assert set(reasons) == {"gpu_count", "driver_version", "persistence", "fabric_manager", "fabric_state",
                            "nvidia_peermem"}
    assert reasons["gpu_count"] == f"nvidia-smi shows 7 GPUs, discovery found 8; missing {gone['pci_address']}"
    assert reasons["driver_version"] == "driver 535.161.08, expected 550.90.07"
    assert reasons["fabric_manager"] == "fabric manager 550.90.07-1 does not match driver 535.161.08"
    assert reasons["persistence"] == f"persistence mode is not Enabled on {gpus[0]['pci_address']}"
    assert reasons["fabric_state"] == f"Fabric State is not Completed: {gpus[1]['pci_address']} In Progress"


def test_no_driver_fails_the_gpu_checks_with_the_reason(hw):
    observed = converged(hw["dgx-h100"])
    observed["nvidia_smi"] = {"error": "not installed (no nvidia-smi on PATH)"}
    checks = validation.check_node(hw["dgx-h100"], observed, DECLARED)
    assert {c["check"] for c in checks if c["status"] == "fail"} >= {"gpu_count", "driver_version", "persistence"}
    assert all(c["reason"] == "nvidia-smi: not installed (no nvidia-smi on PATH)"
               for c in checks if c["check"] == "gpu_count")


def test_product_tokens_join_both_naming_schemes(hw):
    assert validation.product_tokens("H100 SXM5 80GB") == {"H100", "80GB"}
    assert validation.product_tokens("NVIDIA H100 80GB HBM3") == {"H100", "80GB"}
    observed = converged(hw["dgx-h100"])
    observed["nvidia_smi"]["gpus"][2]["product_name"] = "NVIDIA A100-SXM4-80GB"
    checks = validation.check_node(hw["dgx-h100"], observed, DECLARED)
    assert failed(checks) == [("gpu_product", None)]


@pytest.mark.parametrize(("model", "name", "mib", "ok"), [
    ("H100 SXM5 80GB", "NVIDIA H100 80GB HBM3", 81559, True),
    # nvidia-smi names the PCIe card without its memory: the memory total decides.
    ("H100 PCIe 80GB", "NVIDIA H100 PCIe", 81559, True),
    ("H100 PCIe 80GB", "NVIDIA H100 PCIe", 40960, False),
    ("H100 PCIe 80GB", "NVIDIA H100 PCIe", None, True),
    ("H100 SXM5 80GB", "NVIDIA H100 94GB HBM3", 95830, False),
    ("H100 SXM5 80GB", "NVIDIA A100-SXM4-80GB", 81920, False),
])
def test_product_matches_names_with_and_without_memory(model, name, mib, ok):
    assert validation.product_matches(model, name, mib) is ok


def test_affinity_roce_accl_vfs_qos(hw):
    node = hw["hgx-h100"]
    observed = converged(node)
    r1, r2 = node["rails"][1], node["rails"][2]
    observed["affinity"][r1["gpu"]] = "0000:1b:00.0"
    observed["roce_accl"][r2["pci_address"]]["fields"]["adaptive_routing_forced_en"] = 0
    observed["nics"][r2["pci_address"]]["sriov_numvfs"] = 0
    observed["qos"][r2["netdev"]]["pfc"] = [0] * 8
    checks = validation.check_node(node, observed, DECLARED)
    assert failed(checks) == [("affinity", 1), ("roce_accl", 2), ("vfs", 2), ("qos", 2)]
    reasons = [c["reason"] for c in checks if c["status"] == "fail"]
    assert reasons[1] == (f"rail 2 {r2['pci_address']} ({r2['netdev']}): "
                          "ROCE_ACCL adaptive_routing_forced_en=0, declared 1")
    assert reasons[3].endswith("QoS pfc [0, 0, 0, 0, 0, 0, 0, 0], declared [0, 0, 0, 1, 0, 0, 0, 0]")


def test_known_from_host_state_takes_the_rails_the_read_holds():
    hw = {"rails": [{"rail": 0, "gpu": "0000:1b:00.0", "pci_address": "0000:18:00.0", "netdev": "eth0"},
                    {"rail": 1, "gpu": "0000:2c:00.0", "pci_address": "0000:29:00.0", "netdev": "eth1"},
                    {"rail": 2, "gpu": "0000:3d:00.0", "pci_address": "0000:3a:00.0", "netdev": "eth2"}]}
    state = {
        "nv_config": {"0000:18:00.0": {"NUM_OF_VFS": {"default": "0", "current": "8", "next_boot": "16"}}},
        "nv_config_refused": {"0000:29:00.0": "Device is locked"},
        "roce_accl": {"0000:18:00.0": {"adaptive_routing_forced_en": 1}},
        "roce_accl_refused": {"0000:29:00.0": "Register access failed"},
        "qos": {"eth0": {"trust": "dscp", "pfc": [0, 0, 0, 1, 0, 0, 0, 0], "ecn_np": [3], "ecn_rp": None,
                         "cnp_dscp": 48, "roce_tos": 106, "cma_roce_tos": 106, "mtu": 9000, "dcbx_mode": "OS"}},
    }
    known = validation.known_from_host_state(state, hw)
    # A device that refused the tool when the host was read is left out: the module reads it live (a busy card
    # answers once; the live read gives the tool's own reason).
    assert known["nv_config"] == {"0000:18:00.0": {"params": {"NUM_OF_VFS": {"current": "8", "next_boot": "16"}}}}
    assert known["roce_accl"] == {"0000:18:00.0": {"fields": {"adaptive_routing_forced_en": 1}}}
    # The shape node_reads.read_qos gives: the priorities with PFC on, and no ECN priority where sysfs has none.
    assert known["qos"] == {"eth0": {"trust": "dscp", "pfc": [0, 0, 0, 1, 0, 0, 0, 0], "pfc_priorities": [3],
                                     "ecn_np": [3], "ecn_rp": [], "cnp_dscp": 48, "roce_tos": 106, "mtu": 9000}}
    # Rail 2 is in no part of the read: left out, so the module reads it.
    assert all("0000:3a:00.0" not in known[part] for part in ("nv_config", "roce_accl")) and "eth2" not in known["qos"]
    assert "eth1" not in known["qos"]
    assert validation.known_from_host_state(None, hw) == {}
    # Judged as a live read: a value waiting for next boot is not current.
    nics = {r["pci_address"]: {"link_state": "ACTIVE"} for r in hw["rails"][:1]}
    checks = validation.check_node({"rails": hw["rails"][:1], "gpus": [], "nics": []}, {**known, "nics": nics},
                                   {"nv_config": {"NUM_OF_VFS": 16}, "roce_accl": {"adaptive_routing_forced_en": 1}})
    reasons = [c["reason"] for c in checks if c["status"] == "fail"]
    assert any("0000:18:00.0" in r and "NUM_OF_VFS current 8" in r for r in reasons)


def test_undeclared_settings_are_not_checked_and_ib_rails_skip_qos(hw):
    node = copy.deepcopy(hw["dgx-h100"])
    observed = converged(node)
    for nic in observed["nics"].values():
        nic["link_layer"] = "InfiniBand"
    checks = validation.check_node(node, observed, {"qos": DECLARED["qos"]})
    assert {c["check"] for c in checks} == {"gpu_count", "gpu_product", "driver_version", "persistence",
                                            "fabric_manager", "fabric_state", "nvidia_peermem", "link", "affinity"}


def _fleet(hw, names):
    out = {}
    for name, profile in names.items():
        node = hw[profile]
        out[name] = {"fabric": "default", "platform": validation.platform_key(node),
                     "rails": [{k: r[k] for k in ("rail", "rdma_device", "pci_address", "netdev", "speed_gbps")}
                               for r in node["rails"]]}
    return out


def test_two_host_fleet_tests_every_rail_both_ways(hw):
    tests = validation.select_pairs(_fleet(hw, {"dgx01": "dgx-h100", "hgx01": "hgx-h100"}))
    assert len(tests) == 16
    # platform blocks in name order: "Dell Inc. PowerEdge XE9680" < "NVIDIA DGXH100"; a ring of two
    assert {(t["server"], t["client"]) for t in tests} == {("hgx01", "dgx01"), ("dgx01", "hgx01")}
    hgx_serves = [t for t in tests if t["server"] == "hgx01"]
    assert [t["rail"] for t in hgx_serves] == list(range(8))
    # ports are per host: each host's servers use 18515..18522
    assert [t["port"] for t in hgx_serves] == list(range(18515, 18523))
    assert [t["port"] for t in tests if t["server"] == "dgx01"] == list(range(18515, 18523))
    dgx_rdma = [r["rdma_device"] for r in hw["dgx-h100"]["rails"]]
    assert [t["client_device"] for t in hgx_serves] == dgx_rdma  # mlx5_0,3,4,5,6,9,10,11 on the DGX
    assert all(t["line_rate_gbps"] == 400 for t in tests)
    assert hgx_serves[3]["id"] == "hgx01:3-dgx01:3"


def test_pairs_cover_every_platform_pair_and_every_host(hw):
    fleet = _fleet(hw, {"dgx01": "dgx-h100", "dgx02": "dgx-h100", "hgx01": "hgx-h100", "hgx02": "hgx-h100",
                        "hgx03": "hgx-h100"})
    fleet["ib01"] = dict(fleet["dgx01"], fabric="ib")
    schedule = validation.bandwidth_schedule(fleet)
    pairs = {(t["fabric"], t["server"], t["client"]) for t in schedule["tests"]}
    # the ring: HGX block, then DGX block
    assert pairs == {("default", "hgx01", "hgx02"), ("default", "hgx02", "hgx03"), ("default", "hgx03", "dgx01"),
                     ("default", "dgx01", "dgx02"), ("default", "dgx02", "hgx01")}
    assert schedule["untested"] == {"ib01": "alone in fabric ib: no peer to test against"}
    assert schedule["max_fan_in"] == 1 and len(schedule["phases"]) == 1


def test_pairs_only_on_rails_both_hosts_have(hw):
    fleet = _fleet(hw, {"a": "dgx-h100", "b": "hgx-h100"})
    fleet["b"]["rails"] = fleet["b"]["rails"][:2]
    assert [t["rail"] for t in validation.select_pairs(fleet)] == [0, 1, 0, 1]


def _synthetic(counts, fabrics=1, rails=8):
    """``{platform: n}`` -> hosts named p-00001..., spread over ``fabrics``, in an interleaved play order."""
    hosts, order = {}, []
    width = max(counts.values())
    for i in range(width):
        for platform, n in sorted(counts.items()):
            if i < n:
                name = f"{platform.lower()}-{i:05d}"
                hosts[name] = {"fabric": f"f{len(order) % fabrics}", "platform": platform, "rails": [
                    {"rail": r, "rdma_device": f"mlx5_{r}", "pci_address": f"0000:{r:02x}:00.0",
                     "netdev": f"eth{r}", "speed_gbps": 400} for r in range(rails)]}
                order.append(name)
    return hosts, order


def _check_schedule(hosts, order, schedule, forks):
    tests = schedule["tests"]
    by_fabric = {}
    for name, spec in hosts.items():
        by_fabric.setdefault(spec["fabric"], []).append(name)
    for fabric, names in by_fabric.items():
        platforms = {}
        for name in names:
            platforms[hosts[name]["platform"]] = platforms.get(hosts[name]["platform"], 0) + 1
        mine = [t for t in tests if t["fabric"] == fabric]
        covered = {tuple(sorted((hosts[t["server"]]["platform"], hosts[t["client"]]["platform"]))) for t in mine}
        need = {tuple(sorted((a, b))) for a in platforms for b in platforms if a != b or platforms[a] >= 2}
        assert need <= covered, (fabric, need - covered)
        if len(names) >= 2:
            assert {t["server"] for t in mine} == set(names), "every host serves at least once"
            assert {t["client"] for t in mine} == set(names), "every host is a client at least once"
    # fan-in: per phase, peers per server host rail (servers of one phase run at the same time)
    peers = {}
    for t in tests:
        peers.setdefault((t["phase"], t["server"], t["rail"]), set()).add(t["client"])
    assert max(len(p) for p in peers.values()) <= 2
    assert schedule["max_fan_in"] <= 2
    # ports: below 65536, unique on each server host
    assert all(t["port"] < 65536 for t in tests)
    assert schedule["port_range"][1] < 65536
    seen = {}
    for t in tests:
        assert (t["server"], t["port"]) not in seen, t
        seen[(t["server"], t["port"])] = t["id"]
    # waves of forks, in play order; a server lives until its client's last possible finish
    rank = {h: i for i, h in enumerate(order)}
    rank_in = {t["id"]: i for i, t in enumerate(tests)}
    for phase, spec in enumerate(schedule["phases"]):
        waves = {}
        for t in tests:
            if t["phase"] == phase:
                waves.setdefault(t["wave"], set()).add(t["client"])
        assert all(len(c) <= forks for c in waves.values())
        clients = sorted({t["client"] for t in tests if t["phase"] == phase}, key=rank.get)
        assert [sorted(waves[w], key=rank.get) for w in sorted(waves)] == [
            clients[i:i + forks] for i in range(0, len(clients), forks)]
        assert set(spec["servers"]) == {t["server"] for t in tests if t["phase"] == phase}
        for host, entries in spec["clients"].items():
            assert all(e["peer"] != host for e in entries)
        longest = max(len(e) for e in spec["clients"].values())
        for entries in spec["clients"].values():
            for k, entry in enumerate(entries):
                test = tests[rank_in[entry["id"]]]
                assert test["server_lifetime_s"] >= test["wave"] * longest * 60 + (k + 1) * 60


@pytest.mark.parametrize(("counts", "fabrics", "forks"), [
    ({"DGX": 1, "HGX": 1}, 1, 5),
    ({"DGX": 1, "HGX": 2}, 1, 5),
    ({"DGX": 32, "HGX": 32}, 1, 5),
    ({"DGX": 512, "HGX": 512}, 4, 50),
    ({"DGX": 2048, "HGX": 2048}, 4, 50),
    ({"DGX": 1, "HGX": 100}, 1, 20),  # one DGX among 100 HGX
    ({"DGX": 3, "HGX": 5, "OEM-A": 1, "OEM-B": 2, "OEM-C": 1}, 1, 5),  # five platforms: extra phases
    ({"A": 1, "B": 1, "C": 1, "D": 1, "E": 1, "F": 1, "G": 1}, 1, 3),  # seven single-host platforms
], ids=["2", "3", "64", "1024", "4096", "1dgx-100hgx", "5-platforms", "7-singletons"])
def test_schedule_coverage_fan_in_ports_waves(counts, fabrics, forks):
    hosts, order = _synthetic(counts, fabrics)
    schedule = validation.bandwidth_schedule(hosts, order=order, forks=forks)
    _check_schedule(hosts, order, schedule, forks)
    n = len(hosts)
    if len(counts) <= 3:
        assert schedule["port_range"] == [18515, 18522]
        # the ring alone: one phase, exactly one test per host and rail on each side
        assert len(schedule["phases"]) == 1 and len(schedule["tests"]) == 8 * n
        assert schedule["max_fan_in"] == 1


def test_schedule_4096_hosts_bounds():
    hosts, order = _synthetic({"DGX": 2048, "HGX": 2048}, fabrics=4)
    schedule = validation.bandwidth_schedule(hosts, order=order, forks=50)
    assert schedule["max_fan_in"] == 1
    assert schedule["port_range"] == [18515, 18522]
    assert schedule["waves"] == 4096 // 50 + 1  # 82 waves of at most 50 clients
    assert not schedule["untested"]


def test_hosts_sharing_an_address_get_distinct_ports():
    hosts, order = _synthetic({"DGX": 2, "HGX": 2})
    schedule = validation.bandwidth_schedule(hosts, order=order, addresses=dict.fromkeys(hosts, "127.0.0.1"))
    assert sorted(t["port"] for t in schedule["tests"]) == list(range(18515, 18515 + 32))


def test_schedule_refuses_ports_past_65535():
    hosts, order = _synthetic({"DGX": 1, "HGX": 1})
    with pytest.raises(ValueError, match="validation_bandwidth_base_port 65530.*65537"):
        validation.bandwidth_schedule(hosts, order=order, base_port=65530)


def _ring3():
    hosts, order = _synthetic({"DGX": 1, "HGX": 2}, rails=1)
    return validation.bandwidth_schedule(hosts, order=order)["tests"]


def test_judge_blames_the_broken_host_on_both_sides_and_not_its_peers():
    tests = _ring3()  # ring dgx-00000 -> hgx-00000 -> hgx-00001 -> dgx-00000
    assert [(t["server"], t["client"]) for t in tests] == [
        ("dgx-00000", "hgx-00000"), ("hgx-00000", "hgx-00001"), ("hgx-00001", "dgx-00000")]
    # dgx-00000's rail is broken: it fails as server of hgx-00000 and as client of hgx-00001
    results = {tests[0]["id"]: {"gbps": 120.0, "error": None},
               tests[1]["id"]: {"gbps": 372.0, "error": None},
               tests[2]["id"]: {"gbps": None, "error": "Failed to modify QP 0x108 to RTR"}}
    judged = validation.judge_pairs(tests, results, 90)
    assert validation.verdict([], judged["hgx-00000"]) == (True, [])
    assert validation.verdict([], judged["hgx-00001"]) == (True, [])
    passed, failures = validation.verdict([], judged["dgx-00000"])
    assert not passed and failures == [
        "rail 0 mlx5_0 as server <-> hgx-00000 mlx5_0: 120.0 Gb/s < 90% of 400 Gb/s (failed side: server)",
        "rail 0 mlx5_0 as client <-> hgx-00001 mlx5_0: ib_write_bw failed: Failed to modify QP 0x108 to RTR "
        "(failed side: client)"]
    peer = [p for p in judged["hgx-00000"] if p["status"] == "fail"][0]
    assert peer["side"] == "client" and peer["failed_side"] == "server" and not peer["blamed"]


def test_judge_a_server_that_did_not_start_is_blamed_alone():
    tests = _ring3()
    results = {t["id"]: {"gbps": 390.0, "error": None} for t in tests}
    results[tests[0]["id"]] = {"gbps": None, "error": "Couldn't connect to 10.0.0.1:18515"}
    judged = validation.judge_pairs(tests, results, 90, {tests[0]["id"]: "exit status 1: Unable to open device"})
    server, client = tests[0]["server"], tests[0]["client"]
    assert validation.verdict([], judged[client]) == (True, [])
    entry = [p for p in judged[server] if p["status"] == "fail"][0]
    assert entry["blamed"] and entry["side"] == "server" and entry["failed_side"] == "server"
    assert "the server did not run: exit status 1: Unable to open device" in entry["reason"]


def test_judge_blames_both_of_two():
    hosts, order = _synthetic({"DGX": 1, "HGX": 1}, rails=1)
    tests = validation.bandwidth_schedule(hosts, order=order)["tests"]
    judged = validation.judge_pairs(tests, {t["id"]: {"gbps": None, "error": "timeout"} for t in tests}, 90)
    assert all(p["blamed"] and p["failed_side"] == "both" for entries in judged.values() for p in entries)


@pytest.mark.parametrize(("gbps", "threshold", "status"), [(360.0, 90, "pass"), (359.9, 90, "fail"),
                                                          (300.0, 75, "pass")])
def test_threshold_is_a_share_of_line_rate(gbps, threshold, status):
    tests = [{"id": "x", "server": "a", "client": "b", "rail": 0, "server_device": "mlx5_0",
              "client_device": "mlx5_0", "line_rate_gbps": 400}]
    entry = validation.judge_pairs(tests, {"x": {"gbps": gbps, "error": None}}, threshold)["a"][0]
    assert entry["status"] == status
    if status == "fail":
        assert entry["reason"].endswith(f"{gbps:.1f} Gb/s < {threshold}% of 400 Gb/s (failed side: both)")


def test_missing_result_fails():
    tests = [{"id": "x", "server": "a", "client": "b", "rail": 0, "server_device": "d", "client_device": "d",
              "line_rate_gbps": 400}]
    assert "did not run" in validation.judge_pairs(tests, {}, 90)["b"][0]["reason"]


PERFTEST = """\
---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Dual-port       : OFF\t\tDevice         : mlx5_0
 Number of qps   : 1\t\tTransport type : IB
 Connection type : RC\t\tUsing SRQ      : OFF
 Link type       : Ethernet
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
 65536      5000             392.25             391.96 \t\t   0.747601
---------------------------------------------------------------------------------------
"""


def test_perftest_parse_gbits_and_mbytes():
    parsed = perftest.parse(PERFTEST)
    assert parsed["bw_average_gbps"] == 391.96 and parsed["bw_peak_gbps"] == 392.25
    assert parsed["device"] == "mlx5_0" and parsed["link_type"] == "Ethernet" and parsed["bytes"] == 65536
    mb = PERFTEST.replace("Gb/sec", "MB/sec").replace("391.96", "46725.00")
    assert perftest.parse(mb)["bw_average_gbps"] == pytest.approx(391.96, abs=0.05)
    with pytest.raises(ParseError):
        perftest.parse(" Couldn't connect to 10.0.0.1:18515\n")
    assert perftest.failure_reason("", " Couldn't connect to 10.0.0.1:18515\nUnable to open file", 1) == (
        "Couldn't connect to 10.0.0.1:18515; Unable to open file")
    assert perftest.client_argv("ib_write_bw", "mlx5_3", 18516, "10.0.0.2") == [
        "ib_write_bw", "-d", "mlx5_3", "-p", "18516", "--report_gbits", "-F", "10.0.0.2"]
