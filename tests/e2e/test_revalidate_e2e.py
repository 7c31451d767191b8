"""End to end: day-two revalidation (playbooks/revalidate.yml) of a converged DGX H100 + HGX H100 pair.

site.yml converges the pair against the Kubernetes API emulator. A first revalidate.yml run passes both hosts
and starts the bandwidth history (SQLite on the controller). Then two faults are injected behind the collection's
back, as in the field: adaptive routing flipped on one HGX rail, and one DGX rail down to 200 Gb/s. The second
run must fail exactly those hosts, each with a line naming the device: the HGX for its ROCE_ACCL drift, the DGX
for its degraded rail and for a bandwidth regression against that rail's own history (the rail's line rate is
now 200 Gb/s, so the result still passes the line-rate threshold: only the history sees the drop). The history
holds every result of both runs. Revalidation changes no setting: the adaptive routing stays flipped.

Then the hook's revalidation schedule repairs the fleet (``revalidate:`` with ``remediate: true``, one scheduled run
through ``gpunode hook revalidate``, which runs playbooks/remediate.yml with ansible-runner as the service's
schedule does): the HGX, its adaptive routing still flipped, is tainted, cordoned and drained (its training pod
evicted, its DaemonSet pod left), site.yml re-runs for it alone and puts adaptive routing back, and it is
revalidated (RDMA against the DGX as its healthy reference peer) and returned to service; the DGX, whose only
finding is the failed test against the HGX, waits for it.
The hook's day-two database holds every bandwidth result and every step, the Node carries the day-two conditions,
and the fleet report shows the events.

Day two under faults (issue 42): in the second run an nvidia-smi that hangs on the DGX is ended by its timeout, named
as a condition of that host, and the rest of the DGX and the whole HGX are still read and measured. Before the hook's
schedule runs, an administrator has cordoned the HGX by hand, and the day-two database still holds the record of a
host taken out of service by an earlier remediation and since removed from the inventory and the cluster: the record
is released with an event naming it, and the HGX's remediation leaves the administrator's cordon in place.

Run with ``make e2e`` (needs podman and the simulated-host image; ``make image``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sqlite3
import subprocess
from pathlib import Path

import e2e_shell  # tests/e2e is on sys.path (pytest's prepend import mode)
import kubernetes
import pytest
import yaml
from ansible_collections.mlplatform.gpunode.plugins.plugin_utils import history_db

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
HOSTS = {"rv-dgx": "dgx-h100", "rv-hgx": "hgx-h100"}
KAPI_PORT = 18646


def sh(*argv, env, check=True):
    """e2e_shell.sh from the repository root, with time for a fresh site.yml."""
    return e2e_shell.sh(*argv, env=env, check=check, cwd=REPO, timeout=1800)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    state = tmp_path_factory.mktemp("revalidate")
    env = {**os.environ, "GPUNODE_SIM_DIR": str(state), "GPUNODE_REPORT_DIR": str(state / "report"),
           "ANSIBLE_NOCOLOR": "1"}
    kapi = state / "kapi"
    inventory = state / "hosts.yml"
    sh("gpunode", "sim", "up", "--replace", *[f"{h}={p}" for h, p in HOSTS.items()], env=env)
    sh("gpunode", "kapi", "start", "--port", str(KAPI_PORT), "--state", str(kapi), env=env)
    try:
        sh("gpunode", "sim", "inventory", "-o", str(inventory), *HOSTS, env=env)
        sh("ansible-playbook", "playbooks/sim_cluster.yml",
           "-e", json.dumps({"gpunode_sim_kapi_port": KAPI_PORT, "gpunode_sim_kapi_dir": str(kapi)}), env=env)
        sh("ansible-playbook", "-i", str(inventory), "playbooks/site.yml", "-e", f"@{kapi / 'site-vars.yml'}",
           "-e", '{"gpunode_reboot_ok": true}', env=env)
        yield {"env": env, "inventory": inventory, "db": state / "history.sqlite", "vars": kapi / "site-vars.yml",
               "state": state, "kubeconfig": kapi / "admin.conf"}
    finally:
        sh("gpunode", "sim", "down", "--missing-ok", *HOSTS, env=env, check=False)
        sh("gpunode", "kapi", "stop", "--state", str(kapi), env=env, check=False)


def revalidate(fleet, **extra):
    return sh("ansible-playbook", "-i", str(fleet["inventory"]), "playbooks/revalidate.yml",
              "-e", f"@{fleet['vars']}",
              "-e", json.dumps({"gpunode_bandwidth_history_db": str(fleet["db"]),
                                "gpunode_bandwidth_regression_pct": 10,
                                # One earlier run is enough history here (3 by default).
                                "gpunode_bandwidth_baseline_min_points": 1, **extra}), env=fleet["env"], check=False)


def discovery(host):
    out = subprocess.run(["podman", "exec", f"gpunode-sim-{host}", "cat", "/var/lib/gpunode/discovery.json"],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def adaptive_routing(address, host="rv-hgx"):
    """ROCE_ACCL adaptive_routing_forced_en of one NIC as mlxreg reads it on the host."""
    out = subprocess.run(["podman", "exec", f"gpunode-sim-{host}", "mlxreg", "-d", address, "--reg_name", "ROCE_ACCL",
                          "--get"], capture_output=True, text=True, check=True).stdout
    (value,) = [int(line.split("|")[1], 16) for line in out.splitlines()
                if line.split("|")[0].strip() == "adaptive_routing_forced_en"]
    return value


def recap(stdout):
    return {line.split()[0]: line for line in stdout.splitlines() if " : ok=" in line}


def test_revalidation_finds_the_drift_and_the_regression_against_the_rails_own_history(fleet):
    first = revalidate(fleet)
    assert first.returncode == 0, first.stdout[-4000:]
    assert "rv-dgx revalidated: healthy, every rail at its baseline and line rate" in first.stdout
    with sqlite3.connect(fleet["db"]) as conn:
        rows = conn.execute("SELECT host, rail, gbps, run FROM bandwidth").fetchall()
    rails = {h: len(discovery(h)["rails"]) for h in HOSTS}
    # Every rail of both hosts, measured as client and as server against the other host.
    assert len(rows) == 2 * sum(rails.values())
    assert all(g and g > 360 for _h, _r, g, _run in rows)
    assert oct(fleet["db"].stat().st_mode & 0o777) == "0o600"

    hgx_rail = discovery("rv-hgx")["rails"][2]
    dgx_rail = discovery("rv-dgx")["rails"][5]
    env = fleet["env"]
    before = adaptive_routing(hgx_rail["pci_address"])
    sh("gpunode", "sim", "fault", "rv-hgx", "adaptive_routing", hgx_rail["pci_address"], env=env)
    sh("gpunode", "sim", "fault", "rv-dgx", "rail_rate", dgx_rail["pci_address"], "200", env=env)
    # And the DGX's nvidia-smi hangs (stuck in the driver): every call of it answers nothing until it is ended.
    sh("gpunode", "sim", "fault", "rv-dgx", "hang", "nvidia-smi", env=env)
    try:
        second = revalidate(fleet, gpunode_tool_timeout=10)
    finally:
        sh("gpunode", "sim", "fault", "rv-dgx", "hang", "nvidia-smi", "--clear", env=env, check=False)
        sh("gpunode", "sim", "fault", "rv-dgx", "rail_rate", dgx_rail["pci_address"], "--clear", env=env, check=False)
    out = second.stdout
    assert second.returncode != 0
    hosts = recap(out)
    assert "failed=1" in hosts["rv-hgx"] and "failed=1" in hosts["rv-dgx"], out[-3000:]
    hgx_msg = next(line for line in out.splitlines() if "rv-hgx did not revalidate" in line)
    dgx_msg = next(line for line in out.splitlines() if "rv-dgx did not revalidate" in line)
    # The HGX: ROCE_ACCL drift on the flipped NIC, named.
    assert "RailRoceAcclDrift" in hgx_msg and hgx_rail["pci_address"] in hgx_msg, hgx_msg
    # The DGX: the hung nvidia-smi, ended by its timeout and named; the rest of the host was read all the same.
    assert "GPUDriverUnavailable: nvidia-smi -q: nvidia-smi timed out after 10 s" in dgx_msg, dgx_msg
    # The rail at 200 Gb/s, and the rail's bandwidth against its own baseline (not line rate alone).
    assert "RailSpeedDegraded" in dgx_msg and dgx_rail["pci_address"] in dgx_msg, dgx_msg
    # The first run measured the rail twice (as client and as server): its baseline is their median.
    assert (f"rv-dgx rail {dgx_rail['rail']} (as client, peer rv-hgx rail {dgx_rail['rail']}): 192 Gb/s is 50% below "
            "its own baseline 384 Gb/s (median of its last 2 results)") in dgx_msg, dgx_msg
    with sqlite3.connect(fleet["db"]) as conn:
        runs = conn.execute("SELECT COUNT(DISTINCT run), COUNT(*) FROM bandwidth").fetchone()
        low = conn.execute("SELECT gbps FROM bandwidth WHERE host = 'rv-dgx' AND rail = ? ORDER BY id DESC LIMIT 1",
                           (dgx_rail["rail"],)).fetchone()
    assert runs == (2, 4 * sum(rails.values()))
    assert low[0] < 200
    # Read-only: the flipped adaptive routing is still flipped (site.yml, not revalidate.yml, puts it back).
    assert adaptive_routing(hgx_rail["pci_address"]) == 1 - before


def _pods(core, node):
    pods = core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
    return sorted(p.metadata.name for p in pods)


def test_the_hook_schedule_drains_repairs_and_returns_the_drifted_host(fleet):
    """After the test above: adaptive routing is still flipped on one HGX rail (the DGX rail is back at 400)."""
    env, state = fleet["env"], fleet["state"]
    hgx_rail = discovery("rv-hgx")["rails"][2]
    flipped = adaptive_routing(hgx_rail["pci_address"])
    core = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(str(fleet["kubeconfig"])))
    for name, owner in (("train-7f9c-abcde", "ReplicaSet"), ("dcgm-exporter-x1", "DaemonSet")):
        core.create_namespaced_pod("default", {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": name, "ownerReferences": [{"apiVersion": "apps/v1", "kind": owner, "name": name.rsplit("-", 1)[0],
                                               "uid": f"uid-{name}"}]},
            "spec": {"nodeName": "rv-hgx", "containers": [{"name": "c", "image": "x"}]},
            "status": {"phase": "Running"}})
    # An administrator cordoned the HGX by hand: remediation takes it out and returns it, and leaves that cordon.
    core.patch_node("rv-hgx", {"spec": {"unschedulable": True}})
    hook = state / "hook"
    hook.mkdir()
    # The day-two database holds a host an earlier remediation took out, since removed from the inventory and the
    # cluster (no Node): its record is released, with an event naming it, instead of holding its fabric's budget.
    with contextlib.closing(history_db.open_db(str(hook / "state" / "history.sqlite"))) as conn, conn:
        conn.execute("INSERT INTO remediation (host, fabric, state, attempts, reason, updated, cordoned_before) "
                     "VALUES ('rv-retired', 'default', 'remediating', 1, 'RailLinkDown', 0, 0)")
    (hook / "secret").write_text("e2e-revalidate-hook-secret-0b7d\n")
    (hook / "hook.yml").write_text(yaml.safe_dump({
        "state_dir": str(hook / "state"), "project_dir": str(REPO), "inventory": str(fleet["inventory"]),
        "secret_file": str(hook / "secret"), "run_secrets_file": str(fleet["vars"]),
        "run_env": {"GPUNODE_REPORT_DIR": str(state / "report")},
        "revalidate": {"interval": 3600, "remediate": True, "hosts": "inventory", "max_unavailable": 1,
                       "extra_vars": {"gpunode_reboot_ok": True, "gpunode_bandwidth_baseline_min_points": 1}}}))
    out = sh("gpunode", "hook", "-c", str(hook / "hook.yml"), "revalidate", env=env, check=False)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert out.stdout.startswith("revalidation 1: ok "), out.stdout
    # The HGX was cordoned and drained: its training pod is gone, the DaemonSet's pod stays.
    assert _pods(core, "rv-hgx") == ["dcgm-exporter-x1"]
    # Repaired by site.yml, returned to service: adaptive routing back, no remediation taint, and still cordoned:
    # the administrator's cordon was there before remediation took the host out.
    assert adaptive_routing(hgx_rail["pci_address"]) == 1 - flipped
    node = core.read_node("rv-hgx")
    assert node.spec.unschedulable
    assert not [t for t in node.spec.taints or [] if t.key.endswith("/remediation")]
    conditions = {c.type: c for c in node.status.conditions}
    assert conditions["Ready"].status == "True"
    assert (conditions["GPUNodeRemediation"].status, conditions["GPUNodeRemediation"].reason) == ("False", "InService")
    assert conditions["GPUNodeHealthProblem"].status == "False"
    # Every step, in the hook's day-two database (0600 in its state directory), and every bandwidth result.
    db = hook / "state" / "history.sqlite"
    assert oct(db.stat().st_mode & 0o777) == "0o600"
    with sqlite3.connect(db) as conn:
        steps = conn.execute("SELECT host, step, detail FROM events ORDER BY id").fetchall()
        rows = conn.execute("SELECT host, run, COUNT(*) FROM bandwidth GROUP BY host, run ORDER BY host").fetchall()
        states = dict(conn.execute("SELECT host, state FROM remediation").fetchall())
    assert [(h, step) for h, step, _ in steps] == [
        ("rv-retired", "released"), ("rv-dgx", "deferred"), ("rv-hgx", "remediate"), ("rv-hgx", "drained"),
        ("rv-hgx", "returned")], steps
    assert "rv-retired is no longer in the inventory nor a Node of the cluster" in steps[0][2]
    assert "RailRoceAcclDrift" in steps[2][2] and hgx_rail["pci_address"] in steps[2][2]
    assert "waits: only its bandwidth results failed, against rv-hgx" in steps[1][2]
    assert "1 Pod(s) deleted from node" in steps[3][2]
    assert "its Node stays cordoned: it was cordoned before remediation took it out" in steps[4][2], steps[4]
    assert states == {"rv-dgx": "in_service", "rv-hgx": "in_service"}
    rails = {h: len(discovery(h)["rails"]) for h in HOSTS}
    # The revalidation measured both hosts (each rail as client and server), and so did the re-validation after
    # the re-run (the DGX as the HGX's healthy reference peer): a run of its own in the history.
    both = [("rv-dgx", 2 * rails["rv-dgx"]), ("rv-hgx", 2 * rails["rv-hgx"])]
    assert [(h, n) for h, run, n in rows if run == "revalidate-1"] == both
    assert [(h, n) for h, run, n in rows if run == "revalidate-1-rerun"] == both
    # `hook status` shows the revalidation; the report shows the events.
    status = sh("gpunode", "hook", "-c", str(hook / "hook.yml"), "status", env=env).stdout
    assert "revalidation 1: ok" in status and "playbook=playbooks/remediate.yml" in status
    page = (state / "report" / "report.html").read_text()
    assert '<h2 id="day-two">' in page
    assert 'data-host="rv-hgx" data-step="drained"' in page and 'data-host="rv-hgx" data-step="returned"' in page
    # The administrator is done with the HGX (the tests after this one use a schedulable pair).
    core.patch_node("rv-hgx", {"spec": {"unschedulable": False}})


def test_only_idle_nodes_are_revalidated(fleet):
    """gpunode_revalidate_only_idle: a Node running a pod that asks for GPUs is left out, with the reason."""
    core = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(str(fleet["kubeconfig"])))
    core.create_namespaced_pod("default", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train-gpu-0"},
                                           "spec": {"nodeName": "rv-dgx", "containers": [{
                                               "name": "c", "image": "x",
                                               "resources": {"limits": {"nvidia.com/gpu": "8"}}}]},
                                           "status": {"phase": "Running"}})
    out = sh("ansible-playbook", "-i", str(fleet["inventory"]), "playbooks/revalidate.yml", "-e", f"@{fleet['vars']}",
             "-e", json.dumps({"gpunode_bandwidth_history_db": str(fleet["db"]), "gpunode_revalidate_only_idle": True}),
             env=fleet["env"], check=False)
    assert out.returncode == 0, out.stdout[-3000:]
    assert "rv-dgx is left out of this revalidation: GPU pods default/train-gpu-0" in out.stdout
    assert "rv-hgx revalidated: healthy" in out.stdout
    assert "rv-dgx revalidated" not in out.stdout


def _site(fleet, extra):
    return sh("ansible-playbook", "-i", str(fleet["inventory"]), "playbooks/site.yml", "-e", f"@{fleet['vars']}",
              "-e", json.dumps({"gpunode_reboot_ok": True, **extra}), env=fleet["env"], check=False)


def test_topology_labels_the_nodes_and_a_swapped_cable_stops_the_run_at_the_contract(fleet):
    """Issue 20 on the converged pair: lldpd installed by the lldp role, the hosts on two top-of-rack leaves; the
    Nodes carry the topology labels, Kueue's Topology exists and both flavors name it. Then the pair in one
    rail-optimized unit with two of the HGX's cables swapped: the run stops that host at the contract, naming both
    rails, their netdevs and the switch ports expected and found."""
    env = fleet["env"]
    sh("gpunode", "sim", "cable", "rv-dgx", "--leaf", "tor-a", env=env)
    sh("gpunode", "sim", "cable", "rv-hgx", "--leaf", "tor-b", env=env)
    out = _site(fleet, {"gpunode_topology_lldp": True, "gpunode_topology_labels": True})
    assert out.returncode == 0, out.stdout[-4000:]
    core = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(str(fleet["kubeconfig"])))
    racks = {n: core.read_node(n).metadata.labels.get("gpunode.mlplatform.io/topology-rack") for n in HOSTS}
    assert racks == {"rv-dgx": "tor-a", "rv-hgx": "tor-b"}
    custom = kubernetes.client.CustomObjectsApi(core.api_client)
    topology = custom.get_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "topologies", "gpu-fabric")
    assert [lvl["nodeLabel"] for lvl in topology["spec"]["levels"]] == [
        "gpunode.mlplatform.io/topology-block", "gpunode.mlplatform.io/topology-rack", "kubernetes.io/hostname"]
    flavors = custom.list_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "resourceflavors")["items"]
    assert flavors and {f["spec"].get("topologyName") for f in flavors} == {"gpu-fabric"}

    sh("gpunode", "sim", "cable", "rv-dgx", "--unit", "su1", env=env)
    sh("gpunode", "sim", "cable", "rv-hgx", "--unit", "su1", env=env)
    rails = discovery("rv-hgx")["rails"]
    sh("gpunode", "sim", "fault", "rv-hgx", "cable_swap", rails[1]["pci_address"], rails[4]["pci_address"], env=env)
    stopped = _site(fleet, {"gpunode_topology_rail_optimized": ["default"]})
    assert stopped.returncode != 0
    hosts = recap(stopped.stdout)
    assert "failed=1" in hosts["rv-hgx"] and "failed=0" in hosts["rv-dgx"], stopped.stdout[-3000:]
    line = next(x for x in stopped.stdout.splitlines() if "rv-hgx is miscabled" in x)
    assert re.search(rf"rv-hgx rail 1 \({rails[1]['netdev']}\): expected su1-leaf1 port (swp\d+), found su1-leaf4 "
                     r"port \1 \(cables swapped with another rail", line), line
    assert re.search(rf"rv-hgx rail 4 \({rails[4]['netdev']}\): expected su1-leaf4 port (swp\d+), found su1-leaf1 "
                     r"port \1", line), line
    # It failed at the contract, before join, and nowhere earlier.
    before, contract = stopped.stdout.split("TASK [Stop a host with a miscabled rail before join")[:2]
    assert "fatal: [rv-hgx]" not in before and "fatal: [rv-hgx]" in contract.split("TASK [")[0]
