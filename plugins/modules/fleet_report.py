#!/usr/bin/python
# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fleet_report
short_description: Write the fleet report (HTML, Markdown, JSON) from the fleet's machine-readable results
version_added: 0.2.0
description:
  - Runs on the controller (action plugin); the report code and its templates are part of the collection, so a
    collection installed from Galaxy renders the report without anything else (the C(gpunode report) CLI of the
    project's repository calls the same code).
  - >-
    Reads O(input), a results directory, C(fleet.json) (written by C(playbooks/report.yml) as C({hosts, kueue, run}),
    per host its C(fabric) and C(contracts), source to entries, the Kueue objects and the run's C(id) and C(time)),
    C(hosts/<host>/<name>.json) (the files of C(/var/lib/gpunode) fetched from each host, such as C(validation.json)
    and C(reboot.json)) and C(kueue/*.json|*.yaml). Every part is optional; a host appears when any part names it.
  - >-
    The report is laid out for a fleet. At the top the collection version, the commit when known, the run's id and
    time; then the drift (each setting that differs from its fabric's majority, on which hosts and devices, in stage
    order); per fabric a table with one row per host and the settings grouped by stage (NV config enums by name
    and number such as ETH(2), PFC as the list of priorities it is on); an inline SVG heatmap of C(ib_write_bw)
    bandwidth per rail and client/server pair; per ClusterQueue a ResourceFlavor x resource quota table; each
    host's rail map, failed checks and failed tests in a C(<details>) element. The Markdown report carries the
    same parts, with each setting's fabric value and the hosts that differ instead of the host x setting grid.
  - >-
    With O(from_facts), what C(playbooks/report.yml) runs at the end of C(site.yml): the report is built from the
    play's facts in memory, in one pass over O(hosts) (each host's fabric O(fabric_var), its contracts O(sources),
    the results it published this run O(result_facts), and the text of its result files from the registered
    M(mlplatform.gpunode.result_files) result in O(host_files_var)). A result comes from its fact when the host
    published one, else its file is parsed. The facts are recorded in O(input) first, each file only when its
    content changed (C(fleet.json) with the fabrics, contracts, O(kueue) and O(run); C(hosts/<host>/<name>)), so
    rendering O(input) later (without O(from_facts), or C(gpunode report)) gives the same report.
  - Writes C(report.html), C(report.md) and C(report.json) (the built model; a host's cells of the host x setting
    table only where they differ from the fabric's expected value) to O(output). A file whose content did
    not change is not rewritten; the task reports changed when any file was written.
  - Fails naming the file (and the host) when an input file is not readable JSON or YAML, and naming the option
    on an argument of the wrong shape; nothing is written then.
author:
  - mlplatform.gpunode developers (@mlplatform)
attributes:
  check_mode:
    details: Nothing is written in check mode.
  platform:
    details: Runs on the controller; it reads the results directory there, or the facts the hosts published.
  run_once:
    details: Meant to run once per play.
extends_documentation_fragment:
  - mlplatform.gpunode.controller_action
  - mlplatform.gpunode.controller_action.run_once
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
options:
  input:
    description: The results directory on the controller.
    type: path
    required: true
  output:
    description: Where to write the report files on the controller; default O(input).
    type: path
  host_files:
    description:
      - Host -> the registered result of the M(mlplatform.gpunode.result_files) module (a failed or skipped one, or
        an empty one, adds nothing; anything else without its RV(mlplatform.gpunode.result_files#module:files) is an
        error). Each file is written to
        C(<input>/hosts/<host>/<name>) before the report is built, each file only when its content differs (so
        one result_files call a host replaces C(find) and a C(fetch) a file).
      - Host and file names must be plain names (no C(/), not C(.) or C(..), no leading dot); otherwise the task fails
        naming it and nothing is written. Not written in check mode.
    type: dict
  from_facts:
    description: Build the report from the play's facts and record them in O(input) (see the description).
    type: bool
    default: false
  hosts:
    description: With O(from_facts), the hosts of the report (default C(ansible_play_hosts_all)).
    type: list
    elements: str
  sources:
    description: With O(from_facts), the host variables holding contract entries.
    type: list
    elements: str
    default: [discovery_contract, ofed_contract, gpu_driver_contract, nic_firmware_contract, sriov_contract,
              roce_qos_contract]
  fabric_var:
    description: With O(from_facts), the host variable naming the fabric (a host without one is in C(default)).
    type: str
    default: gpunode_fabric
  result_facts:
    description:
      - With O(from_facts), result name (the stem of its file in C(/var/lib/gpunode)) to the host variable that
        holds the same data when the host published it in this run.
    type: dict
    default: {discovery: gpunode_hw, validation: validation_result, nic_firmware: nic_firmware_result}
  host_files_var:
    description:
      - With O(from_facts), the host variable holding the registered M(mlplatform.gpunode.result_files) result
        (the host's result files, recorded under C(<input>/hosts/<host>/)); as O(host_files), from every host at once.
      - A list of such variables is tried in order, per host. The first that holds a read is used; a variable
        that is unset or null, or a registered read that was skipped or failed, gives way to the next. The
        C(site.yml) report names its own read first, then the validation role's C(validation_result_files).
    type: raw
  kueue:
    description: With O(from_facts), the Kueue objects (ResourceFlavor, ClusterQueue, LocalQueue) to show.
    type: list
    elements: dict
  run:
    description: With O(from_facts), the run the results are from, C({id, time}), shown at the top.
    type: dict
  topology:
    description:
      - The registered result of M(mlplatform.gpunode.topology) (a skipped one adds nothing). The report gets a
        topology section, block to rack to hosts, with each miscabled rail marked under its host (the switch ports
        expected and found) and the rails without a neighbour listed.
    type: dict
  history:
    description:
      - The day-two database on the controller (SQLite, as M(mlplatform.gpunode.bandwidth_history) and
        M(mlplatform.gpunode.remediation) write it). When given and present, the report gets a day-two section (each
        rail whose latest result regressed against its own history or fell below line rate, with an inline SVG trend
        of its last runs and its baseline; the hosts out of service with their state, attempts and reason; the
        latest remediation events). Read only.
    type: path
seealso:
  - module: mlplatform.gpunode.fleet_contract
  - module: mlplatform.gpunode.result_files
"""

EXAMPLES = r"""
- name: Write the fleet report from a results directory
  mlplatform.gpunode.fleet_report:
    input: "{{ lookup('ansible.builtin.env', 'PWD') }}/gpunode-report"
  run_once: true
  delegate_to: localhost

- name: Record the play's results and write the report from them (as playbooks/report.yml does)
  mlplatform.gpunode.fleet_report:
    input: "{{ lookup('ansible.builtin.env', 'PWD') }}/gpunode-report"
    from_facts: true
    host_files_var: registered_result_files
    run: {id: "{{ lookup('ansible.builtin.env', 'GPUNODE_RUN_ID') }}", time: "{{ now(utc=true) }}"}
  run_once: true
  delegate_to: localhost
"""

RETURN = r"""
files:
  description: Report file name to its path and whether this run wrote it (C(written)).
  returned: always
  type: dict
  sample: {"report.html": {"path": "/home/ops/gpunode-report/report.html", "written": true}}
output:
  description: The directory the report is in.
  returned: always
  type: str
host_files_written:
  description:
    - The files of O(host_files) (or O(host_files_var)) this run wrote (changed or new), sorted, then C(fleet.json)
      when O(from_facts) rewrote it; C([]) in check mode.
  returned: always
  type: list
  elements: str
  sample: ["/home/ops/gpunode-report/hosts/gpu-a01/validation.json"]
"""
