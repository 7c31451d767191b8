# Copyright: (c) 2025, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What every tool-output parser shares: the error type and line splitting (stdlib only, Python 3.9+).

A parser either returns values a human would read in the text, or raises ``ParseError`` naming
the tool, what it expected and (when there is one) the offending line. It never guesses.
"""

from __future__ import annotations


class ParseError(ValueError):
    """Tool output that does not have the expected shape.

    ``str(err)`` reads ``"<tool>: expected <what>[, line N: '<line>']"``.
    """

    def __init__(self, tool, expected, line=None, lineno=None):
        self.tool = tool
        self.expected = expected
        self.line = line
        self.lineno = lineno
        message = f"{tool}: expected {expected}"
        if line is not None:
            where = f"line {lineno}" if lineno is not None else "line"
            message += f", {where}: {line.strip()!r}"
        super().__init__(message)


def text_lines(text, tool):
    """Split tool output into lines without trailing whitespace (``\\r`` included).

    Raises ParseError for None, non-text and blank input: an empty capture is never a valid answer.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    if not isinstance(text, str):
        raise ParseError(tool, f"text output, got {type(text).__name__}")
    lines = [line.rstrip() for line in text.splitlines()]
    if not any(lines):
        raise ParseError(tool, "some output, got empty text")
    return lines


def tool_messages(lines, prefix):
    """Lines starting with an MFT message prefix (``-E-``, ``-W-``, ``-I-``), prefix removed."""
    return [line.strip()[len(prefix):].strip() for line in lines if line.strip().startswith(prefix)]
