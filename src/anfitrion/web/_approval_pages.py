"""The inbox's approval pages: the pending list (live), one request, its answer, history, sessions.

:class:`ApprovalPages` holds what the routes share — the store, the sign-in checks, the folder
file diffs are read from and the callback awaited after each recorded decision — and each route
is one of its methods. Every page needs a signed-in person; every POST also the form's CSRF
token (:class:`~anfitrion.web._signin.SignIn`). Answers go through
:mod:`anfitrion._answers`, the one answer path the API and the CLI take too.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from .._answers import (
    OnAnswer,
    Refusal,
    answer,
    edit_for,
    notify,
    parse_edited_arguments,
    propose_edit,
)
from .._approvals import ApprovalAnswer, ApprovalRequest, ApprovalVote
from .._session import untrusted_sources_of
from ..exceptions import StoreError
from ..store import Store
from . import _pages as pages
from ._live import PendingEvents
from ._render import (
    Intent,
    Notice,
    email_preview,
    file_diff,
    finding_parts,
    intent_of,
    notices,
    with_sources,
)
from ._security import SESSION_COOKIE, SignedIn
from ._signin import SignIn, to_login

log = logging.getLogger("anfitrion.web")

__all__ = ["ApprovalPages"]

_REFUSAL_STATUS = {Refusal.NOT_FOUND: 404, Refusal.STALE: 409, Refusal.ANSWERED: 409,
                   Refusal.EXPIRED: 409, Refusal.INVALID: 422, Refusal.ALREADY_VOTED: 409,
                   Refusal.UNQUALIFIED: 403, Refusal.UNIDENTIFIED: 403,
                   Refusal.SELF_APPROVAL: 403, Refusal.NOT_ENTITLED: 403}

Decided = list[tuple[ApprovalRequest, ApprovalAnswer | None]]


@dataclass
class ApprovalPages:
    """The approval pages over *store*, for the people *sign_in* lets in.

    Attributes:
        store: where the hosts keep their approval requests.
        sign_in: who is signed in, and the CSRF check of a form POST.
        files_root: the folder a files tool writes under; enables diffs for file writes.
        on_answer: awaited after each recorded decision, e.g. to resume the session.
        live: the pending list's change events (``/events``).
    """

    store: Store
    sign_in: SignIn
    files_root: Path | None = None
    on_answer: OnAnswer | None = None
    live: PendingEvents = field(init=False)

    def __post_init__(self) -> None:
        self.live = PendingEvents(self.store)

    def routes(self) -> list[Route]:
        return [
            Route("/", self.pending_page, methods=["GET"]),
            Route("/pending.html", self.pending_fragment, methods=["GET"]),
            Route("/events", self.events, methods=["GET"]),
            Route("/approvals/{request_id}", self.detail, methods=["GET"]),
            Route("/approvals/{request_id}/decide", self.decide, methods=["POST"]),
            Route("/approvals/{request_id}/edit", self.edit, methods=["POST"]),
            Route("/history", self.history, methods=["GET"]),
            Route("/sessions", self.sessions, methods=["GET"]),
            Route("/sessions/{session_id}", self.session, methods=["GET"]),
        ]

    # -- what the pages show ---------------------------------------------------------------

    async def context_for(self, request: ApprovalRequest, *, sources: bool = False
                          ) -> tuple[list[Notice], Intent]:
        """The request's warnings, each said once, and what the principal asked for; with
        *sources* (the request's own page, not the list), the untrusted text each flagged
        value came from."""
        try:
            state = await self.store.load_session(request.session_id)
            untrusted = untrusted_sources_of(state) if state is not None else None
        except StoreError as exc:  # a corrupt session row: the request is still shown
            log.warning("%s", exc)
            state, untrusted = None, None
        found = notices(request.warnings, finding_parts(request.arguments), untrusted)
        if state is None:
            return found, Intent()
        if sources:
            found = with_sources(found, state.messages)
        return found, intent_of(state.messages, request.call_id)

    async def votes_of(self, r: ApprovalRequest) -> tuple[ApprovalVote, ...]:
        return tuple(await self.store.list_approval_votes(r.id)) if r.quorum is not None else ()

    async def rows(self) -> list[pages.Row]:
        now = datetime.now(UTC)
        pending = [r for r in await self.store.list_approvals(pending_only=True)
                   if not r.expired(now)]
        return [pages.Row(r, *await self.context_for(r), votes=await self.votes_of(r))
                for r in pending]

    async def decided(self, limit: int = 200) -> Decided:
        now = datetime.now(UTC)
        out: Decided = []
        for r in await self.store.list_approvals(pending_only=False):
            found = await self.store.get_approval(r.id)
            if found is not None and (found.answer is not None or r.expired(now)):
                out.append((r, found.answer))
            if len(out) >= limit:
                break
        return out

    # -- pages -----------------------------------------------------------------------------

    async def pending_page(self, request: Request) -> Response:
        who = self.sign_in.signed_in(request)
        if who is None:
            return to_login()
        return HTMLResponse(pages.pending_page(await self.rows(), datetime.now(UTC),
                                               csrf=who.csrf, user=who.name))

    async def events(self, request: Request) -> Response:
        cookie = request.cookies.get(SESSION_COOKIE)
        book = self.sign_in.book
        if book.find(cookie) is None:
            return Response("sign in", status_code=401)
        if self.live.full():
            return Response("too many live pages", status_code=503,
                            headers={"retry-after": "10"})
        return StreamingResponse(self.live.stream(lambda: book.find(cookie) is not None),
                                 media_type="text/event-stream",
                                 headers={"x-accel-buffering": "no"})

    async def pending_fragment(self, request: Request) -> Response:
        if self.sign_in.signed_in(request) is None:
            return Response("sign in", status_code=401)
        return HTMLResponse(pages.pending_rows(await self.rows(), datetime.now(UTC)))

    async def detail(self, request: Request) -> Response:
        who = self.sign_in.signed_in(request)
        if who is None:
            return to_login()
        found = await self.store.get_approval(request.path_params["request_id"])
        if found is None:
            return HTMLResponse(pages.message_page("Not found", Refusal.NOT_FOUND.value,
                                                   csrf=who.csrf, user=who.name),
                                status_code=404)
        req, ans, used = found.request, found.answer, found.used
        found_notices, intent = await self.context_for(req, sources=True)
        view = pages.Detail(req, ans, used, found_notices,
                            file_diff(req.arguments, self.files_root),
                            email_preview(req.arguments) if req.preview == "email" else None,
                            await edit_for(self.store, req.id),
                            intent, votes=await self.votes_of(req))
        return HTMLResponse(pages.detail_page(view, datetime.now(UTC), csrf=who.csrf,
                                              user=who.name))

    async def history(self, request: Request) -> Response:
        who = self.sign_in.signed_in(request)
        if who is None:
            return to_login()
        return HTMLResponse(pages.history_page(await self.decided(), datetime.now(UTC),
                                               csrf=who.csrf, user=who.name))

    async def sessions(self, request: Request) -> Response:
        who = self.sign_in.signed_in(request)
        if who is None:
            return to_login()
        return HTMLResponse(pages.sessions_page(await self.store.list_sessions(),
                                                csrf=who.csrf, user=who.name))

    async def session(self, request: Request) -> Response:
        who = self.sign_in.signed_in(request)
        if who is None:
            return to_login()
        session_id = request.path_params["session_id"]
        try:
            state = await self.store.load_session(session_id)
        except StoreError as exc:  # a corrupt session row: show its requests and records
            log.warning("%s", exc)
            state = None
        approvals: Decided = []
        for r in await self.store.list_approvals(pending_only=False, session_id=session_id):
            found = await self.store.get_approval(r.id)
            approvals.append((r, found.answer if found else None))
        records = await self.store.audit_records(session_id)
        if state is None and not approvals and not records:
            return HTMLResponse(pages.message_page("Not found", "no such session",
                                                   csrf=who.csrf, user=who.name),
                                status_code=404)
        return HTMLResponse(pages.session_page(session_id, state, approvals, records,
                                               datetime.now(UTC), csrf=who.csrf,
                                               user=who.name))

    # -- answers ---------------------------------------------------------------------------

    async def decide(self, request: Request) -> Response:
        checked = await self.sign_in.checked_post(request)
        if isinstance(checked, Response):
            return checked
        who, form = checked
        request_id = request.path_params["request_id"]
        choice = form.get("decision")
        if choice not in ("approve", "deny"):
            return _refused(who, request_id, Refusal.INVALID, "choose approve or deny")
        outcome = await answer(self.store, request_id, form.get("digest", ""),
                               approved=choice == "approve", approver=f"web:{who.name}",
                               note=form.get("note", "").strip(),
                               reviewer=self.sign_in.reviewer(who))
        if not outcome.recorded:
            return _refused(who, request_id, outcome.refusal or Refusal.INVALID,
                            outcome.detail and f"{(outcome.refusal or Refusal.INVALID).value}: "
                            f"{outcome.detail}")
        if outcome.answer is None:  # a vote counted; the request waits for more approvers
            return RedirectResponse(f"/approvals/{request_id}", status_code=303)
        return await self._after(request_id, outcome.answer)

    async def edit(self, request: Request) -> Response:
        checked = await self.sign_in.checked_post(request)
        if isinstance(checked, Response):
            return checked
        who, form = checked
        request_id = request.path_params["request_id"]
        try:
            arguments = parse_edited_arguments(form.get("arguments", ""))
        except ValueError as exc:
            return _refused(who, request_id, Refusal.INVALID, str(exc))
        outcome = await propose_edit(self.store, request_id, form.get("digest", ""), arguments,
                                     approver=f"web:{who.name}",
                                     note=form.get("note", "").strip(),
                                     reviewer=self.sign_in.reviewer(who))
        if outcome.answer is None:
            return _refused(who, request_id, outcome.refusal or Refusal.INVALID, outcome.detail)
        return await self._after(request_id, outcome.answer)

    async def _after(self, request_id: str, decision: ApprovalAnswer) -> Response:
        """Back to the request's page, telling *on_answer* about the decision on the way."""
        found = await self.store.get_approval(request_id)
        assert found is not None
        task = (BackgroundTask(notify, self.on_answer, found.request, decision)
                if self.on_answer else None)
        return RedirectResponse(f"/approvals/{request_id}", status_code=303, background=task)


def _refused(who: SignedIn, request_id: str, refusal: Refusal, detail: str = "") -> Response:
    return HTMLResponse(pages.message_page("Refused", detail or refusal.value,
                                           csrf=who.csrf, user=who.name,
                                           back=f"/approvals/{request_id}"),
                        status_code=_REFUSAL_STATUS[refusal])
