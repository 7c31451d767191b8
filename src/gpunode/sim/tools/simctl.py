"""``gpunode-sim-ctl``: what simulated packages and boot units call to change host state.

- ``gpunode-sim-ctl module-load NAME [VERSION]`` / ``module-unload NAME`` / ``module-list``:
  mark a kernel module (un)loaded (``sys/module/<name>/version``);
- ``gpunode-sim-ctl fabric [STATE [STATUS]]`` (also ``gpunode-sim-fabric [STATE [STATUS]]``):
  set the NVSwitch fabric state nvidia-smi -q reports (default ``Completed`` / ``Success``);
- ``gpunode-sim-ctl persistence on|off``: GPU persistence mode (as nvidia-persistenced does).
"""

from __future__ import annotations

import sys

from .state import HostState

USAGE = ("usage: gpunode-sim-ctl module-load NAME [VERSION] | module-unload NAME | module-list | "
         "fabric [STATE [STATUS]] | persistence on|off\n")


def run(argv: list[str], tool: str = "gpunode-sim-ctl") -> int:
    state = HostState()
    if not argv:
        sys.stderr.write(USAGE)
        return 2
    cmd, args = argv[0], argv[1:]
    if cmd == "module-load" and 1 <= len(args) <= 2:
        state.load_module(args[0], args[1] if len(args) > 1 else "")
        return 0
    if cmd == "module-unload" and len(args) == 1:
        if not state.module_loaded(args[0]):
            sys.stderr.write(f"{tool}: module {args[0]} is not loaded\n")
            return 1
        state.unload_module(args[0])
        return 0
    if cmd == "module-list" and not args:
        mod_dir = state.sys / "module"
        for name in sorted(p.name for p in mod_dir.iterdir()) if mod_dir.is_dir() else []:
            sys.stdout.write(f"{name} {state.module_version(name) or ''}".rstrip() + "\n")
        return 0
    if cmd == "fabric" and len(args) <= 2:
        if not state.nvswitches():
            sys.stderr.write(f"{tool}: no NVSwitch on this host: fabric state stays N/A\n")
            return 1
        if state.gpu_driver() is None:
            sys.stderr.write(f"{tool}: the nvidia driver is not loaded: fabric manager cannot start\n")
            return 1
        state.set_fabric_state(args[0] if args else "Completed", args[1] if len(args) > 1 else "Success")
        return 0
    if cmd == "persistence" and args in (["on"], ["off"], ["1"], ["0"]):
        state.set_persistence(args[0] in ("on", "1"))
        return 0
    sys.stderr.write(USAGE)
    return 2
