"""Per-host simulated hardware state, shared by every simulated vendor tool (stdlib only).

The state of one host lives in one directory (``/var/lib/gpunode-sim`` inside a simulated host,
``$GPUNODE_SIM_STATE`` anywhere else, e.g. unit tests on the controller). Layout
(../README.md §1):

- ``profile.json``: the normalized hardware profile; ``devices.json``: its flat PCI function
  records (``gpunode.sim.profile.iter_devices``), so that no tool needs PyYAML or the profile code;
- ``hw.json``: non-volatile device state (NV config ``current``/``next_boot`` per NIC card,
  firmware, PSID, fault flags); survives a reboot;
- ``sys/``: the sysfs tree; loaded kernel modules are ``sys/module/<name>/version``;
- ``run/``: volatile state (ROCE_ACCL registers, mlnx_qos, CMA ToS, GPU persistence, fabric
  state, ib_write_bw servers); deleted at every reboot.

Every write takes an exclusive ``fcntl.flock`` on ``<root>/.lock`` and replaces files atomically
(temporary file + ``os.replace``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
from pathlib import Path

DEFAULT_ROOT = "/var/lib/gpunode-sim"
ENV_ROOT = "GPUNODE_SIM_STATE"
# The NVIDIA userspace version file the simulated nvidia-utils package installs (compared with
# the loaded module's version by nvidia-smi); GPUNODE_SIM_NVIDIA_USERSPACE overrides the path.
NVIDIA_USERSPACE_VERSION_FILE = "/usr/lib/gpunode-sim/nvidia/version"
ENV_NVIDIA_USERSPACE = "GPUNODE_SIM_NVIDIA_USERSPACE"
# Fallback source of the userspace version: dpkg's database ($GPUNODE_SIM_DPKG_STATUS in tests).
DPKG_STATUS = "/var/lib/dpkg/status"
ENV_DPKG_STATUS = "GPUNODE_SIM_DPKG_STATUS"

_BDF_RE = re.compile(r"^(?:(?P<domain>[0-9a-fA-F]{4}):)?(?P<bus>[0-9a-fA-F]{2}):(?P<dev>[0-9a-fA-F]{2})"
                     r"\.(?P<fn>[0-7])$")
_MST_RE = re.compile(r"^(?:/dev/mst/)?mt(?P<part>\d+)_pciconf(?P<index>\d+)(?:\.(?P<fn>\d+))?$")


class StateError(RuntimeError):
    """The state directory is missing or inconsistent."""


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` in one rename (never a half-written file)."""
    import tempfile  # noqa: PLC0415 -- only a tool that writes needs it; importing it costs every tool call ~3.5 ms

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def normalize_bdf(text: str) -> str | None:
    """``18:00.0`` / ``0000:18:00.0`` -> ``0000:18:00.0``; anything else None."""
    match = _BDF_RE.match(text.strip())
    if not match:
        return None
    domain = (match.group("domain") or "0000").lower()
    return f"{domain}:{match.group('bus').lower()}:{match.group('dev').lower()}.{match.group('fn')}"


def default_links(nics: list[dict], host_index: int, unit: str) -> dict:
    """Rail k of a host to leaf k of scalable unit ``unit`` (``<unit>-leaf<k>``), on port ``swp<host index + 1>``."""
    links = {}
    for nic in nics:
        rail = (nic.get("expect") or {}).get("rail")
        if rail is not None:
            links[nic["address"]] = {"switch": f"{unit}-leaf{rail}", "port": f"swp{host_index + 1}"}
    return links


class HostState:
    """One simulated host's state directory."""

    def __init__(self, root: str | os.PathLike | None = None) -> None:
        self.root = Path(root or os.environ.get(ENV_ROOT) or DEFAULT_ROOT)
        self.sys = self.root / "sys"
        self.run_dir = self.root / "run"
        self._profile = None
        self._devices = None

    # -- locking and files -------------------------------------------------------------------

    @contextlib.contextmanager
    def locked(self):
        """Hold the host's exclusive lock (``<root>/.lock``) for a read-modify-write."""
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield self
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def read_json(self, rel: str, default=None):
        path = self.root / rel
        try:
            return json.loads(path.read_text())
        except FileNotFoundError:
            return default

    def write_json(self, rel: str, data) -> None:
        """Write ``<root>/<rel>`` atomically (the caller holds :meth:`locked` for read-modify-write)."""
        write_atomic(self.root / rel, json.dumps(data, indent=1, sort_keys=True) + "\n")

    # -- fixed data --------------------------------------------------------------------------

    def profile(self) -> dict:
        if self._profile is None:
            data = self.read_json("profile.json")
            if data is None:
                raise StateError(f"{self.root}: no profile.json (not a simulated host state directory; "
                                 f"set {ENV_ROOT})")
            self._profile = data
        return self._profile

    def devices(self) -> list[dict]:
        """Flat PCI function records (kind bridge/gpu/nvswitch/nic/device) in tree order."""
        if self._devices is None:
            data = self.read_json("devices.json")
            if data is None:
                raise StateError(f"{self.root}: no devices.json")
            self._devices = data
        return self._devices

    # -- cabling (README §7) -----------------------------------------------------------------

    def host_index(self) -> int:
        try:
            return int((self.root / "host_index").read_text().strip())
        except (FileNotFoundError, ValueError):
            return 0

    def cabling(self) -> dict:
        """``{"links": {<nic pci>: {"switch", "port"}}, "lldp": bool}``: ``cabling.json``, else the default wiring of a
        rail-optimized scalable unit ``su1``: rail k (the profile's ``expect.rail``) to ``su1-leaf<k>``, port
        ``swp<host index + 1>``. Other ports are not cabled to a switch that speaks LLDP."""
        data = self.read_json("cabling.json")
        if data is not None:
            return data
        return {"links": default_links(self.nics(), self.host_index(), "su1"), "lldp": True}

    def nics(self) -> list[dict]:
        """NIC PF records in PCI address order."""
        return sorted((d for d in self.devices() if d["kind"] == "nic"), key=lambda d: d["address"])

    def gpus(self) -> list[dict]:
        """GPU records in PCI address order (nvidia-smi's index order)."""
        return sorted((d for d in self.devices() if d["kind"] == "gpu"), key=lambda d: d["address"])

    def nvswitches(self) -> list[dict]:
        return sorted((d for d in self.devices() if d["kind"] == "nvswitch"), key=lambda d: d["address"])

    # -- NIC device names ----------------------------------------------------------------------

    def cards(self) -> list[dict]:
        """One entry per NIC card: ``slot``, ``model``, ``functions`` (records), ``mst`` (device path)."""
        by_slot: dict[str, list[dict]] = {}
        for rec in self.nics():
            by_slot.setdefault(rec["slot"], []).append(rec)
        counters: dict[str, int] = {}
        cards = []
        for slot in sorted(by_slot):
            funcs = sorted(by_slot[slot], key=lambda r: r["function"])
            part = funcs[0]["hca_type"].removeprefix("MT")
            index = counters.get(part, 0)
            counters[part] = index + 1
            cards.append({"slot": slot, "model": funcs[0]["model"], "functions": funcs,
                          "mst": f"/dev/mst/mt{part}_pciconf{index}"})
        return cards

    def mst_name(self, rec: dict) -> str:
        """The mst device path of one PF: ``/dev/mst/mt4129_pciconf0`` (function 0), ``….1`` (function 1)."""
        for card in self.cards():
            if card["slot"] == rec["slot"]:
                return card["mst"] if rec["function"] == 0 else f"{card['mst']}.{rec['function']}"
        raise StateError(f"{rec['address']}: not a NIC function")

    def resolve_nic(self, dev: str) -> dict | None:
        """A NIC PF record for ``dev``: a PCI address (with or without domain), an mst path or an RDMA name."""
        bdf = normalize_bdf(dev)
        if bdf:
            return next((r for r in self.nics() if r["address"] == bdf), None)
        match = _MST_RE.match(dev.strip())
        if match:
            fn = int(match.group("fn") or 0)
            for card in self.cards():
                if card["mst"] == f"/dev/mst/mt{match.group('part')}_pciconf{match.group('index')}":
                    return next((r for r in card["functions"] if r["function"] == fn), None)
            return None
        return next((r for r in self.nics() if r["rdma"] == dev), None)

    def nic_by_netdev(self, netdev: str) -> dict | None:
        return next((r for r in self.nics() if r["netdev"] == netdev), None)

    # -- non-volatile hardware state -----------------------------------------------------------

    def hw(self) -> dict:
        data = self.read_json("hw.json")
        if data is None:
            raise StateError(f"{self.root}: no hw.json")
        return data

    def card_state(self, slot: str) -> dict:
        return self.hw()["cards"][slot]

    def faults(self) -> dict:
        return self.hw().get("faults", {})

    def has_fault(self, kind: str, address: str) -> bool:
        value = self.faults().get(kind) or []
        return address in value

    # -- volatile state (run/) ----------------------------------------------------------------

    def run_get(self, name: str, default=None):
        return self.read_json(f"run/{name}.json", default)

    def run_put(self, name: str, data) -> None:
        self.write_json(f"run/{name}.json", data)

    # -- kernel modules -----------------------------------------------------------------------

    def module_version(self, name: str) -> str | None:
        """The version of a loaded kernel module (``sys/module/<name>/version``), None when not loaded."""
        path = self.sys / "module" / name / "version"
        try:
            return path.read_text().strip() or None
        except (FileNotFoundError, NotADirectoryError):
            return None

    def module_loaded(self, name: str) -> bool:
        return (self.sys / "module" / name).is_dir()

    def load_module(self, name: str, version: str = "") -> None:
        """Mark a kernel module loaded (``sys/module/<name>/version``, ``initstate`` live)."""
        with self.locked():
            d = self.sys / "module" / name
            d.mkdir(parents=True, exist_ok=True)
            write_atomic(d / "version", f"{version}\n")
            write_atomic(d / "initstate", "live\n")

    def unload_module(self, name: str) -> None:
        with self.locked():
            d = self.sys / "module" / name
            for child in ("version", "initstate"):
                with contextlib.suppress(FileNotFoundError):
                    (d / child).unlink()
            with contextlib.suppress(FileNotFoundError, OSError):
                d.rmdir()

    # -- GPU side -----------------------------------------------------------------------------

    def gpu_driver(self) -> str | None:
        """The loaded NVIDIA kernel driver version (``sys/module/nvidia/version``), None when not loaded."""
        return self.module_version("nvidia")

    @staticmethod
    def nvidia_userspace_file() -> Path:
        return Path(os.environ.get(ENV_NVIDIA_USERSPACE) or NVIDIA_USERSPACE_VERSION_FILE)

    def nvidia_userspace(self) -> str | None:
        """The installed NVML/userspace version, None when unknown: the version file the simulated
        nvidia-utils package installs, else the upstream version of the installed
        ``nvidia-utils-<branch>[-server]`` package in dpkg's status file (real dpkg in a host)."""
        try:
            return self.nvidia_userspace_file().read_text().strip() or None
        except FileNotFoundError:
            pass
        try:
            text = Path(os.environ.get(ENV_DPKG_STATUS) or DPKG_STATUS).read_text(errors="replace")
        except FileNotFoundError:
            return None
        for stanza in text.split("\n\n"):
            fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line and line[:1] != " ")
            if re.match(r"^nvidia-utils-\d+(-server)?$", fields.get("Package", "")) and \
                    fields.get("Status", "").endswith(" installed"):
                return fields.get("Version", "").split(":")[-1].rsplit("-", 1)[0] or None
        return None

    def fabric_state(self) -> tuple[str, str]:
        """``(State, Status)`` of ``nvidia-smi -q``'s Fabric section.

        No NVSwitch: ``N/A``/``N/A``. With NVSwitches: ``In Progress``/``N/A`` until fabric manager
        sets it (:meth:`set_fabric_state`), which a reboot undoes (run/ is volatile).
        """
        if not self.nvswitches():
            return "N/A", "N/A"
        data = self.run_get("fabric", {})
        return data.get("state", "In Progress"), data.get("status", "N/A")

    def set_fabric_state(self, state: str = "Completed", status: str = "Success") -> None:
        with self.locked():
            self.run_put("fabric", {"state": state, "status": status})

    def persistence(self) -> dict:
        """GPU address -> persistence mode on (bool); off after every boot."""
        data = self.run_get("gpu", {})
        return {g["address"]: bool(data.get("persistence", {}).get(g["address"], False)) for g in self.gpus()}

    def set_persistence(self, enabled: bool, addresses: list[str] | None = None) -> None:
        with self.locked():
            data = self.run_get("gpu", {})
            pers = data.setdefault("persistence", {})
            for gpu in self.gpus():
                if addresses is None or gpu["address"] in addresses:
                    pers[gpu["address"]] = bool(enabled)
            self.run_put("gpu", data)

    def set_gpu_runtime(self, *, fabric_state: str | None = None, fabric_status: str | None = None,
                        persistence_mode: bool | None = None) -> None:
        """One call for the simulated NVIDIA services (fabric manager, persistenced): set the fabric
        state/status and/or every GPU's persistence mode; fields left None are left alone."""
        if fabric_state is not None or fabric_status is not None:
            current_state, current_status = self.fabric_state()
            self.set_fabric_state(fabric_state or current_state, fabric_status or current_status)
        if persistence_mode is not None:
            self.set_persistence(persistence_mode)

    # -- RDMA / netdev view of sysfs (what the tools read, like the real ones read /sys) ------

    def rdma_devices(self) -> list[str]:
        d = self.sys / "class" / "infiniband"
        return sorted(p.name for p in d.iterdir()) if d.is_dir() else []

    def rdma_pci(self, rdma: str) -> str | None:
        """The PCI address behind an RDMA device (``device`` link), None when absent."""
        link = self.sys / "class" / "infiniband" / rdma / "device"
        return os.path.basename(os.path.realpath(link)) if link.exists() else None

    def rdma_netdev(self, rdma: str) -> str | None:
        """The netdev of an RDMA device: the RoCE GID ndev, else the PCI function's netdev."""
        ndev = self.sys / "class" / "infiniband" / rdma / "ports" / "1" / "gid_attrs" / "ndevs" / "0"
        if ndev.is_file():
            return ndev.read_text().strip()
        net = self.sys / "class" / "infiniband" / rdma / "device" / "net"
        names = sorted(p.name for p in net.iterdir()) if net.is_dir() else []
        return names[0] if names else None

    def netdev_rdma(self, netdev: str) -> str | None:
        return next((r for r in self.rdma_devices() if self.rdma_netdev(r) == netdev), None)

    def netdev_attr(self, netdev: str, attr: str) -> str | None:
        try:
            return (self.sys / "class" / "net" / netdev / attr).read_text().strip()
        except (FileNotFoundError, NotADirectoryError):
            return None

    def rdma_attr(self, rdma: str, attr: str) -> str | None:
        try:
            return (self.sys / "class" / "infiniband" / rdma / attr).read_text().strip()
        except (FileNotFoundError, NotADirectoryError):
            return None

    # -- link state ---------------------------------------------------------------------------

    def port_attr(self, rdma: str, attr: str, port: int = 1) -> str | None:
        try:
            return (self.sys / "class" / "infiniband" / rdma / "ports" / str(port) / attr).read_text().strip()
        except (FileNotFoundError, NotADirectoryError):
            return None
