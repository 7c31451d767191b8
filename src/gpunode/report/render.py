"""The report renderer, from the collection (plugins/plugin_utils/fleet_report.py)."""

from __future__ import annotations

from gpunode.report._collection import load

_report = load()
TEMPLATES = _report.TEMPLATES
cell_text = _report.cell_text
render = _report.render
value_text = _report.value_text
write_report = _report.write_report
