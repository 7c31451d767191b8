"""Verify the mixed DGX/HGX fabric after converge, a simulated reboot, a second converge and the incident.

Firmware state is read on each host with the installed (simulated) ``mlxconfig``/``mlxreg`` and the
collection's own parsers; the audit outcome and the contract reports are read from the molecule
ephemeral directory the side effect wrote them to.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

# The collection's parsers, importable through the link `make collection` keeps in .cache/collections
# (testinfra's pytest does not run with the unit tests' conftest).
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / ".cache" / "collections"))
from ansible_collections.mlplatform.gpunode.plugins.module_utils.mlxconfig import parse_query, values_equal  # noqa: E402 -- needs the path above
from ansible_collections.mlplatform.gpunode.plugins.module_utils.mlxreg import parse_get  # noqa: E402 -- needs the path above

EPHEMERAL = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent"))
WANTED = {"SRIOV_EN": 1, "NUM_OF_VFS": 8, "LINK_TYPE_P1": "ETH", "ATS_ENABLED": 0, "ROCE_CC_PRIO_MASK_P1": 8,
          "CNP_DSCP_P1": 48, "CNP_802P_PRIO_P1": 6}


@pytest.fixture(scope="module")
def discovery(host):
    return json.loads(host.file("/var/lib/gpunode/discovery.json").content_string)


@pytest.fixture(scope="module")
def rails(discovery):
    assert len(discovery["rails"]) == 8
    return discovery["rails"]


def name(host):
    return host.backend.get_hostname()


def test_every_rail_runs_the_declared_nv_config_after_the_reboot(host, rails):
    for rail in rails:
        out = host.check_output(f"mlxconfig -d {rail['pci_address']} -e q")
        (device,) = parse_query(out)["devices"]
        for param, wanted in WANTED.items():
            row = device["params"][param]
            assert values_equal(param, wanted, row["current"]), (rail["pci_address"], param, row["current"]["raw"])
            assert values_equal(param, wanted, row["next_boot"]), (rail["pci_address"], param)


def test_storage_cards_keep_their_factory_vf_count(host, discovery):
    storage = [n for n in discovery["nics"] if n["role"] == "storage"]
    assert storage
    for nic in storage:
        (device,) = parse_query(host.check_output(f"mlxconfig -d {nic['pci_address']} -e q"))["devices"]
        assert device["params"]["NUM_OF_VFS"]["next_boot"]["raw"] != "8" or nic["model"] == "ConnectX-6 Dx"


def test_boot_unit_restored_adaptive_routing_and_is_ordered(host, rails):
    unit = host.file("/etc/systemd/system/gpunode-roce-accl.service")
    assert unit.exists and unit.user == "root" and unit.mode == 0o644
    assert "After=openibd.service systemd-modules-load.service gpunode-sim-modules.service" in unit.content_string
    assert "Before=containerd.service kubelet.service" in unit.content_string
    assert host.service("gpunode-roce-accl.service").is_enabled
    show = host.check_output("systemctl show gpunode-roce-accl.service --property=ActiveState,Result")
    assert "ActiveState=active" in show and "Result=success" in show
    journal = host.check_output("journalctl -b -u gpunode-roce-accl.service --no-pager")
    assert "8 device(s) verified" in journal
    conf = host.file("/etc/gpunode/roce-accl.conf").content_string
    for rail in rails:
        assert f"{rail['pci_address']} adaptive_routing_forced_en=0x1" in conf


def test_roce_accl_as_left_by_the_incident(host, rails):
    expected = 0 if name(host) == "fw-hgx" else 1
    for rail in rails:
        out = host.check_output(f"mlxreg -d {rail['pci_address']} --reg_name ROCE_ACCL --get")
        assert parse_get(out)["fields"]["adaptive_routing_forced_en"] == expected, rail["pci_address"]


def test_reboot_was_deferred_then_nothing_pending(host):
    result = json.loads(host.file("/var/lib/gpunode/nic_firmware.json").content_string)
    assert result["reboot_required"] is False
    assert result["pending"] == {}
    reboot = json.loads(host.file("/var/lib/gpunode/reboot.json").content_string)
    assert reboot["strategy"] == "defer" and reboot["deferred"] is True and reboot["rebooting"] is False


def test_contract_held_after_the_reboot(host):
    report = json.loads((EPHEMERAL / "contract-after-reboot.json").read_text())
    assert report["ok"] is True
    expected = report["fabrics"]["fabric-a"]["expected"]
    assert expected["roce_accl.adaptive_routing_forced_en"] == 1
    assert expected["nv_config.NUM_OF_VFS"] == 8
    assert expected["rail_count"] == 8
    assert report["fabrics"]["fabric-a"]["hosts"] == ["fw-dgx", "fw-hgx"]


def test_audit_fails_naming_host_device_and_setting(host, rails):
    rc, _, out = (EPHEMERAL / "audit.out").read_text().partition("\n")
    assert rc != "0"
    report = json.loads((EPHEMERAL / "audit.json").read_text())
    assert report["ok"] is False
    rows = {(r["host"], r["pci_address"], r["netdev"], r["setting"], r["expected"], r["found"])
            for r in report["drift"]}
    if name(host) == "fw-hgx":
        for rail in rails:
            assert ("fw-hgx", rail["pci_address"], rail["netdev"], "roce_accl.adaptive_routing_forced_en", 1, 0) in rows
            assert rail["pci_address"] in out
        assert "roce_accl.adaptive_routing_forced_en" in out and "fw-hgx" in out
    else:
        assert all(r[0] == "fw-hgx" for r in rows)
