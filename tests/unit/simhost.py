"""Test helpers: a simulated host's state directory on the controller, and running a simulated tool in it."""

from __future__ import annotations

import io
import os
import sys
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

from gpunode.sim import hwstate
from gpunode.sim.profile import load_profile
from gpunode.sim.tools.main import main
from gpunode.sim.tools.state import ENV_DPKG_STATUS, ENV_NVIDIA_USERSPACE, ENV_ROOT, HostState


@dataclass
class Result:
    rc: int
    out: str
    err: str


def make_host(path: Path, profile: str = "dgx-h100", faults: dict | None = None) -> Path:
    """A fresh host state directory (profile.json, devices.json, hw.json, sys/) for ``profile``."""
    data = load_profile(profile)
    if faults:
        data["faults"] = faults
    hwstate.write_state(path, data)
    return path


def run_tool(root: Path, tool: str, *argv: str, stdin: str = "", userspace: Path | None = None,
             dpkg_status: Path | None = None) -> Result:
    """Run simulated ``tool`` against host state ``root`` the way a wrapper script would."""
    out, err = io.StringIO(), io.StringIO()
    saved = {k: os.environ.get(k) for k in (ENV_ROOT, ENV_NVIDIA_USERSPACE, ENV_DPKG_STATUS)}
    saved_stdin = sys.stdin
    os.environ[ENV_ROOT] = str(root)
    os.environ[ENV_NVIDIA_USERSPACE] = str(userspace or root / "no-userspace-file")
    os.environ[ENV_DPKG_STATUS] = str(dpkg_status or root / "no-dpkg-status")
    sys.stdin = io.StringIO(stdin)
    try:
        with redirect_stdout(out), redirect_stderr(err):
            rc = main(tool, list(argv))
    finally:
        sys.stdin = saved_stdin
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return Result(rc, out.getvalue(), err.getvalue())


def state(root: Path) -> HostState:
    return HostState(root)
