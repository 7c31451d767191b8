"""The hook's HTTP service (Starlette, served by uvicorn).

Limits come before reading: the credential is checked from the headers and URL before any of the
body is read (``requests.precheck``), and the body is read as it streams, refused with 413 the
moment it passes ``MAX_BODY`` (a chunked body is never buffered whole). Signatures are then
verified against the body, and a request nonce is used at most once (``Store.use_nonce``). A POST
is validated, optionally cross-checked against MAAS, checked against the host's identity bound at
first contact, and committed to SQLite before the 202 answer. A request that would change another
machine's identity gets 409 and is recorded as ``refused``; other refusals are 4xx with a JSON
``{"error": <reason>}`` and record nothing. Forcing a re-run, ``X-Gpunode-Source: operator`` and
changing a bound host's FQDN need the operator credential (403/409 otherwise). A database that
cannot take new work (removed, replaced, a full disk) gives 503 naming why. Time limits on headers
and bodies and the connection limits are in ``server.py``. The access log names method, path
(never the query string, which may carry a phone_home token or signature), status and peer.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import threading
from pathlib import Path

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gpunode.hook.config import HookConfig
from gpunode.hook.maas import MaasClient, MaasError
from gpunode.hook.requests import (
    Credential,
    RequestError,
    host_name,
    merge_known_hosts,
    parse_form,
    parse_json,
    parse_json_request,
    parse_phone_home,
    precheck,
    verify,
)
from gpunode.hook.store import Store, StoreUnavailable

log = logging.getLogger("gpunode.hook")

MAX_BODY = 64 * 1024


class Hook:
    """What the routes share: settings, secret, store, MAAS client, known_hosts lock, worker."""

    def __init__(self, config: HookConfig, store: Store, *, worker=None, maas: MaasClient | None = None):
        self.config = config
        self.secret = config.secret()
        self.operator_secret = config.operator_secret()
        self.store = store
        self.worker = worker
        self.maas = maas
        self._known_hosts_lock = threading.Lock()

    def seed_known_hosts(self, host: str, fqdn: str | None, keys: dict[str, str]) -> None:
        if not keys:
            return
        path: Path = self.config.known_hosts
        with self._known_hosts_lock, _disk_errors(path):
            existing = path.read_text() if path.exists() else ""
            tmp = path.with_suffix(".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(merge_known_hosts(existing, host, fqdn, keys))
            tmp.chmod(0o600)
            tmp.replace(path)


    def forget_known_hosts(self, host: str, fqdn: str | None) -> None:
        """Remove every known_hosts line naming the host or its FQDN."""
        path: Path = self.config.known_hosts
        with self._known_hosts_lock:
            if not path.exists():
                return
            tmp = path.with_suffix(".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(merge_known_hosts(path.read_text(), host, fqdn, {}))
            tmp.chmod(0o600)
            tmp.replace(path)


def _error(status: int, reason: str) -> JSONResponse:
    # A refusal ends the connection: a body refused before it was read (401, 408, 413, ...) is not read on.
    return JSONResponse({"error": reason}, status_code=status, headers={"Connection": "close"})


def _access(request: Request, status: int, detail: str = "") -> None:
    peer = request.client.host if request.client else "-"
    log.info("%s %s %d %s%s", request.method, request.url.path, status, peer, f" ({detail})" if detail else "")


def _precheck(request: Request, hook: Hook, *, allow_query: bool) -> Credential:
    """The credential, checked from headers and URL alone (before the body is read)."""
    return precheck(mode=hook.config.auth, secret=hook.secret,
                    headers={k.lower(): v for k, v in request.headers.items()},
                    query=dict(request.query_params), allow_query=allow_query, max_skew=hook.config.hmac_max_skew,
                    operator_secret=hook.operator_secret)


def _verify(hook: Hook, credential: Credential, body: bytes, **signed) -> None:
    """Verify the signature against the body, then use its nonce (a second use is a replay)."""
    verify(credential, secret=hook.secret, body=body, **signed)
    if credential.nonce and not hook.store.use_nonce(credential.nonce, window=2 * hook.config.hmac_max_skew + 1):
        raise RequestError(401, "X-Gpunode-Nonce: already used (a replayed request)")


class _disk_errors:  # noqa: N801 - used as a context manager
    """Turn a full or read-only state directory into StoreUnavailable (503) naming it, instead of a bare 500."""

    def __init__(self, path: Path):
        self.path = path

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, _tb):
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES):
            what = "the disk is full" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else "not writable"
            raise StoreUnavailable(f"{self.path}: {what} ({errno.errorcode[exc.errno]}: {exc.strerror})") from exc
        return False


async def _body(request: Request) -> bytes:
    """The body, read as it streams and refused once it passes MAX_BODY (never buffered beyond it), or once
    it has taken longer than ``body_timeout`` seconds (408)."""
    limit = request.app.state.hook.config.body_timeout
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > MAX_BODY:
        raise RequestError(413, f"body: larger than {MAX_BODY} bytes")
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(limit):
            async for chunk in request.stream():
                size += len(chunk)
                if size > MAX_BODY:
                    raise RequestError(413, f"body: larger than {MAX_BODY} bytes")
                chunks.append(chunk)
    except TimeoutError:
        raise RequestError(408, f"body: not received within body_timeout ({limit:g} s)") from None
    return b"".join(chunks)


def _refused(request: Request, exc: Exception) -> JSONResponse:
    """The answer to a refused request: its 4xx, or 503 when the state cannot take new work."""
    if isinstance(exc, StoreUnavailable):
        log.error("refusing new work: %s", exc)
        exc = RequestError(503, str(exc))
    _access(request, exc.status, exc.reason)
    return _error(exc.status, exc.reason)


def _accept(request: Request, hook: Hook, source: str, parsed: dict, credential: Credential) -> JSONResponse:
    proves = credential.proves
    if parsed["force"] and "force" not in proves:
        raise RequestError(403, "force: re-running a host needs the operator credential")
    deploy_time = None
    if hook.maas is not None and hook.config.maas_check:
        try:
            machine = hook.maas.check(parsed["host"], parsed["instance_id"])
        except MaasError as exc:
            reason = str(exc)
            status = 503 if reason.startswith("MAAS GET") else 403
            raise RequestError(status, reason) from exc
        # MAAS confirms that this system_id is this host name's machine, and when it was deployed.
        if parsed["instance_id"]:
            proves = proves | {"instance_id"}
        deploy_time = str(machine["deploy_time"]) if machine.get("deploy_time") else None
    recorded = hook.store.record_request(source=source, host=parsed["host"], instance_id=parsed["instance_id"],
                                         fqdn=parsed["fqdn"], host_keys=parsed["host_keys"],
                                         peer=request.client.host if request.client else None, force=parsed["force"],
                                         proves=proves, deploy_time=deploy_time)
    if recorded["outcome"] == "refused":
        _access(request, 409, f"{source} {parsed['host']}: refused: {recorded['conflict']}")
        return JSONResponse({"error": recorded["conflict"], "request_id": recorded["request_id"],
                             "outcome": "refused", "host": parsed["host"]}, status_code=409)
    identity = hook.store.identity(parsed["host"]) or {}
    row = hook.store.host(parsed["host"]) or {}
    hook.seed_known_hosts(parsed["host"], row.get("fqdn") or parsed["fqdn"], identity.get("host_keys") or {})
    if hook.worker is not None and recorded["outcome"] != "duplicate":
        hook.worker.notify()
    _access(request, 202, f"{source} {parsed['host']}: {recorded['outcome']}")
    return JSONResponse(recorded, status_code=202)


async def phone_home(request: Request) -> JSONResponse:
    hook: Hook = request.app.state.hook
    try:
        credential = _precheck(request, hook, allow_query=True)
        body = await _body(request)
        ctype = request.headers.get("content-type", "")
        if not ctype.startswith("application/x-www-form-urlencoded"):
            if credential.kind == "url_signature":  # it signs form fields: nothing to verify it against
                raise RequestError(401, "?sig= signs the phone_home form's instance_id and hostname")
            _verify(hook, credential, body)  # an anonymous caller learns nothing about the format
            raise RequestError(415, "phone_home: expected an application/x-www-form-urlencoded form")
        form = parse_form(body)
        instance_id = form.get("instance_id")
        if instance_id in (None, "", "N/A"):
            instance_id = request.path_params.get("instance_id")
        _verify(hook, credential, body, instance_id=instance_id, hostname=form.get("hostname"))
        if "instance_id" in request.path_params and form.get("instance_id") not in (None, "N/A",
                                                                                      request.path_params["instance_id"]):
            raise RequestError(400, "instance_id: the form and the URL disagree")
        if instance_id and form.get("instance_id") in (None, "", "N/A"):
            form["instance_id"] = instance_id
        parsed = parse_phone_home(form)
        return await run_in_threadpool(_accept, request, hook, "phone_home", parsed, credential)
    except (RequestError, StoreUnavailable) as exc:
        return _refused(request, exc)


async def post_host(request: Request) -> JSONResponse:
    hook: Hook = request.app.state.hook
    try:
        credential = _precheck(request, hook, allow_query=False)
        body = await _body(request)
        _verify(hook, credential, body)
        parsed = parse_json_request(parse_json(body))
        source = request.headers.get("x-gpunode-source", "api")
        if source not in ("api", "capi", "operator"):
            raise RequestError(400, "X-Gpunode-Source: expected api, capi or operator")
        if source == "operator" and credential.kind != "operator":
            raise RequestError(403, "X-Gpunode-Source: operator needs the operator credential")
        return await run_in_threadpool(_accept, request, hook, source, parsed, credential)
    except (RequestError, StoreUnavailable) as exc:
        return _refused(request, exc)


async def _guarded_get(request: Request, fetch) -> JSONResponse:
    hook: Hook = request.app.state.hook
    try:
        _verify(hook, _precheck(request, hook, allow_query=False), await _body(request))
        found = fetch(hook.store)
    except (RequestError, StoreUnavailable) as exc:
        return _refused(request, exc)
    if found is None:
        _access(request, 404)
        return _error(404, "not found")
    return JSONResponse(found)


async def get_host(request: Request) -> JSONResponse:
    return await _guarded_get(request, lambda s: s.host(host_name(request.path_params["name"], "host")))


async def get_hosts(request: Request) -> JSONResponse:
    return await _guarded_get(request, lambda s: {"hosts": s.hosts(), "counts": s.counts()})


def _run_id(value: str) -> int:
    if not value.isdigit() or not value.isascii() or len(value) > 18:
        raise RequestError(400, "run id: expected a number of at most 18 digits")
    return int(value)


async def get_run(request: Request) -> JSONResponse:
    return await _guarded_get(request, lambda s: s.run(_run_id(request.path_params["run_id"])))


async def get_runs(request: Request) -> JSONResponse:
    return await _guarded_get(request, lambda s: {"runs": s.runs()})


def create_app(hook: Hook) -> Starlette:
    """The ASGI application around a Hook."""
    app = Starlette(routes=[
        Route("/v1/phone-home", phone_home, methods=["POST"]),
        Route("/v1/phone-home/{instance_id}", phone_home, methods=["POST"]),
        Route("/v1/hosts", post_host, methods=["POST"]),
        Route("/v1/hosts", get_hosts, methods=["GET"]),
        Route("/v1/hosts/{name}", get_host, methods=["GET"]),
        Route("/v1/runs", get_runs, methods=["GET"]),
        Route("/v1/runs/{run_id}", get_run, methods=["GET"]),
    ])
    app.state.hook = hook
    return app
