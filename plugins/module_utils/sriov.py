# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""SR-IOV virtual functions through sysfs: read, plan (pure) and write ``sriov_numvfs`` (stdlib only).

Kernel rules the plan follows (docs/hardware-facts.md "SR-IOV", the public output from
https://github.com/Mellanox/k8s-rdma-sriov-dev-plugin/issues/12):

- ``/sys/bus/pci/devices/<bdf>/sriov_numvfs`` creates VFs; writing a different non-zero value
  while VFs exist answers EBUSY ("Device or resource busy"), so a change goes 0 first, then N;
- ``sriov_totalvfs`` is the firmware's limit (NUM_OF_VFS, and 0 when SRIOV_EN is off); more VFs
  need a firmware change and a reboot, which is the nic_firmware role's job, not ours.
"""

from __future__ import annotations

import errno
import os
import re

_BDF_RE = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


class SriovError(Exception):
    """A PF that cannot be read or written; the message names the PCI address."""


def normalize_pci(address):
    """``18:00.0`` -> ``0000:18:00.0``; lower case. Returns None for a malformed address."""
    if not isinstance(address, str):
        return None
    address = address.strip().lower()
    if address.count(":") == 1:
        address = "0000:" + address
    return address if _BDF_RE.match(address) else None


def pf_dir(sysfs_root, pci_address):
    return os.path.join(sysfs_root, "bus", "pci", "devices", pci_address)


def _read_int(path, pci_address, name):
    try:
        with open(path, encoding="ascii") as handle:
            text = handle.read().strip()
    except FileNotFoundError:
        raise SriovError(f"{pci_address}: {name} is absent ({path}); the PF has no SR-IOV capability "
                         "or its driver is not bound") from None
    except OSError as exc:
        raise SriovError(f"{pci_address}: cannot read {path}: {exc.strerror}") from None
    if not text.isdigit():
        raise SriovError(f"{pci_address}: {path} holds {text!r}, expected a number")
    return int(text)


def read_pf(sysfs_root, pci_address):
    """``{"numvfs": int, "totalvfs": int}`` of one PF; SriovError names the PF when it cannot be read."""
    base = pf_dir(sysfs_root, pci_address)
    if not os.path.isdir(base):
        raise SriovError(f"{pci_address}: no such PCI device under {os.path.join(sysfs_root, 'bus/pci/devices')}")
    return {"numvfs": _read_int(os.path.join(base, "sriov_numvfs"), pci_address, "sriov_numvfs"),
            "totalvfs": _read_int(os.path.join(base, "sriov_totalvfs"), pci_address, "sriov_totalvfs")}


def validate_request(pfs):
    """Check the ``pfs`` option before reading anything -> ``(desired {pci: n}, errors [str])``.

    Errors name the list index, the PCI address and the field (``pfs[2].num_vfs``).
    """
    desired = {}
    errors = []
    for index, item in enumerate(pfs or []):
        where = f"pfs[{index}]"
        if not isinstance(item, dict):
            errors.append(f"{where}: expected a dict with pci_address and num_vfs, got {item!r}")
            continue
        pci = normalize_pci(item.get("pci_address"))
        if pci is None:
            errors.append(f"{where}.pci_address: {item.get('pci_address')!r} is not a PCI address "
                          "(domain:bus:device.function, for example 0000:18:00.0)")
            continue
        count = item.get("num_vfs")
        if isinstance(count, str) and count.strip().isdigit():
            count = int(count)
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            errors.append(f"{where}.num_vfs ({pci}): expected an integer >= 0, got {item.get('num_vfs')!r}")
            continue
        if pci in desired and desired[pci] != count:
            errors.append(f"{where} ({pci}): listed twice with different num_vfs ({desired[pci]} and {count})")
            continue
        desired[pci] = count
    return desired, errors


def plan(current, desired):
    """Pure: the writes each PF needs -> ``({pci: {"before", "after", "total", "writes"}}, errors)``.

    ``current`` is ``{pci: {"numvfs", "totalvfs"}}``; ``desired`` is ``{pci: n}``. ``writes`` is
    ``[]`` when the count is right, ``[n]`` from 0, ``[0]`` to remove them all and ``[0, n]`` to
    change a non-zero count (the kernel answers EBUSY otherwise). Any PF asking for more than
    ``sriov_totalvfs`` is an error and no PF gets a plan, so nothing is half-applied.
    """
    plans = {}
    errors = []
    for pci in sorted(desired):
        want = desired[pci]
        state = current[pci]
        if want > state["totalvfs"]:
            errors.append(
                f"{pci}: {want} VFs requested but sriov_totalvfs is {state['totalvfs']}; the firmware limit "
                "must change first (mlxconfig SRIOV_EN=1 and NUM_OF_VFS >= "
                f"{want}, then a reboot: the nic_firmware role's job)")
            continue
        if state["numvfs"] == want:
            writes = []
        elif state["numvfs"] == 0 or want == 0:
            writes = [want]
        else:
            writes = [0, want]
        plans[pci] = {"before": state["numvfs"], "after": want, "total": state["totalvfs"], "writes": writes}
    if errors:
        return {}, errors
    return plans, []


def write_numvfs(sysfs_root, pci_address, value):
    """Write one value to ``sriov_numvfs``; SriovError says what the kernel answered (EBUSY, EINVAL, EACCES...)."""
    path = os.path.join(pf_dir(sysfs_root, pci_address), "sriov_numvfs")
    try:
        # No O_CREAT: sysfs attributes exist or the write is wrong (O_TRUNC is what a shell redirect does).
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
        try:
            os.write(fd, f"{value}\n".encode("ascii"))
        finally:
            os.close(fd)
    except OSError as exc:
        name = errno.errorcode.get(exc.errno, str(exc.errno))
        hint = {
            errno.EBUSY: "VFs exist or are in use (write 0 first; a VF bound to a running pod or VM keeps it busy)",
            errno.EINVAL: "the kernel rejected the value (above sriov_totalvfs, or SR-IOV disabled in firmware)",
            errno.EACCES: "permission denied (run as root)",
            errno.EPERM: "operation not permitted (run as root; a locked-down kernel refuses it)",
            errno.ENOENT: "sriov_numvfs is absent (no SR-IOV capability or driver not bound)",
        }.get(exc.errno, exc.strerror)
        raise SriovError(f"{pci_address}: writing {value} to {path} failed with {name}: {hint}") from None
