# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet report's day-two section, from the day-two database (bandwidth history, remediation states, events).

``load(path)`` reads the database once (read-only); ``html_section``/``md_section`` render it. Each rail whose
latest run regressed against its own history (or fell below line rate) gets a small inline SVG trend plot of its
last runs with its baseline; the remediation events are listed newest first.
"""

from __future__ import annotations

import html
import time
from contextlib import closing
from pathlib import Path

# Relative: the same files are the report code of the `gpunode` Python package (pyproject.toml ships them).
from ..module_utils import bandwidth_history as bh
from . import history_db
from .fleet_report import md_code, md_escape

EVENTS = 50
POINTS = 20
TREND = (160, 36)


def _table(conn, name):
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone()


def load(path, *, window=10, drop_pct=10.0, threshold_pct=90.0, points=POINTS, events=EVENTS):
    """``{states, events, rails}`` from the database at ``path`` (None when there is no file).

    ``rails``: the host rails whose latest run is judged a regression, below line rate or failed (the
    bandwidth_history rules, with at least one earlier run), each with ``trend`` (its last ``points`` runs,
    lowest result per run, oldest first), ``baseline_gbps``, ``reasons`` and ``line``."""
    if not path or not Path(path).is_file():
        return None
    # Verified and read-only; an older schema is moved forward in a copy in memory.
    with closing(history_db.open_db(str(path), check_mode=True)) as conn:
        states, rows, rails = [], [], []
        if _table(conn, "remediation"):
            states = [dict(zip(("host", "fabric", "state", "attempts", "reason", "updated"), r, strict=True))
                      for r in conn.execute("SELECT host, fabric, state, attempts, reason, updated FROM remediation "
                                            "ORDER BY host")]
        if _table(conn, "events"):
            rows = [dict(zip(("time", "run", "host", "step", "detail"), r, strict=True))
                    for r in conn.execute("SELECT time, run, host, step, detail FROM events ORDER BY time DESC, "
                                          "id DESC LIMIT ?", (events,))]
        if _table(conn, "bandwidth"):
            rails = _flagged_rails(conn, window, drop_pct, threshold_pct, points)
    for entry in rows + states:
        stamp = entry.get("time", entry.get("updated"))
        entry["when"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(stamp))
    return {"states": states, "events": rows, "rails": rails}


def _flagged_rails(conn, window, drop_pct, threshold_pct, points):
    latest = {}
    # The latest run of each rail by run sequence (the order runs were recorded in, whatever their clock said).
    for host, rail, run in conn.execute("SELECT host, rail, run FROM bandwidth b WHERE seq = (SELECT MAX(seq) "
                                        "FROM bandwidth WHERE host = b.host AND rail = b.rail) GROUP BY host, rail"):
        latest[(host, rail)] = run
    out = []
    for (host, rail), run in sorted(latest.items()):
        cur = conn.execute("SELECT host, rail, peer, peer_rail, side, gbps, line_rate_gbps, time, run, version "
                           "FROM bandwidth WHERE host = ? AND rail = ? AND run = ?", (host, rail, run))
        now = [dict(zip(bh.COLUMNS, r, strict=True)) for r in cur.fetchall()]
        earlier = history_db.earlier_results(conn, [(host, rail)], window, run)[(host, rail)]
        (finding,) = bh.judge(now, {(host, rail): earlier}, window=window, min_points=1, drop_pct=drop_pct,
                              threshold_pct=threshold_pct)
        if not finding["reasons"] or not earlier:
            continue
        trend = history_db.trend(conn, [(host, rail)], points)[f"{host}/{rail}"]
        out.append({**finding, "trend": trend, "line": bh.describe(finding)})
    return out


def trend_svg(rail):
    """A rail's trend as a small inline SVG: its runs' results as a polyline (a dot per run, the last one red when
    flagged), its baseline dashed; every value escaped, a ``title`` per point."""
    width, height = TREND
    values = [p["gbps"] for p in rail["trend"]]
    measured = [v for v in values if v is not None] + [v for v in (rail.get("baseline_gbps"),) if v]
    top = max(measured or [1.0]) * 1.1
    step = (width - 8) / max(1, len(values) - 1)

    def y(value):
        return height - 4 - (height - 8) * (value or 0) / top

    esc = html.escape
    label = f"{rail['host']} rail {rail['rail']}: last {len(values)} runs"
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="trend" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="{esc(label)}" data-host="{esc(str(rail["host"]))}" '
           f'data-rail="{esc(str(rail["rail"]))}">']
    if rail.get("baseline_gbps"):
        base, base_text = y(rail["baseline_gbps"]), f"{rail['baseline_gbps']:g}"
        out.append(f'<line class="baseline" x1="4" x2="{width - 4}" y1="{base:.1f}" y2="{base:.1f}" stroke="#757575" '
                   f'stroke-dasharray="3,2"><title>baseline {esc(base_text)} Gb/s</title></line>')
    coords = [(4 + i * step, y(v)) for i, v in enumerate(values)]
    out.append('<polyline fill="none" stroke="#1565c0" points="'
               + " ".join(f"{x:.1f},{yy:.1f}" for x, yy in coords) + '"/>')
    for i, ((x, yy), point) in enumerate(zip(coords, rail["trend"], strict=True)):
        last = i == len(coords) - 1
        colour = "#c62828" if last and rail["reasons"] else "#1565c0"
        text = "failed" if point["gbps"] is None else f"{point['gbps']:g} Gb/s"
        out.append(f'<circle cx="{x:.1f}" cy="{yy:.1f}" r="2.5" fill="{colour}"><title>{esc(str(point["run"]))}: '
                   f'{esc(text)}</title></circle>')
    out.append("</svg>")
    return "".join(out)


def html_section(day_two):
    """The day-two section of report.html (``""`` without a database)."""
    if day_two is None:
        return ""
    esc = html.escape
    out = ['<h2 id="day-two">Day two: revalidation and remediation</h2>']
    out.append("<h3>Rails below their own history</h3>")
    if day_two["rails"]:
        out.append('<table class="day-two-rails"><tr><th>Host</th><th>Rail</th><th>Trend</th><th>Finding</th></tr>')
        for rail in day_two["rails"]:
            host, number = esc(str(rail["host"])), esc(str(rail["rail"]))
            out.append(f'<tr class="regression" data-host="{host}" data-rail="{number}">'
                       f'<td>{esc(str(rail["host"]))}</td><td>{esc(str(rail["rail"]))}</td><td>{trend_svg(rail)}</td>'
                       f'<td>{esc(rail["line"])}</td></tr>')
        out.append("</table>")
    else:
        out.append("<p>Every rail's latest result is at its baseline and line rate.</p>")
    out.append("<h3>Hosts out of service</h3>")
    away = [s for s in day_two["states"] if s["state"] != "in_service"]
    if away:
        out.append('<table class="day-two-states"><tr><th>Host</th><th>Fabric</th><th>State</th><th>Attempts</th>'
                   "<th>Since</th><th>Reason</th></tr>")
        for s in away:
            out.append(f'<tr data-host="{esc(s["host"])}" data-state="{esc(s["state"])}"><td>{esc(s["host"])}</td>'
                       f'<td>{esc(s["fabric"])}</td><td>{esc(s["state"])}</td><td>{int(s["attempts"])}</td>'
                       f'<td>{esc(s["when"])}</td><td>{esc(s["reason"])}</td></tr>')
        out.append("</table>")
    else:
        out.append("<p>None.</p>")
    out.append("<h3>Events</h3>")
    if day_two["events"]:
        out.append('<table class="day-two-events"><tr><th>Time</th><th>Run</th><th>Host</th><th>Step</th>'
                   "<th>Detail</th></tr>")
        for e in day_two["events"]:
            out.append(f'<tr class="event" data-host="{esc(e["host"])}" data-step="{esc(e["step"])}">'
                       f'<td>{esc(e["when"])}</td><td><code>{esc(e["run"])}</code></td><td>{esc(e["host"])}</td>'
                       f'<td>{esc(e["step"])}</td><td>{esc(e["detail"])}</td></tr>')
        out.append("</table>")
    else:
        out.append("<p>No remediation event recorded.</p>")
    return "\n".join(out) + "\n"


def _md(text):
    return md_escape(text)


def _trend_text(trend):
    return " ".join("-" if p["gbps"] is None else format(p["gbps"], "g") for p in trend)


def md_section(day_two):
    """The day-two section of report.md (``""`` without a database)."""
    if day_two is None:
        return ""
    out = ["## Day two: revalidation and remediation", "", "### Rails below their own history", ""]
    if day_two["rails"]:
        out += ["| Host | Rail | Last runs (Gb/s) | Finding |", "|---|---|---|---|"]
        out += [f"| {_md(r['host'])} | {_md(r['rail'])} | {_md(_trend_text(r['trend']))} | {_md(r['line'])} |"
                for r in day_two["rails"]]
    else:
        out.append("Every rail's latest result is at its baseline and line rate.")
    out += ["", "### Hosts out of service", ""]
    away = [s for s in day_two["states"] if s["state"] != "in_service"]
    if away:
        out += ["| Host | Fabric | State | Attempts | Since | Reason |", "|---|---|---|---|---|---|"]
        out += [f"| {_md(s['host'])} | {_md(s['fabric'])} | {_md(s['state'])} | {_md(s['attempts'])} | "
                f"{_md(s['when'])} | {_md(s['reason'])} |" for s in away]
    else:
        out.append("None.")
    out += ["", "### Events", ""]
    if day_two["events"]:
        out += ["| Time | Run | Host | Step | Detail |", "|---|---|---|---|---|"]
        out += [f"| {_md(e['when'])} | {md_code(e['run'])} | {_md(e['host'])} | {_md(e['step'])} | {_md(e['detail'])} |"
                for e in day_two["events"]]
    else:
        out.append("No remediation event recorded.")
    return "\n".join(out) + "\n\n"
