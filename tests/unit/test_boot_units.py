"""The boot_units module (one write per role for its boot units) and the boot_units_plan filter.

The module runs in-process against files under a temporary root; systemctl is a fake that keeps unit
states the way systemd reports them (``systemctl show``), so the tests count daemon-reloads and enables.
"""

from __future__ import annotations

import grp
import os
import pwd
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from ansible.module_utils import basic
from ansible_collections.mlplatform.gpunode.plugins.filter.boot_units import boot_units_plan
from ansible_collections.mlplatform.gpunode.plugins.module_utils import boot_units as bu
from ansible_collections.mlplatform.gpunode.plugins.modules import boot_units
from module_harness import ExitJson, FailJson, patch_exits, run_module

OWNER = pwd.getpwuid(os.geteuid()).pw_name
GROUP = grp.getgrgid(os.getegid()).gr_name
UNIT = "gpunode-sriov.service"


class FakeSystemd:
    """``systemctl show/daemon-reload/enable/disable/start/restart`` over a dict of unit states."""

    def __init__(self, root, known=None, enable_sticks=True):
        self.root = root
        self.known = dict(known or {})  # units systemd knows without a unit file under root
        self.loaded = set()  # unit files seen at the last daemon-reload
        self.enabled, self.active = set(), set()
        self.enable_sticks = enable_sticks
        self.calls = []

    def _unit_dir(self):
        return self.root / "etc/systemd/system"

    def run_command(self, argv, check_rc=False, **_kw):
        verb, args = argv[1], [a for a in argv[2:] if a != "--" and not a.startswith("--")]
        self.calls.append([verb, *args])
        if verb == "daemon-reload":
            unit_dir = self._unit_dir()
            self.loaded = {p.name for p in unit_dir.glob("*") if p.is_file()} if unit_dir.is_dir() else set()
            return 0, "", ""
        if verb == "show":
            blocks = []
            for name in args:
                load = "loaded" if name in self.loaded or name in self.known else "not-found"
                state = "enabled" if name in self.enabled else ("disabled" if load == "loaded" else "")
                active = "active" if name in self.active else "inactive"
                blocks.append(f"Id={name}\nLoadState={load}\nUnitFileState={state}\nActiveState={active}\n")
            return 0, "\n".join(blocks), ""
        if verb == "enable":
            if self.enable_sticks:
                self.enabled.update(args)
            return 0, "", ""
        if verb == "disable":
            self.enabled.difference_update(args)
            return 0, "", ""
        if verb in ("start", "restart"):
            self.active.update(args)
            return 0, "", ""
        return 1, "", f"unexpected {verb}"

    def verbs(self):
        return [c for c in self.calls if c[0] != "show"]


@pytest.fixture
def systemd(monkeypatch, tmp_path):
    fake = FakeSystemd(tmp_path)
    patch_exits(monkeypatch)
    monkeypatch.setattr(basic.AnsibleModule, "run_command", lambda self, argv, **kw: fake.run_command(argv, **kw))
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, name, **kw: f"/usr/bin/{name}")
    return fake


def files_for(root, config='{"pfs": []}\n'):
    return [
        {"path": str(root / "usr/local/libexec/gpunode/sriov-apply"), "content": "#!/bin/sh\necho apply\n",
         "mode": "0755", "owner": OWNER, "group": GROUP},
        {"path": str(root / "etc/gpunode/sriov.json"), "content": config, "mode": "0644", "owner": OWNER,
         "group": GROUP},
        {"path": str(root / "etc/systemd/system" / UNIT), "content": "[Unit]\nDescription=x\n", "mode": "0644",
         "owner": OWNER, "group": GROUP},
    ]


UNITS = [{"name": UNIT, "enabled": True}]


def run(args, check=False, diff=True, expect=ExitJson):
    return run_module(boot_units.main, {**args, "_ansible_check_mode": check, "_ansible_diff": diff}, expect)


def snapshot(files):
    return {f["path"]: (os.stat(f["path"]).st_ino, Path(f["path"]).read_text()) for f in files}


def test_first_call_writes_every_file_reloads_once_and_enables_once(systemd, tmp_path):
    files = files_for(tmp_path)
    res = run({"files": files, "units": UNITS})
    assert res["changed"] is True
    assert res["files_changed"] == [f["path"] for f in files]
    assert res["dirs_created"][0] == str(tmp_path / "usr")
    assert str(tmp_path / "etc/systemd/system") in res["dirs_created"]
    for f in files:
        assert Path(f["path"]).read_text() == f["content"]
        assert f"{os.stat(f['path']).st_mode & 0o7777:04o}" == f["mode"]
        assert res["files"][f["path"]]["reasons"] == ["missing"]
    assert oct(os.stat(tmp_path / "etc/gpunode").st_mode & 0o777) == "0o755"
    assert systemd.verbs() == [["daemon-reload"], ["enable", UNIT]]
    assert res["daemon_reloaded"] is True and res["units_enabled"] == [UNIT]
    assert res["units"][UNIT]["after"] == {"enabled": "enabled", "active": "inactive"}
    assert "skipped" not in res
    assert not [p for p in tmp_path.rglob(".*") if p.is_file()]  # no temporary file left behind


def test_second_call_changes_nothing_and_runs_only_the_read(systemd, tmp_path):
    files = files_for(tmp_path)
    run({"files": files, "units": UNITS})
    systemd.calls.clear()
    res = run({"files": files, "units": UNITS})
    assert res["changed"] is False
    assert res["files_changed"] == [] and res["units_enabled"] == [] and res["daemon_reloaded"] is False
    assert res["diff"] == []
    assert systemd.verbs() == []
    assert len(systemd.calls) == 1  # one systemctl show for all units


def test_check_mode_shows_each_pending_file_and_writes_nothing(systemd, tmp_path):
    files = files_for(tmp_path)
    res = run({"files": files, "units": UNITS}, check=True)
    assert res["changed"] is True
    assert not (tmp_path / "etc").exists() and not (tmp_path / "usr").exists()
    assert systemd.verbs() == []
    assert [d["after_header"] for d in res["diff"][:3]] == [f["path"] for f in files]
    assert res["diff"][0]["before"] == "" and res["diff"][0]["after"] == files[0]["content"]
    assert res["diff"][0]["before_header"].endswith("(missing)")
    assert res["diff"][3]["before_header"] == f"unit {UNIT}"
    assert res["diff"][3]["after"] == "UnitFileState=enabled\nActiveState=inactive\n"
    assert res["daemon_reloaded"] is True and res["units_enabled"] == [UNIT]


def test_drift_of_one_unit_file_is_shown_and_rewritten_alone_with_one_reload(systemd, tmp_path):
    files = files_for(tmp_path)
    run({"files": files, "units": UNITS})
    unit_path = files[2]["path"]
    with open(unit_path, "a") as fh:
        fh.write("ExecStartPre=/bin/false\n")
    before = snapshot(files)
    systemd.calls.clear()

    check = run({"files": files, "units": UNITS}, check=True)
    assert check["changed"] is True and check["files_changed"] == [unit_path]
    assert [d["after_header"] for d in check["diff"]] == [unit_path]
    assert "ExecStartPre=/bin/false" in check["diff"][0]["before"]
    assert "ExecStartPre" not in check["diff"][0]["after"]
    assert check["files"][unit_path]["reasons"] == ["content"]
    assert check["units_enabled"] == [] and check["daemon_reloaded"] is True
    assert snapshot(files) == before  # check mode wrote nothing

    res = run({"files": files, "units": UNITS})
    assert res["files_changed"] == [unit_path]
    assert Path(unit_path).read_text() == files[2]["content"]
    after = snapshot(files)
    for f in files[:2]:
        assert after[f["path"]] == before[f["path"]]  # same inode: not rewritten
    assert systemd.verbs() == [["daemon-reload"]]
    assert res["units_enabled"] == []


def test_mode_drift_is_shown_as_metadata_and_a_config_change_does_not_reload(systemd, tmp_path):
    files = files_for(tmp_path)
    run({"files": files, "units": UNITS})
    os.chmod(files[0]["path"], 0o644)
    systemd.calls.clear()
    res = run({"files": files_for(tmp_path, config='{"pfs": [1]}\n'), "units": UNITS})
    assert res["files_changed"] == [files[0]["path"], files[1]["path"]]
    assert res["files"][files[0]["path"]]["reasons"] == ["mode"]
    assert res["diff"][0]["before"] == f"mode: 0644\nowner: {OWNER}\ngroup: {GROUP}\n"
    assert res["diff"][0]["after"].startswith("mode: 0755\n")
    assert f"{os.stat(files[0]['path']).st_mode & 0o7777:04o}" == "0755"
    assert res["daemon_reloaded"] is False and systemd.verbs() == []


@pytest.mark.parametrize(("bad", "needle"), [
    ({"mode": 420}, "files[1] (%s).mode: 420 is not a quoted 4-digit octal mode"),
    ({"mode": "644"}, "files[1] (%s).mode: '644' is not a quoted 4-digit octal mode"),
    ({"path": "etc/gpunode/sriov.json"}, "files[1].path: 'etc/gpunode/sriov.json' is not an absolute path"),
    ({"path": "/etc/../etc/x"}, "files[1].path: '/etc/../etc/x' is not a normalized path"),
    ({"owner": "no-such-user-xyz"}, "files[1] (%s).owner/group: owner 'no-such-user-xyz' does not exist"),
])
def test_bad_input_fails_naming_the_option_and_writes_nothing(systemd, tmp_path, bad, needle):
    files = files_for(tmp_path)
    files[1] = {**files[1], **bad}
    res = run({"files": files, "units": UNITS}, expect=FailJson)
    assert (needle % files_for(tmp_path)[1]["path"] if "%s" in needle else needle) in res["msg"]
    assert res["msg"].startswith("boot_units on ")
    assert not (tmp_path / "usr").exists() and not (tmp_path / "etc").exists()
    assert systemd.verbs() == []


def test_unit_neither_written_nor_known_fails_and_writes_nothing(systemd, tmp_path):
    files = files_for(tmp_path)
    res = run({"files": files, "units": [*UNITS, {"name": "gpunode-sirov.service", "enabled": True}]},
              expect=FailJson)
    assert "units[1].name: gpunode-sirov.service is neither a unit file of this call" in res["msg"]
    assert not (tmp_path / "etc").exists()
    res = run({"files": files, "units": [{"name": "gpunode-sriov", "enabled": True}]}, expect=FailJson)
    assert "units[0].name: 'gpunode-sriov' is not a systemd unit name" in res["msg"]


def test_a_unit_systemd_already_knows_is_enabled_and_started(systemd, tmp_path):
    systemd.known["openibd.service"] = True
    res = run({"units": [{"name": "openibd.service", "enabled": True, "state": "started"}]})
    assert systemd.verbs() == [["enable", "openibd.service"], ["start", "openibd.service"]]
    assert res["units_started"] == ["openibd.service"] and res["daemon_reloaded"] is False
    assert run({"units": [{"name": "openibd.service", "enabled": True, "state": "started"}]})["changed"] is False


def test_restarted_restarts_only_when_a_file_of_the_call_changed(systemd, tmp_path):
    units = [{"name": UNIT, "enabled": True, "state": "restarted"}]
    run({"files": files_for(tmp_path), "units": units})
    systemd.calls.clear()
    assert run({"files": files_for(tmp_path), "units": units})["changed"] is False
    res = run({"files": files_for(tmp_path, config="{}\n"), "units": units})
    assert res["units_restarted"] == [UNIT] and systemd.verbs() == [["restart", UNIT]]


def test_enable_that_does_not_stick_fails_naming_the_unit(systemd, tmp_path):
    systemd.enable_sticks = False
    res = run({"files": files_for(tmp_path), "units": UNITS}, expect=FailJson)
    assert f"{UNIT}: still needs enable after systemctl (UnitFileState=disabled" in res["msg"]
    assert res["files_changed"]  # what happened is reported


def test_write_that_does_not_stick_fails_naming_the_path(systemd, tmp_path, monkeypatch):
    real = bu.write_file
    monkeypatch.setattr(bu, "write_file", lambda path, content, *a: real(path, content[:-1], *a))
    res = run({"files": files_for(tmp_path), "units": UNITS}, expect=FailJson)
    assert f"{files_for(tmp_path)[0]['path']}: written but reads back" in res["msg"]


def test_parse_systemctl_show_blocks():
    text = ("Id=a.service\nLoadState=loaded\nActiveState=active\nUnitFileState=enabled\n\n"
            "UnitFileState=\nLoadState=not-found\nActiveState=inactive\nId=b.service\n")
    assert bu.parse_systemctl_show(text) == {
        "a.service": {"load": "loaded", "enabled": "enabled", "active": "active"},
        "b.service": {"load": "not-found", "enabled": "", "active": "inactive"}}


def test_unit_paths():
    assert bu.unit_of_path("/etc/systemd/system/x.service") == "x.service"
    assert bu.unit_of_path("/etc/systemd/system/x.service.d/after.conf") is None
    assert bu.is_unit_path("/etc/systemd/system/x.service.d/after.conf")
    assert not bu.is_unit_path("/etc/gpunode/sriov.json")


# -- the plan filter ---------------------------------------------------------------------------------


def state_of(files, units=None):
    return {"files": {f["path"]: bu.desired_state(f) for f in files},
            "units": units if units is not None else {UNIT: {"enabled": "enabled", "active": "inactive"}}}


def test_plan_without_host_state_is_everything(tmp_path):
    files = files_for(tmp_path)
    plan = boot_units_plan(files, UNITS, None)
    assert plan["pending"] is True
    assert set(plan["files"]) == {f["path"] for f in files} and plan["units"] == {UNIT: ["not read"]}
    assert boot_units_plan([], [], None)["pending"] is False


def test_plan_of_a_converged_host_is_empty(tmp_path):
    files = files_for(tmp_path)
    assert boot_units_plan(files, UNITS, state_of(files)) == {"files": {}, "units": {}, "pending": False}


def test_plan_lists_exactly_what_differs(tmp_path):
    files = files_for(tmp_path)
    state = state_of(files, units={UNIT: {"enabled": "disabled", "active": "inactive"}})
    del state["files"][files[0]["path"]]
    state["files"][files[1]["path"]] = {**state["files"][files[1]["path"]], "mode": "0600"}
    state["files"][files[2]["path"]] = {**state["files"][files[2]["path"]], "sha256": "0" * 64}
    plan = boot_units_plan(files, UNITS, state)
    assert plan == {"files": {files[0]["path"]: ["missing"], files[1]["path"]: ["mode"],
                              files[2]["path"]: ["content"]},
                    "units": {UNIT: ["enable"]}, "pending": True}
    started = [{"name": "openibd.service", "enabled": True, "state": "started"}]
    plan = boot_units_plan([], started, {"files": {}, "units": {"openibd.service": {"enabled": "enabled",
                                                                                     "active": "failed"}}})
    assert plan["units"] == {"openibd.service": ["start"]}


def test_plan_rejects_what_the_module_would_refuse(tmp_path):
    files = files_for(tmp_path)
    files[0]["mode"] = 493
    with pytest.raises(AnsibleFilterError, match=r"files\[0\].*mode: 493"):
        boot_units_plan(files, UNITS, None)


def test_plan_from_a_host_read_matches_the_module(systemd, tmp_path):
    """Build the host state with a small read of the converged temp root, as the read-once module would."""
    files = files_for(tmp_path)
    run({"files": files, "units": UNITS})

    def read_state():
        out = {}
        for f in files:
            st, _text = bu.read_file(f["path"])
            if st is not None:
                out[f["path"]] = st
        show = bu.parse_systemctl_show(systemd.run_command(["systemctl", "show", UNIT])[1])
        return {"files": out, "units": {n: {"enabled": s["enabled"], "active": s["active"]} for n, s in show.items()}}

    assert boot_units_plan(files, UNITS, read_state())["pending"] is False
    with open(files[2]["path"], "a") as fh:
        fh.write("# edited\n")
    plan = boot_units_plan(files, UNITS, read_state())
    assert plan == {"files": {files[2]["path"]: ["content"]}, "units": {}, "pending": True}
