"""`site.yml --check --diff` on a fresh simulated host shows what would change and changes nothing.

A fresh HGX H100 host (nothing installed): the install stage shows the repositories, keys and
packages it would add; the stages after it end for the host with the reason (they read the host
through DOCA-OFED and the driver, not installed yet) instead of failing on a missing tool. Then no
file under /etc, /usr, /opt, /var/lib/gpunode or the simulated hardware state is newer than a
marker written before the run, and no package was installed.

Run with ``make e2e`` (needs podman and the simulated-host image; ``make image``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
HOST = "ck-fresh"
CONTAINER = f"gpunode-sim-{HOST}"


def sh(*argv: str, check: bool = True, timeout: float = 1200, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False, **kw)
    if check and proc.returncode != 0:
        tail = f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        raise AssertionError(f"{' '.join(argv[:4])}… rc={proc.returncode}\n{tail}")
    return proc


@pytest.fixture(scope="module")
def fresh_host(tmp_path_factory):
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed: run `make e2e`")
    state = tmp_path_factory.mktemp("sim")
    sh("gpunode", "sim", "--state-dir", str(state), "up", "--replace", f"{HOST}=hgx-h100")
    try:
        yield state
    finally:
        sh("gpunode", "sim", "down", "--missing-ok", HOST, check=False)


def test_check_mode_on_a_fresh_host_changes_nothing(fresh_host, tmp_path):
    sh("gpunode", "sim", "inventory", "-o", str(tmp_path / "hosts.yml"), HOST)
    sh("podman", "exec", CONTAINER, "sh", "-c", "touch /tmp/gpunode-check-marker && sleep 1")
    proc = sh("ansible-playbook", "-i", str(tmp_path / "hosts.yml"), "playbooks/site.yml", "--check", "--diff",
              "-e", '{"gpunode_reboot_ok": true}', cwd=REPO,
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
