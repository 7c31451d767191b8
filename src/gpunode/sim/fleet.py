"""The simulated fleet: podman systemd containers, each with a materialized hardware profile.

Every host has a state directory ``<state_dir>/hosts/<name>/`` holding its profile, its
non-volatile hardware state (``hw.json``), its sysfs tree (``sys/``) and volatile state (``run/``);
see README.md §1. The directory is mounted at :data:`HOST_STATE_DIR` inside the host, so the
sysfs root that discovery reads there is ``/var/lib/gpunode-sim/sys`` (``gpunode_sysfs_root``).
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import yaml

from gpunode.sim import hwstate, image, podman, repo
from gpunode.sim.profile import load_profile

HOST_STATE_DIR = "/var/lib/gpunode-sim"
HOST_SYSFS_ROOT = f"{HOST_STATE_DIR}/sys"
#: Where the simulated vendor repositories are mounted read-only in every host (README §4).
HOST_REPO_DIR = "/srv/gpunode-repo"
#: The roles' mirror variables, pointed at the local repositories by the simulated inventory.
MIRROR_VARS = {
    "ofed_mirror_url": f"file://{HOST_REPO_DIR}/doca",
    "gpu_driver_mirror_url": f"file://{HOST_REPO_DIR}/cuda",
    "kubernetes_node_mirror_url": f"file://{HOST_REPO_DIR}/kubernetes",
}
CONTAINER_PREFIX = "gpunode-sim-"
_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


class FleetError(ValueError):
    """Bad fleet input (host name, host spec) or a host that does not exist."""


@dataclass(frozen=True)
class HostSpec:
    """One simulated host: its inventory name and hardware profile."""

    name: str
    profile: str

    @classmethod
    def parse(cls, text: str) -> HostSpec:
        """Parse ``NAME=PROFILE`` (as given to ``gpunode sim up``)."""
        name, sep, profile = text.partition("=")
        if not sep or not profile:
            raise FleetError(f"host spec {text!r}: expected NAME=PROFILE, e.g. dgx01=dgx-h100")
        if not _NAME_RE.match(name):
            raise FleetError(f"host spec {text!r}: host name {name!r} must be a DNS label (a-z, 0-9, -)")
        return cls(name, profile)


def default_state_dir() -> Path:
    """``$GPUNODE_SIM_DIR``, else ``.sim`` in the current directory."""
    return Path(os.environ.get("GPUNODE_SIM_DIR", ".sim")).resolve()


def container_name(host: str) -> str:
    """The podman container name of simulated host ``host``."""
    return CONTAINER_PREFIX + host


def host_dir(state_dir: Path, host: str) -> Path:
    """The state directory of one host on the controller."""
    return state_dir / "hosts" / host


def prepare_state(state_dir: Path, spec: HostSpec) -> Path:
    """Write the host's fresh state (profile.yaml/json, devices.json, hw.json at the catalogue
    defaults and the profile's faults, sys/); return the host's state dir."""
    profile = load_profile(spec.profile)
    hdir = host_dir(state_dir, spec.name)
    hwstate.write_state(hdir, profile)
    return hdir


def up(specs: list[HostSpec], state_dir: Path, *, replace: bool = False, log=print) -> list[str]:
    """Start simulated hosts (building the image first if needed); return their names.

    A host that already runs with the same profile is left alone unless ``replace`` is set.
    """
    names = [s.name for s in specs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise FleetError(f"host name given twice: {', '.join(dupes)}")
    for spec in specs:  # validate every profile before starting anything
        load_profile(spec.profile)
    ref = image.ensure_image(log=log)
    repo_dir = repo.build(log=log)
    for spec in specs:
        cname = container_name(spec.name)
        if podman.exists(cname):
            labels = podman.run("inspect", "--format", "{{json .Config.Labels}}", cname).stdout
            if not replace and f'"{podman.LABEL}.profile":"{spec.profile}"' in labels.replace(" ", ""):
                podman.run("start", cname)
                log(f"{spec.name}: already up ({spec.profile})")
                continue
            podman.run("rm", "-f", cname)
        hdir = prepare_state(state_dir, spec)
        podman.run(
            "run", "--detach",
            "--name", cname,
            "--hostname", spec.name,
            "--systemd=always",
            "--network", "host",
            "--label", f"{podman.LABEL}=1",
            "--label", f"{podman.LABEL}.host={spec.name}",
            "--label", f"{podman.LABEL}.profile={spec.profile}",
            "--label", f"{podman.LABEL}.state={hdir}",
            "--volume", f"{hdir}:{HOST_STATE_DIR}",
            "--volume", f"{repo_dir}:{HOST_REPO_DIR}:ro",
            ref,
        )
        state = podman.wait_booted(cname)
        log(f"{spec.name}: up ({spec.profile}, systemd {state})")
    return names


def hosts() -> list[dict]:
    """The simulated hosts podman knows, sorted by name: name, container, profile, state dir, status."""
    result = []
    for rec in podman.containers():
        labels = rec.get("Labels") or {}
        result.append({
            "name": labels.get(f"{podman.LABEL}.host"),
            "container": (rec.get("Names") or [""])[0],
            "profile": labels.get(f"{podman.LABEL}.profile"),
            "state_dir": labels.get(f"{podman.LABEL}.state"),
            "status": rec.get("State"),
        })
    return sorted(result, key=lambda h: h["name"] or "")


def _known(names: list[str]) -> list[dict]:
    known = {h["name"]: h for h in hosts()}
    missing = [n for n in names if n not in known]
    if missing:
        raise FleetError(f"no simulated host named {', '.join(missing)} (known: {', '.join(sorted(known)) or 'none'})")
    return [known[n] for n in names]


def down(names: list[str] | None = None, *, missing_ok: bool = False, log=print) -> None:
    """Remove the named simulated hosts (all when ``names`` is empty) and their state.

    A name that is not a simulated host is an error unless ``missing_ok`` is set.
    """
    if names and missing_ok:
        known = {h["name"] for h in hosts()}
        names = [n for n in names if n in known]
        if not names:
            return
    targets = _known(names) if names else hosts()
    for host in targets:
        podman.run("rm", "-f", "--time", "5", host["container"])
        if host["state_dir"]:
            shutil.rmtree(host["state_dir"], ignore_errors=True)
        log(f"{host['name']}: down")


def reboot(name: str, *, log=print) -> None:
    """Reboot one host the way real hardware reboots.

    The container stops; in hw.json every NV config ``next_boot`` value becomes ``current``
    (except values a ``not_sticky`` fault pins); ``run/`` (ROCE_ACCL, QoS, fabric state, …) is
    deleted; sysfs is rebuilt from the profile and hw.json (VFs gone, no module loaded); systemd
    boots again and the units the roles installed restore volatile state.
    """
    (host,) = _known([name])
    podman.run("stop", "--time", "10", host["container"])
    hwstate.reboot_state(Path(host["state_dir"]))
    podman.run("start", host["container"])
    state = podman.wait_booted(host["container"])
    log(f"{name}: rebooted (systemd {state})")


def fault(name: str, kind: str, address: str, *, params: list[str] | None = None, clear: bool = False,
          log=print) -> dict:
    """Set or clear a fault flag of a running simulated host (README.md §5); return the faults."""
    (host,) = _known([name])
    try:
        faults = hwstate.set_fault(Path(host["state_dir"]), kind, address, params=params, clear=clear)
    except hwstate.HwStateError as exc:
        raise FleetError(f"{name}: {exc}") from exc
    log(f"{name}: {'cleared' if clear else 'set'} {kind} {address}" + (f" {' '.join(params)}" if params else ""))
    return faults


def inventory(path: Path, names: list[str] | None = None, *, log=print) -> dict:
    """Write an Ansible inventory of the running simulated hosts (only ``names`` when given) to
    ``path``; return it. Naming the hosts keeps other scenarios' hosts on the machine out of it."""
    running = [h for h in hosts() if h["status"] == "running" and (not names or h["name"] in names)]
    missing = sorted(set(names or []) - {h["name"] for h in running})
    if missing:
        raise FleetError(f"not running: {', '.join(missing)} (start them with gpunode sim up)")
    host_vars = {
        h["name"]: {"ansible_host": h["container"], "gpunode_sim_profile": h["profile"]} for h in running
    }
    data = {
        "all": {
            "children": {
                "gpu_nodes": {
                    "hosts": host_vars,
                    "vars": {
                        "ansible_connection": "containers.podman.podman",
                        "ansible_python_interpreter": "/usr/bin/python3",
                        "gpunode_sysfs_root": HOST_SYSFS_ROOT,
                        # Simulated hosts run the controller's kernel: no distro has its headers, the
                        # simulated driver packages need no DKMS build, and sysctls/modules are only written.
                        "ofed_install_kernel_headers": False,
                        "gpu_driver_install_kernel_headers": False,
                        "kubernetes_node_kernel_apply": False,
                        # A simulated host reboots through the simulator (promotes next-boot NV config).
                        "gpunode_reboot_strategy": "power_cycle",
                        "gpunode_power_cycle_command": ["gpunode", "sim", "reboot", "{{ inventory_hostname }}"],
                        **MIRROR_VARS,
                    },
                }
            }
        }
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    header = "---\n# Written by `gpunode sim inventory`: the simulated fleet (podman containers).\n"
    path.write_text(header + yaml.safe_dump(data, sort_keys=False))
    log(f"wrote {path} ({len(running)} hosts)")
    return data
