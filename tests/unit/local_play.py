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
    """The first port in ``range(first, last)`` nothing listens on (each test module has its own range)."""
    for port in range(first, last):
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) != 0:
                return port
    raise RuntimeError(f"no free port in {first}-{last - 1}")


def run_play(tmp_path: Path, inventory: dict, play: str, *args: str) -> subprocess.CompletedProcess:
    """Write ``inventory`` and ``play`` under ``tmp_path`` and run ansible-playbook on them."""
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "play.yml").write_text(play)
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".cache" / "collections"), "ANSIBLE_FORCE_COLOR": "0"}
    return subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(tmp_path / "hosts.yml"),
                           str(tmp_path / "play.yml"), *args], capture_output=True, text=True, env=env, check=False,
                          timeout=600)
