"""The hook's HTTP service (Starlette, served by uvicorn).

Every request is authenticated (``requests.authenticate``); a POST is validated, optionally
cross-checked against MAAS, and committed to SQLite before the 202 answer. Refusals are 4xx with
a JSON ``{"error": <reason>}`` and record nothing. The access log names method, path (never the
query string, which may carry a phone_home token), status and peer.
"""

from __future__ import annotations

import json
import logging
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
    RequestError,
    authenticate,
    merge_known_hosts,
    parse_json_request,
    parse_phone_home,
)
from gpunode.hook.store import Store

log = logging.getLogger("gpunode.hook")

MAX_BODY = 64 * 1024


class Hook:
    """What the routes share: settings, secret, store, MAAS client, known_hosts lock, worker."""

    def __init__(self, config: HookConfig, store: Store, *, worker=None, maas: MaasClient | None = None):
        self.config = config
        self.secret = config.secret()
        self.store = store
        self.worker = worker
        self.maas = maas
        self._known_hosts_lock = threading.Lock()

    def seed_known_hosts(self, host: str, fqdn: str | None, keys: dict[str, str]) -> None:
        if not keys:
            return
        path: Path = self.config.known_hosts
        with self._known_hosts_lock:
            existing = path.read_text() if path.exists() else ""
            tmp = path.with_suffix(".tmp")
            tmp.write_text(merge_known_hosts(existing, host, fqdn, keys))
            tmp.chmod(0o644)
            tmp.replace(path)


def _error(status: int, reason: str) -> JSONResponse:
    return JSONResponse({"error": reason}, status_code=status)


def _access(request: Request, status: int, detail: str = "") -> None:
    peer = request.client.host if request.client else "-"
    log.info("%s %s %d %s%s", request.method, request.url.path, status, peer, f" ({detail})" if detail else "")


async def _authenticated(request: Request, hook: Hook, *, instance_id: str | None = None,
                         body: bytes = b"") -> None:
    authenticate(mode=hook.config.auth, secret=hook.secret, headers={k.lower(): v for k, v in request.headers.items()},
                 query=dict(request.query_params), body=body, instance_id=instance_id,
                 max_skew=hook.config.hmac_max_skew)


async def _body(request: Request) -> bytes:
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > MAX_BODY:
        raise RequestError(413, f"body: larger than {MAX_BODY} bytes")
    body = await request.body()
    if len(body) > MAX_BODY:
        raise RequestError(413, f"body: larger than {MAX_BODY} bytes")
    return body


def _accept(request: Request, hook: Hook, source: str, parsed: dict) -> JSONResponse:
    if hook.maas is not None and hook.config.maas_check:
        try:
            hook.maas.check(parsed["host"], parsed["instance_id"])
        except MaasError as exc:
            reason = str(exc)
            status = 503 if reason.startswith("MAAS GET") else 403
            raise RequestError(status, reason) from exc
    recorded = hook.store.record_request(source=source, host=parsed["host"], instance_id=parsed["instance_id"],
                                         fqdn=parsed["fqdn"], host_keys=parsed["host_keys"],
                                         peer=request.client.host if request.client else None, force=parsed["force"])
    hook.seed_known_hosts(parsed["host"], parsed["fqdn"], parsed["host_keys"])
    if hook.worker is not None and recorded["outcome"] != "duplicate":
        hook.worker.notify()
    _access(request, 202, f"{source} {parsed['host']}: {recorded['outcome']}")
    return JSONResponse(recorded, status_code=202)


async def phone_home(request: Request) -> JSONResponse:
    hook: Hook = request.app.state.hook
    try:
        body = await _body(request)
        ctype = request.headers.get("content-type", "")
        if not ctype.startswith("application/x-www-form-urlencoded"):
            # Authenticate first so an anonymous caller learns nothing about the format.
            await _authenticated(request, hook, body=body)
            raise RequestError(415, "phone_home: expected an application/x-www-form-urlencoded form")
        form = dict((await request.form()).items())
        instance_id = form.get("instance_id") or request.path_params.get("instance_id")
        await _authenticated(request, hook, instance_id=instance_id if isinstance(instance_id, str) else None,
                             body=body)
        if "instance_id" in request.path_params and form.get("instance_id") not in (None, "N/A",
                                                                                      request.path_params["instance_id"]):
            raise RequestError(400, "instance_id: the form and the URL disagree")
        parsed = parse_phone_home({k: str(v) for k, v in form.items()})
        return await run_in_threadpool(_accept, request, hook, "phone_home", parsed)
    except RequestError as exc:
        _access(request, exc.status, exc.reason)
        return _error(exc.status, exc.reason)


async def post_host(request: Request) -> JSONResponse:
    hook: Hook = request.app.state.hook
    try:
        body = await _body(request)
        await _authenticated(request, hook, body=body)
        try:
            data = json.loads(body or b"null")
        except ValueError:
            raise RequestError(400, "body: not valid JSON") from None
        parsed = parse_json_request(data)
        source = request.headers.get("x-gpunode-source", "api")
        if source not in ("api", "capi", "operator"):
            raise RequestError(400, "X-Gpunode-Source: expected api, capi or operator")
        return await run_in_threadpool(_accept, request, hook, source, parsed)
    except RequestError as exc:
        _access(request, exc.status, exc.reason)
        return _error(exc.status, exc.reason)


async def _guarded_get(request: Request, fetch) -> JSONResponse:
    hook: Hook = request.app.state.hook
    try:
        await _authenticated(request, hook)
    except RequestError as exc:
        _access(request, exc.status, exc.reason)
        return _error(exc.status, exc.reason)
    found = fetch(hook.store)
    if found is None:
        _access(request, 404)
        return _error(404, "not found")
    return JSONResponse(found)


async def get_host(request: Request) -> JSONResponse:
    return await _guarded_get(request, lambda s: s.host(request.path_params["name"].lower()))


async def get_hosts(request: Request) -> JSONResponse:
    return await _guarded_get(request, lambda s: {"hosts": s.hosts(), "counts": s.counts()})


async def get_run(request: Request) -> JSONResponse:
    return await _guarded_get(request, lambda s: s.run(request.path_params["run_id"]))


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
        Route("/v1/runs/{run_id:int}", get_run, methods=["GET"]),
    ])
    app.state.hook = hook
    return app
