"""Make the collection importable as ``ansible_collections.mlplatform.gpunode`` in the end-to-end tests, as the unit
tests' conftest does (the ``.cache/collections`` link that ``make`` creates for ansible-playbook)."""

from __future__ import annotations

import sys
from pathlib import Path

COLLECTIONS = Path(__file__).resolve().parents[2] / ".cache" / "collections"
if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))
