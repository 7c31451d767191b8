"""Run an Ansible module's ``main()`` in-process: ``exit_json``/``fail_json`` raise instead of exiting."""

from __future__ import annotations

from types import SimpleNamespace

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


class PublishedHostVars(dict):
    """``hostvars`` as the collection's action plugins read it (plugin_utils/fleet_vars.py): host -> its
    variables."""

    def __init__(self, hosts):
        super().__init__({h: dict(v) for h, v in hosts.items()})


def action_plugin(plugin, args):
    """One of the collection's action plugins (its module, e.g. ``plugins.action.fleet_report``) as the task
    executor builds it for one task's arguments, outside check mode."""
    task = SimpleNamespace(args=args, async_val=0, check_mode=False,
                           action=f"mlplatform.gpunode.{plugin.__name__.rsplit('.', 1)[-1]}")
    return plugin.ActionModule(task, SimpleNamespace(_shell=SimpleNamespace(tmpdir=None)), None, None, None, None)
