"""Conformance: discovery reads real outputs as a human reads them (files in ../shared/real-outputs)."""

from __future__ import annotations

import re

import pytest
from ansible_collections.mlplatform.gpunode.plugins.module_utils import pci_sysfs
from ansible_collections.mlplatform.gpunode.plugins.module_utils.nic_roles import classify, pcie_distance

sim_profile = pytest.importorskip("gpunode.sim.profile")
sim_sysfs = pytest.importorskip("gpunode.sim.sysfs")

IB_SAMPLE = "sysfs-class-infiniband-h100-ib-bf3-gpud.txt"
TOPO_SAMPLE = "nvidia-smi-topo-m-h100-8xcx7-2xcx6dx-mooncake-2039.txt"
LINE = re.compile(r"^/sys/class/infiniband/(?P<dev>[^/]+)/(?P<attr>[^:]+): (?P<value>.*)$")


def verbatim_lines(path):
    """Lines of a real-outputs file without the provenance header and gap markers."""
    return [line.rstrip("\n") for line in path.read_text().splitlines() if not line.startswith("#")]


@pytest.fixture
def ib_tree(real_outputs, tmp_path):
    """Write each '<path>: <value>' line of the sample back as the sysfs file it was read from."""
    root = tmp_path / "sys"
    devices = set()
    for line in verbatim_lines(real_outputs / IB_SAMPLE):
        match = LINE.match(line)
        if not match:
            continue
        target = root / "class" / "infiniband" / match["dev"] / match["attr"]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(match["value"] + "\n")
        devices.add(match["dev"])
    return root / "class" / "infiniband", sorted(devices)


def test_infiniband_sample_values_a_human_reads(ib_tree):
    base, devices = ib_tree
    assert devices == [f"mlx5_{i}" for i in (0, 1, 4, 5, 6, 7, 8, 9)] + ["mlx5_bond_0"]
    read = {name: pci_sysfs.read_rdma_device(str(base / name), name) for name in devices}
    for name in devices[:-1]:
        dev = read[name]
        assert (dev["hca_type"], dev["fw_ver"], dev["board_id"]) == ("MT4129", "28.41.1000", "MT_0000000838")
        port = dev["ports"][1]
        assert (port["state_num"], port["state"]) == (4, "ACTIVE")
        assert (port["phys_state_num"], port["phys_state"]) == (5, "LinkUp")
        assert (port["rate_gbps"], port["rate_width"], port["rate_name"]) == (400, "4X", "NDR")
        assert port["link_layer"] == "InfiniBand"
    bond = read["mlx5_bond_0"]
    assert (bond["hca_type"], bond["fw_ver"], bond["board_id"]) == ("MT41692", "32.38.3056", "MT_0000000884")
    port = bond["ports"][1]
    assert (port["rate_gbps"], port["rate_width"], port["rate_name"]) == (200, "2X", "NDR")
    assert (port["state"], port["phys_state"], port["link_layer"]) == ("ACTIVE", "LinkUp", "Ethernet")


@pytest.mark.parametrize(
    ("text", "expected"),
    [("4: ACTIVE", (4, "ACTIVE")), ("1: DOWN", (1, "DOWN")), ("5: LinkUp", (5, "LinkUp")),
     ("3: Disabled", (3, "Disabled")), ("", (None, None)), (None, (None, None)), ("ACTIVE", (None, "ACTIVE"))],
)
def test_parse_state(text, expected):
    assert pci_sysfs.parse_state(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [("400 Gb/sec (4X NDR)", (400, "4X", "NDR")), ("200 Gb/sec (2X NDR)", (200, "2X", "NDR")),
     ("100 Gb/sec (4X EDR)", (100, "4X", "EDR")), ("2.5 Gb/sec (1X SDR)", (2.5, "1X", "SDR")),
     ("40 Gb/sec", (40, None, None)), ("garbage", (None, None, None)), (None, (None, None, None))],
)
def test_parse_rate(text, expected):
    assert pci_sysfs.parse_rate(text) == expected


@pytest.mark.parametrize(("text", "expected"), [("400000", 400000), ("-1", None), ("", None), (None, None),
                                                ("unknown", None), ("100000\n", 100000)])
def test_parse_net_speed(text, expected):
    assert pci_sysfs.parse_net_speed(text) == expected


def parse_topo(path):
    """``(matrix, nic_legend)`` from nvidia-smi topo -m (columns separated by spaces or tabs)."""
    lines = verbatim_lines(path)
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("GPU0") and "NIC0" in line)
    header = lines[start].split()
    devices = [h for h in header if re.fullmatch(r"(GPU|NIC)\d+", h)]
    matrix = {}
    for line in lines[start + 1:]:
        cells = line.split()
        if not cells or not re.fullmatch(r"(GPU|NIC)\d+", cells[0]):
            break
        matrix[cells[0]] = dict(zip(devices, cells[1:1 + len(devices)], strict=True))
    legend = dict(re.findall(r"^\s*(NIC\d+): (\S+)\s*$", "\n".join(lines), flags=re.M))
    return matrix, legend


def test_topo_sample_parses(real_outputs):
    matrix, legend = parse_topo(real_outputs / TOPO_SAMPLE)
    assert len(matrix) == 20 and len(legend) == 12
    assert matrix["GPU0"]["NIC1"] == "PIX" and matrix["GPU4"]["NIC8"] == "PIX" and matrix["GPU1"]["NIC0"] == "NODE"
    assert matrix["NIC3"]["NIC3"] == "X"


def test_pcie_distance_reproduces_topo_matrix_on_hgx_profile(real_outputs, tmp_path):
    matrix, legend = parse_topo(real_outputs / TOPO_SAMPLE)
    root = tmp_path / "hgx"
    sim_sysfs.materialize(sim_profile.load_profile("hgx-h100"), root)
    snapshot = pci_sysfs.read_sysfs(root)
    devices = snapshot["devices"]
    by_rdma = {r["name"]: d for d in devices for r in d["rdma"]}
    gpus = [d for d in devices if d["vendor_id"] == "0x10de" and d["class_id"].startswith("0x0302")]
    # nvidia-smi numbers GPUs in PCI order; NICn is the RDMA device of its NIC legend.
    records = {f"GPU{i}": g for i, g in enumerate(gpus)}
    records.update({nic: by_rdma[rdma] for nic, rdma in legend.items()})
    checked = 0
    for row, cells in matrix.items():
        for col, want in cells.items():
            if want == "X" or want.startswith("NV"):
                continue
            assert pcie_distance(records[row], records[col]) == want, (row, col)
            checked += 1
    assert checked == 8 * 12 * 2 + 12 * 11
    # and the classifier, given these distances, picks the PIX CX-7 of each GPU, never NIC1/2/7/8
    rails = [r["rdma_device"] for r in classify(snapshot)["rails"]]
    assert rails == [legend[f"NIC{n}"] for n in (0, 3, 4, 5, 6, 9, 10, 11)]
