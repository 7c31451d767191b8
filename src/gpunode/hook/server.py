"""How ``gpunode hook serve`` runs its app under uvicorn, with the limits an idle or slow client meets.

uvicorn parses HTTP (h11) and runs the app; it bounds the time between requests on a kept-alive
connection (``timeout_keep_alive``) but not the time a client may take to send a request's headers
or body, and its ``limit_concurrency`` counts idle connections as well as requests, so a few dozen
connections that send half a request and wait make every other request get 503. This module keeps
uvicorn and h11 and adds, on uvicorn's own protocol class (``uvicorn.Config(http=...)``):

- ``header_timeout``: a client that has not sent a request's complete headers this many seconds
  after connecting (or after the previous answer, once it started the next request) gets 408 and
  is disconnected; a kept-alive connection on which no next request starts is closed without one;
- ``body_timeout``: the app answers 408 when a body takes longer (``app._body``); the connection is
  closed if the client still sends after that;
- ``max_connections_per_peer`` (429) and ``max_connections`` (503): a connection beyond them is
  answered and closed at once, before anything is read from it;
- ``max_header_bytes``: headers larger than h11's buffer get 431 naming the limit;
- ``max_concurrent_requests`` counts requests being handled (``RequestLimit``), not open connections.

Every refusal is a JSON ``{"error": ...}`` that names the setting that was passed.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from gpunode.hook.config import HookConfig

log = logging.getLogger("gpunode.hook")

#: Largest request head (request line and headers) read, in bytes.
MAX_HEADER_BYTES = 16 * 1024
#: Seconds past ``body_timeout`` after which a connection still sending a body is closed.
BODY_GRACE = 5.0
_PHRASES = {408: "Request Timeout", 429: "Too Many Requests", 431: "Request Header Fields Too Large",
            503: "Service Unavailable"}


@dataclass(frozen=True)
class Limits:
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    max_connections: int = 512
    max_connections_per_peer: int = 16
    max_header_bytes: int = MAX_HEADER_BYTES


def _answer(status: int, reason: str) -> bytes:
    body = json.dumps({"error": reason}).encode()
    head = (f"HTTP/1.1 {status} {_PHRASES[status]}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n")
    return head.encode() + body


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with per-connection deadlines and connection limits (``Limits``)."""

    limits = Limits()

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.limit_concurrency = None  # requests are counted by RequestLimit, idle connections are not
        self._timer = None
        self._phase: str | None = None
        self._answered = 0  # requests answered on this connection

    # -- deadlines ---------------------------------------------------------------------------

    def _arm(self, phase: str, seconds: float) -> None:
        self._disarm()
        self._phase = phase
        self._timer = self.loop.call_later(seconds, self._expired, phase)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._phase = None, None

    def _expired(self, phase: str) -> None:
        self._timer, self._phase = None, None
        if self.transport.is_closing():
            return
        if phase == "headers" and self._answered and not self.conn.trailing_data[0]:  # no byte of a next request
            self._drop(None)  # as a keep-alive timeout: no answer a client could take for its next request's
        elif phase == "headers":
            self._refuse(408, f"request headers: not received within header_timeout ({self.limits.header_timeout:g} s)")
        else:  # the app has answered 408 (or earlier); the client is still sending
            self._drop(f"request body: still arriving {self.limits.body_timeout + BODY_GRACE:g} s after the headers")

    def _track(self) -> None:
        """Move the deadline along with the request: headers → body → none (answering)."""
        if self.transport is None or self.transport.is_closing():
            self._disarm()
            return
        state = self.conn.their_state
        if state is h11.IDLE:
            if self._phase != "headers":
                self._arm("headers", self.limits.header_timeout)
        elif state is h11.SEND_BODY:
            if self._phase != "body":
                self._arm("body", self.limits.body_timeout + BODY_GRACE)
        else:
            self._disarm()

    # -- refusals ----------------------------------------------------------------------------

    def _peer(self) -> str:
        return self.client[0] if self.client else "-"

    def _refuse(self, status: int, reason: str) -> None:
        log.info("- - %d %s (%s)", status, self._peer(), reason)
        self._disarm()
        self.transport.write(_answer(status, reason))
        self.transport.close()

    def _drop(self, reason: str | None) -> None:
        if reason:
            log.info("- - closed %s (%s)", self._peer(), reason)
        self._disarm()
        self.transport.close()

    # -- uvicorn's protocol interface --------------------------------------------------------

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections:
            self._refuse(503, f"connections: more than max_connections ({self.limits.max_connections}) open")
            return
        peer = self.client[0] if self.client else None
        if peer is not None:
            same = sum(1 for c in self.connections if getattr(c, "client", None) and c.client[0] == peer)
            if same > self.limits.max_connections_per_peer:
                self._refuse(429, f"connections: more than max_connections_per_peer "
                                  f"({self.limits.max_connections_per_peer}) open from {peer}")
                return
        self._arm("headers", self.limits.header_timeout)

    def connection_lost(self, exc) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        limit = self.limits.max_header_bytes
        if self.conn.their_state is h11.IDLE:
            head = self.conn.trailing_data[0] + data[:limit + 4]
            if len(head) > limit and head.find(b"\r\n\r\n", 0, limit + 4) == -1:
                self._refuse(431, f"request headers: larger than {limit} bytes")
                return
        super().data_received(data)

    def handle_events(self) -> None:
        super().handle_events()
        self._track()

    def on_response_complete(self) -> None:
        self._answered += 1
        super().on_response_complete()
        self._track()


class RequestLimit:
    """ASGI middleware: at most ``limit`` requests handled at once; beyond it 503 naming the setting."""

    def __init__(self, app, limit: int):
        self.app = app
        self.limit = limit
        self.active = 0

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.active >= self.limit:
            body = json.dumps({"error": f"requests in progress: more than max_concurrent_requests ({self.limit})"})
            await send({"type": "http.response.start", "status": 503,
                        "headers": [(b"content-type", b"application/json"), (b"connection", b"close")]})
            await send({"type": "http.response.body", "body": body.encode()})
            return
        self.active += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.active -= 1


def uvicorn_config(config: HookConfig, app, **extra) -> uvicorn.Config:
    """The uvicorn settings for the hook's app: guarded protocol, request limit, forwarded headers only from
    ``trusted_proxies``."""
    limits = Limits(header_timeout=float(config.header_timeout), body_timeout=float(config.body_timeout),
                    max_connections=int(config.max_connections),
                    max_connections_per_peer=int(config.max_connections_per_peer))
    protocol = type("HookH11Protocol", (GuardedH11Protocol,), {"limits": limits})
    trusted = [str(p) for p in config.trusted_proxies or []]
    return uvicorn.Config(RequestLimit(app, int(config.max_concurrent_requests)), host=config.listen_host,
                          port=config.listen_port, http=protocol, access_log=False, log_level="warning",
                          lifespan="off", proxy_headers=bool(trusted), forwarded_allow_ips=trusted or [],
                          h11_max_incomplete_event_size=limits.max_header_bytes, **extra)
