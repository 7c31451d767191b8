"""The report code lives in the collection (plugins/plugin_utils/fleet_report.py, with its
templates): ``gpunode report`` and the ``mlplatform.gpunode.fleet_report`` action run the same
code. Loaded from the collection when it is importable, else from the checkout this package sits in."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

NAME = "ansible_collections.mlplatform.gpunode.plugins.plugin_utils.fleet_report"


def load():
    try:
        return importlib.import_module(NAME)
    except ImportError:
        pass
    path = Path(__file__).resolve().parents[3] / "plugins" / "plugin_utils" / "fleet_report.py"
    if "gpunode_fleet_report" in sys.modules:
        return sys.modules["gpunode_fleet_report"]
    spec = importlib.util.spec_from_file_location("gpunode_fleet_report", path)
    if spec is None or not path.is_file():
        raise ImportError(f"the report code of the collection is not at {path} and {NAME} is not importable")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpunode_fleet_report"] = module
    spec.loader.exec_module(module)
    return module
