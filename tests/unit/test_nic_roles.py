"""nic_roles: PCIe distance and role classification, on hand-made records and on sysfs trees.

Hand-made layouts follow the real machines: DGX H100 (hardware-facts.md "DGX H100", real-outputs
dgx-h100-user-guide-network-modules-table.txt, ibdev2netdev-dgx-h100-aben20807.txt) and a Dell
XE9680-like HGX H100 (lspci-h100-xe9680-nvidia-mellanox-gpud.txt, nvidia-smi-topo-m-...-2039.txt).
"""

from __future__ import annotations

import copy

import pytest
from ansible_collections.mlplatform.gpunode.plugins.module_utils import nic_roles
from ansible_collections.mlplatform.gpunode.plugins.module_utils.nic_roles import classify, pcie_distance

CX7_BOARD = "MT_0000000838"  # hardware-facts.md "PCI identities"
BF3_BOARD = "MT_0000000884"
IDS = {
    "gpu": ("0x10de", "0x2330", "0x030200"),
    "nvswitch": ("0x10de", "0x22a3", "0x068000"),
    "cx7": ("0x15b3", "0x1021", "0x020700"),
    "cx7eth": ("0x15b3", "0x1021", "0x020000"),
    "cx6dx": ("0x15b3", "0x101d", "0x020000"),
    "cx6lx": ("0x15b3", "0x101f", "0x020000"),
    "bf3": ("0x15b3", "0xa2dc", "0x020000"),
    "bf3bridge": ("0x15b3", "0x197b", "0x060400"),
    "vf": ("0x15b3", "0x101e", "0x020700"),
}


def br(bus, dev=0):
    return f"0000:{bus:02x}:{dev:02x}.0"


def dev(kind, address, hb, bridges, numa, **kw):
    vendor, device, cls = IDS[kind]
    rec = {
        "address": address,
        "vendor_id": vendor,
        "device_id": device,
        "class_id": kw.pop("class_id", cls),
        "numa_node": numa,
        "host_bridge": hb,
        "bridges": list(bridges),
        "is_vf": kind == "vf",
        "physfn": kw.pop("physfn", None),
        "sriov_totalvfs": kw.pop("totalvfs", 16 if vendor == "0x15b3" and kind != "vf" else None),
        "sriov_numvfs": 0 if vendor == "0x15b3" and kind != "vf" else None,
        "netdevs": [],
        "rdma": [],
    }
    netdev = kw.pop("netdev", None)
    ll = kw.pop("ll", "Ethernet" if cls == "0x020000" else "InfiniBand")
    rate = kw.pop("rate", 400)
    if netdev:
        rec["netdevs"].append(
            {"name": netdev, "speed_mbps": rate * 1000, "operstate": "up", "type": 1 if ll == "Ethernet" else 32,
             "bond": kw.pop("bond", None)}
        )
    rdma = kw.pop("rdma", None)
    if rdma:
        rec["rdma"].append(
            {
                "name": rdma,
                "hca_type": "MT4129",
                "fw_ver": kw.pop("fw", "28.39.1002"),
                "board_id": kw.pop("board", CX7_BOARD),
                "ports": {1: {"state": kw.pop("state", "ACTIVE"), "phys_state": "LinkUp", "rate_gbps": rate,
                              "link_layer": ll}},
            }
        )
    assert not kw, kw
    return rec


# --- DGX H100: each GPU shares a multi-level switch hierarchy with one CX-7 (PXB) --------------
DGX_NIC = [0x18, 0x40, 0x4F, 0x5E, 0x9A, 0xC0, 0xCE, 0xDC]
DGX_GPU = [0x1B, 0x43, 0x52, 0x61, 0x9D, 0xC3, 0xD1, 0xDF]
DGX_IF = ["ibp24s0", "ibp64s0", "ibp79s0", "ibp94s0", "ibp154s0", "ibp192s0", "ibp206s0", "ibp220s0"]
DGX12_RDMA = ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]
DGX11_RDMA = ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_8", "mlx5_9", "mlx5_10"]
DGX_RAILS = [f"0000:{b:02x}:00.0" for b in DGX_NIC]


def dgx(eleven=False, storage_bond=False, ll="InfiniBand"):
    recs = []
    rdma_names = DGX11_RDMA if eleven else DGX12_RDMA
    for i, (n, g) in enumerate(zip(DGX_NIC, DGX_GPU, strict=True)):
        hb = f"0000:{n - 4:02x}"
        rp, usp = br(n - 4, 1), br(n - 3)
        numa = 0 if i < 4 else 1
        recs.append(dev("gpu", br(g), hb, [rp, usp, br(n - 2, 1), br(g - 2), br(g - 1)], numa))
        kind = "cx7" if ll == "InfiniBand" else "cx7eth"
        recs.append(dev(kind, br(n), hb, [rp, usp, br(n - 2)], numa, netdev=DGX_IF[i], rdma=rdma_names[i], ll=ll))
    # storage/in-band: dual-port CX-7 at 29 (mlx5_1/2) and aa (mlx5_7/8, or one function on the 11-device node)
    bond = "bond0" if storage_bond else None
    recs.append(dev("cx7eth", "0000:29:00.0", "0000:25", [br(0x25, 1)], 0, netdev="enp41s0f0np0", rdma="mlx5_1",
                    board="MT_0000000834"))
    recs.append(dev("cx7eth", "0000:29:00.1", "0000:25", [br(0x25, 1)], 0, netdev="enp41s0f1np1", rdma="mlx5_2",
                    board="MT_0000000834", bond=bond))
    if eleven:
        recs.append(dev("cx7eth", "0000:aa:00.0", "0000:a6", [br(0xA6, 1)], 1, netdev="enp170s0np0", rdma="mlx5_7",
                        board="MT_0000000834"))
    else:
        recs.append(dev("cx7eth", "0000:aa:00.0", "0000:a6", [br(0xA6, 1)], 1, netdev="enp170s0f0np0",
                        rdma="mlx5_7", board="MT_0000000834"))
        recs.append(dev("cx7eth", "0000:aa:00.1", "0000:a6", [br(0xA6, 1)], 1, netdev="enp170s0f1np1",
                        rdma="mlx5_8", board="MT_0000000834", bond=bond))
    return recs


# --- HGX H100 (XE9680-like): GPU on bus N, CX-7 on N+1 behind the same switch (PIX) -----------
HGX_GPU = [0x19, 0x3B, 0x4C, 0x5D, 0x9B, 0xBB, 0xCB, 0xDB]
HGX_RAILS = [f"0000:{g + 1:02x}:00.0" for g in HGX_GPU]


def hgx(ll="InfiniBand"):
    recs = []
    mlx = 0
    for i, g in enumerate(HGX_GPU):
        hb = f"0000:{g - 4:02x}"
        up = [br(g - 4, 1), br(g - 3)]
        numa = 0 if i < 4 else 1
        recs.append(dev("gpu", br(g), hb, [*up, br(g - 2, 0)], numa))
        kind = "cx7" if ll == "InfiniBand" else "cx7eth"
        recs.append(dev(kind, br(g + 1), hb, [*up, br(g - 2, 1)], numa, netdev=f"ibp{g + 1}s0", rdma=f"mlx5_{mlx}",
                        ll=ll))
        mlx += 1
        if i in (0, 4):  # dual-port CX-6 Dx on GPU0's / GPU4's switch
            for f in (0, 1):
                recs.append(dev("cx6dx", f"0000:{g + 2:02x}:00.{f}", hb, [*up, br(g - 2, 2)], numa,
                                netdev=f"ens{g + 2}f{f}np{f}", rdma=f"mlx5_{mlx}", board="DEL0000000027",
                                rate=100, totalvfs=8))
                mlx += 1
    for k in range(4):
        recs.append(dev("nvswitch", br(0x83 + k), "0000:80", [br(0x80, 1), br(0x81), br(0x82, k)], 1))
    return recs


def by_addr(result):
    return {n["pci_address"]: n for n in result["nics"]}


def rail_addrs(result):
    return [r["pci_address"] for r in result["rails"]]


# ---------------------------------------------------------------------------------------------
# PCIe distance
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (("0000:15", ["a", "u", "d1"], 0), ("0000:15", ["a", "u", "d2"], 0), "PIX"),  # one switch
        (("0000:15", ["a", "u", "d1"], 0), ("0000:15", ["a", "u", "d1"], 0), "PIX"),  # same port
        (("0000:15", ["a", "u", "d1", "u2", "d3"], 0), ("0000:15", ["a", "u", "d2"], 0), "PXB"),
        (("0000:15", ["a"], 0), ("0000:15", ["b"], 0), "PHB"),
        (("0000:15", ["a"], 0), ("0000:37", ["a"], 0), "NODE"),
        (("0000:15", ["a"], 0), ("0000:97", ["a"], 1), "SYS"),
        (("0000:15", ["a"], None), ("0000:97", ["a"], None), "NODE"),
    ],
)
def test_pcie_distance(a, b, expected):
    ra = {"host_bridge": a[0], "bridges": a[1], "numa_node": a[2]}
    rb = {"host_bridge": b[0], "bridges": b[1], "numa_node": b[2]}
    assert pcie_distance(ra, rb) == expected
    assert pcie_distance(rb, ra) == expected


def test_pix_ranks_before_pxb_and_fewer_hops_first():
    gpu = {"host_bridge": "0000:15", "bridges": ["a", "u", "d1", "u2", "d2"]}
    near = {"host_bridge": "0000:15", "bridges": ["a", "u", "d1", "u2", "d3"]}
    far = {"host_bridge": "0000:15", "bridges": ["a", "u", "d9"]}
    assert nic_roles.pcie_distance_detail(gpu, near) == ("PIX", 4)
    assert nic_roles.pcie_distance_detail(gpu, far)[0] == "PXB"


# ---------------------------------------------------------------------------------------------
# The reference machines
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("eleven", "rdma"), [(False, DGX12_RDMA), (True, DGX11_RDMA)])
def test_dgx_rails_follow_pci_not_mlx5_numbering(eleven, rdma):
    result = classify(dgx(eleven=eleven))
    assert rail_addrs(result) == DGX_RAILS
    assert [r["rdma_device"] for r in result["rails"]] == rdma
    assert [r["rail"] for r in result["rails"]] == list(range(8))
    assert [r["gpu"] for r in result["rails"]] == [br(g) for g in DGX_GPU]
    assert [g["rail_nic"] for g in result["gpus"]] == DGX_RAILS
    nics = by_addr(result)
    for address in DGX_RAILS:
        assert nics[address]["role"] == "compute"
        assert nics[address]["gpu_distance"] == "PXB"
        assert nics[address]["role_reason"].startswith("nearest NIC to GPU 0000:")
        assert "(PXB)" in nics[address]["role_reason"]
    storage = [a for a, n in nics.items() if n["role"] == "storage"]
    assert storage == (["0000:29:00.0", "0000:29:00.1", "0000:aa:00.0"] if eleven
                       else ["0000:29:00.0", "0000:29:00.1", "0000:aa:00.0", "0000:aa:00.1"])
    assert nics["0000:29:00.0"]["role_reason"] == "2-port card 0000:29:00: storage"
    assert nics["0000:29:00.0"]["ports"] == 2
    if eleven:
        assert nics["0000:aa:00.0"]["ports"] == 1
        assert nics["0000:aa:00.0"]["rdma_device"] == "mlx5_7"
        assert "no GPU within its PCIe switch" in nics["0000:aa:00.0"]["role_reason"]
    assert result["gpus_without_rail"] == []
    assert result["warnings"] == []


def test_dgx_eleven_and_twelve_give_the_same_rail_addresses():
    assert rail_addrs(classify(dgx(eleven=True))) == rail_addrs(classify(dgx(eleven=False)))


def test_hgx_one_rail_per_gpu_never_cx6dx():
    result = classify(hgx())
    assert rail_addrs(result) == HGX_RAILS
    assert [r["rdma_device"] for r in result["rails"]] == ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6",
                                                           "mlx5_9", "mlx5_10", "mlx5_11"]
    nics = by_addr(result)
    for address in ("0000:1b:00.0", "0000:1b:00.1", "0000:9d:00.0", "0000:9d:00.1"):
        assert nics[address]["role"] == "storage"
        assert nics[address]["model"] == "ConnectX-6 Dx"
        assert nics[address]["gpu_distance"] == "PIX"  # on GPU0's / GPU4's switch, still not a rail
        assert nics[address]["rail"] is None
    assert all(nics[a]["gpu_distance"] == "PIX" for a in HGX_RAILS)
    assert len(result["nvswitches"]) == 4
    assert [g["model"] for g in result["gpus"]] == ["H100 SXM5 80GB"] * 8
    assert result["warnings"] == []


@pytest.mark.parametrize(("build", "ll"), [(hgx, "Ethernet"), (hgx, "InfiniBand"), (dgx, "Ethernet")])
def test_rails_on_roce_and_infiniband_boards(build, ll):
    result = classify(build(ll=ll))
    assert len(result["rails"]) == 8
    assert {r["link_layer"] for r in result["rails"]} == {ll}
    assert {r["speed_gbps"] for r in result["rails"]} == {400}


def test_nic_entry_keys_are_stable():
    nic = by_addr(classify(dgx()))["0000:18:00.0"]
    assert set(nic) == {
        "pci_address", "vendor_id", "device_id", "model", "card", "function", "ports", "netdev", "rdma_device",
        "link_layer", "link_state", "speed_gbps", "numa_node", "board_id", "fw_version", "sriov_totalvfs",
        "sriov_numvfs", "bond", "role", "role_reason", "rail", "gpu", "gpu_distance",
    }
    assert nic["device_id"] == "0x1021" and nic["model"] == "ConnectX-7"
    assert nic["card"] == "0000:18:00" and nic["function"] == 0 and nic["ports"] == 1
    assert nic["link_state"] == "ACTIVE" and nic["speed_gbps"] == 400 and nic["board_id"] == CX7_BOARD


# ---------------------------------------------------------------------------------------------
# Edge layouts
# ---------------------------------------------------------------------------------------------


def test_gpu_without_nic():
    recs = [r for r in hgx() if r["address"] != "0000:5e:00.0"]  # GPU3's CX-7 missing
    result = classify(recs)
    assert len(result["rails"]) == 7
    (missing,) = result["gpus_without_rail"]
    assert missing["gpu"] == "0000:5d:00.0" and missing["index"] == 3 and missing["candidates"] == []
    assert "no single-port Mellanox NIC" in missing["reason"]
    assert result["gpus"][3]["rail_nic"] is None
    assert any("GPU 3 (0000:5d:00.0) has no rail NIC" in w for w in result["warnings"])
    assert 3 not in [r["rail"] for r in result["rails"]]  # rail index stays the GPU index
    assert [r["rail"] for r in result["rails"]] == [0, 1, 2, 4, 5, 6, 7]


def _hgx_with_second_nic_on_gpu0(kind, **kw):
    recs = hgx()
    gpu0 = next(r for r in recs if r["address"] == "0000:19:00.0")
    extra = dev(kind, "0000:1c:00.0", gpu0["host_bridge"], [*gpu0["bridges"][:2], br(0x17, 3)], 0,
                netdev="ens28np0", rdma="mlx5_12", **kw)
    return recs + [extra]


def test_two_candidates_tie_broken_by_model_of_the_other_rails():
    # a single-function storage card of a different model on GPU0's switch (same distance as the CX-7)
    result = classify(_hgx_with_second_nic_on_gpu0("cx6lx", board="MT_0000000531", rate=400))
    nics = by_addr(result)
    assert nics["0000:1a:00.0"]["role"] == "compute"
    assert "tie broken by model ConnectX-7/board MT_0000000838" in nics["0000:1a:00.0"]["role_reason"]
    assert nics["0000:1c:00.0"]["role"] == "storage"
    assert nics["0000:1c:00.0"]["model"] == "ConnectX-6 Lx"
    assert "lost the rail of GPU 0000:19:00.0 to 0000:1a:00.0" in nics["0000:1c:00.0"]["role_reason"]
    assert rail_addrs(result) == HGX_RAILS


def test_two_candidates_tie_broken_by_speed():
    result = classify(_hgx_with_second_nic_on_gpu0("cx7", rate=200))
    nics = by_addr(result)
    assert rail_addrs(result) == HGX_RAILS
    assert "higher link speed (400 Gb/s)" in nics["0000:1a:00.0"]["role_reason"]
    assert nics["0000:1c:00.0"]["role"] == "storage"


def test_true_tie_is_ambiguous():
    result = classify(_hgx_with_second_nic_on_gpu0("cx7"))
    (amb,) = result["gpus_without_rail"]
    assert amb["index"] == 0 and amb["gpu"] == "0000:19:00.0"
    assert amb["candidates"] == ["0000:1a:00.0", "0000:1c:00.0"]
    assert "tie at PIX" in amb["reason"]
    nics = by_addr(result)
    assert nics["0000:1a:00.0"]["role"] == "storage" and nics["0000:1c:00.0"]["role"] == "storage"
    assert "ambiguous" in nics["0000:1a:00.0"]["role_reason"]
    assert [r["rail"] for r in result["rails"]] == [1, 2, 3, 4, 5, 6, 7]
    assert any("GPU 0 (0000:19:00.0)" in w for w in result["warnings"])


def test_one_nic_nearest_to_two_gpus_serves_the_first():
    recs = [r for r in hgx() if r["address"] != "0000:3c:00.0"]
    gpu0 = next(r for r in recs if r["address"] == "0000:19:00.0")
    # GPU1 moved onto GPU0's switch; no NIC of its own
    gpu1 = next(r for r in recs if r["address"] == "0000:3b:00.0")
    gpu1.update(host_bridge=gpu0["host_bridge"], bridges=[*gpu0["bridges"][:2], br(0x17, 4)])
    result = classify(recs)
    (entry,) = result["gpus_without_rail"]
    assert entry["index"] == 1 and entry["candidates"] == ["0000:1a:00.0"]
    assert "already serves GPU 0000:19:00.0" in entry["reason"]


def bf3_bond(recs, gpu_address):
    gpu = next(r for r in recs if r["address"] == gpu_address)
    up = gpu["bridges"][:2]
    hb, numa = gpu["host_bridge"], gpu["numa_node"]
    # BF-3: an internal Mellanox bridge (class 0x0604, not a NIC) above two PFs, RoCE LAG over both
    bridge = dev("bf3bridge", "0000:a1:00.0", hb, [*up, br(0xA0, 5)], numa, totalvfs=None)
    pf0 = dev("bf3", "0000:a2:00.0", hb, [*up, br(0xA0, 5), br(0xA1, 0)], numa, netdev="enp162s0f0np0",
              rdma="mlx5_bond_0", ll="Ethernet", rate=200, board=BF3_BOARD, fw="32.38.3056", bond="bond0")
    pf1 = dev("bf3", "0000:a2:00.1", hb, [*up, br(0xA0, 5), br(0xA1, 0)], numa, netdev="enp162s0f1np1",
              ll="Ethernet", rate=200, bond="bond0")
    return recs + [bridge, pf0, pf1]


def test_bluefield3_bond_is_dpu_never_rail():
    result = classify(bf3_bond(hgx(), "0000:9b:00.0"))
    nics = by_addr(result)
    assert "0000:a1:00.0" not in nics  # the BF-3 internal bridge is not a NIC
    for address in ("0000:a2:00.0", "0000:a2:00.1"):
        assert nics[address]["role"] == "dpu"
        assert nics[address]["model"] == "BlueField-3"
        assert nics[address]["bond"] == "bond0"
        assert nics[address]["rail"] is None
        assert "member of bond0" in nics[address]["role_reason"]
    assert nics["0000:a2:00.0"]["rdma_device"] == "mlx5_bond_0"
    assert nics["0000:a2:00.0"]["speed_gbps"] == 200
    assert nics["0000:a2:00.1"]["rdma_device"] is None
    assert rail_addrs(result) == HGX_RAILS


def test_management_via_bond():
    result = classify(dgx(storage_bond=True), management_interfaces=["bond0"])
    nics = by_addr(result)
    for address in ("0000:29:00.1", "0000:aa:00.1"):
        assert nics[address]["role"] == "management"
        assert nics[address]["role_reason"] == "carries management interface bond0"
        assert nics[address]["bond"] == "bond0"
    assert nics["0000:29:00.0"]["role"] == "storage"
    assert rail_addrs(result) == DGX_RAILS


def test_bond_member_without_management_is_storage():
    nics = by_addr(classify(dgx(storage_bond=True)))
    assert nics["0000:29:00.1"]["role"] == "storage"
    assert nics["0000:29:00.1"]["role_reason"] == "member of bond0"


def test_management_via_plain_netdev():
    result = classify(dgx(eleven=True), management_interfaces=["enp170s0np0", "lo"])
    nics = by_addr(result)
    assert nics["0000:aa:00.0"]["role"] == "management"
    assert nics["0000:aa:00.0"]["role_reason"] == "carries management interface enp170s0np0"
    assert rail_addrs(result) == DGX_RAILS


def test_management_via_vlan_on_bond():
    snapshot = {"devices": dgx(storage_bond=True), "bonds": {}, "net_lowers": {"bond0.100": ["bond0"]}}
    nics = by_addr(classify(snapshot, management_interfaces=["bond0.100"]))
    assert nics["0000:29:00.1"]["role"] == "management"
    assert nics["0000:29:00.1"]["role_reason"] == "carries management interface bond0.100"


def test_management_never_on_a_rail_even_when_it_is_a_compute_nic():
    result = classify(hgx(), management_interfaces=["ibp26s0"])  # 0000:1a:00.0
    nics = by_addr(result)
    assert nics["0000:1a:00.0"]["role"] == "management"
    assert result["gpus_without_rail"][0]["index"] == 0


def test_overrides():
    overrides = {
        "0000:1b:00.0": {"role": "compute", "rail": 0},
        "1b:00.1": {"role": "ignored"},
        "0000:9d:00.0": {"role": "storage"},
        "0000:77:00.0": {"role": "storage"},
    }
    result = classify(hgx(), overrides=overrides)
    nics = by_addr(result)
    assert nics["0000:1b:00.0"]["role"] == "compute" and nics["0000:1b:00.0"]["rail"] == 0
    assert nics["0000:1b:00.0"]["gpu"] == "0000:19:00.0"
    assert nics["0000:1b:00.0"]["role_reason"] == "override from gpunode_nic_overrides"
    assert nics["0000:1b:00.1"]["role"] == "ignored"
    assert nics["0000:1a:00.0"]["role"] == "storage"
    assert "already has rail NIC 0000:1b:00.0" in nics["0000:1a:00.0"]["role_reason"]
    assert result["rails"][0]["pci_address"] == "0000:1b:00.0"
    assert rail_addrs(result)[1:] == HGX_RAILS[1:]
    assert result["warnings"] == ["override for 0000:77:00.0: not present on this host; ignored"]


def test_override_compute_without_rail_joins_the_candidates():
    result = classify(hgx(), overrides={"0000:9d:00.1": {"role": "compute"}})
    nics = by_addr(result)
    assert nics["0000:9d:00.1"]["role"] == "compute"
    assert nics["0000:9d:00.1"]["rail"] is None  # the CX-7 is still the unique nearest: no rail, warned
    assert any("0000:9d:00.1" in w for w in result["warnings"])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"0000:1a:00.0": {"role": "rail"}}, "override 0000:1a:00.0: role 'rail' is not one of"),
        ({"0000:1a:00.0": {"role": "storage", "rail": 1}}, "override 0000:1a:00.0: 'rail' is only valid"),
        ({"0000:1a:00.0": {"role": "compute", "rail": -1}}, "override 0000:1a:00.0: rail -1"),
        ({"0000:1a:00.0": "compute"}, "override 0000:1a:00.0: expected a dict"),
        ({"0000:1a:00.0": {"role": "compute", "mtu": 9000}}, "override 0000:1a:00.0: unknown key(s) mtu"),
        ({"zz:00.0": {"role": "compute"}}, "override 'zz:00.0'"),
        ({"0000:1a:00.0": {"role": "compute", "rail": 0}, "0000:3c:00.0": {"role": "compute", "rail": 0}},
         "rail 0 is already given to 0000:1a:00.0"),
    ],
)
def test_bad_overrides_raise_naming_the_address(overrides, message):
    with pytest.raises(ValueError, match=None) as err:
        classify(hgx(), overrides=overrides)
    assert message in str(err.value)


def test_vf_is_not_a_pf_and_not_a_port():
    recs = hgx()
    nic0 = next(r for r in recs if r["address"] == "0000:1a:00.0")
    nic0["sriov_numvfs"] = 2
    vf1 = dev("vf", "0000:1a:00.2", nic0["host_bridge"], nic0["bridges"], 0, physfn="0000:1a:00.0", netdev="ibp26s0v0")
    vf2 = dev("cx7", "0000:1a:00.3", nic0["host_bridge"], nic0["bridges"], 0, physfn="0000:1a:00.0")
    vf2["is_vf"] = True
    result = classify([*recs, vf1, vf2])
    nics = by_addr(result)
    assert "0000:1a:00.2" not in nics and "0000:1a:00.3" not in nics
    assert nics["0000:1a:00.0"]["ports"] == 1 and nics["0000:1a:00.0"]["role"] == "compute"
    assert nics["0000:1a:00.0"]["sriov_numvfs"] == 2
    assert rail_addrs(result) == HGX_RAILS


def test_pf_without_driver_and_without_gpu_affinity_is_ignored():
    recs = hgx()
    recs.append(dev("cx6lx", "0000:70:00.0", "0000:6f", [br(0x6F, 1)], 0))
    nics = by_addr(classify(recs))
    assert nics["0000:70:00.0"]["role"] == "ignored"
    assert "no netdev and no RDMA device" in nics["0000:70:00.0"]["role_reason"]


def test_pf_without_driver_but_gpu_affinity_still_gets_its_rail():
    recs = hgx()
    for rec in recs:
        rec["netdevs"], rec["rdma"] = [], []  # bare machine: no mlx5 driver bound
    result = classify(recs)
    assert rail_addrs(result) == HGX_RAILS
    assert all(r["rdma_device"] is None for r in result["rails"])


def test_no_gpu_host():
    recs = [r for r in dgx() if r["vendor_id"] != "0x10de"]
    result = classify(recs)
    assert result["gpus"] == [] and result["rails"] == []
    assert {n["role"] for n in result["nics"]} == {"storage"}
    assert all(n["gpu_distance"] is None for n in result["nics"])


def test_input_is_not_modified():
    recs = hgx()
    before = copy.deepcopy(recs)
    classify(recs, overrides={"0000:1a:00.0": {"role": "storage"}})
    assert recs == before


# ---------------------------------------------------------------------------------------------
# The same rules on sysfs trees written by the simulator (real kernel layout)
# ---------------------------------------------------------------------------------------------

sim_profile = pytest.importorskip("gpunode.sim.profile")
sim_sysfs = pytest.importorskip("gpunode.sim.sysfs")
pci_sysfs = pytest.importorskip("ansible_collections.mlplatform.gpunode.plugins.module_utils.pci_sysfs")


def _walk_nodes(children):
    for node in children:
        yield node
        yield from _walk_nodes(node.get("children") or [])


def nodes(profile):
    for hb in profile["pcie"]:
        yield from _walk_nodes(hb["children"])


def nic_node(profile, slot):
    return next(n for n in nodes(profile) if n.get("nic") == slot)


def parent_of(profile, child):
    return next(n for n in nodes(profile) if any(c is child for c in n.get("children") or []))


def sysfs_snapshot(tmp_path, profile, name="host"):
    normalized = sim_profile.validate_profile(profile, f"{profile['name']} (edited in test)")
    root = tmp_path / name
    sim_sysfs.materialize(normalized, root)
    return pci_sysfs.read_sysfs(root)


def profile_expectations(profile):
    """``{pci address: expect}`` from the profile's own ``expect`` fields."""
    out = {}
    for node in nodes(profile):
        if "nic" in node:
            for fn in node["functions"]:
                if fn.get("expect"):
                    out[f"{node['nic']}.{fn['function']}"] = fn["expect"]
    return out


@pytest.mark.parametrize("name", ["dgx-h100", "hgx-h100"])
def test_sysfs_reference_profiles_match_their_expectations(tmp_path, name):
    profile = sim_profile.load_profile(name)
    result = classify(sysfs_snapshot(tmp_path, profile))
    nics = by_addr(result)
    expected = profile_expectations(profile)
    assert expected, "the profile declares what each NIC should be"
    for address, expect in expected.items():
        assert (nics[address]["role"], nics[address]["rail"]) == (expect["role"], expect["rail"]), address
    assert result["gpus_without_rail"] == [] and result["warnings"] == []


def test_sysfs_dgx_twelve_devices(tmp_path):
    result = classify(sysfs_snapshot(tmp_path, sim_profile.load_profile("dgx-h100")), management_interfaces=[])
    assert rail_addrs(result) == DGX_RAILS
    assert [r["rdma_device"] for r in result["rails"]] == DGX12_RDMA
    assert {r["link_layer"] for r in result["rails"]} == {"InfiniBand"}
    assert "DGX H100" in result["platform"]["product"]


def dgx_eleven_profile():
    """The 11-device node of real-outputs/ibdev2netdev-dgx-h100-aben20807.txt: card aa shows one function."""
    profile = copy.deepcopy(sim_profile.load_profile("dgx-h100"))
    card = nic_node(profile, "0000:aa:00")
    dropped = card["functions"].pop(1)
    card["functions"][0].update(netdev="enp170s0np0", rdma="mlx5_7")
    renumber = {"0000:c0:00": "mlx5_8", "0000:ce:00": "mlx5_9", "0000:dc:00": "mlx5_10"}
    for slot, rdma in renumber.items():
        nic_node(profile, slot)["functions"][0]["rdma"] = rdma
    for bond in profile["bonds"]:
        bond["slaves"] = [s for s in bond["slaves"] if s != dropped["netdev"]]
    profile["bonds"] = [b for b in profile["bonds"] if len(b["slaves"]) > 0]
    return profile


def test_sysfs_dgx_eleven_devices_same_rail_addresses(tmp_path):
    snapshot = sysfs_snapshot(tmp_path, dgx_eleven_profile())
    result = classify(snapshot)
    assert rail_addrs(result) == DGX_RAILS
    assert [r["rdma_device"] for r in result["rails"]] == DGX11_RDMA
    nics = by_addr(result)
    assert nics["0000:aa:00.0"]["role"] == "storage"
    assert nics["0000:aa:00.0"]["netdev"] == "enp170s0np0" and nics["0000:aa:00.0"]["rdma_device"] == "mlx5_7"


def test_sysfs_hgx_roce_rails_never_cx6dx(tmp_path):
    result = classify(sysfs_snapshot(tmp_path, sim_profile.load_profile("hgx-h100")))
    assert rail_addrs(result) == HGX_RAILS
    assert {r["link_layer"] for r in result["rails"]} == {"Ethernet"}
    nics = by_addr(result)
    assert {nics[a]["role"] for a in nics if nics[a]["model"] == "ConnectX-6 Dx"} == {"storage"}
    assert len(result["nvswitches"]) == 4


def test_sysfs_hgx_gpu_without_nic(tmp_path):
    profile = copy.deepcopy(sim_profile.load_profile("hgx-h100"))
    card = nic_node(profile, "0000:5e:00")
    port = parent_of(profile, card)
    port["children"].remove(card)
    result = classify(sysfs_snapshot(tmp_path, profile))
    (missing,) = result["gpus_without_rail"]
    assert missing["gpu"] == "0000:5d:00.0" and missing["index"] == 3
    assert [r["rail"] for r in result["rails"]] == [0, 1, 2, 4, 5, 6, 7]


def _add_single_port(profile, gpu_slot_card, slot, model, **fn):
    """Put a single-function NIC on a new downstream port of the switch that holds ``gpu_slot_card``."""
    card = nic_node(profile, gpu_slot_card)
    switch = parent_of(profile, parent_of(profile, card))
    bus = int(slot[5:7], 16)
    port_addr = f"0000:{int(switch['children'][0]['bridge'][5:7], 16):02x}:07.0"
    extra = {
        "nic": slot,
        "model": model,
        "board_id": fn.pop("board_id", CX7_BOARD),
        "fw_version": "28.39.1002",
        "link_layer": "Ethernet",
        "speed_gbps": fn.pop("speed_gbps", 400),
        "functions": [{"function": 0, "netdev": f"enp{bus}s0np0", "rdma": fn.pop("rdma", "mlx5_12")}],
    }
    switch["children"].append({"bridge": port_addr, "children": [extra]})


def test_sysfs_tie_broken_by_model_and_true_tie(tmp_path):
    profile = copy.deepcopy(sim_profile.load_profile("hgx-h100"))
    _add_single_port(profile, "0000:1a:00", "0000:1c:00", "cx6lx", board_id="MT_0000000531")
    nics = by_addr(classify(sysfs_snapshot(tmp_path, profile, "model")))
    assert nics["0000:1a:00.0"]["rail"] == 0 and nics["0000:1c:00.0"]["role"] == "storage"

    profile = copy.deepcopy(sim_profile.load_profile("hgx-h100"))
    _add_single_port(profile, "0000:1a:00", "0000:1c:00", "cx7")
    result = classify(sysfs_snapshot(tmp_path, profile, "tie"))
    (amb,) = result["gpus_without_rail"]
    assert amb["candidates"] == ["0000:1a:00.0", "0000:1c:00.0"]


def test_sysfs_bluefield3_bond_is_dpu(tmp_path):
    profile = copy.deepcopy(sim_profile.load_profile("hgx-h100"))
    switch = parent_of(profile, parent_of(profile, nic_node(profile, "0000:9c:00")))
    bf3 = {
        "nic": "0000:9f:00",
        "model": "bf3",
        "board_id": BF3_BOARD,
        "fw_version": "32.38.3056",
        "link_layer": "Ethernet",
        "speed_gbps": 200,
        "functions": [
            {"function": 0, "netdev": "enp159s0f0np0"},
            {"function": 1, "netdev": "enp159s0f1np1"},
        ],
    }
    switch["children"].append({"bridge": "0000:9a:07.0", "children": [bf3]})
    profile["bonds"] = [{"name": "bond1", "mode": "802.3ad", "slaves": ["enp159s0f0np0", "enp159s0f1np1"],
                         "rdma": "mlx5_bond_0"}]
    result = classify(sysfs_snapshot(tmp_path, profile))
    nics = by_addr(result)
    for address in ("0000:9f:00.0", "0000:9f:00.1"):
        assert nics[address]["role"] == "dpu" and nics[address]["bond"] == "bond1"
        assert nics[address]["gpu_distance"] == "PIX"
    assert nics["0000:9f:00.0"]["rdma_device"] == "mlx5_bond_0"
    assert nics["0000:9f:00.0"]["board_id"] == BF3_BOARD
    assert rail_addrs(result) == HGX_RAILS


def test_sysfs_management_via_bond_and_plain_netdev(tmp_path):
    snapshot = sysfs_snapshot(tmp_path, sim_profile.load_profile("dgx-h100"))
    nics = by_addr(classify(snapshot, management_interfaces=["bond0"]))
    assert [a for a, n in nics.items() if n["role"] == "management"] == ["0000:29:00.1", "0000:aa:00.1"]
    nics = by_addr(classify(snapshot, management_interfaces=["enp41s0f0np0"]))
    assert [a for a, n in nics.items() if n["role"] == "management"] == ["0000:29:00.0"]


def test_sysfs_overrides(tmp_path):
    snapshot = sysfs_snapshot(tmp_path, sim_profile.load_profile("hgx-h100"))
    result = classify(snapshot, overrides={"0000:9d:00.0": {"role": "ignored"}, "0000:01:00.0": {"role": "storage"}})
    assert by_addr(result)["0000:9d:00.0"]["role"] == "ignored"
    assert result["warnings"] == ["override for 0000:01:00.0: not present on this host; ignored"]


def test_sysfs_vf_present(tmp_path):
    import os

    profile = sim_profile.load_profile("hgx-h100")
    root = tmp_path / "vf"
    sim_sysfs.materialize(profile, root)
    # What the kernel adds after `echo 1 > sriov_numvfs`: a sibling function with a physfn link.
    pf_dir = os.path.realpath(root / "bus/pci/devices/0000:1a:00.0")
    vf_dir = os.path.join(os.path.dirname(pf_dir), "0000:1a:00.1")
    os.makedirs(vf_dir)
    for attr, value in (("vendor", "0x15b3"), ("device", "0x101e"), ("class", "0x020000"), ("numa_node", "0")):
        with open(os.path.join(vf_dir, attr), "w") as handle:
            handle.write(value + "\n")
    os.symlink(os.path.relpath(pf_dir, vf_dir), os.path.join(vf_dir, "physfn"))
    os.symlink(os.path.relpath(vf_dir, root / "bus/pci/devices"), root / "bus/pci/devices/0000:1a:00.1")
    snapshot = pci_sysfs.read_sysfs(root)
    vf = next(d for d in snapshot["devices"] if d["address"] == "0000:1a:00.1")
    assert vf["is_vf"] and vf["physfn"] == "0000:1a:00.0"
    result = classify(snapshot)
    nics = by_addr(result)
    assert "0000:1a:00.1" not in nics and nics["0000:1a:00.0"]["ports"] == 1
    assert rail_addrs(result) == HGX_RAILS


# ---------------------------------------------------------------------------------------------
# The reader itself on a simulator tree
# ---------------------------------------------------------------------------------------------


def test_reader_records_on_dgx_tree(tmp_path):
    snapshot = sysfs_snapshot(tmp_path, sim_profile.load_profile("dgx-h100"))
    recs = {d["address"]: d for d in snapshot["devices"]}
    nic = recs["0000:18:00.0"]
    assert (nic["vendor_id"], nic["device_id"], nic["numa_node"]) == ("0x15b3", "0x1021", 0)
    assert nic["class_id"].startswith("0x02")
    assert nic["host_bridge"] is not None and nic["bridges"]
    assert all(b in recs for b in nic["bridges"])  # every ancestor is itself a PCI function
    assert (nic["sriov_totalvfs"], nic["sriov_numvfs"], nic["is_vf"]) == (16, 0, False)
    assert [n["name"] for n in nic["netdevs"]] == ["ibp24s0"]
    assert nic["rdma"][0]["name"] == "mlx5_0" and nic["rdma"][0]["ports"][1]["state"] == "ACTIVE"
    assert snapshot["bonds"]["bond0"]["slaves"] == ["enp41s0f1np1", "enp170s0f1np1"]
    assert recs["0000:29:00.1"]["netdevs"][0]["bond"] == "bond0"
    gpu = recs["0000:1b:00.0"]
    assert gpu["vendor_id"] == "0x10de" and gpu["netdevs"] == [] and gpu["rdma"] == []


def test_reader_link_down_speed_reads_none(tmp_path, monkeypatch):
    import builtins
    import errno
    import os

    root = tmp_path / "down"
    sim_sysfs.materialize(sim_profile.load_profile("hgx-h100"), root)
    speed = os.path.realpath(root / "class/net/enp26s0np0") + "/speed"
    real_open = builtins.open

    def einval_open(file, *args, **kwargs):
        if os.fspath(file) == speed:
            raise OSError(errno.EINVAL, "Invalid argument", speed)  # what the kernel does for a down link
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", einval_open)
    snapshot = pci_sysfs.read_sysfs(root)
    nic = next(d for d in snapshot["devices"] if d["address"] == "0000:1a:00.0")
    assert nic["netdevs"][0]["speed_mbps"] is None


def test_reader_optional_files_missing_are_none(tmp_path):
    import os

    root = tmp_path / "sparse"
    sim_sysfs.materialize(sim_profile.load_profile("hgx-h100"), root)
    pf = os.path.realpath(root / "bus/pci/devices/0000:1a:00.0")
    for attr in ("numa_node", "sriov_totalvfs", "sriov_numvfs"):
        os.remove(os.path.join(pf, attr))
    nic = next(d for d in pci_sysfs.read_sysfs(root)["devices"] if d["address"] == "0000:1a:00.0")
    assert (nic["numa_node"], nic["sriov_totalvfs"], nic["sriov_numvfs"]) == (None, None, None)
