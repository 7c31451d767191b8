"""The fabric declaration (module_utils/intent.py): its schema and resolution, and one setting changed in the
declaration only reaching every consumer of the resolved intent.

A simulated HGX H100 is converged to a fabric's declaration (NV config in effect after a reboot, VFs, adaptive
routing, the QoS profile) and read with the host_state module, as the discovery role reads it. Then one setting of
the declaration changes, and nothing else: the configuration's plan (what the role's module call would change, and
what check mode shows), the fleet contract, validation's node checks and node_health each name that setting.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from ansible.module_utils import basic
from ansible_collections.mlplatform.gpunode.plugins.filter.device_plans import FilterModule as Plans
from ansible_collections.mlplatform.gpunode.plugins.module_utils import intent
from ansible_collections.mlplatform.gpunode.plugins.module_utils.contract import compare, firmware_entries
from ansible_collections.mlplatform.gpunode.plugins.module_utils.mlxconfig import normalize_value
from ansible_collections.mlplatform.gpunode.plugins.module_utils.validation import check_node, observed_from_host_state
from ansible_collections.mlplatform.gpunode.plugins.modules import host_state
from ansible_collections.mlplatform.gpunode.plugins.modules import node_health as health_module
from ansible_collections.mlplatform.gpunode.plugins.plugin_utils.fleet_report import contract_table
from local_play import fabric
from module_harness import ExitJson, patch_exits, run_module
from simhost import day_two_host, run_tool, tool_bin

REPO = Path(__file__).resolve().parents[2]
PLANS = Plans().filters()
BASE = {"link_speed_gbps": 400, "nics": {"compute": {"adaptive_routing": True, "num_vfs": 8}}}


def resolved(name="roce1", **settings):
    return intent.resolve_fleet({"h1": fabric(name, **settings)})["fabrics"][name]


def errors_of(hosts):
    with pytest.raises(intent.IntentError) as raised:
        intent.resolve_fleet(hosts)
    return raised.value.errors


# -- the schema and the resolution ---------------------------------------------------------------------------------


def test_defaults_fill_a_roce_fabric_and_derive_the_firmware_settings():
    roce = resolved()
    compute = roce["nics"]["compute"]
    assert compute["nv_config"] == {"SRIOV_EN": True, "NUM_OF_VFS": 8, "LINK_TYPE": "ETH", "ATS_ENABLED": False,
                                    "ROCE_CC_PRIO_MASK": 8, "CNP_DSCP": 48, "CNP_802P_PRIO": 6}
    assert compute["adaptive_routing"] is False  # a RoCE fabric's compute rails are always managed
    assert roce["nics"]["storage"] == {"nv_config": {}, "adaptive_routing": None, "num_vfs": 0, "vf_trust": None,
                                       "vf_spoofchk": None}
    assert roce["qos"]["pfc_priorities"] == [3] and roce["qos"]["roce_tos"] == 106 and roce["qos"]["mtu"] == 9000
    assert roce["expect"]["qos"] == {"trust": "dscp", "pfc_priorities": [3], "ecn_np": [3], "ecn_rp": [3],
                                     "cnp_dscp": 48, "roce_tos": 106, "mtu": 9000}
    assert roce["health_expect"] == {"link_speed_gbps": None, "num_vfs": 8,
                                     "roce_accl": {"adaptive_routing_forced_en": 0}, "qos": roce["expect"]["qos"]}


def test_infiniband_sets_ib_and_manages_neither_roce_accl_nor_qos():
    ib = resolved("ib1", transport="infiniband", nics={"compute": {"num_vfs": 4, "nv_config": {"ATS_ENABLED": None}}})
    assert ib["nics"]["compute"]["nv_config"] == {"SRIOV_EN": True, "NUM_OF_VFS": 4, "LINK_TYPE": "IB"}
    assert ib["nics"]["compute"]["adaptive_routing"] is None and ib["qos"] is None
    assert ib["expect"]["link_layer"] == "InfiniBand" and ib["expect"]["roce_accl"] == {} and ib["expect"]["qos"] == {}


def test_ecn_rp_priorities_decide_the_congestion_control_mask():
    own = resolved(qos={"pfc_priorities": [3, 4], "ecn_np_priorities": [3, 4], "ecn_rp_priorities": [3, 4]})
    assert own["nics"]["compute"]["nv_config"]["ROCE_CC_PRIO_MASK"] == 24


@pytest.mark.parametrize(("hosts", "needle"), [
    ({"a": {}}, "a: GPU node in no fabric: gpunode_fabric is not set"),
    ({"a": {"gpunode_fabric": "f1"}}, "a: fabric f1: gpunode_fabric_settings is not set"),
    ({"a": {"gpunode_fabric": "f1", "gpunode_fabric_settings": {}}},
     "a: fabric f1: gpunode_fabric_settings.transport is not set (infiniband or roce; there is no default)"),
    ({"a": fabric("f1", transport="ethernet")},
     "a: fabric f1: gpunode_fabric_settings.transport: 'ethernet' is not one of infiniband, roce"),
    ({"a": fabric("f1", mtu=9000)}, "a: fabric f1: gpunode_fabric_settings: unknown key mtu"),
    ({"a": fabric("f1", nics={"management": {"num_vfs": 1}})},
     "gpunode_fabric_settings.nics: management is not a NIC role that can be configured (never configured)"),
    ({"a": fabric("f1", nics={"compute": {"num_vfs": -1}})},
     "gpunode_fabric_settings.nics.compute.num_vfs: -1 is outside 0..127"),
    ({"a": fabric("f1", nics={"compute": {"adaptive_routing": "yes"}})},
     "gpunode_fabric_settings.nics.compute.adaptive_routing: 'yes' is not a boolean"),
    ({"a": fabric("f1", nics={"compute": {"nv_config": {"num_of_vfs": 4}}})},
     "'num_of_vfs' is not an NV config parameter name"),
    ({"a": fabric("f1", link_speed_gbps=300)}, "gpunode_fabric_settings.link_speed_gbps: 300 is not one of"),
    ({"a": fabric("f1", qos={"pfc_priorities": [3, 3]})}, "qos.pfc_priorities: [3, 3] names a priority twice"),
    ({"a": fabric("f1", qos={"trust": "DSCP"})}, "qos.trust: 'DSCP' is not one of dscp, pcp"),
    ({"a": fabric("f1", qos={"pfc_priorities": [4]})},
     "ECN (ecn_np_priorities/ecn_rp_priorities) is on priorities [3], which have no PFC"),
    ({"a": fabric("f1", transport="infiniband", nics={"compute": {"adaptive_routing": True}})},
     "adaptive routing is the subnet manager's job"),
    ({"a": {**fabric("f1"), "roce_qos_pfc_priorities": [3]}},
     "a: roce_qos_pfc_priorities no longer declares a fabric's intent: set gpunode_fabric_settings.qos.pfc_priorities"),
    ({"a": fabric("f1"), "b": fabric("f1", qos={"mtu": 4200})},
     "fabric f1: gpunode_fabric_settings of b differs from that of a: a fabric has one declaration"),
    ({"a": fabric("f/1")}, "a: gpunode_fabric: 'f/1' is not a fabric name"),
])
def test_a_bad_declaration_names_the_hosts_the_fabric_and_the_variable(hosts, needle):
    hosts = {h: {**v, "moved": [n for n in v if n in intent.MOVED]} for h, v in hosts.items()}
    assert any(needle in e for e in errors_of(hosts)), errors_of(hosts)


def test_every_problem_is_reported_at_once_and_many_hosts_are_summarized():
    hosts = {f"n{i:03d}": fabric("f1", qos={"mtu": 1}) for i in range(200)}
    hosts["x"] = {}
    errors = errors_of(hosts)
    assert errors == ["x: GPU node in no fabric: gpunode_fabric is not set (put the host in a fabric's inventory "
                      "group, whose group_vars set gpunode_fabric and gpunode_fabric_settings)",
                      "n000, n001, n002 and 197 more: fabric f1: gpunode_fabric_settings.qos.mtu: 1 is outside "
                      "1280..9978"]


def test_variables_md_is_the_schema():
    """docs/variables.md holds the generated table of gpunode_fabric_settings (regenerate: python -c in its header)."""
    text = (REPO / "docs" / "variables.md").read_text()
    assert intent.variables_markdown() in text


def test_resolution_is_one_pass_a_declaration_checked_once_per_fabric(monkeypatch):
    """4,096 hosts in 16 fabrics: each fabric's declaration is checked once, every other host compared with it."""
    calls = []
    real = intent.resolve_fabric
    monkeypatch.setattr(intent, "resolve_fabric", lambda name, settings: calls.append(name) or real(name, settings))
    hosts = {f"h{i}": fabric(f"f{i % 16}", nics={"compute": {"num_vfs": i % 16}}) for i in range(4096)}
    out = intent.resolve_fleet(hosts)
    assert sorted(calls) == sorted(f"f{i}" for i in range(16)) and len(out["hosts"]) == 4096
    assert out["fabrics"]["f5"]["nics"]["compute"]["num_vfs"] == 5


# -- one setting changed in the declaration only: every consumer follows -------------------------------------------

SIM_TOOLS = {"mlxconfig", "mlxreg", "mlnx_qos", "cma_roce_tos", "nvidia-smi"}


@pytest.fixture(scope="module")
def converged(tmp_path_factory):
    """An HGX H100 converged to the BASE declaration of fabric roce1, and its read (as the discovery role reads it)."""
    root = tmp_path_factory.mktemp("intent")
    base = resolved(**BASE)
    hdir, hw = day_two_host(root / "host", "hgx-h100", intent=base)
    return {"root": root, "dir": hdir, "hw": hw, "base": base}


@pytest.fixture
def host(converged, monkeypatch):
    hdir = converged["dir"]

    def run_command(self, argv, **kwargs):
        tool = argv[0].rsplit("/", 1)[-1]
        if tool in SIM_TOOLS:
            res = run_tool(hdir, tool, *argv[1:])
            return res.rc, res.out, res.err
        if tool == "systemctl":
            return 0, "", ""
        raise AssertionError(f"unexpected command {argv}")

    patch_exits(monkeypatch)
    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path",
                        lambda self, name, required=False, opt_dirs=None: f"/usr/bin/{name}" if name in SIM_TOOLS
                        else None)
    (converged["root"] / "files").mkdir(exist_ok=True)
    state = run_module(host_state.main, {"sysfs_root": str(hdir / "sys"), "root": str(converged["root"] / "files"),
                                         "neighbours": False})["host_state"]
    return {**converged, "state": state}


def plans(fabric_intent, state):
    """What the roles' module calls would change on the host (check mode shows these changes, before -> after)."""
    nics = state["hardware"]["nics"]
    return {"nv_config": PLANS["nv_config_plan"](state, intent.nv_config_devices(fabric_intent, nics)),
            "roce_accl": PLANS["roce_accl_plan"](state, intent.roce_accl_devices(fabric_intent, nics)),
            "vfs": PLANS["vf_plan"](state, [{"pci_address": p["pci_address"], "num_vfs": p["num_vfs"]}
                                            for p in intent.vf_pfs(fabric_intent, nics)]),
            "qos": PLANS["qos_plan"](state, intent.qos_interfaces(fabric_intent, nics))}


def contract_entries(state, hw):
    """The contract the roles publish from what they read back (nic_firmware, sriov, roce_qos)."""
    rails = hw["rails"]
    config = {pci: dict(params) for pci, params in state["nv_config"].items()}
    entries = firmware_entries(rails, config, state["roce_accl"])
    for rail in rails:
        base = {"scope": "rail", "rail": rail["rail"], "pci_address": rail["pci_address"], "netdev": rail["netdev"]}
        entries.append({**base, "setting": "sriov_num_vfs", "value": int(state["vfs"][rail["pci_address"]]["numvfs"])})
        qos = state["qos"][rail["netdev"]]
        for field in ("trust", "pfc", "ecn_np", "ecn_rp", "cnp_dscp", "roce_tos", "mtu"):
            entries.append({**base, "setting": "mtu" if field == "mtu" else f"qos_{field}", "value": qos[field]})
    return entries


def health(host, fabric_intent, monkeypatch):
    bindir = tool_bin(host["root"] / "bin", ("nvidia-smi", "dmesg", "mlxreg", "mlnx_qos"))
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    monkeypatch.setenv("GPUNODE_SIM_STATE", str(host["dir"]))
    monkeypatch.setenv("GPUNODE_SIM_NVIDIA_USERSPACE", str(host["root"] / "no-userspace-file"))
    args = {"sysfs_root": str(host["dir"] / "sys"), "proc_root": str(host["dir"] / "run" / "proc"), "hw": host["hw"],
            "expect": fabric_intent["health_expect"]}
    monkeypatch.setattr(basic.AnsibleModule, "run_command", RUN_COMMAND)
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", GET_BIN_PATH)
    return run_module(health_module.main, args, ExitJson)


RUN_COMMAND = basic.AnsibleModule.run_command
GET_BIN_PATH = basic.AnsibleModule.get_bin_path

# setting -> (the declaration with it changed, what each consumer names: configuration plan, contract setting,
# validation check, node_health condition type); None where the consumer does not hold that setting.
CHANGES = {
    "adaptive routing": ({"nics": {"compute": {"adaptive_routing": False, "num_vfs": 8}}},
                         "roce_accl", "roce_accl.adaptive_routing_forced_en", "roce_accl", "RailRoceAcclDrift"),
    "NV config key": ({"nics": {"compute": {"adaptive_routing": True, "num_vfs": 8,
                                            "nv_config": {"ATS_ENABLED": True}}}},
                      "nv_config", "nv_config.ATS_ENABLED", "nv_config", None),
    "VF count": ({"nics": {"compute": {"adaptive_routing": True, "num_vfs": 4}}},
                 "vfs", "sriov_num_vfs", "vfs", "RailVFCountDrift"),
    "trust": ({"qos": {"trust": "pcp"}}, "qos", "qos_trust", "qos", "RailQoSDrift"),
    "PFC priority": ({"qos": {"pfc_priorities": [3, 5]}}, "qos", "qos_pfc", "qos", "RailQoSDrift"),
    "MTU": ({"qos": {"mtu": 4200}}, "qos", "mtu", "qos", "RailQoSDrift"),
    "link speed": ({"link_speed_gbps": 800}, None, None, "link", "RailSpeedDegraded"),
}


RAIL_CHECKS = {"link", "nv_config", "roce_accl", "vfs", "qos"}


def test_the_converged_host_matches_its_declaration_everywhere(host, monkeypatch):
    base, state, hw = host["base"], host["state"], host["hw"]
    assert {name: plan["run"] for name, plan in plans(base, state).items()} == dict.fromkeys(plans(base, state), False)
    declared = {"roce1": intent.declared_contract(base, normalize_value)}
    assert compare({"h1": {"fabric": "roce1", "entries": contract_entries(state, hw)}}, declared=declared)["ok"]
    assert contract_table({"h1": {"fabric": "roce1", "contracts": {"nic_firmware_contract": contract_entries(
        state, hw)}}}, declared)["fabrics"]["roce1"]["drift"] == []
    checks = check_node(hw, observed(state, hw, base["expect"]), base["expect"])
    # The rails' checks (the host's software - fabric manager, nvidia_peermem - is not the declaration's).
    assert [c["reason"] for c in checks if c["status"] == "fail" and c["check"] in RAIL_CHECKS] == []
    assert {c["check"] for c in checks if c["status"] == "pass"} >= RAIL_CHECKS
    assert health(host, base, monkeypatch)["conditions"] == []


def observed(state, hw, expect):
    """What validation judges the node on: this run's host read (validation_node_from_read)."""
    found, reason = observed_from_host_state(state, hw, expect)
    assert found is not None, reason
    return found


@pytest.mark.parametrize("setting", list(CHANGES))
def test_one_setting_changed_in_the_declaration_reaches_every_consumer(host, monkeypatch, setting):
    changed_settings, plan_name, contract_setting, check_name, condition = CHANGES[setting]
    declaration = copy.deepcopy(BASE)
    for key, value in changed_settings.items():
        declaration[key] = value
    changed = resolved(**declaration)
    state, hw = host["state"], host["hw"]
    # Configuration and check mode: exactly the concern that holds the setting plans a change.
    ran = {name for name, plan in plans(changed, state).items() if plan["run"]}
    expected_plans = {plan_name} if plan_name else set()
    if setting == "VF count":
        expected_plans.add("nv_config")  # the firmware's NUM_OF_VFS follows the VF count
    assert ran == expected_plans, (setting, ran)
    # The fleet contract: the host, converged to the old declaration, now breaks it on that setting.
    declared = {"roce1": intent.declared_contract(changed, normalize_value)}
    result = compare({"h1": {"fabric": "roce1", "entries": contract_entries(state, hw)}}, declared=declared)
    drifted = {row["setting"] for row in result["drift"]}
    if contract_setting:
        assert contract_setting in drifted and all(row["declared"] for row in result["drift"]), (setting, drifted)
    else:
        assert result["ok"], drifted
    # The fleet report: its drift section and the host's cells follow the declaration too.
    by_source = {"nic_firmware_contract": [], "sriov_contract": [], "roce_qos_contract": []}
    for entry in contract_entries(state, hw):
        source = ("sriov_contract" if entry["setting"] == "sriov_num_vfs" else
                  "roce_qos_contract" if entry["setting"].startswith("qos_") or entry["setting"] == "mtu" else
                  "nic_firmware_contract")
        by_source[source].append(entry)
    table = contract_table({"h1": {"fabric": "roce1", "contracts": by_source}}, declared)["fabrics"]["roce1"]
    reported = {finding["column"].split(".", 1)[1] for finding in table["drift"]}
    assert reported == drifted, (setting, reported, drifted)
    # Validation's node checks.
    failed = {c["check"] for c in check_node(hw, observed(state, hw, changed["expect"]), changed["expect"])
              if c["status"] == "fail"}
    assert check_name in failed, (setting, failed)
    # node_health (day two, revalidation and remediation).
    conditions = {c["type"] for c in health(host, changed, monkeypatch)["conditions"]}
    if condition:
        assert condition in conditions, (setting, conditions)
    else:
        assert not conditions, conditions
