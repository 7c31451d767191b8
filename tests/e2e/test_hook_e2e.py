"""End to end: real cloud-init in a simulated HGX H100 host phones home to the hook, which runs the pipeline.

The host (``hk-node``, profile hgx-h100) gets Debian's ``cloud-init`` from apt; its sshd (in the
simulator's image, on the loopback port ``gpunode sim up`` gave it) made its host keys at first boot,
and those are what phone_home posts. The hook's runs reach the host over SSH and check its key
against the hook's own known_hosts, which only that post filled in. A NoCloud seed whose ``phone_home`` url
points at the hook on loopback makes ``cloud-init single --name phone_home`` post the real form.
The hook then runs the whole pipeline, playbooks/site.yml, through ansible-runner, against the
Kubernetes API emulator (``gpunode kapi``) as the control plane: the host must end ``ok``, validated
(validation.json passed) and registered as a Ready Node without the ``not-validated`` taint.

The hook serves HTTPS with a certificate from a test site CA (``tests/unit/testca.py``); the seed's
``ca_certs`` gives cloud-init that CA, as the MAAS user data does (examples/hook).

Before that, while the host is still fresh, ``site.yml --check --diff`` runs against it (it had a
module and a host of its own, tests/e2e/test_site_check_mode.py; one fresh host serves both, issue
15): the install stage shows the repositories, keys and packages it would add; the stages after it
end for the host with the reason (they read the host through DOCA-OFED and the driver, not
installed yet) instead of failing on a missing tool. Then no file under /etc, /usr, /opt,
/var/lib/gpunode or the simulated hardware state is newer than a marker written before the run,
and no package was installed.

After it, the drift tests (issue 13) change one setting of each kind on the converged host behind the
collection's back (a VF count, a boot unit file, a driver hold, a trust mode, an NV config value for next
boot): ``site.yml --check --diff`` must show exactly those, per setting and device, and the re-run must
fix exactly those, with no reboot.

Run with ``make e2e`` (needs podman and the simulated-host image; ``make image``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import kubernetes
import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from e2e_shell import sh  # noqa: E402 - tests/e2e is on sys.path (pytest's prepend import mode)
from testca import make_ca  # noqa: E402 - the unit tests' helper, from tests/unit

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
HOST = "hk-node"
PROFILE = "hgx-h100"
PORT = 18085
CONTAINER = f"gpunode-sim-{HOST}"
SECRET = "e2e-hook-secret-5f2c9a7e41d0b3"  # noqa: S105 - a test secret the scan looks for
INSTANCE_ID = "hk-node-4y3h8a"  # the shape of a MAAS system_id
KAPI_PORT = 18644
PLAYBOOK = "playbooks/site.yml"
TAINT = "gpunode.mlplatform.io/not-validated"

INSTALL = r"""
set -eu
# No service may start during the install (cloud-init runs only the phone_home module below).
printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
chmod 0755 /usr/sbin/policy-rc.d
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends cloud-init ca-certificates >/tmp/hook-e2e-apt.log 2>&1 \
  || { tail -n 30 /tmp/hook-e2e-apt.log; exit 1; }
rm -f /usr/sbin/policy-rc.d
"""


def in_host(script: str, **kw) -> subprocess.CompletedProcess:
    return sh("podman", "exec", CONTAINER, "bash", "-c", script, **kw)


@pytest.fixture(scope="module")
def sim_host(tmp_path_factory):
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed: run `make e2e`")
    state = tmp_path_factory.mktemp("sim")
    sh("gpunode", "sim", "--state-dir", str(state), "up", "--replace", f"{HOST}={PROFILE}")
    try:
        yield state
    finally:
        sh("gpunode", "sim", "down", "--missing-ok", HOST, check=False)


# First in this module: it needs the host fresh, before the hook provisions it.
def test_site_check_mode_on_a_fresh_host_changes_nothing(sim_host, tmp_path):
    sh("gpunode", "sim", "inventory", "-o", str(tmp_path / "hosts.yml"), HOST)
    sh("podman", "exec", CONTAINER, "sh", "-c", "touch /tmp/gpunode-check-marker && sleep 1")
    proc = sh("ansible-playbook", "-i", str(tmp_path / "hosts.yml"), "playbooks/site.yml", "--check", "--diff",
              "-e", '{"gpunode_reboot_ok": true}', cwd=REPO, timeout=1200,
              env={**os.environ, "GPUNODE_REPORT_DIR": str(tmp_path / "report"), "ANSIBLE_NOCOLOR": "1",
                   "ANSIBLE_CALLBACK_RESULT_FORMAT": "json"})  # one line per message
    out = proc.stdout
    recap = re.search(rf"^{HOST}\s+: ok=\d+\s+changed=(\d+)\s+unreachable=0\s+failed=0", out, re.M)
    assert recap, out[-3000:]
    # What would change is shown: the DOCA and CUDA sources with their keys, the pinned packages.
    assert int(recap.group(1)) > 0
    assert "doca.sources" in out and "cuda.sources" in out
    assert f"{HOST}: check mode, the DOCA-Host repository is not configured yet: would install doca-ofed=2.9.1-1" in out
    assert "nvidia-driver-570-server-open=570.172.08-*" in out and "nvidia-fabricmanager-570=570.172.08-*" in out
    # The stages after install say why they stop for this host.
    assert f"{HOST}: check mode on a host without DOCA-OFED/the NVIDIA driver installed" in out
    # Nothing changed on the host.
    newer = sh("podman", "exec", CONTAINER, "sh", "-c",
               "find /etc /usr /opt /var/lib/gpunode /var/lib/gpunode-sim -newer /tmp/gpunode-check-marker "
               "\\( -type f -o -type l \\) 2>/dev/null; true").stdout.split()
    assert newer == []
    assert sh("podman", "exec", CONTAINER, "dpkg-query", "-W", "doca-ofed", check=False).returncode != 0
    assert sh("podman", "exec", CONTAINER, "test", "-e", "/var/lib/gpunode/discovery.json",
              check=False).returncode != 0


@pytest.fixture(scope="module")
def hook(sim_host, tmp_path_factory):
    """The hook service on 127.0.0.1:PORT, running PLAYBOOK against the simulated fleet's inventory."""
    work = tmp_path_factory.mktemp("hook")
    sh("gpunode", "sim", "inventory", "-o", str(work / "hosts.yml"), HOST)
    # The operator's consent to the one reboot the firmware needs lives in the inventory.
    inventory = yaml.safe_load((work / "hosts.yml").read_text())
    inventory["all"]["children"]["gpu_nodes"]["vars"]["gpunode_reboot_ok"] = True
    # The hook's runs check the host key against the hook's known_hosts (filled in from the phone_home
    # post), not the simulator's: drop the simulator's known_hosts setting (HostKeyAlias stays, so the
    # key is looked up under the host's name).
    del inventory["all"]["children"]["gpu_nodes"]["hosts"][HOST]["ansible_ssh_common_args"]
    (work / "hosts.yml").write_text(yaml.safe_dump(inventory))
    # The control plane: the API emulator with the Kueue CRDs and a bootstrap token. The join
    # variables (token included) reach the runs only as the run_secrets_file, by path.
    kapi = work / "kapi"
    sh("gpunode", "kapi", "start", "--port", str(KAPI_PORT), "--state", str(kapi))
    sh("ansible-playbook", "playbooks/sim_cluster.yml",
       "-e", json.dumps({"gpunode_sim_kapi_port": KAPI_PORT, "gpunode_sim_kapi_dir": str(kapi)}), cwd=REPO)
    (work / "secret").write_text(SECRET + "\n")
    (work / "secret").chmod(0o600)
    ca = make_ca(work / "ca")
    # The hook runs site.yml from the collection as a site installs it: the Galaxy tarball installed into a
    # collections path of its own (the collections it depends on come from the ansible package), with the
    # site's ansible.cfg (this repository's, without its collections path and inventory).
    collections = work / "collections"
    galaxy_env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}  # not this checkout's
    sh("ansible-galaxy", "collection", "build", "--output-path", str(work), str(REPO), cwd=work, env=galaxy_env)
    (tarball,) = work.glob("mlplatform-gpunode-*.tar.gz")
    sh("ansible-galaxy", "collection", "install", "--offline", "--no-deps", "-p", str(collections), str(tarball),
       cwd=work, env=galaxy_env)
    assert (collections / "ansible_collections" / "mlplatform" / "gpunode" / PLAYBOOK).is_file()
    installed = collections / "ansible_collections" / "mlplatform" / "gpunode"
    site_cfg = "".join(line for line in (REPO / "ansible.cfg").read_text().splitlines(keepends=True)
                       if not line.startswith(("collections_path", "inventory")))
    (work / "ansible.cfg").write_text(site_cfg)
    settings = {"state_dir": str(work / "state"), "project_dir": str(installed), "playbook": PLAYBOOK,
                "inventory": str(work / "hosts.yml"), "secret_file": str(work / "secret"), "listen_port": PORT,
                "tls_cert_file": str(ca["cert"]), "tls_key_file": str(ca["key"]),
                "run_secrets_file": str(kapi / "site-vars.yml"),
                "run_env": {"GPUNODE_REPORT_DIR": str(work / "report"), "ANSIBLE_CONFIG": str(work / "ansible.cfg"),
                            "ANSIBLE_COLLECTIONS_PATH": str(collections)},
                "batch_window": 1.0, "retry_delay": 5, "max_attempts": 1, "run_timeout": 2400}
    (work / "hook.yml").write_text(yaml.safe_dump(settings))
    log = open(work / "serve.log", "wb")  # noqa: SIM115 - closed in the finally below
    env = {k: v for k, v in os.environ.items() if k != "GPUNODE_HOOK_SECRET"}
    proc = subprocess.Popen([sys.executable, "-m", "gpunode.cli", "hook", "-c", str(work / "hook.yml"), "serve"],
                            stdout=log, stderr=log, env=env)
    try:
        for _ in range(150):
            try:
                httpx.get(f"https://127.0.0.1:{PORT}/v1/hosts", timeout=1,
                          verify=ssl.create_default_context(cafile=str(ca["ca"])))
                break
            except httpx.TransportError:
                time.sleep(0.2)
        yield work
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=90)
        log.close()
        sh("gpunode", "kapi", "stop", "--state", str(kapi), check=False)


def test_cloud_init_phone_home_provisions_the_host(sim_host, hook):
    in_host(INSTALL, timeout=900)
    # The NoCloud seed MAAS would render: instance id, hostname, and phone_home at the hook.
    ca_pem = (hook / "ca" / "ca.pem").read_text()
    user_data = {"ca_certs": {"trusted": [ca_pem]},
                 "phone_home": {"url": f"https://127.0.0.1:{PORT}/v1/phone-home/$INSTANCE_ID?token={SECRET}",
                                "post": "all", "tries": 3}}
    seed = (f"mkdir -p /var/lib/cloud/seed/nocloud && cd /var/lib/cloud/seed/nocloud && "
            f"printf 'instance-id: {INSTANCE_ID}\\nlocal-hostname: {HOST}\\n' > meta-data && "
            f"printf '#cloud-config\\n%s\\n' '{json.dumps(user_data)}' > user-data")
    in_host(seed)
    # The host shares the controller's network namespace: cloud-init must not configure networking.
    # At init only ca_certs (installs the site CA the hook's certificate is from) and ssh (which
    # (re)generates the host keys as on a first boot) run.
    # A cloud-init stage that exits 1 hangs the reboot site.yml makes: systemd (cgroup v1 in a container,
    # TimeoutSec=0 in cloud-config/cloud-final.service) then waits forever in stop-sigterm for the unit's
    # empty cgroup. Two modules fail here for reasons of the simulator's image, not of the host under test:
    # locale (no `locales` package) and ssh-authkey-fingerprints (no default user, since the users module
    # does not run). `locale: false` and `no_ssh_fingerprints: true` are cloud-init's own switches for them.
    in_host("printf 'network: {config: disabled}\\npreserve_hostname: true\\ncloud_init_modules: [ca_certs, ssh]\\n"
            "locale: false\\nno_ssh_fingerprints: true\\n' > /etc/cloud/cloud.cfg.d/99-gpunode-sim.cfg")
    in_host("cloud-init init")  # the network stage: finds the NoCloud seed and processes the user data
    # Once per instance, as at a first boot: the semaphore it leaves keeps cloud-init's own final
    # stage from posting again when site.yml reboots the host for its firmware.
    posted = in_host("cloud-init single --name phone_home 2>&1 "
                     "&& grep -E 'phone_home|phone home' /var/log/cloud-init.log | tail -n 5")
    assert "Failed to post phone home data" not in posted.stdout, posted.stdout
    assert "no 'phone_home' configuration found" not in posted.stdout, posted.stdout

    # cloud-init's ca_certs put the site CA into the host's trust store (which the post then used).
    ca_line = ca_pem.splitlines()[1]
    assert in_host(f"grep -c -- '{ca_line}' /etc/ssl/certs/ca-certificates.crt", check=False).stdout.strip() == "1"
    auth = {"Authorization": f"Bearer {SECRET}"}
    base = f"https://127.0.0.1:{PORT}"
    api = httpx.Client(headers=auth, verify=ssl.create_default_context(cafile=str(hook / "ca" / "ca.pem")))
    recorded = api.get(f"{base}/v1/hosts/{HOST}")
    assert recorded.status_code == 200, f"the post was not recorded\n{(hook / 'serve.log').read_text()[-2000:]}"
    deadline = time.monotonic() + 2400
    while time.monotonic() < deadline:
        host = api.get(f"{base}/v1/hosts/{HOST}", headers=auth).json()
        if host.get("state") in ("ok", "failed"):
            break
        time.sleep(2)
    serve_log = (hook / "serve.log").read_text()
    assert host["state"] == "ok", f"{json.dumps(host, indent=1)}\n{serve_log[-3000:]}"

    # The request is the real cloud-init form.
    store_requests = api.get(f"{base}/v1/hosts", headers=auth).json()
    assert store_requests["counts"] == {"ok": 1}
    assert host["instance_id"] == INSTANCE_ID
    assert host["requests"] == 1
    # The reboot site.yml made ran cloud-init's config and final stages once more; both ended well, and
    # the final stage did not post again (the request count above is still 1).
    stages = in_host("systemctl show -p Result --value cloud-config.service cloud-final.service").stdout.split()
    assert stages == ["success", "success"], f"cloud-config, cloud-final: {stages}"
    assert [r["hosts"] for r in api.get(f"{base}/v1/runs", headers=auth).json()["runs"]] == [[HOST]]
    # known_hosts holds exactly the host's own public keys.
    keys = in_host("cat /etc/ssh/ssh_host_*_key.pub").stdout.splitlines()
    expected = sorted(" ".join(k.split()[:2]) for k in keys)
    known = [line.split(" ", 1) for line in (hook / "state" / "known_hosts").read_text().splitlines()]
    assert all(names.split(",")[0] == HOST for names, _ in known)
    assert sorted(key for _, key in known) == expected
    assert any(key.startswith("ssh-ed25519 ") for key in expected)

    # The run: per-host stats, the stage reached, the result file.
    run = api.get(f"{base}/v1/runs/{host['last_run_id']}", headers=auth).json()
    assert run["state"] == "ok" and run["hosts"] == [HOST]
    result = json.loads(Path(run["result_path"]).read_text())
    mine = result["hosts"][HOST]
    assert mine["ok"] > 0 and mine["failed"] == 0 and mine["unreachable"] == 0 and mine["stage"]
    # What the pipeline did is on the host: discovery found the HGX's 8 GPUs, and the node passed.
    discovery = json.loads(in_host("cat /var/lib/gpunode/discovery.json").stdout)
    assert len(discovery["gpus"]) == 8
    validation = json.loads(in_host("cat /var/lib/gpunode/validation.json").stdout)
    assert validation["passed"] is True, validation.get("failures")
    assert mine["validation"]["present"] is True and mine["validation"]["verdict"] == "passed"
    assert mine["stage"] == "Gate"
    # ... and in the cluster: a Ready Node, its hardware labels, and no not-validated taint left.
    api = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(str(hook / "kapi" / "admin.conf")))
    node = api.read_node(HOST)
    assert [c.status for c in node.status.conditions if c.type == "Ready"] == ["True"]
    assert node.metadata.labels["nvidia.com/gpu.count"] == "8"
    assert TAINT not in [t.key for t in node.spec.taints or []]
    assert (hook / "report" / "report.md").is_file()
    # The run was the installed tarball's site.yml: its job ran that playbook, and the report it wrote names the
    # collection's version without a commit (an installed copy is not a git checkout).
    (command,) = [p for p in (hook / "state" / "artifacts").glob("run-*/command")
                  if "-validation" not in p.parent.name]
    argv = json.loads(command.read_text())["command"]
    assert str(hook / "collections" / "ansible_collections" / "mlplatform" / "gpunode" / PLAYBOOK) in argv, argv
    version = yaml.safe_load((REPO / "galaxy.yml").read_text())["version"]
    assert f"mlplatform.gpunode {version}; results of run " in (hook / "report" / "report.md").read_text()

    # The state files are private: 0600 files (database, WAL, SHM, log, known_hosts, results), 0700 directories.
    state = hook / "state"
    modes = {str(p.relative_to(state)): p.stat().st_mode & 0o777
             for p in [state, *state.iterdir(), *(state / "results").iterdir()]}
    assert {k: v for k, v in modes.items() if v != (0o700 if (state / k).is_dir() else 0o600)} == {}, modes
    assert {"hook.db", "hook.log", "known_hosts", "results"} <= set(modes)

    # No secret in the hook's artifacts, results, database or log.
    leaks = [str(p) for p in (hook / "state").rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert leaks == [] and SECRET not in serve_log


# Drift (issue 13): on the converged host the hook provisioned, change one thing of each kind behind the
# collection's back. Check mode must show exactly those changes, per setting and device; the re-run must
# fix exactly those, without a reboot. The five kinds are independent, so one check run and one re-run
# serve all five (each kind has its own test below).
DRIFT = {
    # A VF count reset on rail 0's PF (sysfs sriov_numvfs, as `echo 0 >` does on a real host).
    "vf_count": "echo 0 > /var/lib/gpunode-sim/sys/bus/pci/devices/0000:1a:00.0/sriov_numvfs",
    # A hand edit of a boot unit the sriov role installed.
    "unit_file": "echo '# edited by hand' >> /etc/systemd/system/gpunode-sriov.service",
    # The driver meta package without its hold.
    "unheld_package": "apt-mark unhold nvidia-driver-570-server-open >/dev/null",
    # Rail 1's trust mode flipped to PCP.
    "qos_trust": "mlnx_qos -i enp60s0np0 --trust pcp >/dev/null",
    # ATS enabled for next boot on rail 2's card (waiting for a reboot).
    "nv_config_next_boot": "mlxconfig -d 0000:4d:00.0 -y set ATS_ENABLED=1 >/dev/null",
}
DRIFT_TASKS = {
    "vf_count": "mlplatform.gpunode.sriov : Configure | Set the VF count of every managed PF",
    "unit_file": "mlplatform.gpunode.sriov : Service | Write the VF script, configuration and boot unit, reload "
                 "systemd and enable it (one call)",
    "unheld_package": "mlplatform.gpunode.gpu_driver : Install | Hold the driver packages (dpkg selection hold, one "
                      "call)",
    "qos_trust": "mlplatform.gpunode.roce_qos : Configure | Apply the QoS profile to every RoCE netdev and read it "
                 "back",
    "nv_config_next_boot": "mlplatform.gpunode.nic_firmware : Configure | Set the NV config of all managed NICs in "
                           "one call",
}
# The host's own records of what it is (a drift changes what they say). The report's copy of them on the
# controller is written by the fleet_report action there (a controller-side task, left out).
RECORDS = ("Write discovery.json", "Write nic_firmware.json", "Write validation.json")


def _site_results(hook: Path, *args: str) -> dict:
    """Run site.yml against the hook's inventory with the JSON callback: ``changed`` is {task name: this host's
    results} for the tasks that changed on the host (controller-side tasks - delegated or fleet-level - left
    out), ``failed`` {task name: message} for the tasks that failed."""
    proc = sh("ansible-playbook", "-i", str(hook / "hosts.yml"), PLAYBOOK, *args,
              "-e", f"@{hook / 'kapi' / 'site-vars.yml'}", cwd=REPO, timeout=1800, check=False,
              env={**os.environ, "GPUNODE_REPORT_DIR": str(hook / "drift-report"),
                   "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
                   # as the hook's runs do: the host key the phone_home post bound
                   "ANSIBLE_SSH_COMMON_ARGS": f"-o UserKnownHostsFile={hook / 'state' / 'known_hosts'} "
                                              "-o StrictHostKeyChecking=yes"})
    data = json.loads(proc.stdout[proc.stdout.index("{"):])
    changed, failed = {}, {}
    for play in data["plays"]:
        for task in play["tasks"]:
            result = task["hosts"].get(HOST)
            if result and result.get("failed") and not result.get("ignore_errors"):
                failed[task["task"]["name"]] = str(result.get("msg", ""))
            delegated = (result or {}).get("_ansible_delegated_vars") or {}
            # Delegated to the controller: by the delegated host's inventory name (the simulated host's own
            # ansible_host is 127.0.0.1 too, reached on its SSH port).
            on_controller = delegated.get("ansible_connection") == "local" \
                or delegated.get("ansible_delegated_host", delegated.get("ansible_host")) in ("localhost", "127.0.0.1")
            if not result or not result.get("changed") or on_controller:
                continue
            changed.setdefault(task["task"]["name"], []).append(result)
    assert (proc.returncode == 0) == (not failed), (proc.returncode, failed, proc.stderr[-2000:])
    return {"changed": changed, "failed": failed}


@pytest.fixture(scope="module")
def drift(sim_host, hook):
    validation = in_host("cat /var/lib/gpunode/validation.json", check=False)
    if validation.returncode != 0 or not json.loads(validation.stdout).get("passed"):
        pytest.fail("the drift tests need the host the hook provisioned "
                    "(test_cloud_init_phone_home_provisions_the_host)")
    reboot_before = in_host("cat /var/lib/gpunode/reboot.json").stdout
    in_host(" && ".join(DRIFT.values()))
    check = _site_results(hook, "--check", "--diff")
    rerun = _site_results(hook, "--diff")
    return {"check": check["changed"], "rerun": rerun["changed"], "check_failed": check["failed"],
            "rerun_failed": rerun["failed"], "reboot_before": reboot_before,
            "reboot_after": in_host("cat /var/lib/gpunode/reboot.json").stdout}


def _only(results: dict, name: str) -> dict:
    assert name in results, f"{name!r} did not change; changed: {sorted(results)}"
    assert len(results[name]) == 1
    return results[name][0]


def test_drift_changes_exactly_the_drifted_settings_and_nothing_else(drift):
    # In check mode nothing is applied, so the contract compares the values as they are now: it stops the
    # check run, naming exactly the two drifted settings it covers (the VF count and the trust mode of the
    # rails; an NV config value waiting for next boot is not a current value). The re-run fixes them first.
    assert list(drift["check_failed"]) == ["Compare every published contract across the hosts of each fabric"]
    breach = drift["check_failed"]["Compare every published contract across the hosts of each fabric"]
    rows = [line.split() for line in breach.splitlines() if line.strip().startswith(HOST)]
    # The expected value is the fabric's declaration (gpunode_fabric_settings), marked so.
    assert sorted((r[2], r[4], r[5], r[6], r[7]) for r in rows) == [
        ("0000:1a:00.0", "sriov_num_vfs", "8", "(declared)", "0"),
        ("0000:3c:00.0", "qos_trust", "dscp", "(declared)", "pcp")], breach
    assert drift["rerun_failed"] == {}
    for run in ("check", "rerun"):
        others = {name for name in drift[run] if name not in DRIFT_TASKS.values()
                  and not any(record in name for record in RECORDS)}
        assert others == set(), f"{run}: tasks changed that no drift explains: {sorted(others)}"
        assert set(DRIFT_TASKS.values()) <= set(drift[run]), sorted(drift[run])
    # Nothing needed a reboot: the next-boot value was put back to the running one.
    assert drift["reboot_after"] == drift["reboot_before"]


def test_drift_vf_count(drift):
    for run in ("check", "rerun"):
        diff = _only(drift[run], DRIFT_TASKS["vf_count"])["diff"]
        moved = {pf: (diff["before"][pf], diff["after"][pf]) for pf in diff["after"]
                 if diff["before"].get(pf) != diff["after"][pf]}
        assert moved == {"0000:1a:00.0": (0, 8)}, run
    assert in_host("cat /var/lib/gpunode-sim/sys/bus/pci/devices/0000:1a:00.0/sriov_numvfs").stdout.strip() == "8"


def test_drift_edited_unit_file(drift):
    for run in ("check", "rerun"):
        result = _only(drift[run], DRIFT_TASKS["unit_file"])
        assert result["files_changed"] == ["/etc/systemd/system/gpunode-sriov.service"], run
        assert result["units_restarted"] == [] and result["units_enabled"] == []
    assert "edited by hand" not in in_host("cat /etc/systemd/system/gpunode-sriov.service").stdout


def test_drift_unheld_driver_package(drift):
    for run in ("check", "rerun"):
        result = _only(drift[run], DRIFT_TASKS["unheld_package"])
        assert result["held"] == ["nvidia-driver-570-server-open"], run
        assert {n: v for n, v in result["holds"].items() if v["before"] != v["after"]} == \
            {"nvidia-driver-570-server-open": {"before": "install", "after": "hold"}}, run
    assert "nvidia-driver-570-server-open" in in_host("apt-mark showhold").stdout.split()


def test_drift_qos_trust(drift):
    for run in ("check", "rerun"):
        interfaces = _only(drift[run], DRIFT_TASKS["qos_trust"])["interfaces"]
        assert {n: v for n, v in interfaces.items() if v} == {"enp60s0np0": {"trust": {"before": "pcp",
                                                                                       "after": "dscp"}}}, run
    assert "Priority trust state: dscp" in in_host("mlnx_qos -i enp60s0np0").stdout


def test_drift_nv_config_waiting_for_next_boot(drift):
    for run in ("check", "rerun"):
        result = _only(drift[run], DRIFT_TASKS["nv_config_next_boot"])
        assert result["changes"] == {"0000:4d:00.0": {"ATS_ENABLED": {"before": "True(1)", "after": "False(0)"}}}, run
        assert result["reboot_required"] is False
    next_boot = in_host("mlxconfig -d 0000:4d:00.0 q ATS_ENABLED").stdout
    assert re.search(r"ATS_ENABLED\s+False\(0\)", next_boot), next_boot
