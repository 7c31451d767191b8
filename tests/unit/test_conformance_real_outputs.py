"""Conformance: every file in ../shared/real-outputs parses to the values a human reads in it.

One check per file, registered in CHECKS by file name; a file without a check fails, so a new
sample cannot be forgotten. Below the checks: malformed input raises ParseError naming what the
parser expected.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ansible_collections.mlplatform.gpunode.plugins.module_utils import mlxconfig, mlxreg, nvidia_smi, rdma_tools
from ansible_collections.mlplatform.gpunode.plugins.module_utils.parsing import ParseError
from ansible_collections.mlplatform.gpunode.plugins.module_utils.pci_sysfs import parse_rate, parse_state

SAMPLES_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "real-outputs"
SAMPLES = sorted(p.name for p in SAMPLES_DIR.iterdir()) if SAMPLES_DIR.is_dir() else []
PROMPT = re.compile(r"^(?:\$ |\+ |\[[^\]]*\][#$] ?)(?P<command>.*)$")


def verbatim(path):
    """The sample without provenance (``#`` lines, including ``#---`` gap markers)."""
    return "\n".join(line for line in path.read_text().splitlines() if not line.startswith("#")) + "\n"


def transcript(path):
    """Split a sample at shell prompts (``$ cmd``, ``[user@host dir]# cmd``, ``+ cmd`` of bash -x)
    into ``[(command or None, output text)]``; output before any prompt has command None."""
    parts = [[None, []]]
    for line in verbatim(path).splitlines():
        match = PROMPT.match(line)
        if match:
            parts.append([match.group("command").strip(), []])
        else:
            parts[-1][1].append(line)
    return [(command, "\n".join(lines)) for command, lines in parts if command or "".join(lines).strip()]


def outputs_of(path, command_start):
    found = [out for command, out in transcript(path) if command and command.startswith(command_start)]
    assert found, f"{path.name}: no '{command_start}' command in the transcript"
    return found


CHECKS = {}


def check(name):
    def register(func):
        CHECKS[name] = func
        return func
    return register


# ---------------------------------------------------------------------------------------------
# One check per sample
# ---------------------------------------------------------------------------------------------

_DGX_ROW = re.compile(r"^OSFP(\d)P(\d) CX(\d) (\d) (\d) (\S+) (mlx5_\d+)$")


@check("dgx-h100-user-guide-network-modules-table.txt")
def _dgx_table(path):
    # A table from the DGX H100 User Guide, not tool output: no module parses it, so it is read here.
    rows = [_DGX_ROW.match(line) for line in verbatim(path).splitlines()[2:]]
    assert all(rows) and len(rows) == 8
    by_gpu = {int(m.group(5)): (m.group(6), m.group(7), int(m.group(4))) for m in rows}
    assert by_gpu[0] == ("ibp24s0", "mlx5_0", 0)
    assert by_gpu[7] == ("ibp220s0", "mlx5_11", 1)
    assert sorted(int(v[1][5:]) for v in by_gpu.values()) == [0, 3, 4, 5, 6, 9, 10, 11]
    assert {gpu for gpu, v in by_gpu.items() if v[2] == 0} == {0, 1, 2, 3}


@check("ibdev2netdev-dgx-h100-aben20807.txt")
def _ibdev2netdev(path):
    (out,) = outputs_of(path, "ibdev2netdev")
    rows = rdma_tools.parse_ibdev2netdev(out)
    assert len(rows) == 11
    by_dev = {row["rdma_device"]: row for row in rows}
    assert by_dev["mlx5_7"] == {"rdma_device": "mlx5_7", "port": 1, "netdev": "enp170s0np0", "state": "Up"}
    assert by_dev["mlx5_8"]["netdev"] == "ibp192s0" and by_dev["mlx5_10"]["netdev"] == "ibp220s0"
    assert [r["rdma_device"] for r in rows if r["state"] == "Down"] == ["mlx5_1", "mlx5_2"]
    assert sorted(r["netdev"] for r in rows if r["netdev"].startswith("ibp")) == sorted(
        ["ibp24s0", "ibp64s0", "ibp79s0", "ibp94s0", "ibp154s0", "ibp192s0", "ibp206s0", "ibp220s0"])


@check("ibstat-h100-roce-8xcx7-cx6dx-gpud.txt")
def _ibstat(path):
    cas = rdma_tools.parse_ibstat(verbatim(path))
    assert sorted(cas) == sorted(f"mlx5_{i}" for i in range(12))
    cx6 = cas["mlx5_1"]
    assert (cx6["ca_type"], cx6["firmware_version"], cx6["number_of_ports"]) == ("MT4125", "22.39.1002", 1)
    assert (cx6["ports"][1]["rate"], cx6["ports"][1]["link_layer"]) == (100, "Ethernet")
    assert sorted(n for n, ca in cas.items() if ca["ca_type"] == "MT4125") == ["mlx5_1", "mlx5_2", "mlx5_7", "mlx5_8"]
    for name, ca in cas.items():
        port = ca["ports"][1]
        assert (port["state"], port["physical_state"], port["link_layer"]) == ("Active", "LinkUp", "Ethernet")
        if ca["ca_type"] == "MT4129":
            assert (ca["firmware_version"], port["rate"]) == ("28.39.1002", 400), name
    assert cas["mlx5_0"]["node_guid"] == "0xfa1ce1030000022a"
    # Dual-port CX-6 Dx: both functions share the system image GUID.
    assert cas["mlx5_2"]["system_image_guid"] == cas["mlx5_1"]["node_guid"] == "0xfa1ce303000003da"


@check("lspci-h100-xe9680-nvidia-mellanox-gpud.txt")
def _lspci_xe9680(path):
    devices = rdma_tools.parse_lspci(verbatim(path))
    assert len(devices) == 24
    gpus = [d["address"] for d in devices if d["class"] == "3D controller"]
    cx7 = [d["address"] for d in devices if d["text"].endswith("[ConnectX-7]")]
    cx6 = [d["address"] for d in devices if d["text"].endswith("[ConnectX-6 Dx]")]
    switches = [d for d in devices if d["class"] == "Bridge"]
    assert len(gpus) == 8 and gpus[0] == "0000:19:00.0"
    assert all(d["text"] == "NVIDIA Corporation Device 2330" and d["revision"] == "a1"
               for d in devices if d["class"] == "3D controller")
    assert [d["address"][5:7] for d in switches] == ["83", "84", "85", "86"]
    assert all(d["text"] == "NVIDIA Corporation Device 22a3" for d in switches)
    assert cx6 == ["0000:1b:00.0", "0000:1b:00.1", "0000:9d:00.0", "0000:9d:00.1"]
    # Each CX-7 on the bus right after its GPU.
    assert [int(a[5:7], 16) for a in cx7] == [int(a[5:7], 16) + 1 for a in gpus]
    assert {d["vendor"] for d in devices} == {"NVIDIA Corporation", "Mellanox Technologies"}


@check("lspci-vvv-cx7-sriov-cap-xe9680-gpud.txt")
def _lspci_vvv(path):
    (device,) = rdma_tools.parse_lspci(verbatim(path))
    assert (device["address"], device["class"]) == ("0000:1a:00.0", "Ethernet controller")
    details = device["details"]
    assert details["numa_node"] == 0
    assert details["sriov"] == {"initial_vfs": 16, "total_vfs": 16, "num_vfs": 0, "vf_offset": 1, "vf_stride": 1,
                                "vf_device_id": "101e"}
    assert details["link_status"] == {"speed": "32GT/s", "width": "x16"}
    assert details["vpd"]["PN"] == "MCX75310AAS-NEAT"
    assert details["kernel_driver"] == "mlx5_core"


@check("mlxconfig-e-q-cx6lx-sriov-network-operator-968.txt")
def _mlxconfig_e_q(path):
    result = mlxconfig.parse_query(verbatim(path))
    (device,) = result["devices"]
    assert (device["device_type"], device["name"], device["device"]) == (
        "ConnectX6LX", "MCX631102AC-ADA_Ax", "0108:00:00.0")
    assert device["columns"] == ["default", "current", "next_boot"]
    params = device["params"]
    assert len(params) == 17
    atomic = params["PCI_ATOMIC_MODE"]  # the value that overflows its column
    for column in ("default", "current", "next_boot"):
        assert (atomic[column]["name"], atomic[column]["number"]) == ("PCI_ATOMIC_DISABLED_EXT_ATOMIC_ENABLED", 0)
    assert params["CRYPTO_POLICY"]["current"]["raw"] == "UNRESTRICTED(1)"
    assert params["LRO_LOG_TIMEOUT0"]["next_boot"]["number"] == 6
    assert params["ALLOW_RD_COUNTERS"]["next_boot"]["name"] == "True"
    assert not any(row["changed"] for row in params.values())
    assert result["errors"] == []


@check("mlxconfig-q-cx7-sriov-device-plugin-601.txt")
def _mlxconfig_q_cx7(path):
    (device,) = mlxconfig.parse_query(verbatim(path))["devices"]
    assert (device["device_type"], device["name"], device["device"]) == (
        "ConnectX7", "MCX75310AAS-NEA_Ax", "/dev/mst/mt4129_pciconf1")
    assert device["description"].startswith("NVIDIA ConnectX-7 HHHL Adapter card; 400GbE / NDR IB")
    assert device["columns"] == ["next_boot"]
    values = {k: v["next_boot"] for k, v in device["params"].items()}
    assert len(values) == 35
    assert (values["ATS_ENABLED"]["name"], values["ATS_ENABLED"]["number"]) == ("False", 0)
    assert (values["DPA_AUTHENTICATION"]["name"], values["DPA_AUTHENTICATION"]["number"]) == ("True", 1)
    assert values["MODULE_SPLIT_M0"]["array"] == (0, 15)
    assert (values["MEMIC_SIZE_LIMIT"]["name"], values["MEMIC_SIZE_LIMIT"]["number"]) == ("_256KB", 1)
    assert values["ROCE_NEXT_PROTOCOL"]["number"] == 254
    assert values["LEGACY_BOOT_PROTOCOL"]["raw"] == "PXE(1)"
    assert "EXP_ROM_UEFI_x86_ENABLE" in values
    # SRIOV_EN, NUM_OF_VFS and LINK_TYPE_P1 fall in the gap of this public copy: not invented.
    assert not {"SRIOV_EN", "NUM_OF_VFS", "LINK_TYPE_P1"} & set(values)


@check("mlxconfig-set-cx7-sigitp-aws.txt")
def _mlxconfig_set(path):
    (listing,) = outputs_of(path, "lspci")
    assert [d["address"] for d in rdma_tools.parse_lspci(listing)] == [
        "0000:05:00.0", "0000:05:00.1", "0001:05:00.0", "0001:05:00.1"]
    # Each 'q | grep NUM_OF_VFS' prints one row; in order: before, after on .1, both in domain 0, domain 1.
    greps = [mlxconfig.parse_row(out.strip(), ["next_boot"]) for out in outputs_of(path, "mlxconfig -d")
             if "NUM_OF_VFS" in out and "Device #" not in out]
    assert [(k, row["next_boot"]["number"]) for k, row in greps] == [
        ("NUM_OF_VFS", n) for n in (16, 127, 127, 127, 16, 127)]
    sets = [mlxconfig.parse_set(out) for out in outputs_of(path, "mlxconfig -d") if "Device #" in out]
    assert len(sets) == 2
    for result, device in zip(sets, ("05:00.0", "0001:05:00.0"), strict=True):
        (dev,) = result["devices"]
        assert (dev["device_type"], dev["name"], dev["device"]) == ("ConnectX7", "MCX755106AS-HEA_Ax", device)
        row = dev["params"]["NUM_OF_VFS"]
        assert (row["next_boot"]["number"], row["new"]["number"]) == (16, 127)
        assert (result["prompted"], result["answer"], result["applied"], result["reboot_required"]) == (
            True, "y", True, True)
        assert result["apply_result"] == "Done!" and result["errors"] == []


@check("mlxreg-roce-accl-get-adaptive-routing.txt")
def _mlxreg(path):
    result = mlxreg.parse_get(verbatim(path))
    fields = result["fields"]
    assert len(fields) == 19
    assert fields["adaptive_routing_forced_en"] == 1
    assert (fields["roce_adp_retrans_en"], fields["roce_tx_window_en"], fields["roce_slow_restart_en"]) == (1, 0, 1)
    assert fields["adaptive_routing_forced_en_field_select"] == 1 and fields["ack_dscp"] == 0
    assert result["raw"]["adaptive_routing_forced_en"] == "0x00000001"
    assert list(fields)[0] == "roce_adp_retrans_field_select"


@check("mstconfig-q-bf3-b3220-edcdavid-ptp-tools.txt")
def _mstconfig_bf3(path):
    (out,) = outputs_of(path, "mstconfig -d 0002:01:00.0 q")
    (device,) = mlxconfig.parse_query(out)["devices"]
    assert (device["device_type"], device["name"], device["device"]) == (
        "BlueField3", "900-9D3B6-00CV-A_Ax", "0002:01:00.0")
    values = {k: v["next_boot"] for k, v in device["params"].items()}
    assert len(values) == 425
    expect = {"SRIOV_EN": ("True", 1), "NUM_OF_VFS": (None, 16), "NUM_OF_PF": (None, 2),
              "LINK_TYPE_P1": ("ETH", 2), "LINK_TYPE_P2": ("ETH", 2), "ROCE_CC_PRIO_MASK_P1": (None, 255),
              "CNP_DSCP_P1": (None, 48), "CNP_802P_PRIO_P1": (None, 6), "ROCE_ADAPTIVE_ROUTING_EN": ("False", 0),
              "USER_PROGRAMMABLE_CC": ("False", 0), "INTERNAL_CPU_MODEL": ("EMBEDDED_CPU", 1),
              "ADVANCED_PCI_SETTINGS": ("False", 0)}
    assert {k: (values[k]["name"], values[k]["number"]) for k in expect} == expect
    assert values["MODULE_SPLIT_M0"]["array"] == (0, 15)
    assert mlxconfig.values_equal("LINK_TYPE_P1", "ETH", values["LINK_TYPE_P1"])
    assert mlxconfig.values_equal("SRIOV_EN", True, values["SRIOV_EN"])
    assert mlxconfig.values_equal("INTERNAL_CPU_MODEL", "embedded_cpu", values["INTERNAL_CPU_MODEL"])


@check("nvidia-smi-h100-8gpu-gpud.txt")
def _nvidia_smi(path):
    table = nvidia_smi.parse_table(verbatim(path))
    assert (table["smi_version"], table["driver_version"], table["cuda_version"]) == ("550.90.07", "550.90.07", "12.4")
    gpus = table["gpus"]
    assert [g["index"] for g in gpus] == list(range(8))
    assert {g["name"] for g in gpus} == {"NVIDIA H100 80GB HBM3"}
    assert {(g["memory_total_mib"], g["power_cap_w"], g["persistence_mode"], g["mig_mode"]) for g in gpus} == {
        (81559, 700, "On", "Disabled")}
    assert [g["bus_id"][9:11] for g in gpus] == ["19", "3B", "4C", "5D", "9B", "BB", "CB", "DB"]
    assert gpus[0]["pci_address"] == "0000:19:00.0"
    assert (gpus[1]["power_draw_w"], gpus[1]["temperature_c"], gpus[1]["memory_used_mib"]) == (74, 24, 1)
    assert table["processes"] == []


@check("nvidia-smi-q-h100-header-gpu0-gpud.txt")
def _nvidia_smi_q(path):
    result = nvidia_smi.parse_query(verbatim(path))
    assert (result["driver_version"], result["cuda_version"], result["attached_gpus"]) == ("535.161.08", "12.2", 8)
    (gpu,) = result["gpus"]  # the public copy keeps GPU0 only
    assert (gpu["bus_id"], gpu["pci_address"], gpu["product_name"]) == (
        "00000000:19:00.0", "0000:19:00.0", "NVIDIA H100 80GB HBM3")
    assert (gpu["serial"], gpu["persistence_mode"], gpu["module_id"]) == ("1650000000001", "Enabled", 2)
    assert (gpu["fabric_state"], gpu["fabric_status"]) == ("Completed", "Success")
    assert (gpu["memory_total_mib"], gpu["power_limit_w"]) == (81559, 700.0)
    assert gpu["fields"]["PCI/Device Id"] == "0x233010DE"
    assert gpu["fields"]["Clocks Event Reasons/HW Slowdown/HW Power Brake Slowdown"] == "Active"


@check("nvidia-smi-topo-m-h100-8xcx7-2xcx6dx-mooncake-2039.txt")
def _topo(path):
    text = verbatim(path)
    topo = nvidia_smi.parse_topo(text)
    matrix = topo["matrix"]
    assert topo["devices"] == [f"GPU{i}" for i in range(8)] + [f"NIC{i}" for i in range(12)]
    assert (matrix["GPU0"]["NIC1"], matrix["GPU0"]["NIC6"]) == ("PIX", "SYS")
    assert len(topo["nic_legend"]) == 12 and topo["nic_legend"]["NIC11"] == "mlx5_11"
    assert all(matrix[f"GPU{a}"][f"GPU{b}"] == ("X" if a == b else "NV18") for a in range(8) for b in range(8))
    pix = {gpu: [nic for nic, cell in matrix[gpu].items() if nic.startswith("NIC") and cell == "PIX"]
           for gpu in topo["devices"][:8]}
    assert pix == {"GPU0": ["NIC0", "NIC1", "NIC2"], "GPU1": ["NIC3"], "GPU2": ["NIC4"], "GPU3": ["NIC5"],
                   "GPU4": ["NIC6", "NIC7", "NIC8"], "GPU5": ["NIC9"], "GPU6": ["NIC10"], "GPU7": ["NIC11"]}
    assert topo["affinity"]["GPU0"] == {"CPU Affinity": "4,6,8,10,12", "NUMA Affinity": "0", "GPU NUMA ID": "N/A"}
    assert topo["affinity"]["GPU7"]["NUMA Affinity"] == "1" and "NIC0" not in topo["affinity"]
    assert nvidia_smi.gpu_nic_distance(topo, "GPU4", "mlx5_9") == "NODE"
    assert topo["legend"]["PIX"] == "Connection traversing at most a single PCIe bridge"
    # Same matrix when the driver separates columns with tabs.
    assert nvidia_smi.parse_topo(re.sub(r" {2,}", "\t", text)) == topo


@check("roce-lossless-l3-setup-mlnx_qos-cma_roce_tos-netarbiter.txt")
def _roce_lossless(path):
    trust, pfc = (rdma_tools.parse_mlnx_qos(out) for out in outputs_of(path, "mlnx_qos -i eth4"))
    for qos in (trust, pfc):
        assert (qos["dcbx_mode"], qos["trust"], qos["cable_len"]) == ("OS controlled", "dscp", 7)
        assert qos["dscp2prio"][3] == [31, 30, 29, 28, 27, 26, 25, 24] and qos["prio_of_dscp"][26] == 3
        assert qos["pfc"]["enabled"] == [0, 0, 0, 1, 0, 0, 0, 0] and qos["pfc_priorities"] == [3]
        assert qos["tcs"][0] == {"ratelimit": "unlimited", "tsa": "vendor", "bw": None, "priorities": [1]}
        assert qos["tcs"][1]["priorities"] == [0] and qos["unparsed"] == []
    (tos_out,) = outputs_of(path, "sudo cma_roce_tos -d mlx5_2 -t 106")
    tos = rdma_tools.parse_cma_roce_tos(tos_out)
    assert tos == 106 and rdma_tools.tos_split(tos) == (26, 2)
    (sysctl_out,) = outputs_of(path, "sudo sysctl -w net.ipv4.tcp_ecn=1")
    assert rdma_tools.parse_sysctl(sysctl_out) == {"net.ipv4.tcp_ecn": "1"}


@check("roce-qos-sysfs-ecn-cnp-spiderpool.txt")
def _roce_sysfs(path):
    text = verbatim(path)
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Priority trust state"))
    end = next(i for i, line in enumerate(lines) if line.startswith("ECN Enabled"))
    qos = rdma_tools.parse_mlnx_qos("\n".join(lines[start:end]))
    assert qos["trust"] == "dscp" and qos["pfc_priorities"] == [5]
    assert qos["pfc"]["buffer"] == [0, 0, 0, 0, 0, 1, 0, 0]
    state = rdma_tools.roce_qos_from_sysfs(rdma_tools.parse_sysfs_reads(text))
    eth0 = state["netdevs"]["eth0"]
    assert eth0["ecn"]["roce_np"] == dict.fromkeys(range(8), True) == eth0["ecn"]["roce_rp"]
    assert eth0["cnp_dscp"] == 48
    assert state["rdma"] == {"mlx5_0": {"traffic_class": {1: 160}}}
    assert rdma_tools.tos_split(160) == (40, 0)
    (tos_line,) = [line for line in lines if line.startswith("cma_roce_tos:")]
    assert rdma_tools.parse_cma_roce_tos(tos_line.split(":", 1)[1]) == 160


@check("sriov-numvfs-ebusy-k8s-rdma-sriov-dev-plugin-12.txt")
def _sriov_ebusy(path):
    (zero,) = outputs_of(path, "echo 0 >")
    (eight,) = outputs_of(path, "echo 8 >")
    assert rdma_tools.write_error(zero) is None
    assert rdma_tools.write_error(eight) == {"errno": "EBUSY", "code": 16, "message": "Device or resource busy"}


@check("sysfs-class-infiniband-h100-ib-bf3-gpud.txt")
def _sysfs_infiniband(path):
    reads = dict(rdma_tools.parse_sysfs_reads(verbatim(path)))
    base = "/sys/class/infiniband/"
    devices = sorted({p[len(base):].split("/")[0] for p in reads})
    assert devices == [f"mlx5_{i}" for i in (0, 1, 4, 5, 6, 7, 8, 9)] + ["mlx5_bond_0"]
    assert parse_state(reads[base + "mlx5_0/ports/1/state"]) == (4, "ACTIVE")
    assert parse_state(reads[base + "mlx5_0/ports/1/phys_state"]) == (5, "LinkUp")
    assert parse_rate(reads[base + "mlx5_9/ports/1/rate"]) == (400, "4X", "NDR")
    assert parse_rate(reads[base + "mlx5_bond_0/ports/1/rate"]) == (200, "2X", "NDR")
    assert reads[base + "mlx5_bond_0/ports/1/link_layer"] == "Ethernet"
    assert (reads[base + "mlx5_bond_0/hca_type"], reads[base + "mlx5_bond_0/board_id"]) == ("MT41692", "MT_0000000884")
    assert reads[base + "mlx5_0/ports/1/counters/port_rcv_errors"] == "14"
    assert reads[base + "mlx5_0/ports/1/hw_counters/roce_adp_retrans"] == "3"


@pytest.mark.parametrize("name", SAMPLES or ["<no samples>"])
def test_real_output_parses_to_what_a_human_reads(real_outputs, name):
    assert name in CHECKS, f"{name}: no parser check mapped; add one to CHECKS in {Path(__file__).name}"
    CHECKS[name](real_outputs / name)


def test_every_check_has_its_sample(real_outputs):
    stale = sorted(set(CHECKS) - {p.name for p in real_outputs.iterdir()})
    assert not stale, f"checks for samples that no longer exist: {stale}"


# ---------------------------------------------------------------------------------------------
# Hand-made variants of the real formats
# ---------------------------------------------------------------------------------------------

E_Q_CHANGED = """
Device #1:
----------

Device type:        ConnectX7
Name:               MCX75310AAS-NEA_Ax
Description:        NVIDIA ConnectX-7 HHHL Adapter card
Device:             0000:1a:00.0

Configurations:                                          Default             Current         Next Boot
*       NUM_OF_VFS                                  16                   16                   8
        SRIOV_EN                                    True(1)              True(1)              True(1)
The '*' shows parameters with next value different from default/current value.
"""


def test_e_q_star_marks_changed_rows():
    (device,) = mlxconfig.parse_query(E_Q_CHANGED)["devices"]
    assert device["params"]["NUM_OF_VFS"]["changed"] is True
    assert device["params"]["NUM_OF_VFS"]["next_boot"]["number"] == 8
    assert device["params"]["SRIOV_EN"]["changed"] is False


def test_query_of_two_devices():
    second = E_Q_CHANGED.replace("Device #1:", "Device #2:").replace("0000:1a:00.0", "0000:3c:00.0")
    devices = mlxconfig.parse_query(E_Q_CHANGED + second)["devices"]
    assert [(d["index"], d["device"]) for d in devices] == [(1, "0000:1a:00.0"), (2, "0000:3c:00.0")]


def test_tool_error_is_reported_not_raised():
    result = mlxconfig.parse_query("-E- Failed to open the device\n")
    assert result == {"devices": [], "errors": ["Failed to open the device"], "warnings": []}
    assert mlxreg.parse_get("-E- Register ROCE_ACCL is not supported\n")["errors"] == [
        "Register ROCE_ACCL is not supported"]


def test_set_answered_no_is_not_applied():
    text = """
Device #1:
----------

Device type:        ConnectX7
Device:             05:00.0

Configurations:                                          Next Boot       New
        NUM_OF_VFS                                  16                   16

 Apply new Configuration? (y/n) [n] : n
Aborted by user
"""
    with pytest.raises(ParseError, match="set output"):
        mlxconfig.parse_set(text)
    result = mlxconfig.parse_set(text.replace("Aborted by user\n", ""))
    flags = (result["prompted"], result["answer"], result["applied"], result["reboot_required"])
    assert flags == (True, "n", False, False)


@pytest.mark.parametrize(
    ("param", "values", "expected"),
    [("LINK_TYPE_P1", ["ETH", "eth", "ETH(2)", "2", 2], 2),
     ("LINK_TYPE_P2", ["IB", "IB(1)", "1", 1], 1),
     ("SRIOV_EN", [True, "true", "True", "True(1)", "1", 1], 1),
     ("ROCE_ADAPTIVE_ROUTING_EN", [False, "false", "False(0)", "0", 0], 0),
     ("NUM_OF_VFS", ["16", 16], 16),
     ("INTERNAL_CPU_MODEL", ["embedded_cpu", "EMBEDDED_CPU"], "EMBEDDED_CPU"),
     ("INTERNAL_CPU_MODEL", ["EMBEDDED_CPU(1)", 1], 1),
     ("MODULE_SPLIT_M0", ["Array[0..15]"], "Array[0..15]")],
)
def test_normalize_value(param, values, expected):
    assert {mlxconfig.normalize_value(param, value) for value in values} == {expected}


@pytest.mark.parametrize(
    ("param", "left", "right", "equal"),
    [("LINK_TYPE_P1", "ETH", "2", True), ("LINK_TYPE_P1", "ETH(2)", "IB", False),
     ("SRIOV_EN", "true", "True(1)", True), ("SRIOV_EN", False, "True(1)", False),
     ("INTERNAL_CPU_MODEL", "EMBEDDED_CPU", "EMBEDDED_CPU(1)", True),
     ("INTERNAL_CPU_MODEL", 1, "EMBEDDED_CPU(1)", True),
     ("INTERNAL_CPU_MODEL", "SEPARATED_HOST", "EMBEDDED_CPU(1)", False),
     ("INTERNAL_CPU_MODEL", 1, "EMBEDDED_CPU", False)],  # cannot tell: never equal by guess
)
def test_values_equal(param, left, right, equal):
    assert mlxconfig.values_equal(param, left, right) is equal


# ---------------------------------------------------------------------------------------------
# Malformed input: a clear ParseError naming what was expected, never garbage
# ---------------------------------------------------------------------------------------------

CX7_Q_HEAD = "Device #1:\n----------\n\nDevice type:        ConnectX7\nDevice:             05:00.0\n\n"
TOPO_OK = ("\tGPU0\tNIC0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tPIX\t0-55\t0\nNIC0\tPIX\t X \n"
           "\nNIC Legend:\n\n  NIC0: mlx5_0\n")
SMI_HEAD = ("| NVIDIA-SMI 550.90.07              Driver Version: 550.90.07      CUDA Version: 12.4     |\n"
            "|=========================================+========================+======================|\n")
QOS_OK = "Priority trust state: dscp\nPFC configuration:\n\tpriority    0   1   2   3   4   5   6   7\n"
IBSTAT_OK = "CA 'mlx5_0'\n\tCA type: MT4129\n\tNumber of ports: 1\n\tPort 1:\n\t\tRate: 400\n"

MALFORMED = [
    (mlxconfig.parse_query, "", "some output"),
    (mlxconfig.parse_query, None, "text output"),
    (mlxconfig.parse_query, "hello world\n", "device blocks"),
    (mlxconfig.parse_query, CX7_Q_HEAD, "'Configurations:' table"),
    (mlxconfig.parse_query, CX7_Q_HEAD + "Configurations:   Next Boot   Wanted\n", "column titles"),
    (mlxconfig.parse_query, CX7_Q_HEAD + "Configurations:   Next Boot\n        SRIOV_EN   True(1)  False(0)\n",
     "a row '<PARAM> <next_boot>'"),
    (mlxconfig.parse_query, CX7_Q_HEAD + "Configurations:   Next Boot\n        SRIOV_EN\n", "a row"),
    (mlxconfig.parse_query, CX7_Q_HEAD + "Configurations:   Next Boot\n  A  1\n  A  2\n", "A repeats"),
    (mlxconfig.parse_query, CX7_Q_HEAD + "Configurations:   Default   Current\n  A  1  2\n", "a 'Next Boot' column"),
    (mlxconfig.parse_set, CX7_Q_HEAD + "Configurations:   Next Boot\n  A  1\n", "'Next Boot' and 'New'"),
    (mlxconfig.parse_set, CX7_Q_HEAD + "Configurations:   Next Boot   New\n  A  1  2\n\nApplying... Done!\n",
     "Please reboot"),
    (mlxconfig.parse_set, "nothing here\n", "set output"),
    (lambda text: mlxconfig.parse_value(text), "True (1)", "one value token"),
    (lambda text: mlxconfig.normalize_value("X", text), ["a"], "a value for X"),
    (mlxreg.parse_get, "Sending access register...\n", "'Field Name | Data' table"),
    (mlxreg.parse_get, "Field Name | Data\n=====\nfoo | 12\n", "'<field> | 0x<hex>'"),
    (mlxreg.parse_get, "Field Name | Data\nfoo | 0x1\nfoo | 0x0\n", "foo repeats"),
    (mlxreg.parse_get, "some banner\n", "Sending access register"),
    (nvidia_smi.parse_table, "No devices were found\n", "Driver Version"),
    (nvidia_smi.parse_table, SMI_HEAD + "|   0  NVIDIA H100 80GB HBM3          On  |\n", "GPU block"),
    (nvidia_smi.parse_table, SMI_HEAD + "|   0  H100  On  |   00000000:19:00.0 Off |  0 |\n"
     "| N/A   27C    P0   72W /  700W |  lots of memory |  0%  Default |\n", "<MiB> / <MiB>"),
    (nvidia_smi.parse_query, "Driver Version : 1\n", "NVSMI LOG"),
    (nvidia_smi.parse_query, "==============NVSMI LOG==============\nDriver Version : 1\nGPU 00000000:19:00.0\n"
     "    Serial Number : 1\n", "'Product Name'"),
    (nvidia_smi.parse_query, "==============NVSMI LOG==============\nCUDA Version : 1\n", "'Driver Version"),
    (nvidia_smi.parse_topo, "GPU0 X\n", "header line"),
    (nvidia_smi.parse_topo, TOPO_OK.replace("GPU0\t X \tPIX", "GPU0\t X "), "2 cells"),
    (nvidia_smi.parse_topo, TOPO_OK.replace("\tPIX\t0-55", "\tFOO\t0-55"), "2 cells"),
    (nvidia_smi.parse_topo, TOPO_OK.replace("NIC0\tPIX\t X \n", ""), "missing NIC0"),
    (nvidia_smi.parse_topo, TOPO_OK.replace("  NIC0: mlx5_0\n", ""), "'NIC Legend:' entry"),
    (lambda text: nvidia_smi.pci_address(text), "19:00", "PCI bus id"),
    (rdma_tools.parse_ibdev2netdev, "mlx5_0 port 1 => ibp24s0\n", "==> <netdev> (Up|Down)"),
    (rdma_tools.parse_ibstat, "\tCA type: MT4129\n", "\"CA '<name>'\" line first"),
    (rdma_tools.parse_ibstat, IBSTAT_OK.replace("ports: 1", "ports: 2"), "2 port blocks"),
    (rdma_tools.parse_ibstat, IBSTAT_OK.replace("Rate: 400", "Rate: fast"), "numeric port rate"),
    (rdma_tools.parse_ibstat, IBSTAT_OK + "\tgarbage\n", "'Label: value'"),
    (rdma_tools.parse_mlnx_qos, "DCBX mode: OS controlled\n", "'Priority trust state:'"),
    (rdma_tools.parse_mlnx_qos, QOS_OK, "'enabled' row"),
    (rdma_tools.parse_mlnx_qos, QOS_OK + "\tenabled     0   0   0   1   0   0   0\n", "8 numbers"),
    (rdma_tools.parse_mlnx_qos, QOS_OK + "\tenabled  0 0 0 1 0 0 0 0\ntc: 0 fast\n", "'tc: <n> ratelimit"),
    (rdma_tools.parse_mlnx_qos, "dscp2prio mapping:\n\tprio:x dscp:1\n", "dscp2prio row"),
    (rdma_tools.parse_cma_roce_tos, "error\n", "single ToS number"),
    (rdma_tools.parse_cma_roce_tos, "300\n", "0..255"),
    (lambda text: rdma_tools.tos_split(text), 256, "ToS 0..255"),
    (rdma_tools.parse_traffic_class, "tclass=106\n", "'Global tclass=<n>'"),
    (rdma_tools.parse_sysfs_reads, "nothing read\n", "/sys/ path"),
    (lambda text: rdma_tools.roce_qos_from_sysfs(rdma_tools.parse_sysfs_reads(text)),
     "/sys/class/net/eth0/ecn/roce_np/enable/3: on\n", "0 or 1"),
    (lambda text: rdma_tools.roce_qos_from_sysfs(rdma_tools.parse_sysfs_reads(text)),
     "/sys/class/net/eth0/ecn/roce_np/cnp_dscp = 99\n", "DSCP 0..63"),
    (rdma_tools.parse_sysctl, "tcp_ecn is 1\n", "'<key> = <value>'"),
    (rdma_tools.write_error, b"Device or resource busy", "sysfs write: expected text"),
    (rdma_tools.parse_lspci, "not a pci line\n", "heading"),
    (rdma_tools.parse_lspci, "\tNUMA node: 0\n", "device heading before"),
]


@pytest.mark.parametrize(("parser", "text", "message"), MALFORMED,
                         ids=[f"{p.__name__}-{i}" for i, (p, _, _) in enumerate(MALFORMED)])
def test_malformed_input_raises_parse_error(parser, text, message):
    with pytest.raises(ParseError) as caught:
        parser(text)
    assert isinstance(caught.value, ValueError)
    assert message in str(caught.value)


def test_parse_error_names_tool_and_line():
    with pytest.raises(ParseError) as caught:
        rdma_tools.parse_ibdev2netdev("mlx5_0 port 1 ==> ibp24s0 (Up)\nbroken\n")
    assert str(caught.value) == "ibdev2netdev: expected '<rdma dev> port <n> ==> <netdev> (Up|Down)', line 2: 'broken'"
    assert (caught.value.tool, caught.value.lineno) == ("ibdev2netdev", 2)


def test_write_error_recognises_python_errno_and_success():
    assert rdma_tools.write_error("[Errno 16] Device or resource busy")["errno"] == "EBUSY"
    assert rdma_tools.write_error("write error: Numerical result out of range")["errno"] == "ERANGE"
    assert rdma_tools.write_error("") is None and rdma_tools.write_error(None) is None


def test_lspci_nn_ids():
    record = rdma_tools.parse_lspci_heading(
        "1a:00.0 Infiniband controller [0207]: Mellanox Technologies MT2910 Family [ConnectX-7] [15b3:1021]")
    assert (record["class"], record["class_id"], record["vendor_id"], record["device_id"]) == (
        "Infiniband controller", "0207", "15b3", "1021")
    assert record["text"] == "Mellanox Technologies MT2910 Family [ConnectX-7]"
