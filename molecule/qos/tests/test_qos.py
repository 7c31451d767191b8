"""After a simulated reboot, with no Ansible run: the boot units restored the VFs and the RoCE QoS.

Rails come from the discovery result the converge wrote (/var/lib/gpunode/discovery.json); every
value is read from the host's simulated sysfs tree and from the simulated vendor tools, as a human
would check on a real host.
"""

from __future__ import annotations

import json

import pytest

SYSFS = "/var/lib/gpunode-sim/sys"
DISCOVERY = "/var/lib/gpunode/discovery.json"


@pytest.fixture(scope="module")
def hw(host):
    return json.loads(host.file(DISCOVERY).content_string)


@pytest.fixture(scope="module")
def rails(hw):
    return [n for n in hw["nics"] if n["role"] == "compute"]


def read(host, path):
    return host.file(path).content_string.strip()


def test_sriov_unit_is_enabled_ordered_before_kubelet_and_ran_this_boot(host):
    unit = host.file("/etc/systemd/system/gpunode-sriov.service").content_string
    assert "Before=containerd.service kubelet.service" in unit
    assert "After=systemd-modules-load.service openibd.service" in unit
    svc = host.service("gpunode-sriov.service")
    assert svc.is_enabled
    assert host.run("systemctl is-active gpunode-sriov.service").stdout.strip() == "active"
    journal = host.run("journalctl -b -u gpunode-sriov.service --no-pager").stdout
    assert ": 8 VFs (was 0)" in journal  # re-created at this boot, from 0 after the reboot


def test_every_compute_rail_has_its_vfs_back(host, rails):
    assert len(rails) == 8
    for nic in rails:
        assert read(host, f"{SYSFS}/bus/pci/devices/{nic['pci_address']}/sriov_numvfs") == "8", nic["pci_address"]


def test_storage_nics_have_no_vfs(host, hw):
    for nic in hw["nics"]:
        if nic["role"] == "storage" and nic["sriov_totalvfs"] is not None:
            assert read(host, f"{SYSFS}/bus/pci/devices/{nic['pci_address']}/sriov_numvfs") == "0"


def test_sriov_config_lists_the_rails(host, rails):
    config = json.loads(host.file("/etc/gpunode/sriov.json").content_string)
    assert config["sysfs_root"] == SYSFS
    wanted = {p["pci_address"]: p["num_vfs"] for p in config["pfs"] if p["role"] == "compute"}
    assert wanted == {n["pci_address"]: 8 for n in rails}
    assert host.file("/etc/gpunode/sriov.json").mode == 0o644


def test_qos_on_roce_rails_restored_by_the_boot_unit(host, rails):
    roce = [n for n in rails if n["link_layer"] == "Ethernet"]
    if not roce:
        # DGX H100 rails are InfiniBand until firmware sets LINK_TYPE=ETH: the role skips them.
        assert not host.file("/etc/gpunode/roce_qos.json").exists
        assert not host.file("/etc/systemd/system/gpunode-roce-qos.service").exists
        pytest.skip("InfiniBand rails: no RoCE QoS (skipped by the role with the reason)")
    assert host.service("gpunode-roce-qos.service").is_enabled
    assert host.run("systemctl is-active gpunode-roce-qos.service").stdout.strip() == "active"
    for nic in roce:
        netdev, dev = nic["netdev"], nic["rdma_device"]
        qos = host.run(f"mlnx_qos -i {netdev}")
        assert qos.rc == 0, qos.stderr
        assert "Priority trust state: dscp" in qos.stdout
        pfc = next(line for line in qos.stdout.splitlines() if line.strip().startswith("enabled"))
        if "DCBX mode: Firmware controlled" not in qos.stdout:  # that port: the test below
            assert pfc.split()[1:] == ["0", "0", "0", "1", "0", "0", "0", "0"]
        for point in ("roce_np", "roce_rp"):
            flags = [read(host, f"{SYSFS}/class/net/{netdev}/ecn/{point}/enable/{p}") for p in range(8)]
            assert flags == ["0", "0", "0", "1", "0", "0", "0", "0"], (netdev, point)
        assert read(host, f"{SYSFS}/class/net/{netdev}/ecn/roce_np/cnp_dscp") == "48"
        assert read(host, f"{SYSFS}/class/net/{netdev}/mtu") == "9000"
        assert read(host, f"{SYSFS}/class/infiniband/{dev}/tc/1/traffic_class") in ("106", "Global tclass=106")
        assert host.run(f"cma_roce_tos -d {dev}").stdout.strip() == "106"


def test_a_firmware_dcbx_port_keeps_its_pfc_at_boot(host, rails):
    """Issue 16 item 5: side_effect gave the HGX's first RoCE rail firmware-controlled DCBX before the reboot. The
    boot unit set trust and ECN there but left PFC to the switch (the reboot's reset value: none), and said so."""
    roce = [n for n in rails if n["link_layer"] == "Ethernet"]
    if not roce:
        pytest.skip("InfiniBand rails: no RoCE QoS")
    reports = {n["netdev"]: host.run(f"mlnx_qos -i {n['netdev']}").stdout for n in roce}
    firmware = [netdev for netdev, out in reports.items() if "DCBX mode: Firmware controlled" in out]
    assert firmware == [roce[0]["netdev"]], reports
    netdev = firmware[0]
    assert "Priority trust state: dscp" in reports[netdev]
    pfc = next(line for line in reports[netdev].splitlines() if line.strip().startswith("enabled"))
    assert pfc.split()[1:] == ["0"] * 8
    flags = [read(host, f"{SYSFS}/class/net/{netdev}/ecn/roce_np/enable/{p}") for p in range(8)]
    assert flags == ["0", "0", "0", "1", "0", "0", "0", "0"]
    journal = host.run("journalctl -b --no-pager -u gpunode-roce-qos.service").stdout
    assert f"{netdev}: PFC left alone: DCBX mode is 'Firmware controlled'" in journal, journal[-2000:]
