#!/usr/bin/python
# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

DOCUMENTATION = r"""
module: node_validation
short_description: Check that a GPU node reads back as discovered and declared
version_added: 0.1.0
description:
  - Reads the node's live state in one call and compares it with the discovery result and the declared settings.
  - >-
    GPUs from C(nvidia-smi -q): the same PCI addresses as discovered, product matching the discovered model, driver
    version, persistence mode C(Enabled), and on NVSwitch systems Fabric State C(Completed) and a fabric manager
    package versioned as the driver (the public output from https://github.com/leptonai/gpud;
    docs/hardware-facts.md GPU side).
  - C(nvidia_peermem) loaded (C(<sysfs_root>/module/nvidia_peermem) exists).
  - >-
    Per compute rail from sysfs: link C(ACTIVE) at the expected speed and link layer
    (the public output from https://github.com/leptonai/gpud), GPU-NIC affinity re-derived as discovery does it,
    VF count; from the vendor tools: NV config current values (C(mlxconfig -e q)), ROCE_ACCL fields (C(mlxreg)),
    trust and PFC (C(mlnx_qos -i)); ECN, CNP DSCP, traffic class and MTU from sysfs
    (the public output from https://github.com/spidernet-io/spiderpool).
  - Read-only. Checks whose expectation is not given are not run. The module never fails on a failed check; it
    returns C(passed) and the reasons, and the validation role decides.
author: mlplatform.gpunode developers (@mlplatform)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - mlplatform.gpunode.sysfs
  - mlplatform.gpunode.sysfs.read_workers
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  hw:
    description: The C(gpunode_hw) fact published by the discovery role.
    type: dict
    required: true
  known:
    description:
      - Vendor reads this run already made (the host read), as P(mlplatform.gpunode.validation_known#filter) takes
        them from the C(gpunode_host_state) fact, keyed C(nv_config) and C(roce_accl) by PCI address and C(qos) by
        netdev. A rail found there is judged on it and not read again; every other rail is read.
      - The GPUs, the driver, the links, the affinity and the VF counts are always read.
    type: dict
    default: {}
  timeout:
    description:
      - Seconds each tool call (C(nvidia-smi), C(mlxconfig), C(mlxreg), C(mlnx_qos), C(dpkg-query)) may take before
        C(timeout(1)) ends it (1 to 3600). A tool that hangs fails the checks that need its answer, each naming the
        tool and the timeout (an C(nvidia-smi) stuck in the driver fails C(gpu_count), C(gpu_product),
        C(driver_version) and C(persistence) with C(nvidia-smi timed out after N s)), and the rest of the host is
        read, so that one hung host does not hold up the play.
    type: int
    default: 60
  result_files:
    description:
      - Also read the host's machine-readable result files in this call, as M(mlplatform.gpunode.result_files) does
        with the same options, and return them in RV(result_files). The validation role uses it so that the
        report does not read the host again (one round trip less a host).
      - Left out, nothing is read.
    type: dict
    suboptions:
      path:
        description: The directory the roles write their results to.
        type: path
        required: true
      patterns:
        description: Shell-style patterns (C(fnmatch)) of the file names to read; subdirectories are not read.
        type: list
        elements: str
        default: ["*.json"]
      max_bytes:
        description: The largest file read, in bytes; a larger file fails the task, naming it.
        type: int
        default: 4194304
  expect:
    description: What the roles declared. A key left out (or null) is not checked.
    type: dict
    default: {}
    suboptions:
      gpu_product:
        description: Exact C(nvidia-smi) product name; default compares the model tokens discovery found (H100, 80GB).
        type: str
      driver_version:
        description: Exact driver version (C(550.90.07)).
        type: str
      link_speed_gbps:
        description: Expected rail speed in Gb/s; default each rail's discovered speed.
        type: int
      link_layer:
        description: Expected rail link layer.
        type: str
        choices: [Ethernet, InfiniBand]
      nv_config:
        description: NV config parameters every compute rail must have as B(current) value (names or numbers).
        type: dict
      nv_config_settled:
        description:
          - Every NV config parameter of every compute rail must run as set, its current value equal to its next-boot
            value (nic_firmware verified next boot == desired when it applied; a value that did not stick after the
            reboot differs).
        type: bool
      roce_accl:
        description: ROCE_ACCL fields (int) every compute rail must read back.
        type: dict
      num_vfs:
        description: VF count of every compute rail.
        type: int
      qos:
        description:
          - RoCE QoS of every Ethernet compute rail.
          - Keys trust, pfc (8 ints) or pfc_priorities (priorities with PFC on), ecn_np, ecn_rp (lists of
            priorities), cnp_dscp, roce_tos (traffic class), mtu.
        type: dict
seealso:
  - module: mlplatform.gpunode.nic_info
  - module: mlplatform.gpunode.ib_write_bw
"""

EXAMPLES = r"""
- name: Check the node
  mlplatform.gpunode.node_validation:
    sysfs_root: "{{ gpunode_sysfs_root | default('/sys') }}"
    hw: "{{ gpunode_hw }}"
    expect:
      driver_version: "550.90.07"
      link_layer: Ethernet
      nv_config: {SRIOV_EN: true, NUM_OF_VFS: 8, LINK_TYPE_P1: ETH}
      roce_accl: {adaptive_routing_forced_en: 1}
      num_vfs: 8
      qos: {trust: dscp, pfc: [0, 0, 0, 1, 0, 0, 0, 0], mtu: 9000}
  register: node_check
"""

RETURN = r"""
passed:
  description: True when no check failed.
  returned: always
  type: bool
failures:
  description: The reason of every failed check, naming rail, PCI address and netdev where it applies.
  returned: always
  type: list
  elements: str
  sample: ["rail 3 0000:5e:00.0 (ibp94s0): link DOWN, expected ACTIVE"]
checks:
  description: Every check run.
  returned: always
  type: list
  elements: dict
  contains:
    check:
      description: >-
        One of gpu_count, gpu_product, driver_version, fabric_manager, fabric_state, nvidia_peermem, persistence,
        link, affinity, nv_config, roce_accl, vfs, qos.
      type: str
    scope:
      description: V(host) or V(rail).
      type: str
    rail:
      description: Rail index, null for host checks.
      type: int
    device:
      description: PCI address of the rail NIC, null for host checks.
      type: str
    netdev:
      description: Netdev of the rail NIC, or null.
      type: str
    status:
      description: V(pass) or V(fail).
      type: str
    expected:
      description: What was expected (shape depends on the check).
      type: raw
    found:
      description: What was read back.
      type: raw
    reason:
      description: Empty on pass; on fail one sentence naming device and values.
      type: str
observed:
  description: The raw read-back (nvidia-smi, per-NIC link and VF state, NV config, ROCE_ACCL, QoS) for debugging;
    C(names) lists the rails whose netdev or RDMA device is not the one discovery recorded (resolved from the PCI
    address at each read, so a netdev renamed since discovery is read under its new name).
  returned: always
  type: dict
result_files:
  description:
    - With O(result_files), file name -> C({content (UTF-8 text), sha256 (hex), size (bytes)}), in name order, as
      M(mlplatform.gpunode.result_files) returns them (RV(mlplatform.gpunode.result_files#module:files)); empty when
      the directory is missing.
  returned: when O(result_files) is set
  type: dict
  sample: {"discovery.json": {"content": "{\"rails\": []}\n", "sha256": "9f2a...", "size": 15}}
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.mlplatform.gpunode.plugins.module_utils import (
    mlxconfig,
    mlxreg,
    node_reads,
    nvidia_smi,
    rdma_tools,
)
from ansible_collections.mlplatform.gpunode.plugins.module_utils.host_errors import name_the_host
from ansible_collections.mlplatform.gpunode.plugins.module_utils.nic_roles import classify
from ansible_collections.mlplatform.gpunode.plugins.module_utils.node_health_read import current_rails
from ansible_collections.mlplatform.gpunode.plugins.module_utils.nvconfig import query_argv
from ansible_collections.mlplatform.gpunode.plugins.module_utils.parsing import ParseError
from ansible_collections.mlplatform.gpunode.plugins.module_utils.pci_sysfs import SysfsError, read_sysfs
from ansible_collections.mlplatform.gpunode.plugins.module_utils.result_files import (
    DEFAULT_MAX_BYTES,
    DEFAULT_PATTERNS,
    ResultFilesError,
    read_result_files,
)
from ansible_collections.mlplatform.gpunode.plugins.module_utils.validation import (
    EXPECT_SPEC,
    check_node,
    normalize_expect,
    verdict,
)

_run = node_reads.run


def _nvidia_smi(module):
    binary = module.get_bin_path("nvidia-smi")
    if not binary:
        return {"error": "not installed (no nvidia-smi on PATH)"}
    rc, out, err = _run(module, [binary, "-q"])
    if rc != 0:
        return {"error": f"exit status {rc}: {(err or out).strip()}"}
    try:
        parsed = nvidia_smi.parse_query(out)
    except ParseError as exc:
        return {"error": str(exc)}
    for gpu in parsed["gpus"]:
        gpu.pop("fields", None)
    return parsed


def _fabric_manager_version(module):
    binary = module.get_bin_path("dpkg-query")
    if not binary:
        return None
    rc, out, _err = _run(module, [binary, "-W", "-f", "${Package}\t${Version}\t${db:Status-Abbrev}\n",
                                  "nvidia-fabricmanager*"])
    if rc != 0:
        return None
    for line in out.splitlines():
        parts = line.split("\t")
        # db:Status-Abbrev is <wanted><status><error>: "ii " installed, "hi " installed and held
        # (the gpu_driver role holds the fabric manager). The status letter must be "i".
        if len(parts) == 3 and parts[2][1:2] == "i" and parts[1]:
            return parts[1]
    return None


def _prefetch(module, rails, expect, workers):
    """Start the per-rail vendor reads observe() makes side by side (node_reads.prefetch)."""
    argvs = []
    smi, mlxreg_bin, qos_bin = (module.get_bin_path(tool) for tool in ("nvidia-smi", "mlxreg", "mlnx_qos"))
    mlxconfig_bin = _mlxconfig_bin(module)
    if smi:
        argvs.append([smi, "-q"])
    if mlxconfig_bin and (expect.get("nv_config") or expect.get("nv_config_settled")):
        argvs += [query_argv(mlxconfig_bin, rail["pci_address"]) for rail in rails["nv_config"]]
    if mlxreg_bin and expect.get("roce_accl"):
        argvs += [mlxreg.get_argv(mlxreg_bin, rail["pci_address"]) for rail in rails["roce_accl"]]
    if qos_bin and expect.get("qos"):
        argvs += [rdma_tools.mlnx_qos_read_argv(qos_bin, rail["netdev"]) for rail in rails["qos"]]
    node_reads.prefetch(module, argvs, workers)


def _mlxconfig_bin(module):
    """``mlxconfig`` (MFT/DOCA), else mstflint's ``mstconfig`` (the same query), as the host read finds it."""
    return module.get_bin_path("mlxconfig") or module.get_bin_path("mstconfig")


def _read_nv_config(module, pci_address):
    binary = _mlxconfig_bin(module)
    if not binary:
        return {"error": "mlxconfig not installed"}
    rc, out, err = _run(module, query_argv(binary, pci_address))
    try:
        parsed = mlxconfig.parse_query(out)
    except ParseError as exc:
        parsed = {"devices": [], "errors": [f"exit status {rc}: {(err or str(exc)).strip()}"]}
    if parsed["errors"] or not parsed["devices"]:
        return {"error": "; ".join(parsed["errors"]) or "no device"}
    return {"params": {k: {c: (v.get(c) or {}).get("raw") for c in ("current", "next_boot")}
                       for k, v in parsed["devices"][0]["params"].items()}}


def observe(module, root, hw, expect, workers=1, known=None):
    """Read everything the checks need, for the rails discovery found. The vendor reads in ``known`` (this
    run's host read, validation.known_from_host_state) are taken from it; the rails it leaves out are read."""
    known = known or {}
    rails = hw.get("rails") or []
    to_read = {
        "nv_config": [r for r in rails if r["pci_address"] not in (known.get("nv_config") or {})],
        "roce_accl": [r for r in rails if r["pci_address"] not in (known.get("roce_accl") or {})],
        "qos": [r for r in rails if r.get("netdev") and r.get("link_layer") != "InfiniBand"
                and r["netdev"] not in (known.get("qos") or {})],
    }
    _prefetch(module, to_read, expect, workers)
    observed = {"nvidia_smi": _nvidia_smi(module), "modules": {
        "nvidia_peermem": os.path.isdir(os.path.join(root, "module", "nvidia_peermem"))}}
    if hw.get("fabric_manager_required"):
        observed["fabric_manager_version"] = _fabric_manager_version(module)
    live = classify(read_sysfs(root), management_interfaces=hw.get("management_interfaces") or [])
    nic_keys = ("link_state", "speed_gbps", "link_layer", "sriov_numvfs", "sriov_totalvfs", "netdev")
    observed["nics"] = {n["pci_address"]: {k: n.get(k) for k in nic_keys} for n in live["nics"]}
    observed["affinity"] = {g["pci_address"]: g.get("rail_nic") for g in live["gpus"]}
    if expect.get("nv_config") or expect.get("nv_config_settled"):
        observed["nv_config"] = dict(known.get("nv_config") or {})
        observed["nv_config"].update({r["pci_address"]: _read_nv_config(module, r["pci_address"])
                                      for r in to_read["nv_config"]})
    if expect.get("roce_accl"):
        observed["roce_accl"] = dict(known.get("roce_accl") or {})
        observed["roce_accl"].update({r["pci_address"]: node_reads.read_roce_accl(module, r["pci_address"])
                                      for r in to_read["roce_accl"]})
    if expect.get("qos"):
        observed["qos"] = dict(known.get("qos") or {})
        observed["qos"].update({r["netdev"]: node_reads.read_qos(module, root, r["netdev"], r.get("rdma_device"))
                                for r in to_read["qos"]})
    return observed


def main():
    module = AnsibleModule(
        argument_spec={
            "sysfs_root": {"type": "path", "default": "/sys"},
            "hw": {"type": "dict", "required": True},
            "expect": {"type": "dict", "default": {}, "options": EXPECT_SPEC},
            "read_workers": {"type": "int", "default": 8},
            "timeout": {"type": "int", "default": 60},
            "known": {"type": "dict", "default": {}},
            "result_files": {"type": "dict", "options": {
                "path": {"type": "path", "required": True},
                "patterns": {"type": "list", "elements": "str", "default": list(DEFAULT_PATTERNS)},
                "max_bytes": {"type": "int", "default": DEFAULT_MAX_BYTES},
            }},
        },
        supports_check_mode=True,
    )
    name_the_host(module, "node_validation")
    node_reads.apply_timeout_option(module, "node_validation")
    hw = module.params["hw"]
    for key in ("gpus", "rails", "nics"):
        if not isinstance(hw.get(key), list):
            module.fail_json(msg=f"node_validation: hw.{key} is missing: pass the discovery role's gpunode_hw fact")
    try:
        expect = normalize_expect(module.params["expect"])
    except ValueError as exc:
        module.fail_json(msg=f"node_validation: {exc}")
    try:
        # Each rail's netdev and RDMA device as its PCI function has them now (a netdev renamed since discovery is
        # read under its new name), recorded in observed.names when they changed.
        rails, renamed = current_rails(module.params["sysfs_root"], hw["rails"])
        hw = {**hw, "rails": rails}
        observed = observe(module, module.params["sysfs_root"], hw, expect, module.params["read_workers"],
                           module.params["known"])
        if renamed:
            observed["names"] = renamed
    except SysfsError as exc:
        module.fail_json(msg=f"node_validation: {exc}", sysfs_root=module.params["sysfs_root"])
    checks = check_node(hw, observed, expect)
    passed, failures = verdict(checks, [])
    extra = {}
    wanted = module.params["result_files"]
    if wanted:
        try:
            extra["result_files"] = read_result_files(wanted["path"], wanted["patterns"], wanted["max_bytes"])
        except ResultFilesError as exc:
            module.fail_json(msg=f"node_validation: result_files: {exc}")
    module.exit_json(changed=False, passed=passed, failures=failures, checks=checks, observed=observed, **extra)


if __name__ == "__main__":
    main()
