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
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path

from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from ..approvals import ApprovalAnswer, ApprovalRequest, ApprovalVote, Reviewer, make_visible
from ..channels.reviewers import Reviewers
from ..channels.webhooks import CallbackVerifier
from ..exceptions import StoreError, UserError
from ..session import untrusted_sources_of
from ..store import Store
from . import _pages as pages
from ._api import api_routes, error
from ._decisions import (
    OnAnswer,
    Refusal,
    answer,
    edit_for,
    notify,
    parse_edited_arguments,
    propose_edit,
)
from ._effects import effect_routes
from ._live import PendingEvents
from ._render import (
    Intent,
    Notice,
    email_preview,
    file_diff,
    finding_parts,
    intent_of,
    notices,
)
from ._security import SESSION_COOKIE, GuardMiddleware, SessionBook, SignedIn, token_matches

log = logging.getLogger("anfitrion.web")

__all__ = ["DEFAULT_ALLOWED_HOSTS", "MIN_TOKEN_CHARS", "create_app"]

DEFAULT_ALLOWED_HOSTS = ("127.0.0.1", "localhost", "[::1]")
MIN_TOKEN_CHARS = 16
_STATIC = {name: resources.files(__package__).joinpath("static", name).read_bytes()
           for name in ("inbox.css", "inbox.js", "favicon.svg")}
_TYPES = {"inbox.css": "text/css; charset=utf-8", "inbox.js": "text/javascript; charset=utf-8",
          "favicon.svg": "image/svg+xml"}
_REFUSAL_STATUS = {Refusal.NOT_FOUND: 404, Refusal.STALE: 409, Refusal.ANSWERED: 409,
                   Refusal.EXPIRED: 409, Refusal.INVALID: 422, Refusal.ALREADY_VOTED: 409,
                   Refusal.UNQUALIFIED: 403, Refusal.UNIDENTIFIED: 403,
                   Refusal.SELF_APPROVAL: 403}


def create_app(store: Store, *, token: str,
               allowed_hosts: Iterable[str] = DEFAULT_ALLOWED_HOSTS,
               files_root: str | Path | None = None, on_answer: OnAnswer | None = None,
               session_lifetime: float = 12 * 3600,
               public_origin: str | None = None, reviewers: Reviewers | None = None,
               callback_secrets: Sequence[str] = ()) -> Starlette:
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

    Raises:
        UserError: the token is shorter than 16 characters.
    """
    if len(token) < MIN_TOKEN_CHARS:
        raise UserError(f"the inbox token must have at least {MIN_TOKEN_CHARS} characters")
    root = Path(files_root) if files_root is not None else None
    secure = bool(public_origin and public_origin.lower().startswith("https://"))
    book = SessionBook(session_lifetime)
    identified: dict[str, Reviewer] = {}  # sign-in session id -> the reviewer who signed in
    live = PendingEvents(store)

    def signed_in(request: Request) -> SignedIn | None:
        return book.find(request.cookies.get(SESSION_COOKIE))

    def to_login() -> Response:
        return RedirectResponse("/login", status_code=303)

    async def checked_post(request: Request) -> tuple[SignedIn, dict[str, str]] | Response:
        """The signed-in person and the form, or the response refusing the POST."""
        who = signed_in(request)
        if who is None:
            return HTMLResponse(pages.login_page("Sign in first."), status_code=401)
        form = await request.form(max_files=0, max_fields=20)
        fields = {k: v for k, v in form.items() if isinstance(v, str)}
        if not token_matches(fields.get("csrf", ""), who.csrf):
            return HTMLResponse(pages.message_page(
                "Refused", "The form's CSRF token is missing or wrong: reload the page.",
                csrf=who.csrf, user=who.name), status_code=403)
        return who, fields

    async def context_for(request: ApprovalRequest) -> tuple[list[Notice], Intent]:
        """The request's warnings, each said once, and what the principal asked for."""
        try:
            state = await store.load_session(request.session_id)
            untrusted = untrusted_sources_of(state) if state is not None else None
        except StoreError as exc:  # a corrupt session row: the request is still shown
            log.warning("%s", exc)
            state, untrusted = None, None
        found = notices(request.warnings, finding_parts(request.arguments), untrusted)
        intent = intent_of(state.messages, request.call_id) if state is not None else Intent()
        return found, intent

    async def rows() -> list[pages.Row]:
        now = datetime.now(UTC)
        pending = [r for r in await store.list_approvals(pending_only=True) if not r.expired(now)]
        return [pages.Row(r, *await context_for(r), votes=await votes_of(r)) for r in pending]

    async def votes_of(r: ApprovalRequest) -> tuple[ApprovalVote, ...]:
        return tuple(await store.list_approval_votes(r.id)) if r.quorum is not None else ()

    # -- sign-in ---------------------------------------------------------------------------

    async def login_form(request: Request) -> Response:
        # The sign-in link may submit the form by itself only when the person opened it (from
        # a terminal or the address bar: Sec-Fetch-Site "none"), never when another site sent
        # the browser here: wrong tokens from such links would lock sign-in (the throttle).
        opened_by_person = request.headers.get("sec-fetch-site") in ("none", "same-origin")
        return HTMLResponse(pages.login_page(auto_sign_in=opened_by_person))

    async def login(request: Request) -> Response:
        if book.throttled():
            return HTMLResponse(pages.login_page("Too many wrong tokens: wait a minute."),
                                status_code=429, headers={"retry-after": "60"})
        form = await request.form(max_files=0, max_fields=5)
        given, name = form.get("token"), form.get("name")
        reviewer = reviewers.by_token(given) if reviewers and isinstance(given, str) else None
        if reviewer is None and (not isinstance(given, str) or not token_matches(given, token)):
            book.failed()
            return HTMLResponse(pages.login_page("Wrong token."), status_code=401)
        name = name.strip()[:80] if isinstance(name, str) and name.strip() else "web"
        who = book.open(reviewer.name if reviewer is not None else name)
        if reviewer is not None:
            identified[who.session_id] = reviewer
        # to a clean address, sending no Referer on the way
        response = RedirectResponse("/", status_code=303,
                                    headers={"referrer-policy": "no-referrer"})
        response.set_cookie(SESSION_COOKIE, who.session_id, httponly=True, samesite="strict",
                            secure=secure or request.url.scheme == "https", path="/",
                            max_age=int(session_lifetime))
        return response

    async def logout(request: Request) -> Response:
        checked = await checked_post(request)
        if isinstance(checked, Response):
            return checked
        book.close(checked[0].session_id)
        identified.pop(checked[0].session_id, None)
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
        return response

    # -- pages ------------------------------------------------------------------------------

    async def pending_page(request: Request) -> Response:
        who = signed_in(request)
        if who is None:
            return to_login()
        return HTMLResponse(pages.pending_page(await rows(), datetime.now(UTC), csrf=who.csrf,
                                               user=who.name))

    async def events(request: Request) -> Response:
        cookie = request.cookies.get(SESSION_COOKIE)
        if book.find(cookie) is None:
            return Response("sign in", status_code=401)
        if live.full():
            return Response("too many live pages", status_code=503,
                            headers={"retry-after": "10"})
        return StreamingResponse(live.stream(lambda: book.find(cookie) is not None),
                                 media_type="text/event-stream",
                                 headers={"x-accel-buffering": "no"})

    async def pending_fragment(request: Request) -> Response:
        if signed_in(request) is None:
            return Response("sign in", status_code=401)
        return HTMLResponse(pages.pending_rows(await rows(), datetime.now(UTC)))

    async def detail(request: Request) -> Response:
        who = signed_in(request)
        if who is None:
            return to_login()
        found = await store.get_approval(request.path_params["request_id"])
        if found is None:
            return HTMLResponse(pages.message_page("Not found", Refusal.NOT_FOUND.value,
                                                   csrf=who.csrf, user=who.name),
                                status_code=404)
        req, ans, used = found.request, found.answer, found.used
        found_notices, intent = await context_for(req)
        view = pages.Detail(req, ans, used, found_notices, file_diff(req.arguments, root),
                            email_preview(req.arguments), await edit_for(store, req.id), intent,
                            votes=await votes_of(req))
        return HTMLResponse(pages.detail_page(view, datetime.now(UTC), csrf=who.csrf,
                                              user=who.name))

    def refused(who: SignedIn, request_id: str, refusal: Refusal, detail: str = "") -> Response:
        return HTMLResponse(pages.message_page("Refused", detail or refusal.value,
                                               csrf=who.csrf, user=who.name,
                                               back=f"/approvals/{request_id}"),
                            status_code=_REFUSAL_STATUS[refusal])

    def after(request_id: str, decision: ApprovalAnswer, request: ApprovalRequest) -> Response:
        task = BackgroundTask(notify, on_answer, request, decision) if on_answer else None
        return RedirectResponse(f"/approvals/{request_id}", status_code=303, background=task)

    async def with_request(request_id: str) -> ApprovalRequest | None:
        found = await store.get_approval(request_id)
        return None if found is None else found.request

    async def decide(request: Request) -> Response:
        checked = await checked_post(request)
        if isinstance(checked, Response):
            return checked
        who, form = checked
        request_id = request.path_params["request_id"]
        choice = form.get("decision")
        if choice not in ("approve", "deny"):
            return refused(who, request_id, Refusal.INVALID, "choose approve or deny")
        outcome = await answer(store, request_id, form.get("digest", ""),
                               approved=choice == "approve", approver=f"web:{who.name}",
                               note=form.get("note", "").strip(),
                               reviewer=identified.get(who.session_id))
        if not outcome.recorded:
            return refused(who, request_id, outcome.refusal or Refusal.INVALID,
                           outcome.detail and f"{(outcome.refusal or Refusal.INVALID).value}: "
                           f"{outcome.detail}")
        if outcome.answer is None:  # a vote counted; the request waits for more approvers
            return RedirectResponse(f"/approvals/{request_id}", status_code=303)
        req = await with_request(request_id)
        assert req is not None
        return after(request_id, outcome.answer, req)

    async def edit(request: Request) -> Response:
        checked = await checked_post(request)
        if isinstance(checked, Response):
            return checked
        who, form = checked
        request_id = request.path_params["request_id"]
        try:
            arguments = parse_edited_arguments(form.get("arguments", ""))
        except ValueError as exc:
            return refused(who, request_id, Refusal.INVALID, str(exc))
        outcome = await propose_edit(store, request_id, form.get("digest", ""), arguments,
                                     approver=f"web:{who.name}",
                                     note=form.get("note", "").strip())
        if outcome.answer is None:
            return refused(who, request_id, outcome.refusal or Refusal.INVALID, outcome.detail)
        req = await with_request(request_id)
        assert req is not None
        return after(request_id, outcome.answer, req)

    async def decided(limit: int = 200) -> list[tuple[ApprovalRequest,
                                                     ApprovalAnswer | None]]:
        now = datetime.now(UTC)
        out: list[tuple[ApprovalRequest, ApprovalAnswer | None]] = []
        for r in await store.list_approvals(pending_only=False):
            found = await store.get_approval(r.id)
            if found is not None and (found.answer is not None or r.expired(now)):
                out.append((r, found.answer))
            if len(out) >= limit:
                break
        return out

    async def history(request: Request) -> Response:
        who = signed_in(request)
        if who is None:
            return to_login()
        return HTMLResponse(pages.history_page(await decided(), datetime.now(UTC),
                                               csrf=who.csrf, user=who.name))

    async def sessions(request: Request) -> Response:
        who = signed_in(request)
        if who is None:
            return to_login()
        return HTMLResponse(pages.sessions_page(await store.list_sessions(), csrf=who.csrf,
                                                user=who.name))

    async def session(request: Request) -> Response:
        who = signed_in(request)
        if who is None:
            return to_login()
        session_id = request.path_params["session_id"]
        try:
            state = await store.load_session(session_id)
        except StoreError as exc:  # a corrupt session row: show its requests and records
            log.warning("%s", exc)
            state = None
        approvals: list[tuple[ApprovalRequest, ApprovalAnswer | None]] = []
        for r in await store.list_approvals(pending_only=False, session_id=session_id):
            found = await store.get_approval(r.id)
            approvals.append((r, found.answer if found else None))
        records = await store.audit_records(session_id)
        if state is None and not approvals and not records:
            return HTMLResponse(pages.message_page("Not found", "no such session",
                                                   csrf=who.csrf, user=who.name),
                                status_code=404)
        return HTMLResponse(pages.session_page(session_id, state, approvals, records,
                                               datetime.now(UTC), csrf=who.csrf,
                                               user=who.name))

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in _STATIC:
            return Response("not found", status_code=404)
        return Response(_STATIC[name], media_type=_TYPES[name],
                        headers={"cache-control": "no-cache"})

    async def not_found(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        headers = dict(exc.headers or {}) if isinstance(exc, HTTPException) else {}
        if request.url.path.startswith("/api/"):
            response: Response = error(status, "no such endpoint or method", "not_found"
                                       if status == 404 else "method_not_allowed")
            response.headers.update(headers)
            return response
        return Response(make_visible(str(getattr(exc, "detail", "error"))),
                        status_code=status, media_type="text/plain", headers=headers)

    routes: Sequence[Route] = [
        Route("/", pending_page, methods=["GET"]),
        Route("/pending.html", pending_fragment, methods=["GET"]),
        Route("/events", events, methods=["GET"]),
        Route("/login", login_form, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/approvals/{request_id}", detail, methods=["GET"]),
        Route("/approvals/{request_id}/decide", decide, methods=["POST"]),
        Route("/approvals/{request_id}/edit", edit, methods=["POST"]),
        Route("/history", history, methods=["GET"]),
        Route("/sessions", sessions, methods=["GET"]),
        Route("/sessions/{session_id}", session, methods=["GET"]),
        Route("/static/{name}", static, methods=["GET"]),
        *effect_routes(store, signed_in=signed_in, checked_post=checked_post,
                       to_login=to_login),
        *api_routes(store, token, on_answer, reviewers=reviewers,
                    callbacks=CallbackVerifier(callback_secrets, store)
                    if callback_secrets else None),
    ]
    return Starlette(routes=list(routes),
                     middleware=[Middleware(GuardMiddleware, allowed_hosts=allowed_hosts,
                                            public_origin=public_origin)],
                     exception_handlers={404: not_found, 405: not_found})
