"""Issue 16 item 9: an NV config value set for next boot that does not take effect after the bounded reboots
is recorded once, in the contract and the report, and asks for no more reboots until the wish or the firmware
changes (pure parts; the role's run is in test_nic_firmware_role.py)."""

from __future__ import annotations

from ansible_collections.mlplatform.gpunode.plugins.filter.contract import firmware_contract, nv_not_in_effect
from ansible_collections.mlplatform.gpunode.plugins.module_utils.not_in_effect import not_in_effect, reboots_spent
from ansible_collections.mlplatform.gpunode.plugins.plugin_utils.fleet_report import reboot_summary

DEV = "0000:18:00.0"
NV = {"changed": False, "reboot_required": True, "pending": {DEV: ["NUM_OF_VFS"]},
      "devices": {DEV: {"params": {"NUM_OF_VFS": {"default": "16", "current": "16", "next_boot": "4",
                                                  "desired": "4", "change": False}}}},
      "config": {DEV: {"NUM_OF_VFS": {"default": "16", "current": "16", "next_boot": "4"}}}}
FW = {DEV: "28.39.1002"}
SPENT = {"required": True, "reasons": ["nic_firmware_reboot_required"], "attempts": 2, "max_attempts": 2}


def test_reboots_spent_only_when_node_reboot_gave_up_on_the_nic_firmware_reason():
    assert reboots_spent(SPENT) == 2
    assert reboots_spent({**SPENT, "attempts": 1}) == 0
    assert reboots_spent({**SPENT, "reasons": ["ofed_reboot_required"]}) == 0
    assert reboots_spent({**SPENT, "required": False}) == 0
    assert reboots_spent(None) == 0 and reboots_spent({**SPENT, "attempts": "x"}) == 0


def test_pending_after_the_spent_reboots_is_recorded_once_and_covers_the_reboot():
    first = not_in_effect(NV, FW, SPENT, {})
    entry = {"desired": "4", "next_boot": "4", "current": "16", "firmware": "28.39.1002", "reboots": 2,
             "note": "set for next boot, not in effect after 2 reboot(s)"}
    assert first == {"record": {DEV: {"NUM_OF_VFS": entry}}, "new": {DEV: {"NUM_OF_VFS": entry}}, "covered": True}
    # The next run: node_reboot reset its count (nothing asked for a reboot); the record holds, nothing new.
    again = not_in_effect(NV, FW, {"required": False, "attempts": 0}, first["record"])
    assert again == {"record": first["record"], "new": {}, "covered": True}


def test_a_new_wish_or_a_new_firmware_asks_for_a_reboot_again():
    record = not_in_effect(NV, FW, SPENT, {})["record"]
    new_fw = not_in_effect(NV, {DEV: "28.42.1000"}, None, record)
    assert new_fw == {"record": {}, "new": {}, "covered": False}
    wish = {**NV, "devices": {DEV: {"params": {"NUM_OF_VFS": {"current": "16", "next_boot": "8", "desired": "8"}}}}}
    assert not_in_effect(wish, FW, None, record)["covered"] is False


def test_nothing_is_concluded_in_a_run_that_wrote_or_before_the_reboots_are_spent():
    assert not_in_effect({**NV, "changed": True}, FW, SPENT, {})["record"] == {}
    assert not_in_effect(NV, FW, {**SPENT, "attempts": 1}, {})["covered"] is False
    # A pending parameter that is not wished (someone else's) is never covered.
    other = {**NV, "pending": {DEV: ["NUM_OF_VFS", "SRIOV_EN"]}}
    assert not_in_effect(other, FW, SPENT, {})["covered"] is False
    assert nv_not_in_effect({"pending": {}}, None, None, None) == {"record": {}, "new": {}, "covered": False}


def test_the_contract_keeps_the_value_in_effect_with_the_note():
    rails = [{"rail": 0, "pci_address": DEV, "netdev": "ibp24s0"}]
    record = not_in_effect(NV, FW, SPENT, {})["record"]
    entries = firmware_contract(rails, NV["config"], None, ["NUM_OF_VFS"], record)
    assert entries[0]["setting"] == "nv_config.NUM_OF_VFS" and entries[0]["value"] == 16
    assert entries[0]["note"] == "set for next boot, not in effect after 2 reboot(s)"
    assert "note" not in firmware_contract(rails, NV["config"], None, ["NUM_OF_VFS"])[0]


def test_the_report_line_names_the_value_that_did_not_take_effect():
    record = not_in_effect(NV, FW, SPENT, {})["record"]
    line = reboot_summary({"required": False}, {"not_in_effect": record})
    assert line == ("not needed; 0000:18:00.0 NUM_OF_VFS 4 set for next boot, not in effect after 2 reboot(s) "
                    "(in effect 16)")
    assert reboot_summary({"required": False}, {"not_in_effect": {}}) == "not needed"
