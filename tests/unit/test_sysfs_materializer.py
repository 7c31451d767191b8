"""The simulated sysfs tree: real kernel layout, relative links, formats from real outputs."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from gpunode.sim.profile import iter_devices, load_profile, validate_profile
from gpunode.sim.sysfs import MARKER, SysfsError, materialize


@pytest.fixture(scope="module")
def dgx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("dgx") / "sys"
    materialize(load_profile("dgx-h100"), root)
    return root


@pytest.fixture(scope="module")
def hgx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hgx") / "sys"
    materialize(load_profile("hgx-h100"), root)
    return root


def read(path: Path) -> str:
    return path.read_text()


def pci(root: Path, bdf: str) -> Path:
    return Path(os.path.realpath(root / "bus" / "pci" / "devices" / bdf))


def topo(root: Path, a: str, b: str) -> str:
    """GPU<->NIC distance the way nvidia-smi topo -m names it, computed only from the sysfs paths.

    PIX: both hang at most one bridge below a common switch port; PXB: more bridges, common
    ancestor still a bridge; PHB: only the host bridge in common; NODE/SYS: other host bridge,
    same/other NUMA node.
    """
    devices = Path(os.path.realpath(root / "devices"))
    pa, pb = (pci(root, x).relative_to(devices).parts[:-1] for x in (a, b))
    if pa[0] != pb[0]:
        same = read(pci(root, a) / "numa_node") == read(pci(root, b) / "numa_node")
        return "NODE" if same else "SYS"
    common = len(os.path.commonprefix([pa, pb]))
    if common == 1:
        return "PHB"
    return "PIX" if max(len(pa), len(pb)) - common <= 1 else "PXB"


# ---------------------------------------------------------------------------------------------
# layout and links


def test_pci_function_is_a_real_directory_nested_along_its_pcie_path(dgx: Path) -> None:
    link = dgx / "bus" / "pci" / "devices" / "0000:18:00.0"
    chain = "pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0"
    assert os.readlink(link) == f"../../../devices/{chain}"
    real = pci(dgx, "0000:18:00.0")
    assert real == Path(os.path.realpath(dgx)) / "devices" / chain
    assert real.is_dir() and not real.is_symlink()
    gpu = pci(dgx, "0000:1b:00.0")
    assert gpu.parts[-7:] == ("pci0000:15", "0000:15:01.0", "0000:16:00.0", "0000:17:01.0", "0000:19:00.0",
                              "0000:1a:00.0", "0000:1b:00.0")


@pytest.mark.parametrize("name", ["dgx-h100", "hgx-h100"])
def test_every_link_is_relative_and_stays_inside_root(name: str, dgx: Path, hgx: Path) -> None:
    root = dgx if name == "dgx-h100" else hgx
    real_root = os.path.realpath(root)
    links = 0
    for dirpath, dirnames, filenames in os.walk(root):
        for entry in dirnames + filenames:
            path = os.path.join(dirpath, entry)
            if os.path.islink(path):
                links += 1
                assert not os.readlink(path).startswith("/"), path
                target = os.path.realpath(path)
                assert target.startswith(real_root + os.sep) and os.path.exists(target), path
    assert links > 100
    bus = sorted(os.listdir(root / "bus" / "pci" / "devices"))
    assert bus == sorted(r["address"] for r in iter_devices(load_profile(name)))


def test_every_file_ends_with_a_newline(hgx: Path) -> None:
    for dirpath, _dirs, filenames in os.walk(hgx):
        for name in filenames:
            path = Path(dirpath, name)
            if not path.is_symlink():
                assert path.read_text().endswith("\n"), path
                assert path.read_text().count("\n") == 1, path


def test_pci_attributes_of_nics_gpus_bridges_and_nvswitches(dgx: Path, hgx: Path) -> None:
    nic = pci(dgx, "0000:18:00.0")
    assert {k: read(nic / k) for k in ("vendor", "device", "subsystem_vendor", "class", "numa_node",
                                       "current_link_speed", "current_link_width", "sriov_totalvfs",
                                       "sriov_numvfs", "sriov_vf_device")} == {
        "vendor": "0x15b3\n", "device": "0x1021\n", "subsystem_vendor": "0x15b3\n", "class": "0x020700\n",
        "numa_node": "0\n", "current_link_speed": "32.0 GT/s PCIe\n", "current_link_width": "16\n",
        "sriov_totalvfs": "16\n", "sriov_numvfs": "0\n", "sriov_vf_device": "101e\n"}
    assert read(pci(dgx, "0000:29:00.1") / "class") == "0x020000\n"  # storage card in Ethernet mode
    assert read(pci(dgx, "0000:dc:00.0") / "numa_node") == "1\n"
    assert Path(os.path.realpath(nic / "driver")) == Path(os.path.realpath(dgx / "bus/pci/drivers/mlx5_core"))
    assert os.readlink(nic / "driver") == "../../../../../../bus/pci/drivers/mlx5_core"
    gpu = pci(hgx, "0000:19:00.0")
    assert (read(gpu / "vendor"), read(gpu / "device"), read(gpu / "class"), read(gpu / "subsystem_device")) == (
        "0x10de\n", "0x2330\n", "0x030200\n", "0x16c1\n")
    assert not (gpu / "driver").exists()  # no GPU driver before the driver stage
    nvs = pci(hgx, "0000:83:00.0")
    assert (read(nvs / "device"), read(nvs / "class"), read(nvs / "numa_node")) == ("0x22a3\n", "0x068000\n", "1\n")
    bridge = pci(dgx, "0000:15:01.0")
    assert (read(bridge / "class"), read(bridge / "vendor"), read(bridge / "secondary_bus_number"),
            read(bridge / "subordinate_bus_number")) == ("0x060400\n", "0x8086\n", "22\n", "27\n")
    assert read(pci(hgx, "0000:1b:00.1") / "sriov_totalvfs") == "8\n"  # CX-6 Dx


# ---------------------------------------------------------------------------------------------
# netdevs and RDMA


def test_netdev_device_link_resolves_to_its_pci_function(dgx: Path) -> None:
    netdev = dgx / "class" / "net" / "ibp24s0"
    chain = "pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0"
    assert os.readlink(netdev) == f"../../devices/{chain}/net/ibp24s0"
    assert os.readlink(netdev / "device") == "../../../0000:18:00.0"
    assert Path(os.path.realpath(netdev / "device")) == pci(dgx, "0000:18:00.0")
    assert {k: read(netdev / k) for k in ("type", "mtu", "operstate", "carrier", "speed", "dev_port")} == {
        "type": "32\n", "mtu": "4092\n", "operstate": "up\n", "carrier": "1\n", "speed": "400000\n",
        "dev_port": "0\n"}
    assert len(read(netdev / "address").strip().split(":")) == 20  # IPoIB hardware address


@pytest.mark.parametrize("name", ["dgx-h100", "hgx-h100"])
def test_every_netdev_and_rdma_device_sits_under_its_function(name: str, dgx: Path, hgx: Path) -> None:
    root = dgx if name == "dgx-h100" else hgx
    nics = [r for r in iter_devices(load_profile(name)) if r["kind"] == "nic"]
    for r in nics:
        assert Path(os.path.realpath(root / "class/net" / r["netdev"] / "device")) == pci(root, r["address"])
        assert Path(os.path.realpath(root / "class/infiniband" / r["rdma"] / "device")) == pci(root, r["address"])
        # what ibdev2netdev reads: the RDMA device's PCI function lists the netdev
        assert os.listdir(root / "class/infiniband" / r["rdma"] / "device" / "net") == [r["netdev"]]
    ifindexes = [read(root / "class/net" / n / "ifindex") for n in os.listdir(root / "class/net")]
    assert len(set(ifindexes)) == len(ifindexes)


def test_infiniband_port_files_use_the_real_formats(dgx: Path) -> None:
    dev = dgx / "class" / "infiniband" / "mlx5_0"
    assert os.readlink(dev).endswith("/0000:18:00.0/infiniband/mlx5_0")
    assert {k: read(dev / k) for k in ("hca_type", "fw_ver", "board_id", "node_type")} == {
        "hca_type": "MT4129\n", "fw_ver": "28.39.1002\n", "board_id": "MT_0000000838\n", "node_type": "1: CA\n"}
    assert re.fullmatch(r"[0-9a-f]{4}(:[0-9a-f]{4}){3}\n", read(dev / "node_guid"))
    port = dev / "ports" / "1"
    assert {k: read(port / k) for k in ("state", "phys_state", "rate", "link_layer")} == {
        "state": "4: ACTIVE\n", "phys_state": "5: LinkUp\n", "rate": "400 Gb/sec (4X NDR)\n",
        "link_layer": "InfiniBand\n"}
    assert read(port / "counters" / "link_downed") == "0\n"


def test_port_formats_match_the_gpud_sysfs_sample(dgx: Path, real_outputs: Path) -> None:
    sample = dict(re.findall(r"^/sys/class/infiniband/mlx5_0/(\S+): (.*)$",
                             (real_outputs / "sysfs-class-infiniband-h100-ib-bf3-gpud.txt").read_text(), re.M))
    for key in ("hca_type", "board_id", "ports/1/link_layer", "ports/1/rate", "ports/1/state", "ports/1/phys_state"):
        assert read(dgx / "class/infiniband/mlx5_0" / key) == sample[key] + "\n", key


def test_down_port_reads_down_everywhere(dgx: Path) -> None:
    port = dgx / "class" / "infiniband" / "mlx5_1" / "ports" / "1"
    assert (read(port / "state"), read(port / "phys_state"), read(port / "link_layer")) == (
        "1: DOWN\n", "3: Disabled\n", "Ethernet\n")
    netdev = dgx / "class" / "net" / "enp41s0f0np0"
    assert (read(netdev / "operstate"), read(netdev / "carrier"), read(netdev / "speed"), read(netdev / "type")) == (
        "down\n", "0\n", "-1\n", "1\n")


def test_roce_netdevs_have_ecn_defaults_and_gid_ndev(hgx: Path) -> None:
    netdev = hgx / "class" / "net" / "enp26s0np0"
    assert read(netdev / "ecn" / "roce_np" / "cnp_dscp") == "48\n"
    assert [read(netdev / "ecn" / "roce_rp" / "enable" / str(p)) for p in range(8)] == ["1\n"] * 8
    assert read(netdev / "speed") == "400000\n"
    port = hgx / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    assert (read(port / "link_layer"), read(port / "rate")) == ("Ethernet\n", "400 Gb/sec (4X NDR)\n")
    assert read(port / "gid_attrs" / "ndevs" / "0") == "enp26s0np0\n"
    assert read(hgx / "class/infiniband/mlx5_1/ports/1/rate") == "100 Gb/sec (4X EDR)\n"
    assert read(hgx / "class/infiniband/mlx5_1/hca_type") == "MT4125\n"


# ---------------------------------------------------------------------------------------------
# topology as discovery will see it


def test_hgx_gpu0_its_rail_and_the_storage_card_share_one_switch(hgx: Path) -> None:
    parents = {bdf: pci(hgx, bdf).parent.parent for bdf in ("0000:19:00.0", "0000:1a:00.0", "0000:1b:00.0",
                                                            "0000:1b:00.1")}
    assert len(set(parents.values())) == 1
    assert next(iter(parents.values())).name == "0000:17:00.0"  # the switch's upstream port


def _topo_sample(path: Path) -> tuple[list[str], dict[str, dict[str, str]], dict[str, str]]:
    lines = path.read_text().splitlines()
    header = next(ln for ln in lines if ln.lstrip().startswith("GPU0"))
    cols = [c for c in header.split() if re.fullmatch(r"(GPU|NIC)\d+", c)]
    matrix = {}
    for ln in lines:
        fields = ln.split()
        if fields and re.fullmatch(r"GPU\d+", fields[0]):
            matrix[fields[0]] = dict(zip(cols, fields[1:1 + len(cols)], strict=True))
    legend = dict(re.findall(r"^\s+(NIC\d+): (mlx5_\d+)$", path.read_text(), re.M))
    return cols, matrix, legend


def test_hgx_gpu_nic_distances_equal_the_real_topo_matrix(hgx: Path, real_outputs: Path) -> None:
    cols, matrix, legend = _topo_sample(real_outputs / "nvidia-smi-topo-m-h100-8xcx7-2xcx6dx-mooncake-2039.txt")
    gpus = [r["address"] for r in iter_devices(load_profile("hgx-h100")) if r["kind"] == "gpu"]
    nic_addr = {nic: Path(os.path.realpath(hgx / "class/infiniband" / rdma / "device")).name
                for nic, rdma in legend.items()}
    assert len(matrix) == 8 and len(nic_addr) == 12
    ours = {f"GPU{i}": {nic: topo(hgx, gpu, addr) for nic, addr in nic_addr.items()} for i, gpu in enumerate(gpus)}
    theirs = {g: {c: v for c, v in row.items() if c.startswith("NIC")} for g, row in matrix.items()}
    assert ours == theirs
    assert [c for c in cols if c.startswith("GPU")] == [f"GPU{i}" for i in range(8)]


def test_dgx_each_gpu_is_pxb_to_its_rail_and_never_pix(dgx: Path) -> None:
    records = list(iter_devices(load_profile("dgx-h100")))
    gpus = [r for r in records if r["kind"] == "gpu"]
    nics = [r for r in records if r["kind"] == "nic"]
    for i, gpu in enumerate(gpus):
        for nic in nics:
            distance = topo(dgx, gpu["address"], nic["address"])
            if nic["expect"]["rail"] == i:
                assert distance == "PXB", (gpu["address"], nic["address"])
            else:
                assert distance == ("NODE" if nic["numa_node"] == gpu["numa_node"] else "SYS")
    assert topo(dgx, "0000:29:00.0", "0000:29:00.1") == "PIX"


# ---------------------------------------------------------------------------------------------
# bonds, DMI, NUMA


def test_bond_slaves_have_master_links(dgx: Path) -> None:
    bond = dgx / "class" / "net" / "bond0"
    assert os.readlink(bond) == "../../devices/virtual/net/bond0"
    assert read(bond / "bonding" / "slaves") == "enp41s0f1np1 enp170s0f1np1\n"
    assert read(bond / "bonding" / "mode") == "802.3ad 4\n"
    for slave in ("enp41s0f1np1", "enp170s0f1np1"):
        netdev = dgx / "class" / "net" / slave
        assert not os.readlink(netdev / "master").startswith("/")
        assert os.path.realpath(netdev / "master") == os.path.realpath(bond)
        assert (netdev / "bonding_slave").is_dir()
        assert os.path.realpath(bond / f"lower_{slave}") == os.path.realpath(netdev)
    assert not (dgx / "class/net/enp41s0f0np0/master").exists()
    # no RoCE LAG across two cards: each slave keeps its own RDMA device
    assert {"mlx5_2", "mlx5_8"} <= set(os.listdir(dgx / "class" / "infiniband"))
    assert read(bond / "speed") == "400000\n"


def test_roce_lag_bond_replaces_the_slaves_rdma_devices(tmp_path: Path) -> None:
    profile = load_profile("hgx-h100")
    profile["bonds"] = [{"name": "bond0", "mode": "802.3ad", "slaves": ["enp27s0f0np0", "enp27s0f1np1"],
                         "rdma": "mlx5_bond_0", "mtu": 9000}]
    profile = validate_profile(profile, "hgx-h100.yaml")
    materialize(profile, tmp_path / "sys")
    ib = tmp_path / "sys" / "class" / "infiniband"
    assert "mlx5_bond_0" in os.listdir(ib)
    assert not {"mlx5_1", "mlx5_2"} & set(os.listdir(ib))
    assert os.readlink(ib / "mlx5_bond_0").endswith("/0000:1b:00.0/infiniband/mlx5_bond_0")
    assert read(ib / "mlx5_bond_0" / "hca_type") == "MT4125\n"
    assert read(ib / "mlx5_bond_0" / "ports/1/gid_attrs/ndevs/0") == "bond0\n"
    assert read(ib / "mlx5_bond_0" / "ports/1/state") == "4: ACTIVE\n"
    assert read(tmp_path / "sys/class/net/bond0/mtu") == "9000\n"


def test_dmi_and_numa_nodes(dgx: Path, hgx: Path) -> None:
    assert os.readlink(dgx / "class" / "dmi" / "id") == "../../devices/virtual/dmi/id"
    assert read(dgx / "class/dmi/id/sys_vendor") == "NVIDIA\n"
    assert "DGX H100" in read(dgx / "class/dmi/id/product_name")
    assert read(hgx / "class/dmi/id/product_name") == "PowerEdge XE9680\n"
    nodes = dgx / "devices" / "system" / "node"
    assert sorted(p.name for p in nodes.glob("node*")) == ["node0", "node1"]
    assert read(nodes / "online") == "0-1\n"


# ---------------------------------------------------------------------------------------------
# ownership of the root, idempotency, speed


def _listing(root: Path) -> dict[str, Any]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for entry in dirnames + filenames:
            path = os.path.join(dirpath, entry)
            rel = os.path.relpath(path, root)
            out[rel] = os.readlink(path) if os.path.islink(path) else (
                None if os.path.isdir(path) else Path(path).read_text())
    return out


def test_materialize_twice_gives_the_same_tree(tmp_path: Path) -> None:
    profile = load_profile("hgx-h100")
    root = tmp_path / "sys"
    materialize(profile, root)
    first = _listing(root)
    (root / "class" / "net" / "stale0").mkdir()
    materialize(profile, root)
    assert _listing(root) == first
    assert (root / MARKER).is_file()


def test_refuses_a_root_it_did_not_write(tmp_path: Path) -> None:
    root = tmp_path / "precious"
    root.mkdir()
    (root / "data.txt").write_text("keep me\n")
    with pytest.raises(SysfsError, match=rf"{re.escape(str(root))}: not empty and has no \.gpunode-sim marker"):
        materialize(load_profile("dgx-h100"), root)
    assert (root / "data.txt").read_text() == "keep me\n"


def test_refuses_a_symlinked_root_and_accepts_an_empty_dir(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(SysfsError, match="is a symlink"):
        materialize(load_profile("dgx-h100"), tmp_path / "link")
    materialize(load_profile("dgx-h100"), tmp_path / "real")
    assert (tmp_path / "real" / "class" / "net" / "ibp24s0").exists()


def test_clearing_never_follows_links_out_of_root(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "file").write_text("still here\n")
    root = tmp_path / "sys"
    materialize(load_profile("hgx-h100"), root)
    (root / "escape").symlink_to(outside)
    (root / "devices" / "escape").symlink_to(outside)
    materialize(load_profile("hgx-h100"), root)
    assert (outside / "file").read_text() == "still here\n"
    assert not (root / "escape").exists()


def test_host_index_changes_macs_and_guids(tmp_path: Path) -> None:
    profile = load_profile("hgx-h100")
    materialize(profile, tmp_path / "a")
    materialize(profile, tmp_path / "b", host_index=7)
    for rel in ("class/net/enp26s0np0/address", "class/infiniband/mlx5_0/node_guid"):
        assert read(tmp_path / "a" / rel) != read(tmp_path / "b" / rel)
    assert read(tmp_path / "a/class/net/enp26s0np0/address") == "02:00:00:00:1a:00\n"
