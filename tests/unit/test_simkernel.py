"""The simulated kernel: module loading with dependencies, rmmod refusal, boot coldplug, openibd."""

from __future__ import annotations

import io

import pytest

from gpunode.sim import simkernel
from gpunode.sim.profile import load_profile
from gpunode.sim.sysfs import materialize


@pytest.fixture
def host(tmp_path, monkeypatch):
    """A host state dir with the hgx-h100 sysfs tree, module files and an empty /etc."""
    state = tmp_path / "state"
    materialize(load_profile("hgx-h100"), state / "sys")
    modules = tmp_path / "modules"
    modules.mkdir()
    for name, deps, alias in [
        ("mlx_compat", "", ""), ("mlxfw", "mlx_compat", ""), ("ib_core", "mlx_compat", ""),
        ("mlx5_core", "mlx_compat,mlxfw", "pci:v000015B3d*"), ("ib_uverbs", "ib_core", ""),
        ("mlx5_ib", "mlx5_core,ib_core,ib_uverbs", ""), ("ib_umad", "ib_core", ""), ("iw_cm", "ib_core", ""),
        ("ib_cm", "ib_core", ""), ("rdma_cm", "ib_core,iw_cm,ib_cm", ""), ("rdma_ucm", "rdma_cm,ib_uverbs", ""),
        ("ib_ipoib", "ib_core,ib_cm", ""),
        ("nvidia", "", "pci:v000010DEd*sv*sd*bc03sc02i00"), ("nvidia_peermem", "nvidia,ib_core", ""),
    ]:
        version = "570.172.08" if name.startswith("nvidia") else "24.10-1.1.4"
        text = f"name={name}\nversion={version}\ndepends={deps}\n" + (f"alias={alias}\n" if alias else "")
        (modules / f"{name}.ko").write_text(text)
    etc = tmp_path / "etc"
    (etc / "modules-load.d").mkdir(parents=True)
    (etc / "modprobe.d").mkdir()
    monkeypatch.setenv(simkernel.STATE_ENV, str(state))
    monkeypatch.setenv(simkernel.MODULE_DIR_ENV, str(modules))
    monkeypatch.setenv(simkernel.ETC_ENV, str(etc))
    return state, etc


def test_load_pulls_dependencies_and_records_holders(host):
    state, _ = host
    assert simkernel.load("nvidia-peermem") == ["nvidia", "mlx_compat", "ib_core", "nvidia_peermem"]
    mod = state / "sys" / "module"
    assert (mod / "nvidia" / "version").read_text() == "570.172.08\n"
    assert (mod / "nvidia" / "refcnt").read_text() == "1\n"
    assert sorted(p.name for p in (mod / "ib_core" / "holders").iterdir()) == ["nvidia_peermem"]


def test_rmmod_refuses_a_module_in_use_and_modprobe_r_unloads_the_tree(host):
    state, _ = host
    simkernel.load("nvidia_peermem")
    err = io.StringIO()
    assert simkernel.rmmod(["nvidia"], err=err) == 1
    assert err.getvalue().strip() == "rmmod: ERROR: Module nvidia is in use by: nvidia_peermem"
    assert simkernel.modprobe(["-r", "nvidia_peermem"]) == 0
    assert not (state / "sys" / "module" / "nvidia").exists()
    assert not (state / "sys" / "module" / "ib_core").exists()


def test_missing_module_file_fails_like_modprobe(host):
    with pytest.raises(simkernel.ModuleError, match="Module nouveau not found"):
        simkernel.load("nouveau")


def test_boot_coldplugs_by_pci_alias_and_honours_blacklist(host):
    state, etc = host
    (etc / "modules-load.d" / "nvidia-peermem.conf").write_text("# GPUDirect RDMA\nnvidia_peermem\n")
    (etc / "modprobe.d" / "blacklist-mlx.conf").write_text("blacklist mlx5_core\n")
    out = io.StringIO()
    assert simkernel.boot(out=out, err=io.StringIO()) == 0
    loaded = sorted(p.name for p in (state / "sys" / "module").iterdir())
    # nvidia by its 10de 3D-controller alias, nvidia_peermem (with ib_core) by modules-load.d;
    # mlx5_core matches the CX-7 alias but is blacklisted.
    assert loaded == ["ib_core", "mlx_compat", "nvidia", "nvidia_peermem"]
    assert "Inserted module 'nvidia_peermem'" in out.getvalue()


def test_openibd_start_stop_and_refusal_while_peermem_holds_ib_core(host):
    state, _ = host
    assert simkernel.openibd(["start"], out=io.StringIO()) == 0
    assert (state / "sys" / "module" / "mlx5_ib" / "version").read_text() == "24.10-1.1.4\n"
    simkernel.load("nvidia_peermem")
    err = io.StringIO()
    assert simkernel.openibd(["stop"], out=io.StringIO(), err=err) == 1
    assert "nvidia_peermem" in err.getvalue()
    simkernel.unload("nvidia_peermem")
    assert simkernel.openibd(["stop"], out=io.StringIO()) == 0
    assert not (state / "sys" / "module" / "mlx5_core").exists()


def test_fabric_manager_refuses_a_different_driver_version_and_no_nvswitch(host, tmp_path, monkeypatch):
    err = io.StringIO()
    assert simkernel.fabricmanager("570.172.08", [], err=err) == 1
    assert "driver is not loaded" in err.getvalue()
    simkernel.load("nvidia")
    err = io.StringIO()
    assert simkernel.fabricmanager("570.133.20", [], err=err) == 1
    assert "does not match the loaded driver version 570.172.08" in err.getvalue()
    pcie = tmp_path / "pcie"
    materialize(load_profile("pcie-h100"), pcie / "sys")
    (pcie / "sys" / "module").mkdir(exist_ok=True)
    monkeypatch.setenv(simkernel.STATE_ENV, str(pcie))
    simkernel.load("nvidia")
    err = io.StringIO()
    assert simkernel.fabricmanager("570.172.08", [], err=err) == 1
    assert "no NVSwitch devices found" in err.getvalue()
