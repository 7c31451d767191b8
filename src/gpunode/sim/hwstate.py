"""Non-volatile simulated hardware state (``hw.json``) and the host state lifecycle.

``hw.json`` (see README.md §1) holds, per NIC card (keyed by slot ``0000:18:00``), the model,
port count, functions, firmware version, PSID and the NV config as raw integers in three maps:
``default`` (factory), ``current`` (what the running firmware uses) and ``next_boot`` (what
mlxconfig wrote); plus ``faults`` (README.md §5). The stdlib-only tools read and write it through
:class:`gpunode.sim.tools.state.HostState`; this module (controller side) creates it, promotes it
at reboot and edits fault flags.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import yaml

from gpunode.sim.profile import iter_devices, rate_for
from gpunode.sim.sysfs import materialize
from gpunode.sim.tools import nvconfig
from gpunode.sim.tools.state import HostState, default_links, normalize_bdf

FAULT_KINDS = ("mlxconfig_reject", "not_sticky", "link_down")
# Day-two hardware faults (README.md §5), kept in hw.json like the others but only when set, so a
# host without them has the same hw.json as before they existed.
HEALTH_FAULTS = ("xid", "retired_page_pending", "rail_rate", "pcie_width")
# Drift and process faults: one-off changes of volatile state (run/, sys/), undone by a reboot.
RUNTIME_FAULTS = ("adaptive_routing", "vf_reset", "dstate", "hang")
# Cabling faults (README §7): a change of the wire, kept in cabling.json across reboots.
CABLING_FAULTS = ("cable_swap", "foreign_leaf", "lldp_off")
# Xid numbers the simulated kernel log can print, with the real line text (tools/dmesg.py).
SIM_XIDS = (48, 63, 79, 94)


class HwStateError(ValueError):
    """Bad fault input or a state directory that is not a simulated host's."""


def check_faults(faults: dict[str, Any], nic_addresses: set[str], source: str = "faults",
                 gpu_addresses: set[str] | None = None) -> dict[str, Any]:
    """Validate and normalize a ``faults`` mapping (profile or runtime); return the normalized copy.

    ``mlxconfig_reject`` and ``link_down`` are lists of NIC PF addresses; ``not_sticky`` maps a
    NIC PF address to a list of NV config parameter names. Day-two faults (present in the result
    only when given): ``xid`` maps a GPU address to Xid numbers its kernel log shows
    (:data:`SIM_XIDS`); ``retired_page_pending`` lists GPUs with a pending row remap;
    ``rail_rate`` maps a NIC PF to the rate (Gb/s) its port trains at; ``pcie_width`` maps a GPU
    or NIC PF to the PCIe width (lanes) its link trains at. ``gpu_addresses`` None skips the
    GPU address check (a runtime caller passes the host's GPUs).
    """
    if not isinstance(faults, dict):
        raise HwStateError(f"{source}: must be a mapping")
    out: dict[str, Any] = {"mlxconfig_reject": [], "not_sticky": {}, "link_down": []}
    known = (*FAULT_KINDS, *HEALTH_FAULTS)
    for key, value in faults.items():
        if key not in known:
            raise HwStateError(f"{source}.{key}: unknown fault (known: {', '.join(known)})")
        if key in HEALTH_FAULTS:
            if value:
                out[key] = _health_fault(key, value, nic_addresses, gpu_addresses, f"{source}.{key}")
        elif key == "not_sticky":
            if not isinstance(value, dict):
                raise HwStateError(f"{source}.not_sticky: must map a PCI address to a list of parameters")
            for addr, params in value.items():
                bdf = _nic_address(addr, nic_addresses, f"{source}.not_sticky")
                if not isinstance(params, list) or not all(isinstance(p, str) and p for p in params):
                    raise HwStateError(f"{source}.not_sticky.{addr}: must be a list of parameter names")
                out["not_sticky"][bdf] = sorted({p.upper() for p in params})
        else:
            if not isinstance(value, list):
                raise HwStateError(f"{source}.{key}: must be a list of PCI addresses")
            out[key] = sorted({_nic_address(a, nic_addresses, f"{source}.{key}") for a in value})
    return out


def _gpu_address(addr: Any, gpu_addresses: set[str] | None, path: str) -> str:
    bdf = normalize_bdf(str(addr))
    if bdf is None:
        raise HwStateError(f"{path}: {addr!r} is not a PCI address (0000:19:00.0)")
    if gpu_addresses is not None and bdf not in gpu_addresses:
        raise HwStateError(f"{path}: {bdf} is not a GPU of this host")
    return bdf


def _positive(value: Any, path: str, highest: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= highest:
        raise HwStateError(f"{path}: {value!r} must be a whole number from 1 to {highest}")
    return value


def _health_fault(kind: str, value: Any, nics: set[str], gpus: set[str] | None, path: str) -> Any:
    if kind == "retired_page_pending":
        if not isinstance(value, list):
            raise HwStateError(f"{path}: must be a list of GPU PCI addresses")
        return sorted({_gpu_address(a, gpus, path) for a in value})
    if not isinstance(value, dict):
        raise HwStateError(f"{path}: must map a PCI address to a value")
    out: dict[str, Any] = {}
    for addr, item in value.items():
        where = f"{path}.{addr}"
        if kind == "xid":
            items = item if isinstance(item, list) else [item]
            bad = [x for x in items if x not in SIM_XIDS or isinstance(x, bool)]
            if bad or not items:
                raise HwStateError(f"{where}: Xid numbers from {', '.join(map(str, SIM_XIDS))}, got {item!r}")
            out[_gpu_address(addr, gpus, where)] = sorted(set(items))
        elif kind == "rail_rate":
            out[_nic_address(addr, nics, where)] = _positive(item, where, 800)
        else:  # pcie_width
            bdf = normalize_bdf(str(addr))
            if bdf is None or (gpus is not None and nics and bdf not in nics | gpus):
                raise HwStateError(f"{where}: not a GPU or NIC function of this host")
            out[bdf] = _positive(item, where, 16)
    return out


def _nic_address(addr: Any, nic_addresses: set[str], path: str) -> str:
    bdf = normalize_bdf(str(addr))
    if bdf is None:
        raise HwStateError(f"{path}: {addr!r} is not a PCI address (0000:18:00.0)")
    if nic_addresses and bdf not in nic_addresses:
        raise HwStateError(f"{path}: {bdf} is not a NIC function of this host")
    return bdf


def initial_hw(profile: dict[str, Any], records: list[dict[str, Any]]) -> dict[str, Any]:
    """A fresh ``hw.json``: every card at its catalogue defaults, the profile's fault flags."""
    cards: dict[str, Any] = {}
    nics = [r for r in records if r["kind"] == "nic"]
    for rec in nics:
        slot = rec["slot"]
        if slot in cards:
            continue
        funcs = sorted((r for r in nics if r["slot"] == slot), key=lambda r: r["function"])
        ports = max(r["function"] for r in funcs) + 1
        cards[slot] = nvconfig.initial_card(
            rec["model"], ports, total_vfs=rec["sriov_totalvfs"], link_layers=[r["link_layer"] for r in funcs],
            fw_version=rec["fw_version"], board_id=rec["board_id"], functions=[r["address"] for r in funcs])
    gpus = {r["address"]: {"vbios": "96.00.74.00.0D"}  # real-outputs/nvidia-smi-q-h100-header-gpu0-gpud.txt
            for r in records if r["kind"] == "gpu"}
    faults = check_faults(profile.get("faults") or {}, {r["address"] for r in nics}, "profile faults",
                          {r["address"] for r in records if r["kind"] == "gpu"})
    return {"cards": cards, "gpus": gpus, "faults": faults}


def promote(hw: dict[str, Any]) -> dict[str, Any]:
    """What a reboot does to hw.json: ``next_boot`` becomes ``current``, except parameters a
    ``not_sticky`` fault names for one of the card's functions (they keep their current value,
    and next_boot keeps the wish, as when firmware silently ignores a value)."""
    not_sticky = hw.get("faults", {}).get("not_sticky", {})
    for card in hw["cards"].values():
        frozen = {p for addr in card["functions"] for p in not_sticky.get(addr, [])}
        for name, value in card["next_boot"].items():
            if name not in frozen:
                card["current"][name] = value
    return hw


def write_state(hdir: Path, profile: dict[str, Any], host_index: int = 0) -> None:
    """Write a fresh host state directory: profile.yaml/json, devices.json, hw.json, sys/ (no run/)."""
    hdir.mkdir(parents=True, exist_ok=True)
    records = list(iter_devices(profile, host_index=host_index))
    (hdir / "profile.yaml").write_text(yaml.safe_dump(profile, sort_keys=False))
    state = HostState(hdir)
    with state.locked():
        state.write_json("profile.json", profile)
        state.write_json("devices.json", records)
        hw = initial_hw(profile, records)
        state.write_json("hw.json", hw)
        shutil.rmtree(hdir / "run", ignore_errors=True)
        materialize(profile, hdir / "sys", host_index=host_index, hw=hw)
    (hdir / "host_index").write_text(f"{host_index}\n")


def reboot_state(hdir: Path) -> dict[str, Any]:
    """The hardware side of a reboot: promote NV config, delete run/, re-materialize sys/. Returns hw."""
    state = HostState(hdir)
    profile = state.profile()
    index_file = hdir / "host_index"
    host_index = int(index_file.read_text()) if index_file.exists() else 0
    with state.locked():
        hw = promote(state.hw())
        state.write_json("hw.json", hw)
        shutil.rmtree(hdir / "run", ignore_errors=True)
        materialize(profile, hdir / "sys", host_index=host_index, hw=hw)
    return hw


def set_fault(hdir: Path, kind: str, address: str, *, params: list[str] | None = None,
              clear: bool = False) -> dict[str, Any]:
    """Set (or clear) one fault of a host; return the new faults mapping.

    ``link_down`` also takes the port down (or up) right away, as pulling a cable would;
    ``rail_rate`` and ``pcie_width`` retrain the link at once (sysfs rewritten). ``params``:
    the parameters for ``not_sticky``, the Xid numbers for ``xid``, the rate in Gb/s for
    ``rail_rate``, the lane count for ``pcie_width``. The runtime faults (:data:`RUNTIME_FAULTS`)
    change volatile state once and are not kept in hw.json: see :func:`runtime_fault`.
    """
    if kind in RUNTIME_FAULTS:
        return runtime_fault(hdir, kind, address, params=params, clear=clear)
    if kind in CABLING_FAULTS:
        cabling_fault(hdir, kind, address, params=params, clear=clear)
        return HostState(hdir).hw().get("faults") or {}
    if kind not in FAULT_KINDS + HEALTH_FAULTS:
        raise HwStateError(f"unknown fault {kind!r} (known: {', '.join(FAULT_KINDS + HEALTH_FAULTS + RUNTIME_FAULTS)})")
    state = HostState(hdir)
    nics = {r["address"]: r for r in state.nics()}
    gpus = {r["address"]: r for r in state.gpus()}
    with state.locked():
        hw = state.hw()
        faults = check_faults(hw.get("faults") or {}, set(nics), "hw.json faults", set(gpus))
        if kind in HEALTH_FAULTS:
            bdf = _set_health_fault(faults, kind, address, params or [], clear, set(nics), set(gpus))
        else:
            bdf = _nic_address(address, set(nics), kind)
            if kind == "not_sticky":
                if clear:
                    faults["not_sticky"].pop(bdf, None)
                else:
                    if not params:
                        raise HwStateError("not_sticky needs at least one parameter name")
                    faults["not_sticky"][bdf] = sorted(set(faults["not_sticky"].get(bdf, []))
                                                       | {p.upper() for p in params})
            else:
                entries = set(faults[kind])
                entries.discard(bdf) if clear else entries.add(bdf)
                faults[kind] = sorted(entries)
        hw["faults"] = faults
        state.write_json("hw.json", hw)
        if kind == "link_down":
            _set_link(state, nics[bdf], up=clear and nics[bdf]["link"] == "up")
        elif kind == "rail_rate":
            _set_rate(state, nics[bdf], faults.get("rail_rate", {}).get(bdf, nics[bdf]["speed_gbps"]))
        elif kind == "pcie_width":
            rec = nics.get(bdf) or gpus[bdf]
            path = state.sys / "bus" / "pci" / "devices" / bdf / "current_link_width"
            path.write_text(f"{faults.get('pcie_width', {}).get(bdf, rec['pcie_link_width'])}\n")
    return faults


def _set_health_fault(faults: dict[str, Any], kind: str, address: str, params: list[str], clear: bool,
                      nics: set[str], gpus: set[str]) -> str:
    """Edit one day-two fault in a normalized ``faults`` mapping; return the device's address."""
    current = faults.get(kind) or ([] if kind == "retired_page_pending" else {})
    if kind == "retired_page_pending":
        bdf = _gpu_address(address, gpus, kind)
        entries = set(current)
        entries.discard(bdf) if clear else entries.add(bdf)
        value: Any = sorted(entries)
    else:
        bdf = (_gpu_address(address, gpus, kind) if kind == "xid" else
               _nic_address(address, nics, kind) if kind == "rail_rate" else
               normalize_bdf(address) or address)
        value = dict(current)
        if clear:
            value.pop(bdf, None)
        else:
            if not params or not all(p.isdigit() for p in params):
                what = {"xid": "one or more Xid numbers", "rail_rate": "the rate in Gb/s",
                        "pcie_width": "the lane count"}[kind]
                raise HwStateError(f"{kind} needs {what} after the address")
            numbers = [int(p) for p in params]
            value[bdf] = sorted(set(value.get(bdf, [])) | set(numbers)) if kind == "xid" else numbers[0]
    checked = check_faults({kind: value}, nics, kind, gpus)
    if checked.get(kind):
        faults[kind] = checked[kind]
    else:
        faults.pop(kind, None)
    return bdf


def _set_rate(state: HostState, rec: dict[str, Any], gbps: int) -> None:
    values = {}
    if rec["rdma"]:
        values[state.sys / "class" / "infiniband" / rec["rdma"] / "ports" / "1" / "rate"] = rate_for(gbps)
    if rec["netdev"] and rec["link"] == "up":
        values[state.sys / "class" / "net" / rec["netdev"] / "speed"] = gbps * 1000
    for path, value in values.items():
        if path.exists():
            path.write_text(f"{value}\n")


def set_cabling(hdir: Path, *, unit: str | None = None, leaf: str | None = None,
                link: tuple[str, str, str] | None = None) -> dict[str, Any]:
    """Re-cable a host (README §7); return its cabling.

    ``unit``: rail k to ``<unit>-leaf<k>`` on port ``swp<host index + 1>`` (a rail-optimized scalable unit);
    ``leaf``: every rail to that one switch (top of rack), rail k on port ``swp<8 * host index + k + 1>``;
    ``link``: one NIC function ``(pci, switch, port)``."""
    state = HostState(hdir)
    nics = {r["address"]: r for r in state.nics()}
    with state.locked():
        cabling = state.cabling()
        links = dict(cabling.get("links") or {})
        if unit:
            links = default_links(list(nics.values()), state.host_index(), unit)
        if leaf:
            links = {}
            for nic in nics.values():
                rail = (nic.get("expect") or {}).get("rail")
                if rail is not None:
                    links[nic["address"]] = {"switch": leaf, "port": f"swp{8 * state.host_index() + rail + 1}"}
        if link:
            bdf = _nic_address(link[0], set(nics), "cable")
            links[bdf] = {"switch": link[1], "port": link[2]}
        cabling = {**cabling, "links": links}
        state.write_json("cabling.json", cabling)
    return cabling


def cabling_fault(hdir: Path, kind: str, address: str, *, params: list[str] | None = None,
                  clear: bool = False) -> dict[str, Any]:
    """A cabling fault (README §7): ``cable_swap <pci> <pci>`` swaps two rails' cables (again to undo);
    ``foreign_leaf <pci> <switch> [port]`` moves a rail's cable to another switch; ``lldp_off -`` stops the
    switches' LLDP (``--clear`` turns it on). Returns the host's cabling."""
    state = HostState(hdir)
    nics = {r["address"] for r in state.nics()}
    params = list(params or [])
    with state.locked():
        cabling = state.cabling()
        links = dict(cabling.get("links") or {})
        if kind == "lldp_off":
            cabling["lldp"] = bool(clear)
        elif kind == "cable_swap":
            if len(params) != 1:
                raise HwStateError("cable_swap needs the second NIC: cable_swap <pci> <pci>")
            a, b = _nic_address(address, nics, kind), _nic_address(params[0], nics, kind)
            if a not in links or b not in links:
                raise HwStateError(f"cable_swap: {a if a not in links else b} is not cabled to a switch")
            links[a], links[b] = links[b], links[a]
        else:
            if not params:
                raise HwStateError("foreign_leaf needs the switch: foreign_leaf <pci> <switch> [port]")
            bdf = _nic_address(address, nics, kind)
            links[bdf] = {"switch": params[0], "port": params[1] if len(params) > 1 else
                          (links.get(bdf) or {}).get("port", "swp64")}
        cabling["links"] = links
        state.write_json("cabling.json", cabling)
    return cabling


def runtime_fault(hdir: Path, kind: str, address: str, *, params: list[str] | None = None,
                  clear: bool = False) -> dict[str, Any]:
    """A one-off change of volatile state, as a person or a crash would make it; undone by a reboot.

    - ``adaptive_routing <pci> [0|1]``: set ROCE_ACCL ``adaptive_routing_forced_en`` of that
      function (default: flip it), as ``mlxreg --set`` would;
    - ``vf_reset <pci>``: ``sriov_numvfs`` back to 0, as a driver reload does;
    - ``dstate <command> [seconds]``: a process stuck in uninterruptible sleep (D) for that long
      (default 600) in the host's simulated process table ``run/proc`` (:func:`proc_table`);
      ``--clear`` removes every such process;
    - ``hang <tool>``: every call of that simulated tool (``nvidia-smi``) hangs without an answer, as one stuck in
      the driver does, until ``--clear`` (a call already hanging ends then) or a reboot.

    Returns the host's (unchanged) fault flags.
    """
    state = HostState(hdir)
    params = params or []
    if kind == "dstate":
        _dstate(hdir, address, params, clear)
        return state.faults()
    if kind == "hang":
        _hang(state, address, clear)
        return state.faults()
    nics = {r["address"]: r for r in state.nics()}
    if clear:
        raise HwStateError(f"{kind} is a one-off change of volatile state: nothing to clear (a reboot resets it)")
    bdf = _nic_address(address, set(nics), kind)
    if kind == "adaptive_routing":
        from gpunode.sim.tools.mlxreg import read_register  # noqa: PLC0415 - the register as mlxreg shows it

        if params and params[0] not in ("0", "1"):
            raise HwStateError("adaptive_routing takes 0 or 1 (default: flip)")
        with state.locked():
            now = read_register(state, bdf)["adaptive_routing_forced_en"]
            data = state.run_get("roce_accl", {})
            data.setdefault(bdf, {})["adaptive_routing_forced_en"] = int(params[0]) if params else 1 - now
            state.run_put("roce_accl", data)
    else:  # vf_reset
        path = state.sys / "bus" / "pci" / "devices" / bdf / "sriov_numvfs"
        with state.locked():
            path.write_text("0\n")
    return state.faults()


def _hang(state: HostState, tool: str, clear: bool) -> None:
    from importlib.util import find_spec  # noqa: PLC0415 - only this fault asks which tools exist

    from gpunode.sim.tools.main import HANG, module_name  # noqa: PLC0415 - the tools read what is written here

    name = module_name(tool)
    if not name or find_spec(f"gpunode.sim.tools.{name}") is None:
        raise HwStateError(f"hang: {tool!r} is not a simulated tool")
    with state.locked():
        tools = set(state.run_get(HANG, []))
        tools.discard(tool) if clear else tools.add(tool)
        state.run_put(HANG, sorted(tools))


# Process table of a simulated host: pid 1 and a kernel thread always, D-state processes from the
# ``dstate`` fault. Clock ticks per second as the kernel reports them to user space (USER_HZ).
USER_HZ = 100
_STAT_TAIL = ("0 -1 4194560 1234 0 0 0 12 34 0 0 20 0 1 0 {start} 171966464 2869 18446744073709551615 "
              "1 1 0 0 0 0 671173123 4096 1260 0 0 0 17 0 0 0 0 0 0 0 0 0 0 0 0 0 0")


def proc_table(hdir: Path, uptime: float | None = None) -> Path:
    """The simulated ``/proc`` of a host (``run/proc``: volatile, gone at reboot), created with
    ``uptime`` (default 86400 s) and pid 1 (systemd, S) if missing; returns its path."""
    root = Path(hdir) / "run" / "proc"
    if not (root / "uptime").exists():
        root.mkdir(parents=True, exist_ok=True)
        (root / "uptime").write_text(f"{uptime or 86400.0:.2f} {2 * (uptime or 86400.0):.2f}\n")
        _proc(root, 1, "systemd", "S", 0.0, ["/sbin/init"])
        _proc(root, 2, "kthreadd", "S", 0.0, [])
    return root


def _proc(root: Path, pid: int, comm: str, state: str, started_s: float, argv: list[str]) -> None:
    d = root / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    ppid = 0 if pid <= 2 else (2 if not argv else 1)
    (d / "stat").write_text(f"{pid} ({comm}) {state} {ppid} {pid} {pid} "
                            + _STAT_TAIL.format(start=int(started_s * USER_HZ)) + "\n")
    (d / "cmdline").write_bytes(b"".join(a.encode() + b"\0" for a in argv))


def _dstate(hdir: Path, command: str, params: list[str], clear: bool) -> None:
    root = proc_table(hdir)
    uptime = float((root / "uptime").read_text().split()[0])
    pids = sorted(int(p.name) for p in root.iterdir() if p.name.isdigit())
    if clear:
        for pid in pids:
            if (root / str(pid) / "stat").read_text().split(") ", 1)[1].startswith("D"):
                shutil.rmtree(root / str(pid))
        return
    if not command or (params and not params[0].isdigit()):
        raise HwStateError("dstate takes a command (/usr/sbin/lvm, or [jbd2/dm-8-8] for a kernel thread) "
                           "and optionally its age in seconds")
    age = float(params[0]) if params else 600.0
    kernel_thread = command.startswith("[") and command.endswith("]")
    comm = (command[1:-1] if kernel_thread else os.path.basename(command.split()[0]))[:15]
    _proc(root, max(pids) + 1000, comm, "D", max(0.0, uptime - age), [] if kernel_thread else command.split())


def _set_link(state: HostState, rec: dict[str, Any], up: bool) -> None:
    from gpunode.sim.sysfs import PORT_STATE  # the same strings the materializer writes

    port_state, phys = PORT_STATE["up" if up else "down"]
    values = {}
    if rec["rdma"]:
        port = state.sys / "class" / "infiniband" / rec["rdma"] / "ports" / "1"
        values.update({port / "state": port_state, port / "phys_state": phys})
    if rec["netdev"]:
        net = state.sys / "class" / "net" / rec["netdev"]
        values.update({net / "operstate": "up" if up else "down", net / "carrier": int(up),
                       net / "speed": rec["speed_gbps"] * 1000 if up else -1})
    for path, value in values.items():
        if path.exists():
            path.write_text(f"{value}\n")


def load_hw(hdir: Path) -> dict[str, Any]:
    return json.loads((hdir / "hw.json").read_text())
