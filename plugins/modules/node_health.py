#!/usr/bin/python
# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

DOCUMENTATION = r"""
module: node_health
short_description: Day-two health of a GPU node as Node conditions
version_added: 0.2.0
description:
  - >-
    Reads a node once and returns a list of problems shaped like Kubernetes Node conditions (C(type),
    C(status), C(reason), C(message)), each naming the device (PCI address, RDMA port or process). A healthy node
    returns no condition. Read-only: nothing on the node changes, and the module never fails on a problem it finds.
  - >-
    B(GPUs) against discovery (O(hw), the discovery role's C(gpunode_hw) fact): every discovered GPU is in
    C(nvidia-smi -q); per GPU from C(nvidia-smi -q) pending retired pages (C(Retired Pages), pre-Ampere) and pending
    row remaps or a remapping failure (C(Remapped Rows), Ampere and Hopper), volatile uncorrectable ECC
    (C(ECC Errors/Volatile)), persistence mode C(Enabled) and, on NVSwitch systems, Fabric State C(Completed)
    and Status C(Success). Format of a real 8x H100 HGX, driver 535.161.08, from https://github.com/leptonai/gpud
    (pkg/nvidia-query/testdata).
  - >-
    B(Xid events) in the kernel log since boot (C(dmesg --time-format=iso)), grouped per GPU and Xid number
    (O(xids)): 79 fallen off the bus, 48 double bit ECC, 63 row remap pending, 64 row remap failure, 74 NVLink,
    95 uncontained ECC (https://docs.nvidia.com/deploy/xid-errors/). Line formats from https://github.com/leptonai/gpud
    (pkg/dmesg/testdata, components/accelerator/nvidia/sxid/README.md). The ring buffer is read, so a very
    chatty kernel may have overwritten the oldest lines.
  - >-
    B(PCIe) for each GPU and each rail NIC: C(current_link_speed) and C(current_link_width) against
    C(max_link_speed) and C(max_link_width) in sysfs (Linux Documentation/ABI/testing/sysfs-bus-pci).
  - >-
    B(Rails) (discovery's rails): RDMA port C(state) C(ACTIVE) and C(rate) at the discovered speed
    (C(class/infiniband/<dev>/ports/1)), and drift from the declared values (O(expect)): VF count
    (C(sriov_numvfs)), ROCE_ACCL fields (C(mlxreg), adaptive routing), trust/PFC (C(mlnx_qos -i)), ECN, CNP DSCP,
    RoCE ToS and MTU (sysfs).
  - >-
    B(Processes) in uninterruptible sleep (state C(D)) for at least O(d_state_min_age) seconds, from
    C(<proc_root>/<pid>/stat) and C(<proc_root>/uptime) (proc(5)).
author: mlplatform.gpunode developers (@mlplatform)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - mlplatform.gpunode.sysfs
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  hw:
    description: The C(gpunode_hw) fact published by the discovery role (C(gpus), C(rails), C(fabric_manager_required)).
    type: dict
    required: true
  proc_root:
    description:
      - Root of the proc filesystem to read processes from. V(/proc) on a real host; a simulated host's process
        table elsewhere (the simulator writes one under its state directory, C(run/proc)).
    type: path
    default: /proc
  expect:
    description: The declared settings. A key left out (or null) is not checked.
    type: dict
    default: {}
    suboptions:
      link_speed_gbps:
        description: Rail port rate in Gb/s; default each rail's discovered speed.
        type: int
      num_vfs:
        description: VF count of every rail (the fabric's C(gpunode_fabric_settings.nics.compute.num_vfs)).
        type: int
      roce_accl:
        description: ROCE_ACCL fields (int) every rail must read back, for example C(adaptive_routing_forced_en).
        type: dict
      qos:
        description:
          - RoCE QoS of every Ethernet rail. Keys C(trust), C(pfc) (8 ints) or C(pfc_priorities), C(ecn_np),
            C(ecn_rp) (lists of priorities), C(cnp_dscp), C(roce_tos), C(mtu).
        type: dict
  xids:
    description:
      - The Xid numbers that make a condition. Each GPU and Xid gives one condition with the count and the
        first and last time since boot. Numbers without a type of their own give C(GPUXidError).
    type: list
    elements: int
    default: [48, 63, 64, 74, 79, 95]
  d_state_min_age:
    description: Seconds a process must have existed in D state before it is a condition.
    type: int
    default: 300
  pcie_gpu_speed:
    description:
      - Compare GPU link speed with its maximum too. Set V(false) for GPUs that lower their PCIe speed when
        idle (PCIe cards); the width is always compared.
    type: bool
    default: true
  xid_handled_before:
    description:
      - The time of the last handling recorded for the host (a GPU reset, a remediation that returned it), as
        seconds since the epoch or an ISO 8601 time with its offset. Xid events logged at or before it are not
        conditions; they are listed in RV(observed) C(kernel_log.handled).
      - Whatever this option, an Xid whose fault the GPU's current state no longer shows is handled too - Xid 48 when
        the GPU's volatile uncorrectable ECC count reads 0 (reset since), Xid 63 when no row remap is pending.
    type: raw
  timeout:
    description:
      - Seconds each tool call (C(nvidia-smi), C(dmesg), C(mlxreg), C(mlnx_qos)) may take before C(timeout(1)) ends
        it (1 to 3600). A tool that hangs gives a condition naming it (for C(nvidia-smi), C(GPUDriverUnavailable)
        with reason C(NvidiaSmiTimedOut)), and the rest of the host is read.
    type: int
    default: 60
notes:
  - >-
    Errors: a missing or failing C(nvidia-smi) gives the condition C(GPUDriverUnavailable), one that hangs the same
    with status C(Unknown); an unreadable kernel log or register gives a condition with status C(Unknown).
  - >-
    One bad read does not stop the others. A GPU field that reads C(ERR!), C([Unknown Error]) or any value of no
    known form gives C(GPUFieldUnreadable) naming the GPU and the field, and its other fields are judged; a GPU
    nvidia-smi cannot reach (C(Unable to determine the device handle for GPU ...)) gives C(GPUUnreachable) naming
    it. An C(nvidia-smi -q) output cut short (fewer GPU sections than C(Attached GPUs), a last section that ends
    early) or of a format it does not know gives C(GPUQueryIncomplete) with status C(Unknown), and no GPU is then
    judged missing. An C(NVRM: Xid) line of an unknown shape is reported as a warning and the rest of the log is
    read; an unreadable sysfs link file or proc file gives a condition with status C(Unknown) for that device or
    process.
  - >-
    The module fails only on bad input (O(hw) without C(gpus)/C(rails), a bad O(expect) or O(timeout)), or an
    unreadable O(sysfs_root) or O(proc_root), naming the option. O(expect) is checked whole before anything is read,
    every problem named (C(expect.roce_accl) a field the ROCE_ACCL register does not have or a value out of its
    range, C(expect.num_vfs) below 0, C(expect.qos.pfc) not 8 entries of 0 or 1, an ECN priority outside 0..7, a
    DSCP, ToS or MTU out of range), so an impossible declaration is refused instead of every rail reported drifted.
seealso:
  - module: mlplatform.gpunode.node_validation
  - module: mlplatform.gpunode.nic_info
"""

EXAMPLES = r"""
- name: Check the node against discovery and the declared settings
  mlplatform.gpunode.node_health:
    sysfs_root: "{{ gpunode_sysfs_root | default('/sys') }}"
    hw: "{{ gpunode_hw }}"
    # the rail-drift part of the host's fabric intent (mlplatform.gpunode.fabric_intent, registered gpunode_intent)
    expect: "{{ (gpunode_intent | mlplatform.gpunode.host_intent(inventory_hostname))['health_expect'] }}"
  register: health

- name: Or with the values written out
  mlplatform.gpunode.node_health:
    hw: "{{ gpunode_hw }}"
    expect:
      num_vfs: 8
      roce_accl: {adaptive_routing_forced_en: 1}
      qos: {trust: dscp, pfc: [0, 0, 0, 1, 0, 0, 0, 0], ecn_np: [3], ecn_rp: [3], cnp_dscp: 48, mtu: 9000}

- name: Show what needs hardware service
  ansible.builtin.debug:
    msg: "{{ health.conditions | selectattr('remedy', 'eq', 'hardware') | map(attribute='message') | list }}"
"""

RETURN = r"""
healthy:
  description: True when there is no condition.
  returned: always
  type: bool
conditions:
  description: >-
    Every problem found, GPU checks first, then Xid, PCIe, rails in rail order, processes. Empty when healthy.
  returned: always
  type: list
  elements: dict
  contains:
    type:
      description: >-
        One of GPUMissing, GPUDriverUnavailable, GPUQueryIncomplete, GPUUnreachable, GPUFieldUnreadable,
        KernelLogUnavailable, GPUFallenOffBus (Xid 79), GPUDoubleBitECCError
        (48), GPURowRemapEvent (63), GPURowRemapFailure (64 or Remapping Failure Occurred), GPUNVLinkError (74),
        GPUUncontainedECCError (95), GPUXidError (other O(xids)), GPURetiredPagesPending, GPUUncorrectableECC,
        GPUFabricNotReady, GPUPersistenceModeOff, PCIeLinkDegraded, PCIeDeviceMissing, RailLinkDown,
        RailSpeedDegraded, RailVFCountDrift, RailRoceAcclDrift, RailQoSDrift, DStateProcess.
      type: str
      sample: GPUFallenOffBus
    status:
      description: V(True) for a problem, V(Unknown) when the check could not run.
      type: str
    reason:
      description: >-
        CamelCase cause, for example Xid79, PendingPageRetirement, RowRemapPending, VolatileUncorrectableECC,
        PCIeWidthDowngraded, PCIeSpeedDowngraded, NvidiaSmiTimedOut, OutputTruncated, OutputUnparseable,
        DeviceHandleUnavailable, UnreadableValue, PortNotActive, RateBelowDiscovered, VFCountChanged,
        AdaptiveRoutingChanged, TrustChanged, PFCChanged, ECNChanged, QoSChanged, ProcessStuckInDState.
      type: str
    message:
      description: One sentence naming the device and the values read and expected (units Gb/s, GT/s, lanes, s).
      type: str
      sample: "rail 3 NIC 0000:5e:00.0 (ens4np0): PCIe link x8 of x16"
    device:
      description: PCI address of the GPU or rail NIC, C(pid <n>) for a process, or the tool that failed.
      type: str
    check:
      description: >-
        The check that found it (gpu_count, gpu, gpu_query, xid, retired_pages, ecc, persistence, fabric, pcie, rail,
        vfs, roce_accl, qos, processes).
      type: str
    last_seen:
      description: For an Xid condition, the time of its last event in seconds since the epoch (null when unknown).
      type: float
    remedy:
      description: >-
        V(hardware) (needs hardware service; a pipeline re-run cannot fix it), V(reset) (a GPU reset or reboot),
        V(reconfigure) (drift the pipeline re-applies) or V(investigate).
      type: str
observed:
  description: >-
    What was read, for debugging: C(nvidia_smi) (per GPU PCI address the health fields), C(kernel_log) (C(xids):
    every Xid event with xid, pci_address, time, pid, process, text), C(pcie) (per device current/max speed in GT/s
    and width in lanes), C(rails) (per rail port state, rate in Gb/s, VF count), C(roce_accl), C(qos), C(processes)
    (C(d_state): pid, cmd, age_s), and C(names) (per rail PCI address whose netdev or RDMA device is not the one
    discovery recorded: its C(netdev) and C(rdma_device) now, null when the function has none, and the
    C(discovered_netdev) and C(discovered_rdma_device)). Each rail's names are resolved from its PCI address at
    every read.
  returned: always
  type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.mlplatform.gpunode.plugins.module_utils import mlxreg, node_health, node_reads, roce_qos
from ansible_collections.mlplatform.gpunode.plugins.module_utils.host_errors import name_the_host
from ansible_collections.mlplatform.gpunode.plugins.module_utils.node_health_read import HealthReadError, observe

MAX_VFS = 65535  # TotalVFs is a 16-bit field of the SR-IOV capability
MAX_GBPS = 3200


def check_expect(raw):
    """``(expect, problems)``: the declared values checked before anything is read, each problem naming
    ``expect.<key>``; values normalized as node_health compares them (PFC a list of 8 ints, ECN priorities sorted)."""
    expect = {k: v for k, v in raw.items() if v not in (None, {}, "")}
    problems = []
    vfs = expect.get("num_vfs")
    if vfs is not None and not 0 <= vfs <= MAX_VFS:
        problems.append(f"expect.num_vfs: {vfs} is not a VF count 0..{MAX_VFS}")
    speed = expect.get("link_speed_gbps")
    if speed is not None and not 0 < speed <= MAX_GBPS:
        problems.append(f"expect.link_speed_gbps: {speed} is not a port rate 1..{MAX_GBPS} Gb/s")
    accl = expect.get("roce_accl") or {}
    for name, value in sorted(accl.items(), key=lambda kv: str(kv[0])):
        if name not in mlxreg.ROCE_ACCL_FIELDS:
            problems.append(f"expect.roce_accl: the ROCE_ACCL register has no field {name!r} (fields: "
                            f"{', '.join(mlxreg.ROCE_ACCL_FIELDS)})")
            continue
        low, high = mlxreg.field_range(name)
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            problems.append(f"expect.roce_accl.{name}: {value!r} is not an integer {low}..{high}")
    qos = dict(expect.get("qos") or {})
    unknown = sorted(str(k) for k in set(qos) - set(node_health.QOS_KEYS))
    if unknown:
        problems.append(f"expect.qos has unknown keys {', '.join(unknown)} (known: {', '.join(node_health.QOS_KEYS)})")
    for key in roce_qos.FIELDS:
        if qos.get(key) is None:
            continue
        problem = roce_qos.field_problem(key, qos[key])
        if problem:
            problems.append(f"expect.qos.{key}: {problem}")
        elif key == "pfc":
            qos[key] = [int(v) for v in qos[key]]
        elif key in roce_qos.ECN_POINTS:
            qos[key] = sorted({int(v) for v in qos[key]})
        elif key != "trust":
            qos[key] = int(qos[key])
    if qos.get("pfc_priorities") is not None:
        prios = qos["pfc_priorities"]
        if not isinstance(prios, list) or not all(isinstance(p, int) and not isinstance(p, bool) and 0 <= p <= 7
                                                  for p in prios):
            problems.append(f"expect.qos.pfc_priorities: {prios!r} is not a list of priorities 0..7")
        else:
            qos["pfc_priorities"] = sorted(set(prios))
    if qos:
        expect["qos"] = qos
    return expect, problems


def main():
    expect_spec = {
        "link_speed_gbps": {"type": "int"},
        "num_vfs": {"type": "int"},
        "roce_accl": {"type": "dict"},
        "qos": {"type": "dict"},
    }
    module = AnsibleModule(
        argument_spec={
            "sysfs_root": {"type": "path", "default": "/sys"},
            "proc_root": {"type": "path", "default": "/proc"},
            "hw": {"type": "dict", "required": True},
            "expect": {"type": "dict", "default": {}, "options": expect_spec},
            "xids": {"type": "list", "elements": "int", "default": list(node_health.DEFAULT_XIDS)},
            "d_state_min_age": {"type": "int", "default": 300},
            "pcie_gpu_speed": {"type": "bool", "default": True},
            "timeout": {"type": "int", "default": 60},
            "xid_handled_before": {"type": "raw"},
        },
        supports_check_mode=True,
    )
    name_the_host(module, "node_health")
    params = module.params
    hw = params["hw"]
    for key in ("gpus", "rails"):
        if not isinstance(hw.get(key), list):
            module.fail_json(msg=f"node_health: hw.{key} is missing: pass the discovery role's gpunode_hw fact")
    expect, problems = check_expect(params["expect"] or {})
    if problems:
        module.fail_json(msg="node_health: expect is refused, nothing was read: " + "; ".join(problems),
                         errors=problems)
    if params["d_state_min_age"] < 0:
        module.fail_json(msg="node_health: d_state_min_age must be 0 or more seconds")
    node_reads.apply_timeout_option(module, "node_health")
    handled_before = None
    if params["xid_handled_before"] is not None:
        raw = params["xid_handled_before"]
        handled_before = node_health.parse_time(raw)
        if handled_before is None:
            module.fail_json(msg=f"node_health: xid_handled_before {raw!r} is not a time (seconds since the epoch, "
                                 "or an ISO 8601 time with its offset such as 2026-12-01T08:00:00+00:00)")
    for path, what in ((params["sysfs_root"], "sysfs_root"), (params["proc_root"], "proc_root")):
        if not os.path.isdir(path):
            module.fail_json(msg=f"node_health: {what} {path} is not a directory")
    try:
        observed = observe(module, params["sysfs_root"], params["proc_root"], hw, expect)
    except HealthReadError as exc:
        module.fail_json(msg=f"node_health: {exc}")
    conditions = node_health.evaluate(hw, observed, {
        **expect, "xids": params["xids"], "d_state_min_age_s": params["d_state_min_age"],
        "xid_handled_before": handled_before,
        "pcie_gpu_speed": params["pcie_gpu_speed"]})
    module.exit_json(changed=False, healthy=not conditions, conditions=conditions, observed=observed)


if __name__ == "__main__":
    main()
