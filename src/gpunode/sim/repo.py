"""Build the simulator's signed apt repositories (README §4) from ``packages.yaml``.

Every package is a real ``.deb`` made by ``dpkg-deb --build``; every repository is a flat apt
repository (``deb <url> /``, the layout of the DOCA-Host, CUDA and pkgs.k8s.io repositories) with a
``Packages`` index (Size, MD5sum, SHA1, SHA256 of each .deb), ``Packages.gz``, a ``Release`` file
listing their hashes, and ``InRelease`` + ``Release.gpg`` signed with a key generated for this
build. The key's public part is published at ``<vendor>/gpg.key`` and under the vendor's key file
names (``GPG-KEY-Mellanox.pub``, ``3bf863cc.pub``, ``Release.key``).

The build is skipped when ``.build-id`` in the output matches the hash of its inputs
(packages.yaml, the simulated tools, simkernel.py, this file). A new build swaps each vendor tree
in by rename inside the output directory, which running hosts keep bind-mounted.
"""

from __future__ import annotations

import email.utils
import gzip
import hashlib
import os
import shutil
import string
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml

SIM_DIR = Path(__file__).resolve().parent
PACKAGES_YAML = SIM_DIR / "packages.yaml"
TOOLS_DIR = SIM_DIR / "tools"
PROJECT_ROOT = SIM_DIR.parents[2]
BUILD_ID = ".build-id"
KEY_UID = "gpunode simulator repository signing key <sim-repo@gpunode.invalid>"
MAINTAINER = "gpunode simulator <sim@gpunode.invalid>"

# The simulated tools use the standard library only: ``-S`` skips the site import (and its path scan), about a
# third of a tool call's interpreter start. Every read of a simulated host runs dozens of them, on the same cores
# as the controller that runs the playbook.
WRAPPER = """#!/usr/bin/python3 -S
import sys
sys.path.insert(0, "/usr/lib/gpunode-sim/python")
from gpunode_simtools.main import main
sys.exit(main({tool!r}, sys.argv[1:]))
"""
SIMKERNEL_WRAPPER = """#!/usr/bin/python3 -S
{header}import sys
sys.path.insert(0, "/usr/lib/gpunode-sim/python")
from gpunode_simkernel import main
sys.exit(main({args!r} + sys.argv[1:]))
"""


class RepoError(RuntimeError):
    """The repository could not be built; the message names the package or step."""


def default_output() -> Path:
    """``$GPUNODE_SIM_REPO``, else ``.cache/sim-repo`` in the project."""
    env = os.environ.get("GPUNODE_SIM_REPO")
    return Path(env).resolve() if env else PROJECT_ROOT / ".cache" / "sim-repo"


def load_definitions(path: Path = PACKAGES_YAML) -> dict[str, Any]:
    """Read packages.yaml and expand ``for_each`` and ``{field}`` placeholders.

    Returns ``{vendor: {"origin", "label", "paths", "key_files", "packages": [package]}}`` where a
    package has ``name, version, architecture, depends, …, files`` fully formatted.
    """
    data = yaml.safe_load(path.read_text())
    gvars = data.get("vars") or {}
    scalars = {k: v for k, v in gvars.items() if not isinstance(v, list | dict)}
    out: dict[str, Any] = {}
    for vendor, repo in (data.get("repos") or {}).items():
        packages = []
        for entry in repo.get("packages") or []:
            loop = entry.get("for_each")
            items = gvars.get(loop) if loop else [{}]
            if loop and not isinstance(items, list):
                raise RepoError(f"{path.name}: {vendor}/{entry.get('name')}: for_each {loop!r} is not a list in vars")
            for item in items:
                packages.append(_expand(entry, {**scalars, **item}, f"{vendor}/{entry.get('name')}"))
        names = [(p["name"], p["version"]) for p in packages]
        dupes = {n for n in names if names.count(n) > 1}
        if dupes:
            raise RepoError(f"{path.name}: {vendor}: package defined twice: {sorted(dupes)}")
        out[vendor] = {
            "origin": repo.get("origin", vendor),
            "label": repo.get("label", vendor),
            "paths": list(repo.get("paths") or ["."]),
            "key_files": list(repo.get("key_files") or []),
            "packages": packages,
        }
    return out


def _fmt(value: Any, fields: dict[str, Any], where: str) -> Any:
    if isinstance(value, str):
        try:
            return value.format(**fields)
        except (KeyError, IndexError) as exc:
            raise RepoError(f"{where}: unknown placeholder {exc} in {value!r}") from None
    if isinstance(value, list):
        return [_fmt(v, fields, where) for v in value]
    if isinstance(value, dict):
        return {k: _fmt(v, fields, where) for k, v in value.items()}
    return value


def _expand(entry: dict[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    for key in ("name", "version", "description"):
        if not entry.get(key):
            raise RepoError(f"packages.yaml: {where}: missing {key}")
    pkg = {k: _fmt(v, fields, where) for k, v in entry.items()
           if k not in ("files", "postinst", "prerm", "for_each")}
    pkg["files"] = []
    for spec in entry.get("files") or []:
        item = dict(spec)
        for key in ("path", "tool", "simkernel", "module", "tree", "source"):
            if key in item:
                item[key] = _fmt(item[key], fields, where)
        if "content" in item:  # file bodies use $field (they may contain braces)
            item["content"] = string.Template(item["content"]).safe_substitute(
                {"version": pkg["version"], **fields, "name": pkg["name"]})
        pkg["files"].append(item)
    for script in ("postinst", "prerm"):
        if entry.get(script):
            pkg[script] = entry[script]
    pkg.setdefault("architecture", "amd64")
    return pkg


def inputs_hash(path: Path = PACKAGES_YAML) -> str:
    """Hash of everything a build depends on (skip the build when unchanged)."""
    digest = hashlib.sha256()
    files = [path, Path(__file__), SIM_DIR / "simkernel.py"]
    if TOOLS_DIR.is_dir():
        files += sorted(p for p in TOOLS_DIR.rglob("*.py") if "__pycache__" not in p.parts)
    for file in files:
        digest.update(str(file.relative_to(SIM_DIR) if file.is_relative_to(SIM_DIR) else file.name).encode())
        digest.update(file.read_bytes())
    return digest.hexdigest()[:16]


# --------------------------------------------------------------------------------------------
# .deb


def _control(pkg: dict[str, Any], installed_kib: int) -> str:
    lines = [
        f"Package: {pkg['name']}",
        f"Version: {pkg['version']}",
        f"Architecture: {pkg['architecture']}",
        f"Maintainer: {MAINTAINER}",
        f"Installed-Size: {installed_kib}",
    ]
    for field in ("depends", "conflicts", "provides", "replaces"):
        if pkg.get(field):
            lines.append(f"{field.capitalize()}: {', '.join(pkg[field])}")
    lines.append(f"Section: {pkg.get('section', 'misc')}")
    lines.append(f"Priority: {pkg.get('priority', 'optional')}")
    synopsis, _, body = pkg["description"].partition("\n")
    lines.append(f"Description: {synopsis}")
    for line in body.splitlines():
        line = line.rstrip()
        lines.append(line if line.startswith(" ") else f" {line}" if line else " .")
    return "\n".join(lines) + "\n"


def _write_payload(root: Path, pkg: dict[str, Any]) -> None:
    for spec in pkg["files"]:
        dest = root / spec["path"].lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        mode = 0o644
        if "tool" in spec:
            dest.write_text(WRAPPER.format(tool=spec["tool"]))
            mode = 0o755
        elif "simkernel" in spec:
            header = "".join((line if line.startswith("#") else f"# {line}").rstrip() + "\n"
                             for line in (spec.get("header") or "").splitlines())
            dest.write_text(SIMKERNEL_WRAPPER.format(args=list(spec["simkernel"]), header=header))
            mode = 0o755
        elif "module" in spec:
            mod = spec["module"]
            text = f"name={dest.stem}\nversion={mod['version']}\n"
            text += f"depends={','.join(mod.get('depends') or [])}\n"
            text += "".join(f"alias={a}\n" for a in mod.get("alias") or [])
            dest.write_text(text)
        elif "tree" in spec:
            if spec["tree"] != "tools":
                raise RepoError(f"{pkg['name']}: unknown tree {spec['tree']!r} (only 'tools')")
            dest.mkdir(parents=True, exist_ok=True)
            if TOOLS_DIR.is_dir():
                for src in sorted(TOOLS_DIR.rglob("*.py")):
                    if "__pycache__" in src.parts:
                        continue
                    target = dest / src.relative_to(TOOLS_DIR)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(src, target)
                    os.chmod(target, 0o644)
            continue
        elif "source" in spec:
            shutil.copyfile(SIM_DIR / spec["source"], dest)
        elif "content" in spec:
            dest.write_text(spec["content"])
            mode = int(str(spec.get("mode", "0644")), 8)
        else:
            raise RepoError(f"{pkg['name']}: file {spec['path']}: needs tool, simkernel, module, tree, source "
                            "or content")
        os.chmod(dest, mode)


def build_deb(pkg: dict[str, Any], outdir: Path) -> Path:
    """Build one package with ``dpkg-deb --build --root-owner-group``; return the .deb path."""
    with tempfile.TemporaryDirectory(prefix="gpunode-deb-") as tmp:
        root = Path(tmp) / "root"
        root.mkdir()
        os.chmod(root, 0o755)  # noqa: S103 - packaged files and the served repo are world-readable by design
        _write_payload(root, pkg)
        size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
        debian = root / "DEBIAN"
        debian.mkdir()
        os.chmod(debian, 0o755)  # noqa: S103 - packaged files and the served repo are world-readable by design
        (debian / "control").write_text(_control(pkg, max(1, (size + 1023) // 1024)))
        for script in ("postinst", "prerm"):
            if pkg.get(script):
                path = debian / script
                path.write_text("#!/bin/sh\nset -e\n" + pkg[script])
                os.chmod(path, 0o755)  # noqa: S103 - packaged files and the served repo are world-readable by design
        for dirpath, dirnames, _ in os.walk(root):
            for d in dirnames:
                os.chmod(os.path.join(dirpath, d), 0o755)  # noqa: S103 - packaged files and the served repo are world-readable by design
        version = pkg["version"].split(":", 1)[-1]
        deb = outdir / f"{pkg['name']}_{version}_{pkg['architecture']}.deb"
        proc = subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(deb)],
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RepoError(f"dpkg-deb failed for {pkg['name']} {pkg['version']}: {proc.stderr.strip()}")
    return deb


# --------------------------------------------------------------------------------------------
# index + signing


def _hashes(data: bytes) -> dict[str, str]:
    return {"MD5sum": hashlib.md5(data).hexdigest(),  # noqa: S324 - the apt index format requires MD5
            "SHA1": hashlib.sha1(data).hexdigest(),  # noqa: S324 - the apt index format requires SHA1
            "SHA256": hashlib.sha256(data).hexdigest()}


def packages_stanza(control: str, filename: str, data: bytes) -> str:
    """One ``Packages`` stanza: the control fields plus Filename, Size and the hashes."""
    fields = control.rstrip("\n").split("\n")
    desc_at = next(i for i, line in enumerate(fields) if line.startswith("Description:"))
    extra = [f"Filename: {filename}", f"Size: {len(data)}"]
    extra += [f"{k}: {v}" for k, v in _hashes(data).items()]
    return "\n".join(fields[:desc_at] + extra + fields[desc_at:]) + "\n"


def write_index(repo_dir: Path, debs: list[Path], vendor: dict[str, Any]) -> None:
    """Write Packages, Packages.gz and Release for a flat repository in ``repo_dir``."""
    stanzas = []
    for deb in sorted(debs):
        data = deb.read_bytes()
        control = subprocess.run(["dpkg-deb", "--field", str(deb)], capture_output=True, text=True,
                                 check=True).stdout
        stanzas.append(packages_stanza(control, f"./{deb.name}", data))
    packages = "\n".join(stanzas).encode()
    (repo_dir / "Packages").write_bytes(packages)
    gz = gzip.compress(packages, mtime=0)
    (repo_dir / "Packages.gz").write_bytes(gz)
    files = {"Packages": packages, "Packages.gz": gz}
    release = [
        f"Origin: {vendor['origin']}",
        f"Label: {vendor['label']}",
        "Architectures: amd64 all",
        f"Date: {email.utils.formatdate(usegmt=True)}",
        "Acquire-By-Hash: no",
    ]
    for title, key in (("MD5Sum", "MD5sum"), ("SHA1", "SHA1"), ("SHA256", "SHA256")):
        release.append(f"{title}:")
        for name, data in files.items():
            release.append(f" {_hashes(data)[key]} {len(data):>16} {name}")
    (repo_dir / "Release").write_text("\n".join(release) + "\n")


def _gpg(home: Path, *args: str, stdin: bytes | None = None) -> bytes:
    proc = subprocess.run(["gpg", "--homedir", str(home), "--batch", "--quiet", "--pinentry-mode", "loopback",
                           "--passphrase", "", *args], input=stdin, capture_output=True, check=False)
    if proc.returncode != 0:
        raise RepoError(f"gpg {' '.join(args[:2])} failed: {proc.stderr.decode(errors='replace').strip()}")
    return proc.stdout


def generate_key(home: Path) -> bytes:
    """Generate this build's signing key in ``home``; return its ASCII-armored public key."""
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    _gpg(home, "--quick-generate-key", KEY_UID, "ed25519", "sign", "never")
    return _gpg(home, "--armor", "--export", KEY_UID)


def sign(home: Path, repo_dir: Path) -> None:
    """Write ``InRelease`` (clear-signed) and ``Release.gpg`` (detached) for ``repo_dir/Release``."""
    release = repo_dir / "Release"
    _gpg(home, "--local-user", KEY_UID, "--digest-algo", "SHA256", "--clearsign",
         "--output", str(repo_dir / "InRelease"), str(release))
    _gpg(home, "--local-user", KEY_UID, "--digest-algo", "SHA256", "--armor", "--detach-sign",
         "--output", str(repo_dir / "Release.gpg"), str(release))


# --------------------------------------------------------------------------------------------
# build


def is_current(output: Path | None = None) -> bool:
    output = output or default_output()
    marker = output / BUILD_ID
    return marker.is_file() and marker.read_text().strip() == inputs_hash()


def build(output: Path | None = None, *, force: bool = False, log=print) -> Path:
    """Build every repository into ``output`` (default :func:`default_output`); return it."""
    output = (output or default_output()).resolve()
    if not force and is_current(output):
        log(f"sim repo {output} is up to date")
        return output
    if shutil.which("dpkg-deb") is None or shutil.which("gpg") is None:
        raise RepoError("dpkg-deb and gpg are needed to build the simulated repository (apt: dpkg, gpg)")
    vendors = load_definitions()
    # The output directory itself stays (running hosts bind-mount it); each vendor tree is
    # built beside it and swapped in by rename, so a host sees the new tree at once.
    output.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=output))
    try:
        home = Path(tempfile.mkdtemp(prefix="gpunode-gpg-"))
        try:
            public_key = generate_key(home / "gnupg")
            for vendor, repo in vendors.items():
                vdir = staging / vendor
                pool = vdir / ".debs"
                pool.mkdir(parents=True)
                debs = [build_deb(pkg, pool) for pkg in repo["packages"]]
                for rel in repo["paths"]:
                    rdir = vdir / rel
                    rdir.mkdir(parents=True, exist_ok=True)
                    local = []
                    for deb in debs:
                        os.link(deb, rdir / deb.name)
                        local.append(rdir / deb.name)
                    write_index(rdir, local, repo)
                    sign(home / "gnupg", rdir)
                shutil.rmtree(pool)
                (vdir / "gpg.key").write_bytes(public_key)
                for rel in repo["key_files"]:
                    (vdir / rel).parent.mkdir(parents=True, exist_ok=True)
                    (vdir / rel).write_bytes(public_key)
                log(f"sim repo {vendor}: {len(debs)} packages x {len(repo['paths'])} distro paths")
        finally:
            shutil.rmtree(home, ignore_errors=True)
        for path in [staging, *staging.rglob("*")]:
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
        (output / BUILD_ID).unlink(missing_ok=True)
        for vendor in vendors:
            target = output / vendor
            old = output / f".old-{vendor}"
            shutil.rmtree(old, ignore_errors=True)
            if target.exists():
                os.rename(target, old)
            os.rename(staging / vendor, target)
            shutil.rmtree(old, ignore_errors=True)
        (output / BUILD_ID).write_text(inputs_hash() + "\n")
        os.chmod(output, 0o755)  # noqa: S103 - packaged files and the served repo are world-readable by design
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    log(f"built sim repo {output}")
    return output
