"""result_files (one read of a host's result files) and fleet_report's host_files (written on the controller,
each file only when it differs; names checked before any write)."""

from __future__ import annotations

import hashlib
import os
import socket

import pytest
from ansible_collections.mlplatform.gpunode.plugins.action.fleet_report import write_host_files
from ansible_collections.mlplatform.gpunode.plugins.modules import result_files
from module_harness import FailJson, patch_exits, run_module

HOST = socket.gethostname()  # every module error names the host (module_utils/host_errors.py)


@pytest.fixture(autouse=True)
def _exits(monkeypatch):
    patch_exits(monkeypatch)


def test_reads_every_matching_file_with_its_digest(tmp_path):
    (tmp_path / "validation.json").write_text('{"passed": true}\n')
    (tmp_path / "reboot.json").write_text("{}\n")
    (tmp_path / "notes.txt").write_text("not a result\n")
    (tmp_path / "sub.json").mkdir()
    result = run_module(result_files.main, {"path": str(tmp_path)})
    assert result["changed"] is False
    assert sorted(result["files"]) == ["reboot.json", "validation.json"]
    entry = result["files"]["validation.json"]
    assert entry == {"content": '{"passed": true}\n', "size": 17,
                     "sha256": hashlib.sha256(b'{"passed": true}\n').hexdigest()}


def test_a_missing_directory_has_no_files(tmp_path):
    assert run_module(result_files.main, {"path": str(tmp_path / "absent")})["files"] == {}


def test_a_file_over_the_limit_or_not_text_fails_naming_it(tmp_path):
    (tmp_path / "big.json").write_text("x" * 100)
    result = run_module(result_files.main, {"path": str(tmp_path), "max_bytes": 10}, expect=FailJson)
    assert result["msg"] == f"result_files on {HOST}: {tmp_path / 'big.json'} is larger than max_bytes (10 bytes)"
    (tmp_path / "big.json").unlink()
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe")
    result = run_module(result_files.main, {"path": str(tmp_path)}, expect=FailJson)
    assert f"{tmp_path / 'bin.json'} is not UTF-8 text" in result["msg"]


def test_host_files_are_written_only_when_they_differ(tmp_path):
    registered = {"changed": False, "files": {"validation.json": {"content": "{}\n", "sha256": "x", "size": 3}}}
    first = write_host_files(str(tmp_path), {"gpu-a": registered, "gpu-b": {"skipped": True}, "gpu-c": {}})
    path = tmp_path / "hosts" / "gpu-a" / "validation.json"
    assert first == [str(path)] and path.read_text() == "{}\n"
    assert not (tmp_path / "hosts" / "gpu-b").exists()
    mtime = os.stat(path).st_mtime_ns
    assert write_host_files(str(tmp_path), {"gpu-a": registered}) == []
    assert os.stat(path).st_mtime_ns == mtime
    # A changed file is rewritten.
    changed = {"changed": False, "files": {"validation.json": {"content": '{"passed": false}\n'}}}
    assert write_host_files(str(tmp_path), {"gpu-a": changed}) == [str(path)]
    assert path.read_text() == '{"passed": false}\n'
    # Only the registered result is taken: a bare name -> text mapping is refused, nothing written.
    with pytest.raises(ValueError, match="gpu-a: the result has no files mapping"):
        write_host_files(str(tmp_path), {"gpu-a": {"validation.json": "{}\n"}})
    assert path.read_text() == '{"passed": false}\n'


@pytest.mark.parametrize("host, name", [("gpu-a", "../escape.json"), ("../x", "a.json"), ("gpu-a", ".hidden"),
                                        ("gpu-a", "")])
def test_host_files_refuse_a_path_outside_the_host_directory_and_write_nothing(tmp_path, host, name):
    files = {"gpu-ok": {"files": {"ok.json": {"content": "{}\n"}}}, host: {"files": {name: {"content": "{}\n"}}}}
    with pytest.raises(ValueError, match="is not a plain file or host name"):
        write_host_files(str(tmp_path), files)
    assert not (tmp_path / "hosts").exists()
