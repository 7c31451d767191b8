"""The hook's revalidation schedule (``revalidate:`` in hook.yml, gpunode/hook/revalidate.py).

Runs use a real ansible-runner and ansible-playbook against the local-connection hosts of test_hook.py's site; the
playbook stands in for revalidate.yml/remediate.yml and writes what the run gave it (its environment and extra
vars) per host. The end-to-end run of remediate.yml through the hook is tests/e2e/test_revalidate_e2e.py.
"""

from __future__ import annotations

import json
import stat
import threading
import time
from pathlib import Path

import pytest
import yaml
from test_hook import SECRET, make_config, scan_for_secrets, site  # noqa: F401 - the site fixture

from gpunode import cli
from gpunode.hook import revalidate as rv
from gpunode.hook.config import ConfigError, load_config
from gpunode.hook.store import Store

REVALIDATE = """\
- name: Revalidate (stand-in)
  hosts: all
  gather_facts: false
  tasks:
    - name: Write what the run gave this host
      ansible.builtin.copy:
        dest: "{{ seen_dir }}/{{ inventory_hostname }}.json"
        content: "{{ {'db': lookup('ansible.builtin.env', 'GPUNODE_HISTORY_DB'),
                     'run': lookup('ansible.builtin.env', 'GPUNODE_RUN_ID'),
                     'batch': gpunode_revalidate_batch, 'max_unavailable': gpunode_remediation_max_unavailable,
                     'max_attempts': gpunode_remediation_max_attempts} | to_json }}"
        mode: "0600"
      delegate_to: localhost
    - name: Fail where asked
      ansible.builtin.fail:
        msg: "{{ inventory_hostname }} did not revalidate"
      when: fail_here | default(false)
"""


def _config(site, **revalidate):  # noqa: F811 - the fixture's value
    (site / "project" / "playbooks").mkdir(exist_ok=True)
    (site / "project" / "playbooks" / "remediate.yml").write_text(REVALIDATE)
    (site / "seen").mkdir(exist_ok=True)
    plan = {"interval": 3600, "remediate": True, "extra_vars": {"seen_dir": str(site / "seen")}, **revalidate}
    return make_config(site, revalidate=plan)


def _provision(store, *hosts, state="ok"):
    for host in hosts:
        store.record_request(source="operator", host=host, instance_id=None, fqdn=None, host_keys={}, peer=None,
                             force=True)
        if state != "queued":
            run = store.claim_batch(now=1e12, batch_window=0, max_batch=10, only=[host])
            store.finish_run(run["id"], state=state, result={"hosts": {}}, result_path=None,
                             host_ok={host: state == "ok"}, max_attempts=1, retry_delay=0)


@pytest.mark.parametrize(("revalidate", "message"), [
    ({"interval": 10}, "revalidate.interval: 10 s is less than 60 s"),
    ({"remediate": True}, "revalidate.interval: required"),
    ({"interval": 600, "every": 1}, "revalidate: unknown settings: every"),
    ({"interval": 600, "batch": "0"}, "revalidate.batch: '0' is not a count or a percentage"),
    ({"interval": 600, "max_unavailable": "150%"}, "revalidate.max_unavailable: '150%'"),
    ({"interval": 600, "max_unavailable": "½"}, "revalidate.max_unavailable: '½' is not a count or a percentage"),
    ({"interval": 600, "max_unavailable": "two"}, "revalidate.max_unavailable: 'two' is not a count"),
    ({"interval": 600, "hosts": "some"}, "revalidate.hosts: 'some' is not one of provisioned, inventory"),
    ({"interval": 600, "remediate": "yes"}, "revalidate.remediate: 'yes' is not true or false"),
    ({"interval": 600, "max_attempts": 0}, "revalidate.max_attempts: must be at least 1"),
])
def test_bad_schedule_settings_are_refused_naming_the_key(site, revalidate, message):  # noqa: F811 - site is the fixture imported from test_hook
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        make_config(site, revalidate=revalidate)


def test_a_revalidation_runs_the_provisioned_hosts_with_the_history_in_the_state_dir(site, capsys):  # noqa: F811 - site is the fixture imported from test_hook
    config = _config(site, batch=2, max_unavailable="25%", max_attempts=2)
    store = Store(config.db_path)
    _provision(store, "node-a", "bad-node")
    _provision(store, "node-b", state="failed")  # not provisioned: not revalidated
    _provision(store, "node-c", state="queued")  # being provisioned: left alone
    entry = rv.revalidate_once(config, store)
    assert entry["state"] == "failed" and entry["hosts"] == ["bad-node", "node-a"]
    assert entry["playbook"] == "playbooks/remediate.yml"
    hosts = entry["result"]["hosts"]
    assert hosts["node-a"]["ok_overall"] and not hosts["bad-node"]["ok_overall"]
    assert "bad-node did not revalidate" in hosts["bad-node"]["message"]
    seen = json.loads((site / "seen" / "node-a.json").read_text())
    assert seen == {"db": str((site / "state" / "history.sqlite").resolve()), "run": f"revalidate-{entry['id']}",
                    "batch": 2, "max_unavailable": "25%", "max_attempts": 2}
    assert sorted(p.name for p in (site / "seen").iterdir()) == ["bad-node.json", "node-a.json"]
    # The hosts' own provisioning state is the worker's, not the revalidation's.
    assert store.host("node-a")["state"] == "ok" and store.host("node-c")["state"] == "queued"
    store.close()
    # Recorded: `hook status` lists it, as JSON too.
    (site / "hook.yml").write_text(yaml.safe_dump({
        "state_dir": str(site / "state"), "project_dir": str(site / "project"), "inventory": "hosts.yml",
        "run_secrets_file": str(site / "run-secrets.yml"), "revalidate": {"interval": 3600, "remediate": True}}))
    assert cli.main(["hook", "-c", str(site / "hook.yml"), "status"]) == 0
    line = capsys.readouterr().out.splitlines()[-1]
    assert line.startswith(f"revalidation {entry['id']}: failed ") and "hosts=bad-node,node-a" in line
    assert cli.main(["hook", "-c", str(site / "hook.yml"), "status", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["revalidations"][0]["state"] == "failed"
    assert scan_for_secrets(site / "state") == []


def test_the_inventory_mode_runs_every_host_but_those_being_provisioned(site):  # noqa: F811 - site is the fixture imported from test_hook
    config = _config(site, hosts="inventory", remediate=False, playbook="playbooks/remediate.yml")
    (site / "project" / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": {
        h: {"ansible_connection": "local"} for h in ("node-a", "node-b", "node-c")}}}))
    store = Store(config.db_path)
    _provision(store, "node-c", state="queued")
    entry = rv.revalidate_once(config, store)
    assert entry["state"] == "ok" and entry["hosts"] == ["(inventory)"]
    assert sorted(entry["result"]["hosts"]) == ["node-a", "node-b"]
    assert sorted(p.name for p in (site / "seen").iterdir()) == ["node-a.json", "node-b.json"]
    store.close()


def test_the_cli_runs_one_revalidation_now(site, capsys):  # noqa: F811 - site is the fixture imported from test_hook
    _config(site)
    (site / "hook.yml").write_text(yaml.safe_dump({
        "state_dir": str(site / "state"), "project_dir": str(site / "project"), "inventory": "hosts.yml",
        "run_secrets_file": str(site / "run-secrets.yml"),
        "revalidate": {"interval": 3600, "remediate": True, "extra_vars": {"seen_dir": str(site / "seen")}}}))
    assert cli.main(["hook", "-c", str(site / "hook.yml"), "revalidate"]) == 0
    assert capsys.readouterr().out == "revalidation: no provisioned host to revalidate\n"
    store = Store(site / "state" / "hook.db")
    _provision(store, "node-a")
    store.close()
    assert cli.main(["hook", "-c", str(site / "hook.yml"), "revalidate"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("revalidation 1: ok ") and out[1].split() == ["node-a", "ok", "stage=Revalidate",
                                                                             "(stand-in)"]
    assert stat.S_IMODE((site / "state").stat().st_mode) == 0o700


def test_the_schedule_is_due_an_interval_after_the_last_start_and_a_restart_closes_an_interrupted_one(site):  # noqa: F811 - site is the fixture imported from test_hook
    config = _config(site)
    store = Store(config.db_path)
    assert rv.due_in(store, 600, started=1000.0, now=1100.0) == 500.0
    rid = store.start_revalidation(["node-a"], "playbooks/remediate.yml", now=5000.0)
    assert rv.due_in(store, 600, started=1000.0, now=5100.0) == 500.0
    assert rv.due_in(store, 600, started=1000.0, now=9000.0) == 0.0
    stop = threading.Event()
    stop.set()  # the thread ends at once; start() still closes what a stopped service left running
    revalidator = rv.Revalidator(config, store, stop)
    revalidator.start()
    revalidator.join(5)
    assert store.revalidations(1)[0]["id"] == rid and store.revalidations(1)[0]["state"] == "interrupted"
    store.close()
    assert SECRET not in (site / "state" / "hook.db").read_bytes().decode(errors="replace")


def test_the_example_settings_schedule_a_remediation():
    config = load_config(Path(__file__).resolve().parents[2] / "examples" / "hook" / "hook.yml")
    plan = rv.settings(config)
    assert plan.remediate and plan.interval == 21600 and plan.run_playbook == "playbooks/remediate.yml"
    assert plan.max_unavailable == 1 and plan.extra_vars == {"gpunode_reboot_ok": True}


def test_status_lists_the_latest_day_two_steps(site, capsys):  # noqa: F811 - site is the fixture imported from test_hook
    from ansible_collections.mlplatform.gpunode.plugins.action import remediation  # noqa: PLC0415 - test only

    config = _config(site)
    Store(config.db_path).close()
    with remediation.open_db(str(rv.history_db(config))) as conn:
        remediation.write_record(conn, ["node-a"], "drained", None, {"node-a": "1 Pod(s) deleted from node."},
                                 "revalidate-1", 1.8e9)
    (site / "hook.yml").write_text(yaml.safe_dump({"state_dir": str(site / "state"), "inventory": "hosts.yml"}))
    assert cli.main(["hook", "-c", str(site / "hook.yml"), "status"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "  2027-01-15T08:00:00Z revalidate-1 node-a: drained: 1 Pod(s) deleted from node.")
    assert cli.main(["hook", "-c", str(site / "hook.yml"), "status", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["day_two_events"][0]["step"] == "drained"


def test_the_service_thread_runs_the_schedule_when_it_is_due(site, monkeypatch):  # noqa: F811 - site is the fixture imported from test_hook
    """The thread `hook serve` starts: a revalidation once the interval is up, then none until the next."""
    monkeypatch.setattr(rv, "MIN_INTERVAL", 0)
    config = _config(site, interval=3600)
    store = Store(config.db_path)
    _provision(store, "node-a")
    stop = threading.Event()
    revalidator = rv.Revalidator(config, store, stop)
    revalidator._started -= 3600  # the service started an interval ago: due now
    revalidator.start()
    for _ in range(300):
        done = [e for e in store.revalidations() if e["state"] != "running"]
        if done:
            break
        stop.wait(0.1)
    stop.set()
    revalidator.join(10)
    assert [(e["state"], e["hosts"]) for e in store.revalidations()] == [("ok", ["node-a"])]
    assert rv.due_in(store, 3600, revalidator._started, time.time()) > 3500
    store.close()
