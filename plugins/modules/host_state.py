#!/usr/bin/python
# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: host_state
short_description: Read everything the pipeline compares against, in one module run on the host
version_added: "0.2.0"
description:
  - One read of a GPU node per run (design "read once, plan, change only what differs"). The later roles plan
    against what this returns and touch the host only where their plan is non-empty.
  - "Returns, in one result: the hardware from sysfs (the same discovery as M(mlplatform.gpunode.nic_info), from
    the same module_utils), installed and held package versions (one C(dpkg-query)), the versions apt offers for
    the packages named in O(apt_packages) (one C(apt-cache madison)), the loaded kernel module versions, the
    digest, mode and owner of every managed file, the enablement and activity of the managed units (one
    C(systemctl show)), the NV config of every NIC (C(mlxconfig -e q)), the ROCE_ACCL register
    (C(mlxreg)), the VF counts, the RoCE QoS of the Ethernet rails (C(mlnx_qos), ECN/CNP sysfs, C(cma_roce_tos))
    and the driver state from C(nvidia-smi -q)."
  - A vendor tool that is not installed yet (a fresh host) leaves its part empty and C(tools) says so; a device
    that refuses a tool is listed with the tool's reason, never silently dropped.
  - Read-only; the same answer in check mode.
author:
  - mlplatform.gpunode developers (@mlplatform)
options:
  management_interfaces:
    description: Netdevs that carry management/SSH traffic (never a rail), as for M(mlplatform.gpunode.nic_info).
    type: list
    elements: str
    default: []
  detected_interfaces:
    description:
      - Management interfaces found by the caller (default route, the address Ansible connects to), as for
        M(mlplatform.gpunode.nic_info); one absent from the sysfs tree is ignored.
    type: list
    elements: str
    default: []
  detect_management:
    description:
      - "Collect Ansible's network facts in this same run, exactly as C(ansible.builtin.setup) with
        C(gather_subset: [network]) does (with the distribution and platform facts they depend on), return them in
        C(ansible_facts), and count as management (as O(detected_interfaces)) the interfaces of the IPv4 and IPv6
        default routes and the interfaces that hold O(connection_address). The discovery role needs no gather of
        its own then."
      - What was found is returned in RV(host_state.management).
    type: bool
    default: false
  connection_address:
    description:
      - The address the controller connects to (C(ansible_host)); with O(detect_management), the interfaces holding it
        are management. A host name matches nothing.
    type: str
  overrides:
    description: PCI address -> C({role}) pins, as for M(mlplatform.gpunode.nic_info).
    type: dict
    default: {}
  files:
    description:
      - Absolute paths or globs of the files the collection manages; a matched directory contributes its files.
      - "The default covers the boot units and their drop-ins (C(/etc/systemd/system/gpunode-*),
        C(/etc/systemd/system/*.service.d/gpunode-*)), their scripts (C(/usr/local/libexec/gpunode/*),
        C(/usr/local/sbin/gpunode-*)) and configuration (C(/etc/gpunode/*)), the apt keyrings, sources and
        preferences, C(/etc/modules-load.d/*), C(/etc/modprobe.d/*), C(/etc/sysctl.d/*), the containerd config,
        C(/etc/crictl.yaml) and C(/etc/default/kubelet)."
    type: list
    elements: str
  units:
    description:
      - Units to read besides every C(gpunode-*) unit found in O(files).
      - Default C(openibd), C(nvidia-persistenced), C(nvidia-fabricmanager), C(nvidia-dcgm), C(containerd),
        C(kubelet), C(systemd-modules-load) (all C(.service)).
    type: list
    elements: str
  kernel_modules:
    description: Kernel modules whose presence and C(version) are read under O(sysfs_root)C(/module).
    type: list
    elements: str
  apt_packages:
    description:
      - Packages whose versions apt offers are read with one C(apt-cache madison) (empty - not run).
      - A name ending in C(*) is a prefix (C(nvidia-driver-*)), expanded with C(apt-cache pkgnames) in the same run.
    type: list
    elements: str
    default: []
  extra_files:
    description: Paths or globs read besides O(files) (a role's own result files).
    type: list
    elements: str
    default: []
  contents:
    description:
      - Absolute paths of small state files (a role's record of an earlier run, such as C(reboot.json)) whose text is
        returned in RV(host_state.contents), so that the role need not read them again.
      - A missing file gives C(null); one larger than 256 KiB fails the module.
    type: list
    elements: path
    default: []
  nv_config:
    description: Read the NV config (C(mlxconfig -e q)) of every NIC whose role is not C(ignored).
    type: bool
    default: true
  neighbours:
    description:
      - Read the switch port at the far end of every compute rail, once for the host - C(lldpctl -f keyvalue) (lldpd)
        for Ethernet rails, C(ibnetdiscover) for InfiniBand rails (matched by the HCA's C(node_desc)) - into
        RV(host_state.neighbours). A missing tool or one that fails is reported there, not as an error.
    type: bool
    default: true
  roce_accl_roles:
    description: NIC roles whose ROCE_ACCL register is read.
    type: list
    elements: str
    default: [compute]
  qos_roles:
    description: NIC roles whose Ethernet netdevs' RoCE QoS is read.
    type: list
    elements: str
    default: [compute]
  root:
    description: Prefix of O(files) (C(/) on a host; a tree in tests).
    type: path
    default: /
  timeout:
    description:
      - Seconds each tool call (C(nvidia-smi), C(mlxconfig), C(mlxreg), C(mlnx_qos), C(lldpctl), C(dpkg-query) ...)
        may take before C(timeout(1)) ends it (1 to 3600). A C(nvidia-smi) that hangs is reported in
        RV(host_state.nvidia_smi) (C(error), saying it timed out); another tool that hangs fails the read naming it.
      - One C(lldpctl -f keyvalue) line of no known form is reported as a warning and the other lines are read.
    type: int
    default: 60
  result_files:
    description:
      - Also read the text of the collection's result files in this directory (every C(*.json) file, as
        M(mlplatform.gpunode.result_files) reads them) into RV(host_state.result_files). The validation role judges
        a host that nothing changed since this read on it, result files included, without reading the host again.
      - Omitted, they are not read.
    type: path
notes:
  - "Formats: dpkg-query(1) C(${db:Status-Want}) (C(hold) is what C(apt-mark showhold) lists), apt-cache(8)
    C(madison), systemctl(1) C(show --property), the NVIDIA MFT user manual (C(mlxconfig -e q), C(mlxreg)) and
    the NVIDIA RoCE QoS guides (C(mlnx_qos)); https://docs.nvidia.com/networking/display/mftv4270/."
  - Refresh it after something changes the host (a reboot, a VF change, a package install); the discovery role
    does.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - mlplatform.gpunode.sysfs
  - mlplatform.gpunode.sysfs.read_workers
"""

EXAMPLES = r"""
- name: Read the host once
  mlplatform.gpunode.host_state:
    sysfs_root: "{{ gpunode_sysfs_root | default('/sys') }}"
    apt_packages: [doca-ofed, nvidia-driver-550-server]
  register: __state

- name: Publish it
  ansible.builtin.set_fact:
    gpunode_host_state: "{{ __state.host_state }}"
"""

RETURN = r"""
host_state:
  description: Everything read, under stable keys (the C(gpunode_host_state) fact the discovery role publishes).
  returned: success
  type: dict
  contains:
    hardware:
      description: The M(mlplatform.gpunode.nic_info) result (C(platform), C(gpus), C(nvswitches), C(nics), C(rails),
        C(gpus_without_rail), C(discovery_warnings)).
      type: dict
    files:
      description: Host path -> C({sha256 (hex), mode ("0644"), owner, group}) of every existing managed file;
        a missing file is absent.
      type: dict
      sample: {"/etc/systemd/system/gpunode-sriov.service": {"sha256": "9f2c...", "mode": "0644",
               "owner": "root", "group": "root"}}
    contents:
      description: Host path -> text (UTF-8) of each file in O(contents); C(null) for one that does not exist.
      type: dict
      sample: {"/var/lib/gpunode/reboot.json": "{\"attempts\": 1, \"required\": false}"}
    capacity:
      description: Logical CPUs (C(cpu), one C(processor) entry of C(/proc/cpuinfo) each, as the setup module counts
        C(processor_vcpus)) and memory in MiB (C(memory_mib), C(MemTotal) of C(/proc/meminfo) // 1024, as
        C(memtotal_mb)); C(null) for a value the host does not give. The cluster_objects role sizes the Kueue
        flavors with them when the host's facts were not gathered.
      type: dict
      sample: {"cpu": 224, "memory_mib": 2063731}
    management:
      description:
        - With O(detect_management) (C(null) without it) - C(default_route), the interfaces of the IPv4 and IPv6
          default routes (C(default_ipv4.interface), C(default_ipv6.interface)); C(connection_address),
          O(connection_address); C(connection), the interfaces that hold it; C(interfaces), both lists together,
          which discovery counted as management.
      type: dict
      sample: {"default_route": ["eno1"], "connection_address": "10.0.0.11", "connection": ["eno1"],
               "interfaces": ["eno1"]}
    units:
      description: Unit -> C({enabled (UnitFileState, or not-found), active (ActiveState), load (LoadState)}).
      type: dict
      sample: {"openibd.service": {"enabled": "enabled", "active": "active", "load": "loaded"}}
    packages:
      description: Installed package -> version (C(dpkg-query)).
      type: dict
      sample: {"doca-ofed": "2.9.0-1"}
    held:
      description: Packages with a C(hold) selection, sorted.
      type: list
      elements: str
    apt_candidates:
      description: Package of O(apt_packages) -> versions apt offers, in apt's order; a package apt does not
        know is absent.
      type: dict
      sample: {"doca-ofed": ["2.9.0-1"]}
    kernel_modules:
      description: Module -> C({loaded (bool), version (str or null)}).
      type: dict
      sample: {"mlx5_core": {"loaded": true, "version": "24.10-1.1.4"}}
    nv_config:
      description: PCI address -> parameter -> C({default, current, next_boot}) as C(mlxconfig -e q) prints them.
      type: dict
    nv_config_pending:
      description: PCI address -> parameters whose next-boot value differs from the current one.
      type: dict
    nv_config_refused:
      description: PCI address -> the reason mlxconfig refused the device.
      type: dict
    roce_accl:
      description: PCI address -> ROCE_ACCL field -> integer value.
      type: dict
    roce_accl_refused:
      description: PCI address -> the reason mlxreg refused the device.
      type: dict
    vfs:
      description: PCI address -> C({numvfs, totalvfs}) of every PF that has SR-IOV.
      type: dict
    qos:
      description: Netdev -> the M(mlplatform.gpunode.roce_qos) C(current) state (trust, pfc, ecn_np, ecn_rp, cnp_dscp,
        roce_tos, cma_roce_tos, mtu, dcbx_mode).
      type: dict
    gpu_driver:
      description: C({loaded, driver_version, persistence_mode, fabric_state, error, gpu_count}) from C(nvidia-smi -q);
        C(gpu_count) is the number of GPUs nvidia-smi lists (0 when it cannot run).
      type: dict
    nvidia_smi:
      description:
        - The C(nvidia-smi -q) read in the shape the node read-back of M(mlplatform.gpunode.node_validation) returns
          it in its C(observed.nvidia_smi) (C(driver_version), C(cuda_version), C(attached_gpus), C(gpus) with
          each GPU's C(pci_address), C(product_name), C(memory_total_mib), C(persistence_mode), C(fabric_state),
          ...; C(unreachable) maps a GPU nvidia-smi could not get a device handle for to the reason), or C({error})
          with the reason when the tool is not installed, fails, hangs (O(timeout)) or prints an output cut short or
          of an unknown format; the rest of the host is read either way.
      type: dict
    affinity:
      description: GPU PCI address -> the PCI address of its rail NIC (C(null) for none), as the node read-back
        of M(mlplatform.gpunode.node_validation) computes it (from sysfs, without O(overrides)).
      type: dict
      sample: {"0000:1b:00.0": "0000:18:00.0"}
    result_files:
      description:
        - With O(result_files) (absent without it) - C(path), the directory; C(files), file name -> C({content,
          sha256, size}) as M(mlplatform.gpunode.result_files) returns them; or C(error), why they could not be
          read (a file too large or not UTF-8), in place of C(files).
      type: dict
      sample: {"path": "/var/lib/gpunode", "files": {"reboot.json": {"content": "{}\n", "sha256": "ca3d...",
               "size": 3}}}
    neighbours:
      description:
        - C(rails) maps each compute rail's PCI address to the switch port at its far end, C({switch, switch_id,
          port, via}) (C(via) C(lldp) or C(ibnetdiscover)); a rail nobody answered for is not in it.
        - C(sources) maps C(lldp)/C(ibnetdiscover) (when the host has rails of that kind) to C(ok), C(missing) (the
          tool is not installed) or the tool's error.
      type: dict
      sample: {rails: {"0000:1a:00.0": {switch: su1-leaf0, switch_id: "b8:ce:f6:12:34:56", port: swp7, via: lldp}},
               sources: {lldp: ok}}
    tools:
      description: Tool -> the path found, or null when it is not installed (its part of the state is empty).
      type: dict
ansible_facts:
  description:
    - "With O(detect_management), Ansible's network facts (and the distribution and platform facts they depend on) as
      C(ansible.builtin.setup) with C(gather_subset: [network]) returns them; empty without it."
  returned: success
  type: dict
  sample: {"ansible_default_ipv4": {"interface": "eno1", "address": "10.0.0.11"}, "ansible_distribution": "Ubuntu"}
discovery_warnings:
  description: The classifier's notes (also raised as Ansible warnings).
  returned: success
  type: list
  elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.mlplatform.gpunode.plugins.module_utils import host_state as hs
from ansible_collections.mlplatform.gpunode.plugins.module_utils import management as mgmt
from ansible_collections.mlplatform.gpunode.plugins.module_utils import neighbors as nb
from ansible_collections.mlplatform.gpunode.plugins.module_utils import node_reads, rdma_tools, roce_qos
from ansible_collections.mlplatform.gpunode.plugins.module_utils.discovery import (
    ARGUMENT_SPEC,
    DiscoveryError,
    discover,
)
from ansible_collections.mlplatform.gpunode.plugins.module_utils.host_errors import name_the_host
from ansible_collections.mlplatform.gpunode.plugins.module_utils.mlxreg import get_argv, parse_get
from ansible_collections.mlplatform.gpunode.plugins.module_utils.nic_roles import classify
from ansible_collections.mlplatform.gpunode.plugins.module_utils.node_health import (
    query_completeness,
    split_device_handle_errors,
)
from ansible_collections.mlplatform.gpunode.plugins.module_utils.nvconfig import (
    config_of,
    pending_params,
    query_argv,
    query_devices,
)
from ansible_collections.mlplatform.gpunode.plugins.module_utils.nvidia_smi import driver_summary, parse_query
from ansible_collections.mlplatform.gpunode.plugins.module_utils.parsing import ParseError
from ansible_collections.mlplatform.gpunode.plugins.module_utils.pci_sysfs import SysfsError, read_sysfs
from ansible_collections.mlplatform.gpunode.plugins.module_utils.result_files import ResultFilesError, read_result_files

TOOLS = ("dpkg-query", "apt-cache", "systemctl", "mlxconfig", "mlxreg", "mlnx_qos", "cma_roce_tos", "nvidia-smi",
         "lldpctl", "ibnetdiscover")


def _read(path):
    """A small sysfs file's text, stripped; None when it is missing."""
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return None


class Reader:
    def __init__(self, module):
        self.module = module
        self.tools = {tool: module.get_bin_path(tool) for tool in TOOLS}
        if not self.tools["mlxconfig"]:
            self.tools["mlxconfig"] = module.get_bin_path("mstconfig")

    def run(self, argv, check=True):
        rc, out, err = node_reads.run(self.module, argv)
        if check and rc != 0:
            self.module.fail_json(msg=f"host_state: {' '.join(argv)} failed (rc {rc}): {err.strip() or out.strip()}",
                                  rc=rc, stdout=out, stderr=err, cmd=argv)
        return rc, out, err

    def prefetch(self, nv_devices, accl_devices, qos_nics, workers):
        """Start the per-device vendor reads side by side (node_reads.prefetch); each read below then
        takes its answer and handles it as before."""
        tools = self.tools
        argvs = [query_argv(tools["mlxconfig"], d) for d in nv_devices if tools["mlxconfig"]]
        argvs += [get_argv(tools["mlxreg"], d) for d in accl_devices if tools["mlxreg"]]
        if tools["mlnx_qos"] and tools["cma_roce_tos"]:
            argvs += [rdma_tools.mlnx_qos_read_argv(tools["mlnx_qos"], n["netdev"]) for n in qos_nics]
            argvs += [rdma_tools.cma_roce_tos_read_argv(tools["cma_roce_tos"], n["rdma_device"])
                      for n in qos_nics if n.get("rdma_device")]
        if tools["nvidia-smi"]:
            argvs.append([tools["nvidia-smi"], "-q"])
        node_reads.prefetch(self.module, argvs, workers)

    def fail_parse(self, what, exc, out):
        self.module.fail_json(msg=f"host_state: cannot read {what}: {exc}", stdout=out)

    def packages(self):
        if not self.tools["dpkg-query"]:
            return {}, []
        _rc, out, _err = self.run([self.tools["dpkg-query"], "-W", "-f", hs.DPKG_FORMAT])
        try:
            parsed = hs.parse_dpkg_query(out)
        except ParseError as exc:
            self.fail_parse("the package database", exc, out)
        return parsed["packages"], parsed["held"]

    def candidates(self, patterns):
        if not patterns or not self.tools["apt-cache"]:
            return {}
        names = set()
        for pattern in patterns:
            if pattern.endswith("*"):
                # apt-cache pkgnames PREFIX: every package name apt knows that starts with PREFIX.
                names.update(self.run([self.tools["apt-cache"], "pkgnames", pattern[:-1]])[1].split())
            else:
                names.add(pattern)
        names = sorted(names)
        if not names:
            return {}
        # madison exits 0 and prints nothing for a package it does not know.
        _rc, out, _err = self.run([self.tools["apt-cache"], "madison", *names])
        try:
            return hs.parse_madison(out)
        except ParseError as exc:
            self.fail_parse("apt-cache madison", exc, out)
        return {}

    def units(self, names):
        if not names or not self.tools["systemctl"]:
            return {}
        rc, out, err = self.run([self.tools["systemctl"], "show", f"--property={hs.SYSTEMCTL_PROPERTIES}", *names],
                                check=False)
        if rc != 0:
            # No systemd as PID 1 (a chroot): the units cannot be read; say so instead of guessing.
            self.module.warn(f"host_state: systemctl show failed (rc {rc}): {err.strip()}; unit states unknown")
            return {}
        try:
            return hs.parse_systemctl_show(out, names)
        except ParseError as exc:
            self.fail_parse("the unit states", exc, out)
        return {}

    def nv_config(self, devices):
        binary = self.tools["mlxconfig"]
        if not binary or not devices:
            return {}, {}
        try:
            return query_devices(lambda argv: self.run(argv, check=False), binary, devices)
        except ParseError as exc:
            self.fail_parse("the NV config", exc, "")
        return {}, {}

    def roce_accl(self, devices):
        binary = self.tools["mlxreg"]
        read, refused = {}, {}
        if not binary:
            return read, refused
        for device in devices:
            rc, out, err = self.run(get_argv(binary, device), check=False)
            if rc != 0:
                messages = [ln.strip()[3:].strip() for ln in f"{out}\n{err}".splitlines()
                            if ln.strip().startswith("-E-")]
                refused[device] = "; ".join(messages) or err.strip() or f"mlxreg exited {rc}"
                continue
            try:
                result = parse_get(out)
            except ParseError as exc:
                self.fail_parse(f"the ROCE_ACCL register of {device}", exc, out)
            if result["errors"]:
                refused[device] = "; ".join(result["errors"])
            else:
                read[device] = result["fields"]
        return read, refused

    def qos(self, root, nics):
        if not (self.tools["mlnx_qos"] and self.tools["cma_roce_tos"]):
            return {}

        def run(argv):
            tool = self.tools[argv[0]]
            return self.run([tool, *argv[1:]])[1]

        out = {}
        for nic in nics:
            try:
                state, _files = roce_qos.read_state(run, root, nic["netdev"], nic.get("rdma_device"))
            except ParseError as exc:
                self.fail_parse(f"the RoCE QoS of {nic['netdev']}", exc, "")
            out[nic["netdev"]] = state
        return out

    def _neighbour_tool(self, sources, source, tool, args, what, parse):
        """Run ``tool`` once and parse its output; record ``ok``, ``missing`` or its error in ``sources[source]``
        (None returned then). Output in an unknown format fails the read, naming ``what``."""
        binary = self.tools[tool]
        if not binary:
            sources[source] = "missing"
            return None
        rc, text, err = self.run([binary, *args], check=False)
        if rc != 0:
            sources[source] = (err or text).strip()[:300] or f"{tool} exited {rc}"
            return None
        try:
            parsed = parse(text)
        except ParseError as exc:
            self.fail_parse(what, exc, text)
        sources[source] = "ok"
        return parsed

    def neighbours(self, sysfs_root, rails):
        """The switch port at the far end of each rail: LLDP (``lldpctl -f keyvalue``, once) for Ethernet rails,
        ``ibnetdiscover`` (once) for InfiniBand rails. ``{"rails": {pci: {switch, switch_id, port, via}},
        "sources": {"lldp"|"ibnetdiscover": "ok"|"missing"|<error>}}``; a rail nobody answers for is not in it."""
        out, sources = {}, {}
        ethernet = [r for r in rails if r.get("link_layer") != "InfiniBand" and r.get("netdev")]
        infiniband = [r for r in rails if r.get("link_layer") == "InfiniBand" and r.get("rdma_device")]
        if ethernet:
            unparsed = []
            heard = self._neighbour_tool(sources, "lldp", "lldpctl", ["-f", "keyvalue"], "the LLDP neighbours",
                                         lambda text: nb.parse_lldpctl_keyvalue(text, unparsed))
            for bad in unparsed:  # one line of an unknown form is reported; the others are read
                self.module.warn(f"host_state: lldpctl -f keyvalue line {bad['line']} is of no known form, left "
                                 f"out: {bad['text']}")
            for rail in ethernet if heard else []:
                found = (heard.get(rail["netdev"]) or [None])[0]
                if found and found.get("switch"):
                    out[rail["pci_address"]] = {"switch": found["switch"], "switch_id": found["switch_id"],
                                                "port": found["port"], "via": "lldp"}
        if infiniband:
            nodes = self._neighbour_tool(sources, "ibnetdiscover", "ibnetdiscover", [], "the InfiniBand fabric",
                                         nb.parse_ibnetdiscover)
            by_guid, by_desc = (nb.ib_neighbours_by_guid(nodes), nb.ib_neighbours(nodes)) if nodes else ({}, {})
            for rail in infiniband if nodes else []:
                # The HCA by its node GUID; by its node description (`<host> <device>`, set by rdma-ndd) where the
                # GUID is not in the output.
                ib_dir = os.path.join(sysfs_root, "class", "infiniband", rail["rdma_device"])
                found = by_guid.get(nb.guid_key(_read(os.path.join(ib_dir, "node_guid"))))
                desc = _read(os.path.join(ib_dir, "node_desc"))
                if not found and desc and " " in desc:
                    found = by_desc.get(tuple(desc.rsplit(" ", 1)))
                if found:
                    out[rail["pci_address"]] = {"switch": found["switch"], "switch_id": found["switch_guid"],
                                                "port": found["port"], "via": "ibnetdiscover"}
        return {"rails": out, "sources": sources}

    def nvidia_smi(self):
        """``(observed, driver)``: ``nvidia-smi -q`` as node_validation's read-back returns it (``{error}`` when the
        tool is missing, fails, hangs, or prints an output cut short or of an unknown format; ``unreachable`` names
        the GPUs nvidia-smi could not get a device handle for), and the driver summary of RV(host_state.gpu_driver).
        The rest of the host is read either way."""
        driver = {"loaded": False, "driver_version": None, "persistence_mode": None, "fabric_state": None,
                  "error": None, "gpu_count": 0}
        binary = self.tools["nvidia-smi"]
        if not binary:
            return {"error": "not installed (no nvidia-smi on PATH)"}, driver
        rc, out, err = self.run([binary, "-q"], check=False)
        # A GPU nvidia-smi cannot reach is named (it prints the others and exits non-zero); a hung, cut or
        # unreadable output is an error of this read, not GPUs missing.
        out, unreachable = split_device_handle_errors(out)
        _rest, more = split_device_handle_errors(err)
        unreachable.update(more)
        if rc != 0 and (node_reads.is_timeout(rc, err) or not unreachable):
            return ({"error": f"exit status {rc}: {(err or out).strip()}"},
                    dict(driver, error=(err or out).strip() or f"nvidia-smi -q exited {rc}"))
        try:
            parsed = parse_query(out)
        except ParseError as exc:
            return {"error": f"nvidia-smi -q: {exc}"}, dict(driver, error=f"nvidia-smi -q: {exc}")
        sections = [(g["bus_id"], g["fields"]) for g in parsed["gpus"]]
        incomplete, _cut = query_completeness({"Attached GPUs": str(parsed["attached_gpus"] or "")}, sections)
        if incomplete and not (unreachable and parsed["attached_gpus"] == len(sections) + len(unreachable)):
            why = f"nvidia-smi -q: the output is cut short: {incomplete}"
            return {"error": why}, dict(driver, error=why)
        summary = driver_summary(parsed)
        observed = dict(parsed, gpus=[{k: v for k, v in gpu.items() if k != "fields"} for gpu in parsed["gpus"]])
        if unreachable:
            observed["unreachable"] = unreachable
        return observed, {"loaded": True, "driver_version": summary["driver_version"],
                          "persistence_mode": summary["persistence_mode"], "fabric_state": summary["fabric_state"],
                          "error": None, "gpu_count": len(summary["gpus"])}


def affinity_of(sysfs_root, hardware, management_interfaces, overrides):
    """GPU -> rail NIC as node_validation's read-back classifies the tree (its management interfaces, no overrides):
    the hardware's own pairing when no override applies, else classified again without them."""
    if not overrides:
        return {g["pci_address"]: g.get("rail_nic") for g in hardware["gpus"]}
    live = classify(read_sysfs(sysfs_root), management_interfaces=management_interfaces)
    return {g["pci_address"]: g.get("rail_nic") for g in live["gpus"]}


def main():
    module = AnsibleModule(
        argument_spec={
            **ARGUMENT_SPEC,
            "files": {"type": "list", "elements": "str"},
            "units": {"type": "list", "elements": "str"},
            "kernel_modules": {"type": "list", "elements": "str"},
            "apt_packages": {"type": "list", "elements": "str", "default": []},
            "extra_files": {"type": "list", "elements": "str", "default": []},
            "contents": {"type": "list", "elements": "path", "default": []},
            "nv_config": {"type": "bool", "default": True},
            "neighbours": {"type": "bool", "default": True},
            "roce_accl_roles": {"type": "list", "elements": "str", "default": ["compute"]},
            "qos_roles": {"type": "list", "elements": "str", "default": ["compute"]},
            "root": {"type": "path", "default": "/"},
            "detect_management": {"type": "bool", "default": False},
            "connection_address": {"type": "str"},
            "read_workers": {"type": "int", "default": 8},
            "result_files": {"type": "path"},
            "timeout": {"type": "int", "default": 60},
        },
        supports_check_mode=True,
    )
    host = name_the_host(module, "host_state")
    params = module.params
    node_reads.apply_timeout_option(module, "host_state")
    sysfs_root = params["sysfs_root"]
    reader = Reader(module)
    management, network_facts = None, {}
    if params["detect_management"]:
        network_facts, plain = mgmt.collect_network_facts(module)
        management = dict(mgmt.management_from_facts(plain, params["connection_address"]),
                          connection_address=params["connection_address"])
    detected = list(dict.fromkeys(params["detected_interfaces"] + (management["interfaces"] if management else [])))
    try:
        hardware = discover(sysfs_root, hostname=host, management_interfaces=params["management_interfaces"],
                            detected_interfaces=detected, overrides=params["overrides"], caller="host_state")
    except DiscoveryError as exc:
        module.fail_json(msg=str(exc), sysfs_root=sysfs_root)
    notes = hardware.pop("warnings")
    hardware["discovery_warnings"] = notes
    for note in notes:
        module.warn(note)

    patterns = (params["files"] if params["files"] is not None else hs.DEFAULT_FILES) + params["extra_files"]
    try:
        files = hs.read_files(patterns, params["root"])
    except ValueError as exc:
        module.fail_json(msg=f"host_state: {exc}")
    try:
        contents = hs.read_contents(params["contents"], params["root"])
    except ValueError as exc:
        module.fail_json(msg=f"host_state: {exc}")
    units = hs.unit_names(files, params["units"] if params["units"] is not None else hs.DEFAULT_UNITS)
    nics = hardware["nics"]
    nv_devices = [n["pci_address"] for n in nics if n["role"] != "ignored"] if params["nv_config"] else []
    accl_devices = [n["pci_address"] for n in nics if n["role"] in params["roce_accl_roles"]]
    qos_nics = [n for n in nics if n["role"] in params["qos_roles"] and n.get("netdev")
                and n.get("link_layer") == "Ethernet"
                and os.path.isdir(os.path.join(sysfs_root, "class", "net", n["netdev"]))]
    reader.prefetch(nv_devices, accl_devices, qos_nics, params["read_workers"])
    smi, gpu_driver = reader.nvidia_smi()
    try:
        affinity = affinity_of(sysfs_root, hardware, list(dict.fromkeys(params["management_interfaces"] + detected)),
                               params["overrides"])
    except SysfsError as exc:
        module.fail_json(msg=f"host_state: {exc}", sysfs_root=sysfs_root)
    packages, held = reader.packages()
    blocks, nv_refused = reader.nv_config(nv_devices)
    accl, accl_refused = reader.roce_accl(accl_devices)
    state = {
        "hardware": hardware,
        "files": files,
        "contents": contents,
        "units": reader.units(units),
        "packages": packages,
        "held": held,
        "apt_candidates": reader.candidates(params["apt_packages"]),
        "kernel_modules": hs.read_kernel_modules(
            sysfs_root,
            params["kernel_modules"] if params["kernel_modules"] is not None else hs.DEFAULT_KERNEL_MODULES),
        "nv_config": {device: config_of(block) for device, block in blocks.items()},
        "nv_config_pending": {d: pending_params(b) for d, b in blocks.items() if pending_params(b)},
        "nv_config_refused": nv_refused,
        "roce_accl": accl,
        "roce_accl_refused": accl_refused,
        "vfs": {n["pci_address"]: {"numvfs": n.get("sriov_numvfs"), "totalvfs": n.get("sriov_totalvfs")}
                for n in nics if n.get("sriov_totalvfs") is not None},
        "qos": reader.qos(sysfs_root, qos_nics),
        "gpu_driver": gpu_driver,
        "nvidia_smi": smi,
        "affinity": affinity,
        "neighbours": reader.neighbours(sysfs_root, [n for n in nics if n["role"] == "compute"])
        if params["neighbours"] else {"rails": {}, "sources": {}},
        "tools": reader.tools,
        "capacity": hs.read_capacity(params["root"]),
        "management": management,
    }
    if params["result_files"]:
        try:
            state["result_files"] = {"path": params["result_files"], "files": read_result_files(params["result_files"])}
        except ResultFilesError as exc:
            state["result_files"] = {"path": params["result_files"], "error": str(exc)}
    module.exit_json(changed=False, host_state=state, discovery_warnings=notes, ansible_facts=network_facts)


if __name__ == "__main__":
    main()
