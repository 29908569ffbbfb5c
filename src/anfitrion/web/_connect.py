"""The inbox's "connect" pages: a signed-in reviewer connects their own account at an upstream
MCP server that asks for one (``auth`` on its entry), so the gateway can call it for them.

- ``GET /connect`` lists those servers and whether the person has connected each;
- ``POST /connect/{server}`` (a form with the CSRF token) starts the authorization-code flow
  with PKCE and sends the browser on to the authorization server (a page that goes there by
  itself: a redirect after a form would break the pages' CSP ``form-action``), with a one-time
  cookie binding
  the flow to this browser (``SameSite=Lax``, only sent back to ``/connect/callback``);
- ``GET /connect/callback`` is where the authorization server sends the browser back: the
  flow is found by its ``state`` and finished only in the browser and the inbox session that
  started it, once; the browser then goes on to ``/connect`` (a same-site step: the
  ``SameSite=Strict`` session cookie is not sent on a redirect chain the authorization
  server's site began) and nowhere else.

Only a reviewer who signed in with their own token may connect an account (it is stored for
that reviewer's name, which must be the gateway principal — the token's ``principalClaim``);
a name typed beside the shared token could be anyone's.

The flows themselves run in :class:`anfitrion.mcp.AccountConnector` (given to
:func:`~anfitrion.web.create_app` as ``accounts``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from . import _pages as pages
from ._security import SignedIn
from ._signin import SignIn, back_home, to_login, to_provider

__all__ = ["CONNECT_COOKIE", "Accounts", "ConnectPages"]

CONNECT_COOKIE = "anfitrion_connect"
COOKIE_SECONDS = 600


class Accounts(Protocol):
    """What the connect pages need (:class:`anfitrion.mcp.AccountConnector`)."""

    async def status(self, principal: str) -> Mapping[str, Mapping[str, Any] | None]: ...

    async def start(self, server: str, principal: str, session_id: str) -> tuple[str, str]: ...

    async def finish(self, query: Mapping[str, str], nonce: str | None,
                     session_alive: Callable[[str], bool]) -> tuple[str, str]: ...


@dataclass
class ConnectPages:
    """The connect routes over *accounts*, for the people *sign_in* lets in."""

    accounts: Accounts
    sign_in: SignIn

    def routes(self) -> list[Route]:
        return [Route("/connect", self.index, methods=["GET"]),
                Route("/connect/callback", self.callback, methods=["GET"]),
                Route("/connect/{server}", self.start, methods=["POST"])]

    def _principal(self, who: SignedIn) -> str | None:
        reviewer = self.sign_in.reviewer(who)
        return reviewer.name if reviewer is not None else None

    async def _page(self, who: SignedIn, problem: str = "", status: int = 200) -> Response:
        principal = self._principal(who)
        servers: list[tuple[str, Any]] = []
        if principal is None:
            problem = problem or ("Sign in with your own reviewer token to connect an account: "
                                  "the shared token does not say who you are.")
        else:
            servers = sorted((await self.accounts.status(principal)).items())
        return HTMLResponse(pages.connect_page(servers, csrf=who.csrf, user=who.name,
                                               problem=problem), status_code=status)

    async def index(self, request: Request) -> Response:
        who = self.sign_in.signed_in(request)
        if who is None:
            return to_login()
        return await self._page(who)

    async def start(self, request: Request) -> Response:
        checked = await self.sign_in.checked_post(request)
        if isinstance(checked, Response):
            return checked
        who, _ = checked  # any other field (a "next" address…) is ignored
        principal = self._principal(who)
        if principal is None:
            return await self._page(who, status=403)
        from ..mcp import CredentialError

        try:
            url, nonce = await self.accounts.start(request.path_params["server"], principal,
                                                   who.session_id)
        except CredentialError as exc:
            return await self._page(who, str(exc), getattr(exc, "status", 400))
        response = to_provider(url)  # not a redirect: the page's form-action is 'self'
        response.set_cookie(CONNECT_COOKIE, nonce, max_age=COOKIE_SECONDS, httponly=True,
                            samesite="lax", path="/connect/callback",
                            secure=self.sign_in.secure or request.url.scheme == "https")
        return response

    async def callback(self, request: Request) -> Response:
        from ..mcp import CredentialError

        query = {k: v for k, v in request.query_params.items() if len(v) <= 4096}
        nonce = request.cookies.get(CONNECT_COOKIE)
        ended = True
        try:
            await self.accounts.finish(
                query, nonce, lambda session: self.sign_in.book.find(session) is not None)
        except CredentialError as exc:
            response: Response = HTMLResponse(pages.connect_failed(str(exc)),
                                              status_code=getattr(exc, "status", 400))
            ended = not getattr(exc, "foreign", False)  # another flow's: this one's stays
        else:
            response = back_home("/connect", "Connected")  # same-site: the cookie is sent
        response.headers["referrer-policy"] = "no-referrer"  # the code stays out of Referer
        response.headers["cache-control"] = "no-store"
        if nonce is not None and ended:
            response.delete_cookie(CONNECT_COOKIE, path="/connect/callback", httponly=True,
                                   samesite="lax")
        return response
