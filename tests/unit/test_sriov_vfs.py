"""sriov_vfs: plan (pure) and the module on a materialized simulated sysfs tree.

The kernel's rules for ``sriov_numvfs`` (EBUSY on a non-zero write while VFs exist, EINVAL above
``sriov_totalvfs``; hardware-facts.md "SR-IOV", real-outputs
sriov-numvfs-ebusy-k8s-rdma-sriov-dev-plugin-12.txt) are enforced by a fake ``os.write`` so the
module is tested against what the kernel would answer, not against a plain file.
"""

from __future__ import annotations

import errno
import os

import pytest
from ansible_collections.mlplatform.gpunode.plugins.module_utils import rdma_tools, sriov
from ansible_collections.mlplatform.gpunode.plugins.modules import sriov_vfs
from module_harness import ExitJson, FailJson, patch_exits, run_module

sim_profile = pytest.importorskip("gpunode.sim.profile")
sim_sysfs = pytest.importorskip("gpunode.sim.sysfs")

RAIL0 = "0000:18:00.0"  # dgx-h100 compute rail 0 (hardware-facts.md DGX H100), sriov_totalvfs 16
RAIL1 = "0000:40:00.0"


@pytest.fixture(autouse=True)
def _patch_exits(monkeypatch):
    patch_exits(monkeypatch)


def run(args, expect=ExitJson):
    return run_module(sriov_vfs.main, args, expect)


@pytest.fixture
def root(tmp_path):
    root = tmp_path / "sys"
    sim_sysfs.materialize(sim_profile.load_profile("dgx-h100"), root)
    return root


def numvfs(root, pci):
    return (root / "bus/pci/devices" / pci / "sriov_numvfs").read_text()


class FakeKernel:
    """Enforce the kernel's sriov_numvfs rules on writes; records every write as (pci, value).

    A sysfs attribute keeps its value when a write fails and ignores O_TRUNC; the plain files of a
    materialized tree do not, so the value at open time is kept and restored on a refused write.
    ``refuse`` forces an errno on every write; ``ignore`` accepts writes without storing them.
    """

    def __init__(self):
        self.writes = []
        self.refuse = None
        self.ignore = False
        self.opened = {}

    def open(self, path, flags, *args):
        path = str(path)
        before = None
        if path.endswith("/sriov_numvfs"):
            with open(path) as handle:
                before = handle.read()
        fd = REAL_OPEN(path, flags, *args)
        self.opened[fd] = (path, before)
        return fd

    def write(self, fd, data):
        path, before = self.opened.get(fd, ("", None))
        if not path.endswith("/sriov_numvfs"):
            return REAL_WRITE(fd, data)
        base = os.path.dirname(path)
        value = int(data.decode().strip())
        current = int(before)
        with open(os.path.join(base, "sriov_totalvfs")) as handle:
            total = int(handle.read())
        self.writes.append((os.path.basename(base), value))
        code = self.refuse
        if code is None and value > total:
            code = errno.EINVAL
        if code is None and value and current:
            code = errno.EBUSY
        if code is not None or self.ignore:
            REAL_WRITE(fd, before.encode())
            if code is not None:
                raise OSError(code, os.strerror(code))
            return len(data)
        return REAL_WRITE(fd, data)


REAL_OPEN = os.open
REAL_WRITE = os.write


@pytest.fixture
def kernel(monkeypatch):
    fake = FakeKernel()
    monkeypatch.setattr(sriov.os, "open", fake.open)
    monkeypatch.setattr(sriov.os, "write", fake.write)
    return fake


# -- pure plan -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("now", "want", "writes"), [
    (0, 0, []), (8, 8, []), (0, 8, [8]), (8, 0, [0]), (8, 4, [0, 4]), (4, 16, [0, 16]),
])
def test_plan_writes_zero_before_changing_a_nonzero_count(now, want, writes):
    plans, errors = sriov.plan({RAIL0: {"numvfs": now, "totalvfs": 16}}, {RAIL0: want})
    assert errors == []
    assert plans[RAIL0] == {"before": now, "after": want, "total": 16, "writes": writes}


def test_plan_refuses_more_than_total_and_plans_nothing():
    plans, errors = sriov.plan({RAIL0: {"numvfs": 0, "totalvfs": 16}, RAIL1: {"numvfs": 0, "totalvfs": 16}},
                               {RAIL0: 8, RAIL1: 32})
    assert plans == {}
    assert len(errors) == 1
    assert RAIL1 in errors[0] and "sriov_totalvfs is 16" in errors[0]
    assert "NUM_OF_VFS" in errors[0] and "SRIOV_EN" in errors[0] and "nic_firmware" in errors[0]


@pytest.mark.parametrize(("item", "needle"), [
    ({"pci_address": "18:00", "num_vfs": 8}, "pfs[0].pci_address"),
    ({"pci_address": RAIL0, "num_vfs": -1}, "pfs[0].num_vfs (0000:18:00.0)"),
    ({"pci_address": RAIL0, "num_vfs": True}, "pfs[0].num_vfs"),
])
def test_validate_request_names_the_field(item, needle):
    desired, errors = sriov.validate_request([item])
    assert desired == {}
    assert needle in errors[0]


def test_validate_request_normalizes_and_rejects_contradicting_duplicates():
    desired, errors = sriov.validate_request([{"pci_address": "18:00.0", "num_vfs": 8},
                                              {"pci_address": "0000:18:00.0", "num_vfs": 4}])
    assert desired == {RAIL0: 8}
    assert "listed twice" in errors[0]


# -- module on a simulated tree ------------------------------------------------------------------


def test_create_vfs_then_no_op(root, kernel):
    result = run({"sysfs_root": str(root), "pfs": [{"pci_address": RAIL0, "num_vfs": 8},
                                                   {"pci_address": "40:00.0", "num_vfs": 8}]})
    assert result["changed"] is True
    assert result["pfs"] == {RAIL0: {"before": 0, "after": 8, "total": 16},
                             RAIL1: {"before": 0, "after": 8, "total": 16}}
    assert numvfs(root, RAIL0) == "8\n" and numvfs(root, RAIL1) == "8\n"
    assert kernel.writes == [("0000:18:00.0", 8), ("0000:40:00.0", 8)]
    again = run({"sysfs_root": str(root), "pfs": [{"pci_address": RAIL0, "num_vfs": 8}]})
    assert again["changed"] is False
    assert len(kernel.writes) == 2  # nothing written


def test_change_goes_through_zero_and_survives_the_kernel_ebusy_rule(root, kernel):
    (root / "bus/pci/devices" / RAIL0 / "sriov_numvfs").write_text("8\n")
    result = run({"sysfs_root": str(root), "pfs": [{"pci_address": RAIL0, "num_vfs": 4}]})
    assert result["pfs"][RAIL0] == {"before": 8, "after": 4, "total": 16}
    assert kernel.writes == [(RAIL0, 0), (RAIL0, 4)]
    assert numvfs(root, RAIL0) == "4\n"


def test_check_mode_reports_and_writes_nothing(root, kernel):
    result = run({"sysfs_root": str(root), "_ansible_check_mode": True, "_ansible_diff": True,
                  "pfs": [{"pci_address": RAIL0, "num_vfs": 8}]})
    assert result["changed"] is True
    assert result["pfs"][RAIL0]["after"] == 8
    assert result["diff"] == {"before": {RAIL0: 0}, "after": {RAIL0: 8}}
    assert kernel.writes == []
    assert numvfs(root, RAIL0) == "0\n"


def test_more_than_total_refused_before_any_write(root, kernel):
    result = run({"sysfs_root": str(root), "pfs": [{"pci_address": RAIL0, "num_vfs": 8},
                                                   {"pci_address": RAIL1, "num_vfs": 17}]}, FailJson)
    assert "0000:40:00.0: 17 VFs requested but sriov_totalvfs is 16" in result["msg"]
    assert "NUM_OF_VFS" in result["msg"] and "nic_firmware" in result["msg"]
    assert kernel.writes == []
    assert numvfs(root, RAIL0) == "0\n"


def test_unknown_pf_refused_before_any_write(root, kernel):
    result = run({"sysfs_root": str(root), "pfs": [{"pci_address": RAIL0, "num_vfs": 8},
                                                   {"pci_address": "0000:77:00.0", "num_vfs": 8}]}, FailJson)
    assert "0000:77:00.0: no such PCI device" in result["msg"]
    assert kernel.writes == []


def test_ebusy_from_the_kernel_is_reported_with_its_name(root, kernel):
    # A VF held by a running pod: the kernel refuses even the write of 0 (real-outputs sample).
    (root / "bus/pci/devices" / RAIL0 / "sriov_numvfs").write_text("8\n")
    kernel.refuse = errno.EBUSY
    result = run({"sysfs_root": str(root), "pfs": [{"pci_address": RAIL0, "num_vfs": 4}]}, FailJson)
    assert "EBUSY" in result["msg"] and RAIL0 in result["msg"]
    assert result["pfs"][RAIL0]["after"] == 8
    assert numvfs(root, RAIL0) == "8\n"
    # The message is the one the shared parser recognises in captured shell errors too.
    assert rdma_tools.write_error("Device or resource busy")["errno"] == "EBUSY"


def test_einval_when_firmware_disagrees_with_totalvfs(root, kernel):
    kernel.refuse = errno.EINVAL
    result = run({"sysfs_root": str(root), "pfs": [{"pci_address": RAIL0, "num_vfs": 8}]}, FailJson)
    assert "EINVAL" in result["msg"] and "SR-IOV disabled in firmware" in result["msg"]
    assert numvfs(root, RAIL0) == "0\n"


def test_permission_denied(root, monkeypatch):
    def denied(path, flags, *args):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))

    monkeypatch.setattr(sriov.os, "open", denied)
    result = run({"sysfs_root": str(root), "pfs": [{"pci_address": RAIL0, "num_vfs": 8}]}, FailJson)
    assert "EACCES" in result["msg"] and "run as root" in result["msg"]


def test_write_that_does_not_stick_fails(root, kernel):
    kernel.ignore = True  # accepted, not applied
    result = run({"sysfs_root": str(root), "pfs": [{"pci_address": RAIL0, "num_vfs": 8}]}, FailJson)
    assert "wrote 8 to sriov_numvfs but it reads back 0" in result["msg"]
    assert result["pfs"][RAIL0] == {"before": 0, "after": 0, "total": 16}


def test_bad_sysfs_value_names_pf(root):
    (root / "bus/pci/devices" / RAIL0 / "sriov_totalvfs").write_text("lots\n")
    result = run({"sysfs_root": str(root), "pfs": [{"pci_address": RAIL0, "num_vfs": 8}]}, FailJson)
    assert RAIL0 in result["msg"] and "'lots'" in result["msg"]
