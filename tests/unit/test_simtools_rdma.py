"""Simulated RDMA tools (ibdev2netdev, ibstat, mlnx_qos, cma_roce_tos, flint, mst, mlxfwreset, ib_write_bw)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ansible_collections.mlplatform.gpunode.plugins.module_utils import mlxreg, perftest, rdma_tools
from simhost import Result, make_host, run_tool

from gpunode.sim import hwstate
from gpunode.sim.tools.state import ENV_ROOT

REPO = Path(__file__).resolve().parents[2]


def verbatim(path: Path) -> str:
    return "\n".join(line for line in path.read_text().splitlines() if not line.startswith("#")) + "\n"


@pytest.fixture(scope="module")
def dgx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_host(tmp_path_factory.mktemp("dgx") / "h", "dgx-h100")


@pytest.fixture
def hgx(tmp_path: Path) -> Path:
    return make_host(tmp_path / "hgx", "hgx-h100")


def test_ibdev2netdev_parses_like_the_real_dgx_sample(dgx: Path, real_outputs: Path) -> None:
    text = verbatim(real_outputs / "ibdev2netdev-dgx-h100-aben20807.txt").replace("$ ibdev2netdev\n", "")
    real = rdma_tools.parse_ibdev2netdev(text)
    sim = rdma_tools.parse_ibdev2netdev(run_tool(dgx, "ibdev2netdev").out)
    assert [e.keys() for e in sim] == [real[0].keys()] * len(sim)
    assert [e["rdma_device"] for e in sim][:3] == [e["rdma_device"] for e in real][:3]  # mlx5_0, mlx5_1, mlx5_10
    real_map = {e["rdma_device"]: e["netdev"] for e in real}
    sim_map = {e["rdma_device"]: e["netdev"] for e in sim}
    for dev in ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6"):
        assert sim_map[dev] == real_map[dev], dev  # the DGX H100 layout before the sample's numbering shift


def test_ibstat_parses_like_the_real_sample(hgx: Path, real_outputs: Path) -> None:
    real = rdma_tools.parse_ibstat(verbatim(real_outputs / "ibstat-h100-roce-8xcx7-cx6dx-gpud.txt"))
    sim = rdma_tools.parse_ibstat(run_tool(hgx, "ibstat").out)
    assert sim.keys() == real.keys()  # mlx5_0..mlx5_11 on the XE9680-like board
    for dev in ("mlx5_0", "mlx5_1"):
        assert sim[dev].keys() == real[dev].keys()
        for key in ("ca_type", "firmware_version", "number_of_ports"):
            assert sim[dev][key] == real[dev][key], (dev, key)
        (sport,), (rport,) = sim[dev]["ports"].values(), real[dev]["ports"].values()
        assert sport.keys() == rport.keys()
        for key in ("state", "physical_state", "rate", "link_layer", "capability_mask", "base_lid"):
            assert sport[key] == rport[key], (dev, key)


def test_mlnx_qos_parses_like_the_real_sample_and_is_volatile(hgx: Path, real_outputs: Path) -> None:
    sample = verbatim(real_outputs / "roce-lossless-l3-setup-mlnx_qos-cma_roce_tos-netarbiter.txt")
    block = sample.split("+ mlnx_qos -i eth4 --pfc 0,0,0,1,0,0,0,0\n", 1)[1]
    real = rdma_tools.parse_mlnx_qos(block)
    res = run_tool(hgx, "mlnx_qos", "-i", "enp26s0np0", "--trust", "dscp", "--pfc", "0,0,0,1,0,0,0,0")
    assert res.rc == 0
    sim = rdma_tools.parse_mlnx_qos(res.out)
    assert sim == real
    assert res.out == block  # byte for byte
    assert rdma_tools.parse_mlnx_qos(run_tool(hgx, "mlnx_qos", "-i", "enp60s0np0").out)["trust"] == "pcp"
    hwstate.reboot_state(hgx)
    after = rdma_tools.parse_mlnx_qos(run_tool(hgx, "mlnx_qos", "-i", "enp26s0np0").out)
    assert (after["trust"], after["pfc_priorities"]) == ("pcp", [])


@pytest.mark.parametrize("args", [["--pfc", "0,0,0,1,0,0,0"], ["--pfc", "0,0,0,2,0,0,0,0"], ["--trust", "ip"],
                                  ["--bogus"]])
def test_mlnx_qos_rejects_bad_input(hgx: Path, args: list[str]) -> None:
    res = run_tool(hgx, "mlnx_qos", "-i", "enp26s0np0", *args)
    assert res.rc == 2 and "mlnx_qos: error:" in res.err
    assert not (hgx / "run" / "qos.json").exists()


def test_mlnx_qos_dcbx_mode_follows_the_nv_config(hgx: Path) -> None:
    assert run_tool(hgx, "mlxconfig", "-d", "1b:00.0", "-y", "set", "LLDP_NB_DCBX_P2=1").rc == 0
    hwstate.reboot_state(hgx)
    modes = {nd: rdma_tools.parse_mlnx_qos(run_tool(hgx, "mlnx_qos", "-i", nd).out)["dcbx_mode"]
             for nd in ("enp27s0f0np0", "enp27s0f1np1")}
    assert modes == {"enp27s0f0np0": "OS controlled", "enp27s0f1np1": "Firmware controlled"}


def test_mlnx_qos_refuses_ipoib_and_unknown_interfaces(dgx: Path) -> None:
    assert run_tool(dgx, "mlnx_qos", "-i", "ibp24s0").rc == 1
    assert run_tool(dgx, "mlnx_qos", "-i", "eth9").rc == 1


def test_cma_roce_tos_sets_tos_and_traffic_class(hgx: Path, real_outputs: Path) -> None:
    res = run_tool(hgx, "cma_roce_tos", "-d", "mlx5_0", "-t", "106")
    assert res.rc == 0 and rdma_tools.parse_cma_roce_tos(res.out) == 106
    tc = (hgx / "sys/class/infiniband/mlx5_0/tc/1/traffic_class").read_text()
    assert rdma_tools.parse_traffic_class(tc) == 106
    assert rdma_tools.parse_cma_roce_tos(run_tool(hgx, "cma_roce_tos", "-d", "mlx5_3").out) == 0
    assert run_tool(hgx, "cma_roce_tos", "-d", "mlx5_0", "-t", "300").rc == 1
    assert run_tool(hgx, "cma_roce_tos", "-d", "mlx5_99", "-t", "106").rc == 1


@pytest.mark.parametrize(("text", "tos"), [("Global tclass=106\n", 106), ("106\n", 106), ("", None), (None, None)])
def test_read_traffic_class_takes_the_kernel_format_and_a_written_value(text, tos) -> None:
    # The kernel reads back "Global tclass=106"; a plain file (the simulated tree) keeps the "106"
    # that roce_qos wrote. node_validation and roce_qos both read through this one function.
    assert rdma_tools.read_traffic_class(text) == tos


def test_read_traffic_class_rejects_other_text() -> None:
    with pytest.raises(rdma_tools.ParseError):
        rdma_tools.read_traffic_class("tclass=106")


def test_flint_mst_and_mlxfwreset(hgx: Path) -> None:
    flint = run_tool(hgx, "flint", "-d", "/dev/mst/mt4129_pciconf0", "q")
    fields = dict(line.split(":", 1) for line in flint.out.splitlines() if ":" in line and not line.startswith(" "))
    assert (fields["FW Version"].strip(), fields["PSID"].strip()) == ("28.39.1002", "MT_0000000838")
    status = run_tool(hgx, "mst", "status", "-v").out
    row = next(line for line in status.splitlines() if "1b:00.1" in line)
    assert row.split()[:5] == ["ConnectX6DX(rev:0)", "/dev/mst/mt4125_pciconf0.1", "1b:00.1", "mlx5_2",
                               "net-enp27s0f1np1"]
    run_tool(hgx, "mlxreg", "-d", "1a:00.0", "--reg_name", "ROCE_ACCL", "--set", "adaptive_routing_forced_en=1",
             "--yes")
    run_tool(hgx, "mlxconfig", "-d", "1a:00.0", "-y", "set", "NUM_OF_VFS=8")
    reset = run_tool(hgx, "mlxfwreset", "-d", "1a:00.0", "-y", "reset")
    assert reset.rc == 0 and "-I- FW was loaded successfully." in reset.out
    get = run_tool(hgx, "mlxreg", "-d", "1a:00.0", "--reg_name", "ROCE_ACCL", "--get").out
    assert mlxreg.parse_get(get)["fields"]["adaptive_routing_forced_en"] == 0  # lost at reset
    assert (hgx / "sys/bus/pci/devices/0000:1a:00.0/sriov_totalvfs").read_text() == "16\n"  # promotes nothing


# -- ib_write_bw between two hosts on loopback ------------------------------------------------------

PORTS = iter(range(18560, 18599))


def _pair(server_root: Path, client_root: Path, server_dev: str = "mlx5_0", client_dev: str = "mlx5_0"):
    """Run a server (a separate process, as on its own host) and a client against it on loopback."""
    port = str(next(PORTS))
    env = {**os.environ, ENV_ROOT: str(server_root), "PYTHONPATH": str(REPO / "src")}
    proc = subprocess.Popen([sys.executable, "-m", "gpunode.sim.tools.main", "ib_write_bw", "-d", server_dev,
                             "-p", port, "--report_gbits", "-F"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(300):  # the client retries a refused connection while the server starts
            client = run_tool(client_root, "ib_write_bw", "-d", client_dev, "-p", port, "--report_gbits", "-F",
                              "127.0.0.1")
            if "Couldn't connect" not in client.err:
                break
            time.sleep(0.1)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return Result(proc.returncode, out, err), client


@pytest.fixture
def two_hgx(tmp_path: Path) -> tuple[Path, Path]:
    return make_host(tmp_path / "a", "hgx-h100"), make_host(tmp_path / "b", "hgx-h100")


def test_ib_write_bw_pass(two_hgx: tuple[Path, Path]) -> None:
    server, client = _pair(*two_hgx)
    assert (server.rc, client.rc) == (0, 0), (server.err, client.err)
    for side in (server, client):
        parsed = perftest.parse(side.out)
        assert parsed["device"] == "mlx5_0" and parsed["link_type"] == "Ethernet"
        assert parsed["bw_average_gbps"] == pytest.approx(384.0)  # 96% of 400 Gb/s


def test_ib_write_bw_slower_link_limits(two_hgx: tuple[Path, Path]) -> None:
    server, client = _pair(*two_hgx, server_dev="mlx5_1")  # CX-6 Dx 100 Gb/s port
    assert client.rc == 0 and perftest.parse(client.out)["bw_average_gbps"] == pytest.approx(96.0)


def test_ib_write_bw_adaptive_routing_mismatch_fails(two_hgx: tuple[Path, Path]) -> None:
    a, b = two_hgx
    run_tool(a, "mlxreg", "-d", "1a:00.0", "--reg_name", "ROCE_ACCL", "--set", "adaptive_routing_forced_en=1", "--yes")
    server, client = _pair(a, b)
    assert server.rc == 1 and client.rc == 1
    assert "Completion with error" in client.err and "Failed status 12" in client.err
    with pytest.raises(Exception, match="result row"):
        perftest.parse(client.out)
    run_tool(b, "mlxreg", "-d", "1a:00.0", "--reg_name", "ROCE_ACCL", "--set", "adaptive_routing_forced_en=1", "--yes")
    server, client = _pair(a, b)
    assert (server.rc, client.rc) == (0, 0)


def test_ib_write_bw_link_down_fails(two_hgx: tuple[Path, Path]) -> None:
    a, b = two_hgx
    hwstate.set_fault(a, "link_down", "0000:1a:00.0")
    client = run_tool(b, "ib_write_bw", "-d", "mlx5_0", "-p", str(next(PORTS)), "127.0.0.1")
    server = run_tool(a, "ib_write_bw", "-d", "mlx5_0", "-p", str(next(PORTS)))
    assert server.rc == 1 and "state is Down" in server.err  # local port down: no listener at all
    assert client.rc == 1 and "Couldn't connect" in client.err
    client = run_tool(a, "ib_write_bw", "-d", "mlx5_0", "-p", str(next(PORTS)), "127.0.0.1")
    assert client.rc == 1 and "state is Down" in client.err  # fails before connecting
