"""Verify discovery on the simulated hosts against their hardware profiles.

These checks ran in a scenario of their own (molecule/discovery, on a DGX and an HGX host). The
install scenario runs the discovery role in its check, converge and idempotence steps on a DGX, an
HGX and a PCIe H100 host, so they run here instead of on a fleet of their own (issue 15); the
discovery role's playbook (playbooks/discover.yml) is covered at unit level by
tests/unit/test_discovery_role.py.

The profile each host was built from is read back from the host (``/var/lib/gpunode-sim/
profile.yaml``); its ``expect`` entries are the documented truth (DGX H100 User Guide table,
XE9680 ``topo -m``). Discovery's result is read from the file the role wrote, and every rail is
cross-checked against the sysfs tree the host exposes.
"""

from __future__ import annotations

import json
import os

import pytest
import yaml

from gpunode.sim.profile import iter_devices

SYSFS = "/var/lib/gpunode-sim/sys"
RESULT = "/var/lib/gpunode/discovery.json"

# Acceptance of issue 2: the DGX H100 rails, from the DGX H100 User Guide network-module table.
DGX_RAILS = {
    0: ("0000:18:00.0", "mlx5_0"),
    1: ("0000:40:00.0", "mlx5_3"),
    2: ("0000:4f:00.0", "mlx5_4"),
    3: ("0000:5e:00.0", "mlx5_5"),
    4: ("0000:9a:00.0", "mlx5_6"),
    5: ("0000:c0:00.0", "mlx5_9"),
    6: ("0000:ce:00.0", "mlx5_10"),
    7: ("0000:dc:00.0", "mlx5_11"),
}


@pytest.fixture(scope="module")
def profile(host):
    return yaml.safe_load(host.file("/var/lib/gpunode-sim/profile.yaml").content_string)


@pytest.fixture(scope="module")
def result(host):
    return json.loads(host.file(RESULT).content_string)


def _functions(profile):
    return [d for d in iter_devices(profile) if d["kind"] == "nic"]


def test_result_file_is_root_owned_json(host):
    f = host.file(RESULT)
    assert f.exists
    assert f.user == "root"
    assert f.mode == 0o644


def test_every_nic_function_has_the_documented_role(profile, result):
    found = {n["pci_address"]: n for n in result["nics"]}
    expected = {d["address"]: d["expect"] for d in _functions(profile) if d.get("expect")}
    assert expected, "the profile documents no expectations"
    assert set(found) == {d["address"] for d in _functions(profile)}
    for address, want in expected.items():
        assert (found[address]["role"], found[address]["rail"]) == (want["role"], want["rail"]), address


def test_one_rail_per_gpu_in_pci_order(profile, result):
    gpus = sorted(d["address"] for d in iter_devices(profile) if d["kind"] == "gpu")
    assert [g["pci_address"] for g in result["gpus"]] == gpus
    assert [r["rail"] for r in result["rails"]] == list(range(len(gpus)))
    assert [r["gpu"] for r in result["rails"]] == gpus
    assert result["gpus_without_rail"] == []


def test_storage_nics_are_never_rails(profile, result):
    storage = {d["address"] for d in _functions(profile) if d.get("expect", {}).get("role") == "storage"}
    if profile["name"] == "pcie-h100":
        assert not storage  # four rails, no storage card in this profile
        pytest.skip("the PCIe H100 profile has no storage NIC")
    assert storage
    assert storage.isdisjoint(r["pci_address"] for r in result["rails"])


def test_rails_match_sysfs(host, result):
    """Each rail's netdev and RDMA device really sit on the rail's PCI function, and its port is up."""
    rails = result["rails"]
    links = [f"{SYSFS}/class/net/{r['netdev']}/device" for r in rails]
    links += [f"{SYSFS}/class/infiniband/{r['rdma_device']}/device" for r in rails]
    resolved = host.check_output("readlink -e" + " %s" * len(links), *links).splitlines()
    bdfs = [r["pci_address"] for r in rails]
    assert [os.path.basename(p) for p in resolved] == bdfs + bdfs
    states = [f"{SYSFS}/class/infiniband/{r['rdma_device']}/ports/1/state" for r in rails]
    assert host.check_output("cat" + " %s" * len(states), *states).splitlines() == ["4: ACTIVE"] * len(rails)


def test_dgx_rails_follow_the_user_guide(profile, result):
    if profile["name"] != "dgx-h100":
        pytest.skip("DGX H100 only")
    got = {r["rail"]: (r["pci_address"], r["rdma_device"]) for r in result["rails"]}
    assert got == DGX_RAILS
    assert all(r["link_layer"] == "InfiniBand" and r["speed_gbps"] == 400 for r in result["rails"])


def test_hgx_storage_nic_on_gpu0_switch_is_not_a_rail(profile, result):
    if profile["name"] != "hgx-h100":
        pytest.skip("HGX H100 only")
    by_addr = {n["pci_address"]: n for n in result["nics"]}
    for storage in ("0000:1b:00.0", "0000:1b:00.1", "0000:9d:00.0", "0000:9d:00.1"):
        assert by_addr[storage]["model"] == "ConnectX-6 Dx"
        assert by_addr[storage]["role"] == "storage"
        assert by_addr[storage]["gpu_distance"] == "PIX"
    assert {r["pci_address"][5:7] for r in result["rails"]} == {"1a", "3c", "4d", "5e", "9c", "bc", "cc", "dc"}
    assert result["platform"]["product"] == "PowerEdge XE9680"
    assert len(result["nvswitches"]) == 4
    assert result["fabric_manager_required"] is True


def test_platform_identity_matches_dmi(host, profile, result):
    vendor = host.file(f"{SYSFS}/class/dmi/id/sys_vendor").content_string.strip()
    assert result["platform"]["vendor"] == vendor == profile["dmi"]["sys_vendor"]


def test_reboot_reset_volatile_state_and_kept_the_disk(host, profile):
    """side_effect.yml wrote 4 VFs on the HGX's rail 0, then rebooted it with `gpunode sim reboot`."""
    if profile["name"] != "hgx-h100":
        pytest.skip("only the HGX is rebooted")
    numvfs = host.file(f"{SYSFS}/bus/pci/devices/0000:1a:00.0/sriov_numvfs").content_string
    assert numvfs.strip() == "0"
    assert host.file(RESULT).exists
    assert host.run("systemctl is-system-running").stdout.strip() == "running"
