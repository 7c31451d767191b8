"""Run an Ansible module's ``main()`` in-process: ``exit_json``/``fail_json`` raise instead of exiting."""

from __future__ import annotations

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args


class ExitJson(Exception):
    """``exit_json`` was called; ``args[0]`` is the result (``changed`` defaults to False)."""


class FailJson(Exception):
    """``fail_json`` was called; ``args[0]`` is the result with ``failed`` and ``msg``."""


def _exit_json(self, **kwargs):
    kwargs.setdefault("changed", False)
    raise ExitJson(kwargs)


def _fail_json(self, msg, **kwargs):
    kwargs.update(failed=True, msg=msg)
    raise FailJson(kwargs)


def patch_exits(monkeypatch) -> None:
    """Make every AnsibleModule raise ExitJson/FailJson for the rest of the test."""
    monkeypatch.setattr(basic.AnsibleModule, "exit_json", _exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", _fail_json)


def run_module(main, args: dict, expect: type[Exception] = ExitJson) -> dict:
    """Call ``main()`` with ``args`` as the module arguments; return the result it exited with."""
    with patch_module_args(args), pytest.raises(expect) as err:
        main()
    return err.value.args[0]
