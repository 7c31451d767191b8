"""Discovery on real server layouts the classifier was not written against.

Each layout is built as a simulator profile in the test (validate_profile + materialize into
tmp_path), read back with pci_sysfs.read_sysfs and classified with nic_roles.classify, exactly as
nic_info does on a host. Every case names its public source; where the source gives only the
GPU<->NIC relation (``nvidia-smi topo -m``) and not the PCI addresses of bridges and NICs, those
are inferred and the comment says so. Expectations are what a human reads off the source: which
NIC serves which GPU, and what the other NICs are.
"""

from __future__ import annotations

import copy

import pytest
from ansible_collections.mlplatform.gpunode.plugins.module_utils.nic_roles import classify

sim_profile = pytest.importorskip("gpunode.sim.profile")
sim_sysfs = pytest.importorskip("gpunode.sim.sysfs")
pci_sysfs = pytest.importorskip("ansible_collections.mlplatform.gpunode.plugins.module_utils.pci_sysfs")

CX7_BOARD = "MT_0000000838"  # hardware-facts.md "PCI identities" (MCX75310AAS-NEA, single-port OSFP)
B3220_BOARD = "MT_0000000884"  # DOCA Installation Guide, supported BlueField-3 platforms (B3220 DPU)
B3140H_BOARD = "MT_0000001010"  # inferred placeholder: no public sample shows the B3140H SuperNIC PSID
STORAGE_BOARD = "MT_0000000834"  # inferred placeholder, as in the dgx-h100 profile

# H200 SXM is not in the shipped catalogue: the public pci.ids names 10de:2335 "GH100 [H200 SXM
# 141GB]"; the other fields are those of the H100 SXM5 (same GH100 package, PCIe Gen5 x16).
H200 = {
    "description": "NVIDIA H200 SXM 141GB",
    "name": "NVIDIA H200",
    "vendor_id": "0x10de",
    "device_id": "0x2335",
    "subsystem_vendor_id": "0x10de",
    "subsystem_device_id": "0x18be",  # inferred
    "class": "0x030200",
    "revision": "0xa1",  # inferred
    "memory_mib": 143771,  # inferred (141 GB HBM3e)
    "power_limit_w": 700,
    "pcie_link_speed": "32.0 GT/s PCIe",
    "pcie_link_width": 16,
}


@pytest.fixture(autouse=True)
def _catalog_with_h200(monkeypatch):
    catalog = sim_profile.load_catalog()
    catalog["gpu_models"]["h200-sxm-141gb"] = H200
    monkeypatch.setattr(sim_profile, "_default_catalog", lambda: copy.deepcopy(catalog))


# ---------------------------------------------------------------------------------------------
# Profile builders (schema: src/gpunode/sim/profiles/README.md)
# ---------------------------------------------------------------------------------------------


def bdf(bus, dev=0, fn=0, dom="0000"):
    return f"{dom}:{bus:02x}:{dev:02x}.{fn}"


def root_port(address, children):
    # Sapphire Rapids root port id (as in the shipped profiles; inferred)
    return {"bridge": address, "vendor_id": "0x8086", "device_id": "0x352a", "children": children}


def gpu(address, model="h100-sxm5-80gb"):
    return {"gpu": address, "model": model}


def card(slot, functions, model="cx7", board=CX7_BOARD, ll="InfiniBand", speed=400, fw="28.39.1002"):
    fns = []
    for i, spec in enumerate(functions):
        netdev, rdma, *rest = spec
        entry = {"function": i, "netdev": netdev, "rdma": rdma}
        if rest:
            entry.update(rest[0])
        fns.append(entry)
    return {"nic": slot, "model": model, "board_id": board, "fw_version": fw, "link_layer": ll,
            "speed_gbps": speed, "functions": fns}


def single(slot, netdev, rdma, **kw):
    fn = kw.pop("fn", {})
    return card(slot, [(netdev, rdma, fn)], **kw)


def pix_unit(hbus, numa, nic, gpu_model="h100-sxm5-80gb", dom="0000", extra=()):
    """Root port -> one PCIe switch -> [GPU on bus hbus+3 | NIC on bus hbus+4 | extra ...]: PIX."""
    ports = [
        {"bridge": bdf(hbus + 2, 0, dom=dom), "children": [gpu(bdf(hbus + 3, dom=dom), gpu_model)]},
        {"bridge": bdf(hbus + 2, 1, dom=dom), "children": [nic]},
    ]
    for k, node in enumerate(extra, start=2):
        ports.append({"bridge": bdf(hbus + 2, k, dom=dom), "children": [node]})
    switch = {"bridge": bdf(hbus + 1, dom=dom), "children": ports}
    return {"host_bridge": f"{dom}:{hbus:02x}", "numa_node": numa,
            "children": [root_port(bdf(hbus, 1, dom=dom), [switch])]}


def own_root_port(hbus, numa, node, dom="0000"):
    """A device alone on a root port of its own host bridge: NODE/SYS to every GPU."""
    return {"host_bridge": f"{dom}:{hbus:02x}", "numa_node": numa,
            "children": [root_port(bdf(hbus, 1, dom=dom), [node])]}


def nvswitches(hbus=0x80, numa=1):
    ports = [{"bridge": bdf(hbus + 2, k), "children": [{"nvswitch": bdf(hbus + 3 + k), "model": "nvswitch-h100"}]}
             for k in range(4)]
    return {"host_bridge": f"0000:{hbus:02x}", "numa_node": numa,
            "children": [root_port(bdf(hbus, 1), [{"bridge": bdf(hbus + 1), "children": ports}])]}


def profile(name, pcie, bonds=(), numa_nodes=2, dmi=None):
    return {"name": name, "description": name, "dmi": dmi or {}, "numa_nodes": numa_nodes, "pcie": list(pcie),
            "bonds": list(bonds)}


def discover(tmp_path, prof, **kwargs):
    normalized = sim_profile.validate_profile(prof, f"{prof['name']} (test layout)")
    root = tmp_path / prof["name"]
    sim_sysfs.materialize(normalized, root)
    return classify(pci_sysfs.read_sysfs(root), **kwargs)


def rail_map(result):
    """``{gpu address: rail NIC address}`` in rail order."""
    return {r["gpu"]: r["pci_address"] for r in result["rails"]}


def roles(result):
    return {n["pci_address"]: n["role"] for n in result["nics"]}


def pairs(gpu_buses, nic_buses, dom="0000"):
    return {bdf(g, dom=dom): bdf(n, dom=dom) for g, n in zip(gpu_buses, nic_buses, strict=True)}


# ---------------------------------------------------------------------------------------------
# Supermicro SYS-821GE-TNHR (HGX H100 8-GPU, Intel)
# ---------------------------------------------------------------------------------------------
# Source: github.com/NVIDIA/nccl/issues/1264 ("Bare Metal Supermicro 8xH100 SXM Intel Server GPU
# SuperServer SYS-821GE-TNHR"): nvidia-smi shows GPU0 at 00000000:18:00.0 and GPU1 at 2A:00.0;
# `nvidia-smi topo -m` has 10 NICs: GPU0..2 PIX to NIC0..2, GPU3 PIX to NIC5, GPU4..7 PIX to
# NIC6..9; NIC3 and NIC4 are PIX to no GPU (SYS in the source). So mlx5_3/mlx5_4 sit in the middle
# of the rail numbering. GPU buses 3a 5d 9a ab ba db, the NIC addresses (bus after the GPU), the
# dual-port card for NIC3/NIC4 and its root port are inferred.
SMC_GPU = [0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB]
SMC_RDMA = ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9"]


def supermicro_821ge(unbound_rail=None, unbound_storage=False):
    pcie = []
    for i, g in enumerate(SMC_GPU):
        n = g + 1
        driver = i != unbound_rail
        nic = single(bdf(n)[:-2], f"ibp{n}s0" if driver else None, SMC_RDMA[i] if driver else None)
        pcie.append(pix_unit(g - 3, 0 if i < 4 else 1, nic))
    fns = [("enp76s0f0np0", "mlx5_3"), ("enp76s0f1np1", "mlx5_4")]
    if unbound_storage:
        fns = [(None, None), (None, None)]
    pcie.append(own_root_port(0x4B, 0, card("0000:4c:00", fns, board=STORAGE_BOARD, ll="Ethernet", speed=200)))
    pcie.append(nvswitches())
    pcie.sort(key=lambda hb: hb["host_bridge"])
    return profile("smc-821ge-tnhr", pcie, dmi={"sys_vendor": "Supermicro", "product_name": "SYS-821GE-TNHR"})


def test_supermicro_821ge_tnhr_rails_skip_the_storage_card_in_mlx5_numbering(tmp_path):
    result = discover(tmp_path, supermicro_821ge())
    assert rail_map(result) == pairs(SMC_GPU, [g + 1 for g in SMC_GPU])
    assert [r["rdma_device"] for r in result["rails"]] == SMC_RDMA  # GPU3 -> mlx5_5, never mlx5_3
    assert [r["rail"] for r in result["rails"]] == list(range(8))
    assert roles(result)["0000:4c:00.0"] == roles(result)["0000:4c:00.1"] == "storage"
    assert result["gpus_without_rail"] == [] and result["warnings"] == []
    assert len(result["nvswitches"]) == 4


def test_unbound_driver_rail_keeps_its_gpu_and_unbound_storage_is_ignored(tmp_path):
    """A NIC whose mlx5_core did not bind has no netdev and no RDMA device; affinity still says
    which GPU it serves (nic_info must report it, so the play can name it). Same source as above."""
    result = discover(tmp_path, supermicro_821ge(unbound_rail=5, unbound_storage=True))
    assert rail_map(result) == pairs(SMC_GPU, [g + 1 for g in SMC_GPU])
    rail5 = result["rails"][5]
    assert rail5["pci_address"] == "0000:ac:00.0" and rail5["netdev"] is None and rail5["rdma_device"] is None
    assert roles(result)["0000:4c:00.0"] == roles(result)["0000:4c:00.1"] == "ignored"


# ---------------------------------------------------------------------------------------------
# HGX H100 with sub-NUMA clustering: 4 NUMA nodes and an extra CX-7 on GPU3's node
# ---------------------------------------------------------------------------------------------
# Source: github.com/sgl-project/sglang/issues/13973 (`nvidia-smi topo -m`, 8x H100 NV18, 9 NICs,
# NUMA affinity 0,0,0,1,2,2,...): GPU0..2 PIX to NIC0..2; GPU3 (NUMA 1) is NODE to NIC3 and PIX to
# NIC4; GPU4, GPU5 PIX to NIC5, NIC6. GPU6/GPU7 (NUMA 2/3), every address and the NIC3 model
# (a single-port CX-7 like the rails: the hardest case) are inferred.
SNC_GPU = [0x19, 0x2B, 0x3B, 0x5D, 0x9B, 0xAB, 0xBB, 0xDB]
SNC_NUMA = [0, 0, 0, 1, 2, 2, 3, 3]


def test_sub_numa_extra_cx7_on_the_gpu_node_is_not_a_rail(tmp_path):
    pcie = []
    for i, g in enumerate(SNC_GPU):
        pcie.append(pix_unit(g - 3, SNC_NUMA[i], single(bdf(g + 1)[:-2], f"ens{i}np0", f"mlx5_{i if i < 3 else i + 1}",
                                                        ll="Ethernet")))
    pcie.append(own_root_port(0x4B, 1, single("0000:4c:00", "ens99np0", "mlx5_3", ll="Ethernet")))
    pcie.sort(key=lambda hb: hb["host_bridge"])
    result = discover(tmp_path, profile("hgx-h100-snc", pcie, numa_nodes=4))
    assert rail_map(result) == pairs(SNC_GPU, [g + 1 for g in SNC_GPU])
    nics = {n["pci_address"]: n for n in result["nics"]}
    assert nics["0000:4c:00.0"]["role"] == "storage" and nics["0000:4c:00.0"]["gpu_distance"] == "NODE"
    assert result["rails"][3]["rdma_device"] == "mlx5_4"
    assert result["warnings"] == []


# ---------------------------------------------------------------------------------------------
# HGX H100 4-GPU: GPUs and NICs on CPU root ports, no PCIe switch (PHB)
# ---------------------------------------------------------------------------------------------
# Source: the HGX H100 4-GPU baseboard carries no PCIe switch; servers built on it (e.g.
# Supermicro SYS-421GU-TNXR, "4 GPUs directly attached to the CPUs" in its block diagram) wire each
# GPU and its NIC to root ports of the CPU, so `nvidia-smi topo -m` shows PHB between a GPU and the
# NIC on the same IIO stack and NODE/SYS otherwise. Addresses and root-port numbers are inferred.
HGX4_STACKS = [(0x15, 0), (0x37, 0), (0x97, 1), (0xB7, 1)]


def hgx4(shared=False, one_nic=False):
    pcie = []
    if not shared:
        for k, (hbus, numa) in enumerate(HGX4_STACKS):
            pcie.append({"host_bridge": f"0000:{hbus:02x}", "numa_node": numa, "children": [
                root_port(bdf(hbus, 1), [gpu(bdf(hbus + 1))]),
                root_port(bdf(hbus, 5), [single(bdf(hbus + 2)[:-2], f"ibp{hbus + 2}s0", f"mlx5_{k}")]),
            ]})
    else:
        # both GPUs of a socket and both NICs on one stack: nothing but PHB between any of them
        for s, hbus in enumerate((0x15, 0x97)):
            pcie.append({"host_bridge": f"0000:{hbus:02x}", "numa_node": s, "children": [
                root_port(bdf(hbus, 1), [gpu(bdf(hbus + 1))]),
                root_port(bdf(hbus, 2), [gpu(bdf(hbus + 2))]),
                root_port(bdf(hbus, 5), [single(bdf(hbus + 3)[:-2], f"ibp{hbus + 3}s0", f"mlx5_{2 * s}")]),
                root_port(bdf(hbus, 6), [single(bdf(hbus + 4)[:-2], f"ibp{hbus + 4}s0", f"mlx5_{2 * s + 1}")]),
            ][:3 if one_nic else 4]})
    # dual-port storage/in-band CX-6 Dx on its own stack (inferred)
    pcie.append(own_root_port(0x26, 0, card("0000:27:00", [("enp39s0f0np0", "mlx5_4"), ("enp39s0f1np1", "mlx5_5")],
                                             model="cx6dx", board="MT_0000000359", ll="Ethernet", speed=100,
                                             fw="22.39.1002")))
    pcie.sort(key=lambda hb: hb["host_bridge"])
    return profile("hgx-h100-4gpu" + ("-shared" if shared else "") + ("-one" if one_nic else ""), pcie)


def test_hgx_4gpu_without_pcie_switch_rails_at_phb(tmp_path):
    result = discover(tmp_path, hgx4())
    assert rail_map(result) == {bdf(h + 1): bdf(h + 2) for h, _ in HGX4_STACKS}
    nics = {n["pci_address"]: n for n in result["nics"]}
    for h, _ in HGX4_STACKS:
        assert nics[bdf(h + 2)]["role"] == "compute" and "PHB" in nics[bdf(h + 2)]["role_reason"]
    assert nics["0000:27:00.0"]["role"] == nics["0000:27:00.1"]["role"] == "storage"
    assert result["gpus_without_rail"] == []
    # chosen without a shared PCIe switch: said so, once per rail
    assert sum("PHB" in w for w in result["warnings"]) == 4


def test_phb_is_never_guessed_when_two_nics_share_the_host_bridge(tmp_path):
    result = discover(tmp_path, hgx4(shared=True))
    assert result["rails"] == []
    missing = {m["gpu"]: m for m in result["gpus_without_rail"]}
    assert sorted(missing) == ["0000:16:00.0", "0000:17:00.0", "0000:98:00.0", "0000:99:00.0"]
    assert missing["0000:16:00.0"]["candidates"] == ["0000:18:00.0", "0000:19:00.0"]
    assert "PHB" in missing["0000:16:00.0"]["reason"]
    assert {roles(result)[a] for a in ("0000:18:00.0", "0000:19:00.0", "0000:9a:00.0", "0000:9b:00.0")} == {"storage"}


# ---------------------------------------------------------------------------------------------
# HGX H200 on Spectrum-X: a BlueField-3 SuperNIC (B3140H) per GPU, B3220 DPU north-south
# ---------------------------------------------------------------------------------------------
# Sources: NVIDIA Network Operator, Spectrum-X quick start (docs.nvidia.com/networking/display/
# kubernetes2640/spectrum-x/quick-start.html): "Single Plane ... BlueField-3 SuperNIC ...
# H100/H200/B200 (BlueField-3 SuperNIC) One PF per rail"; BlueField-3 User Guide, Port
# Configurations: B3140H (OPN 900-9D3D4-00EN-HA0) is the single-port SuperNIC; DOCA Installation
# Guide: B3220 (PSID MT_0000000884) is a dual-port DPU. The SuperNICs are the east-west compute
# rails, one behind each GPU's PCIe switch (PIX, as on the XE9680-like board); device id 15b3:a2dc
# for both (hardware-facts.md "PCI identities"). Addresses inferred from the XE9680 sample.
SPX_GPU = [0x19, 0x3B, 0x4C, 0x5D, 0x9B, 0xBB, 0xCB, 0xDB]


def spectrum_x_h200():
    pcie = []
    for i, g in enumerate(SPX_GPU):
        supernic = single(bdf(g + 1)[:-2], f"enp{g + 1}s0np0", f"mlx5_{i}", model="bf3", board=B3140H_BOARD,
                          ll="Ethernet", speed=400, fw="32.41.1000")
        pcie.append(pix_unit(g - 3, 0 if i < 4 else 1, supernic, gpu_model="h200-sxm-141gb"))
    dpu = card("0000:2a:00", [("enp42s0f0np0", "mlx5_8"), ("enp42s0f1np1", "mlx5_9")], model="bf3",
               board=B3220_BOARD, ll="Ethernet", speed=200, fw="32.41.1000")
    pcie.append(own_root_port(0x29, 0, dpu))
    pcie.append(nvswitches())
    pcie.sort(key=lambda hb: hb["host_bridge"])
    return profile("hgx-h200-spectrum-x", pcie)


def test_spectrum_x_bluefield3_supernics_are_the_rails(tmp_path):
    result = discover(tmp_path, spectrum_x_h200())
    assert rail_map(result) == pairs(SPX_GPU, [g + 1 for g in SPX_GPU])
    assert {r["link_layer"] for r in result["rails"]} == {"Ethernet"}
    nics = {n["pci_address"]: n for n in result["nics"]}
    assert {nics[bdf(g + 1)]["model"] for g in SPX_GPU} == {"BlueField-3"}
    assert nics["0000:2a:00.0"]["role"] == nics["0000:2a:00.1"]["role"] == "dpu"
    assert {g["device_id"] for g in result["gpus"]} == {"0x2335"}
    assert result["gpus_without_rail"] == [] and result["warnings"] == []


def test_dual_port_bluefield3_behind_a_gpu_switch_stays_dpu(tmp_path):
    """The north-south B3220 placed in GPU0's switch (PIX): still a DPU, GPU0 keeps its SuperNIC."""
    prof = spectrum_x_h200()
    dpu_host = next(hb for hb in prof["pcie"] if hb["host_bridge"] == "0000:29")
    prof["pcie"].remove(dpu_host)
    dpu = dpu_host["children"][0]["children"][0]
    dpu["nic"] = "0000:1a:01"  # a second device on the GPU0 NIC's bus would need its own port: use dev 1
    gpu0 = next(hb for hb in prof["pcie"] if hb["host_bridge"] == "0000:16")
    switch = gpu0["children"][0]["children"][0]
    switch["children"][1]["children"].append(dpu)
    result = discover(tmp_path, prof)
    assert rail_map(result) == pairs(SPX_GPU, [g + 1 for g in SPX_GPU])
    nics = {n["pci_address"]: n for n in result["nics"]}
    assert nics["0000:1a:01.0"]["role"] == "dpu" and nics["0000:1a:01.0"]["gpu_distance"] == "PIX"


# ---------------------------------------------------------------------------------------------
# DGX H100 variants
# ---------------------------------------------------------------------------------------------
# Source: hardware-facts.md "DGX H100" and real-outputs/ibdev2netdev-dgx-h100-aben20807.txt (a node
# whose storage card shows a single function); the DGX H100 storage CX-7s can hide their second
# PF (mlxconfig HIDE_PORT2_PF); here BOTH cards do. Management then rides an mlx5 bond over the two
# remaining storage PFs (DGX in-band management on bond0, hardware-facts.md "DGX H100").
DGX_RAILS = ["0000:18:00.0", "0000:40:00.0", "0000:4f:00.0", "0000:5e:00.0", "0000:9a:00.0", "0000:c0:00.0",
             "0000:ce:00.0", "0000:dc:00.0"]
DGX_GPUS = ["0000:1b:00.0", "0000:43:00.0", "0000:52:00.0", "0000:61:00.0", "0000:9d:00.0", "0000:c3:00.0",
            "0000:d1:00.0", "0000:df:00.0"]


def _nodes(children):
    for node in children:
        yield node
        yield from _nodes(node.get("children") or [])


def nic_node(prof, slot):
    return next(n for hb in prof["pcie"] for n in _nodes(hb["children"]) if n.get("nic") == slot)


def dgx_hide_port2(h200=False):
    prof = copy.deepcopy(sim_profile.load_profile("dgx-h100"))
    prof["name"] = "dgx-hide-port2"
    for slot, netdev in (("0000:29:00", "enp41s0np0"), ("0000:aa:00", "enp170s0np0")):
        c = nic_node(prof, slot)
        del c["functions"][1:]
        c["functions"][0]["netdev"] = netdev
        c["functions"][0].pop("link", None)
    numbering = ["0000:18:00", "0000:29:00", "0000:40:00", "0000:4f:00", "0000:5e:00", "0000:9a:00", "0000:aa:00",
                 "0000:c0:00", "0000:ce:00", "0000:dc:00"]
    for k, slot in enumerate(numbering):
        nic_node(prof, slot)["functions"][0]["rdma"] = f"mlx5_{k}"
    prof["bonds"] = [{"name": "bond0", "mode": "802.3ad", "slaves": ["enp41s0np0", "enp170s0np0"]}]
    if h200:
        for hb in prof["pcie"]:
            for n in _nodes(hb["children"]):
                if "gpu" in n:
                    n["model"] = "h200-sxm-141gb"
        prof["dmi"]["product_name"] = "NVIDIA DGX H200"
    return prof


@pytest.mark.parametrize("h200", [False, True])
def test_dgx_hide_port2_storage_cards_and_management_bond(tmp_path, h200):
    prof = dgx_hide_port2(h200)
    result = discover(tmp_path, prof, management_interfaces=["bond0"])
    assert rail_map(result) == dict(zip(DGX_GPUS, DGX_RAILS, strict=True))
    assert [r["rdma_device"] for r in result["rails"]] == [f"mlx5_{k}" for k in (0, 2, 3, 4, 5, 7, 8, 9)]
    nics = {n["pci_address"]: n for n in result["nics"]}
    for address in ("0000:29:00.0", "0000:aa:00.0"):
        assert nics[address]["ports"] == 1 and nics[address]["role"] == "management"
    assert result["warnings"] == []
    # without the management hint the bonded single-port PFs are storage, never rails
    result = discover(tmp_path, dict(prof, name="dgx-hide-port2-nomgmt"))
    assert {roles(result)[a] for a in ("0000:29:00.0", "0000:aa:00.0")} == {"storage"}


def test_dgx_management_on_a_roce_lag_bond(tmp_path):
    """DGX whose in-band management is a RoCE LAG bond (mlx5_bond_0) over both ports of one
    storage card (hardware-facts.md "DGX H100": port 2 typically bonded; LAG RDMA device as in
    real-outputs/sysfs-class-infiniband-h100-ib-bf3-gpud.txt)."""
    prof = copy.deepcopy(sim_profile.load_profile("dgx-h100"))
    prof["name"] = "dgx-roce-lag-mgmt"
    prof["bonds"] = [{"name": "bond0", "mode": "802.3ad", "slaves": ["enp170s0f0np0", "enp170s0f1np1"],
                      "rdma": "mlx5_bond_0"}]
    result = discover(tmp_path, prof, management_interfaces=["bond0"])
    assert rail_map(result) == dict(zip(DGX_GPUS, DGX_RAILS, strict=True))
    r = roles(result)
    assert r["0000:aa:00.0"] == r["0000:aa:00.1"] == "management"
    assert r["0000:29:00.0"] == r["0000:29:00.1"] == "storage"


# ---------------------------------------------------------------------------------------------
# Rails link-down at discovery time (cables not yet plugged / switch ports down)
# ---------------------------------------------------------------------------------------------
# Source: the shipped hgx-h100 profile (XE9680-like, real-outputs lspci/topo samples) with every
# rail port DOWN (state "1: DOWN", netdev speed -1 -> EINVAL/unknown, as on a fresh install), plus
# a link-up single-port CX-6 Lx in GPU0's switch: the rail must not lose to it on link speed.
def test_rails_link_down_at_discovery(tmp_path):
    prof = copy.deepcopy(sim_profile.load_profile("hgx-h100"))
    prof["name"] = "hgx-links-down"
    rails = []
    for hb in prof["pcie"]:
        for n in _nodes(hb["children"]):
            if n.get("nic") and n["model"] == "cx7":
                n["functions"][0]["link"] = "down"
                rails.append(f"{n['nic']}.0")
    switch = nic_node(prof, "0000:1a:00")
    parent = next(p for hb in prof["pcie"] for p in _nodes(hb["children"])
                  if any(c is switch for c in p.get("children") or []))
    holder = next(p for hb in prof["pcie"] for p in _nodes(hb["children"])
                  if any(c is parent for c in p.get("children") or []))
    bus = int(holder["children"][0]["bridge"][5:7], 16)
    holder["children"].append({"bridge": bdf(bus, 7), "children": [
        single("0000:1c:00", "enp28s0np0", "mlx5_12", model="cx6lx", board="MT_0000000531", ll="Ethernet",
               speed=25, fw="26.39.1002")]})
    result = discover(tmp_path, prof)
    assert [r["pci_address"] for r in result["rails"]] == sorted(rails)
    assert roles(result)["0000:1c:00.0"] == "storage"
    assert sum("RDMA port state is DOWN" in w for w in result["warnings"]) == 8
    assert result["gpus_without_rail"] == []


# ---------------------------------------------------------------------------------------------
# PCI domain 0001
# ---------------------------------------------------------------------------------------------
# Source: Linux names PCI segment groups as domains (DDDD in DDDD:BB:DD.F, ACPI MCFG); platforms
# with more root complexes than one segment's bus space (and VMD) enumerate part of the devices in
# domain 0001. Here the second socket's GPUs and rails live in domain 0001 with the same bus
# numbers as the first socket's (layout inferred, XE9680-like PIX units).
def test_domain_0001_rails_follow_pci_order(tmp_path):
    buses = [0x19, 0x3B, 0x4C, 0x5D]
    pcie = []
    for dom, numa in (("0000", 0), ("0001", 1)):
        for g in buses:
            nic = single(bdf(g + 1, dom=dom)[:-2], f"ibP{int(dom)}p{g + 1}s0", f"mlx5_{len(pcie)}")
            pcie.append(pix_unit(g - 3, numa, nic, dom=dom))
    result = discover(tmp_path, profile("hgx-domain1", pcie))
    expected = {**pairs(buses, [g + 1 for g in buses]), **pairs(buses, [g + 1 for g in buses], dom="0001")}
    assert rail_map(result) == expected
    assert [r["gpu"][:4] for r in result["rails"]] == ["0000"] * 4 + ["0001"] * 4
    assert result["rails"][4]["pci_address"] == "0001:1a:00.0"
    # overrides accept the domain
    result = discover(tmp_path, dict(profile("hgx-domain1b", pcie)),
                      overrides={"0001:1a:00.0": {"role": "ignored"}})
    assert roles(result)["0001:1a:00.0"] == "ignored"
    assert [m["gpu"] for m in result["gpus_without_rail"]] == ["0001:19:00.0"]


def test_phb_nic_shared_by_two_gpus_serves_the_first_only(tmp_path):
    """One NIC per socket stack for two GPUs (same source, NICs halved): GPU order decides, the
    second GPU is reported without a rail, naming the NIC and the GPU it serves."""
    result = discover(tmp_path, hgx4(shared=True, one_nic=True))
    assert rail_map(result) == {"0000:16:00.0": "0000:18:00.0", "0000:98:00.0": "0000:9a:00.0"}
    missing = {m["gpu"]: m for m in result["gpus_without_rail"]}
    assert sorted(missing) == ["0000:17:00.0", "0000:99:00.0"]
    assert missing["0000:17:00.0"]["candidates"] == ["0000:18:00.0"]
    assert "already serves GPU 0000:16:00.0" in missing["0000:17:00.0"]["reason"]
