"""Build the simulated hosts' container image: Debian 12 + systemd + python3.

There is no container registry here, so the image is made from scratch: ``debootstrap`` writes a
root filesystem and ``podman import`` turns its tarball into an image. The image tag carries a
hash of the recipe below, so an unchanged recipe is never rebuilt and a changed one always is.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

from gpunode.sim import podman

IMAGE_REPO = "localhost/gpunode-sim"

#: Everything that determines the image's content. Change it and the tag changes.
RECIPE: dict = {
    "suite": "bookworm",
    "variant": "minbase",
    # systemd as PID 1, python3 for Ansible, python3-apt for ansible.builtin.apt, gnupg for
    # signed-by keys, iproute2/procps/kmod for what roles and tests inspect, openssh-server for the
    # connection Ansible uses with real hosts (SSH with pipelining; see fleet.py for the port).
    "include": [
        "systemd",
        "systemd-sysv",
        "dbus",
        "python3",
        "python3-apt",
        "iproute2",
        "procps",
        "kmod",
        "ca-certificates",
        "gnupg",
        "openssh-server",
    ],
    # Files removed from the root filesystem: identity that must come from the container (globs).
    "remove": ["etc/hostname", "etc/machine-id", "var/lib/dbus/machine-id", "etc/ssh/ssh_host_*"],
    # Files written into the root filesystem (path: content).
    "files": {
        # Every simulated host shares the controller's network namespace, so each sshd listens on
        # loopback only, on the port `gpunode sim up` picked for it (written to the state directory
        # mounted at /var/lib/gpunode-sim before the container starts), and takes the fleet's
        # client key from there. The first value of an option wins, so this file comes first.
        "etc/ssh/sshd_config.d/00-gpunode-sim.conf": (
            "# gpunode simulator: port, listen address and client key from the host's state directory\n"
            "Include /var/lib/gpunode-sim/ssh/sshd.conf\n"
        ),
        # Host keys are made at the host's first boot (as a cloud image does), never shared
        # between hosts through the image.
        "etc/systemd/system/ssh.service.d/gpunode-sim-host-keys.conf": (
            "[Service]\n"
            "ExecStartPre=\n"
            "ExecStartPre=/usr/bin/ssh-keygen -A\n"
            "ExecStartPre=/usr/sbin/sshd -t\n"
        ),
    },
    # podman import --change instructions.
    "changes": ['CMD ["/sbin/init"]', "STOPSIGNAL SIGRTMIN+3"],
    "revision": 2,
}


class ImageError(RuntimeError):
    """The image could not be built; the message names the step that failed."""


def recipe_hash(recipe: dict | None = None) -> str:
    """Return a short, stable hash of the recipe (12 hex digits)."""
    data = json.dumps(recipe or RECIPE, sort_keys=True).encode()
    return hashlib.sha256(data).hexdigest()[:12]


def image_ref(recipe: dict | None = None) -> str:
    """The image reference for a recipe, e.g. ``localhost/gpunode-sim:0123456789ab``."""
    return f"{IMAGE_REPO}:{recipe_hash(recipe)}"


def ensure_image(*, force: bool = False, log=print) -> str:
    """Build the image unless an image for the current recipe already exists; return its ref."""
    ref = image_ref()
    if not force and podman.image_exists(ref):
        log(f"image {ref} is up to date (recipe unchanged)")
        return ref
    for tool in ("debootstrap", "tar"):
        if shutil.which(tool) is None:
            raise ImageError(f"{tool} not found on PATH: install it (make deps installs debootstrap)")
    with tempfile.TemporaryDirectory(prefix="gpunode-image-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        argv = [
            "debootstrap",
            f"--variant={RECIPE['variant']}",
            "--include=" + ",".join(RECIPE["include"]),
            RECIPE["suite"],
            str(rootfs),
        ]
        log(f"building {ref}: {' '.join(argv)}")
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-20:])
            raise ImageError(f"debootstrap failed (rc={proc.returncode}):\n{tail}")
        for pattern in RECIPE["remove"]:
            for target in rootfs.glob(pattern):
                if target.is_file() or target.is_symlink():
                    target.unlink()
        for rel, content in RECIPE["files"].items():
            target = rootfs / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
            target.chmod(0o644)
        # An empty machine-id makes systemd generate one per container at boot.
        (rootfs / "etc" / "machine-id").write_text("")
        shutil.rmtree(rootfs / "var" / "cache" / "apt" / "archives", ignore_errors=True)
        podman.import_rootfs(rootfs, ref, RECIPE["changes"])
    log(f"built {ref}")
    return ref
