"""Verify DOCA-OFED and the NVIDIA driver on the simulated hosts: packages, versions, pins and holds,
units, module configuration, loaded modules and what nvidia-smi reads (after the HGX rebooted)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
import yaml

from gpunode.sim.profile import iter_devices

# The collection's parsers, importable through the link `make collection` keeps in .cache/collections.
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / ".cache" / "collections"))
nvidia_smi = importlib.import_module("ansible_collections.mlplatform.gpunode.plugins.module_utils.nvidia_smi")

SYSFS = "/var/lib/gpunode-sim/sys"
DRIVER = "570.172.08"
DRIVER_PACKAGES = ["nvidia-driver-570-server-open", "nvidia-dkms-570-server-open", "nvidia-kernel-common-570-server",
                   "nvidia-utils-570-server", "nvidia-compute-utils-570-server"]
DOCA_PACKAGES = ["doca-ofed", "mlnx-ofed-kernel-dkms", "mlnx-ofed-kernel-utils", "mlnx-tools", "mft", "rdma-core",
                 "ibverbs-utils", "infiniband-diags", "perftest"]


@pytest.fixture(scope="module")
def profile(host):
    return yaml.safe_load(host.file("/var/lib/gpunode-sim/profile.yaml").content_string)


@pytest.fixture(scope="module")
def nvswitch_host(profile):
    return any(d["kind"] == "nvswitch" for d in iter_devices(profile))


def _version(host, name):
    return host.check_output("dpkg-query -W -f='${Version}' %s", name)


def test_doca_ofed_installed_pinned_and_held(host):
    assert _version(host, "doca-ofed") == "2.9.1-1"
    held = host.check_output("apt-mark showhold").split()
    assert set(DOCA_PACKAGES) <= set(held)
    pref = host.file("/etc/apt/preferences.d/gpunode-doca.pref").content_string
    assert "Package: doca-ofed\nPin: version 2.9.1-1\nPin-Priority: 1000" in pref
    assert "Package: mlnx-ofed-kernel-dkms\nPin: version 24.10.OFED.24.10.1.1.4.1-1\n" in pref


def test_sources_are_deb822_with_signed_by(host):
    doca = host.file("/etc/apt/sources.list.d/doca.sources").content_string
    assert ("URIs: file:///srv/gpunode-repo/doca/2.9.1/debian12/x86_64/\nSuites: /\n"
            "Signed-By: /etc/apt/keyrings/doca.asc") in doca
    cuda = host.file("/etc/apt/sources.list.d/cuda.sources").content_string
    assert ("URIs: file:///srv/gpunode-repo/cuda/debian12/x86_64/\nSuites: /\n"
            "Signed-By: /etc/apt/keyrings/cuda.asc") in cuda
    assert host.file("/etc/apt/keyrings/cuda.asc").content_string.startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----")


def test_driver_packages_at_the_exact_version_pinned_and_held(host):
    held = set(host.check_output("apt-mark showhold").split())
    for name in DRIVER_PACKAGES:
        assert _version(host, name) == f"{DRIVER}-1", name
        assert name in held, name
    pref = host.file("/etc/apt/preferences.d/gpunode-nvidia-driver.pref").content_string
    assert f"Package: nvidia-driver-570-server-open\nPin: version {DRIVER}-*\nPin-Priority: 1000" in pref
    # apt would not move off the pinned version
    policy = host.check_output("apt-cache policy nvidia-driver-570-server-open")
    assert f"Candidate: {DRIVER}-1" in policy


def test_fabric_manager_only_on_nvswitch_hosts(host, nvswitch_host):
    fm = host.package("nvidia-fabricmanager-570")
    if nvswitch_host:
        assert fm.is_installed and fm.version == f"{DRIVER}-1"
        assert "nvidia-fabricmanager-570" in host.check_output("apt-mark showhold").split()
        assert host.service("nvidia-fabricmanager").is_enabled
        assert host.service("nvidia-fabricmanager").is_running
    else:
        assert not fm.is_installed
        pref = host.file("/etc/apt/preferences.d/gpunode-nvidia-driver.pref").content_string
        assert "nvidia-fabricmanager" not in pref


def test_units_enabled_and_active(host):
    for unit in ("openibd", "nvidia-persistenced"):
        svc = host.service(unit)
        assert svc.is_enabled, unit
        assert svc.is_running, unit
    assert host.run("systemctl --failed --no-legend --plain").stdout.strip() == ""


def test_module_configuration(host):
    assert host.file("/etc/modules-load.d/nvidia-peermem.conf").content_string.splitlines()[-1] == "nvidia_peermem"
    assert "blacklist nouveau" in host.file("/etc/modprobe.d/blacklist-nouveau.conf").content_string.splitlines()
    dropin = host.file("/etc/systemd/system/systemd-modules-load.service.d/gpunode-after-openibd.conf")
    assert "After=openibd.service" in dropin.content_string.splitlines()
    after = host.check_output("systemctl show -p After systemd-modules-load.service")
    assert "openibd.service" in after


def test_modules_loaded_with_the_installed_versions(host):
    mods = host.check_output(f"ls {SYSFS}/module").split()
    assert {"mlx5_core", "mlx5_ib", "ib_core", "ib_uverbs", "rdma_ucm", "nvidia", "nvidia_peermem"} <= set(mods)
    assert "nouveau" not in mods
    assert host.file(f"{SYSFS}/module/mlx5_core/version").content_string.strip() == "24.10-1.1.4"
    assert host.file(f"{SYSFS}/module/nvidia/version").content_string.strip() == DRIVER
    holders = host.check_output(f"ls {SYSFS}/module/ib_core/holders").split()
    assert "nvidia_peermem" in holders


def test_nvidia_smi_reads_driver_persistence_and_fabric_state(host, profile, nvswitch_host):
    query = nvidia_smi.parse_query(host.check_output("nvidia-smi -q"))
    summary = nvidia_smi.driver_summary(query)
    gpus = [d["address"] for d in iter_devices(profile) if d["kind"] == "gpu"]
    assert summary["driver_version"] == DRIVER
    assert sorted(summary["gpus"]) == sorted(gpus)
    assert summary["persistence_mode"] is True
    if nvswitch_host:
        assert summary["fabric_state"] == "Completed"
    else:
        assert summary["fabric_state"] in (None, "N/A")
