"""The e2e tests' one way to run a command: output captured, an AssertionError with its tail when it fails."""

from __future__ import annotations

import subprocess
from pathlib import Path


def sh(*argv: str, check: bool = True, timeout: float = 600, cwd: Path | None = None,
       env: dict | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False, cwd=cwd,
                          env=env)
    if check and proc.returncode != 0:
        tail = f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        raise AssertionError(f"{' '.join(argv[:4])}… rc={proc.returncode}\n{tail}")
    return proc
