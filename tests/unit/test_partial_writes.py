"""No half-applied writes: node_conditions reads and checks every Node before it patches any, and node_health
refuses declared values that cannot be (an unknown ROCE_ACCL field, a negative VF count, a PFC list not of 8)
instead of reporting every rail as drifted."""

from __future__ import annotations

import kubernetes
import pytest
from ansible.errors import AnsibleActionFail
from ansible_collections.mlplatform.gpunode.plugins.action import node_conditions as nc_action
from ansible_collections.mlplatform.gpunode.plugins.modules import node_health as module
from local_play import free_port
from module_harness import ExitJson, FailJson, action_plugin, patch_exits, run_module
from simhost import day_two_host, tool_bin

from gpunode.kapi.server import RunningServer

COND = [{"type": "GPUNodeRemediation", "status": "True", "reason": "Remediating", "message": "attempt 1"}]


@pytest.fixture
def kapi(tmp_path):
    with RunningServer(tmp_path / "kapi", free_port(16551, 16560)) as srv:
        core = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(srv.kubeconfig))
        for name in ("a", "c"):
            core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
        yield srv, core


def _types(core, name):
    status = core.read_node_status(name).status
    return {c.type for c in (status.conditions if status else None) or []}


def test_a_missing_node_fails_the_task_before_any_node_is_patched(kapi):
    srv, core = kapi
    plugin = action_plugin(nc_action, {"kubeconfig": srv.kubeconfig,
                                       "nodes": {"a": COND, "b": COND, "c": COND, "d": COND}})
    with pytest.raises(AnsibleActionFail, match="no Node named b in the cluster; no Node named d in the cluster; "
                                                "no Node was patched"):
        plugin.run(task_vars={})
    assert _types(core, "a") == _types(core, "c") == set()
    ok = action_plugin(nc_action, {"kubeconfig": srv.kubeconfig, "nodes": {"a": COND, "c": COND}}).run(task_vars={})
    assert ok["changed"] and _types(core, "a") == _types(core, "c") == {"GPUNodeRemediation"}


PFC = [0, 0, 0, 1, 0, 0, 0, 0]


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("expect")
    bindir = tool_bin(tmp / "bin", ("nvidia-smi", "dmesg", "mlxreg", "mlnx_qos"))
    hdir, hw = day_two_host(tmp / "host", "hgx-h100", pfc=PFC)
    return tmp, bindir, hdir, hw


@pytest.fixture
def host(simulated, monkeypatch):
    tmp, bindir, hdir, hw = simulated
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    monkeypatch.setenv("GPUNODE_SIM_STATE", str(hdir))
    monkeypatch.setenv("GPUNODE_SIM_NVIDIA_USERSPACE", str(tmp / "no-userspace-file"))
    patch_exits(monkeypatch)
    return hdir, hw


BAD_EXPECT = [
    ({"roce_accl": {"adaptive_routing_forced": 1}}, "expect.roce_accl: the ROCE_ACCL register has no field "
                                                    "'adaptive_routing_forced'"),
    ({"roce_accl": {"ack_dscp": 64}}, "expect.roce_accl.ack_dscp: 64 is not an integer 0..63"),
    ({"roce_accl": {"adaptive_routing_forced_en": 2}}, "expect.roce_accl.adaptive_routing_forced_en: 2 is not an"),
    ({"roce_accl": {"adaptive_routing_forced_en": "on"}}, "expect.roce_accl.adaptive_routing_forced_en: 'on' is not"),
    ({"num_vfs": -1}, "expect.num_vfs: -1 is not a VF count 0..65535"),
    ({"num_vfs": 70000}, "expect.num_vfs: 70000 is not a VF count"),
    ({"link_speed_gbps": 0}, "expect.link_speed_gbps: 0 is not a port rate"),
    ({"qos": {"pfc": [0, 0, 0, 1]}}, "expect.qos.pfc: expected a list of 8 entries"),
    ({"qos": {"pfc": [0, 0, 0, 2, 0, 0, 0, 0]}}, "expect.qos.pfc: every entry must be 0 or 1, got 2"),
    ({"qos": {"trust": "l2"}}, "expect.qos.trust: expected one of pcp, dscp"),
    ({"qos": {"ecn_np": [8]}}, "expect.qos.ecn_np: priority 8 is not in 0..7"),
    ({"qos": {"cnp_dscp": 64}}, "expect.qos.cnp_dscp: expected a DSCP 0..63"),
    ({"qos": {"mtu": 20000}}, "expect.qos.mtu: expected an MTU"),
    ({"qos": {"pfc_priorities": [3, 9]}}, "expect.qos.pfc_priorities: [3, 9] is not a list of priorities 0..7"),
    ({"qos": {"tos": 106}}, "expect.qos has unknown keys tos"),
]


@pytest.mark.parametrize(("expect", "message"), BAD_EXPECT)
def test_an_impossible_declared_value_is_refused_not_reported_as_drift(host, expect, message):
    hdir, hw = host
    result = run_module(module.main, {"sysfs_root": str(hdir / "sys"), "proc_root": str(hdir / "run" / "proc"),
                                      "hw": hw, "expect": expect}, FailJson)
    assert "expect is refused, nothing was read" in result["msg"] and message in result["msg"]


def test_every_problem_is_named_at_once_and_good_values_pass(host):
    hdir, hw = host
    result = run_module(module.main, {"sysfs_root": str(hdir / "sys"), "proc_root": str(hdir / "run" / "proc"),
                                      "hw": hw, "expect": {"num_vfs": -3, "qos": {"pfc": [1]},
                                                           "roce_accl": {"nope": 1}}}, FailJson)
    assert len(result["errors"]) == 3
    good = run_module(module.main, {"sysfs_root": str(hdir / "sys"), "proc_root": str(hdir / "run" / "proc"),
                                    "hw": hw, "expect": {"num_vfs": 8, "roce_accl": {"adaptive_routing_forced_en": 1},
                                                         "qos": {"trust": "dscp", "pfc": [str(v) for v in PFC]}}},
                      ExitJson)
    assert good["conditions"] == []
