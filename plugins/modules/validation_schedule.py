#!/usr/bin/python
# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: validation_schedule
short_description: Plan the fleet's ib_write_bw tests once, on the controller, with bounded fan-in
version_added: 0.3.0
description:
  - Runs on the controller (action plugin). Reads every host of O(hosts) once (its discovery result O(hw_var), its
    fabric O(fabric_var) and the address its servers listen on O(address_var), as the hosts published them) and
    returns the schedule of the RDMA bandwidth tests of the whole fleet. One pass over the hosts, linear time and
    memory; nothing is templated again (a filter's result of this size would be walked again by the templar).
  - In every fabric the hosts form a ring of platform blocks (platforms in name order, hosts in play order within
    a block); host I(i) serves host I(i+1) on every rail both have (rail I(i) to rail I(i), as rail-optimized fabrics
    are cabled). Every host is tested once as a server and once as a client; every platform with itself (two hosts
    or more) and every pair of adjacent platforms is covered. With four platforms or more in one fabric, the
    platform pairs the ring misses get one test each, in later phases. A host alone in its fabric is C(untested).
  - Within a phase a host rail serves at most one peer at a time (C(max_fan_in); the bound is 2).
  - Clients run in play order, O(forks) hosts per wave. A server's lifetime covers the server task's batches, the
    waves before its client's and its client's runs up to its own.
  - A phase whose hosts all fit in one batch of O(forks) is C(together) (the whole demo fleet, or 10 to 50 hosts at
    the collection's C(forks = 50)). Each host starts its servers and then runs its clients in one call, one round
    trip a host instead of two, the clients retrying a refused connection while a peer's server starts.
  - Ports are per address (O(base_port) up to O(base_port) + rails - 1 with one address per host), whatever the
    fleet size; hosts sharing an address get distinct ports.
  - "Run it once (C(run_once: true)) and register the result; the validation role's bandwidth stage does."
author:
  - mlplatform.gpunode developers (@mlplatform)
attributes:
  check_mode:
    details: Read-only; it computes the same schedule in check mode.
  platform:
    details: Runs on the controller; it reads the facts the hosts published.
  run_once:
    details: Meant to run once per play; it plans every host of O(hosts) in that one run.
extends_documentation_fragment:
  - mlplatform.gpunode.controller_action
  - mlplatform.gpunode.controller_action.run_once
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
options:
  hosts:
    description: The hosts to schedule, in the order their clients run (default C(ansible_play_hosts)).
    type: list
    elements: str
  hw_var:
    description: Host variable holding the discovery result (its C(rails) and C(platform)).
    type: str
    default: gpunode_hw
  fabric_var:
    description: Host variable naming the fabric; hosts are paired only within one fabric.
    type: str
    default: gpunode_fabric
  default_fabric:
    description: The fabric of a host without O(fabric_var).
    type: str
    default: default
  address_var:
    description: Host variable holding the address the host's C(ib_write_bw) servers listen on.
    type: str
    default: __validation_address
  forks:
    description: Hosts Ansible runs a task on at once (one wave of clients). 1-10000.
    type: int
    default: 5
  base_port:
    description: Lowest TCP port. 1-65535; the schedule fails when a port would pass 65535.
    type: int
    default: 18515
  test_timeout:
    description: Seconds one client run may take. 1-86400.
    type: int
    default: 60
  server_start_s:
    description: Seconds the server task may take per batch of O(forks) hosts. 0-86400.
    type: int
    default: 30
notes:
  - Fails, naming the host and the variable, when a host has no discovery result, when a server host has no
    address, on an unknown option and on an integer out of its range.
  - "Perftest's C(ib_write_bw) serves one client per port and process: U(https://github.com/linux-rdma/perftest)."
seealso:
  - module: mlplatform.gpunode.ib_write_bw
  - module: mlplatform.gpunode.fleet_contract
"""

EXAMPLES = r"""
- name: Schedule the tests (every platform pair of each fabric, bounded fan-in)
  mlplatform.gpunode.validation_schedule:
    forks: "{{ ansible_forks | default(50) }}"
    base_port: 18515
  register: schedule
  run_once: true

- name: Start this host's servers of phase 0
  mlplatform.gpunode.ib_write_bw:
    servers: "{{ schedule.schedule.phases[0].servers[inventory_hostname] }}"
  when: inventory_hostname in schedule.schedule.phases[0].servers
"""

RETURN = r"""
schedule:
  description:
    - C(tests) (each C({id, fabric, phase, wave, server, client, rail, server_device, client_device, line_rate_gbps,
      port, server_lifetime_s})), C(phases) (each C({together, servers, clients}); C(servers) and C(clients) map a host
      to its M(mlplatform.gpunode.ib_write_bw) entries, and C(together) is true when every host of the phase fits in
      one batch of O(forks), so that each host starts its servers and runs its clients in one call; a server entry
      is C({id, device, port, lifetime}), a client entry C({id, device, port, peer}) naming its server host),
      C(untested) (host to reason), C(max_fan_in), C(port_range) (C([lowest, highest])), C(waves).
  returned: always
  type: dict
  sample:
    tests:
      - {id: "dgx1:0-hgx1:0", fabric: default, phase: 0, wave: 0, server: dgx1, client: hgx1, rail: 0,
         server_device: mlx5_0, client_device: mlx5_0, line_rate_gbps: 400, port: 18515, server_lifetime_s: 90}
    phases: [{together: true, servers: {dgx1: [{id: "dgx1:0-hgx1:0", device: mlx5_0, port: 18515, lifetime: 90}]},
              clients: {hgx1: [{id: "dgx1:0-hgx1:0", device: mlx5_0, port: 18515, peer: dgx1}]}}]
    untested: {}
    max_fan_in: 1
    port_range: [18515, 18515]
    waves: 1
addresses:
  description: Host to the address its servers listen on (from O(address_var)); clients connect there.
  returned: always
  type: dict
  sample: {dgx1: 10.0.0.11, hgx1: 10.0.0.12}
"""
