"""ib_write_bw's servers: started in the background, detached, logged, and the module does not wait for them."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from ansible_collections.mlplatform.gpunode.plugins.modules import ib_write_bw
from module_harness import patch_exits, run_module


def _fake_tools(bindir: Path) -> None:
    """An ib_write_bw that prints its argv and locale, then serves for 60 s; timeout(1) stays the real one."""
    bindir.mkdir()
    tool = bindir / "ib_write_bw"
    tool.write_text(f"#!{sys.executable}\nimport os, sys, time\n"
                    "print('argv', *sys.argv[1:], flush=True)\n"
                    "print('LC_ALL', os.environ.get('LC_ALL'), file=sys.stderr, flush=True)\n"
                    "time.sleep(60)\n")
    tool.chmod(0o755)


def _wait_for(path: Path, text: str) -> str:
    for _ in range(100):
        body = path.read_text() if path.exists() else ""
        if text in body:
            return body
        time.sleep(0.05)
    raise AssertionError(f"{path} never showed {text!r}: {body!r}")


def test_servers_start_detached_and_the_module_returns_at_once(tmp_path, monkeypatch):
    _fake_tools(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setattr(ib_write_bw.tempfile, "mkdtemp", lambda prefix: str(tmp_path))
    patch_exits(monkeypatch)
    began = time.monotonic()
    result = run_module(ib_write_bw.main, {"servers": [{"id": "a:0-b:0", "device": "mlx5_3", "port": 18517}],
                                           "timeout": 30})
    pid = result["started"]["a:0-b:0"]
    try:
        assert time.monotonic() - began < 10  # did not wait for the 60 s server
        assert result["changed"] is False and result["tests"] == {}
        log = _wait_for(tmp_path / "18517.log", "LC_ALL")
        assert "argv -d mlx5_3 -p 18517 --report_gbits -F" in log  # stdout and stderr both in the log
        assert "LC_ALL C" in log
        assert os.getsid(pid) == pid  # its own session: the connection's exec ending does not take it down
        assert oct((tmp_path / "18517.log").stat().st_mode & 0o777) == "0o600"
    finally:
        os.killpg(pid, signal.SIGKILL)  # timeout(1) and the server under it
        os.waitpid(pid, 0)
