"""roce_qos: validation, state, diff and actions (pure), and the module on a simulated sysfs tree.

The mlnx_qos output the fake tool prints is the real sample
(real-outputs/roce-lossless-l3-setup-mlnx_qos-cma_roce_tos-netarbiter.txt) with the trust line and
the PFC ``enabled`` row replaced by the fake NIC's state, so the module's parser sees the real layout.
"""

from __future__ import annotations

import re

import pytest
from ansible.module_utils import basic
from ansible_collections.mlplatform.gpunode.plugins.module_utils import rdma_tools, roce_qos
from ansible_collections.mlplatform.gpunode.plugins.modules import roce_qos as roce_qos_module
from module_harness import ExitJson, FailJson, patch_exits, run_module

sim_profile = pytest.importorskip("gpunode.sim.profile")
sim_sysfs = pytest.importorskip("gpunode.sim.sysfs")

QOS_SAMPLE = "roce-lossless-l3-setup-mlnx_qos-cma_roce_tos-netarbiter.txt"
SYSFS_SAMPLE = "roce-qos-sysfs-ecn-cnp-spiderpool.txt"
LOSSLESS = {"trust": "dscp", "pfc": [0, 0, 0, 1, 0, 0, 0, 0], "ecn_np": [3], "ecn_rp": [3], "cnp_dscp": 48,
            "roce_tos": 106, "mtu": 9000}


def first_mlnx_qos_block(real_outputs):
    text = (real_outputs / QOS_SAMPLE).read_text()
    start = text.index("DCBX mode:")
    return text[start:text.index("+ sudo sh", start)]


def sample_body(path):
    """A real-outputs file without its provenance header (lines starting with '#')."""
    return "\n".join(line for line in path.read_text().splitlines() if not line.startswith("#"))


# -- validation ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("field", "value", "needle"), [
    ("pfc", [0, 0, 0, 1, 0, 0, 0], "interfaces[0] (netdev ens1np0).pfc: expected a list of 8 entries"),
    ("pfc", [0, 0, 0, 2, 0, 0, 0, 0], ".pfc: every entry must be 0 or 1, got 2"),
    ("ecn_np", [3, 9], "interfaces[0] (netdev ens1np0).ecn_np: priority 9 is not in 0..7"),
    ("ecn_rp", [-1], ".ecn_rp: priority -1 is not in 0..7"),
    ("roce_tos", 300, "interfaces[0] (netdev ens1np0).roce_tos: expected a ToS byte 0..255, got 300"),
    ("cnp_dscp", 64, ".cnp_dscp: expected a DSCP 0..63, got 64"),
    ("mtu", 12000, ".mtu: expected an MTU 68..9978, got 12000"),
    ("trust", "vlan", ".trust: expected one of pcp, dscp"),
])
def test_validate_names_netdev_and_field(field, value, needle):
    _normalized, errors = roce_qos.validate([{"netdev": "ens1np0", "rdma_device": "mlx5_0", field: value}])
    assert len(errors) == 1
    assert needle in errors[0]


def test_validate_normalizes_and_keeps_only_given_fields():
    normalized, errors = roce_qos.validate([{"netdev": "ens1np0", "rdma_device": "mlx5_0", "ecn_np": [3, "1", 3],
                                             "roce_tos": "106", "pfc": None}])
    assert errors == []
    assert normalized == [{"netdev": "ens1np0", "rdma_device": "mlx5_0", "ecn_np": [1, 3], "roce_tos": 106}]


def test_validate_roce_tos_needs_rdma_device():
    _normalized, errors = roce_qos.validate([{"netdev": "ens1np0", "roce_tos": 106}])
    assert "rdma_device: required with roce_tos" in errors[0]


# -- state from the real samples -----------------------------------------------------------------


def test_state_from_real_mlnx_qos_and_spiderpool_sysfs(real_outputs):
    qos = rdma_tools.parse_mlnx_qos(first_mlnx_qos_block(real_outputs))
    reads = rdma_tools.roce_qos_from_sysfs(rdma_tools.parse_sysfs_reads(sample_body(real_outputs / SYSFS_SAMPLE)))
    eth0 = reads["netdevs"]["eth0"]
    ecn = {field: ["1" if eth0["ecn"][point][p] else "0" for p in range(8)]
           for field, point in roce_qos.ECN_POINTS.items()}
    state = roce_qos.state_from(qos, ecn, str(eth0["cnp_dscp"]), "Global tclass=160", 160, "9000\n")
    assert state == {"trust": "dscp", "pfc": [0, 0, 0, 1, 0, 0, 0, 0], "dcbx_mode": "OS controlled",
                     "ecn_np": list(range(8)), "ecn_rp": list(range(8)), "cnp_dscp": 48, "roce_tos": 160,
                     "cma_roce_tos": 160, "mtu": 9000}
    changes, skipped = roce_qos.diff(state, LOSSLESS)
    assert skipped == {}
    assert changes == {"ecn_np": {"before": list(range(8)), "after": [3]},
                       "ecn_rp": {"before": list(range(8)), "after": [3]},
                       "roce_tos": {"before": 160, "after": 106}, "cma_roce_tos": {"before": 160, "after": 106}}


def test_state_with_unset_traffic_class_and_no_ecn_dir(real_outputs):
    qos = rdma_tools.parse_mlnx_qos(first_mlnx_qos_block(real_outputs))
    state = roce_qos.state_from(qos, {"ecn_np": None, "ecn_rp": None}, None, "", None, "1500\n")
    assert state["roce_tos"] is None and state["ecn_np"] is None and state["cnp_dscp"] is None


def test_firmware_dcbx_leaves_pfc_to_the_switch(real_outputs):
    text = first_mlnx_qos_block(real_outputs).replace("OS controlled", "Firmware controlled")
    text = re.sub(r"enabled(\s+\d)+", "enabled     0   0   0   0   0   0   0   0", text)
    state = {"trust": "dscp", **roce_qos.state_from(rdma_tools.parse_mlnx_qos(text), {}, None, None, None, None)}
    changes, skipped = roce_qos.diff(state, {"trust": "dscp", "pfc": [0, 0, 0, 1, 0, 0, 0, 0]})
    assert changes == {}
    assert "firmware controlled" in skipped["pfc"]


def test_actions_follow_the_real_recipe_order_cma_before_traffic_class(tmp_path):
    files = roce_qos.paths("/sys", "eth4", "mlx5_2")
    current = {"trust": "pcp", "pfc": [0] * 8, "ecn_np": list(range(8)), "ecn_rp": [3], "cnp_dscp": 48,
               "roce_tos": None, "cma_roce_tos": 0, "mtu": 1500, "dcbx_mode": "OS controlled"}
    changes, _ = roce_qos.diff(current, LOSSLESS)
    steps = roce_qos.actions("eth4", "mlx5_2", changes, files)
    assert steps == [
        ("run", ["mlnx_qos", "-i", "eth4", "--trust", "dscp"]),
        ("run", ["mlnx_qos", "-i", "eth4", "--pfc", "0,0,0,1,0,0,0,0"]),
        *[("write", f"/sys/class/net/eth4/ecn/roce_np/enable/{p}", "0") for p in (0, 1, 2, 4, 5, 6, 7)],
        ("run", ["cma_roce_tos", "-d", "mlx5_2", "-t", "106"]),
        ("write", "/sys/class/infiniband/mlx5_2/tc/1/traffic_class", "106"),
        ("write", "/sys/class/net/eth4/mtu", "9000"),
    ]


# -- the module on a simulated HGX tree ----------------------------------------------------------


class FakeTools:
    """mlnx_qos and cma_roce_tos with per-netdev state; prints the real mlnx_qos layout."""

    def __init__(self, template):
        self.template = template
        self.qos = {}
        self.tos = {}
        self.calls = []
        self.ignore_sets = False

    def render(self, netdev):
        state = self.qos.setdefault(netdev, {"trust": "pcp", "pfc": [0] * 8})
        text = self.template.replace("Priority trust state: dscp", f"Priority trust state: {state['trust']}")
        row = "enabled     " + "   ".join(str(v) for v in state["pfc"])
        return re.sub(r"enabled(\s+\d)+", row, text)

    def __call__(self, module, args, **kwargs):
        tool = args[0].rsplit("/", 1)[-1]
        self.calls.append([tool, *args[1:]])
        if tool == "mlnx_qos":
            netdev = args[2]
            if not self.ignore_sets and "--trust" in args:
                self.qos.setdefault(netdev, {"trust": "pcp", "pfc": [0] * 8})["trust"] = args[args.index("--trust") + 1]
            if not self.ignore_sets and "--pfc" in args:
                self.qos.setdefault(netdev, {"trust": "pcp", "pfc": [0] * 8})["pfc"] = [
                    int(v) for v in args[args.index("--pfc") + 1].split(",")]
            return 0, self.render(netdev), ""
        if tool == "cma_roce_tos":
            dev = args[2]
            if "-t" in args and not self.ignore_sets:
                self.tos[dev] = int(args[args.index("-t") + 1])
            return 0, f"{self.tos.get(dev, 0)}\n", ""
        return 127, "", f"{tool}: not found"


@pytest.fixture
def tools(real_outputs, monkeypatch):
    fake = FakeTools(first_mlnx_qos_block(real_outputs))
    patch_exits(monkeypatch)
    monkeypatch.setattr(basic.AnsibleModule, "run_command", lambda self, args, **kw: fake(self, args, **kw))
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, name, required=False: f"/usr/bin/{name}")
    return fake


@pytest.fixture
def hgx(tmp_path):
    """HGX H100 tree; rail 0 is a RoCE CX-7. tc/1/traffic_class is what the DOCA-OFED mlx5 driver adds."""
    root = tmp_path / "sys"
    sim_sysfs.materialize(sim_profile.load_profile("hgx-h100"), root)
    rails = [n for n in (root / "class" / "infiniband").iterdir()]
    for dev in rails:
        (dev / "tc" / "1").mkdir(parents=True)
        (dev / "tc" / "1" / "traffic_class").write_text("")
    net = {p.name: p for p in (root / "class" / "net").iterdir()}
    ethernet_rail = next(name for name in sorted(net) if (net[name] / "ecn").is_dir()
                         and (net[name] / "device" / "infiniband").is_dir())
    dev = next((net[ethernet_rail] / "device" / "infiniband").iterdir()).name
    return root, ethernet_rail, dev


def run(args, expect=ExitJson):
    return run_module(roce_qos_module.main, args, expect)


def test_module_applies_lossless_profile_then_is_idempotent(hgx, tools):
    root, netdev, dev = hgx
    args = {"sysfs_root": str(root), "interfaces": [{"netdev": netdev, "rdma_device": dev, **LOSSLESS}]}
    result = run(args)
    assert result["changed"] is True
    assert set(result["interfaces"][netdev]) == {"trust", "pfc", "ecn_np", "ecn_rp", "roce_tos", "cma_roce_tos",
                                                 "mtu"}
    assert result["dcbx_mode"] == {netdev: "OS controlled"}
    ecn = root / "class" / "net" / netdev / "ecn"
    assert [(ecn / "roce_np" / "enable" / str(p)).read_text().strip() for p in range(8)] == list("00010000")
    assert [(ecn / "roce_rp" / "enable" / str(p)).read_text().strip() for p in range(8)] == list("00010000")
    assert (root / "class" / "infiniband" / dev / "tc" / "1" / "traffic_class").read_text() == "106\n"
    assert (root / "class" / "net" / netdev / "mtu").read_text() == "9000\n"
    assert ["mlnx_qos", "-i", netdev, "--pfc", "0,0,0,1,0,0,0,0"] in tools.calls
    assert ["cma_roce_tos", "-d", dev, "-t", "106"] in tools.calls
    # A real traffic_class reads back "Global tclass=106": emulate the driver's format.
    (root / "class" / "infiniband" / dev / "tc" / "1" / "traffic_class").write_text("Global tclass=106\n")
    again = run(args)
    assert again["changed"] is False
    assert again["interfaces"] == {netdev: {}}
    assert again["current"][netdev] == {**LOSSLESS, "cma_roce_tos": 106, "dcbx_mode": "OS controlled"}


def test_check_mode_shows_pending_changes_and_touches_nothing(hgx, tools):
    root, netdev, dev = hgx
    result = run({"sysfs_root": str(root), "_ansible_check_mode": True, "_ansible_diff": True,
                  "interfaces": [{"netdev": netdev, "rdma_device": dev, **LOSSLESS}]})
    assert result["changed"] is True
    assert result["diff"]["after"][netdev]["pfc"] == [0, 0, 0, 1, 0, 0, 0, 0]
    assert result["current"][netdev]["ecn_np"] == list(range(8))
    assert not any("--pfc" in c or "-t" in c for c in tools.calls)
    assert (root / "class" / "net" / netdev / "ecn" / "roce_np" / "enable" / "0").read_text() == "1\n"


@pytest.mark.parametrize(("field", "value", "needle"), [
    ("pfc", [0, 0, 0, 1, 0, 0, 0], "pfc: expected a list of 8 entries"),
    ("ecn_np", [9], "ecn_np: priority 9 is not in 0..7"),
    ("roce_tos", 300, "roce_tos: expected a ToS byte 0..255, got 300"),
])
def test_bad_value_fails_before_anything_is_read_or_applied(hgx, tools, field, value, needle):
    root, netdev, dev = hgx
    good = {"netdev": netdev, "rdma_device": dev, **LOSSLESS}
    result = run({"sysfs_root": str(root), "interfaces": [good, {**good, "netdev": "other0", field: value}]},
                 FailJson)
    assert needle in result["msg"] and "interfaces[1] (netdev other0)" in result["msg"]
    assert result["msg"].startswith("roce_qos on ")  # names the host
    assert tools.calls == []
    assert (root / "class" / "net" / netdev / "mtu").read_text() != "9000\n"


def test_infiniband_port_is_refused(tmp_path, tools):
    root = tmp_path / "sys"
    sim_sysfs.materialize(sim_profile.load_profile("dgx-h100"), root)
    result = run({"sysfs_root": str(root), "interfaces": [{"netdev": "ibp24s0", "rdma_device": "mlx5_0",
                                                           "trust": "dscp"}]}, FailJson)
    assert "InfiniBand link layer" in result["msg"] and "ibp24s0" in result["msg"]
    assert tools.calls == []


def test_value_that_does_not_stick_fails(hgx, tools):
    root, netdev, dev = hgx
    tools.ignore_sets = True
    result = run({"sysfs_root": str(root), "interfaces": [{"netdev": netdev, "rdma_device": dev, "trust": "dscp"}]},
                 FailJson)
    assert f"netdev {netdev}: trust: wanted dscp, reads back pcp" in result["msg"]


def test_tool_failure_reports_command_and_output(hgx, tools, monkeypatch):
    root, netdev, dev = hgx
    monkeypatch.setattr(basic.AnsibleModule, "run_command",
                        lambda self, args, **kw: (1, "", "Netlink error: Operation not supported"))
    result = run({"sysfs_root": str(root), "interfaces": [{"netdev": netdev, "trust": "dscp"}]}, FailJson)
    assert f"mlnx_qos -i {netdev} failed (rc 1): Netlink error" in result["msg"]


# -- the module against the simulator's mlnx_qos and cma_roce_tos (what a simulated host runs) -----


def test_module_against_the_simulated_tools_then_reboot_state(tmp_path, monkeypatch):
    simhost = pytest.importorskip("simhost")
    host = simhost.make_host(tmp_path / "hgx", "hgx-h100")
    sys_root = host / "sys"

    def sim_run(self, args, **kwargs):
        res = simhost.run_tool(host, args[0].rsplit("/", 1)[-1], *args[1:])
        return res.rc, res.out, res.err

    patch_exits(monkeypatch)
    monkeypatch.setattr(basic.AnsibleModule, "run_command", sim_run)
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, name, required=False: f"/usr/sbin/{name}")
    nics = [p for p in sorted((sys_root / "class" / "net").iterdir()) if (p / "ecn").is_dir()]
    netdev = nics[0].name
    dev = next((nics[0] / "device" / "infiniband").iterdir()).name
    args = {"sysfs_root": str(sys_root), "interfaces": [{"netdev": netdev, "rdma_device": dev, **LOSSLESS}]}
    first = run(args)
    assert first["changed"] is True
    assert first["interfaces"][netdev]["trust"] == {"before": "pcp", "after": "dscp"}
    assert first["interfaces"][netdev]["cma_roce_tos"] == {"before": 0, "after": 106}
    assert first["current"][netdev] == {**LOSSLESS, "cma_roce_tos": 106, "dcbx_mode": "OS controlled"}
    assert "Priority trust state: dscp" in simhost.run_tool(host, "mlnx_qos", "-i", netdev).out
    second = run(args)
    assert second["changed"] is False
