#!/usr/bin/python
# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: boot_units
short_description: Write a role's boot unit files, reload systemd once and enable the units, in one call
version_added: 0.1.0
description:
  - One call per role replaces the C(file)/C(copy)/C(template)/C(systemd_service) tasks of its boot units. The contents
    are rendered on the controller (template lookups, C(to_nice_json)) and passed in O(files).
  - Reads the SHA-256 digest, mode, owner and group of every file in O(files) and the C(LoadState), C(UnitFileState)
    and C(ActiveState) of every unit in O(units) with one C(systemctl show); computes what differs; in check mode
    stops there and returns a diff per file (before and after text, as C(copy) and C(template) show it).
  - Validates every file and unit before writing any. A relative or non-normalized path, a mode that is not a quoted
    4-digit octal string, an unknown owner or group, a path whose parent is a file, or a unit that is neither written
    by this call nor known to systemd fails the whole call naming the option (C(files[1].mode), C(units[0].name)) and
    nothing is written.
  - Writes each file that differs atomically (a temporary file in the same directory with the final mode and owner,
    then C(rename(2))), creating missing parent directories with mode C(0755).
  - Then runs C(systemctl daemon-reload) once when a unit file or drop-in changed (O(daemon_reload)), one
    C(systemctl enable) (or C(disable)) for all units that need it, and one C(systemctl start)/C(restart) for the units
    that need it. Every command is an argument list, never a shell.
  - Reads every file and unit back and fails naming the path or unit when a change did not stick.
  - "Sources: systemctl(1) (C(show), C(daemon-reload), C(enable)) U(https://www.freedesktop.org/software/systemd/man/latest/systemctl.html);
    systemd.unit(5) for unit file and drop-in locations
    U(https://www.freedesktop.org/software/systemd/man/latest/systemd.unit.html); rename(2) for the atomic replace."
author:
  - mlplatform.gpunode developers (@mlplatform)
options:
  files:
    description:
      - Every file the role manages, with its full content. Files not listed are left alone.
      - A path under a C(systemd/system) directory (a unit file, or a drop-in such as
        C(/etc/systemd/system/x.service.d/y.conf)) counts as a unit file for O(daemon_reload).
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Absolute, normalized path of the file.
        type: str
        required: true
      content:
        description: The whole content (UTF-8 text). A trailing newline is kept as given.
        type: str
        required: true
      mode:
        description: Permissions as a quoted 4-digit octal string (V('0644'), V('0755')). Integers are refused.
        type: raw
        required: true
      owner:
        description: Owning user name.
        type: str
        default: root
      group:
        description: Owning group name.
        type: str
        default: root
  units:
    description:
      - Units to enable and/or start. Each must be a unit file of O(files) or a unit systemd already knows.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: Unit name with its suffix (V(gpunode-sriov.service)).
        type: str
        required: true
      enabled:
        description: V(true) enables the unit at boot, V(false) disables it, V(null) leaves it as it is.
        type: bool
      state:
        description:
          - V(started) starts the unit when it is not active.
          - V(restarted) restarts it when a file of this call changed, and starts it when it is not active.
          - V(null) (the default) does not start it; a boot unit runs at the next boot.
        type: str
        choices: [started, restarted]
  daemon_reload:
    description:
      - V(auto) runs C(systemctl daemon-reload) once when a unit file or drop-in of O(files) was written.
      - V(always) runs it once even when nothing changed; V(never) does not run it.
    type: str
    choices: [auto, always, never]
    default: auto
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
notes:
  - The C(boot_units_plan) filter compares the same O(files) and O(units) with the C(gpunode_host_state) fact read
    once per run, so a role calls this module only when something differs.
seealso:
  - module: ansible.builtin.copy
  - module: ansible.builtin.systemd_service
"""

EXAMPLES = r"""
- name: Write the SR-IOV boot unit, its script and configuration; reload systemd once; enable the unit
  mlplatform.gpunode.boot_units:
    files:
      - path: /usr/local/libexec/gpunode/sriov-apply
        content: "{{ lookup('ansible.builtin.file', 'sriov-apply', rstrip=false) }}"
        mode: "0755"
      - path: /etc/gpunode/sriov.json
        content: "{{ __sriov_config | to_nice_json(sort_keys=true) }}\n"
        mode: "0644"
      - path: /etc/systemd/system/gpunode-sriov.service
        content: "{{ lookup('ansible.builtin.template', 'gpunode-sriov.service.j2') }}"
        mode: "0644"
    units:
      - name: gpunode-sriov.service
        enabled: true

- name: Enable and start a unit a package installed
  mlplatform.gpunode.boot_units:
    units:
      - name: openibd.service
        enabled: true
        state: started
"""

RETURN = r"""
files:
  description:
    - Per path, the state before and after (C(sha256), C(mode), C(owner), C(group); V(null) when missing) and the
      reasons it was (or in check mode would be) written, among V(missing), V(content), V(mode), V(owner), V(group).
  returned: success
  type: dict
  sample:
    /etc/systemd/system/gpunode-sriov.service:
      before: null
      after: {sha256: "9f2c...", mode: "0644", owner: root, group: root}
      reasons: [missing]
files_changed:
  description: The paths written (in check mode, that would be written), in the order of O(files).
  returned: success
  type: list
  elements: str
  sample: [/etc/systemd/system/gpunode-sriov.service]
dirs_created:
  description: Parent directories created (in check mode, that would be created), outermost first.
  returned: success
  type: list
  elements: str
  sample: [/usr/local/libexec/gpunode]
daemon_reloaded:
  description: Whether C(systemctl daemon-reload) ran (in check mode, would run). It runs at most once.
  returned: success
  type: bool
units:
  description: Per unit, C(enabled) (C(UnitFileState)) and C(active) (C(ActiveState)) before and after, and the actions.
  returned: success
  type: dict
  sample:
    gpunode-sriov.service:
      before: {enabled: disabled, active: inactive}
      after: {enabled: enabled, active: inactive}
      actions: [enable]
units_enabled:
  description: Units enabled (in check mode, that would be enabled) by the one C(systemctl enable).
  returned: success
  type: list
  elements: str
units_disabled:
  description: Units disabled (in check mode, that would be disabled).
  returned: success
  type: list
  elements: str
units_started:
  description: Units started (in check mode, that would be started).
  returned: success
  type: list
  elements: str
units_restarted:
  description: Units restarted because a file of this call changed (in check mode, that would be restarted).
  returned: success
  type: list
  elements: str
msg:
  description: On failure, every problem found, naming the host, the option (C(files[1].mode)) or the path or unit.
  returned: failure
  type: str
  sample: "boot_units on gpu01: files[1] (/etc/gpunode/sriov.json).mode: 420 is not a quoted 4-digit octal mode"
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.mlplatform.gpunode.plugins.module_utils import boot_units as bu
from ansible_collections.mlplatform.gpunode.plugins.module_utils.host_errors import name_the_host


def _show(module, names):
    """One ``systemctl show`` for all units -> ``{name: {load, enabled, active}}``."""
    if not names:
        return {}
    rc, out, err = module.run_command(
        [module.get_bin_path("systemctl", required=True), "show",
         "--property=Id,LoadState,UnitFileState,ActiveState", "--", *names])
    if rc != 0:
        raise bu.BootUnitsError(f"systemctl show {' '.join(names)} failed (rc {rc}): {err.strip()}")
    by_id = bu.parse_systemctl_show(out)
    # systemctl prints the blocks in argument order; an unknown unit keeps its name as Id.
    return {name: by_id.get(name, {"load": "not-found", "enabled": "", "active": "inactive"}) for name in names}


def _unit_after_text(before, actions):
    """The unit's state as it will be, for the check-mode diff (``UnitFileState``/``ActiveState``)."""
    enabled = {"enable": "enabled", "disable": "disabled"}
    state = next((enabled[a] for a in actions if a in enabled), before["enabled"])
    active = "active" if {"start", "restart"} & set(actions) else before["active"]
    note = " (restarted)" if "restart" in actions else ""
    return f"UnitFileState={state}\nActiveState={active}{note}\n"


def main():
    module = AnsibleModule(
        argument_spec={
            "files": {"type": "list", "elements": "dict", "default": [],
                      "options": {"path": {"type": "str", "required": True},
                                  "content": {"type": "str", "required": True},
                                  "mode": {"type": "raw", "required": True},
                                  "owner": {"type": "str", "default": "root"},
                                  "group": {"type": "str", "default": "root"}}},
            "units": {"type": "list", "elements": "dict", "default": [],
                      "options": {"name": {"type": "str", "required": True},
                                  "enabled": {"type": "bool"},
                                  "state": {"type": "str", "choices": list(bu.UNIT_STATES)}}},
            "daemon_reload": {"type": "str", "choices": ["auto", "always", "never"], "default": "auto"},
        },
        supports_check_mode=True,
    )
    host = name_the_host(module, "boot_units")

    def fail(errors, **extra):
        module.fail_json(msg=f"boot_units on {host}: " + "; ".join(errors), errors=errors, **extra)

    files, units, errors = bu.validate(module.params["files"], module.params["units"])
    if errors:
        fail(errors)

    # Read: every file's state and text, every unit's state, the ids and directories the writes need.
    current, texts, ids, dirs = {}, {}, {}, []
    for i, f in enumerate(files):
        try:
            current[f["path"]], texts[f["path"]] = bu.read_file(f["path"])
            for d in bu.missing_dirs(f["path"]):
                if d not in dirs:
                    dirs.append(d)
        except bu.BootUnitsError as exc:
            errors.append(f"files[{i}]: {exc}")
        try:
            ids[f["path"]] = bu.resolve_ids(f["owner"], f["group"])
        except bu.BootUnitsError as exc:
            errors.append(f"files[{i}] ({f['path']}).owner/group: {exc}")
    try:
        unit_state = _show(module, [u["name"] for u in units])
    except bu.BootUnitsError as exc:
        fail([str(exc)])
    errors.extend(bu.check_units_known(units, files, unit_state))
    if errors:
        fail(errors)

    # Plan (pure).
    fplan = bu.plan_files(files, current)
    to_write = [p for p in fplan if p["reasons"]]
    written_paths = [p["path"] for p in to_write]
    reload_needed = module.params["daemon_reload"] == "always" or (
        module.params["daemon_reload"] == "auto" and any(bu.is_unit_path(p) for p in written_paths))
    uplan = bu.plan_units(units, unit_state, bool(to_write))
    content = {f["path"]: f["content"] for f in files}

    def by_action(action):
        return [name for name, actions in uplan.items() if action in actions]

    result = {
        "files": {p["path"]: {"before": p["before"], "after": p["after"], "reasons": p["reasons"]} for p in fplan},
        "files_changed": written_paths,
        "dirs_created": [d for d in dirs if any(p.startswith(d + "/") for p in written_paths)],
        "daemon_reloaded": reload_needed,
        "units": {u["name"]: {"before": {k: unit_state[u["name"]][k] for k in ("enabled", "active")},
                              "after": {k: unit_state[u["name"]][k] for k in ("enabled", "active")},
                              "actions": uplan[u["name"]]} for u in units},
        "units_enabled": by_action("enable"),
        "units_disabled": by_action("disable"),
        "units_started": by_action("start"),
        "units_restarted": by_action("restart"),
    }
    diff = []
    for p in to_write:
        before_text = texts[p["path"]] if texts[p["path"]] is not None else (
            "" if p["before"] is None else f"(binary or large file, sha256 {p['before']['sha256']})\n")
        diff.append(bu.diff_entry(p["path"], before_text, content[p["path"]], p["before"], p["after"]))
    for name, actions in uplan.items():
        if actions:
            before = result["units"][name]["before"]
            diff.append({"before_header": f"unit {name}", "after_header": f"unit {name}",
                         "before": f"UnitFileState={before['enabled']}\nActiveState={before['active']}\n",
                         "after": _unit_after_text(before, actions)})
    changed = bool(to_write or reload_needed or any(uplan.values()))
    if not changed or module.check_mode:
        module.exit_json(changed=changed, diff=diff, **result)

    # Apply.
    for d in result["dirs_created"]:
        try:
            os.mkdir(d, 0o755)
        except FileExistsError:
            pass
        except OSError as exc:
            fail([f"{d}: cannot create the directory: {exc.strerror}"], **result)
    for p in to_write:
        f = next(x for x in files if x["path"] == p["path"])
        try:
            bu.write_file(f["path"], f["content"], f["mode"], *ids[f["path"]])
        except bu.BootUnitsError as exc:
            fail([str(exc)], **result)
    systemctl = module.get_bin_path("systemctl", required=True) if (reload_needed or any(uplan.values())) else None
    if reload_needed:
        module.run_command([systemctl, "daemon-reload"], check_rc=True)
    for verb, names in (("enable", result["units_enabled"]), ("disable", result["units_disabled"]),
                        ("start", result["units_started"]), ("restart", result["units_restarted"])):
        if names:
            rc, out, err = module.run_command([systemctl, verb, "--", *names])
            if rc != 0:
                fail([f"systemctl {verb} {' '.join(names)} failed (rc {rc}): {(err or out).strip()}"], **result)

    # Read back.
    for p in to_write:
        now, _text = bu.read_file(p["path"])
        result["files"][p["path"]]["after"] = now
        if bu.file_reasons(p["after"], now):
            errors.append(f"{p['path']}: written but reads back {now} instead of {p['after']}")
    if units:
        after = _show(module, [u["name"] for u in units])
        for u in units:
            name = u["name"]
            result["units"][name]["after"] = {k: after[name][k] for k in ("enabled", "active")}
            left = [a for a in bu.unit_actions(u, after[name], False) if a != "restart"]
            if left:
                errors.append(f"{name}: still needs {', '.join(left)} after systemctl (UnitFileState="
                              f"{after[name]['enabled']}, ActiveState={after[name]['active']})")
    if errors:
        fail(errors, **result)
    module.exit_json(changed=True, diff=diff, **result)


if __name__ == "__main__":
    main()
