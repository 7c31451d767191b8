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
import socket
import subprocess
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
#: Every host shares the controller's network namespace, so each sshd gets its own loopback port
#: from this range (kept in the container's label; a reboot keeps it).
SSH_PORTS = range(22200, 23200)
SSH_ADDRESS = "127.0.0.1"
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


def ssh_dir(state_dir: Path) -> Path:
    """The fleet's SSH files on the controller: the client key (``id_ed25519``) and ``known_hosts``."""
    return state_dir / "ssh"


def client_key(state_dir: Path) -> Path:
    """The fleet's client key (made once per state directory); return its private key's path."""
    key = ssh_dir(state_dir) / "id_ed25519"
    if not key.exists():
        key.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gpunode-sim", "-f", str(key)],
                       check=True, capture_output=True)
    return key


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((SSH_ADDRESS, port))
        except OSError:
            return False
    return True


def pick_ssh_port(taken: set[int]) -> int:
    """The first port of :data:`SSH_PORTS` no simulated host holds and nothing listens on."""
    for port in SSH_PORTS:
        if port not in taken and _port_free(port):
            return port
    raise FleetError(f"no free SSH port for a simulated host in {SSH_PORTS.start}-{SSH_PORTS.stop - 1}")


def write_ssh_config(hdir: Path, port: int, public_key: str) -> None:
    """The host's sshd settings in its state directory (included by the image's sshd_config.d)."""
    sdir = hdir / "ssh"
    sdir.mkdir(parents=True, exist_ok=True)
    sdir.chmod(0o755)
    (sdir / "sshd.conf").write_text(
        f"# written by gpunode sim up\nPort {port}\nListenAddress {SSH_ADDRESS}\n"
        f"AuthorizedKeysFile {HOST_STATE_DIR}/ssh/authorized_keys .ssh/authorized_keys\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUseDNS no\n")
    keys = sdir / "authorized_keys"
    keys.write_text(public_key)
    keys.chmod(0o600)


def record_host_keys(state_dir: Path, name: str, port: int, cname: str) -> None:
    """Add the host's (first-boot) host keys to the fleet's known_hosts, under its name (what a
    ``HostKeyAlias`` looks up) and ``[127.0.0.1]:port``; older lines for either are dropped."""
    proc = podman.run("exec", cname, "sh", "-c", "cat /etc/ssh/ssh_host_*_key.pub", check=False)
    keys = [line.split()[:2] for line in proc.stdout.splitlines() if len(line.split()) >= 2]
    if proc.returncode != 0 or not keys:
        status = podman.run("exec", cname, "systemctl", "status", "--no-pager", "ssh", check=False).stdout
        raise FleetError(f"{name}: sshd has no host keys (ssh.service: {status.strip()[-400:]})")
    names = {name, f"[{SSH_ADDRESS}]:{port}"}
    path = ssh_dir(state_dir) / "known_hosts"
    kept = [line for line in (path.read_text().splitlines() if path.exists() else [])
            if line and line.split()[0] not in names]
    for alias in sorted(names):
        kept += [f"{alias} {kind} {blob}" for kind, blob in keys]
    path.write_text("\n".join(kept) + "\n")
    path.chmod(0o600)


def prepare_state(state_dir: Path, spec: HostSpec, host_index: int = 0) -> Path:
    """Write the host's fresh state (profile.yaml/json, devices.json, hw.json at the catalogue
    defaults and the profile's faults, sys/); return the host's state dir. ``host_index`` tells the host apart
    from the others of the fleet where real machines differ: its MAC addresses and the switch ports its rails
    are cabled to (two hosts never share a switch port)."""
    profile = load_profile(spec.profile)
    hdir = host_dir(state_dir, spec.name)
    hwstate.write_state(hdir, profile, host_index=host_index)
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
    public_key = client_key(state_dir).with_suffix(".pub").read_text()
    known = {h["name"]: h for h in hosts()}
    taken = {h["ssh_port"] for h in known.values() if h["ssh_port"]}
    for spec in specs:
        cname = container_name(spec.name)
        if podman.exists(cname):
            old = known.get(spec.name) or {}
            # A host from an image before SSH (no port label) is replaced, as a changed profile is.
            if not replace and old.get("profile") == spec.profile and old.get("ssh_port"):
                podman.run("start", cname)
                log(f"{spec.name}: already up ({spec.profile})")
                continue
            podman.run("rm", "-f", cname)
            taken.discard(old.get("ssh_port"))
        port = pick_ssh_port(taken)
        taken.add(port)
        # The SSH port is unique among the running hosts, and so is the index taken from it.
        hdir = prepare_state(state_dir, spec, host_index=port - SSH_PORTS.start)
        write_ssh_config(hdir, port, public_key)
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
            "--label", f"{podman.LABEL}.fleet={state_dir}",
            "--label", f"{podman.LABEL}.ssh_port={port}",
            "--volume", f"{hdir}:{HOST_STATE_DIR}",
            "--volume", f"{repo_dir}:{HOST_REPO_DIR}:ro",
            ref,
        )
        state = podman.wait_booted(cname)
        record_host_keys(state_dir, spec.name, port, cname)
        log(f"{spec.name}: up ({spec.profile}, systemd {state}, ssh {SSH_ADDRESS}:{port})")
    return names


def hosts() -> list[dict]:
    """The simulated hosts podman knows, sorted by name: name, container, profile, state dir, fleet
    (state) dir, SSH port, status."""
    result = []
    for rec in podman.containers():
        labels = rec.get("Labels") or {}
        port = labels.get(f"{podman.LABEL}.ssh_port") or ""
        result.append({
            "name": labels.get(f"{podman.LABEL}.host"),
            "container": (rec.get("Names") or [""])[0],
            "profile": labels.get(f"{podman.LABEL}.profile"),
            "state_dir": labels.get(f"{podman.LABEL}.state"),
            "fleet_dir": labels.get(f"{podman.LABEL}.fleet"),
            "ssh_port": int(port) if port.isdigit() else None,
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


def cable(name: str, *, unit: str | None = None, leaf: str | None = None,
          link: tuple[str, str, str] | None = None, log=print) -> dict:
    """Re-cable a running simulated host's rails (README.md §7); return its cabling."""
    (host,) = _known([name])
    try:
        cabling = hwstate.set_cabling(Path(host["state_dir"]), unit=unit, leaf=leaf, link=link)
    except hwstate.HwStateError as exc:
        raise FleetError(f"{name}: {exc}") from exc
    switches = sorted({link["switch"] for link in cabling["links"].values()})
    log(f"{name}: {len(cabling['links'])} rail(s) cabled to {', '.join(switches)}")
    return cabling


def _ssh_vars(host: dict) -> dict:
    """One simulated host's connection variables: its loopback port, the fleet's key and known_hosts.
    ``HostKeyAlias`` makes SSH check the key under the host's name (what an operator's known_hosts,
    or the hook's, records) rather than under ``[127.0.0.1]:port``."""
    sdir = ssh_dir(Path(host["fleet_dir"]))
    return {
        "ansible_host": SSH_ADDRESS,
        "ansible_port": host["ssh_port"],
        "ansible_ssh_private_key_file": str(sdir / "id_ed25519"),
        "ansible_ssh_common_args": f"-o UserKnownHostsFile={sdir / 'known_hosts'} -o StrictHostKeyChecking=yes "
                                   "-o IdentitiesOnly=yes",
        "ansible_ssh_extra_args": f"-o HostKeyAlias={host['name']}",
        "gpunode_sim_container": host["container"],
        "gpunode_sim_profile": host["profile"],
    }


#: The fabric every simulated host is in: one RoCE fabric, lossless profile and 400 Gb/s rails as the profiles have,
#: adaptive routing on the compute rails (the setting of the incident behind the project).
SIM_FABRIC = {
    "gpunode_fabric": "default",
    "gpunode_fabric_settings": {
        "transport": "roce", "link_speed_gbps": 400,
        "nics": {"compute": {"adaptive_routing": True, "num_vfs": 8}},
        "qos": {"trust": "dscp", "pfc_priorities": [3], "ecn_np_priorities": [3], "ecn_rp_priorities": [3],
                "cnp_dscp": 48, "roce_tos": 106, "mtu": 9000},
    },
}


def inventory(path: Path, names: list[str] | None = None, *, log=print) -> dict:
    """Write an Ansible inventory of the running simulated hosts (only ``names`` when given) to
    ``path``; return it. Naming the hosts keeps other scenarios' hosts on the machine out of it."""
    running = [h for h in hosts() if h["status"] == "running" and (not names or h["name"] in names)]
    missing = sorted(set(names or []) - {h["name"] for h in running})
    if missing:
        raise FleetError(f"not running: {', '.join(missing)} (start them with gpunode sim up)")
    no_ssh = sorted(h["name"] for h in running if not h["ssh_port"] or not h["fleet_dir"])
    if no_ssh:
        raise FleetError(f"no SSH port recorded for {', '.join(no_ssh)} (started by an older simulator): "
                         "replace them with gpunode sim up --replace")
    host_vars = {h["name"]: _ssh_vars(h) for h in running}
    data = {
        "all": {
            "children": {
                "gpu_nodes": {
                    "hosts": host_vars,
                    "vars": {
                        # SSH as with real hosts, one round trip a module (pipelining); the default
                        # ssh_args keep one connection a host open (ControlMaster/ControlPersist).
                        "ansible_connection": "ssh",
                        "ansible_user": "root",
                        "ansible_ssh_pipelining": True,
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
                        # The simulated hosts' rails are cabled to one simulated RoCE fabric (its declaration;
                        # inventories/sim/group_vars/gpu_nodes.yml says the same for the demo).
                        **SIM_FABRIC,
                        **MIRROR_VARS,
                    },
                }
            }
        }
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    header = ("---\n# Written by `gpunode sim inventory`: the simulated fleet (podman containers, reached over\n"
              "# SSH on loopback ports; host keys checked against the fleet's known_hosts).\n")
    path.write_text(header + yaml.safe_dump(data, sort_keys=False))
    log(f"wrote {path} ({len(running)} hosts)")
    return data
