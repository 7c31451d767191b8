#!/usr/bin/python
# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: roce_qos
short_description: Set lossless RoCEv2 QoS (trust, PFC, ECN, CNP DSCP, RoCE ToS, MTU) on every RoCE netdev in one call
version_added: 0.1.0
description:
  - For each netdev in O(interfaces), reads trust and PFC with C(mlnx_qos -i <netdev>), ECN enables, CNP DSCP and MTU
    from C(/sys/class/net/<netdev>), the RoCE ToS from C(/sys/class/infiniband/<rdma_device>/tc/1/traffic_class)
    and C(cma_roce_tos -d <rdma_device>); computes the diff; applies it; reads everything back and fails when a value
    did not stick.
  - "How each value is set (docs/hardware-facts.md Lossless RoCEv2; formats in the public output from
    https://github.com/att/netarbiter and C(roce-qos-sysfs-ecn-cnp-spiderpool.txt)):
    C(mlnx_qos -i <if> --trust dscp), C(mlnx_qos -i <if> --pfc 0,0,0,1,0,0,0,0), a write of 0/1 to
    C(ecn/roce_np/enable/<p>) and C(ecn/roce_rp/enable/<p>), a write to C(ecn/roce_np/cnp_dscp), a write of the ToS
    to C(tc/1/traffic_class) plus C(cma_roce_tos -d <dev> -t <tos>), and a write to C(/sys/class/net/<if>/mtu)
    (the kernel applies it with the same call as C(ip link set dev <if> mtu <n>))."
  - Every entry is validated before anything is read or applied; an error names the host, the entry, the netdev and
    the field (C(interfaces[0] (netdev ens1np0).pfc)).
  - "When C(mlnx_qos) reports C(DCBX mode: Firmware controlled) the switch negotiates PFC with the NIC; the module
    then leaves PFC alone and says so in RV(left_alone) and a warning instead of fighting it."
  - A netdev whose RDMA port has InfiniBand link layer is refused, as there is no PFC, ECN or DSCP there.
  - None of these settings survives a reboot; the C(roce_qos) role installs a boot unit that re-applies them.
author:
  - mlplatform.gpunode developers (@mlplatform)
options:
  interfaces:
    description:
      - One entry per netdev. Any field left out (or null) is left alone.
    type: list
    elements: dict
    required: true
    suboptions:
      netdev:
        description: The PF's network interface (V(ens1np0)).
        type: str
        required: true
      rdma_device:
        description: Its RDMA device (V(mlx5_0)); required with O(interfaces[].roce_tos).
        type: str
      trust:
        description: Priority trust state.
        type: str
        choices: [pcp, dscp]
      pfc:
        description: PFC enable per priority 0..7, exactly 8 entries of 0 or 1 (V([0,0,0,1,0,0,0,0]) = priority 3).
        type: list
        elements: raw
      ecn_np:
        description: Priorities (0..7) on which ECN is enabled for the notification point; all others are disabled.
        type: list
        elements: raw
      ecn_rp:
        description: Priorities (0..7) on which ECN is enabled for the reaction point; all others are disabled.
        type: list
        elements: raw
      cnp_dscp:
        description: DSCP (0..63) of the congestion notification packets (48 by default on ConnectX).
        type: raw
      roce_tos:
        description: RoCE traffic class byte (0..255); V(106) is DSCP 26 with ECN ECT(0).
        type: raw
      mtu:
        description: Netdev MTU (68..9978).
        type: raw
  sysfs_root:
    description:
      - Root of the sysfs tree. V(/sys) on a real host; a simulated host's tree elsewhere (C(gpunode_sysfs_root)).
    type: path
    default: /sys
  lossless:
    description:
      - The profile is lossless RoCE. Then, before anything is read, an entry is refused that enables ECN on a
        priority without PFC, or whose V(dscp) trust puts the DSCP of O(interfaces[].roce_tos) on a priority
        without PFC (default dscp2prio map). A O(interfaces[].cnp_dscp) equal to the data DSCP is always refused.
    type: bool
    default: true
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  platform:
    support: full
    platforms: linux
requirements:
  - C(mlnx_qos) and C(cma_roce_tos) (package C(mlnx-tools) of DOCA-Host); C(tc/1/traffic_class) comes with the
    DOCA-OFED mlx5 driver.
seealso:
  - module: mlplatform.gpunode.nic_info
"""

EXAMPLES = r"""
- name: Lossless RoCE on one rail
  mlplatform.gpunode.roce_qos:
    interfaces:
      - netdev: ens1np0
        rdma_device: mlx5_0
        trust: dscp
        pfc: [0, 0, 0, 1, 0, 0, 0, 0]
        ecn_np: [3]
        ecn_rp: [3]
        cnp_dscp: 48
        roce_tos: 106
        mtu: 9000

- name: Read the current QoS of a netdev without changing it
  mlplatform.gpunode.roce_qos:
    interfaces:
      - netdev: ens1np0
        rdma_device: mlx5_0
  register: __qos
"""

RETURN = r"""
interfaces:
  description:
    - Per netdev, each field that changes (or would change in check mode) with its value before and after.
      C(roce_tos) is the C(tc/1/traffic_class) value and C(cma_roce_tos) the RDMA-CM default ToS, both set from
      O(interfaces[].roce_tos). Fields already right are not listed.
  returned: success
  type: dict
  sample:
    ens1np0:
      trust: {before: pcp, after: dscp}
      pfc: {before: [0, 0, 0, 0, 0, 0, 0, 0], after: [0, 0, 0, 1, 0, 0, 0, 0]}
      ecn_np: {before: [0, 1, 2, 3, 4, 5, 6, 7], after: [3]}
current:
  description:
    - Per netdev every field as read after the call (before it in check mode), for audits; null where the host
      has no such file. C(pfc) is 8 x 0/1, C(ecn_np)/C(ecn_rp) the priorities with ECN enabled, C(mtu) in bytes.
  returned: success
  type: dict
  sample:
    ens1np0: {trust: dscp, pfc: [0, 0, 0, 1, 0, 0, 0, 0], ecn_np: [3], ecn_rp: [3], cnp_dscp: 48, roce_tos: 106,
              cma_roce_tos: 106, mtu: 9000, dcbx_mode: OS controlled}
dcbx_mode:
  description: Per netdev the C(DCBX mode) line of C(mlnx_qos) (V(OS controlled) or V(Firmware controlled)).
  returned: success
  type: dict
  sample: {ens1np0: OS controlled}
left_alone:
  description:
    - Per netdev the fields left alone on purpose, with the reason (PFC under firmware DCBX). Not named
      C(skipped), which Ansible would take for a skipped task.
  returned: success
  type: dict
  sample: {ens1np0: {pfc: "DCBX is firmware controlled: the switch negotiates PFC ..."}}
applied:
  description:
    - On a failure midway, per netdev the commands run and the sysfs writes (C(path=value)) done before it.
      Every netdev's files are checked before the first write, so this is empty unless a tool or write failed.
  returned: failure
  type: dict
  sample: {ens1np0: ["mlnx_qos -i ens1np0 --trust dscp", "/sys/class/net/ens1np0/mtu=9000"]}
msg:
  description: On failure, what failed naming the host, netdev and field, or the command and its output.
  returned: failure
  type: str
  sample: "roce_qos on gpu01: interfaces[0] (netdev ens1np0).pfc: expected a list of 8 entries ..., got 7 entries"
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.mlplatform.gpunode.plugins.module_utils import roce_qos
from ansible_collections.mlplatform.gpunode.plugins.module_utils.host_errors import name_the_host
from ansible_collections.mlplatform.gpunode.plugins.module_utils.parsing import ParseError


def _write(path, text):
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)  # no O_CREAT: sysfs attributes exist or the write is wrong
    try:
        os.write(fd, f"{text}\n".encode("ascii"))
    finally:
        os.close(fd)


class Runner:
    """Reads and writes one host's QoS state; fails the module with the command's output."""

    def __init__(self, module, root, host):
        self.module = module
        self.root = root
        self.host = host
        self.bins = {}

    def fail(self, msg, **extra):
        self.module.fail_json(msg=f"roce_qos on {self.host}: {msg}", **extra)

    def try_run(self, argv):
        tool = argv[0]
        if tool not in self.bins:
            self.bins[tool] = self.module.get_bin_path(tool, required=True)
        return self.module.run_command([self.bins[tool], *argv[1:]], environ_update={"LC_ALL": "C"})

    def run(self, argv):
        rc, out, err = self.try_run(argv)
        if rc != 0:
            self.fail(f"{' '.join(argv)} failed (rc {rc}): {err.strip() or out.strip()}", rc=rc, stdout=out, stderr=err)
        return out

    def read(self, entry):
        try:
            return roce_qos.read_state(self.run, self.root, entry["netdev"], entry.get("rdma_device"))
        except ParseError as exc:
            self.fail(f"netdev {entry['netdev']}: {exc}")
        return None, None


def _precheck(root, entry):
    """What makes an entry impossible on this host (absent netdev or RDMA device, InfiniBand port), or None."""
    netdev, dev = entry["netdev"], entry.get("rdma_device")
    net_dir = os.path.join(root, "class", "net")
    ib_dir = os.path.join(root, "class", "infiniband")
    if not os.path.isdir(os.path.join(net_dir, netdev)):
        return f"netdev {netdev}: no such interface under {net_dir}"
    if not dev:
        return None
    if not os.path.isdir(os.path.join(ib_dir, dev)):
        return f"netdev {netdev}: RDMA device {dev} not found under {ib_dir}"
    if (roce_qos.read_text(os.path.join(ib_dir, dev, "ports", "1", "link_layer")) or "").strip() == "InfiniBand":
        return (f"netdev {netdev} ({dev}): InfiniBand link layer has no PFC, ECN or DSCP trust; "
                "RoCE QoS applies to Ethernet ports only")
    return None


def main():
    module = AnsibleModule(
        argument_spec={
            "interfaces": {"type": "list", "elements": "dict", "required": True, "options": {
                "netdev": {"type": "str", "required": True},
                "rdma_device": {"type": "str"},
                "trust": {"type": "str", "choices": list(roce_qos.TRUST_MODES)},
                "pfc": {"type": "list", "elements": "raw"},
                "ecn_np": {"type": "list", "elements": "raw"},
                "ecn_rp": {"type": "list", "elements": "raw"},
                "cnp_dscp": {"type": "raw"},
                "roce_tos": {"type": "raw"},
                "mtu": {"type": "raw"},
            }},
            "sysfs_root": {"type": "path", "default": "/sys"},
            "lossless": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    host = name_the_host(module, "roce_qos")
    root = module.params["sysfs_root"]
    runner = Runner(module, root, host)
    if not os.path.isdir(root):
        module.fail_json(msg=f"roce_qos on {host}: sysfs_root {root} does not exist (not a directory)",
                         errors=[f"sysfs_root {root} does not exist"])
    wanted, errors = roce_qos.validate(module.params["interfaces"])
    for entry in wanted:
        errors.extend(roce_qos.contradictions(entry, module.params["lossless"]))
    errors.extend(problem for problem in (_precheck(root, entry) for entry in wanted) if problem)
    if errors:
        module.fail_json(msg=f"roce_qos on {host}: " + "; ".join(errors), errors=errors)

    plans = {}
    for entry in wanted:
        state, files = runner.read(entry)
        changes, skipped = roce_qos.diff(state, entry)
        plans[entry["netdev"]] = {"entry": entry, "state": state, "files": files, "changes": changes,
                                  "skipped": skipped}
        for field, reason in skipped.items():
            module.warn(f"roce_qos: netdev {entry['netdev']}: {field} left alone: {reason}")

    result = {
        "interfaces": {n: p["changes"] for n, p in plans.items()},
        "current": {n: p["state"] for n, p in plans.items()},
        "dcbx_mode": {n: p["state"]["dcbx_mode"] for n, p in plans.items()},
        "left_alone": {n: p["skipped"] for n, p in plans.items() if p["skipped"]},
    }
    changed = any(p["changes"] for p in plans.values())
    diff = {"before": {n: {f: c["before"] for f, c in p["changes"].items()} for n, p in plans.items()},
            "after": {n: {f: c["after"] for f, c in p["changes"].items()} for n, p in plans.items()}}
    steps = {n: roce_qos.actions(n, p["entry"].get("rdma_device"), p["changes"], p["files"]) for n, p in plans.items()}
    # Every netdev's files are checked before any netdev is written: nothing half-applied.
    missing = [e for n, netdev_steps in steps.items() for e in roce_qos.missing_files(n, netdev_steps)]
    if missing and not module.check_mode:
        runner.fail("; ".join(missing) + "; nothing was written", errors=missing, **result)
    for problem in missing:
        module.warn(f"roce_qos: {problem}: the real run would fail")
    if not changed or module.check_mode:
        module.exit_json(changed=changed, diff=diff, **result)

    applied = {}

    def fail_midway(msg):
        # What was written where, so the operator knows the state the failure left.
        runner.fail(f"{msg}; already applied: {applied or 'nothing'}", applied=applied, **result)

    for netdev, netdev_steps in steps.items():
        for step in netdev_steps:
            if step[0] == "run":
                rc, out, err = runner.try_run(step[1])
                if rc != 0:
                    fail_midway(f"{' '.join(step[1])} failed (rc {rc}): {err.strip() or out.strip()}")
                applied.setdefault(netdev, []).append(" ".join(step[1]))
            else:
                try:
                    _write(step[1], step[2])
                except FileNotFoundError:
                    fail_midway(f"netdev {netdev}: {step[1]} is absent ({roce_qos.absent_cause(step[1])})")
                except OSError as exc:
                    fail_midway(f"netdev {netdev}: writing {step[2]} to {step[1]} failed: {exc.strerror}")
                applied.setdefault(netdev, []).append(f"{step[1]}={step[2]}")
    problems = []
    for netdev, p in plans.items():
        after, _files = runner.read(p["entry"])
        result["current"][netdev] = after
        problems.extend(f"netdev {netdev}: {m}" for m in roce_qos.mismatches(after, p["changes"]))
    if problems:
        runner.fail("did not stick: " + "; ".join(problems), **result)
    module.exit_json(changed=True, diff=diff, **result)


if __name__ == "__main__":
    main()
