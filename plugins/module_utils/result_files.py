# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Read a host's machine-readable result files (the result_files module, and node_validation's read-back)."""

from __future__ import annotations

import fnmatch
import hashlib
import os

DEFAULT_PATH = "/var/lib/gpunode"
DEFAULT_PATTERNS = ("*.json",)
DEFAULT_MAX_BYTES = 4 * 1024 * 1024


class ResultFilesError(Exception):
    """A result file that cannot be returned (the message names it)."""


def read_result_files(path, patterns=DEFAULT_PATTERNS, max_bytes=DEFAULT_MAX_BYTES):
    """Every regular file of ``path`` whose name matches one of ``patterns`` (fnmatch, case-sensitive; no
    subdirectory): ``{name: {content (UTF-8 text), sha256 (hex), size (bytes)}}`` in name order. A missing
    ``path`` has none. Raises ResultFilesError naming the file when one is larger than ``max_bytes`` or not
    UTF-8, and when ``max_bytes`` is not positive."""
    if not isinstance(max_bytes, int) or max_bytes < 1:
        raise ResultFilesError(f"max_bytes must be a positive number of bytes, got {max_bytes}")
    try:
        names = sorted(os.listdir(path))
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ResultFilesError(f"cannot list {path}: {exc.strerror or exc}") from None
    files = {}
    for name in names:
        full = os.path.join(path, name)
        if not any(fnmatch.fnmatchcase(name, p) for p in patterns) or not os.path.isfile(full):
            continue
        try:
            with open(full, "rb") as handle:
                data = handle.read(max_bytes + 1)
        except OSError as exc:
            raise ResultFilesError(f"cannot read {full}: {exc.strerror or exc}") from None
        if len(data) > max_bytes:
            raise ResultFilesError(f"{full} is larger than max_bytes ({max_bytes} bytes)")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ResultFilesError(f"{full} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        files[name] = {"content": text, "sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    return files
