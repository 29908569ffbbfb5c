"""The gateway's HTTP side: the guard in front of the MCP SDK's streamable HTTP transport.

``Host`` and ``Origin`` allow-lists, the bearer token, the body size and a strict body check
(:mod:`anfitrion.mcp._http_body`) run before the SDK reads anything; and one filter drops the
SDK's traceback for a race that is not an error.
"""

from __future__ import annotations

import hmac
import logging
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

import anyio

from .._throttle import GuessThrottle, OnThrottled, Throttled, client_key
from ..exceptions import UserError
from ._gateway_framing import STREAMED_METHODS, lone_answer_as_json
from ._http_body import read_body, send_refusal

__all__ = ["THROTTLED_AUDIT", "ASGIApp", "Authenticator", "HttpGuard", "SessionCloseRace",
           "respond", "with_health"]

log = logging.getLogger("anfitrion.mcp.gateway")

THROTTLED_AUDIT = "gateway.auth_throttled"
"""A client over the limit of wrong bearer tokens (:mod:`anfitrion._throttle`), once per
episode: its address, the limit and the wait, never a token."""

ASGIApp = Callable[[dict[str, Any], Callable[..., Any], Callable[..., Any]], Any]


class SessionCloseRace(logging.Filter):
    """Drops the SDK's traceback for a stream closed under its writer: when a client ends its
    session (``DELETE``), the SDK closes the session's streams while its SSE writers still
    read them, and logs the ``ClosedResourceError`` as an error. Every other record passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, (anyio.ClosedResourceError, anyio.BrokenResourceError))


async def respond(send: Any, status: int, body: bytes,
                   headers: Sequence[tuple[bytes, bytes]] = ()) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(body)).encode()), *headers]})
    await send({"type": "http.response.body", "body": body})


class Authenticator(Protocol):
    """The gateway as an OAuth resource server (:class:`~anfitrion.mcp._gateway_auth.
    OAuthResource`): its metadata route, and the check of each request's bearer token."""

    metadata_path: str

    async def metadata(self, scope: dict[str, Any], receive: Any, send: Any) -> None: ...

    async def guard(self, scope: dict[str, Any], headers: dict[str, str], send: Any) -> bool: ...


class HttpGuard:
    """ASGI middleware: Host and Origin allow-lists, bearer token, body size, strict body.

    ``Host`` stops DNS rebinding (a web page resolving its own name to 127.0.0.1); ``Origin``
    stops browsers' cross-site requests; the token (the static one, or with ``oauth`` an OAuth
    access token checked by :class:`Authenticator`) stops other programs; the body limit
    stops memory exhaustion; a POSTed body must be strict JSON and one JSON-RPC message with
    an MCP method (:mod:`anfitrion.mcp._http_body`). Checks run before the MCP SDK reads
    anything.
    """

    def __init__(self, app: ASGIApp, *, token: str | None, allowed_hosts: Iterable[str],
                 allowed_origins: Iterable[str] = (), max_body_bytes: int = 1024 * 1024,
                 oauth: Authenticator | None = None,
                 on_throttled: OnThrottled | None = None) -> None:
        if oauth is None and (token is None or len(token) < 16):
            raise UserError("the bearer token must have at least 16 characters")
        self.app = app
        self.oauth = oauth
        self._expected = f"Bearer {token}".encode() if oauth is None else b""
        self.allowed_hosts = frozenset(allowed_hosts)
        self.allowed_origins = frozenset(allowed_origins)
        self.max_body_bytes = max_body_bytes
        # wrong bearer tokens per client (the static token and OAuth alike), compared first
        self.throttle = GuessThrottle(door="gateway")
        self.on_throttled = on_throttled  # awaited once per throttling episode (the audit)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers", [])}
        if headers.get("host", "") not in self.allowed_hosts:
            await respond(send, 421, b"invalid Host header")
            return
        oauth = self.oauth
        if oauth is not None and scope.get("path") == oauth.metadata_path:
            await oauth.metadata(scope, receive, send)  # public: RFC 9728 metadata
            return
        origin = headers.get("origin")
        if origin is not None and origin not in self.allowed_origins:
            await respond(send, 403, b"invalid Origin header")
            return
        throttled: list[Throttled] = []
        presented = bool(headers.get("authorization", "").strip())
        checked = self._throttling(scope, send, throttled) if presented else send
        if not await self._authorised(scope, headers, checked):
            await self._report(throttled)
            return
        await self._pass(scope, headers, receive, send)

    async def _authorised(self, scope: dict[str, Any], headers: dict[str, str],
                          send: Any) -> bool:
        """The bearer token checked (the static one in constant time, or OAuth's); False
        when refused (answered already)."""
        oauth = self.oauth
        if oauth is not None:
            return await oauth.guard(scope, headers, send)
        if not hmac.compare_digest(headers.get("authorization", "").encode("latin-1"),
                                   self._expected):
            await respond(send, 401, b"a valid bearer token is required",
                          [(b"www-authenticate", b'Bearer realm="anfitrion-gateway"')])
            return False
        return True

    def _throttling(self, scope: dict[str, Any], send: Any, throttled: list[Throttled]) -> Any:
        """*send*, turning a 401 to a presented token (a wrong one: the right one was compared
        first and passed) into 429 with ``Retry-After`` once its client is over the limit."""
        async def wrapped(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start" and message.get("status") == 401:
                verdict = self.throttle.record(client_key(scope))
                if verdict is not None:
                    throttled.append(verdict)
                    retry = str(math.ceil(verdict.retry_after)).encode()
                    message = {**message, "status": 429,
                               "headers": [*message.get("headers", []),
                                           (b"retry-after", retry)]}
            await send(message)
        return wrapped

    async def _report(self, throttled: list[Throttled]) -> None:
        if throttled and throttled[0].first and self.on_throttled is not None:
            await self.on_throttled(throttled[0].audit_data())

    async def _pass(self, scope: dict[str, Any], headers: dict[str, str], receive: Any,
                    send: Any) -> None:
        """The size limit and the strict body check, then the SDK."""
        declared = headers.get("content-length")
        if declared is not None and (not declared.isdigit() or
                                     int(declared) > self.max_body_bytes):
            await respond(send, 413, b"request body too large")
            return
        if scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client went away mid-body: nothing to run, nobody to answer
            if message["type"] != "http.request":
                break
            body.extend(message.get("body", b""))
            if len(body) > self.max_body_bytes:
                await respond(send, 413, b"request body too large")
                return
            if not message.get("more_body", False):
                break
        # strict JSON and one JSON-RPC message, before the SDK (which answers 500 otherwise)
        parsed, refusal = read_body(bytes(body), max_bytes=self.max_body_bytes)
        if refusal is not None:
            await send_refusal(send, refusal)
            return
        answer = _one_response(send)
        if "id" in parsed and "method" in parsed and parsed["method"] not in STREAMED_METHODS:
            answer = lone_answer_as_json(answer, parsed["id"])  # a request: JSON if alone
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            message: dict[str, Any] = await receive()
            return message

        await self.app(scope, replay, answer)


def _one_response(send: Any) -> Any:
    """*send*, dropping what the app sends after its response is complete (the SDK answering
    a request whose client went away, or whose session closed, a second time): the
    server would log "Unexpected ASGI message" with a traceback, for a client that is gone."""
    complete = False

    async def once(message: dict[str, Any]) -> None:
        nonlocal complete
        if complete:
            log.debug("dropped %s sent after the response was complete", message.get("type"))
            return
        if message.get("type") == "http.response.body" and not message.get("more_body"):
            complete = True
        await send(message)
    return once


def with_health(app: ASGIApp, ready: Callable[[], Any]) -> ASGIApp:
    """*app* with ``GET /healthz`` (the process serves: ``200 ok``) and ``GET /readyz``
    (``200 ready`` when the awaitable *ready()* returns ``None``, else ``503`` and its one-line
    reason) answered in front of it, for a load balancer's checks: no token needed, nothing
    read from the request, nothing about the deployment said beyond the reason."""
    async def health(scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path not in ("/healthz", "/readyz") or scope.get("method") not in ("GET", "HEAD"):
            await app(scope, receive, send)
            return
        if path == "/healthz":
            await respond(send, 200, b"ok\n")
            return
        problem = await ready()
        if problem is None:
            await respond(send, 200, b"ready\n")
        else:
            await respond(send, 503, f"not ready: {problem}\n".encode()[:500])
    return health
