"""The node_problem_detector role: one ansible-playbook run on a local host installs the monitor
config, the check script and its settings for a simulated HGX H100 (the host's sysfs and process
table, the simulated nvidia-smi, dmesg, mlxreg and mlnx_qos on the script's PATH). The monitor JSON
is checked against a JSON schema written from NPD's documented config format (the schema also
accepts NPD's own shipped configs), and the script is run directly, as NPD would, on simulated
faults. NPD itself is not packaged, so nothing here runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from ansible_collections.mlplatform.gpunode.plugins.module_utils.intent import resolve_fleet
from local_play import fabric, run_play
from simhost import day_two_host, state, tool_bin

from gpunode.sim import hwstate

REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "tests" / "fixtures" / "npd-custom-plugin-monitor.schema.json").read_text())
TOOLS = ("nvidia-smi", "dmesg", "mlxreg", "mlnx_qos")
PARTS = ("gpu", "xid", "pcie", "rail", "drift", "processes")


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    root = tmp_path_factory.mktemp("npd")
    bindir = tool_bin(root / "bin", TOOLS)
    declared = fabric(link_speed_gbps=400, nics={"compute": {"adaptive_routing": True, "num_vfs": 8}})
    hdir, hw = day_two_host(root / "host", "hgx-h100",
                            intent=resolve_fleet({"npd1": declared})["fabrics"]["default"])
    host_vars = {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable, "gpunode_hw": hw, **declared,
        "node_problem_detector_plugin_dir": str(root / "plugin"),
        "node_problem_detector_config_dir": str(root / "npd"),
        "node_problem_detector_settings_file": str(root / "etc" / "npd-health.json"),
        "node_problem_detector_sysfs_root": str(hdir / "sys"),
        "node_problem_detector_proc_root": str(hdir / "run" / "proc"),
        "node_problem_detector_tool_path": f"{bindir}:/usr/bin:/bin",
        "node_problem_detector_python": sys.executable,
    }
    play = ("- hosts: npd1\n  gather_facts: false\n  roles:\n    - role: mlplatform.gpunode.node_problem_detector\n")
    proc = run_play(root, {"all": {"hosts": {"npd1": host_vars}}}, play)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    monitor = json.loads((root / "npd" / "gpunode-health-monitor.json").read_text())
    return {"root": root, "hdir": hdir, "hw": hw, "monitor": monitor, "env": {"GPUNODE_SIM_STATE": str(hdir),
            "GPUNODE_SIM_NVIDIA_USERSPACE": str(root / "no-userspace-file"), "PATH": "/usr/bin:/bin"}}


def npd_run(installed, part, **overrides):
    """Run the rule of ``part`` as NPD does: its path with its args; returns (exit status, stdout lines)."""
    rule = next(r for r in installed["monitor"]["rules"] if part in r["args"])
    args = list(rule["args"])
    if "config" in overrides:
        args[args.index("--config") + 1] = overrides["config"]
    proc = subprocess.run([rule["path"], *args], capture_output=True, text=True, env=installed["env"], check=False,
                          timeout=120)
    return proc.returncode, proc.stdout.splitlines()


def test_monitor_follows_npd_documented_format(installed):
    monitor = installed["monitor"]
    jsonschema.validate(monitor, SCHEMA)
    assert [c["type"] for c in monitor["conditions"]] == [
        "GPUProblem", "GPUXidProblem", "PCIeLinkProblem", "RailProblem", "RailConfigDrift", "DStateProcessProblem"]
    assert {r["condition"] for r in monitor["rules"]} == {c["type"] for c in monitor["conditions"]}
    assert monitor["pluginConfig"] == {"invoke_interval": "60s", "timeout": "30s", "max_output_length": 200,
                                       "concurrency": 2, "enable_message_change_based_condition_update": True}
    assert all(r["type"] == "permanent" and r["timeout"] == "30s" for r in monitor["rules"])
    assert all(Path(r["args"][0]).is_file() for r in monitor["rules"])


def test_schema_accepts_npd_shipped_configs_and_rejects_mistakes(real_outputs):
    day_two = real_outputs.parent / "real-outputs-day-two"
    if not day_two.is_dir():
        pytest.skip(f"{day_two} is absent")
    for name in ("npd-config-custom-plugin-monitor-k8s-npd.txt", "npd-config-health-checker-kubelet-k8s-npd.txt",
                 "npd-config-network-problem-monitor-k8s-npd.txt"):
        text = "\n".join(line for line in (day_two / name).read_text().splitlines() if not line.startswith("#"))
        jsonschema.validate(json.loads(text), SCHEMA)
    bad = {"plugin": "custom", "pluginConfig": {"timeout": "5 seconds"}, "source": "x", "conditions": [],
           "rules": [{"type": "permanent", "reason": "R", "path": "/x"}]}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, SCHEMA)


def test_settings_carry_discovery_and_declared_values(installed):
    settings = json.loads((installed["root"] / "etc" / "npd-health.json").read_text())
    # The fabric's declaration, as node_health takes it (the same the revalidation judges against).
    assert settings["expect"] == {"link_speed_gbps": 400, "num_vfs": 8, "roce_accl": {"adaptive_routing_forced_en": 1},
                                  "qos": {"trust": "dscp", "pfc_priorities": [3], "ecn_np": [3], "ecn_rp": [3],
                                          "cnp_dscp": 48, "roce_tos": 106, "mtu": 9000}}
    assert [g["pci_address"] for g in settings["hw"]["gpus"]] == [g["pci_address"] for g in installed["hw"]["gpus"]]
    assert settings["hw"]["fabric_manager_required"] is True and len(settings["hw"]["rails"]) == 8
    module_utils = installed["root"] / "plugin" / "lib" / "ansible_collections" / "mlplatform" / "gpunode" / "plugins"
    assert (module_utils / "module_utils" / "node_health.py").read_text() == \
        (REPO / "plugins" / "module_utils" / "node_health.py").read_text()


def test_healthy_host_every_part_exits_0_with_one_line(installed):
    for part in PARTS:
        assert npd_run(installed, part) == (0, [f"{part}: healthy"])


def test_faults_exit_1_naming_the_device(installed):
    hdir, hw = installed["hdir"], installed["hw"]
    gpu, rail, nic = hw["gpus"][3]["pci_address"], hw["rails"][2]["pci_address"], hw["rails"][5]["pci_address"]
    hwstate.set_fault(hdir, "xid", gpu, params=["79"])
    hwstate.set_fault(hdir, "retired_page_pending", gpu)
    hwstate.set_fault(hdir, "rail_rate", rail, params=["200"])
    hwstate.set_fault(hdir, "pcie_width", nic, params=["8"])
    hwstate.set_fault(hdir, "adaptive_routing", nic)
    hwstate.set_fault(hdir, "dstate", "/usr/sbin/lvm", params=["900"])
    try:
        results = {part: npd_run(installed, part) for part in PARTS}
    finally:
        for kind, address in (("xid", gpu), ("retired_page_pending", gpu), ("rail_rate", rail), ("pcie_width", nic)):
            hwstate.set_fault(hdir, kind, address, clear=True)
        hwstate.set_fault(hdir, "adaptive_routing", nic, params=["1"])
        hwstate.set_fault(hdir, "dstate", "-", clear=True)
    expected = {"gpu": ("RowRemapPending", gpu), "xid": ("Xid79", gpu), "pcie": ("PCIeWidthDowngraded", nic),
                "rail": ("RateBelowDiscovered", rail), "drift": ("AdaptiveRoutingChanged", nic),
                "processes": ("ProcessStuckInDState", "pid ")}
    for part, (reason, device) in expected.items():
        code, lines = results[part]
        assert code == 1 and len(lines) == 1, (part, results[part])
        assert lines[0].startswith(reason + ": ") and device in lines[0], (part, lines)
        assert len(lines[0]) <= 200
    assert npd_run(installed, "gpu") == (0, ["gpu: healthy"])


def test_unknown_when_the_check_cannot_run(installed, tmp_path):
    code, lines = npd_run(installed, "gpu", config=str(tmp_path / "missing.json"))
    assert code == 2 and len(lines) == 1 and "cannot run" in lines[0]
    state(installed["hdir"]).unload_module("nvidia")
    try:
        code, lines = npd_run(installed, "gpu")
    finally:
        state(installed["hdir"]).load_module("nvidia", "570.172.08")
    assert code == 1 and lines[0].startswith("NvidiaSmiFailed: nvidia-smi -q: exit status 9")
