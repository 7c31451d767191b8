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
import shutil
from pathlib import Path
from typing import Any

import yaml

from gpunode.sim.profile import iter_devices
from gpunode.sim.sysfs import materialize
from gpunode.sim.tools import nvconfig
from gpunode.sim.tools.state import HostState, normalize_bdf

FAULT_KINDS = ("mlxconfig_reject", "not_sticky", "link_down")


class HwStateError(ValueError):
    """Bad fault input or a state directory that is not a simulated host's."""


def check_faults(faults: dict[str, Any], nic_addresses: set[str], source: str = "faults") -> dict[str, Any]:
    """Validate and normalize a ``faults`` mapping (profile or runtime); return the normalized copy.

    ``mlxconfig_reject`` and ``link_down`` are lists of NIC PF addresses; ``not_sticky`` maps a
    NIC PF address to a list of NV config parameter names.
    """
    if not isinstance(faults, dict):
        raise HwStateError(f"{source}: must be a mapping")
    out: dict[str, Any] = {"mlxconfig_reject": [], "not_sticky": {}, "link_down": []}
    for key, value in faults.items():
        if key not in FAULT_KINDS:
            raise HwStateError(f"{source}.{key}: unknown fault (known: {', '.join(FAULT_KINDS)})")
        if key == "not_sticky":
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
    faults = check_faults(profile.get("faults") or {}, {r["address"] for r in nics}, "profile faults")
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
    """Set (or clear) one fault flag in a host's hw.json; return the new faults mapping.

    ``link_down`` also takes the port down (or up) right away, as pulling a cable would.
    """
    if kind not in FAULT_KINDS:
        raise HwStateError(f"unknown fault {kind!r} (known: {', '.join(FAULT_KINDS)})")
    state = HostState(hdir)
    nics = {r["address"]: r for r in state.nics()}
    bdf = _nic_address(address, set(nics), kind)
    with state.locked():
        hw = state.hw()
        faults = check_faults(hw.get("faults") or {}, set(nics), "hw.json faults")
        if kind == "not_sticky":
            if clear:
                faults["not_sticky"].pop(bdf, None)
            else:
                if not params:
                    raise HwStateError("not_sticky needs at least one parameter name")
                faults["not_sticky"][bdf] = sorted(set(faults["not_sticky"].get(bdf, [])) | {p.upper() for p in params})
        else:
            entries = set(faults[kind])
            entries.discard(bdf) if clear else entries.add(bdf)
            faults[kind] = sorted(entries)
        hw["faults"] = faults
        state.write_json("hw.json", hw)
        if kind == "link_down":
            _set_link(state, nics[bdf], up=clear and nics[bdf]["link"] == "up")
    return faults


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
