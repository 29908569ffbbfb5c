"""The inbox's defences: sign-in sessions, CSRF tokens, Host/Origin checks and security headers.

- **Sign-in**: a person types the token printed by ``anfitrion serve``; the server answers with a
  random session id in a cookie that is ``HttpOnly`` and ``SameSite=Strict`` (``Secure`` over
  HTTPS). Sessions live in memory and expire.
- **Throttling wrong tokens** (:class:`SignInThrottle`): a client that sent ten wrong tokens in
  a minute has its further wrong tokens refused with 429 and ``Retry-After``. A client is its
  peer address (an IPv6 peer: its /64), so one client's guesses never slow another; the table
  of clients is bounded (the least recently failing are forgotten first). The token is always
  compared first: **the correct token always signs in**, even from a throttled client. Behind
  the loopback-only server every local program is the same client (``127.0.0.1``), so a
  throttle that refused before comparing would let any local program lock the person out.
  What stops guessing is the token's length (random 192 bits unless configured, at least 16
  characters), not the throttle.
- **CSRF**: each session has its own random token; every form POST carries it and the server
  compares it in constant time. The JSON API takes only ``Authorization: Bearer``, which a
  browser never attaches on its own, so cookies can never authorise an API call.
- **DNS rebinding**: the ``Host`` header must name an allowed host; an ``Origin`` header, when
  present, must be this server's own origin. Form POSTs must carry a matching ``Origin`` (or,
  failing that, ``Referer``).
- **Headers**: a strict content security policy (scripts and styles from this server only, no
  inline code), no framing, no MIME sniffing, no caching of pages.
"""

from __future__ import annotations

import hmac
import logging
import math
import secrets
import time
from collections.abc import Iterable
from contextvars import ContextVar
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import _throttle
from .._throttle import GuessThrottle, OnThrottled, Throttled, client_key

__all__ = ["CSP", "MAX_THROTTLED_CLIENTS", "SESSION_COOKIE", "GuardMiddleware", "SessionBook",
           "SignInThrottle", "SignedIn", "client_key", "host_name", "token_matches"]

log = logging.getLogger("anfitrion.web")

SESSION_COOKIE = "anfitrion_session"
MAX_BODY_BYTES = 1024 * 1024
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
SECURITY_HEADERS = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    # same-origin (not no-referrer): with no-referrer a browser sends "Origin: null" on POST
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
)


MAX_THROTTLED_CLIENTS = _throttle.MAX_THROTTLED_CLIENTS
"""Clients the sign-in throttle remembers at once; the least recently failing go first."""


def token_matches(given: str, expected: str) -> bool:
    """Constant-time comparison of a presented token with the configured one."""
    # surrogatepass: a lone surrogate from a form is a wrong token, never an exception
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"),
                               expected.encode("utf-8", "surrogatepass"))


@dataclass
class SignInThrottle(GuessThrottle):
    """The inbox's :class:`~anfitrion._throttle.GuessThrottle` (sign-in and JSON API share it:
    alternating doors does not double a client's guesses)."""

    max_clients: int = field(default_factory=lambda: MAX_THROTTLED_CLIENTS)


@dataclass
class _Attempt:
    """The request being served: its client, and whether a wrong token got it throttled."""

    client: str
    throttled: Throttled | None = None

    @property
    def retry_after(self) -> float | None:
        return None if self.throttled is None else self.throttled.retry_after


_attempt: ContextVar[_Attempt | None] = ContextVar("anfitrion_web_attempt", default=None)


@dataclass(frozen=True, slots=True)
class SignedIn:
    """One signed-in browser: who they said they are and their CSRF token."""

    session_id: str
    name: str
    csrf: str
    expires: float


@dataclass
class SessionBook:
    """Browser sessions, in memory: a restart signs everybody out."""

    lifetime: float = 12 * 3600
    throttle: SignInThrottle = field(default_factory=SignInThrottle)
    _sessions: dict[str, SignedIn] = field(default_factory=dict)

    def throttled(self) -> bool:
        """Whether to refuse a sign-in before its token is compared: never.

        Refusing before the comparison would refuse the correct token too, and on a loopback
        server every local program is the same client: ten wrong tokens from any of them
        would lock the person out. Wrong tokens are throttled in :meth:`failed` instead.
        """
        return False

    def failed(self) -> None:
        """A wrong token from the request being served: counted for its client.

        A client over the limit has this answer turned into 429 with ``Retry-After`` by
        :class:`GuardMiddleware`; its correct token still signs in.
        """
        attempt = _attempt.get()
        client = attempt.client if attempt is not None else "unknown"
        throttled = self.throttle.record(client)
        if throttled is not None and attempt is not None:
            attempt.throttled = throttled

    def open(self, name: str) -> SignedIn:
        signed = SignedIn(secrets.token_urlsafe(32), name, secrets.token_urlsafe(32),
                          time.monotonic() + self.lifetime)
        self._sessions[signed.session_id] = signed
        return signed

    def find(self, session_id: str | None) -> SignedIn | None:
        if not session_id:
            return None
        signed = self._sessions.get(session_id)
        if signed is None:
            return None
        if time.monotonic() >= signed.expires:
            del self._sessions[session_id]
            return None
        return signed

    def close(self, session_id: str | None) -> None:
        if session_id:
            self._sessions.pop(session_id, None)


def host_name(host_header: str) -> str:
    """The host part of a ``Host`` header value, lower-cased, without the port."""
    host = host_header.strip().lower()
    if host.startswith("["):
        return host[: host.find("]") + 1] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _origin_of(url: str) -> str | None:
    parts = urlsplit(url)
    if not parts.scheme or not parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc}".lower()


class GuardMiddleware:
    """Refuses requests for foreign hosts or from foreign origins; adds security headers."""

    def __init__(self, app: ASGIApp, *, allowed_hosts: Iterable[str],
                 public_origin: str | None = None,
                 on_throttled: OnThrottled | None = None) -> None:
        self.app = app
        self.on_throttled = on_throttled  # awaited once per throttling episode (the audit)
        self.allowed_hosts = frozenset(h.lower() for h in allowed_hosts)
        # behind a TLS proxy the browser's origin is https://… while this server sees http
        self.public_origin = public_origin.rstrip("/").lower() if public_origin else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        problem, status = self._problem(scope, headers), 400
        if problem is not None and "origin" in problem:
            status = 403
        elif problem is None and scope["method"] in ("POST", "PUT", "PATCH"):
            problem, status = self._body_problem(headers)
        if problem is not None:
            response = PlainTextResponse(problem, status_code=status)
            await response(scope, receive, self._with_headers(send))
            return
        attempt = _Attempt(client_key(scope))
        reset = _attempt.set(attempt)
        try:
            await self.app(scope, receive, self._with_headers(send, attempt))
        except ClientDisconnect:
            # the client went away mid-body: nothing was read or changed, and nobody is left
            # to answer — not an error of this server (no traceback in its log)
            log.debug("a client disconnected before sending its whole request")
        finally:
            _attempt.reset(reset)
            throttled = attempt.throttled
            if throttled is not None and throttled.first and self.on_throttled is not None:
                await self.on_throttled(throttled.audit_data())

    def _problem(self, scope: Scope, headers: Headers) -> str | None:
        host = headers.get("host", "")
        if host_name(host) not in self.allowed_hosts:
            return "unknown host: this server answers only for its configured host names"
        own = {f"{scope.get('scheme', 'http')}://{host}".lower(), self.public_origin}
        origin = headers.get("origin")
        if origin is not None and origin.lower() not in own:
            return "cross-origin request refused (origin does not match this server)"
        # the API takes bearer tokens only, never cookies: a forged cross-site call has no
        # credential, so only the browser routes need an Origin on every POST
        is_form_post = (scope["method"] not in ("GET", "HEAD", "OPTIONS")
                        and not scope["path"].startswith("/api/"))
        if is_form_post and origin is None:
            referer = headers.get("referer")
            if referer is None or _origin_of(referer) not in own:
                return "cross-origin request refused (no matching origin or referer)"
        return None

    @staticmethod
    def _body_problem(headers: Headers) -> tuple[str | None, int]:
        length = headers.get("content-length")
        if length is None:
            return "send a Content-Length", 411
        if not length.isdigit() or int(length) > MAX_BODY_BYTES:
            return f"the body is over {MAX_BODY_BYTES} bytes", 413
        return None, 400

    @staticmethod
    def _with_headers(send: Send, attempt: _Attempt | None = None) -> Send:
        async def wrapped(message: Message) -> None:
            if message["type"] == "http.response.start":
                existing = {k.lower() for k, _ in message.get("headers", [])}
                extra = [(k, v) for k, v in SECURITY_HEADERS if k not in existing]
                if attempt is not None and attempt.retry_after is not None:
                    # a wrong token from a throttled client: refused, and told to wait
                    message["status"] = 429
                    extra.append((b"retry-after", str(math.ceil(attempt.retry_after)).encode()))
                message["headers"] = list(message.get("headers", [])) + extra
            await send(message)

        return wrapped
