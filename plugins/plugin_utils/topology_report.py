# Copyright: (c) 2026, mlplatform.gpunode developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet report's topology section: block -> rack -> hosts (the topology action's ``tree``), each miscabled rail
marked under its host with the switch ports expected and found."""

from __future__ import annotations

import html

# Relative: the same files are the report code of the `gpunode` Python package (pyproject.toml ships them).
from ..module_utils import topology as topo
from .fleet_report import md_code, md_escape


def _miscabled_by_host(topology):
    out = {}
    for entry in topology.get("miscabled") or []:
        out.setdefault(entry["host"], []).append(entry)
    return out


def html_section(topology):
    """``<h2 id="topology">`` with a nested list; ``""`` without a topology."""
    if not topology or not topology.get("tree"):
        return ""
    esc = html.escape
    bad = _miscabled_by_host(topology)
    out = ['<h2 id="topology">Topology</h2>', '<ul class="topology">']
    for block, racks in topology["tree"].items():
        out.append(f'<li class="block" data-block="{esc(block)}">block <code>{esc(block)}</code><ul>')
        for rack, hosts in racks.items():
            out.append(f'<li class="rack" data-rack="{esc(rack)}">rack <code>{esc(rack)}</code>: {len(hosts)} '
                       f'host(s)<ul>')
            for host in hosts:
                entries = bad.get(host, [])
                cls = "host miscabled" if entries else "host"
                out.append(f'<li class="{cls}" data-host="{esc(host)}">{esc(host)}')
                if entries:
                    out.append("<ul>" + "".join(f'<li class="miscabled-rail" data-rail="{e["rail"]}">'
                                                f'{esc(topo.describe_miscabled(e))}</li>' for e in entries) + "</ul>")
                out.append("</li>")
            out.append("</ul></li>")
        out.append("</ul></li>")
    out.append("</ul>")
    for warning in topology.get("warnings") or []:
        out.append(f'<p class="warning">{esc(warning)}</p>')
    return "\n".join(out) + "\n"


def md_section(topology):
    """The topology as a Markdown list; ``""`` without a topology."""
    if not topology or not topology.get("tree"):
        return ""
    bad = _miscabled_by_host(topology)
    out = ["## Topology", ""]
    for block, racks in topology["tree"].items():
        out.append(f"- block {md_code(block)}")
        for rack, hosts in racks.items():
            out.append(f"  - rack {md_code(rack)}: {len(hosts)} host(s)")
            for host in hosts:
                out.append(f"    - {md_escape(host)}" + (" **miscabled**" if host in bad else ""))
                out += [f"      - {md_escape(topo.describe_miscabled(e))}" for e in bad.get(host, [])]
    return "\n".join(out) + "\n\n"
