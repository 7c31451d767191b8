"""Bad-input sweep (issue 16): every module's and every role's inputs fed wrong types, unknown keys,
out-of-range values, contradictions and missing paths.

Each case must end in a clear error (the message names what is wrong) with nothing written: the
sysfs tree is byte-for-byte as before, the fake MFT cards hold the same NV config and no tool was
asked to change anything. The counters at the end are the acceptance figures: 0 half-applied, 0
accepted in silence.

Modules run in-process (module_harness). Roles are swept at the level where each check lives
without a playbook run: the types of every role variable through the role's own
``meta/argument_specs.yml`` (what ansible-core validates at role start), and misspelled variables
through the ``unknown_variables`` filter the preflight tasks use. The roles' own checks (ranges,
choices, contradictions, keys that match nothing) are swept in test_role_input_sweep.py, in one play.
The controller-side action plugins run in-process with a task's arguments.
"""

from __future__ import annotations

import hashlib
import os
import socket
from pathlib import Path

import fake_mft
import pytest
import yaml
from ansible.errors import AnsibleActionFail
from ansible.module_utils import basic
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible_collections.mlplatform.gpunode.plugins.action import fleet_contract as fleet_contract_action
from ansible_collections.mlplatform.gpunode.plugins.action import fleet_report as fleet_report_action
from ansible_collections.mlplatform.gpunode.plugins.action import role_variables as role_variables_action
from ansible_collections.mlplatform.gpunode.plugins.action import validation_schedule as validation_schedule_action
from ansible_collections.mlplatform.gpunode.plugins.filter.inputs import unknown_variables
from ansible_collections.mlplatform.gpunode.plugins.modules import (
    boot_units,
    gpu_info,
    host_state,
    ib_write_bw,
    mlxconfig,
    mlxconfig_info,
    mlxfwreset,
    nic_info,
    node_health,
    node_validation,
    package_holds,
    result_files,
    roce_accl,
    roce_qos,
    sriov_vfs,
)
from module_harness import ExitJson, FailJson, PublishedHostVars, action_plugin, patch_exits, run_module

sim_profile = pytest.importorskip("gpunode.sim.profile")
sim_sysfs = pytest.importorskip("gpunode.sim.sysfs")

REPO = Path(__file__).resolve().parents[2]
RAIL = "0000:18:00.0"
DUAL = ("0000:29:00.0", "0000:29:00.1")
OUTCOMES = {"clear_error": 0, "half_applied": 0, "accepted_in_silence": 0}


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A fresh HGX tree, a fake MFT and stand-ins for every other tool, all recording calls."""
    root = tmp_path / "sys"
    sim_sysfs.materialize(sim_profile.load_profile("hgx-h100"), root)
    for dev in (root / "class" / "infiniband").iterdir():
        (dev / "tc" / "1").mkdir(parents=True)
        (dev / "tc" / "1" / "traffic_class").write_text("")
    mft = fake_mft.FakeMft().add_card("0000:18:00").add_card("0000:29:00", ports=2, link=2, name="MCX755106AS-HEA_Ax")
    calls = []

    def run_command(self, argv, **kwargs):
        calls.append(list(argv))
        tool = argv[0].rsplit("/", 1)[-1]
        if tool in ("mlxconfig", "mlxreg", "mlxfwreset"):
            return mft.run(argv)
        return 1, "", f"{tool}: must not run in the sweep"

    patch_exits(monkeypatch)
    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path",
                        lambda self, name, required=False, opt_dirs=None: f"/usr/bin/{name}")
    net = root / "class" / "net"
    rails = [p.name for p in sorted(net.iterdir()) if (p / "ecn").is_dir() and (p / "device" / "infiniband").is_dir()]
    rdma = next((net / rails[0] / "device" / "infiniband").iterdir()).name
    pf = next(p.name for p in sorted((root / "bus" / "pci" / "devices").iterdir())
              if (p / "sriov_totalvfs").exists() and (p / "net").is_dir())
    return {"root": root, "mft": mft, "calls": calls, "netdev": rails[0], "rdma": rdma, "tmp": tmp_path, "pf": pf}


def digest(root):
    """Every file of the tree (path, content) hashed: any write shows."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in sorted(os.walk(root)):
        dirnames.sort()
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            if os.path.islink(path):
                continue
            h.update(path.encode())
            with open(path, "rb") as handle:
                h.update(handle.read())
    return h.hexdigest()


def nv_state(mft):
    return {slot: {p: v["next_boot"] for p, v in card["params"].items()} for slot, card in mft.cards.items()}


def qos_entry(e, **change):
    return {"netdev": e["netdev"], "rdma_device": e["rdma"], "trust": "dscp", "pfc": [0, 0, 0, 1, 0, 0, 0, 0],
            "ecn_np": [3], "ecn_rp": [3], "cnp_dscp": 48, "roce_tos": 106, "mtu": 9000, **change}


# (id, module, kind, args(env) -> dict, needle in the error)
CASES = [
    # roce_qos
    # ansible-core's own message for a list element that is not a dict (it does not name the option).
    ("roce_qos-type", roce_qos, "wrong type", lambda e: {"interfaces": "ens1np0"}, "dictionary requested"),
    ("roce_qos-type-pfc", roce_qos, "wrong type", lambda e: {"interfaces": [qos_entry(e, pfc="yes")]}, "pfc"),
    ("roce_qos-unknown", roce_qos, "unknown key", lambda e: {"interfaces": [qos_entry(e, pfc_prio=[3])]}, "pfc_prio"),
    ("roce_qos-unknown-top", roce_qos, "unknown key", lambda e: {"interfaces": [qos_entry(e)], "sysfsroot": "/"},
     "sysfsroot"),
    ("roce_qos-mtu", roce_qos, "out of range", lambda e: {"interfaces": [qos_entry(e, mtu=12000)]}, "mtu"),
    ("roce_qos-cnp", roce_qos, "out of range", lambda e: {"interfaces": [qos_entry(e, cnp_dscp=64)]}, "cnp_dscp"),
    ("roce_qos-tos", roce_qos, "out of range", lambda e: {"interfaces": [qos_entry(e, roce_tos=256)]}, "roce_tos"),
    ("roce_qos-ecn", roce_qos, "out of range", lambda e: {"interfaces": [qos_entry(e, ecn_np=[8])]}, "ecn_np"),
    ("roce_qos-pfc8", roce_qos, "out of range", lambda e: {"interfaces": [qos_entry(e, pfc=[1] * 7)]}, "pfc"),
    ("roce_qos-ecn-no-pfc", roce_qos, "contradiction", lambda e: {"interfaces": [qos_entry(e, ecn_rp=[3, 4])]},
     "that have no PFC"),
    ("roce_qos-tos-no-pfc", roce_qos, "contradiction",
     lambda e: {"interfaces": [qos_entry(e, pfc=[0, 0, 0, 0, 1, 0, 0, 0], ecn_np=[4], ecn_rp=[4])]},
     "would not be lossless"),
    ("roce_qos-cnp-data", roce_qos, "contradiction", lambda e: {"interfaces": [qos_entry(e, cnp_dscp=26)]},
     "equals the data DSCP"),
    ("roce_qos-twice", roce_qos, "contradiction", lambda e: {"interfaces": [qos_entry(e), qos_entry(e, mtu=4200)]},
     "listed twice"),
    ("roce_qos-root", roce_qos, "missing path",
     lambda e: {"sysfs_root": str(e["tmp"] / "nope"), "interfaces": [qos_entry(e)]}, "does not exist"),
    ("roce_qos-netdev", roce_qos, "missing path", lambda e: {"interfaces": [qos_entry(e, netdev="ens999np0")]},
     "no such interface"),
    ("roce_qos-rdma", roce_qos, "missing path", lambda e: {"interfaces": [qos_entry(e, rdma_device="mlx5_99")]},
     "RDMA device mlx5_99 not found"),
    ("roce_qos-tos-needs-dev", roce_qos, "missing path", lambda e: {"interfaces": [qos_entry(e, rdma_device=None)]},
     "required with roce_tos"),
    # sriov_vfs
    ("sriov-type", sriov_vfs, "wrong type", lambda e: {"pfs": [{"pci_address": e["pf"], "num_vfs": "eight"}]},
     "num_vfs"),
    ("sriov-unknown", sriov_vfs, "unknown key", lambda e: {"pfs": [{"pci_address": e["pf"], "numvfs": 8}]},
     "num_vfs found in pfs"),
    ("sriov-range", sriov_vfs, "out of range", lambda e: {"pfs": [{"pci_address": e["pf"], "num_vfs": 999}]},
     "sriov_totalvfs"),
    ("sriov-negative", sriov_vfs, "out of range", lambda e: {"pfs": [{"pci_address": e["pf"], "num_vfs": -1}]},
     "num_vfs"),
    ("sriov-twice", sriov_vfs, "contradiction",
     lambda e: {"pfs": [{"pci_address": e["pf"], "num_vfs": 4}, {"pci_address": e["pf"], "num_vfs": 8}]},
     "listed twice"),
    ("sriov-root", sriov_vfs, "missing path",
     lambda e: {"sysfs_root": str(e["tmp"] / "nope"), "pfs": [{"pci_address": e["pf"], "num_vfs": 8}]},
     "does not exist"),
    ("sriov-device", sriov_vfs, "missing path", lambda e: {"pfs": [{"pci_address": "0000:99:00.0", "num_vfs": 8}]},
     "0000:99:00.0"),
    # mlxconfig
    ("mlxconfig-type", mlxconfig, "wrong type", lambda e: {"devices": [{"device": RAIL, "settings": "x"}]},
     "settings"),
    ("mlxconfig-unknown", mlxconfig, "unknown key", lambda e: {"devices": [{"device": RAIL, "setting": {}}]},
     "setting"),
    ("mlxconfig-param", mlxconfig, "unknown key",
     lambda e: {"devices": [{"device": RAIL, "settings": {"NUM_OF_VF": 8}}]}, "NUM_OF_VF"),
    ("mlxconfig-vfs", mlxconfig, "out of range",
     lambda e: {"devices": [{"device": RAIL, "settings": {"NUM_OF_VFS": 9999}}]}, "out of range 0..127"),
    ("mlxconfig-bool", mlxconfig, "out of range",
     lambda e: {"devices": [{"device": RAIL, "settings": {"SRIOV_EN": 5}}]}, "is a boolean"),
    ("mlxconfig-link", mlxconfig, "out of range",
     lambda e: {"devices": [{"device": RAIL, "settings": {"LINK_TYPE": 7}}]}, "is not one of"),
    ("mlxconfig-card", mlxconfig, "contradiction",
     lambda e: {"devices": [{"device": DUAL[0], "settings": {"NUM_OF_VFS": 4}},
                            {"device": DUAL[1], "settings": {"NUM_OF_VFS": 8}}]}, "NV config is per card"),
    ("mlxconfig-twice", mlxconfig, "contradiction",
     lambda e: {"devices": [{"device": RAIL, "settings": {"NUM_OF_VFS": 4}},
                            {"device": RAIL, "settings": {"NUM_OF_VFS": 4}}]}, "listed twice"),
    ("mlxconfig-device", mlxconfig, "missing path",
     lambda e: {"devices": [{"device": RAIL, "settings": {"NUM_OF_VFS": 4}},
                            {"device": "0000:99:00.0", "settings": {"NUM_OF_VFS": 4}}]}, "0000:99:00.0"),
    # mlxconfig_info, roce_accl, mlxfwreset
    ("mlxconfig_info-type", mlxconfig_info, "wrong type", lambda e: {"devices": {"a": 1}}, "devices"),
    ("mlxconfig_info-unknown", mlxconfig_info, "unknown key", lambda e: {"devices": [RAIL], "skip": True}, "skip"),
    ("mlxconfig_info-device", mlxconfig_info, "missing path", lambda e: {"devices": ["0000:99:00.0"]}, "0000:99:00.0"),
    ("roce_accl-type", roce_accl, "wrong type", lambda e: {"devices": [{"device": RAIL, "fields": "x"}]}, "fields"),
    ("roce_accl-unknown", roce_accl, "unknown key",
     lambda e: {"devices": [{"device": RAIL, "fields": {"adaptive_routing_forced": 1}}]}, "adaptive_routing_forced"),
    ("roce_accl-range", roce_accl, "out of range",
     lambda e: {"devices": [{"device": RAIL, "fields": {"adaptive_routing_forced_en": 7}}]},
     "adaptive_routing_forced_en"),
    ("roce_accl-device", roce_accl, "missing path",
     lambda e: {"devices": [{"device": "0000:99:00.0", "fields": {"adaptive_routing_forced_en": 1}}]},
     "0000:99:00.0"),
    ("mlxfwreset-type", mlxfwreset, "wrong type", lambda e: {"devices": {"a": 1}}, "devices"),
    ("mlxfwreset-unknown", mlxfwreset, "unknown key", lambda e: {"devices": [RAIL], "force": True}, "force"),
    ("mlxfwreset-device", mlxfwreset, "missing path", lambda e: {"devices": [RAIL, "0000:99:00.0"]},
     "0000:99:00.0: -E- Failed to open device"),
    # discovery modules
    ("nic_info-type", nic_info, "wrong type", lambda e: {"overrides": "x"}, "overrides"),
    ("nic_info-unknown", nic_info, "unknown key", lambda e: {"management_interface": ["bond0"]},
     "management_interface"),
    ("nic_info-override", nic_info, "out of range", lambda e: {"overrides": {RAIL: {"role": "compte"}}}, "compte"),
    ("nic_info-mgmt", nic_info, "missing path", lambda e: {"management_interfaces": ["bnod0"]}, "bnod0"),
    ("nic_info-root", nic_info, "missing path", lambda e: {"sysfs_root": str(e["tmp"] / "nope")}, "does not exist"),
    ("gpu_info-unknown", gpu_info, "unknown key", lambda e: {"nvidia_smi": "/usr/bin/nvidia-smi"}, "nvidia_smi"),
    ("gpu_info-smi", gpu_info, "missing path", lambda e: {"nvidia_smi_path": str(e["tmp"] / "nvidia-smi")},
     "does not exist"),
    ("gpu_info-root", gpu_info, "missing path", lambda e: {"sysfs_root": str(e["tmp"] / "nope")}, "does not exist"),
    # validation, perftest
    ("node_validation-type", node_validation, "wrong type", lambda e: {"hw": "x"}, "hw"),
    ("node_validation-unknown", node_validation, "unknown key",
     lambda e: {"hw": {"gpus": [], "rails": [], "nics": []}, "expect": {"mtuu": 9000}}, "mtuu"),
    ("node_validation-hw", node_validation, "missing path", lambda e: {"hw": {"gpus": []}}, "hw.rails is missing"),
    ("ib_write_bw-type", ib_write_bw, "wrong type",
     lambda e: {"servers": [{"id": "a", "device": "mlx5_0", "port": "eighteen"}]}, "port"),
    ("ib_write_bw-unknown", ib_write_bw, "unknown key",
     lambda e: {"servers": [{"id": "a", "device": "mlx5_0", "port": 18515, "host": "x"}]}, "host"),
    ("ib_write_bw-port", ib_write_bw, "out of range",
     lambda e: {"servers": [{"id": "a", "device": "mlx5_0", "port": 70000}]}, "1..65535"),
    # the host read, boot units, holds, result files, day-two health: refused before any command or write
    ("host_state-type", host_state, "wrong type", lambda e: {"overrides": "x"}, "overrides"),
    ("host_state-unknown", host_state, "unknown key", lambda e: {"detect_managment": True}, "detect_managment"),
    ("host_state-root", host_state, "missing path", lambda e: {"sysfs_root": str(e["tmp"] / "nope")},
     "does not exist"),
    ("boot_units-unknown", boot_units, "unknown key",
     lambda e: {"files": [{"path": "/etc/gpunode/x.conf", "content": "x", "mode": "0644", "user": "root"}]},
     "files.user"),
    ("boot_units-mode", boot_units, "out of range",
     lambda e: {"files": [{"path": "/etc/gpunode/x.conf", "content": "x", "mode": "rwx"}]},
     "is not a quoted 4-digit octal mode"),
    ("boot_units-state", boot_units, "out of range", lambda e: {"units": [{"name": "x.service", "state": "runing"}]},
     "runing"),
    ("boot_units-path", boot_units, "missing path",
     lambda e: {"files": [{"path": "etc/gpunode/x.conf", "content": "x", "mode": "0644"}]}, "is not an absolute path"),
    ("package_holds-type", package_holds, "wrong type", lambda e: {"names": {"a": 1}}, "names"),
    ("package_holds-unknown", package_holds, "unknown key", lambda e: {"names": ["doca-ofed"], "hold": True}, "hold"),
    ("package_holds-name", package_holds, "out of range", lambda e: {"names": ["doca ofed"]},
     "blank-containing package name"),
    ("result_files-unknown", result_files, "unknown key", lambda e: {"maxbytes": 3}, "maxbytes"),
    ("result_files-range", result_files, "out of range", lambda e: {"max_bytes": 0}, "must be a positive number"),
    ("node_health-type", node_health, "wrong type", lambda e: {"hw": "x"}, "hw"),
    ("node_health-int", node_health, "wrong type",
     lambda e: {"hw": {"gpus": [], "rails": [], "nics": []}, "d_state_min_age": "old"}, "d_state_min_age"),
    ("node_health-root", node_health, "missing path",
     lambda e: {"hw": {"gpus": [], "rails": [], "nics": []}, "sysfs_root": str(e["tmp"] / "nope")},
     "is not a directory"),
    ("ib_write_bw-ports", ib_write_bw, "contradiction",
     lambda e: {"servers": [{"id": "a", "device": "mlx5_0", "port": 18515},
                            {"id": "b", "device": "mlx5_3", "port": 18515}]}, "two servers on one port"),
]

CHANGING_ARGS = ("--trust", "--pfc", "-t", "set", "--set", "reset")


@pytest.mark.parametrize(("module", "kind", "build", "needle"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_module_bad_input_is_a_clear_error_with_nothing_written(env, module, kind, build, needle):
    args = {"sysfs_root": str(env["root"])} if "sysfs_root" in _spec_keys(module) else {}
    args.update(build(env))
    before_tree, before_nv = digest(env["root"]), nv_state(env["mft"])
    try:
        result = run_module(module.main, args, FailJson)
    except BaseException as exc:  # ExitJson (accepted) or an uncaught traceback
        if isinstance(exc, ExitJson) or type(exc).__name__ == "Failed":
            OUTCOMES["accepted_in_silence"] += 1
        raise
    written = (digest(env["root"]) != before_tree or nv_state(env["mft"]) != before_nv
               or any(arg in CHANGING_ARGS for call in env["calls"] for arg in call[1:]))
    if written:
        OUTCOMES["half_applied"] += 1
    assert not written, f"{kind}: something was written: {env['calls']}"
    assert needle in result["msg"], result["msg"]
    OUTCOMES["clear_error"] += 1  # counted only once the message names what is wrong


def _spec_keys(module):
    source = Path(module.__file__).read_text()
    return {"sysfs_root"} if '"sysfs_root"' in source else set()


# -- roles: every variable's type through the role's argument_specs; typos through the filter ----

ROLES = sorted(p.parent.parent.name for p in (REPO / "roles").glob("*/meta/argument_specs.yml"))
WRONG = {"bool": "not-a-bool", "int": "ten", "float": "x", "list": {"a": 1}, "dict": "not-a-dict",
         "path": ["a", "b"], "str": {"a": 1}}


def _role_options(role):
    specs = yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    return specs["main"]["options"]


def _role_type_cases():
    for role in ROLES:
        for name, option in _role_options(role).items():
            kind = option.get("type", "str")
            if kind in WRONG and kind not in ("str", "raw", "path"):
                yield pytest.param(role, name, option, id=f"{role}-{name}")


@pytest.mark.parametrize(("role", "name", "option"), list(_role_type_cases()))
def test_role_variable_of_the_wrong_type_is_refused_at_role_start(role, name, option):
    options = {name: {k: v for k, v in option.items() if k in ("type", "elements", "choices", "options")}}
    result = ArgumentSpecValidator(options).validate({name: WRONG[option["type"]]})
    assert result.error_messages, f"{role}: {name}={WRONG[option['type']]!r} accepted"
    assert name in " ".join(result.error_messages)


def _typo(name):
    """A one-letter slip: drop the last-but-one letter (nic_firmware_settings -> nic_firmware_settigs)."""
    return name[:-2] + name[-1]


@pytest.mark.parametrize("role", ROLES)
def test_role_variable_typo_warns_with_the_closest_name(role):
    known = list(_role_options(role))
    for name in known:
        found = unknown_variables([_typo(name), *known], known, f"{role}_")
        assert [f["name"] for f in found] == [_typo(name)]
        assert found[0]["closest"] == name, (name, found)
        assert f"did you mean {name}?" in found[0]["message"]


def _published(role):
    data = yaml.safe_load((REPO / "roles" / role / "vars" / "main.yml").read_text())
    return data[f"__{role}_published"]


@pytest.mark.parametrize("role", ROLES)
def test_every_role_warns_about_its_typos_first(role):
    """Every role's first task (or its preflight's) is role_variables with the role's prefix and published facts,
    after the fabric intent's resolution where the role reads it (once a run, before anything touches a host).
    Only discovery may end first, in a later play of a run whose first play read the host (and warned)."""
    main = yaml.safe_load((REPO / "roles" / role / "tasks" / "main.yml").read_text())
    if "mlplatform.gpunode.fabric_intent" in main[0]:
        assert main[0]["register"] == "gpunode_intent" and main[0]["run_once"] is True, main[0]
        main = main[1:]
    first = main[0]
    if role == "discovery":
        assert first["ansible.builtin.meta"] == "end_role" and "gpunode_hw is defined" in first["when"], first
        first = main[1]
    if "ansible.builtin.import_tasks" in first:
        first = yaml.safe_load((REPO / "roles" / role / "tasks" / first["ansible.builtin.import_tasks"]).read_text())[0]
    args = dict(first["mlplatform.gpunode.role_variables"])
    checks = args.pop("checks", [])  # the role's first input checks may share the task line, after the warning
    assert args == {"prefix": f"{role}_", "published": f"{{{{ __{role}_published }}}}"}, role
    assert isinstance(checks, list) and all("msg" in check for check in checks), role


def _keys(node, out):
    if isinstance(node, dict):
        for key, value in node.items():
            out.add(str(key))
            if key == "register" and isinstance(value, str):
                out.add(value)
            _keys(value, out)
    elif isinstance(node, list):
        for item in node:
            _keys(item, out)
    return out


def test_the_collections_own_files_set_no_variable_a_role_would_warn_about():
    """Every <role>_* name the roles, playbooks, scenarios, inventories and examples set is known to that role
    (an option or a published fact): our own runs warn about nothing, and a role's published facts are listed."""
    names = set()
    for pattern in ("roles/**/*.yml", "playbooks/**/*.yml", "molecule/**/*.yml", "inventories/**/*.yml",
                    "examples/**/*.yml"):
        for path in REPO.glob(pattern):
            for doc in yaml.safe_load_all(path.read_text()):
                _keys(doc, names)
    for role in ROLES:
        known = set(_role_options(role)) | set(_published(role))
        stray = sorted(n for n in names if n.startswith(f"{role}_") and n not in known)
        assert stray == [], f"{role}: {stray} are set but unknown to the role (add to __{role}_published or specs)"
        assert set(_published(role)) <= names, f"{role}: a published name is set nowhere"


# -- action plugins (controller side): run in-process with a task's arguments ------------------

HOST = socket.gethostname()


def test_module_errors_name_the_host(env, monkeypatch):
    """Past Ansible's own argument checks (a wrong type or an unknown key refused while the module object is built;
    Ansible's ``fatal: [host]`` names the host there), a module's error says which host it ran on
    (module_utils/host_errors.py): the message travels without ``fatal: [host]`` (registered results, the run
    summary, the hook's log)."""
    built = []
    init = basic.AnsibleModule.__init__

    def record(self, *args, **kwargs):
        init(self, *args, **kwargs)
        built.append(True)

    monkeypatch.setattr(basic.AnsibleModule, "__init__", record)
    named = 0
    for name, module, _kind, build, _needle in CASES:
        built.clear()
        args = {"sysfs_root": str(env["root"])} if "sysfs_root" in _spec_keys(module) else {}
        args.update(build(env))
        msg = run_module(module.main, args, FailJson)["msg"]
        if built:
            assert f" on {HOST}: " in msg, (name, msg)
            named += 1
    assert named >= len(CASES) // 2  # most cases get past the argument checks


def _contract(value):
    return [{"scope": "rail", "rail": 0, "pci_address": RAIL, "netdev": "eth0",
             "setting": "roce_accl.adaptive_routing_forced_en", "value": value}]


def _hw():
    return {"platform": {"vendor": "NVIDIA", "product": "DGXH100"},
            "rails": [{"rail": 0, "rdma_device": "mlx5_0", "pci_address": RAIL, "netdev": "eth0", "speed_gbps": 400}]}


ACTION_CASES = [
    # (id, plugin, kind, args, task vars builder, needle)
    ("role_variables-prefix", role_variables_action, "wrong type", {"prefix": 5}, lambda t: {},
     "prefix must be a role prefix"),
    ("role_variables-published", role_variables_action, "wrong type", {"prefix": "ofed_", "published": "x"},
     lambda t: {}, "published must be a list"),
    ("role_variables-key", role_variables_action, "unknown key", {"prefix": "ofed_", "publish": []}, lambda t: {},
     "Invalid options for mlplatform.gpunode.role_variables: publish"),
    ("role_variables-specs", role_variables_action, "missing path", {"prefix": "ofed_"},
     lambda t: {"role_path": str(t / "no-role")}, "cannot read the options of"),
    ("fleet_contract-sources", fleet_contract_action, "wrong type", {"sources": "nic_firmware_contract"},
     lambda t: {"hostvars": PublishedHostVars({"a": {}}), "ansible_play_hosts": ["a"]}, "sources must be a list"),
    ("fleet_contract-key", fleet_contract_action, "unknown key", {"fail_on_drfit": False},
     lambda t: {"hostvars": PublishedHostVars({"a": {}}), "ansible_play_hosts": ["a"]},
     "Invalid options for mlplatform.gpunode.fleet_contract: fail_on_drfit"),
    ("fleet_contract-entry", fleet_contract_action, "wrong type", {"output": "{out}/contract.json"},
     lambda t: {"hostvars": PublishedHostVars({"a": {"nic_firmware_contract": [{"setting": "x"}]}}),
                "ansible_play_hosts": ["a"]}, "a: nic_firmware_contract[0]"),
    ("fleet_contract-not-list", fleet_contract_action, "wrong type", {"output": "{out}/contract.json"},
     lambda t: {"hostvars": PublishedHostVars({"a": {"roce_qos_contract": {"setting": "x"}}}),
                "ansible_play_hosts": ["a"]},
     "a: roce_qos_contract must be a list of entries, got dict"),
    ("fleet_report-input", fleet_report_action, "missing path", {"input": "{out}/nope"}, lambda t: {},
     "is not a directory"),
    ("fleet_report-no-input", fleet_report_action, "missing path", {}, lambda t: {},
     "input (the results directory) is required"),
    ("fleet_report-key", fleet_report_action, "unknown key", {"input": "{out}", "outptu": "x"}, lambda t: {},
     "Invalid options for mlplatform.gpunode.fleet_report: outptu"),
    ("fleet_report-escape", fleet_report_action, "wrong type",
     {"input": "{out}", "host_files": {"a": {"files": {"../../x.json": {"content": "{}"}}}}}, lambda t: {},
     "is not a plain file or host name"),
    ("fleet_report-not-text", fleet_report_action, "wrong type",
     {"input": "{out}", "host_files": {"a": {"files": {"ok.json": {"content": "{}"}, "b.json": {"content": 5}}}}},
     lambda t: {}, "a: b.json: the content is not text"),
    ("validation_schedule-range", validation_schedule_action, "out of range", {"forks": 0},
     lambda t: {"hostvars": PublishedHostVars({"a": {"gpunode_hw": _hw()}}), "ansible_play_hosts": ["a"]},
     "forks 0 is out of range 1-10000"),
    ("validation_schedule-port", validation_schedule_action, "out of range", {"base_port": 70000},
     lambda t: {"hostvars": PublishedHostVars({"a": {"gpunode_hw": _hw()}}), "ansible_play_hosts": ["a"]},
     "base_port 70000 is out of range 1-65535"),
    ("validation_schedule-hw", validation_schedule_action, "missing path", {},
     lambda t: {"hostvars": PublishedHostVars({"a": {"gpunode_hw": _hw()}, "b": {}}), "ansible_play_hosts": ["a", "b"]},
     "b: gpunode_hw is not a discovery result with rails"),
    ("validation_schedule-address", validation_schedule_action, "missing path", {},
     lambda t: {"hostvars": PublishedHostVars({"a": {"gpunode_hw": _hw(), "__validation_address": "10.0.0.1"},
                                       "b": {"gpunode_hw": _hw()}}), "ansible_play_hosts": ["a", "b"]},
     "no __validation_address for server host(s) b"),
]


def _tree(path):
    return sorted((str(p.relative_to(path)), p.read_bytes() if p.is_file() else b"") for p in path.rglob("*"))


@pytest.mark.parametrize(("plugin", "kind", "args", "task_vars", "needle"), [c[1:] for c in ACTION_CASES],
                         ids=[c[0] for c in ACTION_CASES])
def test_action_bad_input_is_a_clear_error_with_nothing_written(tmp_path, plugin, kind, args, task_vars, needle):
    out = tmp_path / "results"
    out.mkdir()
    args = {k: v.format(out=out) if isinstance(v, str) else v for k, v in args.items()}
    before = _tree(tmp_path)
    action = action_plugin(plugin, args)
    try:
        result = action.run(task_vars=task_vars(tmp_path))
    except AnsibleActionFail as exc:
        msg = exc.message
    else:
        if not result.get("failed"):
            OUTCOMES["accepted_in_silence"] += 1
        assert result.get("failed"), f"{kind}: accepted: {result}"
        msg = result["msg"]
    if _tree(tmp_path) != before:
        OUTCOMES["half_applied"] += 1
    assert _tree(tmp_path) == before, f"{kind}: something was written"
    assert needle in msg, msg
    OUTCOMES["clear_error"] += 1


def test_sweep_counts_zero_half_applied_zero_silent(request):
    """Runs last (file order): the figures README.md quotes. Every module case that ran counted as a clear error, its
    message checked (-k may deselect some)."""
    ran = [item for item in request.session.items
           if item.originalname in ("test_module_bad_input_is_a_clear_error_with_nothing_written",
                                    "test_action_bad_input_is_a_clear_error_with_nothing_written")]
    assert OUTCOMES["half_applied"] == 0
    assert OUTCOMES["accepted_in_silence"] == 0
    assert OUTCOMES["clear_error"] == len(ran)  # all of CASES in a full run (make unit: --dist loadfile)
