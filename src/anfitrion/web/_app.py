"""The approval inbox as a Starlette application: pages for people, a JSON API for programs.

Example:
    >>> from anfitrion.store import MemoryStore
    >>> from anfitrion.web import create_app
    >>> app = create_app(MemoryStore(), token="a-long-random-token")

Serve it with uvicorn (``anfitrion serve`` does) on a loopback address. The app reads and answers
approval requests in the store; it never runs a tool. A host resumes the session afterwards —
in the same process through *on_answer*, or elsewhere with ``anfitrion resume``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .._answers import OnAnswer
from .._approvals import make_visible
from .._throttle import OnThrottled
from ..channels import CallbackVerifier, Reviewers
from ..exceptions import AnfitrionError, UserError
from ..store import AuditStore, Store
from ._api import api_routes, error
from ._approval_pages import ApprovalPages
from ._connect import Accounts, ConnectPages
from ._effects import EffectPages
from ._security import GuardMiddleware, SessionBook
from ._signin import SignIn

if TYPE_CHECKING:
    from ._oidc import OidcSignIn

__all__ = ["DEFAULT_ALLOWED_HOSTS", "MIN_TOKEN_CHARS", "THROTTLED_AUDIT", "create_app"]

log = logging.getLogger("anfitrion.web")

DEFAULT_ALLOWED_HOSTS = ("127.0.0.1", "localhost", "[::1]")
MIN_TOKEN_CHARS = 16
_STATIC = {name: resources.files(__package__).joinpath("static", name).read_bytes()
           for name in ("inbox.css", "inbox.js", "favicon.svg")}
_TYPES = {"inbox.css": "text/css; charset=utf-8", "inbox.js": "text/javascript; charset=utf-8",
          "favicon.svg": "image/svg+xml"}


def create_app(store: Store, *, token: str,
               allowed_hosts: Iterable[str] = DEFAULT_ALLOWED_HOSTS,
               files_root: str | Path | None = None, on_answer: OnAnswer | None = None,
               session_lifetime: float = 12 * 3600,
               public_origin: str | None = None, reviewers: Reviewers | None = None,
               callback_secrets: Sequence[str] = (),
               accounts: Accounts | None = None,
               oidc: OidcSignIn | None = None) -> Starlette:
    """Build the inbox for *store*.

    Args:
        store: where the hosts keep their approval requests (the same store).
        token: the secret for signing in and for ``Authorization: Bearer`` on the API.
        allowed_hosts: host names the ``Host`` header may carry (DNS-rebinding defence).
        files_root: the folder a files tool writes under; enables diffs for file writes.
        on_answer: awaited after each recorded decision, e.g. to resume the session.
        session_lifetime: seconds a browser stays signed in.
        public_origin: the origin browsers use when a TLS proxy fronts the inbox
            (``https://inbox.example``); accepted in ``Origin`` and makes cookies ``Secure``.
        reviewers: people with their own tokens and roles (sign-in and API); only they vote
            on requests that need several approvers (docs/approvals.md).
        callback_secrets: enable signed webhook callbacks (``/api/v1/approvals/callback``).
        accounts: enable the connect pages (``/connect``): reviewers connect their own
            accounts at upstream MCP servers (:class:`anfitrion.mcp.AccountConnector`, whose
            flows run during the app's lifespan).
        oidc: sign reviewers in with OpenID Connect (:class:`anfitrion.web._oidc.OidcSignIn`,
            ``inbox.auth``; needs the mcp extra): the shared token then opens the API only.
            Its sign-ins and refusals are audited in *store*.

    Raises:
        UserError: the token is shorter than 16 characters.
    """
    if len(token) < MIN_TOKEN_CHARS:
        raise UserError(f"the inbox token must have at least {MIN_TOKEN_CHARS} characters")
    secure = bool(public_origin and public_origin.lower().startswith("https://"))
    sessions = SessionBook(session_lifetime)
    if oidc is not None and oidc.on_event is None:
        oidc.on_event = _audit_event(store, "inbox-sign-in")
    sign_in = SignIn(token, reviewers, sessions, secure=secure, oidc=oidc)
    approval_pages = ApprovalPages(store, sign_in,
                                   Path(files_root) if files_root is not None else None,
                                   on_answer)
    callbacks = CallbackVerifier(callback_secrets, store) if callback_secrets else None
    routes: Sequence[Route] = [
        *approval_pages.routes(),
        *sign_in.routes(),
        Route("/static/{name}", static, methods=["GET"]),
        *EffectPages(store, sign_in).routes(),
        *api_routes(store, token, on_answer, reviewers=reviewers, callbacks=callbacks,
                    sessions=sessions),
        *(ConnectPages(accounts, sign_in).routes() if accounts is not None else []),
    ]
    return Starlette(routes=list(routes), lifespan=_lifespan(accounts),
                     middleware=[Middleware(GuardMiddleware, allowed_hosts=allowed_hosts,
                                            public_origin=public_origin,
                                            on_throttled=_audit_throttled(store))],
                     exception_handlers={404: not_found, 405: not_found})


def _lifespan(accounts: Accounts | None) -> Any:
    """The connect flows' task group for the app's life (when it has *accounts*)."""
    running = getattr(accounts, "running", None)
    if running is None:
        return None

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with running():
            yield

    return lifespan


THROTTLED_AUDIT = "inbox.auth_throttled"


def _audit_throttled(store: AuditStore) -> OnThrottled:
    """An audit record for each client that starts being throttled (once per episode)."""
    async def audit(data: Mapping[str, Any]) -> None:
        try:
            await store.append_audit(THROTTLED_AUDIT, "inbox-auth", time.time(), data)
        except AnfitrionError as exc:
            log.warning("a throttled client could not be audited: %s", exc)
    return audit


def _audit_event(store: AuditStore, session: str) -> Any:
    async def audit(kind: str, data: Mapping[str, Any]) -> None:
        try:
            await store.append_audit(kind, session, time.time(), dict(data))
        except AnfitrionError as exc:
            log.warning("a sign-in could not be audited: %s", exc)
    return audit


async def static(request: Request) -> Response:
    """``GET /static/{name}``: the stylesheet, the script and the icon, from the package."""
    name = request.path_params["name"]
    if name not in _STATIC:
        return Response("not found", status_code=404)
    return Response(_STATIC[name], media_type=_TYPES[name],
                    headers={"cache-control": "no-cache"})


async def not_found(request: Request, exc: Exception) -> Response:
    """404 and 405: JSON under ``/api/``, plain text (hidden characters shown) elsewhere."""
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    headers = dict(exc.headers or {}) if isinstance(exc, HTTPException) else {}
    if request.url.path.startswith("/api/"):
        response: Response = error(status, "no such endpoint or method", "not_found"
                                   if status == 404 else "method_not_allowed")
        response.headers.update(headers)
        return response
    return Response(make_visible(str(getattr(exc, "detail", "error"))),
                    status_code=status, media_type="text/plain", headers=headers)
