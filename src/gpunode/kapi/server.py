"""HTTP(S) front of the Kubernetes API emulator, on aiohttp.

``serve()`` runs it in the foreground (``gpunode kapi serve``); :class:`RunningServer` runs it in a
thread (pytest fixtures). The state directory holds what a real control plane would hand out:

- ``ca.crt`` / ``ca.key``: a self-signed CA, also the serving certificate (SAN 127.0.0.1, localhost);
  discovery pins are ``sha256:<hex of its SubjectPublicKeyInfo>`` as kubeadm computes them;
- ``admin.token`` and ``admin.conf`` (a kubeconfig for kubernetes.core and the simulated kubeadm);
- ``objects.json``: every object, rewritten atomically after each change.

Authentication, as far as the join flow needs it: the admin token may do anything; a bootstrap
token (an unexpired ``bootstrap-token-<id>`` Secret in kube-system) may read ``cluster-info`` and
create/read kubelet client CSRs; a node credential (issued by an approved CSR, the stand-in for the
kubelet's client certificate) may create/read/patch its own Node and its status, and — as the
NodeRestriction admission plugin enforces — may not set ``node-role.kubernetes.io/*`` or
``node-restriction.kubernetes.io/*`` labels. Anonymous requests may read ``/version`` and
``kube-public/cluster-info``.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import secrets
import ssl
import subprocess
import threading
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from gpunode.kapi.store import ApiError, Resource, Store

SERVER_VERSION = {"major": "1", "minor": "33", "gitVersion": "v1.33.4", "platform": "linux/amd64",
                  "gitCommit": "gpunode-kapi-emulator", "goVersion": "go1.24.5", "compiler": "gc"}
RESTRICTED_LABEL_PREFIXES = ("node-role.kubernetes.io/", "node-restriction.kubernetes.io/")


def _der_tlv(data: bytes, pos: int) -> tuple[int, int, int]:
    """(tag, start of content, end of content) of the DER element at ``pos``."""
    tag, length = data[pos], data[pos + 1]
    pos += 2
    if length & 0x80:
        n = length & 0x7F
        length = int.from_bytes(data[pos:pos + n], "big")
        pos += n
    return tag, pos, pos + length


def spki_sha256(pem: str) -> str:
    """``sha256:<hex>`` of the certificate's SubjectPublicKeyInfo: the kubeadm discovery pin."""
    der = ssl.PEM_cert_to_DER_cert(pem)
    _, cert_start, _ = _der_tlv(der, 0)
    _, pos, tbs_end = _der_tlv(der, cert_start)
    fields = []
    while pos < tbs_end:
        tag, start, end = _der_tlv(der, pos)
        fields.append((tag, pos, end))
        pos = end
    if fields[0][0] == 0xA0:  # explicit [0] version
        fields = fields[1:]
    _, spki_pos, spki_end = fields[5]  # serial, signature, issuer, validity, subject, SPKI
    return "sha256:" + hashlib.sha256(der[spki_pos:spki_end]).hexdigest()


def ensure_credentials(state_dir: Path, port: int) -> dict[str, str]:
    """Create the CA/serving certificate, the admin token and admin.conf if missing."""
    state_dir.mkdir(parents=True, exist_ok=True)
    crt, key = state_dir / "ca.crt", state_dir / "ca.key"
    if not crt.exists():
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                        "-nodes", "-days", "365", "-subj", "/CN=kubernetes", "-keyout", str(key), "-out", str(crt),
                        "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                        "-addext", "basicConstraints=critical,CA:TRUE"],
                       check=True, capture_output=True)
        key.chmod(0o600)
    token_file = state_dir / "admin.token"
    if not token_file.exists():
        token_file.write_text(secrets.token_hex(24) + "\n")
        token_file.chmod(0o600)
    token = token_file.read_text().strip()
    server = f"https://127.0.0.1:{port}"
    ca_data = base64.b64encode(crt.read_bytes()).decode()
    kubeconfig = {
        "apiVersion": "v1", "kind": "Config", "current-context": "kubernetes-admin@kubernetes",
        "clusters": [{"name": "kubernetes", "cluster": {"server": server, "certificate-authority-data": ca_data}}],
        "users": [{"name": "kubernetes-admin", "user": {"token": token}}],
        "contexts": [{"name": "kubernetes-admin@kubernetes",
                      "context": {"cluster": "kubernetes", "user": "kubernetes-admin"}}],
    }
    conf = state_dir / "admin.conf"
    conf.write_text(json.dumps(kubeconfig, indent=2) + "\n")  # JSON is YAML; the stdlib-only simulated kubeadm reads it
    conf.chmod(0o600)
    return {"server": server, "token": token, "ca_data": ca_data, "ca_cert_hash": spki_sha256(crt.read_text()),
            "kubeconfig": str(conf)}


def _cluster_info(server: str, ca_data: str) -> dict[str, Any]:
    kubeconfig = {"apiVersion": "v1", "kind": "Config", "preferences": {}, "users": None, "contexts": None,
                  "current-context": "",
                  "clusters": [{"name": "", "cluster": {"server": server, "certificate-authority-data": ca_data}}]}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cluster-info", "namespace": "kube-public"},
            "data": {"kubeconfig": json.dumps(kubeconfig, indent=2)}}  # JSON is YAML


class Api:
    """The aiohttp application around a :class:`Store`."""

    def __init__(self, store: Store, admin_token: str) -> None:
        self.store = store
        self.admin_token = admin_token
        self.app = web.Application(client_max_size=16 * 1024 * 1024)
        self.app.router.add_route("*", "/{tail:.*}", self.handle)

    # --- discovery ---------------------------------------------------------------------------------
    def _groups(self) -> dict[str, list[str]]:
        groups: dict[str, list[str]] = {}
        for res in self.store.resources():
            if res.group and res.version not in groups.setdefault(res.group, []):
                groups[res.group].append(res.version)
        return groups

    def _group_doc(self, name: str, versions: list[str]) -> dict[str, Any]:
        vers = [{"groupVersion": f"{name}/{v}", "version": v} for v in sorted(versions, reverse=True)]
        return {"name": name, "versions": vers, "preferredVersion": vers[0]}

    def _resource_list(self, group: str, version: str) -> dict[str, Any]:
        entries = [e for r in self.store.resources() if (r.group, r.version) == (group, version) for e in r.discovery()]
        if not entries:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return {"kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": f"{group}/{version}" if group else version, "resources": entries}

    # --- auth --------------------------------------------------------------------------------------
    def _identity(self, request: web.Request) -> tuple[str, str | None]:
        auth = request.headers.get("Authorization", "")
        token = auth[7:].strip() if auth.startswith("Bearer ") else ""
        if not token:
            return "anonymous", None
        if secrets.compare_digest(token, self.admin_token):
            return "admin", None
        node = self.store.node_for_credential(token)
        if node:
            return "node", node
        if self.store.bootstrap_token_valid(token):
            return "bootstrap", None
        raise ApiError(401, "Unauthorized", "Unauthorized")

    @staticmethod
    def _authorize(who: str, node: str | None, method: str, res: Resource | None, namespace: str | None,
                   name: str | None, body: Any) -> None:
        if who == "admin":
            return
        plural = res.plural if res else ""
        if plural == "configmaps" and namespace == "kube-public" and name == "cluster-info" and method == "GET":
            return
        if who == "bootstrap" and plural == "certificatesigningrequests" and method in ("GET", "POST"):
            return
        if who == "node" and plural == "nodes":
            target = name or ((body or {}).get("metadata") or {}).get("name")
            if target == node and method in ("GET", "POST", "PATCH", "PUT"):
                labels = ((body or {}).get("metadata") or {}).get("labels") or {}
                bad = sorted(k for k in labels if k.startswith(RESTRICTED_LABEL_PREFIXES))
                if bad:
                    raise ApiError(403, "Forbidden", f'nodes "{node}" is forbidden: is not allowed to modify labels: '
                                   f"{', '.join(bad)}")
                return
        user = {"anonymous": "system:anonymous", "bootstrap": "system:bootstrap",
                "node": f"system:node:{node}"}[who]
        raise ApiError(403, "Forbidden", f'{plural or "path"} is forbidden: User "{user}" cannot '
                       f"{method.lower()} resource {plural!r} in namespace {namespace!r}")

    # --- dispatch ----------------------------------------------------------------------------------
    async def handle(self, request: web.Request) -> web.Response:
        try:
            body: Any = None
            if request.can_read_body:
                raw = await request.read()
                if raw:
                    try:
                        body = json.loads(raw)
                    except ValueError:
                        body = yaml.safe_load(raw)
            result = self._dispatch(request, body)
            # Create answers 201 Created, as the real API server does (200 for a dry run).
            created = request.method == "POST" and result.get("metadata", {}).get("uid") and \
                "All" not in request.query.getall("dryRun", []) and result.get("kind") not in ("Status",)
            return web.json_response(result, status=201 if created else 200)
        except ApiError as err:
            return web.json_response(err.status(), status=err.code)

    def _dispatch(self, request: web.Request, body: Any) -> dict[str, Any]:
        parts = [p for p in request.path.split("/") if p]
        method = request.method
        who, node = self._identity(request)
        if parts in (["version"], ["healthz"], ["readyz"], ["livez"]):
            return SERVER_VERSION if parts == ["version"] else {"status": "ok"}
        if who == "anonymous" and parts[:6] != ["api", "v1", "namespaces", "kube-public", "configmaps", "cluster-info"]:
            raise ApiError(403, "Forbidden", f'forbidden: User "system:anonymous" cannot {method.lower()} path '
                           f'"{request.path}"')
        if parts == ["api"]:
            return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": request.host}]}
        if parts == ["apis"]:
            return {"kind": "APIGroupList", "apiVersion": "v1",
                    "groups": [self._group_doc(g, v) for g, v in sorted(self._groups().items())]}
        if parts[:1] == ["apis"] and len(parts) == 2:
            versions = self._groups().get(parts[1])
            if not versions:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            return {"kind": "APIGroup", "apiVersion": "v1", **self._group_doc(parts[1], versions)}
        if parts[:1] == ["api"] and len(parts) >= 2:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if not rest:
            return self._resource_list(group, version)
        namespace = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        res = self.store.resource(group, version, rest[0])
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if sub == "eviction" and res.plural == "pods" and method == "POST":
            self._authorize(who, node, method, res, namespace, name, body)
            return self.store.evict(res, namespace, name, body, dry_run="All" in request.query.getall("dryRun", []))
        if sub not in (None, "status") or (sub == "status" and not res.status_subresource):
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({request.path})")
        if res.namespaced and name is None and namespace is None and method == "POST":
            raise ApiError(404, "NotFound", "a namespaced resource is created under /namespaces/<ns>/")
        self._authorize(who, node, method, res, namespace, name, body)
        dry_run = "All" in request.query.getall("dryRun", [])
        if namespace == "kube-public" and res.plural == "configmaps" and name == "cluster-info" and method == "GET":
            try:
                return self.store.get(res, namespace, name)
            except ApiError:
                return _cluster_info(f"https://{request.host}", self.ca_data)
        if method == "GET" and name is None:
            return self.store.list(res, namespace, request.query.get("labelSelector", ""),
                                   request.query.get("fieldSelector", ""))
        if method == "GET":
            return self.store.get(res, namespace, name)
        if method == "POST" and name is None:
            return self.store.create(res, namespace, body or {}, dry_run=dry_run)
        if method == "PUT" and name:
            return self.store.replace(res, namespace, name, body or {}, sub, dry_run=dry_run)
        if method == "PATCH" and name:
            return self.store.patch(res, namespace, name, body, request.content_type, sub, dry_run=dry_run)
        if method == "DELETE" and name:
            return self.store.delete(res, namespace, name, dry_run=dry_run)
        raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on {request.path}")

    ca_data = ""


def _ssl_context(state_dir: Path) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(state_dir / "ca.crt", state_dir / "ca.key")
    return ctx


def build(state_dir: Path, port: int) -> tuple[Api, dict[str, str]]:
    """The application and the credentials for ``state_dir`` (created when missing)."""
    creds = ensure_credentials(state_dir, port)
    api = Api(Store(state_dir), creds["token"])
    api.ca_data = creds["ca_data"]
    return api, creds


def serve(state_dir: Path, port: int, host: str = "127.0.0.1") -> None:
    """Run the emulator in the foreground until interrupted."""
    api, creds = build(state_dir, port)
    print(f"gpunode kapi: serving {creds['server']} (state {state_dir}, kubeconfig {creds['kubeconfig']})",
          flush=True)
    web.run_app(api.app, host=host, port=port, ssl_context=_ssl_context(state_dir), print=None,
                handle_signals=True)


def start_background(state_dir: Path, port: int, timeout: float = 30.0) -> int:
    """Start ``gpunode kapi serve`` detached; return its pid once ``/version`` answers over HTTPS."""
    import os
    import sys
    import time
    import urllib.request

    stop_background(state_dir)
    creds = ensure_credentials(state_dir, port)
    log = (state_dir / "kapi.log").open("ab")
    proc = subprocess.Popen([sys.executable, "-m", "gpunode.cli", "kapi", "serve", "--port", str(port),
                             "--state", str(state_dir)], stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    (state_dir / "kapi.pid").write_text(f"{proc.pid}\n")
    ctx = ssl.create_default_context(cafile=str(state_dir / "ca.crt"))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"gpunode kapi serve exited with {proc.returncode}; see {state_dir / 'kapi.log'}")
        try:
            with urllib.request.urlopen(creds["server"] + "/version", context=ctx, timeout=2):  # noqa: S310 https
                return proc.pid
        except OSError:
            time.sleep(0.2)
    os.kill(proc.pid, 15)
    raise RuntimeError(f"gpunode kapi serve did not answer on port {port} within {timeout:.0f}s")


def stop_background(state_dir: Path) -> bool:
    """Stop the emulator whose pid ``start_background`` recorded; False when none was running."""
    import os
    import signal

    pidfile = state_dir / "kapi.pid"
    if not pidfile.exists():
        return False
    pid = int(pidfile.read_text().strip())
    pidfile.unlink()
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    if b"kapi" not in cmdline or b"serve" not in cmdline:  # the pid was reused by something else
        return False
    os.kill(pid, signal.SIGTERM)
    return True


class RunningServer:
    """The emulator in a background thread: ``with RunningServer(dir, port) as srv: srv.kubeconfig``."""

    def __init__(self, state_dir: Path, port: int, host: str = "127.0.0.1") -> None:
        self.state_dir, self.port, self.host = state_dir, port, host
        self.api, self.creds = build(state_dir, port)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._started = threading.Event()
        self._runner: web.AppRunner | None = None
        self._error: BaseException | None = None

    @property
    def kubeconfig(self) -> str:
        return self.creds["kubeconfig"]

    @property
    def url(self) -> str:
        return self.creds["server"]

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def start() -> None:
            self._runner = web.AppRunner(self.api.app)
            await self._runner.setup()
            site = web.TCPSite(self._runner, self.host, self.port, ssl_context=_ssl_context(self.state_dir))
            await site.start()

        try:
            self._loop.run_until_complete(start())
        except BaseException as exc:  # reported to the starting thread
            self._error = exc
            self._started.set()
            return
        self._started.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self._runner.cleanup())

    def __enter__(self) -> RunningServer:
        self._thread.start()
        self._started.wait(30)
        if self._error:
            raise self._error
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
