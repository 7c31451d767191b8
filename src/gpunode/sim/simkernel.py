"""The simulated kernel's module loader and the simulated driver services (stdlib only).

Runs inside a simulated host, installed by the ``gpunode-sim-kernel`` package as
``/usr/lib/gpunode-sim/python/gpunode_simkernel.py`` (README §3), and on the controller in unit
tests (``GPUNODE_SIM_STATE`` points at a host state dir). Loaded kernel modules are directories
``<sys>/module/<name>/`` with ``version``, ``refcnt``, ``initstate`` and ``holders/`` as on a real
kernel; a module can be loaded when the driver packages installed its simulated module file
``/usr/lib/gpunode-sim/modules/<name>.ko``: ``key=value`` lines ``name``, ``version``,
``depends`` (comma separated) and ``alias`` (``pci:`` modalias globs, one line each).

Entry points (``main(argv)``, the wrapper scripts call them):

- ``modprobe [-r] [-q] MODULE...`` / ``rmmod MODULE...``: one module (with its dependencies) at a
  time, real kmod for anything not simulated;
- ``boot``: what udev coldplug and ``systemd-modules-load`` do at boot: load the modules whose
  ``alias`` matches a PCI device in sysfs, then those listed in ``modules-load.d``, honouring
  ``blacklist`` lines in ``modprobe.d``;
- ``openibd start|stop|restart|status``: the DOCA-OFED driver stack (README §4);
- ``nv-fabricmanager``, ``nvidia-persistenced [--stop]``: the NVIDIA services.
"""

from __future__ import annotations

import fcntl
import fnmatch
import glob
import os
import sys
import tempfile

STATE_ENV = "GPUNODE_SIM_STATE"
HOST_STATE_DIR = "/var/lib/gpunode-sim"
MODULE_DIR_ENV = "GPUNODE_SIM_MODULES"
MODULE_DIR = "/usr/lib/gpunode-sim/modules"
ETC_ENV = "GPUNODE_SIM_ETC"
REAL_MODPROBE = "/usr/sbin/modprobe"
REAL_RMMOD = "/usr/sbin/rmmod"

# The modules openibd loads, in load order (DOCA-Host mlnx-ofed-kernel; openib.conf defaults).
OPENIBD_MODULES = ("mlx_compat", "mlxfw", "ib_core", "mlx5_core", "ib_uverbs", "mlx5_ib", "ib_umad",
                   "iw_cm", "ib_cm", "rdma_cm", "rdma_ucm", "ib_ipoib")
NVSWITCH_DEVICE_ID = "0x22a3"
NVIDIA_VENDOR = "0x10de"


class ModuleError(RuntimeError):
    """A module operation failed; the message is what the real tool prints."""


# --------------------------------------------------------------------------------------------
# paths


def state_dir():
    return os.environ.get(STATE_ENV, HOST_STATE_DIR)


def sys_root():
    return os.path.join(state_dir(), "sys")


def module_dir():
    return os.environ.get(MODULE_DIR_ENV, MODULE_DIR)


def etc_dir():
    return os.environ.get(ETC_ENV, "/etc")


class _Lock:
    """The host state lock (README §1: every write takes an exclusive flock on <root>/.lock)."""

    def __enter__(self):
        os.makedirs(state_dir(), exist_ok=True)
        self._fd = os.open(os.path.join(state_dir(), ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)


def _write(path, text):
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


# --------------------------------------------------------------------------------------------
# module files


def read_module_file(name):
    """The simulated module file of ``name`` as a dict, or None when no package installed it."""
    path = os.path.join(module_dir(), name + ".ko")
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        return None
    info = {"name": name, "version": "", "depends": [], "alias": []}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key == "depends":
            info["depends"] = [d for d in (v.strip() for v in value.split(",")) if d]
        elif key == "alias":
            info["alias"].append(value)
        else:
            info[key] = value
    return info


def normalize(name):
    """Module names use ``_``; modprobe accepts ``-`` too (``nvidia-peermem``)."""
    return name.replace("-", "_")


def loaded(name):
    return os.path.isdir(os.path.join(sys_root(), "module", normalize(name)))


def loaded_version(name):
    try:
        with open(os.path.join(sys_root(), "module", normalize(name), "version"), encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return None


def load(name, _chain=()):
    """Load a simulated module and its dependencies; return the names newly loaded, in order."""
    name = normalize(name)
    if name in _chain:
        raise ModuleError(f"modprobe: FATAL: Module {name}: dependency cycle through {', '.join(_chain)}")
    info = read_module_file(name)
    if info is None:
        raise ModuleError(f"modprobe: FATAL: Module {name} not found in directory {module_dir()}")
    done = []
    for dep in info["depends"]:
        if not loaded(dep):
            done += load(dep, _chain + (name,))
    if loaded(name):
        return done
    mod = os.path.join(sys_root(), "module", name)
    with _Lock():
        os.makedirs(os.path.join(mod, "holders"), exist_ok=True)
        _write(os.path.join(mod, "version"), info["version"] + "\n")
        _write(os.path.join(mod, "initstate"), "live\n")
        _write(os.path.join(mod, "refcnt"), "0\n")
        for dep in info["depends"]:
            dep_dir = os.path.join(sys_root(), "module", normalize(dep))
            link = os.path.join(dep_dir, "holders", name)
            if os.path.isdir(dep_dir) and not os.path.lexists(link):
                os.symlink(os.path.join("..", "..", name), link)
                _bump(dep_dir, 1)
    return done + [name]


def _bump(mod_dir, delta):
    path = os.path.join(mod_dir, "refcnt")
    try:
        with open(path, encoding="utf-8") as handle:
            count = int(handle.read().strip() or 0)
    except (OSError, ValueError):
        count = 0
    _write(path, f"{max(0, count + delta)}\n")


def holders(name):
    path = os.path.join(sys_root(), "module", normalize(name), "holders")
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def unload(name):
    """Unload one module; fails like rmmod when another module holds it."""
    name = normalize(name)
    if not loaded(name):
        raise ModuleError(f"rmmod: ERROR: Module {name} is not currently loaded")
    users = holders(name)
    if users:
        raise ModuleError(f"rmmod: ERROR: Module {name} is in use by: {' '.join(users)}")
    info = read_module_file(name) or {"depends": []}
    with _Lock():
        for dep in info["depends"]:
            dep_dir = os.path.join(sys_root(), "module", normalize(dep))
            link = os.path.join(dep_dir, "holders", name)
            if os.path.lexists(link):
                os.unlink(link)
                _bump(dep_dir, -1)
        mod = os.path.join(sys_root(), "module", name)
        for root, dirs, files in os.walk(mod, topdown=False):
            for entry in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
                os.unlink(os.path.join(root, entry))
            for entry in dirs:
                path = os.path.join(root, entry)
                if not os.path.islink(path):
                    os.rmdir(path)
        os.rmdir(mod)


def unload_tree(name):
    """``modprobe -r``: unload the module, then the dependencies nothing else holds."""
    name = normalize(name)
    info = read_module_file(name) or {"depends": []}
    unload(name)
    for dep in info["depends"]:
        if loaded(dep) and not holders(dep):
            unload_tree(dep)


# --------------------------------------------------------------------------------------------
# boot: coldplug + modules-load.d


def _conf_lines(pattern):
    for path in sorted(glob.glob(pattern)):
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                line = line.split("#", 1)[0].strip()
                if line and not line.startswith(";"):
                    yield line


def blacklisted():
    """Module names with a ``blacklist`` line in modprobe.d (etc and usr/lib)."""
    names = set()
    for pattern in (os.path.join(etc_dir(), "modprobe.d", "*.conf"), "/usr/lib/modprobe.d/*.conf"):
        for line in _conf_lines(pattern):
            words = line.split()
            if len(words) == 2 and words[0] == "blacklist":
                names.add(normalize(words[1]))
    return names


def modules_load_list():
    """Modules listed in modules-load.d, in file-name order (systemd-modules-load(8))."""
    by_name = {}
    for directory in (os.path.join(etc_dir(), "modules-load.d"), "/run/modules-load.d", "/usr/lib/modules-load.d"):
        for path in glob.glob(os.path.join(directory, "*.conf")):
            by_name.setdefault(os.path.basename(path), path)
    names = []
    for base in sorted(by_name):
        for line in _conf_lines(by_name[base]):
            if normalize(line) not in names:
                names.append(normalize(line))
    return names


def _read(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def pci_modaliases():
    """``pci:v000010DEd00002330sv*sd*bc03sc02i00`` for every PCI function in sysfs."""
    result = []
    for dev in sorted(glob.glob(os.path.join(sys_root(), "bus", "pci", "devices", "*"))):
        vendor, device, klass = (_read(os.path.join(dev, f)) for f in ("vendor", "device", "class"))
        if not (vendor and device and klass):
            continue
        cls = int(klass, 16)
        result.append(f"pci:v{int(vendor, 16):08X}d{int(device, 16):08X}sv*sd*"
                      f"bc{cls >> 16:02X}sc{(cls >> 8) & 0xFF:02X}i{cls & 0xFF:02X}")
    return result


def coldplug_candidates():
    """Simulated modules whose alias matches a PCI device (what udev loads at boot)."""
    aliases = pci_modaliases()
    names = []
    for path in sorted(glob.glob(os.path.join(module_dir(), "*.ko"))):
        info = read_module_file(os.path.basename(path)[:-3])
        if any(fnmatch.fnmatchcase(a, pattern) for pattern in info["alias"] for a in aliases):
            names.append(info["name"])
    return names


def boot(out=sys.stdout, err=sys.stderr):
    """Load coldplug and modules-load.d modules; return 1 when any listed module failed."""
    skip = blacklisted()
    status = 0
    for name in coldplug_candidates() + modules_load_list():
        if name in skip or loaded(name):
            continue
        if read_module_file(name) is None:
            print(f"gpunode-sim-modules: {name}: no simulated module file, left to the real kernel", file=out)
            continue
        try:
            for done in load(name):
                print(f"Inserted module '{done}'", file=out)
        except ModuleError as exc:
            print(f"Failed to insert module '{name}': {exc}", file=err)
            status = 1
    return status


# --------------------------------------------------------------------------------------------
# modprobe / rmmod shims


def _exec_real(path, argv):
    os.execv(path, [path] + argv)  # noqa: S606 - modprobe shim hands over to the real kmod binary (argv list, no shell)


def modprobe(argv, out=sys.stdout, err=sys.stderr):
    remove = quiet = False
    names = []
    for arg in argv:
        if arg in ("-r", "--remove"):
            remove = True
        elif arg in ("-q", "--quiet"):
            quiet = True
        elif arg.startswith("-"):
            return _fallback(REAL_MODPROBE, argv)
        else:
            names.append(arg)
    if not names:
        print("modprobe: ERROR: missing module name.", file=err)
        return 1
    if not all(read_module_file(normalize(n)) for n in (names if remove else names[:1])):
        return _fallback(REAL_MODPROBE, argv)
    try:
        if remove:
            for name in names:
                if loaded(name):
                    unload_tree(name)
        else:
            # An explicitly named module loads even when blacklisted (modprobe.d(5): blacklist
            # only stops loading by alias), as with the real modprobe.
            load(names[0])
    except ModuleError as exc:
        if not quiet:
            print(str(exc).replace("rmmod: ERROR", "modprobe: FATAL"), file=err)
        return 1
    return 0


def rmmod(argv, out=sys.stdout, err=sys.stderr):
    names = [a for a in argv if not a.startswith("-")]
    if not names or not all(read_module_file(normalize(n)) for n in names):
        return _fallback(REAL_RMMOD, argv)
    status = 0
    for name in names:
        try:
            unload(name)
        except ModuleError as exc:
            print(str(exc), file=err)
            status = 1
    return status


def _fallback(real, argv):
    if os.path.exists(real):
        _exec_real(real, argv)
    print(f"{os.path.basename(real)}: {real} not found", file=sys.stderr)
    return 1


# --------------------------------------------------------------------------------------------
# openibd


def openibd(argv, out=sys.stdout, err=sys.stderr):
    action = argv[0] if argv else ""
    if action == "start":
        missing = [m for m in OPENIBD_MODULES if read_module_file(m) is None]
        if missing:
            print(f"Loading Mellanox MLX5 modules: FAILED (missing {', '.join(missing)}; "
                  "is mlnx-ofed-kernel-dkms installed?)", file=err)
            return 1
        # A module left loaded by a stop that failed (ib_core held by nvidia_peermem) keeps its old
        # version: the new modules do not link against it, as on a real kernel.
        stale = [(m, loaded_version(m), read_module_file(m)["version"]) for m in OPENIBD_MODULES
                 if loaded(m) and loaded_version(m) != read_module_file(m)["version"]]
        if stale:
            name, running, installed = stale[0]
            print(f"{name}: loaded version {running} disagrees with the installed {installed} "
                  "(a stop that failed left it loaded)", file=err)
            print("Loading HCA driver and Access Layer:                       [FAILED]", file=err)
            return 1
        for name in OPENIBD_MODULES:
            load(name)
        print("Loading HCA driver and Access Layer:                       [  OK  ]", file=out)
        return 0
    if action == "stop":
        for name in reversed(OPENIBD_MODULES):
            if loaded(name):
                users = [h for h in holders(name) if h not in OPENIBD_MODULES]
                if users:
                    print(f"Please stop the following applications still using Infiniband devices: "
                          f"modules {' '.join(users)}", file=err)
                    print(f"Unloading {name}:                                         [FAILED]", file=err)
                    return 1
                unload(name)
        print("Unloading HCA driver:                                      [  OK  ]", file=out)
        return 0
    if action == "restart":
        return openibd(["stop"], out, err) or openibd(["start"], out, err)
    if action == "status":
        missing = [m for m in OPENIBD_MODULES if not loaded(m)]
        if missing:
            print(f"HCA driver is not loaded (missing: {', '.join(missing)})", file=out)
            return 3
        print(f"  HCA driver loaded (version {loaded_version('mlx5_core')})", file=out)
        return 0
    print("Usage: openibd {start|stop|restart|status}", file=err)
    return 2


# --------------------------------------------------------------------------------------------
# NVIDIA services


def nvswitches():
    found = []
    for dev in sorted(glob.glob(os.path.join(sys_root(), "bus", "pci", "devices", "*"))):
        if _read(os.path.join(dev, "vendor")) == NVIDIA_VENDOR and \
                _read(os.path.join(dev, "device")) == NVSWITCH_DEVICE_ID:
            found.append(os.path.basename(dev))
    return found


def _host_state():
    """The simulated tools' state API (README §1): persistence mode and fabric state live in run/."""
    try:
        from gpunode_simtools.state import HostState  # inside a host
    except ImportError:  # on the controller
        from gpunode.sim.tools.state import HostState
    return HostState(state_dir())


def fabricmanager(version, argv, out=sys.stdout, err=sys.stderr):
    """nv-fabricmanager: needs the NVIDIA driver of the same version and NVSwitches."""
    driver = loaded_version("nvidia")
    if driver is None:
        print("fabric manager failed to initialize: NVIDIA driver is not loaded "
              "(failed to open the NVIDIA control device)", file=err)
        return 1
    if driver != version:
        print(f"fabric manager version {version} does not match the loaded driver version {driver}: "
              "fabric manager and NVIDIA driver versions must be the same", file=err)
        return 1
    switches = nvswitches()
    if not switches:
        print("fabric manager failed to initialize: request to query NVSwitch device information from "
              "NVSwitch driver failed (no NVSwitch devices found)", file=err)
        return 1
    _host_state().set_fabric_state("Completed", "Success")
    print(f"Successfully configured all the available NVSwitches to route GPU NVLink traffic "
          f"({len(switches)} NVSwitches).", file=out)
    return 0


def persistenced(argv, out=sys.stdout, err=sys.stderr):
    """nvidia-persistenced: persistence mode on while it runs, off when stopped."""
    if "--stop" in argv:
        _host_state().set_persistence(False)
        return 0
    if loaded_version("nvidia") is None:
        print("nvidia-persistenced failed to initialize. Check syslog for more details.", file=err)
        return 1
    _host_state().set_persistence(True)
    return 0


def hostengine(argv, out=sys.stdout, err=sys.stderr):
    """nv-hostengine (DCGM): starts only with the NVIDIA driver loaded."""
    if loaded_version("nvidia") is None:
        print("Error: Failed to initialize the DCGM host engine: NVML driver is not loaded", file=err)
        return 1
    print("Started host engine version 3.3.9 using port number: 5555", file=out)
    return 0


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        print("usage: gpunode_simkernel {modprobe|rmmod|boot|openibd|nv-fabricmanager VERSION|"
              "nvidia-persistenced} ...", file=sys.stderr)
        return 2
    cmd, rest = argv[0], argv[1:]
    try:
        if cmd == "modprobe":
            return modprobe(rest)
        if cmd == "rmmod":
            return rmmod(rest)
        if cmd == "boot":
            return boot()
        if cmd == "openibd":
            return openibd(rest)
        if cmd == "nv-fabricmanager":
            return fabricmanager(rest[0], rest[1:])
        if cmd == "nv-hostengine":
            return hostengine(rest)
        if cmd == "nvidia-persistenced":
            return persistenced(rest)
    except ModuleError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    print(f"gpunode_simkernel: unknown command {cmd!r}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
