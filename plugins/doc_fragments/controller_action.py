# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Documentation shared by the collection's controller-side actions (fleet_contract, fleet_report,
role_variables, validation_schedule)."""

from __future__ import annotations


class ModuleDocFragment:
    """The attributes of an action that runs on the controller and reads the facts hosts published (their
    descriptions: ansible.builtin.action_common_attributes and its flow fragment, which the module extends too)."""

    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  action:
    support: full
  async:
    support: none
  platform:
    support: full
    platforms: all
  bypass_host_loop:
    support: none
"""

    # An action meant to run once per play over every host of it.
    RUN_ONCE = r"""
options: {}
attributes:
  run_once:
    description: Can be used with C(run_once).
    support: full
"""
