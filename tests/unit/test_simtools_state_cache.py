"""The simulated tools' state reads: decoded JSON kept by its exact bytes, and a read path that imports neither
``re``, ``json``, ``pathlib`` nor ``contextlib`` (each a few ms of every tool call; a host read runs dozens)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from simhost import make_host, run_tool

from gpunode.sim.tools import state as state_mod
from gpunode.sim.tools.state import ENV_ROOT, HostState, normalize_bdf

REPO = Path(__file__).resolve().parents[2]
BDF_RE = re.compile(r"^(?:(?P<domain>[0-9a-fA-F]{4}):)?(?P<bus>[0-9a-fA-F]{2}):(?P<dev>[0-9a-fA-F]{2})\.(?P<fn>[0-7])$")
MST_RE = re.compile(r"^(?:/dev/mst/)?mt(?P<part>\d+)_pciconf(?P<index>\d+)(?:\.(?P<fn>\d+))?$")


def test_a_file_rewritten_behind_the_cache_with_the_same_size_is_read_anew(tmp_path: Path) -> None:
    root = tmp_path / "host"
    state = HostState(root)
    state.write_json("run/qos.json", {"eth0": {"trust": "pcp"}})
    assert (root / ".cache" / "run" / "qos.json.marshal").is_file()
    assert HostState(root).read_json("run/qos.json") == {"eth0": {"trust": "pcp"}}
    # same length, written in place (same inode, within one clock tick): the bytes differ, so it is decoded again
    path = root / "run" / "qos.json"
    text = path.read_text()
    with open(path, "r+") as handle:
        handle.write(text.replace("pcp", "xyz"))
    assert HostState(root).read_json("run/qos.json") == {"eth0": {"trust": "xyz"}}


def test_a_damaged_or_foreign_cache_is_ignored_and_written_anew(tmp_path: Path) -> None:
    root = tmp_path / "host"
    HostState(root).write_json("hw.json", {"cards": {}})
    cache = root / ".cache" / "hw.json.marshal"
    for junk in (b"", b"\x00garbage", json.dumps([1, 2]).encode()):
        cache.write_bytes(junk)
        assert HostState(root).read_json("hw.json") == {"cards": {}}
    assert HostState(root).read_json("missing.json", "absent") == "absent"


def test_a_read_only_tool_call_imports_none_of_the_costly_modules(tmp_path: Path) -> None:
    root = make_host(tmp_path / "dgx", "dgx-h100")
    nic = next(r["address"] for r in HostState(root).nics())
    for tool, *argv in (("mlxconfig", "-d", nic, "-e", "q"), ("mlxreg", "-d", nic, "--reg_name", "ROCE_ACCL", "--get")):
        run_tool(root, tool, *argv)  # first call: decodes and keeps the JSON
        # The probe's stdout is a pipe; the tool's output goes to /dev/null (fd 1 swapped, no import needed).
        probe = ("import sys, os\nsys.path.insert(0, sys.argv[1])\nbefore = set(sys.modules)\n"
                 "from gpunode.sim.tools.main import main\n"
                 "keep = os.dup(1)\nos.dup2(os.open(os.devnull, os.O_WRONLY), 1)\n"
                 "rc = main(sys.argv[2], sys.argv[3:])\nsys.stdout.flush()\nos.dup2(keep, 1)\n"
                 "costly = {'re', 'json', 'pathlib', 'enum', 'contextlib'} & (set(sys.modules) - before)\n"
                 "print(rc, sorted(costly))\n")
        proc = subprocess.run([sys.executable, "-S", "-c", probe, str(REPO / "src"), tool, *argv],
                              env={**os.environ, ENV_ROOT: str(root)}, capture_output=True, text=True, check=False)
        assert proc.stdout.split("\n")[0] == "0 []", (tool, proc.stdout, proc.stderr)


@pytest.mark.parametrize("text", ["18:00.0", "0000:18:00.0", "0000:AA:00.1", " 18:00.0 \n", "18:00.8", "18:0.0",
                                  "g8:00.0", "00000:18:00.0", "18:00", "18:00.01", "0000:18:00.0.1", "", "::.0"])
def test_bdf_parsing_matches_the_documented_pattern(text: str) -> None:
    match = BDF_RE.match(text.strip())
    want = None if not match else (
        f"{(match['domain'] or '0000').lower()}:{match['bus'].lower()}:{match['dev'].lower()}.{match['fn']}")
    assert normalize_bdf(text) == want


@pytest.mark.parametrize("text", ["/dev/mst/mt4129_pciconf0", "mt4129_pciconf0.1", "mt4129_pciconf12", "mt_pciconf0",
                                  "/dev/mst/mt4129_pciconf", "mt4129_pciconf0.", "mt4129_pciconfx", "xmt4129_pciconf0",
                                  "/dev/mst//dev/mst/mt4129_pciconf0", " mt4123_pciconf1.1 "])
def test_mst_parsing_matches_the_documented_pattern(text: str) -> None:
    match = MST_RE.match(text.strip())
    want = None if not match else (match["part"], match["index"], match["fn"])
    assert state_mod._parse_mst(text) == want
