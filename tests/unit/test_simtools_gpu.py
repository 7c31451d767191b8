"""Simulated nvidia-smi and the GPU driver state: parses like the real samples, fails like the real tool."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.mlplatform.gpunode.plugins.module_utils import nvidia_smi
from simhost import make_host, run_tool

from gpunode.sim import hwstate
from gpunode.sim.tools.state import HostState

DRIVER = "550.90.07"


def verbatim(path: Path) -> str:
    return "\n".join(line for line in path.read_text().splitlines() if not line.startswith("#")) + "\n"


@pytest.fixture(scope="module")
def hgx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = make_host(tmp_path_factory.mktemp("hgx") / "h", "hgx-h100")
    assert run_tool(root, "gpunode-sim-ctl", "module-load", "nvidia", DRIVER).rc == 0
    return root


def test_no_driver_loaded_fails_like_nvidia_smi(tmp_path: Path) -> None:
    root = make_host(tmp_path / "h", "dgx-h100")
    res = run_tool(root, "nvidia-smi")
    assert res.rc == 9
    assert res.out.startswith("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")


def test_driver_library_mismatch(hgx: Path, tmp_path: Path) -> None:
    userspace = tmp_path / "version"
    userspace.write_text("570.86.15\n")
    res = run_tool(hgx, "nvidia-smi", userspace=userspace)
    assert (res.rc, res.out.splitlines()[0]) == (18, "Failed to initialize NVML: Driver/library version mismatch")
    userspace.write_text(f"{DRIVER}\n")
    assert run_tool(hgx, "nvidia-smi", userspace=userspace).rc == 0


def test_driver_library_mismatch_from_the_installed_utils_package(hgx: Path, tmp_path: Path) -> None:
    status = tmp_path / "status"
    status.write_text("Package: nvidia-utils-570-server\nStatus: install ok installed\nVersion: 570.86.15-0ubuntu1\n\n"
                      "Package: bash\nStatus: install ok installed\nVersion: 5.2.15-2+b2\n")
    assert run_tool(hgx, "nvidia-smi", dpkg_status=status).rc == 18
    status.write_text(f"Package: nvidia-utils-550-server\nStatus: install ok installed\nVersion: {DRIVER}-1\n")
    assert run_tool(hgx, "nvidia-smi", dpkg_status=status).rc == 0


def test_table_parses_like_the_real_sample(hgx: Path, real_outputs: Path) -> None:
    real = nvidia_smi.parse_table(verbatim(real_outputs / "nvidia-smi-h100-8gpu-gpud.txt"))
    res = run_tool(hgx, "nvidia-smi")
    sim = nvidia_smi.parse_table(res.out)
    assert sim.keys() == real.keys()
    assert (sim["smi_version"], sim["driver_version"], sim["cuda_version"]) == (
        real["smi_version"], real["driver_version"], real["cuda_version"])  # same driver 550.90.07
    assert len(sim["gpus"]) == len(real["gpus"]) == 8
    for s, r in zip(sim["gpus"], real["gpus"], strict=True):
        assert s.keys() == r.keys()
        for key in ("index", "name", "memory_total_mib", "power_cap_w", "ecc", "compute_mode", "mig_mode", "perf"):
            assert s[key] == r[key], key
    assert [g["pci_address"] for g in sim["gpus"]][:2] == ["0000:19:00.0", "0000:3b:00.0"]
    assert sim["processes"] == real["processes"] == []
    real_lines = verbatim(real_outputs / "nvidia-smi-h100-8gpu-gpud.txt").splitlines()
    sim_lines = res.out.splitlines()
    assert sim_lines[1:8] == real_lines[1:8]  # header block, byte for byte
    assert [len(x) for x in sim_lines[8:12]] == [len(x) for x in real_lines[8:12]]


def test_query_parses_like_the_real_sample_and_tracks_fabric_and_persistence(hgx: Path, real_outputs: Path) -> None:
    real = nvidia_smi.parse_query(verbatim(real_outputs / "nvidia-smi-q-h100-header-gpu0-gpud.txt"))
    sim = nvidia_smi.parse_query(run_tool(hgx, "nvidia-smi", "-q").out)
    assert sim.keys() == real.keys() and sim["attached_gpus"] == real["attached_gpus"] == 8
    rg, sg = real["gpus"][0], sim["gpus"][0]
    assert sg.keys() == rg.keys()
    for key in ("bus_id", "product_name", "memory_total_mib", "power_limit_w", "module_id"):
        assert sg[key] == rg[key], key
    shared = set(rg["fields"]) & set(sg["fields"])
    assert {"PCI/Device Id", "PCI/Sub System Id", "PCI/GPU Link Info/Link Width/Current", "Fabric/State"} <= shared
    for key in ("PCI/Device Id", "PCI/Sub System Id", "PCI/GPU Link Info/PCIe Generation/Current"):
        assert sg["fields"][key] == rg["fields"][key], key
    assert (sg["fabric_state"], sg["fabric_status"], sg["persistence_mode"]) == ("In Progress", "N/A", "Disabled")
    assert run_tool(hgx, "gpunode-sim-fabric").rc == 0
    assert run_tool(hgx, "nvidia-smi", "-pm", "1").rc == 0
    sg = nvidia_smi.parse_query(run_tool(hgx, "nvidia-smi", "-q").out)["gpus"][0]
    assert (sg["fabric_state"], sg["fabric_status"], sg["persistence_mode"]) == (
        rg["fabric_state"], rg["fabric_status"], rg["persistence_mode"])
    table = nvidia_smi.parse_table(run_tool(hgx, "nvidia-smi").out)
    assert {g["persistence_mode"] for g in table["gpus"]} == {"On"}


def test_topo_parses_like_the_real_sample(hgx: Path, real_outputs: Path) -> None:
    real = nvidia_smi.parse_topo(verbatim(real_outputs / "nvidia-smi-topo-m-h100-8xcx7-2xcx6dx-mooncake-2039.txt"))
    sim = nvidia_smi.parse_topo(run_tool(hgx, "nvidia-smi", "topo", "-m").out)
    assert sim["devices"] == real["devices"]  # 8 GPUs, 12 NICs on the XE9680-like board
    assert sim["nic_legend"] == real["nic_legend"]
    assert sim["legend"] == real["legend"]
    assert sim["matrix"] == real["matrix"]  # the distances are computed from the profile's PCIe tree
    assert {k: v.keys() for k, v in sim["affinity"].items()} == {k: v.keys() for k, v in real["affinity"].items()}


def test_dgx_topo_rails_are_pxb(tmp_path: Path) -> None:
    root = make_host(tmp_path / "d", "dgx-h100")
    run_tool(root, "gpunode-sim-ctl", "module-load", "nvidia", DRIVER)
    topo = nvidia_smi.parse_topo(run_tool(root, "nvidia-smi", "topo", "-m").out)
    for gpu, rdma in enumerate(("mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11")):
        assert nvidia_smi.gpu_nic_distance(topo, f"GPU{gpu}", rdma) == "PXB"


def test_query_gpu_csv(hgx: Path) -> None:
    res = run_tool(hgx, "nvidia-smi", "--query-gpu=index,name,driver_version,memory.total,pci.bus_id",
                   "--format=csv,noheader,nounits")
    rows = [line.split(", ") for line in res.out.splitlines()]
    assert res.rc == 0 and len(rows) == 8
    assert rows[0] == ["0", "NVIDIA H100 80GB HBM3", DRIVER, "81559", "00000000:19:00.0"]
    res = run_tool(hgx, "nvidia-smi", "--query-gpu=memory.total", "--format=csv")
    assert res.out.splitlines()[:2] == ["memory.total [MiB]", "81559 MiB"]
    bad = run_tool(hgx, "nvidia-smi", "--query-gpu=nonsense", "--format=csv")
    assert bad.rc == 2 and 'Field "nonsense" is not a valid field to query.' in bad.out


def test_reboot_unloads_driver_and_clears_volatile_gpu_state(tmp_path: Path) -> None:
    root = make_host(tmp_path / "h", "hgx-h100")
    run_tool(root, "gpunode-sim-ctl", "module-load", "nvidia", DRIVER)
    run_tool(root, "gpunode-sim-fabric")
    run_tool(root, "nvidia-smi", "-pm", "1")
    hwstate.reboot_state(root)
    state = HostState(root)
    assert state.gpu_driver() is None
    assert state.fabric_state() == ("In Progress", "N/A")
    assert not any(state.persistence().values())


def test_fabric_needs_the_driver_and_nvswitches(tmp_path: Path) -> None:
    root = make_host(tmp_path / "h", "hgx-h100")
    assert run_tool(root, "gpunode-sim-fabric").rc == 1  # no driver loaded: fabric manager fails
    assert HostState(root).fabric_state() == ("In Progress", "N/A")
