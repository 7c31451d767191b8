# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Bandwidth history of the fleet's rails and the regressions it shows (pure functions, no I/O).

A row is one ib_write_bw result of one host rail as the validation role judged it (``validation_result['pairs']``):
the host, its rail, the peer host and rail, the side the host ran (client or server), the measured Gb/s (None when
the test failed), the rail's line rate, the time (seconds since the epoch), the run and the collection version.

A rail's baseline is the median of its last ``window`` measured results before this run. A result is a regression
when it is more than ``drop_pct`` percent below that baseline (with at least ``min_points`` earlier results), and
below line rate when it is under ``threshold_pct`` of the rail's line rate. Both are reported with their numbers,
so a rail that lost 5 % against its own history is caught even while it still passes the line-rate threshold.
"""

from __future__ import annotations

import math
from statistics import median

COLUMNS = ("host", "rail", "peer", "peer_rail", "side", "gbps", "line_rate_gbps", "time", "run", "version")


class HistoryError(ValueError):
    """A validation result that cannot be recorded; the message names the host and the entry."""


# No RDMA port measures more: four times an 800 Gb/s port (XDR). A result above it, or above 1.5x its rail's line
# rate, is a unit or parsing error, not a measurement.
MAX_GBPS = 3200.0


def _whole(value, what, where):
    """A rail number: a whole number (an int, or a string or float of one), 0 or more."""
    if isinstance(value, bool):
        raise HistoryError(f"{where}.{what} is {value!r}, not a rail number")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        value = int(value.strip())
    if not isinstance(value, int) or value < 0:
        raise HistoryError(f"{where}.{what} is {value!r}, not a rail number (a whole number from 0)")
    return value


def _number(value, what, where):
    """A finite number (None stays None)."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise HistoryError(f"{where}.{what} is {value!r}, not a number")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise HistoryError(f"{where}.{what} is {value!r}, not a number") from None
    if not math.isfinite(number):
        raise HistoryError(f"{where}.{what} is {value!r}, not a finite number")
    return number


def rows_from_validation(host, result, *, time, run, version):
    """The history rows of one host's ``validation_result`` (its ``pairs``); ``[]`` when it ran no bandwidth test."""
    if not isinstance(result, dict):
        raise HistoryError(f"{host}: validation_result is not a mapping (run the validation role first)")
    pairs = result.get("pairs") or []
    if not isinstance(pairs, list):
        raise HistoryError(f"{host}: validation_result.pairs is not a list")
    rows = []
    for index, pair in enumerate(pairs):
        where = f"{host}: validation_result.pairs[{index}]"
        if not isinstance(pair, dict):
            raise HistoryError(f"{where} is not a mapping")
        if pair.get("status") == "harness_error":  # the harness failed (port, bind, a tool): nothing was measured
            continue
        missing = [k for k in ("rail", "peer", "peer_rail", "side") if pair.get(k) is None]
        if missing:
            raise HistoryError(f"{where} lacks or mistypes {', '.join(missing)} (rail, peer, peer_rail, side, gbps, "
                               "line_rate_gbps)")
        rail, peer_rail = _whole(pair["rail"], "rail", where), _whole(pair["peer_rail"], "peer_rail", where)
        peer, side = str(pair["peer"]), str(pair["side"])
        line_rate = _number(pair.get("line_rate_gbps"), "line_rate_gbps", where)
        gbps = _number(pair.get("gbps"), "gbps", where)
        if side not in ("client", "server"):
            raise HistoryError(f"{where}.side is {side!r}, not client or server")
        if not peer.strip():
            raise HistoryError(f"{where}.peer is empty")
        if line_rate is not None and not 0 < line_rate <= MAX_GBPS:
            raise HistoryError(f"{where}.line_rate_gbps is {pair['line_rate_gbps']!r}: a rail's line rate is above 0 "
                               f"and at most {MAX_GBPS:g} Gb/s")
        if gbps is not None and not 0 <= gbps <= min(MAX_GBPS, 1.5 * line_rate if line_rate else MAX_GBPS):
            bound = f"1.5 times its line rate {line_rate:g} Gb/s" if line_rate and line_rate * 1.5 < MAX_GBPS \
                else f"{MAX_GBPS:g} Gb/s"
            raise HistoryError(f"{where}.gbps is {pair['gbps']!r}: an impossible result (below 0 or above {bound}); "
                               "nothing is recorded")
        rows.append({"host": str(host), "rail": rail, "peer": peer, "peer_rail": peer_rail, "side": side,
                     "gbps": gbps, "line_rate_gbps": line_rate, "time": float(time), "run": str(run),
                     "version": str(version)})
    return rows


def harness_errors(host, result):
    """The reasons of one host's tests the harness failed (``status: harness_error``): not measurements, not the
    host's findings."""
    pairs = (result or {}).get("pairs") if isinstance(result, dict) else None
    return [str(p.get("reason")) for p in pairs or [] if isinstance(p, dict) and p.get("status") == "harness_error"]


def baseline(values, window):
    """Median of the last ``window`` measured values (oldest first in ``values``); None when there are none."""
    measured = [v for v in values if v is not None][-window:]
    return median(measured) if measured else None


def judge(rows, earlier, *, window, min_points, drop_pct, threshold_pct):
    """This run's findings per host rail.

    ``rows``: this run's rows. ``earlier``: ``{(host, rail): [gbps, ...]}`` before this run, oldest first.
    Returns ``[{host, rail, gbps, baseline_gbps, points, drop_pct, line_rate_gbps, reasons: [...]}]`` for every
    host rail measured in this run, sorted by host and rail: ``gbps`` is the rail's lowest result of the run (the
    side and peer it came from are named), ``reasons`` is empty for a healthy rail, else holds ``regression``
    and/or ``below_line_rate`` or ``failed`` (no result)."""
    by_rail = {}
    for row in rows:
        by_rail.setdefault((row["host"], row["rail"]), []).append(row)
    out = []
    for (host, rail), own in sorted(by_rail.items()):
        measured = [r for r in own if r["gbps"] is not None]
        worst = min(measured, key=lambda r: r["gbps"]) if measured else own[0]
        history = earlier.get((host, rail), [])
        points = len([v for v in history if v is not None][-window:])
        base = baseline(history, window)
        line_rate = worst["line_rate_gbps"]
        finding = {"host": host, "rail": rail, "gbps": worst["gbps"], "peer": worst["peer"],
                   "peer_rail": worst["peer_rail"], "side": worst["side"], "baseline_gbps": base, "points": points,
                   "drop_pct": None, "line_rate_gbps": line_rate, "reasons": []}
        if worst["gbps"] is None:
            finding["reasons"].append("failed")
        else:
            if base:
                finding["drop_pct"] = round((base - worst["gbps"]) / base * 100, 2)
                if points >= min_points and finding["drop_pct"] > drop_pct:
                    finding["reasons"].append("regression")
            if line_rate and worst["gbps"] < line_rate * threshold_pct / 100:
                finding["reasons"].append("below_line_rate")
        out.append(finding)
    return out


def describe(finding):
    """One line for a finding with reasons, naming the host rail, the numbers and the peer."""
    parts = []
    for reason in finding["reasons"]:
        if reason == "regression":
            parts.append(f"{finding['gbps']:g} Gb/s is {finding['drop_pct']:g}% below its own baseline "
                         f"{finding['baseline_gbps']:g} Gb/s (median of its last {finding['points']} results)")
        elif reason == "below_line_rate":
            parts.append(f"{finding['gbps']:g} Gb/s is below the line-rate threshold of "
                         f"{finding['line_rate_gbps']:g} Gb/s")
        elif reason == "failed":
            parts.append("no result (the test failed)")
    return (f"{finding['host']} rail {finding['rail']} (as {finding['side']}, peer {finding['peer']} rail "
            f"{finding['peer_rail']}): " + "; ".join(parts))
