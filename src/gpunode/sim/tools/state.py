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

import fcntl
import marshal
import os

DEFAULT_ROOT = "/var/lib/gpunode-sim"
ENV_ROOT = "GPUNODE_SIM_STATE"
# The NVIDIA userspace version file the simulated nvidia-utils package installs (compared with
# the loaded module's version by nvidia-smi); GPUNODE_SIM_NVIDIA_USERSPACE overrides the path.
NVIDIA_USERSPACE_VERSION_FILE = "/usr/lib/gpunode-sim/nvidia/version"
ENV_NVIDIA_USERSPACE = "GPUNODE_SIM_NVIDIA_USERSPACE"
# Fallback source of the userspace version: dpkg's database ($GPUNODE_SIM_DPKG_STATUS in tests).
DPKG_STATUS = "/var/lib/dpkg/status"
ENV_DPKG_STATUS = "GPUNODE_SIM_DPKG_STATUS"
# The decoded JSON state files, keyed by the file they were decoded from (README.md §1, "Cost of a tool call").
CACHE_DIR = ".cache"
_CACHE_FORMAT = 1
_HEX = frozenset("0123456789abcdefABCDEF")

# What a simulated tool imports costs each call: a host read runs dozens of tools on the controller's cores, and a
# bare interpreter starts in about 7 ms. ``re`` (with ``enum``), ``pathlib`` (with ``urllib.parse``), ``json`` and
# ``contextlib`` add 6, 3.5, 1 and 4 ms. The paths that every read takes use none of them: os.path strings, string
# parsing, and the decoded state from ``marshal`` (README.md §1). ``pathlib`` and ``json`` load on first use only.


def _is_hex(text: str, width: int) -> bool:
    return len(text) == width and all(c in _HEX for c in text)


def _parse_mst(text: str) -> tuple[str, str, str | None] | None:
    """``[/dev/mst/]mt<part>_pciconf<index>[.<fn>]`` -> ``(part, index, fn or None)``; anything else None."""
    rest = text.strip().removeprefix("/dev/mst/")
    if not rest.startswith("mt"):
        return None
    part, sep, rest = rest[2:].partition("_pciconf")
    index, dot, fn = rest.partition(".")
    if not sep or not part.isdecimal() or not index.isdecimal() or (dot and not fn.isdecimal()):
        return None
    return part, index, fn if dot else None


class StateError(RuntimeError):
    """The state directory is missing or inconsistent."""


def write_atomic(path: str | os.PathLike, text: str | bytes) -> None:
    """Replace ``path`` with ``text`` in one rename (never a half-written file)."""
    import tempfile  # noqa: PLC0415 -- only a tool that writes needs it; importing it costs every tool call ~3.5 ms

    path = os.fspath(path)
    parent, name = os.path.split(path)
    os.makedirs(parent or ".", exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=parent or ".")
    try:
        with os.fdopen(fd, "wb" if isinstance(text, bytes) else "w") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        _quietly(os.unlink, tmp)
        raise


def _quietly(remove, path: str, errors: type[OSError] | tuple = FileNotFoundError) -> bool:
    """``remove(path)`` (os.unlink, os.rmdir); False when it raised one of ``errors`` (already gone). Not
    ``contextlib.suppress``: importing contextlib costs every tool call about 4 ms."""
    try:
        remove(path)
    except errors:
        return False
    return True


def _read_text(path: str) -> str:
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def normalize_bdf(text: str) -> str | None:
    """``18:00.0`` / ``0000:18:00.0`` -> ``0000:18:00.0``; anything else None."""
    head, dot, fn = text.strip().rpartition(".")
    parts = head.split(":")
    if not dot or len(fn) != 1 or fn not in "01234567" or len(parts) not in (2, 3):
        return None
    domain = parts[0] if len(parts) == 3 else "0000"
    bus, dev = parts[-2:]
    if not (_is_hex(domain, 4) and _is_hex(bus, 2) and _is_hex(dev, 2)):
        return None
    return f"{domain.lower()}:{bus.lower()}:{dev.lower()}.{fn}"


def default_links(nics: list[dict], host_index: int, unit: str) -> dict:
    """Rail k of a host to leaf k of scalable unit ``unit`` (``<unit>-leaf<k>``), on port ``swp<host index + 1>``."""
    links = {}
    for nic in nics:
        rail = (nic.get("expect") or {}).get("rail")
        if rail is not None:
            links[nic["address"]] = {"switch": f"{unit}-leaf{rail}", "port": f"swp{host_index + 1}"}
    return links


class _Lock:
    """The exclusive ``flock`` of ``<root>/.lock``, held inside ``with`` (:meth:`HostState.locked`)."""

    def __init__(self, state: HostState) -> None:
        self._state = state
        self._handle = None

    def __enter__(self) -> HostState:
        os.makedirs(self._state.root_dir, exist_ok=True)
        self._handle = open(os.path.join(self._state.root_dir, ".lock"), "a")  # noqa: SIM115 -- closed in __exit__
        fcntl.flock(self._handle, fcntl.LOCK_EX)
        return self._state

    def __exit__(self, *exc) -> None:
        try:
            fcntl.flock(self._handle, fcntl.LOCK_UN)
        finally:
            self._handle.close()


class HostState:
    """One simulated host's state directory."""

    def __init__(self, root: str | os.PathLike | None = None) -> None:
        self.root_dir = os.fspath(root or os.environ.get(ENV_ROOT) or DEFAULT_ROOT)
        self.sys_dir = os.path.join(self.root_dir, "sys")
        self._profile = None
        self._devices = None

    # ``root``, ``sys`` and ``run_dir`` as pathlib paths, for the code that walks the tree (the controller's
    # hwstate, the tests); the tools' reads use the strings above.
    @property
    def root(self):
        from pathlib import Path  # noqa: PLC0415 -- only the callers that walk the tree pay for pathlib

        return Path(self.root_dir)

    @property
    def sys(self):
        return self.root / "sys"

    @property
    def run_dir(self):
        return self.root / "run"

    def sys_path(self, *parts: str) -> str:
        """``<root>/sys/<parts...>`` as a string."""
        return os.path.join(self.sys_dir, *parts)

    # -- locking and files -------------------------------------------------------------------

    def locked(self) -> _Lock:
        """Hold the host's exclusive lock (``<root>/.lock``) for a read-modify-write: ``with state.locked(): ...``."""
        return _Lock(self)

    def read_json(self, rel: str, default=None):
        """``<root>/<rel>`` decoded, ``default`` when it does not exist.

        The decoded value is kept in ``<root>/.cache/<rel>.marshal`` with the exact bytes it was decoded from; it is
        used only while the file holds those bytes, else the file is decoded again (and kept). The bytes, not the
        file's inode, time and size: a file rewritten within one tick of the kernel's clock can keep all three."""
        path = os.path.join(self.root_dir, rel)
        try:
            with open(path, "rb") as handle:
                raw = handle.read()
        except FileNotFoundError:
            return default
        cache = self._cache_path(rel)
        try:
            with open(cache, "rb") as handle:
                version, cached_raw, data = marshal.load(handle)  # noqa: S302 -- this host's own cache, by _keep
            if version == _CACHE_FORMAT and cached_raw == raw:
                return data
        except (OSError, EOFError, ValueError, TypeError):
            pass
        import json  # noqa: PLC0415 -- decoding JSON costs every tool call ~7 ms of imports (re); the cache above

        data = json.loads(raw)
        self._keep(cache, raw, data)
        return data

    def _cache_path(self, rel: str) -> str:
        return os.path.join(self.root_dir, CACHE_DIR, rel + ".marshal")

    @staticmethod
    def _keep(cache: str, raw: bytes, data) -> bool:
        """Keep ``data`` decoded from ``raw``; False when it cannot be (a read-only directory: decoded each time)."""
        try:
            write_atomic(cache, marshal.dumps((_CACHE_FORMAT, raw, data)))
        except (OSError, ValueError):
            return False
        return True

    def write_json(self, rel: str, data) -> None:
        """Write ``<root>/<rel>`` atomically (the caller holds :meth:`locked` for read-modify-write)."""
        import json  # noqa: PLC0415 -- only a tool that writes needs it (see read_json)

        raw = (json.dumps(data, indent=1, sort_keys=True) + "\n").encode()
        write_atomic(os.path.join(self.root_dir, rel), raw)
        self._keep(self._cache_path(rel), raw, data)

    # -- fixed data --------------------------------------------------------------------------

    def profile(self) -> dict:
        if self._profile is None:
            data = self.read_json("profile.json")
            if data is None:
                raise StateError(f"{self.root_dir}: no profile.json (not a simulated host state directory; "
                                 f"set {ENV_ROOT})")
            self._profile = data
        return self._profile

    def devices(self) -> list[dict]:
        """Flat PCI function records (kind bridge/gpu/nvswitch/nic/device) in tree order."""
        if self._devices is None:
            data = self.read_json("devices.json")
            if data is None:
                raise StateError(f"{self.root_dir}: no devices.json")
            self._devices = data
        return self._devices

    # -- cabling (README §7) -----------------------------------------------------------------

    def host_index(self) -> int:
        try:
            return int(_read_text(os.path.join(self.root_dir, "host_index")).strip())
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
        mst = _parse_mst(dev)
        if mst:
            part, index, fn = mst
            fn = int(fn or 0)
            for card in self.cards():
                if card["mst"] == f"/dev/mst/mt{part}_pciconf{index}":
                    return next((r for r in card["functions"] if r["function"] == fn), None)
            return None
        return next((r for r in self.nics() if r["rdma"] == dev), None)

    def nic_by_netdev(self, netdev: str) -> dict | None:
        return next((r for r in self.nics() if r["netdev"] == netdev), None)

    # -- non-volatile hardware state -----------------------------------------------------------

    def hw(self) -> dict:
        data = self.read_json("hw.json")
        if data is None:
            raise StateError(f"{self.root_dir}: no hw.json")
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
        try:
            return _read_text(self.sys_path("module", name, "version")).strip() or None
        except (FileNotFoundError, NotADirectoryError):
            return None

    def module_loaded(self, name: str) -> bool:
        return os.path.isdir(self.sys_path("module", name))

    def load_module(self, name: str, version: str = "") -> None:
        """Mark a kernel module loaded (``sys/module/<name>/version``, ``initstate`` live)."""
        with self.locked():
            d = self.sys_path("module", name)
            os.makedirs(d, exist_ok=True)
            write_atomic(os.path.join(d, "version"), f"{version}\n")
            write_atomic(os.path.join(d, "initstate"), "live\n")

    def unload_module(self, name: str) -> None:
        with self.locked():
            d = self.sys_path("module", name)
            for child in ("version", "initstate"):
                _quietly(os.unlink, os.path.join(d, child))
            _quietly(os.rmdir, d, OSError)  # gone, or holding more than the two files

    def rename_netdev(self, old: str, new: str) -> None:
        """Rename a netdev as ``ip link set <old> name <new>`` (or a udev rule at the next boot) does: its sysfs
        directory and ``class/net`` link take the new name, the RDMA port's GID netdev follows, and what the
        device holds (its QoS) stays with it."""
        with self.locked():
            link = self.sys_path("class", "net", old)
            if not os.path.islink(link):
                raise StateError(f"no netdev {old}")
            if os.path.lexists(self.sys_path("class", "net", new)):
                raise StateError(f"a netdev {new} exists already")
            directory = os.path.realpath(link)
            target = os.path.join(os.path.dirname(directory), new)
            os.rename(directory, target)
            os.unlink(link)
            new_link = self.sys_path("class", "net", new)
            os.symlink(os.path.relpath(target, os.path.dirname(new_link)), new_link)
            for rdma in self.rdma_devices():
                ndev = self.sys_path("class", "infiniband", rdma, "ports", "1", "gid_attrs", "ndevs", "0")
                if os.path.isfile(ndev) and _read_text(ndev).strip() == old:
                    write_atomic(ndev, f"{new}\n")
            qos = self.run_get("qos", {})
            if old in qos:
                qos[new] = qos.pop(old)
                self.run_put("qos", qos)

    # -- GPU side -----------------------------------------------------------------------------

    def gpu_driver(self) -> str | None:
        """The loaded NVIDIA kernel driver version (``sys/module/nvidia/version``), None when not loaded."""
        return self.module_version("nvidia")

    @staticmethod
    def nvidia_userspace_file() -> str:
        return os.environ.get(ENV_NVIDIA_USERSPACE) or NVIDIA_USERSPACE_VERSION_FILE

    def nvidia_userspace(self) -> str | None:
        """The installed NVML/userspace version, None when unknown: the version file the simulated
        nvidia-utils package installs, else the upstream version of the installed
        ``nvidia-utils-<branch>[-server]`` package in dpkg's status file (real dpkg in a host)."""
        try:
            return _read_text(self.nvidia_userspace_file()).strip() or None
        except FileNotFoundError:
            pass
        try:
            with open(os.environ.get(ENV_DPKG_STATUS) or DPKG_STATUS, encoding="utf-8", errors="replace") as handle:
                text = handle.read()
        except FileNotFoundError:
            return None
        for stanza in text.split("\n\n"):
            fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line and line[:1] != " ")
            branch = fields.get("Package", "").removeprefix("nvidia-utils-").removesuffix("-server")
            if fields.get("Package", "").startswith("nvidia-utils-") and branch.isdecimal() and \
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
        try:
            return sorted(os.listdir(self.sys_path("class", "infiniband")))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def rdma_pci(self, rdma: str) -> str | None:
        """The PCI address behind an RDMA device (``device`` link), None when absent."""
        link = self.sys_path("class", "infiniband", rdma, "device")
        return os.path.basename(os.path.realpath(link)) if os.path.exists(link) else None

    def rdma_netdev(self, rdma: str) -> str | None:
        """The netdev of an RDMA device: the RoCE GID ndev, else the PCI function's netdev."""
        ndev = self.sys_path("class", "infiniband", rdma, "ports", "1", "gid_attrs", "ndevs", "0")
        if os.path.isfile(ndev):
            return _read_text(ndev).strip()
        net = self.sys_path("class", "infiniband", rdma, "device", "net")
        names = sorted(os.listdir(net)) if os.path.isdir(net) else []
        return names[0] if names else None

    def netdev_rdma(self, netdev: str) -> str | None:
        return next((r for r in self.rdma_devices() if self.rdma_netdev(r) == netdev), None)

    def netdev_attr(self, netdev: str, attr: str) -> str | None:
        try:
            return _read_text(self.sys_path("class", "net", netdev, attr)).strip()
        except (FileNotFoundError, NotADirectoryError):
            return None

    def rdma_attr(self, rdma: str, attr: str) -> str | None:
        try:
            return _read_text(self.sys_path("class", "infiniband", rdma, attr)).strip()
        except (FileNotFoundError, NotADirectoryError):
            return None

    # -- link state ---------------------------------------------------------------------------

    def port_attr(self, rdma: str, attr: str, port: int = 1) -> str | None:
        try:
            return _read_text(self.sys_path("class", "infiniband", rdma, "ports", str(port), attr)).strip()
        except (FileNotFoundError, NotADirectoryError):
            return None
