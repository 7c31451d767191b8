"""The fleet report of a 256-host synthetic fleet, loaded in a real browser: Debian's ``chromium``
headless (``--dump-dom`` prints the DOM after the page has loaded and its parser has built the
inline SVG). The hardware comes from the simulator's profiles through the real discovery code; the
contracts, validation results and Kueue objects have the shapes the roles publish.

The project installs chromium itself (``make unit`` depends on the Makefile's chromium stamp); under
CI (``CI=true``) a missing chromium fails this test instead of skipping it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from html.parser import HTMLParser

import pytest
from ansible_collections.mlplatform.gpunode.plugins.module_utils.nic_roles import classify
from ansible_collections.mlplatform.gpunode.plugins.module_utils.pci_sysfs import read_sysfs

from gpunode.report.render import write_report
from gpunode.sim.profile import load_profile
from gpunode.sim.sysfs import materialize

HOSTS = 256
MAX_BYTES = 5 * 1000 * 1000
NV = {"SRIOV_EN": 1, "NUM_OF_VFS": 8, "LINK_TYPE_P1": 2, "ATS_ENABLED": 0}


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("chromium is not installed: `make unit` installs it (apt-get install chromium)")
        pytest.skip("chromium is not installed (make unit installs it)")
    return path


@pytest.fixture(scope="module")
def hw(tmp_path_factory):
    out = {}
    for name in ("dgx-h100", "hgx-h100"):
        root = tmp_path_factory.mktemp(name)
        materialize(load_profile(name), root)
        result = classify(read_sysfs(root))
        out[name] = {k: result[k] for k in ("platform", "gpus", "nvswitches", "nics", "rails", "gpus_without_rail")}
    return out


def _name(i: int) -> str:
    return f"{'dgx' if i % 2 == 0 else 'hgx'}{i:04d}"


def _fleet(hw: dict) -> tuple[dict, set, set]:
    """fleet.json for HOSTS hosts in two fabrics; every 37th host has adaptive routing off on rail 2,
    host 10 has MTU 1500 on every rail; host i is the client of host i+1 (same fabric) on every rail,
    and the rail 5 test of host 20 fails on its server side. Returns (fleet, drift rows, failed cells)."""
    hosts, drift, failed = {}, set(), set()
    names = [_name(i) for i in range(HOSTS)]
    for i, name in enumerate(names):
        host_hw = hw["dgx-h100" if i % 2 == 0 else "hgx-h100"]
        fabric = f"fabric{i // (HOSTS // 2)}"
        nicfw, qos, pairs = [], [], []
        for rail in host_hw["rails"]:
            base = {"scope": "rail", "rail": rail["rail"], "pci_address": rail["pci_address"], "netdev": rail["netdev"]}
            nicfw += [{**base, "setting": f"nv_config.{k}", "value": v} for k, v in NV.items()]
            accl = 0 if i % 37 == 3 and rail["rail"] == 2 else 1
            nicfw.append({**base, "setting": "roce_accl.adaptive_routing_forced_en", "value": accl})
            qos += [{**base, "setting": "qos_trust", "value": "dscp"},
                    {**base, "setting": "qos_pfc", "value": [0, 0, 0, 1, 0, 0, 0, 0]},
                    {**base, "setting": "qos_ecn_np", "value": [3]},
                    {**base, "setting": "mtu", "value": 1500 if i == 10 else 9000}]
        nicfw.append({"scope": "host", "rail": None, "pci_address": None, "netdev": None, "setting": "rail_count",
                      "value": len(host_hw["rails"])})
        if i % 37 == 3:
            drift.add((name, "nic_firmware.roce_accl.adaptive_routing_forced_en"))
        if i == 10:
            drift.add((name, "roce_qos.mtu"))
        group = [n for j, n in enumerate(names) if j // (HOSTS // 2) == i // (HOSTS // 2)]
        server = group[(group.index(name) + 1) % len(group)]
        for rail in range(8):
            bad = i == 20 and rail == 5
            gbps = 120.4 if bad else 360.0 + (i * 7 + rail * 3) % 31
            pairs.append({"rail": rail, "peer": server, "peer_rail": rail, "side": "client", "gbps": gbps,
                          "line_rate_gbps": 400, "threshold_pct": 90, "status": "fail" if bad else "pass",
                          "blamed": False, "failed_side": "server" if bad else None,
                          "reason": f"{server} rail 5: {gbps} Gb/s < 90% of 400 Gb/s (failed side: server)"
                          if bad else ""})
            if bad:
                failed.add((name, server, str(rail)))
        hosts[name] = {"fabric": fabric, "hw": host_hw,
                       "contracts": {"nic_firmware_contract": nicfw, "roce_qos_contract": qos},
                       "validation": {"host": name, "passed": i != 20, "checks": [], "pairs": pairs,
                                      "taint": "kept" if i == 20 else "removed"}}
    kueue = [{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": f"h100-{p}-{f}"},
              "spec": {"nodeLabels": {"gpunode.mlplatform.io/platform": p, "gpunode.mlplatform.io/fabric": f}}}
             for p in ("dgx", "hgx") for f in ("fabric0", "fabric1")]
    kueue.append({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "gpu"},
                  "spec": {"cohortName": "gpunode", "resourceGroups": [{
                      "coveredResources": ["nvidia.com/gpu", "cpu", "memory"],
                      "flavors": [{"name": o["metadata"]["name"], "resources": [
                          {"name": "nvidia.com/gpu", "nominalQuota": 512}, {"name": "cpu", "nominalQuota": 14080},
                          {"name": "memory", "nominalQuota": "128Ti"}]} for o in kueue]}]}})
    fleet = {"hosts": hosts, "kueue": kueue, "run": {"id": "run-20261201T190000Z", "time": "2026-12-01 19:00:00 UTC"}}
    return fleet, drift, failed


class _Dom(HTMLParser):
    """What the browser built: drift rows, heatmap cells, quota cells, host details."""

    def __init__(self):
        super().__init__()
        self.drift_rows, self.cells, self.failed_cells, self.details, self.quota = set(), 0, set(), 0, []
        self.in_quota = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if tag == "tr" and "drift-row" in classes:
            self.drift_rows.add((a["data-host"], a["data-setting"]))
        elif tag == "rect" and "bw-cell" in classes:
            self.cells += 1
            if "fail" in classes:
                self.failed_cells.add((a["data-host"], a["data-peer"], a["data-rail"]))
        elif tag == "details" and a.get("data-host"):
            self.details += 1
        elif tag == "table" and "quota" in classes:
            self.in_quota = True
        elif tag == "th" and self.in_quota:
            self.quota.append(None)

    def handle_endtag(self, tag):
        if tag == "table":
            self.in_quota = False

    def handle_data(self, data):
        if self.in_quota and self.quota and self.quota[-1] is None:
            self.quota[-1] = data


def test_256_host_report_loads_in_headless_chromium(hw, tmp_path):
    browser = _chromium()
    fleet, drift, failed = _fleet(hw)
    src = tmp_path / "results"
    src.mkdir()
    (src / "fleet.json").write_text(json.dumps(fleet))
    written = write_report(src, tmp_path / "out")
    page = written["report.html"][0]
    size = page.stat().st_size
    assert size < MAX_BYTES, f"report.html is {size} bytes for {HOSTS} hosts"
    text = page.read_text(encoding="utf-8")
    assert text.index('id="drift"') < text.index('id="hosts"') < text.index('id="bandwidth"')
    proc = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         f"--user-data-dir={tmp_path / 'chromium-profile'}", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = _Dom()
    dom.feed(proc.stdout)
    assert dom.drift_rows == drift
    assert len(drift) == 8  # hosts 3, 40, ..., 225 (every 37th from 3) and host 10's MTU
    assert dom.cells == HOSTS * 8  # every host is a client on its 8 rails
    assert dom.failed_cells == failed == {("dgx0020", "hgx0021", "5")}
    assert dom.details == HOSTS
    assert dom.quota == ["ResourceFlavor", "nvidia.com/gpu", "cpu", "memory",
                         "h100-dgx-fabric0", "h100-dgx-fabric1", "h100-hgx-fabric0", "h100-hgx-fabric1"]
    assert "</svg>" in proc.stdout and "run-20261201T190000Z" in proc.stdout
