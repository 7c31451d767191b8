"""Run a role's tasks with ansible-playbook on local-connection hosts, for the unit tests that talk
to the API emulator (gpunode.kapi): a free loopback port in a test module's own range, and one
ansible-playbook run with the repository's ansible.cfg and collection path."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def free_port(first: int, last: int) -> int:
    """The first port in ``range(first, last)`` nothing listens on and this process can bind.

    Each test module has its own range (other sessions on the machine use theirs). Under pytest-xdist
    a worker takes only every Nth port of a range (N workers, offset by the worker's number), so two
    workers never pick the same port between the check here and the server's bind.
    """
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    offset = int(worker[2:]) % workers if worker[:2] == "gw" and worker[2:].isdigit() else 0
    for port in range(first + offset, last, workers):
        if _free(port):
            return port
    raise RuntimeError(f"no free port in {first}-{last - 1} for this worker ({worker} of {workers})")


def free_port_block(first: int, last: int, count: int) -> int:
    """The first port of ``count`` consecutive ports in ``range(first, last)`` that are all free.

    For a test that starts one server per port from a base (ib_write_bw pairs); under pytest-xdist
    each worker scans its own blocks, as in ``free_port``."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    offset = int(worker[2:]) % workers if worker[:2] == "gw" and worker[2:].isdigit() else 0
    for base in range(first + offset * count, last - count + 1, workers * count):
        if all(_free(port) for port in range(base, base + count)):
            return base
    raise RuntimeError(f"no {count} free ports in {first}-{last - 1} for this worker ({worker} of {workers})")


def _free(port: int) -> bool:
    with socket.socket() as sock:
        if sock.connect_ex(("127.0.0.1", port)) == 0:
            return False
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def run_play(tmp_path: Path, inventory: dict, play: str, *args: str) -> subprocess.CompletedProcess:
    """Write ``inventory`` and ``play`` under ``tmp_path`` and run ansible-playbook on them."""
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "play.yml").write_text(play)
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".cache" / "collections"), "ANSIBLE_FORCE_COLOR": "0"}
    return subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(tmp_path / "hosts.yml"),
                           str(tmp_path / "play.yml"), *args], capture_output=True, text=True, env=env, check=False,
                          timeout=600)


def fabric(name: str = "default", **settings) -> dict:
    """The inventory variables of a host in fabric ``name``: its declaration (``gpunode_fabric_settings``), transport
    ``roce`` unless ``settings`` says otherwise (docs/variables.md)."""
    return {"gpunode_fabric": name, "gpunode_fabric_settings": {"transport": "roce", **settings}}
