# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Run and parse perftest's ``ib_write_bw`` (pure functions, stdlib only).

Format (perftest, both sides print it; ``--report_gbits`` switches MB/sec to Gb/sec)::

    ---------------------------------------------------------------------------------------
                        RDMA_Write BW Test
     Dual-port       : OFF          Device         : mlx5_0
     ...
     Link type       : Ethernet
    ---------------------------------------------------------------------------------------
     #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
     65536      5000             392.25             391.96             0.747601
    ---------------------------------------------------------------------------------------

A failed run prints messages such as `` Couldn't connect to <host>:<port>`` or ``Failed to modify
QP ... to RTR`` and exits non-zero; no result row appears then.
"""

from __future__ import annotations

import re

from ansible_collections.mlplatform.gpunode.plugins.module_utils.parsing import ParseError, text_lines

TOOL = "ib_write_bw"
_HEADER_RE = re.compile(r"^#bytes\s+#iterations\s+")
_COLUMN_RE = re.compile(r"(#bytes|#iterations|BW peak\[(?:Gb|MB)/sec\]|BW average\[(?:Gb|MB)/sec\]|MsgRate\[Mpps\])")
_INFO_RE = re.compile(r"(?:^|\s)(?P<key>Device|Link type)\s*:\s*(?P<value>\S+)")
_MB_TO_GBITS = 8 * 1.048576 / 1000  # perftest's MB is 2^20 bytes


def parse(text):
    """``ib_write_bw`` output -> ``{"bytes", "iterations", "bw_peak_gbps", "bw_average_gbps",
    "msg_rate_mpps", "device", "link_type"}`` (bandwidth in Gb/s whatever the unit printed).

    Raises ParseError when no ``#bytes #iterations ...`` header is followed by a result row.
    """
    lines = text_lines(text, TOOL)
    info = {}
    for line in lines:
        for match in _INFO_RE.finditer(line):
            info.setdefault(match.group("key").lower().replace(" ", "_"), match.group("value"))
    for index, line in enumerate(lines):
        if not _HEADER_RE.match(line.strip()):
            continue
        columns = _COLUMN_RE.findall(line)
        for row in lines[index + 1:]:
            cells = row.split()
            if not cells or set(row.strip()) == {"-"}:
                continue
            if len(cells) != len(columns):
                raise ParseError(TOOL, f"{len(columns)} numbers under the result header", row)
            try:
                values = dict(zip(columns, (float(c) for c in cells), strict=True))
            except ValueError as exc:
                raise ParseError(TOOL, "numbers in the result row", row) from exc
            scale = 1.0 if "Gb/sec" in line else _MB_TO_GBITS
            peak = next(v for k, v in values.items() if k.startswith("BW peak"))
            average = next(v for k, v in values.items() if k.startswith("BW average"))
            return {
                "bytes": int(values["#bytes"]), "iterations": int(values["#iterations"]),
                "bw_peak_gbps": round(peak * scale, 2), "bw_average_gbps": round(average * scale, 2),
                "msg_rate_mpps": values.get("MsgRate[Mpps]"),
                "device": info.get("device"), "link_type": info.get("link_type"),
            }
        break
    raise ParseError(TOOL, "a '#bytes #iterations BW peak ... BW average ...' header and a result row")


def failure_reason(stdout, stderr, rc):
    """One line saying why a run failed: the tool's own messages, else the exit status."""
    messages = [line.strip() for line in (stderr or "").splitlines() + (stdout or "").splitlines()
                if re.search(r"(?i)couldn't|unable|failed|error|timeout|refused", line)]
    return "; ".join(dict.fromkeys(messages)) or f"exit status {rc}"


# Failures of the test harness itself, not of the host or its rail: the TCP port perftest exchanges its connection
# data on is taken or cannot be bound, or a program the harness needs is missing. Matched on the reason text the
# module and perftest give (perftest: "Couldn't bind", "Couldn't listen to port", "Address already in use").
_HARNESS_RE = re.compile(r"(?i)already in use|couldn't bind|unable to bind|bind\(\) failed|failed to bind|"
                         r"couldn't listen|address in use|perftest is not installed|harness")


def is_harness_failure(reason):
    """Whether a failure ``reason`` is the harness's (port taken, bind, a tool missing), which no remediation of the
    host can fix, rather than the host's or the rail's."""
    return bool(reason) and bool(_HARNESS_RE.search(str(reason)))


def server_argv(binary, device, port, extra=()):
    """argv of the server side: waits for one client on ``port``."""
    return [binary, "-d", device, "-p", str(port), "--report_gbits", "-F", *extra]


def client_argv(binary, device, port, server, extra=()):
    """argv of the client side: connects to ``server``:``port``."""
    return [binary, "-d", device, "-p", str(port), "--report_gbits", "-F", *extra, server]
