"""The sriov and roce_qos roles' decisions, run with ansible-playbook (playbooks/network.yml) on this machine
against materialized trees. Boot units are not installed here (molecule/qos covers them on simulated hosts).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from local_play import fabric

from gpunode.sim.profile import load_profile
from gpunode.sim.sysfs import materialize

pytestmark = pytest.mark.slow  # ansible-playbook runs on materialized hosts (README: slow tests)

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = REPO / "playbooks" / "network.yml"
ANSIBLE_PLAYBOOK = str(Path(sys.executable).with_name("ansible-playbook"))
DGX_RAILS = ["0000:18:00.0", "0000:40:00.0", "0000:4f:00.0", "0000:5e:00.0",
             "0000:9a:00.0", "0000:c0:00.0", "0000:ce:00.0", "0000:dc:00.0"]


def _play(tmp_path: Path, tree: Path, *args, env_extra=None, **extra) -> subprocess.CompletedProcess:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  children:\n    gpu_nodes:\n      hosts:\n        node1:\n"
        f"          ansible_connection: local\n          ansible_python_interpreter: {sys.executable}\n"
    )
    extra_vars = {"gpunode_sysfs_root": str(tree), "discovery_results_dir": str(tmp_path / "results"),
                  "discovery_print_summary": False, "sriov_boot_unit_enabled": False,
                  "roce_qos_boot_unit_enabled": False, **fabric(), **extra}
    dump = tmp_path / "facts.yml"
    dump_play = tmp_path / "dump.yml"
    dump_play.write_text(
        f"- ansible.builtin.import_playbook: {PLAYBOOK}\n"
        "- name: Dump the published facts\n  hosts: gpu_nodes\n  gather_facts: false\n  tasks:\n"
        "    - name: Write them\n      ansible.builtin.copy:\n"
        "        content: \"{{ {'sriov_rails': sriov_rails, 'sriov_contract': sriov_contract,"
        " 'roce_qos_skipped': roce_qos_skipped, 'roce_qos_contract': roce_qos_contract} | to_json }}\"\n"
        f"        dest: {dump}\n        mode: '0644'\n      delegate_to: localhost\n      check_mode: false\n"
    )
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
           "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".cache" / "collections"), "ANSIBLE_NOCOLOR": "1",
           **(env_extra or {})}
    proc = subprocess.run(
        [ANSIBLE_PLAYBOOK, "-i", str(inventory), str(dump_play), "-e", json.dumps(extra_vars), *args],
        capture_output=True, text=True, env=env, check=False, timeout=300,
    )
    # messages are wrapped over lines in the YAML result output; warnings (typos) go to stderr
    proc.text = " ".join((proc.stdout + proc.stderr).split())
    return proc


@pytest.fixture
def dgx_tree(tmp_path) -> Path:
    tree = tmp_path / "sys"
    materialize(load_profile("dgx-h100"), tree)
    return tree


def numvfs(tree, pci):
    return (tree / "bus/pci/devices" / pci / "sriov_numvfs").read_text().strip()


def test_dgx_gets_vfs_on_every_rail_and_qos_is_skipped_on_infiniband(tmp_path, dgx_tree):
    proc = _play(tmp_path, dgx_tree)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [numvfs(dgx_tree, pci) for pci in DGX_RAILS] == ["8"] * 8
    assert numvfs(dgx_tree, "0000:29:00.0") == "0"  # storage card keeps none
    facts = json.loads((tmp_path / "facts.yml").read_text())
    assert facts["sriov_rails"][0] == {"rail": 0, "pci_address": "0000:18:00.0", "pf_name": "ibp24s0",
                                       "rdma_device": "mlx5_0", "num_vfs": 8, "vf_range": "0-7"}
    assert [r["rdma_device"] for r in facts["sriov_rails"]] == [
        "mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]
    assert {(c["scope"], c["setting"], c["value"]) for c in facts["sriov_contract"]} == {("rail", "sriov_num_vfs", 8)}
    assert len(facts["roce_qos_skipped"]) == 8
    assert "InfiniBand link layer" in facts["roce_qos_skipped"][0]["reason"]
    assert facts["roce_qos_contract"] == []
    # No InfiniBand netdev got ECN files or an MTU change.
    assert (dgx_tree / "class/net/ibp24s0/mtu").read_text().strip() != "9000"


def test_check_mode_writes_no_vfs(tmp_path, dgx_tree):
    proc = _play(tmp_path, dgx_tree, "--check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [numvfs(dgx_tree, pci) for pci in DGX_RAILS] == ["0"] * 8
    facts = json.loads((tmp_path / "facts.yml").read_text())
    assert {c["value"] for c in facts["sriov_contract"]} == {0}  # the contract is what is there


def test_more_vfs_than_total_fails_naming_host_netdev_and_variable(tmp_path, dgx_tree):
    proc = _play(tmp_path, dgx_tree, **fabric(nics={"compute": {"num_vfs": 32}}))
    assert proc.returncode != 0
    assert ("node1: netdev ibp24s0 (0000:18:00.0, compute): gpunode_fabric_settings.nics.compute.num_vfs=32 "
            "(fabric default) is more than sriov_totalvfs 16") in proc.text
    assert "NUM_OF_VFS" in proc.text and "nic_firmware" in proc.text
    assert [numvfs(dgx_tree, pci) for pci in DGX_RAILS] == ["0"] * 8


@pytest.mark.parametrize(("qos", "needle"), [
    ({"roce_tos": 160}, "gpunode_fabric_settings.qos.roce_tos: 160 is DSCP 40, which trust dscp puts on priority 5, "
                        "but PFC (pfc_priorities) is on [3]"),
    ({"ecn_rp_priorities": [3, 5]}, "gpunode_fabric_settings.qos: ECN (ecn_np_priorities/ecn_rp_priorities) is on "
                                    "priorities [5], which have no PFC"),
    ({"pfc_priorities": [3, 9]}, "gpunode_fabric_settings.qos.pfc_priorities: 9 is not a priority 0..7"),
    ({"roce_tos": 300}, "gpunode_fabric_settings.qos.roce_tos: 300 is outside 0..255"),
    ({"cnp_dscp": 26}, "gpunode_fabric_settings.qos.cnp_dscp: 26 equals the data DSCP of roce_tos 106"),
    ({"mut": 4200}, "gpunode_fabric_settings.qos: unknown key mut"),
])
def test_contradicting_qos_is_rejected_before_anything_is_applied(tmp_path, dgx_tree, qos, needle):
    proc = _play(tmp_path, dgx_tree, **fabric(qos=qos))
    assert proc.returncode != 0
    assert "node1: fabric default: " + needle in proc.text
    assert [numvfs(dgx_tree, pci) for pci in DGX_RAILS] == ["0"] * 8  # nothing written: not even the VFs
    assert not (tmp_path / "results").exists()


def test_a_variable_that_used_to_declare_qos_fails_and_a_typo_warns(tmp_path, dgx_tree):
    proc = _play(tmp_path, dgx_tree, roce_qos_mtu=4200)
    assert proc.returncode != 0
    assert ("node1: roce_qos_mtu no longer declares a fabric's intent: set gpunode_fabric_settings.qos.mtu in the "
            "fabric's group_vars instead") in proc.text
    assert (dgx_tree / "class/net/ibp24s0/mtu").read_text().strip() != "4200"
    proc = _play(tmp_path, dgx_tree, roce_qos_boot_unit_enabeld=False)
    assert "variable roce_qos_boot_unit_enabeld is not a variable of this role and is ignored; did you mean " \
        "roce_qos_boot_unit_enabled?" in proc.text


def test_an_infiniband_fabric_with_a_qos_profile_fails_naming_the_fabric(tmp_path, dgx_tree):
    proc = _play(tmp_path, dgx_tree, **fabric("ib-east", transport="infiniband", qos={"mtu": 4200}))
    assert proc.returncode != 0
    assert ("node1: fabric ib-east: gpunode_fabric_settings.qos: fabric ib-east is InfiniBand: PFC, ECN and DSCP "
            "trust are RoCE settings") in proc.text


# -- roce_qos on an HGX tree (RoCE rails), with stand-ins for the DOCA tools -----------------------

FAKE_MLNX_QOS = """#!{python}
# Stand-in for mlnx_qos: keeps trust/PFC per netdev in a JSON file, prints the real sample's layout.
import json, os, re, sys
state_file, template_file = {state!r}, {template!r}
try:
    state = json.load(open(state_file))
except FileNotFoundError:
    state = {{}}
args = sys.argv[1:]
netdev = args[args.index("-i") + 1]
entry = state.setdefault(netdev, {{"trust": "pcp", "pfc": [0] * 8}})
if "--trust" in args:
    entry["trust"] = args[args.index("--trust") + 1]
if "--pfc" in args:
    entry["pfc"] = [int(v) for v in args[args.index("--pfc") + 1].split(",")]
if "--trust" in args or "--pfc" in args:
    # Only a set writes, and atomically: the host read runs the reads of all netdevs side by side.
    json.dump(state, open(state_file + ".tmp", "w"))
    os.replace(state_file + ".tmp", state_file)
text = open(template_file).read().replace("Priority trust state: dscp", "Priority trust state: " + entry["trust"])
print(re.sub(r"enabled(\\s+\\d)+", "enabled     " + "   ".join(map(str, entry["pfc"])), text), end="")
"""

FAKE_CMA_ROCE_TOS = """#!{python}
# Stand-in for cma_roce_tos: prints the ToS of the device (0 until set), like the real tool.
import json, os, sys
state_file = {state!r}
try:
    state = json.load(open(state_file))
except FileNotFoundError:
    state = {{}}
args = sys.argv[1:]
dev = args[args.index("-d") + 1]
if "-t" in args:
    state[dev] = int(args[args.index("-t") + 1])
    json.dump(state, open(state_file + ".tmp", "w"))
    os.replace(state_file + ".tmp", state_file)
print(state.get(dev, 0))
"""


@pytest.fixture
def hgx_roce(tmp_path, real_outputs):
    tree = tmp_path / "sys"
    materialize(load_profile("hgx-h100"), tree)
    for dev in (tree / "class" / "infiniband").iterdir():  # what the DOCA-OFED mlx5_ib driver adds
        (dev / "tc" / "1").mkdir(parents=True)
        (dev / "tc" / "1" / "traffic_class").write_text("")
    sample = (real_outputs / "roce-lossless-l3-setup-mlnx_qos-cma_roce_tos-netarbiter.txt").read_text()
    start = sample.index("DCBX mode:")
    template = tmp_path / "mlnx_qos.txt"
    template.write_text(sample[start:sample.index("+ sudo sh", start)])
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, body, state in (("mlnx_qos", FAKE_MLNX_QOS, "qos.json"), ("cma_roce_tos", FAKE_CMA_ROCE_TOS, "tos.json")):
        (bindir / name).write_text(body.format(python=sys.executable, state=str(tmp_path / state),
                                               template=str(template)))
        (bindir / name).chmod(0o755)
    return tree, {"PATH": f"{bindir}:{os.environ['PATH']}"}


OWN_PROFILE = {"pfc_priorities": [4], "ecn_np_priorities": [4], "ecn_rp_priorities": [4], "roce_tos": 138, "mtu": 4200}


def test_a_fabric_with_its_own_profile_is_configured_with_it(tmp_path, hgx_roce):
    """roce-east declares its own profile (PFC and ECN on priority 4, ToS 138 = DSCP 34, MTU 4200): the rails get
    that profile, not the defaults, and the contract the role publishes says so."""
    tree, env = hgx_roce
    proc = _play(tmp_path, tree, env_extra=env, **fabric("roce-east", qos=OWN_PROFILE))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    facts = json.loads((tmp_path / "facts.yml").read_text())
    for rail in facts["sriov_rails"]:
        net = tree / "class" / "net" / rail["pf_name"]
        for point in ("roce_np", "roce_rp"):
            assert [(net / "ecn" / point / "enable" / str(p)).read_text().strip() for p in range(8)] == list("00001000")
        assert (net / "mtu").read_text().strip() == "4200"
        assert (tree / "class/infiniband" / rail["rdma_device"] / "tc/1/traffic_class").read_text().strip() == "138"
    contract = {(c["rail"], c["setting"]): c["value"] for c in facts["roce_qos_contract"]}
    assert {tuple(contract[(r, "qos_pfc")]) for r in range(8)} == {(0, 0, 0, 0, 1, 0, 0, 0)}


def test_hgx_rails_get_the_lossless_profile_then_nothing_changes(tmp_path, hgx_roce):
    tree, env = hgx_roce
    proc = _play(tmp_path, tree, env_extra=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    facts = json.loads((tmp_path / "facts.yml").read_text())
    rails = facts["sriov_rails"]
    assert len(rails) == 8
    for rail in rails:
        net = tree / "class" / "net" / rail["pf_name"]
        for point in ("roce_np", "roce_rp"):
            assert [(net / "ecn" / point / "enable" / str(p)).read_text().strip() for p in range(8)] == list("00010000")
        assert (net / "mtu").read_text().strip() == "9000"
        assert (tree / "class/infiniband" / rail["rdma_device"] / "tc/1/traffic_class").read_text().strip() == "106"
    contract = {(c["rail"], c["setting"]): c["value"] for c in facts["roce_qos_contract"]}
    assert all(c["scope"] == "rail" for c in facts["roce_qos_contract"])
    assert {contract[(r, "qos_pfc")] == [0, 0, 0, 1, 0, 0, 0, 0] for r in range(8)} == {True}
    assert {contract[(r, s)] for r in range(8) for s in ("qos_roce_tos", "qos_cma_roce_tos")} == {106}
    assert {contract[(r, "mtu")] for r in range(8)} == {9000}
    assert {contract[(r, "qos_trust")] for r in range(8)} == {"dscp"}
    again = _play(tmp_path, tree, env_extra=env)
    assert again.returncode == 0, again.stdout
    assert "changed=0" in again.text, again.stdout


@pytest.mark.parametrize(("next_boot", "current", "warns"), [
    ("255", "255", True),   # really wrong in firmware
    ("8", "255", False),    # right for next boot, reboot pending: not a mismatch
    ("8", "8", False),      # the defaults: nic_firmware wrote 8 (issue 16 item 7: no false warning)
])
def test_cx7_28_46_1006_congestion_control_caveat_compares_the_firmware_value(tmp_path, hgx_roce, next_boot,
                                                                             current, warns):
    tree, env = hgx_roce
    rail0 = sorted((tree / "class" / "infiniband").iterdir())[0]
    (rail0 / "fw_ver").write_text("28.46.1006\n")
    pci = Path(os.path.realpath(rail0 / "device")).name
    config = {pci: {"ROCE_CC_PRIO_MASK_P1": {"default": "255", "current": current, "next_boot": next_boot}}}
    proc = _play(tmp_path, tree, "--check", env_extra=env, nic_firmware_config=config)
    assert proc.returncode == 0, proc.stdout
    assert ("congestion control applies globally, so ROCE_CC_PRIO_MASK must be 8" in proc.text) is warns
    if warns:
        assert f"({pci}) ROCE_CC_PRIO_MASK_P1 reads 255 for next boot and 255 now" in proc.text


def test_cx7_congestion_control_mask_unread_says_so(tmp_path, hgx_roce):
    tree, env = hgx_roce
    rail0 = sorted((tree / "class" / "infiniband").iterdir())[0]
    (rail0 / "fw_ver").write_text("28.46.1006\n")
    proc = _play(tmp_path, tree, "--check", env_extra=env)
    assert proc.returncode == 0, proc.stdout
    assert "not read (run the nic_firmware role in the same play)" in proc.text
    assert "priorities [0, 1, 2, 3, 4, 5, 6, 7]" not in proc.text  # the old check of roce_qos_cc_prio_mask
