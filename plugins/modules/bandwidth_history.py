#!/usr/bin/python
# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bandwidth_history
short_description: Keep the fleet's RDMA bandwidth results in SQLite and judge each rail against its own baseline
version_added: 0.3.0
description:
  - Runs on the controller (action plugin). Reads every host of O(hosts) once (its validation result O(result_var),
    as the validation role published it) and records each C(ib_write_bw) result of the run in the SQLite database
    O(db) on the controller, one row per host rail, peer and side with the Gb/s, the line rate, the time, the run
    and the collection version. The history survives restarts (SQLite commits each run in one transaction).
  - A rail's baseline is the median of its last O(window) measured results of earlier runs. A rail whose lowest
    result of this run is more than O(drop_pct) percent below its baseline (with at least O(min_points) earlier
    results) is a C(regression); one below O(threshold_pct) percent of its line rate is C(below_line_rate); one
    without a result is C(failed). A rail can regress against its own history while it still passes the
    line-rate threshold.
  - Run it once (C(run_once) true); C(playbooks/revalidate.yml) does, after the validation role.
author:
  - mlplatform.gpunode developers (@mlplatform)
attributes:
  check_mode:
    details: Judges this run against the history and writes nothing (C(recorded) is 0).
  platform:
    details: Runs on the controller; it reads the facts the hosts published and writes the database there.
  run_once:
    details: Meant to run once per play; it records every host of O(hosts) in that one run.
extends_documentation_fragment:
  - mlplatform.gpunode.controller_action
  - mlplatform.gpunode.controller_action.run_once
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
options:
  db:
    description:
      - Path of the SQLite database on the controller. It is created mode C(0600), its directory C(0700), when
        missing.
    type: path
    required: true
  hosts:
    description: The hosts whose results are recorded (default C(ansible_play_hosts)).
    type: list
    elements: str
  result_var:
    description: Host variable holding the validation result (its C(pairs)).
    type: str
    default: validation_result
  window:
    description: How many of a rail's latest results of earlier runs make its baseline (their median).
    type: int
    default: 10
  min_points:
    description: Earlier results a rail needs before it can be judged against its baseline.
    type: int
    default: 3
  drop_pct:
    description: Percent below its baseline at which a rail's result is a regression (0-100).
    type: float
    default: 10
  threshold_pct:
    description: Percent of the line rate below which a result is C(below_line_rate) (0-100).
    type: float
    default: 90
  trend_points:
    description: How many of each rail's latest runs RV(trend) returns.
    type: int
    default: 20
  run:
    description: The run's id (default C($GPUNODE_RUN_ID), else C(run-<UTC time>)).
    type: str
  version:
    description: The collection version recorded with each row (default the version of this collection).
    type: str
notes:
  - Fails, naming the host, when a host of O(hosts) has no O(result_var) or a result entry lacks a field or holds an
    impossible value (a Gb/s that is not a finite number from 0, above 1.5 times its line rate or above 3200 Gb/s; a
    rail that is not a whole number; a line rate of 0 or less); fails naming the database when it cannot be opened
    or written. Nothing is recorded then.
  - The latest results are the latest runs in the order they were recorded (each run gets a sequence number), not
    by their time, so a run dated in the future by a clock set wrong does not pin the baseline.
  - The database has a schema version (C(PRAGMA user_version)) and is moved forward by migrations in one
    transaction. A file that is not this database (not SQLite, other tables, a newer schema) is refused and left as
    it is, never chmod'ed. In check mode nothing is created or written, and an existing database is opened
    read-only (check mode works on a read-only filesystem).
  - "SQLite: U(https://www.sqlite.org/lang_createtable.html); Python's sqlite3 module:
    U(https://docs.python.org/3/library/sqlite3.html)."
seealso:
  - module: mlplatform.gpunode.ib_write_bw
  - module: mlplatform.gpunode.validation_schedule
"""

EXAMPLES = r"""
- name: Record the run's bandwidth results and judge each rail against its own history
  mlplatform.gpunode.bandwidth_history:
    db: /var/lib/gpunode-hook/bandwidth.sqlite
    drop_pct: 5
  register: history
  run_once: true

- name: Fail the hosts with a rail that regressed
  ansible.builtin.fail:
    msg: "{{ history.by_host[inventory_hostname] | join('; ') }}"
  when: inventory_hostname in history.by_host
"""

RETURN = r"""
recorded:
  description: Rows written to O(db) in this run (0 in check mode).
  returned: always
  type: int
  sample: 32
run:
  description: The run id the rows carry.
  returned: always
  type: str
  sample: run-20261203T060000Z
version:
  description: The collection version the rows carry.
  returned: always
  type: str
  sample: 0.1.0
rails:
  description:
    - Every host rail measured in this run, sorted by host and rail, with its lowest result (C(gbps), in Gb/s; null
      when the test failed), the C(side) and C(peer)/C(peer_rail) it came from, C(baseline_gbps) (null without
      history), C(points) (earlier results in the baseline), C(drop_pct) (percent below the baseline),
      C(line_rate_gbps) and C(reasons) (empty, or C(regression), C(below_line_rate), C(failed)).
  returned: always
  type: list
  elements: dict
  sample: [{host: dgx1, rail: 3, gbps: 346.0, side: client, peer: hgx1, peer_rail: 3, baseline_gbps: 384.0,
            points: 5, drop_pct: 9.9, line_rate_gbps: 400, reasons: [regression]}]
regressions:
  description: The entries of RV(rails) with a reason.
  returned: always
  type: list
  elements: dict
by_host:
  description: Host to one line per flagged rail, naming the rail, the peer and the numbers.
  returned: always
  type: dict
  sample: {dgx1: ["dgx1 rail 3 (as client, peer hgx1 rail 3): 346 Gb/s is 9.9% below its own baseline 384 Gb/s
                   (median of its last 5 results)"]}
harness_errors:
  description: Host to the reasons of its tests the harness failed (C(status=harness_error) in its validation
    result, such as a port taken by another process); they are not measurements and not recorded in the history.
  returned: always
  type: dict
  sample: {dgx1: ["rail 0 mlx5_0 as server <-> hgx1 mlx5_0: harness error, the server did not run: port 18515 is
                   already in use (another process listens on it): not started (failed side: harness)"]}
trend:
  description: C(host/rail) to its latest runs, oldest first, each C({run, time, gbps}) with the run's lowest result.
  returned: always
  type: dict
  sample: {dgx1/3: [{run: run-1, time: 1796270000.0, gbps: 384.0}, {run: run-2, time: 1796273600.0, gbps: 346.0}]}
"""
