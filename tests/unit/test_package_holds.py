"""package_holds: many holds in one call, every name checked before any hold, read back after.

dpkg is faked by a selection table the fake ``dpkg --set-selections`` writes and ``dpkg-query -W`` prints in
the format the module asks for (dpkg-query(1): unknown names go to stderr and make it exit 1)."""

from __future__ import annotations

import socket

import pytest
from ansible.module_utils import basic
from ansible_collections.mlplatform.gpunode.plugins.module_utils import host_state as hs
from ansible_collections.mlplatform.gpunode.plugins.module_utils import package_holds as ph
from ansible_collections.mlplatform.gpunode.plugins.module_utils.parsing import ParseError
from ansible_collections.mlplatform.gpunode.plugins.modules import package_holds
from module_harness import FailJson, patch_exits, run_module

HOST = socket.gethostname()  # every module error names the host (module_utils/host_errors.py)


@pytest.fixture
def dpkg(monkeypatch):
    table = {"nvidia-driver-570-server-open": ["install", "installed"],
             "nvidia-dkms-570-server-open": ["hold", "installed"],
             "old-driver": ["deinstall", "config-files"]}
    calls = []
    state = {"sticky": True}

    def run_command(self, argv, data=None, **kwargs):
        tool = argv[0].rsplit("/", 1)[-1]
        calls.append(argv[1:2])
        if tool == "dpkg-query":
            names = argv[argv.index("--") + 1:]
            out = "".join(f"{n}\t570.172.08-1\t{table[n][0]}\t{table[n][1]}\n" for n in names if n in table)
            missing = [n for n in names if n not in table]
            return (1 if missing else 0), out, "".join(f"dpkg-query: no packages found matching {n}\n"
                                                       for n in missing)
        if tool == "dpkg" and argv[1] == "--set-selections":
            for line in data.splitlines():
                name, selection = line.split()
                if state["sticky"]:
                    table[name][0] = selection
            return 0, "", ""
        raise AssertionError(f"unexpected command {argv}")

    patch_exits(monkeypatch)
    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, name, required=False: f"/usr/bin/{name}")
    return {"table": table, "calls": calls, "state": state}


def test_the_module_reads_dpkg_in_host_states_format():
    """One dpkg-query format and parser for the collection: host_state's."""
    assert "DPKG_FORMAT" in package_holds.__dict__ and package_holds.parse_dpkg_records is hs.parse_dpkg_records
    text = "mlnx-tools\t24.10-1\thold\tinstalled\nold\t1.0\tdeinstall\tconfig-files\n\n"
    assert hs.parse_dpkg_records(text) == {"mlnx-tools": {"version": "24.10-1", "want": "hold", "status": "installed"},
                                           "old": {"version": "1.0", "want": "deinstall", "status": "config-files"}}
    assert hs.parse_dpkg_query(text) == {"packages": {"mlnx-tools": "24.10-1"}, "held": ["mlnx-tools"]}
    with pytest.raises(ParseError, match="expected 4 tab-separated fields"):
        hs.parse_dpkg_records("garbage\n")


def test_plan_holds_skips_held_and_refuses_what_is_not_installed():
    selections = {"a": {"want": "install", "status": "installed"}, "b": {"want": "hold", "status": "installed"},
                  "c": {"want": "deinstall", "status": "config-files"}}
    assert ph.plan_holds(["a", "b"], selections, False) == (["a"], [])
    to_hold, errors = ph.plan_holds(["a", "c", "d"], selections, False)
    assert to_hold == ["a"]
    assert errors == ["c is not an installed package (dpkg status config-files)",
                      "d is not an installed package (dpkg status unknown)"]
    # Check mode: the install before the hold did not run, so an unknown package is one that would be held.
    assert ph.plan_holds(["a", "d"], selections, True) == (["a", "d"], [])


def test_holds_every_unheld_package_in_one_write_and_reads_back(dpkg):
    names = ["nvidia-driver-570-server-open", "nvidia-dkms-570-server-open"]
    result = run_module(package_holds.main, {"names": names})
    assert result["changed"] is True
    assert result["held"] == ["nvidia-driver-570-server-open"]
    assert result["holds"] == {"nvidia-driver-570-server-open": {"before": "install", "after": "hold"},
                               "nvidia-dkms-570-server-open": {"before": "hold", "after": "hold"}}
    assert dpkg["table"]["nvidia-driver-570-server-open"][0] == "hold"
    # Read, one write, read back.
    assert dpkg["calls"] == [["-W"], ["--set-selections"], ["-W"]]
    again = run_module(package_holds.main, {"names": names})
    assert again["changed"] is False and again["held"] == []


def test_check_mode_reports_the_holds_and_writes_nothing(dpkg):
    result = run_module(package_holds.main, {"names": ["nvidia-driver-570-server-open", "not-yet-installed"],
                                             "_ansible_check_mode": True})
    assert result["changed"] is True
    assert result["held"] == ["not-yet-installed", "nvidia-driver-570-server-open"]
    assert result["diff"]["after"] == "not-yet-installed\thold\nnvidia-driver-570-server-open\thold\n"
    assert dpkg["table"]["nvidia-driver-570-server-open"][0] == "install"
    assert ["--set-selections"] not in dpkg["calls"]


def test_a_name_that_is_not_installed_fails_and_nothing_is_held(dpkg):
    result = run_module(package_holds.main, {"names": ["nvidia-driver-570-server-open", "old-driver", "typo"]},
                        expect=FailJson)
    assert "old-driver is not an installed package (dpkg status config-files)" in result["msg"]
    assert "typo is not an installed package (dpkg status unknown)" in result["msg"]
    assert result["msg"].endswith("Nothing was held.")
    assert dpkg["table"]["nvidia-driver-570-server-open"][0] == "install"
    assert ["--set-selections"] not in dpkg["calls"]


def test_a_hold_that_does_not_stick_fails_naming_the_package(dpkg):
    dpkg["state"]["sticky"] = False
    result = run_module(package_holds.main, {"names": ["nvidia-driver-570-server-open"]}, expect=FailJson)
    assert result["msg"] == f"package_holds on {HOST}: the hold did not stick for nvidia-driver-570-server-open"


def test_a_blank_name_is_refused(dpkg):
    result = run_module(package_holds.main, {"names": ["ok", "two words"]}, expect=FailJson)
    assert "blank-containing" in result["msg"] and "'two words'" in result["msg"]
    assert dpkg["calls"] == []
