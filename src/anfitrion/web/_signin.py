"""Signing in to the inbox: the sign-in form, the token check, the session cookie, signing out.

:class:`SignIn` holds what the three routes share — the token, the reviewers, the sessions in
memory and who each session is — and also checks every page request (:meth:`SignIn.signed_in`)
and every form POST (:meth:`SignIn.checked_post`: a session and its CSRF token) for the other
pages. The defences themselves are in :mod:`anfitrion.web._security`.

With OpenID Connect (``inbox.auth``, :mod:`anfitrion.web._oidc`) people sign in at the
provider: ``POST /login/oidc`` and ``GET /login/callback``. The shared token then no longer
opens the pages (a name typed beside it could be anyone's); a reviewer's own token still does.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from .._approvals import Reviewer
from ..channels import Reviewers
from . import _pages as pages
from ._security import SESSION_COOKIE, SessionBook, SignedIn, token_matches

if TYPE_CHECKING:
    from ._oidc import OidcSignIn

__all__ = ["SIGN_IN_COOKIE", "SignIn", "back_home", "to_login", "to_provider"]

SIGN_IN_COOKIE = "anfitrion_sign_in"
"""The one-time cookie binding an OpenID Connect sign-in to the browser that started it."""
_NO_LEAK = {"referrer-policy": "no-referrer", "cache-control": "no-store"}


def back_home(path: str, text: str) -> Response:
    """The answer to an authorization server's redirect back: a page going on to this inbox's
    *path* by itself — a same-site step, so that the browser sends the ``SameSite=Strict``
    session cookie there (on a redirect chain that began on the server's site it would not).
    *path* and *text* are the inbox's own."""
    return HTMLResponse(
        f'<!doctype html><meta charset="utf-8"><meta http-equiv="refresh" content="0;url={path}">'
        f'<title>{text}</title><p><a href="{path}">{text}: continue</a></p>', headers=_NO_LEAK)


def to_login() -> Response:
    return RedirectResponse("/login", status_code=303)


def to_provider(url: str) -> Response:
    """The answer to a form that starts a flow at an authorization server: a page that goes
    on to *url* by itself (a refresh, and a link).

    Not a redirect: a browser applies the form's page's CSP ``form-action 'self'`` to the
    redirects that follow a form POST too, and blocks one to another origin. *url* (built
    from the server's metadata) must be http(s); it is escaped into the page.
    """
    if urlsplit(url).scheme not in ("https", "http"):
        return HTMLResponse("the authorization server's address is not http(s)",
                            status_code=502, headers=_NO_LEAK)
    shown = html.escape(url, quote=True)
    return HTMLResponse(
        f'<!doctype html><meta charset="utf-8"><meta http-equiv="refresh" content="0;url={shown}">'
        f'<title>Signing in</title><p><a href="{shown}">Continue at the sign-in page</a></p>',
        headers=_NO_LEAK)


@dataclass
class SignIn:
    """Who is signed in, and the routes that sign people in and out.

    Attributes:
        token: the inbox's shared token.
        reviewers: people with their own tokens; signing in with one names that reviewer.
        book: the browser sessions.
        secure: whether the cookie is ``Secure`` even on a plain-HTTP request (a TLS proxy).
        identified: sign-in session id -> the reviewer who signed in with their own token
            or at the OpenID Provider.
        oidc: sign people in with OpenID Connect (the shared token no longer opens the pages).
    """

    token: str
    reviewers: Reviewers | None
    book: SessionBook
    secure: bool = False
    identified: dict[str, Reviewer] = field(default_factory=dict)
    oidc: OidcSignIn | None = None

    def routes(self) -> list[Route]:
        routes = [Route("/login", self.login_form, methods=["GET"]),
                  Route("/login", self.login, methods=["POST"]),
                  Route("/logout", self.logout, methods=["POST"])]
        if self.oidc is not None:
            routes += [Route("/login/oidc", self.oidc_start, methods=["POST"]),
                       Route("/login/callback", self.oidc_callback, methods=["GET"])]
        return routes

    def _login_page(self, problem: str = "", *, auto_sign_in: bool = False) -> str:
        return pages.login_page(problem, auto_sign_in=auto_sign_in and self.oidc is None,
                                provider=self._provider_name())

    def _provider_name(self) -> str | None:
        if self.oidc is None:
            return None
        return urlsplit(self.oidc.settings.issuer).hostname or self.oidc.settings.issuer

    def _open(self, request: Request, name: str, reviewer: Reviewer | None,
              response: Response) -> None:
        who = self.book.open(name)
        for ended in [s for s in self.identified if self.book.find(s) is None]:
            del self.identified[ended]  # expired sessions: their reviewers go too
        if reviewer is not None:
            self.identified[who.session_id] = reviewer
        response.set_cookie(SESSION_COOKIE, who.session_id, httponly=True, samesite="strict",
                            secure=self.secure or request.url.scheme == "https", path="/",
                            max_age=int(self.book.lifetime))

    def signed_in(self, request: Request) -> SignedIn | None:
        return self.book.find(request.cookies.get(SESSION_COOKIE))

    def reviewer(self, who: SignedIn) -> Reviewer | None:
        """The reviewer *who* signed in as with their own token, if they did."""
        return self.identified.get(who.session_id)

    async def checked_post(self, request: Request) -> tuple[SignedIn, dict[str, str]] | Response:
        """The signed-in person and the form, or the response refusing the POST."""
        who = self.signed_in(request)
        if who is None:
            return HTMLResponse(pages.login_page("Sign in first."), status_code=401)
        form = await request.form(max_files=0, max_fields=20)
        fields = {k: v for k, v in form.items() if isinstance(v, str)}
        if not token_matches(fields.get("csrf", ""), who.csrf):
            return HTMLResponse(pages.message_page(
                "Refused", "The form's CSRF token is missing or wrong: reload the page.",
                csrf=who.csrf, user=who.name), status_code=403)
        return who, fields

    async def login_form(self, request: Request) -> Response:
        # The sign-in link may submit the form by itself only when the person opened it (from
        # a terminal or the address bar: Sec-Fetch-Site "none"), never when another site sent
        # the browser here: wrong tokens from such links would lock sign-in (the throttle).
        opened_by_person = request.headers.get("sec-fetch-site") in ("none", "same-origin")
        return HTMLResponse(self._login_page(auto_sign_in=opened_by_person))

    async def login(self, request: Request) -> Response:
        book = self.book
        if book.throttled():
            return HTMLResponse(self._login_page("Too many wrong tokens: wait a minute."),
                                status_code=429, headers={"retry-after": "60"})
        form = await request.form(max_files=0, max_fields=5)
        given, name = form.get("token"), form.get("name")
        reviewer = (self.reviewers.by_token(given)
                    if self.reviewers and isinstance(given, str) else None)
        if reviewer is None and (not isinstance(given, str)
                                 or not token_matches(given, self.token)):
            book.failed()
            return HTMLResponse(self._login_page("Wrong token."), status_code=401)
        if reviewer is None and self.oidc is not None:
            # the right shared token, but it names no one: people sign in at the provider
            return HTMLResponse(self._login_page(
                "This inbox signs people in at their identity provider: the shared token is "
                "for programs (the API)."), status_code=403)
        name = name.strip()[:80] if isinstance(name, str) and name.strip() else "web"
        # to a clean address, sending no Referer on the way
        response = RedirectResponse("/", status_code=303,
                                    headers={"referrer-policy": "no-referrer"})
        self._open(request, reviewer.name if reviewer is not None else name, reviewer,
                   response)
        return response

    async def oidc_start(self, request: Request) -> Response:
        """``POST /login/oidc``: to the provider, with the cookie binding the flow to this
        browser. The guard has checked the ``Origin`` (a form POST from this inbox only);
        the form's fields are ignored: nothing steers where the browser goes."""
        assert self.oidc is not None
        from ._oidc import SignInRefused

        try:
            url, browser = await self.oidc.start()
        except SignInRefused as exc:
            return HTMLResponse(self._login_page(f"The identity provider cannot be reached: "
                                                 f"{exc.reason}"), status_code=503)
        response = to_provider(url)
        response.set_cookie(SIGN_IN_COOKIE, browser, max_age=600, httponly=True,
                            samesite="lax", path="/login/callback",
                            secure=self.secure or request.url.scheme == "https")
        return response

    async def oidc_callback(self, request: Request) -> Response:
        """``GET /login/callback``: the provider's redirect; a session only for a checked ID
        token, in the browser that started the flow; then to ``/``."""
        assert self.oidc is not None
        from ._oidc import SignInRefused

        query = {k: v for k, v in request.query_params.items() if len(v) <= 4096}
        browser = request.cookies.get(SIGN_IN_COOKIE)
        ended = True
        try:
            reviewer = await self.oidc.finish(query, browser)
        except SignInRefused as exc:
            response: Response = HTMLResponse(self._login_page(f"Not signed in: {exc.reason}."),
                                              status_code=exc.status)
            ended = not exc.foreign  # another browser's flow: this browser's own stays
        else:
            response = back_home("/", "Signed in")
            self._open(request, reviewer.name, reviewer, response)
        response.headers.update(_NO_LEAK)  # the code stays out of any Referer and cache
        if browser is not None and ended:
            response.delete_cookie(SIGN_IN_COOKIE, path="/login/callback", httponly=True,
                                   samesite="lax")
        return response

    async def logout(self, request: Request) -> Response:
        checked = await self.checked_post(request)
        if isinstance(checked, Response):
            return checked
        self.book.close(checked[0].session_id)
        self.identified.pop(checked[0].session_id, None)
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
        return response
