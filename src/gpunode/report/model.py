"""The report model, from the collection (plugins/plugin_utils/fleet_report.py)."""

from __future__ import annotations

from gpunode.report._collection import load

_report = load()
CONTRACT_SUFFIX = _report.CONTRACT_SUFFIX
KUEUE_KINDS = _report.KUEUE_KINDS
ReportInputError = _report.ReportInputError
build = _report.build
contract_table = _report.contract_table
kueue_summary = _report.kueue_summary
load_inputs = _report.load_inputs
rail_rows = _report.rail_rows
validation_summary = _report.validation_summary
