"""A small runner for the podman CLI (argv lists only, never a shell).

Podman is started with the project's ``containers.conf`` through ``CONTAINERS_CONF`` unless the
caller already set one: runc, cgroupfs and explicit ulimits (design.md §7), without touching the
system's configuration.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

CONTAINERS_CONF = Path(__file__).parent / "image" / "containers.conf"
LABEL = "io.mlplatform.gpunode.sim"


class PodmanError(RuntimeError):
    """A podman command failed; the message carries the command and its stderr."""


def env() -> dict[str, str]:
    """The environment podman runs with (the project's containers.conf by default)."""
    result = dict(os.environ)
    result.setdefault("CONTAINERS_CONF", str(CONTAINERS_CONF))
    return result


def run(*args: str, check: bool = True, input_bytes: bytes | None = None) -> subprocess.CompletedProcess:
    """Run ``podman <args>`` and return the completed process (text output)."""
    argv = ["podman", *args]
    proc = subprocess.run(argv, input=input_bytes, capture_output=True, env=env(), check=False)
    out = proc.stdout.decode(errors="replace")
    err = proc.stderr.decode(errors="replace")
    if check and proc.returncode != 0:
        raise PodmanError(f"{' '.join(argv)} failed (rc={proc.returncode}): {err.strip() or out.strip()}")
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def image_exists(ref: str) -> bool:
    """True when the image ``ref`` is in local storage."""
    return run("image", "exists", ref, check=False).returncode == 0


def import_rootfs(rootfs: Path, ref: str, changes: list[str]) -> None:
    """Turn a root filesystem directory into the image ``ref`` (tar | podman import)."""
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE)
    argv = ["podman", "import"]
    for change in changes:
        argv += ["--change", change]
    argv += ["-", ref]
    proc = subprocess.run(argv, stdin=tar.stdout, capture_output=True, env=env(), check=False)
    tar.stdout.close()
    tar_rc = tar.wait()
    if tar_rc != 0 or proc.returncode != 0:
        raise PodmanError(f"podman import of {rootfs} failed (tar rc={tar_rc}, rc={proc.returncode}): "
                          f"{proc.stderr.decode(errors='replace').strip()}")


def containers(label: str = LABEL) -> list[dict]:
    """Every container (running or not) carrying ``label``, as podman's JSON records."""
    out = run("ps", "-a", "--filter", f"label={label}", "--format", "json").stdout
    return json.loads(out or "[]")


def exists(name: str) -> bool:
    """True when a container called ``name`` exists."""
    return run("container", "exists", name, check=False).returncode == 0


def wait_booted(name: str, timeout: float = 240.0) -> str:
    """Wait until systemd in ``name`` reports running (or degraded); return that state.

    A real H100 server takes minutes to boot, so the budget is generous; a boot that still does not
    finish is reported with the jobs systemd is still waiting for, which name the unit that hangs."""
    deadline = time.monotonic() + timeout
    state = "unknown"
    while time.monotonic() < deadline:
        proc = run("exec", name, "systemctl", "is-system-running", check=False)
        state = proc.stdout.strip() or "unknown"
        if state in ("running", "degraded"):
            return state
        time.sleep(0.5)
    jobs = run("exec", name, "systemctl", "list-jobs", "--no-pager", "--no-legend", check=False).stdout.strip()
    raise PodmanError(f"container {name}: systemd did not finish booting within {timeout:.0f}s (state {state}); "
                      f"jobs still queued: {'; '.join(' '.join(line.split()) for line in jobs.splitlines()) or 'none'}")
