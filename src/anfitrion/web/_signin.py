"""Signing in to the inbox: the sign-in form, the token check, the session cookie, signing out.

:class:`SignIn` holds what the three routes share — the token, the reviewers, the sessions in
memory and who each session is — and also checks every page request (:meth:`SignIn.signed_in`)
and every form POST (:meth:`SignIn.checked_post`: a session and its CSRF token) for the other
pages. The defences themselves are in :mod:`anfitrion.web._security`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from .._approvals import Reviewer
from ..channels import Reviewers
from . import _pages as pages
from ._security import SESSION_COOKIE, SessionBook, SignedIn, token_matches

__all__ = ["SignIn", "to_login"]


def to_login() -> Response:
    return RedirectResponse("/login", status_code=303)


@dataclass
class SignIn:
    """Who is signed in, and the routes that sign people in and out.

    Attributes:
        token: the inbox's shared token.
        reviewers: people with their own tokens; signing in with one names that reviewer.
        book: the browser sessions.
        secure: whether the cookie is ``Secure`` even on a plain-HTTP request (a TLS proxy).
        identified: sign-in session id -> the reviewer who signed in with their own token.
    """

    token: str
    reviewers: Reviewers | None
    book: SessionBook
    secure: bool = False
    identified: dict[str, Reviewer] = field(default_factory=dict)

    def routes(self) -> list[Route]:
        return [Route("/login", self.login_form, methods=["GET"]),
                Route("/login", self.login, methods=["POST"]),
                Route("/logout", self.logout, methods=["POST"])]

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
        return HTMLResponse(pages.login_page(auto_sign_in=opened_by_person))

    async def login(self, request: Request) -> Response:
        book = self.book
        if book.throttled():
            return HTMLResponse(pages.login_page("Too many wrong tokens: wait a minute."),
                                status_code=429, headers={"retry-after": "60"})
        form = await request.form(max_files=0, max_fields=5)
        given, name = form.get("token"), form.get("name")
        reviewer = (self.reviewers.by_token(given)
                    if self.reviewers and isinstance(given, str) else None)
        if reviewer is None and (not isinstance(given, str)
                                 or not token_matches(given, self.token)):
            book.failed()
            return HTMLResponse(pages.login_page("Wrong token."), status_code=401)
        name = name.strip()[:80] if isinstance(name, str) and name.strip() else "web"
        who = book.open(reviewer.name if reviewer is not None else name)
        if reviewer is not None:
            self.identified[who.session_id] = reviewer
        # to a clean address, sending no Referer on the way
        response = RedirectResponse("/", status_code=303,
                                    headers={"referrer-policy": "no-referrer"})
        response.set_cookie(SESSION_COOKIE, who.session_id, httponly=True, samesite="strict",
                            secure=self.secure or request.url.scheme == "https", path="/",
                            max_age=int(book.lifetime))
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
