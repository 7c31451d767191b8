"""The run summary of site.yml: one line per host from what the stages left in hostvars."""

from __future__ import annotations

from ansible_collections.mlplatform.gpunode.plugins.filter.run_summary import run_summary, run_summary_lines


def test_one_line_per_host_with_stage_changes_reboot_and_verdict():
    hostvars = {
        "dgx01": {"gpunode_hw": {}, "gpu_driver_installed_version": "570.172.08", "nic_firmware_contract": [],
                  "node_reboot_result": {"rebooted": True, "verified": True, "failed": False},
                  "roce_qos_contract": [], "kubernetes_node_registered": True,
                  "__nic_firmware_nv": {"changed": True, "changes": {"0000:18:00.0": {"NUM_OF_VFS": {}, "SRIOV_EN": {}},
                                                                     "0000:2a:00.0": {"NUM_OF_VFS": {}}}},
                  "__sriov_result": {"changed": True}, "__roce_qos_result": {"changed": False},
                  "validation_result": {"passed": True, "failures": []}},
        "hgx01": {"gpunode_hw": {}, "gpu_driver_installed_version": "570.172.08", "nic_firmware_contract": [],
                  "nic_firmware_reboot_required": True,
                  "node_reboot_result": {"rebooted": False, "verified": False, "failed": True,
                                         "reason": "Reboot | Power-cycle the host from the controller: rc 1"}},
        "hgx02": {"gpunode_hw": {}, "validation_result": {"passed": False, "failures": ["rail 3: link DOWN", "x"]}},
        "new01": {},
    }
    summaries = run_summary(hostvars, ["dgx01", "hgx01", "hgx02", "new01"])
    assert summaries[0] == {"host": "dgx01", "stage": "validate", "changed": ["NV config (3)", "VFs"],
                            "reboot": "rebooted, verified", "validation": "passed"}
    assert summaries[1]["stage"] == "reboot"
    assert summaries[1]["reboot"] == "failed: Reboot | Power-cycle the host from the controller: rc 1"
    assert summaries[1]["validation"] == "not validated"
    assert summaries[2]["validation"] == "failed: rail 3: link DOWN (+1 more)"
    assert summaries[3]["stage"] == "not started" and summaries[3]["reboot"] == "not needed"
    lines = run_summary_lines(summaries)
    assert len(lines) == 5
    assert lines[1].split() == ["dgx01", "validate", "NV", "config", "(3),", "VFs", "|", "rebooted,", "verified",
                                "|", "passed"]
    assert lines[4].startswith("new01  not started  nothing | not needed | not validated")
