"""The report code lives in the collection (plugins/plugin_utils/fleet_report.py, with its templates and the
sections beside it): ``gpunode report`` and the ``mlplatform.gpunode.fleet_report`` action run the same code. This
package ships those files as ``gpunode.collection_plugins`` (pyproject.toml), installed from a wheel or editable."""

from __future__ import annotations

import importlib

NAME = "gpunode.collection_plugins.plugin_utils.fleet_report"


def load():
    return importlib.import_module(NAME)
