"""Entry point of every simulated tool: ``main(tool, argv) -> exit status``.

A tool is a module of this package with ``run(argv: list[str], tool: str) -> int`` (or
``main(argv) -> int``, as the Kubernetes tools have). Its module is
the tool name with ``-`` replaced by ``_`` (``nvidia-smi`` -> ``nvidia_smi``), unless
:data:`ALIASES` maps it (``mstconfig`` -> ``mlxconfig``). Adding a tool means adding a module.
Inside a simulated host every tool is a wrapper script (../README.md §2) calling ``main``.
"""

from __future__ import annotations

import os
import sys
import time

from .state import HostState, StateError

ALIASES = {
    "mstconfig": "mlxconfig",
    "gpunode-sim-fabric": "simctl",
    "gpunode-sim-ctl": "simctl",
}
_FIRST = frozenset("abcdefghijklmnopqrstuvwxyz")
_REST = _FIRST | frozenset("0123456789_")
NOT_TOOLS = {"main", "state", "nvconfig", "topo"}
#: The volatile state (``run/<HANG>.json``) listing the tools that hang (``gpunode sim fault H hang nvidia-smi``).
HANG = "hang"


def module_name(tool: str) -> str | None:
    name = ALIASES.get(tool, tool.replace("-", "_"))
    if not name or name[0] not in _FIRST or not _REST.issuperset(name) or name in NOT_TOOLS:
        return None
    return name


def _hang_while_flagged(tool: str) -> None:
    """Hang, printing nothing, while ``tool`` is listed in the host's ``run/hang.json`` (a tool stuck in the
    driver answers nothing until it is killed: timeout(1) ends it; clearing the fault ends it too)."""
    state = HostState()
    if not os.path.exists(os.path.join(state.root_dir, "run", f"{HANG}.json")):  # the common case: one stat()
        return
    while tool in (state.run_get(HANG, []) or []):
        time.sleep(0.5)


def main(tool: str, argv: list[str]) -> int:
    """Run simulated ``tool`` with ``argv``; output goes to sys.stdout / sys.stderr."""
    _hang_while_flagged(tool)
    name = module_name(tool)
    module = None
    if name:
        try:
            __import__(f"{__package__}.{name}")  # not importlib: its import costs every tool call
            module = sys.modules[f"{__package__}.{name}"]
        except ModuleNotFoundError as exc:
            if exc.name != f"{__package__}.{name}":
                raise
    entry = getattr(module, "run", None)
    if entry is None and callable(getattr(module, "main", None)):
        def entry(args, _tool, _main=module.main):  # tools with their own main(argv) (kubeadm, kubectl, kubelet)
            return _main(args)
    if entry is None:
        sys.stderr.write(f"{tool}: command not found (not a simulated tool)\n")
        return 127
    if tool == "gpunode-sim-fabric":
        argv = ["fabric", *argv]
    try:
        return int(entry(list(argv), tool))
    except BrokenPipeError:  # `tool | head`: stop quietly, as a real tool killed by SIGPIPE does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except StateError as exc:
        sys.stderr.write(f"{tool}: simulator state error: {exc}\n")
        return 2


if __name__ == "__main__":  # python3 -m gpunode.sim.tools.main TOOL ARGS...
    sys.exit(main(sys.argv[1], sys.argv[2:]))
