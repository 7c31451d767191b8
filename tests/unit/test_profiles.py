"""Hardware profiles: shipped values cross-checked against real outputs, and every validation error."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpunode.sim.profile import (
    PROFILES_DIR,
    ProfileError,
    iter_devices,
    list_profiles,
    load_catalog,
    load_profile,
    validate_profile,
)


def _raw(name: str) -> dict[str, Any]:
    return yaml.safe_load((PROFILES_DIR / f"{name}.yaml").read_text())


def _records(name: str, kind: str) -> list[dict[str, Any]]:
    return [r for r in iter_devices(load_profile(name)) if r["kind"] == kind]


def _body(path: Path) -> list[str]:
    """Lines of a real-outputs file without its provenance header."""
    return [ln for ln in path.read_text().splitlines() if not ln.startswith("#")]


# ---------------------------------------------------------------------------------------------
# shipped profiles


def test_list_profiles_names_the_shipped_platforms() -> None:
    names = list_profiles()
    assert {"dgx-h100", "hgx-h100"} <= set(names)
    assert "catalog" not in names


@pytest.mark.parametrize("name", ["dgx-h100", "hgx-h100"])
def test_bare_name_and_path_load_the_same_profile(name: str) -> None:
    assert load_profile(name) == load_profile(PROFILES_DIR / f"{name}.yaml")


@pytest.mark.parametrize("name", ["dgx-h100", "hgx-h100"])
def test_normalized_profile_validates_again_unchanged(name: str) -> None:
    profile = load_profile(name)
    assert validate_profile(copy.deepcopy(profile), f"{name}.yaml") == profile


@pytest.mark.parametrize("name", ["dgx-h100", "hgx-h100"])
def test_eight_gpus_four_nvswitches_one_compute_rail_per_gpu(name: str) -> None:
    gpus = _records(name, "gpu")
    nics = _records(name, "nic")
    assert len(gpus) == 8
    assert len(_records(name, "nvswitch")) == 4
    assert [g["numa_node"] for g in gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    rails = sorted(n["expect"]["rail"] for n in nics if n["expect"]["role"] == "compute")
    assert rails == list(range(8))
    assert all(n["expect"]["rail"] is None for n in nics if n["expect"]["role"] != "compute")
    assert len(nics) == 12


def test_dgx_compute_rails_follow_the_documented_layout() -> None:
    nics = _records("dgx-h100", "nic")
    compute = sorted((n for n in nics if n["expect"]["role"] == "compute"), key=lambda n: n["expect"]["rail"])
    assert [n["address"] for n in compute] == [f"0000:{b}:00.0" for b in
                                               ("18", "40", "4f", "5e", "9a", "c0", "ce", "dc")]
    assert [n["netdev"] for n in compute] == ["ibp24s0", "ibp64s0", "ibp79s0", "ibp94s0", "ibp154s0",
                                              "ibp192s0", "ibp206s0", "ibp220s0"]
    assert [n["rdma"] for n in compute] == [f"mlx5_{i}" for i in (0, 3, 4, 5, 6, 9, 10, 11)]
    assert {(n["link_layer"], n["speed_gbps"], n["board_id"], n["fw_version"], n["class"]) for n in compute} == {
        ("InfiniBand", 400, "MT_0000000838", "28.39.1002", "0x020700")}
    gpus = _records("dgx-h100", "gpu")
    assert [g["address"] for g in gpus] == [f"0000:{b}:00.0" for b in
                                            ("1b", "43", "52", "61", "9d", "c3", "d1", "df")]


def test_dgx_storage_cards_and_bond() -> None:
    profile = load_profile("dgx-h100")
    storage = {n["address"]: n for n in iter_devices(profile) if n["kind"] == "nic"
               and n["expect"]["role"] == "storage"}
    assert {a: (n["netdev"], n["rdma"], n["link_layer"]) for a, n in storage.items()} == {
        "0000:29:00.0": ("enp41s0f0np0", "mlx5_1", "Ethernet"),
        "0000:29:00.1": ("enp41s0f1np1", "mlx5_2", "Ethernet"),
        "0000:aa:00.0": ("enp170s0f0np0", "mlx5_7", "Ethernet"),
        "0000:aa:00.1": ("enp170s0f1np1", "mlx5_8", "Ethernet"),
    }
    # Storage cards sit directly on their own root ports: no switch shared with any GPU.
    assert all(len(n["parent_chain"]) == 2 for n in storage.values())
    assert profile["bonds"] == [{"name": "bond0", "mode": "802.3ad", "slaves": ["enp41s0f1np1", "enp170s0f1np1"],
                                 "rdma": None, "mtu": 1500}]
    assert "DGX H100" in profile["dmi"]["product_name"]
    assert profile["dmi"]["sys_vendor"] == "NVIDIA"


def test_dgx_matches_user_guide_network_module_table(real_outputs: Path) -> None:
    """Each row: GPU n <-> netdev <-> RDMA; our rail n must be that NIC (rail = GPU index)."""
    nics = {n["netdev"]: n for n in _records("dgx-h100", "nic")}
    rows = [ln.split() for ln in _body(real_outputs / "dgx-h100-user-guide-network-modules-table.txt")
            if ln.startswith("OSFP")]
    assert len(rows) == 8
    for _port, _cx, _module, gpu, netdev, rdma in rows:
        assert nics[netdev]["rdma"] == rdma
        assert nics[netdev]["expect"] == {"role": "compute", "rail": int(gpu)}


def test_dgx_matches_ibdev2netdev_before_the_numbering_shift(real_outputs: Path) -> None:
    """The sample node hides one storage function, so only mlx5_0..mlx5_6 keep their names."""
    by_rdma = {n["rdma"]: n["netdev"] for n in _records("dgx-h100", "nic")}
    seen = dict(re.findall(r"^(mlx5_\d+) port 1 ==> (\S+)", (real_outputs / "ibdev2netdev-dgx-h100-aben20807.txt")
                           .read_text(), re.M))
    for i in range(7):
        assert by_rdma[f"mlx5_{i}"] == seen[f"mlx5_{i}"]


def test_hgx_pci_addresses_equal_the_lspci_sample(real_outputs: Path) -> None:
    kind_of = {"3D controller": ("gpu", "h100-sxm5-80gb"), "Bridge": ("nvswitch", "nvswitch-h100"),
               "[ConnectX-7]": ("nic", "cx7"), "[ConnectX-6 Dx]": ("nic", "cx6dx")}
    expected = set()
    for line in _body(real_outputs / "lspci-h100-xe9680-nvidia-mellanox-gpud.txt"):
        addr, desc = line.split(" ", 1)
        kinds = [v for k, v in kind_of.items() if k in desc]
        assert len(kinds) == 1, line
        expected.add((f"0000:{addr}", *kinds[0]))
    ours = {(r["address"], r["kind"], r["model"]) for r in iter_devices(load_profile("hgx-h100"))
            if r["kind"] != "bridge"}
    assert ours == expected
    assert len(expected) == 24


def test_hgx_gpu_order_matches_nvidia_smi(real_outputs: Path) -> None:
    text = (real_outputs / "nvidia-smi-h100-8gpu-gpud.txt").read_text()
    bus_ids = re.findall(r"\b0000(0000:[0-9A-F]{2}:00\.0)", text)
    assert [g["address"] for g in _records("hgx-h100", "gpu")] == [b.lower() for b in bus_ids]
    catalog = load_catalog()["gpu_models"]["h100-sxm5-80gb"]
    assert catalog["name"] in text
    assert f"{catalog['memory_mib']}MiB" in text
    assert f"{catalog['power_limit_w']}W" in text


def test_hgx_nics_match_ibstat(real_outputs: Path) -> None:
    text = (real_outputs / "ibstat-h100-roce-8xcx7-cx6dx-gpud.txt").read_text()
    cas = re.findall(r"CA '(\S+)'\n\tCA type: (\S+)\n.*?Firmware version: (\S+)\n.*?Rate: (\d+)\n.*?Link layer: (\S+)",
                     text, re.S)
    assert len(cas) == 12
    nics = {n["rdma"]: n for n in _records("hgx-h100", "nic")}
    for rdma, hca, fw, rate, layer in cas:
        n = nics[rdma]
        assert (n["hca_type"], n["fw_version"], n["speed_gbps"], n["link_layer"]) == (hca, fw, int(rate), layer)


def test_hgx_rdma_names_follow_the_topo_nic_legend(real_outputs: Path) -> None:
    legend = re.findall(r"^\s+NIC(\d+): (mlx5_\d+)$", (real_outputs /
                        "nvidia-smi-topo-m-h100-8xcx7-2xcx6dx-mooncake-2039.txt").read_text(), re.M)
    nics = _records("hgx-h100", "nic")
    assert [n["rdma"] for n in nics] == [name for _i, name in legend]  # PCI order == legend order
    cx6 = [n["rdma"] for n in nics if n["model"] == "cx6dx"]
    assert cx6 == ["mlx5_1", "mlx5_2", "mlx5_7", "mlx5_8"]


def test_hgx_cx7_matches_lspci_vvv(real_outputs: Path) -> None:
    text = (real_outputs / "lspci-vvv-cx7-sriov-cap-xe9680-gpud.txt").read_text()
    nic = next(n for n in _records("hgx-h100", "nic") if n["address"] == "0000:1a:00.0")
    assert f"NUMA node: {nic['numa_node']}" in text
    assert f"Total VFs: {nic['sriov_totalvfs']}," in text
    assert f"Device ID: {nic['vf_device_id'][2:]}" in text
    assert "Speed 32GT/s (ok), Width x16" in text and nic["pcie_link_speed"].startswith("32.0 GT/s")
    assert nic["class"] == "0x020000"


def test_hgx_storage_cards_share_the_switch_of_gpu0_and_gpu4() -> None:
    records = {r["address"]: r for r in iter_devices(load_profile("hgx-h100"))}
    for gpu, rail, storage in (("19", "1a", "1b"), ("9b", "9c", "9d")):
        g, n, s0, s1 = (records[f"0000:{b}:00.{f}"] for b, f in ((gpu, 0), (rail, 0), (storage, 0), (storage, 1)))
        assert g["parent_chain"][:-1] == n["parent_chain"][:-1] == s0["parent_chain"][:-1]
        assert s0["parent_chain"] == s1["parent_chain"]
        assert (s0["expect"], n["expect"]["role"]) == ({"role": "storage", "rail": None}, "compute")
        assert s0["sriov_totalvfs"] == 8
    dmi = load_profile("hgx-h100")["dmi"]
    assert (dmi["sys_vendor"], dmi["product_name"]) == ("Dell Inc.", "PowerEdge XE9680")


def test_iter_devices_records_carry_chain_and_identity() -> None:
    rec = next(r for r in iter_devices(load_profile("dgx-h100")) if r["address"] == "0000:18:00.0")
    assert rec["parent_chain"] == ["pci0000:15", "0000:15:01.0", "0000:16:00.0", "0000:17:00.0"]
    assert (rec["vendor_id"], rec["device_id"], rec["vf_device_id"], rec["hca_type"]) == (
        "0x15b3", "0x1021", "0x101e", "MT4129")
    assert rec["rate"] == "400 Gb/sec (4X NDR)"
    bridge = next(r for r in iter_devices(load_profile("dgx-h100")) if r["address"] == "0000:15:01.0")
    assert (bridge["kind"], bridge["secondary_bus"], bridge["subordinate_bus"]) == ("bridge", 0x16, 0x1B)


def test_catalog_models() -> None:
    cat = load_catalog()
    assert {k: (v["device_id"], v["hca_type"], v["sriov_totalvfs"]) for k, v in cat["nic_models"].items()} == {
        "cx7": ("0x1021", "MT4129", 16), "cx6dx": ("0x101d", "MT4125", 8), "cx6lx": ("0x101f", "MT4127", 8),
        "bf3": ("0xa2dc", "MT41692", 16)}
    assert {v["vf_device_id"] for v in cat["nic_models"].values()} == {"0x101e"}
    assert cat["nic_models"]["cx7"]["lspci_name"] == "MT2910 Family [ConnectX-7]"
    assert cat["switch_models"]["nvswitch-h100"]["class"] == "0x068000"


# ---------------------------------------------------------------------------------------------
# validation errors: each names the file and the field path

GPU0 = "pcie[0].children[0].children[0].children[0].children[0]"  # hgx: 19:00.0 under 18:00.0
NIC0 = "pcie[0].children[0].children[0].children[1].children[0]"  # hgx: CX-7 card 1a:00
NIC1 = "pcie[1].children[0].children[0].children[1].children[0]"  # hgx: CX-7 card 3c:00


def _at(data: dict[str, Any], path: str) -> Any:
    node: Any = data
    for name, index in re.findall(r"(\w+)(?:\[(\d+)\])?", path):
        node = node[name]
        if index:
            node = node[int(index)]
    return node


def _set(path: str, key: str, value: Any) -> Any:
    def mutate(data: dict[str, Any]) -> None:
        _at(data, path)[key] = value
    return mutate


def _del(path: str, key: str) -> Any:
    def mutate(data: dict[str, Any]) -> None:
        del _at(data, path)[key]
    return mutate


def _dup_gpu(data: dict[str, Any]) -> None:
    _at(data, "pcie[0].children[0].children[0].children[0]")["children"].append(
        {"gpu": "0000:19:00.0", "model": "h100-sxm5-80gb"})


def _sibling_bus(data: dict[str, Any]) -> None:
    _at(data, "pcie[0].children[0].children[0].children[0]")["children"].append(
        {"gpu": "0000:1c:00.0", "model": "h100-sxm5-80gb"})


def _bond(slaves: list[str], rdma: str | None = None) -> Any:
    def mutate(data: dict[str, Any]) -> None:
        data["bonds"] = [{"name": "bond0", "slaves": slaves, "rdma": rdma}]
    return mutate


ERRORS = [
    ("typo key", _set(GPU0, "modle", "x"), f"hgx-h100.yaml: {GPU0}.modle: unknown key"),
    ("typo top key", _set("", "numa_node", 2), "hgx-h100.yaml: numa_node: unknown key"),
    ("typo function key", _set(f"{NIC0}.functions[0]", "netdve", "x"),
     f"hgx-h100.yaml: {NIC0}.functions[0].netdve: unknown key"),
    ("duplicate PCI address", _dup_gpu,
     f"hgx-h100.yaml: pcie[0].children[0].children[0].children[0].children[1].gpu: duplicate PCI address "
     f"0000:19:00.0 (first at {GPU0}.gpu)"),
    ("duplicate NIC slot", _set(NIC1, "nic", "0000:1a:00"),
     f"hgx-h100.yaml: {NIC1}.nic: duplicate PCI address 0000:1a:00.0 (first at {NIC0}.nic)"),
    ("duplicate netdev", _set(f"{NIC1}.functions[0]", "netdev", "enp26s0np0"),
     f"hgx-h100.yaml: {NIC1}.functions[0].netdev: duplicate netdev enp26s0np0 (first at {NIC0}.functions[0].netdev)"),
    ("duplicate RDMA", _set(f"{NIC1}.functions[0]", "rdma", "mlx5_0"),
     f"hgx-h100.yaml: {NIC1}.functions[0].rdma: duplicate RDMA device mlx5_0"),
    ("duplicate rail", _set(f"{NIC1}.functions[0]", "expect", {"role": "compute", "rail": 0}),
     f"hgx-h100.yaml: {NIC1}.functions[0].expect.rail: duplicate rail 0"),
    ("rail on storage", _set(f"{NIC1}.functions[0]", "expect", {"role": "storage", "rail": 9}),
     f"hgx-h100.yaml: {NIC1}.functions[0].expect.rail: only compute functions have a rail"),
    ("unknown role", _set(f"{NIC1}.functions[0]", "expect", {"role": "rail"}),
     f"hgx-h100.yaml: {NIC1}.functions[0].expect.role: must be one of"),
    ("unknown NIC model", _set(NIC0, "model", "cx8"), f"hgx-h100.yaml: {NIC0}.model: unknown model 'cx8'"),
    ("unknown GPU model", _set(GPU0, "model", "b200"), f"hgx-h100.yaml: {GPU0}.model: unknown model 'b200'"),
    ("numa out of range", _set(GPU0, "numa_node", 2),
     f"hgx-h100.yaml: {GPU0}.numa_node: 2 is out of range (numa_nodes is 2)"),
    ("host bridge numa out of range", _set("pcie[0]", "numa_node", 5), "hgx-h100.yaml: pcie[0].numa_node: 5"),
    ("malformed BDF", _set(GPU0, "gpu", "0000:1g:00.0"),
     f"hgx-h100.yaml: {GPU0}.gpu: malformed PCI address '0000:1g:00.0'"),
    ("function in NIC slot", _set(NIC0, "nic", "0000:1a:00.0"), f"hgx-h100.yaml: {NIC0}.nic: malformed NIC slot"),
    ("malformed host bridge", _set("pcie[0]", "host_bridge", "16"),
     "hgx-h100.yaml: pcie[0].host_bridge: malformed host bridge '16'"),
    ("function out of range", _set(f"{NIC0}.functions[0]", "function", 8),
     f"hgx-h100.yaml: {NIC0}.functions[0].function: must be an integer 0..7"),
    ("missing required field", _del(NIC0, "board_id"), f"hgx-h100.yaml: {NIC0}: missing required field 'board_id'"),
    ("missing name", _del("", "name"), "hgx-h100.yaml: missing required field 'name'"),
    ("bad link layer", _set(NIC0, "link_layer", "RoCE"), f"hgx-h100.yaml: {NIC0}.link_layer: must be one of"),
    ("bad link state", _set(f"{NIC0}.functions[0]", "link", "flapping"),
     f"hgx-h100.yaml: {NIC0}.functions[0].link: must be 'up' or 'down'"),
    ("bad vendor id", _set("pcie[0].children[0]", "vendor_id", "8086"),
     "hgx-h100.yaml: pcie[0].children[0].vendor_id: malformed hex id '8086'"),
    ("two kinds in one node", _set(GPU0, "nvswitch", "0000:19:00.0"),
     f"hgx-h100.yaml: {GPU0}: exactly one of bridge, gpu, nvswitch, nic, device is required"),
    ("sibling on another bus", _sibling_bus,
     "hgx-h100.yaml: pcie[0].children[0].children[0].children[0].children[1].gpu: 0000:1c:00.0 is on bus 1c "
     "but its siblings are on bus 19"),
    ("child below its bridge's bus", _set(GPU0, "gpu", "0000:16:05.0"),
     f"hgx-h100.yaml: {GPU0}.gpu: 0000:16:05.0: a bridge's secondary bus must be above its own bus 18"),
    ("root port off its host bridge bus", _set("pcie[0].children[0]", "bridge", "0000:15:01.0"),
     "hgx-h100.yaml: pcie[0].children[0].bridge: 0000:15:01.0 must be on its host bridge's bus 16"),
    ("unknown bond slave", _bond(["enp26s0np0", "eth9"]),
     "hgx-h100.yaml: bonds[0].slaves[1]: unknown bond slave 'eth9'"),
    ("slave in two bonds", _bond(["enp26s0np0", "enp26s0np0"]),
     "hgx-h100.yaml: bonds[0].slaves[1]: duplicate bond slave enp26s0np0"),
    ("LAG across cards", _bond(["enp26s0np0", "enp27s0f0np0"], rdma="mlx5_bond_0"),
     "hgx-h100.yaml: bonds[0].rdma: RoCE LAG needs all slaves on one card"),
    ("bond RDMA name taken", _bond(["enp27s0f0np0", "enp27s0f1np1"], rdma="mlx5_3"),
     "hgx-h100.yaml: bonds[0].rdma: duplicate RDMA device mlx5_3"),
    ("bond name clashes with netdev", lambda d: d.update(bonds=[{"name": "enp26s0np0", "slaves": ["enp60s0np0"]}]),
     "hgx-h100.yaml: bonds[0].name: duplicate netdev enp26s0np0"),
    ("bad bond mode", lambda d: d.update(bonds=[{"name": "b0", "mode": "lacp", "slaves": ["enp60s0np0"]}]),
     "hgx-h100.yaml: bonds[0].mode: must be one of"),
    ("name differs from stem", _set("", "name", "dgx-h100"),
     "hgx-h100.yaml: name: 'dgx-h100' must equal the file stem 'hgx-h100'"),
    ("pcie not a list", _set("", "pcie", {"host_bridge": "0000:16"}), "hgx-h100.yaml: pcie: must be a list"),
]


@pytest.mark.parametrize(("mutate", "message"), [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_validation_error_names_file_and_field(mutate: Any, message: str) -> None:
    data = _raw("hgx-h100")
    mutate(data)
    with pytest.raises(ProfileError) as err:
        validate_profile(data, "hgx-h100.yaml")
    assert message in str(err.value)
    assert str(err.value).startswith("hgx-h100.yaml: ")


def test_unmutated_raw_profile_is_valid() -> None:
    """Guards the error table above: each failure comes from its mutation alone."""
    assert validate_profile(_raw("hgx-h100"), "hgx-h100.yaml")["name"] == "hgx-h100"


def test_yaml_syntax_error_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("name: broken\npcie: [\n  - host_bridge: '0000:15'\n numa_nodes: 1\n")
    with pytest.raises(ProfileError, match=r"broken\.yaml: YAML syntax error \(line \d+, column \d+\)"):
        load_profile(path)


def test_profile_loaded_from_path_checks_its_own_stem(tmp_path: Path) -> None:
    path = tmp_path / "my-box.yaml"
    path.write_text(yaml.safe_dump(_raw("hgx-h100")))
    with pytest.raises(ProfileError, match=r"my-box\.yaml: name: 'hgx-h100' must equal the file stem 'my-box'"):
        load_profile(path)
    data = _raw("hgx-h100")
    data["name"] = "my-box"
    path.write_text(yaml.safe_dump(data))
    assert load_profile(str(path))["name"] == "my-box"


def test_unknown_profile_name_lists_known_ones() -> None:
    with pytest.raises(ProfileError, match=r"nope\.yaml: no such profile \(known: .*dgx-h100"):
        load_profile("nope")
    with pytest.raises(ProfileError):
        load_profile("catalog")


def test_top_level_must_be_a_mapping() -> None:
    with pytest.raises(ProfileError, match=r"^x\.yaml: top level must be a mapping"):
        validate_profile(["name"], "x.yaml")  # type: ignore[arg-type]


def test_defaults_are_filled_in_and_numa_inherited() -> None:
    data = {
        "name": "mini",
        "numa_nodes": 2,
        "pcie": [{"host_bridge": "0000:40", "numa_node": 1, "children": [
            {"bridge": "0000:40:01.0", "children": [
                {"nic": "0000:41:00", "model": "cx6dx", "board_id": "MT_X", "fw_version": "22.39.1002",
                 "link_layer": "Ethernet", "speed_gbps": 100,
                 "functions": [{"function": 1, "netdev": "eth1"}, {"function": 0, "link_layer": "InfiniBand"}]},
            ]},
        ]}],
    }
    profile = validate_profile(data, "mini.yaml")
    bridge = profile["pcie"][0]["children"][0]
    assert (bridge["numa_node"], bridge["vendor_id"], bridge["device_id"]) == (1, "0x1000", "0xc030")
    card = bridge["children"][0]
    assert (card["numa_node"], card["sriov_totalvfs"]) == (1, 8)
    assert [f["function"] for f in card["functions"]] == [0, 1]  # sorted
    f0, f1 = card["functions"]
    assert (f0["link_layer"], f0["mtu"], f0["netdev"], f0["link"]) == ("InfiniBand", 4092, None, "up")
    assert (f1["link_layer"], f1["mtu"], f1["rate"]) == ("Ethernet", 1500, "100 Gb/sec (4X EDR)")
    assert profile["bonds"] == [] and profile["faults"] == {} and profile["dmi"] == {}
    recs = list(iter_devices(profile))
    assert [r["class"] for r in recs] == ["0x060400", "0x020700", "0x020000"]
    assert recs[1]["mac"] == "02:00:00:00:41:00" and recs[2]["mac"] == "02:00:00:00:41:01"


def test_nic_without_function_zero_is_rejected() -> None:
    data = _raw("hgx-h100")
    _at(data, f"{NIC0}.functions[0]")["function"] = 1
    with pytest.raises(ProfileError, match=rf"hgx-h100\.yaml: {re.escape(NIC0)}\.functions: function 0 is required"):
        validate_profile(data, "hgx-h100.yaml")
