"""The nic_firmware role with ansible-playbook on this machine: discovery on a materialized DGX tree,
then the role against fake mlxconfig/mlxreg commands on PATH (the boot unit is tested on its own)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import fake_mft
import pytest
from ansible_collections.mlplatform.gpunode.plugins.module_utils.nic_roles import classify
from ansible_collections.mlplatform.gpunode.plugins.module_utils.pci_sysfs import read_sysfs
from local_play import fabric

from gpunode.sim.profile import load_profile
from gpunode.sim.sysfs import materialize

pytestmark = pytest.mark.slow  # ansible-playbook runs on materialized hosts (README: slow tests)

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = str(Path(sys.executable).with_name("ansible-playbook"))
SCRIPT = REPO / "roles" / "nic_firmware" / "files" / "gpunode-roce-accl"


@pytest.fixture(scope="module")
def dgx_tree(tmp_path_factory):
    tree = tmp_path_factory.mktemp("dgx") / "sys"
    materialize(load_profile("dgx-h100"), tree)
    return tree


@pytest.fixture
def fleet(tmp_path, dgx_tree):
    """A fake MFT holding every NIC card of the DGX tree, wrappers on PATH, and a play runner."""
    nics = classify(read_sysfs(str(dgx_tree)))["nics"]
    fake = fake_mft.FakeMft()
    for nic in nics:
        if nic["card"] not in fake.cards:
            fake.add_card(nic["card"], ports=nic["ports"])
    bindir = tmp_path / "bin"
    bindir.mkdir()
    state = tmp_path / "mft.json"
    fake_mft.install(fake, bindir, state)

    def play(check=False, **extra):
        playbook = tmp_path / "play.yml"
        playbook.write_text(
            "- name: Firmware\n  hosts: node1\n  gather_facts: false\n  roles:\n"
            "    - role: mlplatform.gpunode.discovery\n    - role: mlplatform.gpunode.nic_firmware\n")
        (tmp_path / "hosts.yml").write_text(
            f"all:\n  hosts:\n    node1:\n      ansible_connection: local\n"
            f"      ansible_python_interpreter: {sys.executable}\n")
        extra_vars = {"discovery_sysfs_root": str(dgx_tree), "discovery_results_dir": str(tmp_path / "results"),
                      "nic_firmware_results_dir": str(tmp_path / "results"), "nic_firmware_boot_unit_enabled": False,
                      "discovery_print_summary": False, **fabric(), **extra}
        env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "PATH": f"{bindir}:{os.environ['PATH']}",
               "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".cache" / "collections"), "ANSIBLE_NOCOLOR": "1"}
        argv = [ANSIBLE_PLAYBOOK, "-i", str(tmp_path / "hosts.yml"), str(playbook), "-e", json.dumps(extra_vars)]
        proc = subprocess.run(argv + (["--check", "--diff"] if check else []), capture_output=True, text=True,
                              env=env, check=False, timeout=300)
        result = tmp_path / "results" / "nic_firmware.json"
        return proc, (json.loads(result.read_text()) if result.exists() and not check else None)

    rails = [n for n in nics if n["role"] == "compute"]
    return {"fake": lambda: fake_mft.load(state), "save": lambda f: fake_mft.save(f, state), "play": play,
            "rails": rails, "nics": nics}


def recap(proc):
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("node1") and "ok=" in ln)
    return dict(part.split("=") for part in line.split(":", 1)[1].split())


def test_compute_rails_get_the_role_settings_and_nothing_else_changes(fleet):
    proc, result = fleet["play"]()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    fake = fleet["fake"]()
    for rail in fleet["rails"]:
        params = fake.cards[rail["card"]]["params"]
        assert params["NUM_OF_VFS"]["next_boot"] == 8
        assert params["LINK_TYPE_P1"]["next_boot"] == 2
        assert params["ROCE_CC_PRIO_MASK_P1"]["next_boot"] == 8
        assert params["CNP_DSCP_P1"]["next_boot"] == 48
        assert params["NUM_OF_VFS"]["current"] == 16
        assert fake.accl[rail["pci_address"]]["adaptive_routing_forced_en"] == 0
    others = {n["card"] for n in fleet["nics"]} - {r["card"] for r in fleet["rails"]}
    assert others
    for card in others:
        assert fake.cards[card]["params"]["NUM_OF_VFS"]["next_boot"] == 16
    assert result["reboot_required"] is True
    assert sorted(result["pending"]) == sorted(r["pci_address"] for r in fleet["rails"])
    assert {c["NUM_OF_VFS"]["next_boot"] for c in result["config"].values()} == {"8"}
    settings = {e["setting"] for e in result["contract"]}
    assert {"nv_config.NUM_OF_VFS", "nv_config.LINK_TYPE_P1", "roce_accl.adaptive_routing_forced_en",
            "rail_count"} <= settings
    assert {"host": next(e["value"] for e in result["contract"] if e["setting"] == "rail_count")} == {"host": 8}


def test_after_reboot_second_run_changes_nothing(fleet):
    fleet["play"]()
    fake = fleet["fake"]()
    fake.reboot()
    fleet["save"](fake)
    proc, result = fleet["play"]()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "changed: [node1]" not in proc.stdout.split("Configure | Set the NV config")[1].split("TASK")[0]
    assert result["reboot_required"] is False
    proc, _ = fleet["play"]()
    assert recap(proc)["changed"] == "0", proc.stdout
    assert {e["value"] for e in result["contract"] if e["setting"] == "nv_config.NUM_OF_VFS"} == {8}


def test_check_mode_shows_pending_changes_and_writes_nothing(fleet):
    proc, _ = fleet["play"](check=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "*  NUM_OF_VFS" in proc.stdout
    assert "parameter" in proc.stdout and "next boot" in proc.stdout and "desired" in proc.stdout
    fake = fleet["fake"]()
    assert all(card["params"]["NUM_OF_VFS"]["next_boot"] == 16 for card in fake.cards.values())


def test_adaptive_routing_declared_per_fabric(fleet):
    proc, result = fleet["play"](**fabric("fabric-a", nics={"compute": {"adaptive_routing": True}}))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    fake = fleet["fake"]()
    assert {fake.accl[r["pci_address"]]["adaptive_routing_forced_en"] for r in fleet["rails"]} == {1}
    assert {e["value"] for e in result["contract"] if e["setting"] == "roce_accl.adaptive_routing_forced_en"} == {1}


def test_refusing_rail_fails_or_is_skipped(fleet):
    fake = fleet["fake"]()
    bad = fleet["rails"][2]["pci_address"]
    fake.reject.add(bad)
    fleet["save"](fake)
    proc, _ = fleet["play"]()
    assert proc.returncode != 0
    assert f"mlxconfig refused {bad}: Failed to open the device" in proc.stdout
    assert all(c["params"]["NUM_OF_VFS"]["next_boot"] == 16 for c in fleet["fake"]().cards.values())
    proc, result = fleet["play"](nic_firmware_skip_unsupported=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert list(result["skipped"]) == [bad]  # nic_firmware.json key
    assert not any(e["pci_address"] == bad for e in result["contract"] if e["setting"].startswith("nv_config."))


def test_infiniband_transport_sets_ib_and_leaves_roce_accl(fleet):
    proc, result = fleet["play"](**fabric(transport="infiniband"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    fake = fleet["fake"]()
    assert {fake.cards[r["card"]]["params"]["LINK_TYPE_P1"]["next_boot"] for r in fleet["rails"]} == {1}
    assert result["roce_accl"] == {}


def test_boot_program_writes_reads_back_and_fails_loudly(tmp_path):
    fake = fake_mft.FakeMft().add_card("0000:18:00").add_card("0000:40:00")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    state = tmp_path / "mft.json"
    fake_mft.install(fake, bindir, state)
    conf = tmp_path / "roce-accl.conf"
    conf.write_text("# managed\n0000:18:00.0 adaptive_routing_forced_en=0x1\n"
                    "0000:40:00.0 adaptive_routing_forced_en=0x1,roce_tx_window_en=0x1\n")
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}
    proc = subprocess.run([sys.executable, str(SCRIPT), str(conf)], capture_output=True, text=True, env=env,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert "0000:40:00.0: adaptive_routing_forced_en=0x1 roce_tx_window_en=0x1 (read back)" in proc.stdout
    after = fake_mft.load(state)
    assert after.accl["0000:18:00.0"]["adaptive_routing_forced_en"] == 1
    after.reboot()
    after.not_taking["0000:40:00.0"] = {"adaptive_routing_forced_en"}
    fake_mft.save(after, state)
    proc = subprocess.run([sys.executable, str(SCRIPT), str(conf)], capture_output=True, text=True, env=env,
                          check=False)
    assert proc.returncode == 1
    assert ("gpunode-roce-accl: MISMATCH 0000:40:00.0: ROCE_ACCL adaptive_routing_forced_en reads 0x0, "
            "expected 0x1") in proc.stderr


# -- issue 16: typos, keys that match nothing, and a failure midway ------------------------------


def test_unknown_role_key_fails_and_a_misspelled_variable_warns(fleet, tmp_path):
    proc, _ = fleet["play"](**fabric(nics={"compte": {"nv_config": {"NUM_OF_VFS": 4}}}))
    text = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0
    assert ("node1: fabric default: gpunode_fabric_settings.nics: compte is not a NIC role that can be configured; "
            "known: compute, storage, dpu") in text
    assert all(c["params"]["NUM_OF_VFS"]["next_boot"] == 16 for c in fleet["fake"]().cards.values())
    assert not (tmp_path / "results").exists()  # stopped before discovery wrote anything
    proc, _ = fleet["play"](nic_firmware_skip_unsuported=True)
    text = " ".join((proc.stdout + proc.stderr).split())  # the typo is an Ansible warning (stderr)
    assert proc.returncode == 0, text
    assert ("variable nic_firmware_skip_unsuported is not a variable of this role and is ignored; "
            "did you mean nic_firmware_skip_unsupported?") in text


def test_override_on_a_nic_whose_role_has_no_settings_fails(fleet):
    other = next(n for n in fleet["nics"] if n["role"] not in ("compute",))
    proc, _ = fleet["play"](nic_firmware_device_overrides={other["pci_address"]: {"NUM_OF_VFS": 4}})
    text = " ".join(proc.stdout.split())
    assert proc.returncode != 0
    assert (f"nic_firmware_device_overrides names {other['pci_address']} (role {other['role']}), but NICs of "
            "that role get no NV config") in text
    assert fleet["rails"][0]["pci_address"] in text  # the valid keys are listed


def test_a_value_that_does_not_take_effect_after_the_bounded_reboots_is_reported_once(fleet, tmp_path):
    """Item 9: after node_reboot spent its reboots, the pending values are recorded as not in effect, the
    contract keeps the value in effect with the note, and later runs ask for no reboot (and say it once)."""
    proc, result = fleet["play"]()  # sets next boot; the fake's current values stay (no reboot)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert result["reboot_required"] is True and result["not_in_effect"] == {}
    reboot = tmp_path / "results" / "reboot.json"
    reboot.write_text(json.dumps({"required": True, "reasons": ["nic_firmware_reboot_required"], "attempts": 2,
                                  "max_attempts": 2}))
    proc, result = fleet["play"]()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = " ".join(proc.stdout.split())
    assert result["reboot_required"] is False
    stuck = result["not_in_effect"]
    assert sorted(stuck) == sorted(r["pci_address"] for r in fleet["rails"])
    rail = fleet["rails"][0]["pci_address"]
    assert stuck[rail]["NUM_OF_VFS"]["note"] == "set for next boot, not in effect after 2 reboot(s)"
    assert f"{rail} NUM_OF_VFS set for next boot, not in effect after 2 reboot(s)" in text
    noted = [e for e in result["contract"] if e["setting"] == "nv_config.NUM_OF_VFS" and e["pci_address"] == rail]
    assert noted[0]["note"] == stuck[rail]["NUM_OF_VFS"]["note"]
    assert noted[0]["value"] == int(stuck[rail]["NUM_OF_VFS"]["current"])  # the value in effect, not the wish
    # node_reboot then records nothing required; the next run keeps the record and does not say it again.
    reboot.write_text(json.dumps({"required": False, "reasons": [], "attempts": 0, "max_attempts": 2}))
    proc, again = fleet["play"]()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert again["reboot_required"] is False and again["not_in_effect"] == stuck
    assert "not in effect after" not in proc.stdout.replace(json.dumps(stuck), "")
    assert recap(proc)["changed"] == "0"
    # A new wish asks for a reboot again; the values whose wish is the same stay recorded.
    proc, changed = fleet["play"](**fabric(nics={"compute": {"num_vfs": 4}}))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert changed["reboot_required"] is True
    assert all("NUM_OF_VFS" not in params for params in changed["not_in_effect"].values())
    assert changed["not_in_effect"][rail]["LINK_TYPE_P1"] == stuck[rail]["LINK_TYPE_P1"]


def test_failure_midway_is_recorded_in_nic_firmware_json(fleet):
    fake = fleet["fake"]()
    bad = fleet["rails"][-1]
    fake.failing_set.add(bad["pci_address"])
    fleet["save"](fake)
    proc, result = fleet["play"]()
    assert proc.returncode != 0
    assert f"{bad['pci_address']}: mlxconfig set" in proc.stdout and "already written for next boot" in proc.stdout
    assert result["failed"] is True and result["reboot_required"] is True
    written = set(result["written"])
    assert bad["pci_address"] not in written and fleet["rails"][0]["pci_address"] in written
    cards = fleet["fake"]().cards
    # What nic_firmware.json says was written is what the cards hold for next boot.
    for device, params in result["written"].items():
        card = cards[device.rsplit(".", 1)[0]]["params"]
        assert all(str(card[p]["next_boot"]) == v for p, v in params.items() if p in card)


def test_an_out_of_range_override_on_one_card_writes_no_card(fleet):
    """Issue 16 item 11 through the role: card A gets NUM_OF_VFS 4 (a valid override), card B 9999. Every device is
    checked against its own query before any write: the host fails naming card B, NUM_OF_VFS and the range, and no
    card holds a new next-boot value (card A included)."""
    good, bad = fleet["rails"][0]["pci_address"], fleet["rails"][-1]["pci_address"]
    before = {card: {p: v["next_boot"] for p, v in c["params"].items()} for card, c in fleet["fake"]().cards.items()}
    proc, _ = fleet["play"](nic_firmware_device_overrides={good: {"NUM_OF_VFS": 4}, bad: {"NUM_OF_VFS": 9999}})
    text = " ".join(proc.stdout.split())
    assert proc.returncode != 0
    assert bad in text and "NUM_OF_VFS" in text and "9999" in text and "out of range 0..127" in text, text[-3000:]
    after = {card: {p: v["next_boot"] for p, v in c["params"].items()} for card, c in fleet["fake"]().cards.items()}
    assert after == before
