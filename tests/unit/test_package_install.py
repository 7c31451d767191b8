"""The `gpunode` Python package as a user installs it: a wheel built from this checkout, installed (not editable)
into a fresh venv, run from a directory outside the checkout. Its report code is the collection's
(plugins/plugin_utils), shipped in the wheel as gpunode.collection_plugins, so `gpunode report` works without the
collection on sys.path. The venv takes the third-party dependencies from the dev venv's site-packages (a .pth
line: no download), so that only the wheel's own files decide what imports."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from test_report import fleet_dir, hw  # noqa: F401 - the report tests' input directory fixture and its profiles

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    work = tmp_path_factory.mktemp("pkg")
    # With the dev venv's setuptools (pyproject's build requirement), not one downloaded into an isolated build env.
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(work / "dist"), str(REPO)], check=True, capture_output=True, text=True, cwd=work,
                   timeout=600)
    (wheel,) = (work / "dist").glob("gpunode-*.whl")
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c",
                                "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    # The dev venv's packages after the new venv's own: a plain path line, so its editable finder is not loaded.
    (site / "dev-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                    "--no-deps", "--no-index", str(wheel)], check=True, capture_output=True, text=True, timeout=300)
    return {"venv": venv, "wheel": wheel, "work": work}


def run(installed, *argv):
    return subprocess.run([str(installed["venv"] / "bin" / "gpunode"), *argv], capture_output=True, text=True,
                          cwd=installed["work"], timeout=120, check=False)


def test_the_wheel_holds_the_report_code_and_its_templates(installed):
    names = zipfile.ZipFile(installed["wheel"]).namelist()
    for name in ("gpunode/collection_plugins/plugin_utils/fleet_report.py",
                 "gpunode/collection_plugins/plugin_utils/day_two_report.py",
                 "gpunode/collection_plugins/plugin_utils/report_templates/report.html.j2",
                 "gpunode/collection_plugins/module_utils/bandwidth_history.py",
                 "gpunode/sim/profiles/dgx-h100.yaml"):
        assert name in names, name


def test_installed_commands_run_outside_the_checkout(installed, fleet_dir):  # noqa: F811 - the fixture
    where = subprocess.run([str(installed["venv"] / "bin" / "python"), "-c",
                            "import gpunode.report.model as m, gpunode; print(m.build.__module__, gpunode.__file__)"],
                           capture_output=True, text=True, cwd=installed["work"], check=True).stdout
    assert str(installed["venv"]) in where and str(REPO) not in where, where
    assert "usage: gpunode" in run(installed, "--help").stdout
    assert "serve" in run(installed, "hook", "serve", "--help").stdout
    out = installed["work"] / "report"
    proc = run(installed, "report", "--input", str(fleet_dir), "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["report.html", "report.json", "report.md"]
    assert json.loads((out / "report.json").read_text())["summary"]["drift"] == 1
