"""Shared pytest setup: make the collection importable as ``ansible_collections.mlplatform.gpunode``.

The repository root *is* the collection. Ansible (and our module_utils imports) need it under an
``ansible_collections/<namespace>/<name>`` path, so a symlink is kept in ``.cache/collections``
(git-ignored; ``make`` creates the same one for ansible-playbook through ansible.cfg).
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("GPUNODE_SHARED_DIR") or REPO.parent / "shared")  # env: worktrees beside it
COLLECTIONS = REPO / ".cache" / "collections"
_LINK = COLLECTIONS / "ansible_collections" / "mlplatform" / "gpunode"

if not _LINK.exists():
    _LINK.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):  # another process made it first
        os.symlink(REPO, _LINK)
if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))
if str(REPO / "src") not in sys.path:
    sys.path.insert(0, str(REPO / "src"))


def pytest_collection_modifyitems(config, items):
    """The files marked slow first, each file's tests in their order: `make unit`'s workers (pytest-xdist, one file
    at a time each) then finish together, instead of one running a long playbook file alone at the end."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture
def real_outputs() -> Path:
    """The directory of real command outputs in ../shared (skips when ../shared is absent)."""
    path = SHARED / "real-outputs"
    if not path.is_dir():
        pytest.skip(f"{path} is absent: real-output conformance needs ../shared beside the repo")
    return path
