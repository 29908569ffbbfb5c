"""Answering an approval request: the one way, whichever door the answer comes through.

The CLI (``anfitrion approvals approve``), the inbox page, the JSON API and any application
call :func:`answer`; it writes the same ``approval.answered`` audit record for all of them
(``via`` names the door). A decision names the request id *and* the digest the reviewer saw
(the CLI shows the request and binds to its digest). It is recorded only if the request still
has that digest, is unanswered, not withdrawn and not expired; the store's compare-and-set
(:meth:`Store.answer_approval`) makes a double submission record exactly one answer.

:func:`withdraw` is the host's side: a request whose caller went away (an MCP client session
ended) is withdrawn visibly, so nobody approves a call that can never run.

"Approve with edits" answers the request with the reviewer's arguments
(:meth:`ApprovalAnswer.edit` with ``approve=True``) — the one edit mechanism of
:mod:`anfitrion._approvals`. The request itself is never approved by an edit: when the host
resumes, the gate turns the edit into a new proposal that goes through validation and the policy
again and binds the reviewer's approval to the edited call's own digest; a policy denial or a
schema error still stops it, and the model's result says that a person edited the arguments.

**The two-person rule.** A request with a :class:`~anfitrion._approvals.Quorum` is decided by
votes (:meth:`Store.add_approval_vote`): each vote comes from a :class:`Reviewer` a door has
authenticated, holding one of the quorum's roles, bound to the digest, once per person
(whatever the door), never from the principal the call was proposed for; one qualified
rejection rejects, the required number of approvals approves, and the request's expiry
applies to all of them. Each vote is audited (``approval.voted``), and the answer the votes
decide is audited once (``approval.answered``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import anyio

from . import _entitlements as entitlements
from ._approvals import ApprovalAnswer, ApprovalRequest, ApprovalVote, Reviewer
from ._canonical import canonical_json
from ._events import EventType, HostEvent
from ._identity import identity_key, identity_problem, same_identity
from ._json import parse_json_strict
from .exceptions import InputError, JsonError
from .store import (
    AnswerStore,
    ApprovalStore,
    ApprovalWatchStore,
    AuditStore,
    StoredApproval,
    VoteState,
)

__all__ = ["Outcome", "Refusal", "RequestState", "answer", "edit_for", "find_request", "notify",
           "parse_edited_arguments", "propose_edit", "state_of", "votes_json", "votes_needed",
           "wait_for_answer", "withdraw"]
MAX_NOTE_CHARS = 2000
MAX_EDIT_BYTES = 256 * 1024

OnAnswer = Callable[[ApprovalRequest, ApprovalAnswer], Awaitable[None]]

log = logging.getLogger("anfitrion.answers")
MIN_PREFIX = 6
"""The shortest id prefix a person may type for a request."""


async def notify(on_answer: OnAnswer, request: ApprovalRequest, answer: ApprovalAnswer) -> None:
    """Run the *on_answer* hook after the response; its failure never undoes the decision."""
    try:
        await on_answer(request, answer)
    except Exception:  # BLE001 - the top of a background task: logged, the answer stays recorded
        log.exception("on_answer failed for approval request %s (session %s)", request.id,
                      request.session_id)


class RequestState(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    EXPIRED = "expired"
    EDITED = "edited"
    """Answered with other arguments: the edit is a new proposal."""
    WITHDRAWN = "withdrawn"
    """The host withdrew it (its client went away): it can no longer be approved."""


class Refusal(StrEnum):
    """Why a decision was not recorded (each maps to one HTTP status)."""

    NOT_FOUND = "no such approval request"
    STALE = "the request changed since the page was shown (digest mismatch): reload and review"
    ANSWERED = "the request was already decided"
    EXPIRED = "the request expired: the host will deny the call"
    INVALID = "invalid input"
    ALREADY_VOTED = "you have voted on this request already: another person must approve"
    UNQUALIFIED = "this request needs approvers who hold one of its roles"
    UNIDENTIFIED = ("this request needs several distinct approvers: vote with your own "
                    "credential, not a shared one")
    SELF_APPROVAL = ("the call was proposed for you: under the two-person rule other people "
                     "approve it")
    NOT_ENTITLED = "you are not entitled to answer this call (reviewer entitlements)"


def state_of(request: ApprovalRequest, answer: ApprovalAnswer | None,
             now: datetime | None = None) -> RequestState:
    if answer is not None and answer.withdrawn:
        return RequestState.WITHDRAWN
    if answer is not None and answer.edited_arguments is not None:
        return RequestState.EDITED
    if answer is not None:
        return RequestState.APPROVED if answer.approved else RequestState.DENIED
    return RequestState.EXPIRED if request.expired(now) else RequestState.PENDING


@dataclass(frozen=True, slots=True)
class Outcome:
    """What :func:`answer` did: the answer it recorded, or the vote it counted (the request
    may still wait for more), or why it refused (``refusal``).

    Attributes:
        votes: on a request that needs a quorum, every vote so far, in the order cast.
    """

    answer: ApprovalAnswer | None
    refusal: Refusal | None = None
    detail: str = ""
    request: ApprovalRequest | None = None
    vote: ApprovalVote | None = None
    votes: tuple[ApprovalVote, ...] = ()

    @property
    def recorded(self) -> bool:
        """Whether an answer or a vote was recorded."""
        return self.answer is not None or self.vote is not None


async def _audit(store: AuditStore, request: ApprovalRequest, given: ApprovalAnswer,
                 via: str, *, kind: EventType = EventType.APPROVAL_ANSWERED,
                 detail: str | None = None, reviewer: Reviewer | None = None) -> None:
    from ._audit import AuditRecorder  # the recorder's module imports the store package

    recorder = AuditRecorder(store)
    await recorder(HostEvent(kind, request.session_id, 0,
                             request.principal_id, request.call_id, request.tool_name,
                             request=request, answer=given,
                             detail=detail or f"answered via {via}",
                             reviewer=reviewer.identity() if reviewer is not None else None))
    await recorder.flush()


def votes_needed(request: ApprovalRequest, votes: tuple[ApprovalVote, ...]) -> int:
    """How many more approvals *request* needs (0 when it needs no quorum)."""
    if request.quorum is None:
        return 0
    return max(request.quorum.required - sum(v.approved for v in votes), 0)


def votes_json(request: ApprovalRequest, votes: tuple[ApprovalVote, ...]) -> dict[str, Any]:
    """Who has voted so far on a request that needs a quorum, and how many more it needs (the
    ``quorum`` object of the inbox API and of ``anfitrion approvals list --json``)."""
    return {"required": request.quorum.required if request.quorum else 1,
            "roles": list(request.quorum.roles) if request.quorum else [],
            "needed": votes_needed(request, votes),
            "votes": [{"voter": v.voter, "approved": v.approved, "via": v.via,
                       "roles": list(v.roles), "note": v.note, "at": v.at.isoformat()}
                      for v in votes]}


async def _vote(store: AnswerStore, request: ApprovalRequest, digest: str, *, approved: bool,
                reviewer: Reviewer | None, note: str, via: str,
                on_answer: OnAnswer | None, grounds: str = "") -> Outcome:
    quorum = request.quorum
    assert quorum is not None
    if reviewer is None:
        return Outcome(None, Refusal.UNIDENTIFIED, request=request)
    # names are compared as people read them (issue 35): one person, one vote
    if (problem := identity_problem(reviewer.name)) is not None:
        return Outcome(None, Refusal.INVALID, f"the reviewer name {reviewer.name!r} is "
                       f"ambiguous: {problem}", request)
    if same_identity(reviewer.name, request.principal_id):
        return Outcome(None, Refusal.SELF_APPROVAL, request=request)
    if not quorum.qualifies(reviewer.roles):
        return Outcome(None, Refusal.UNQUALIFIED, f"it needs one of: {', '.join(quorum.roles)}",
                       request)
    vote = ApprovalVote(request.id, digest, identity_key(reviewer.name), approved,
                        tuple(sorted(reviewer.roles)), note[:MAX_NOTE_CHARS], via)
    counted = await store.add_approval_vote(vote)
    if counted.state is VoteState.DUPLICATE:
        return Outcome(None, Refusal.ALREADY_VOTED, request=request, votes=counted.votes)
    if counted.state is VoteState.CLOSED:
        return Outcome(None, Refusal.ANSWERED, request=request, votes=counted.votes)
    needed = votes_needed(request, counted.votes)
    word = "approves" if approved else "rejects"
    await _audit(store, request, ApprovalAnswer(request.id, digest, approved, reviewer.name,
                                                vote.note, vote.at), via,
                 kind=EventType.APPROVAL_VOTED,
                 detail=f"{reviewer.name} {word} via {via}; "
                        f"{len(counted.votes)} vote(s), {needed} more approval(s) needed"
                        + (f"; {grounds}" if grounds else ""), reviewer=reviewer)
    if counted.answer is not None:
        await _audit(store, request, counted.answer, via, reviewer=reviewer)
        if on_answer is not None:
            await on_answer(request, counted.answer)
    return Outcome(counted.answer, request=request, vote=vote, votes=counted.votes)


async def answer(store: AnswerStore, request_id: str, seen_digest: str | None, *, approved: bool,
                 approver: str, note: str = "", on_answer: OnAnswer | None = None,
                 edited_arguments: Mapping[str, Any] | None = None,
                 via: str = "inbox", reviewer: Reviewer | None = None,
                 now: datetime | None = None) -> Outcome:
    """Record one decision bound to *seen_digest*; refuse stale, decided or expired requests.

    On a request that needs a quorum the decision is one vote (module docstring): the
    outcome's ``vote`` is set, and its ``answer`` only once the votes decided the request.

    Args:
        seen_digest: the digest the person was shown (``None``: the request's own, for a
            door that showed the request just now from the store, such as the CLI).
        via: the door (``cli``, ``inbox``, ``api``, ``webhook``, ``mcp``, …), kept in the
            audit record.
        reviewer: the person the door authenticated, with their roles; required to vote on
            a request that needs a quorum.
        now: the time expiry is judged at (default: the clock's).
    """
    found = await store.get_approval(request_id)
    if found is None:
        return Outcome(None, Refusal.NOT_FOUND)
    request, existing = found.request, found.answer
    if existing is not None:
        return Outcome(None, Refusal.ANSWERED, existing.note if existing.withdrawn else "",
                       request)
    digest = request.digest if seen_digest is None else seen_digest
    if digest != request.digest:
        return Outcome(None, Refusal.STALE, request=request)
    if request.expired(now):
        return Outcome(None, Refusal.EXPIRED, request=request)
    who = reviewer.name if reviewer is not None else approver
    entitled, grounds = await entitlements.check(store, request, who)
    if entitled and edited_arguments is not None:  # the call as it will run, too
        entitled, edited_grounds = await entitlements.check(
            store, replace(request, arguments=dict(edited_arguments)), who)
        if not entitled:
            grounds = f"the edited call: {edited_grounds}"
    if not entitled:
        await entitlements.audit_refusal(store, request, approver, via, grounds)
        return Outcome(None, Refusal.NOT_ENTITLED, grounds, request)
    if request.quorum is not None:
        if edited_arguments is not None:
            return Outcome(None, Refusal.INVALID, "a request that needs several approvers "
                           "cannot be edited: deny it, and the model may propose again",
                           request)
        return await _vote(store, request, digest, approved=approved, reviewer=reviewer,
                           note=note, via=via, on_answer=on_answer, grounds=grounds)
    decision = ApprovalAnswer(request.id, digest, approved, approver,
                              note[:MAX_NOTE_CHARS], datetime.now(UTC),
                              None if edited_arguments is None else dict(edited_arguments))
    if not await store.answer_approval(decision):
        # a concurrent answer won the compare-and-set
        return Outcome(None, Refusal.ANSWERED, request=request)
    await _audit(store, request, decision, via,
                 detail=f"answered via {via}; {grounds}" if grounds else None, reviewer=reviewer)
    if on_answer is not None:
        await on_answer(request, decision)
    return Outcome(decision, request=request)


async def withdraw(store: AnswerStore, request_id: str, reason: str, *, via: str = "host") -> bool:
    """Withdraw an unanswered request (audited); False if it was answered already."""
    found = await store.get_approval(request_id)
    if found is None or found.answer is not None:
        return False
    withdrawal = ApprovalAnswer.withdrawal(found.request, reason)
    if not await store.answer_approval(withdrawal):
        return False
    await _audit(store, found.request, withdrawal, via)
    return True


async def find_request(store: ApprovalStore, request_id: str) -> StoredApproval | None:
    """A request by its id, or by a unique prefix of at least :data:`MIN_PREFIX` characters."""
    found = await store.get_approval(request_id)
    if found is None and len(request_id) >= MIN_PREFIX:  # a unique prefix, as people type them
        matches = [r for r in await store.list_approvals(pending_only=False)
                   if r.id.startswith(request_id)]
        if len(matches) == 1:
            found = await store.get_approval(matches[0].id)
    return found


def parse_edited_arguments(text: str) -> dict[str, Any]:
    """The reviewer's arguments: a JSON object, parsed strictly.

    Raises:
        ValueError: not JSON, too large, or not an object.
    """
    try:
        value = parse_json_strict(text, max_bytes=MAX_EDIT_BYTES)
    except JsonError as exc:
        raise InputError(f"the edited arguments are not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise InputError("the edited arguments must be a JSON object")
    return value


async def propose_edit(store: AnswerStore, request_id: str, seen_digest: str,
                       arguments: Mapping[str, Any], *, approver: str, note: str = "",
                       on_answer: OnAnswer | None = None, via: str = "inbox",
                       reviewer: Reviewer | None = None) -> Outcome:
    """Answer the request with the reviewer's arguments, approving the edited call.

    Bound to *seen_digest* like any answer (compare-and-set). On resume the gate validates the
    edited arguments, asks the policy, and runs them only if both agree.
    """
    found = await store.get_approval(request_id)
    if found is None:
        return Outcome(None, Refusal.NOT_FOUND)
    if canonical_json(dict(arguments)) == canonical_json(dict(found.request.arguments)):
        return Outcome(None, Refusal.INVALID, "the edited arguments equal the proposed ones: "
                       "approve the call instead")
    return await answer(store, request_id, seen_digest, approved=True, approver=approver,
                        note=note, on_answer=on_answer, edited_arguments=arguments, via=via,
                        reviewer=reviewer)


async def edit_for(store: ApprovalStore, request_id: str) -> Mapping[str, Any] | None:
    """The edit a reviewer made to *request_id*, if any, and the request it became."""
    found = await store.get_approval(request_id)
    if found is None or found.answer is None or found.answer.edited_arguments is None:
        return None
    answer_ = found.answer
    replacement = next((r.id for r in await store.list_approvals(
        pending_only=False, session_id=found.request.session_id) if r.edit_of == request_id), None)
    return {"arguments": dict(answer_.edited_arguments or {}), "editor": answer_.approver,
            "note": answer_.note, "replacement_id": replacement}


MAX_POLL_SECONDS = 1.0
"""The longest pause between two looks at a request while waiting (without wake-ups)."""
MAX_POLL_WOKEN = 5.0
"""… and with the store's wake-ups up (PostgreSQL ``LISTEN``): the looks are a safety net."""


async def wait_for_answer(store: ApprovalStore, request_id: str, *, timeout: float,
                          poll: float = 0.25) -> bool:
    """Wait up to *timeout* seconds for *request_id* to be answered (by any door, in any
    process); whether it was. ``False`` at once for a request the store does not have.

    A store with wake-ups (``watch_approval``: PostgreSQL ``LISTEN``/``NOTIFY``) wakes the
    wait as soon as an answer is committed anywhere; every store is also looked at, the pause
    growing from *poll* seconds to :data:`MAX_POLL_SECONDS` (SQLite, memory, or PostgreSQL
    whose listening connection is down: the process opens it again meanwhile) or
    :data:`MAX_POLL_WOKEN` (the cap is read at each pause: a wait that began, or went on,
    without the connection spaces its looks out again once it is up).
    """
    delay = poll
    with anyio.move_on_after(timeout):
        async with _watch(store, request_id) as watch:
            while True:
                found = await store.get_approval(request_id)
                if found is None:
                    return False
                if found.answer is not None:
                    return True
                if watch is not None:
                    await watch.wait(delay)
                    cap = MAX_POLL_WOKEN if watch.live else MAX_POLL_SECONDS
                else:
                    await anyio.sleep(delay)
                    cap = MAX_POLL_SECONDS
                delay = min(delay * 1.5, cap)
    return False


@contextlib.asynccontextmanager
async def _watch(store: ApprovalStore, request_id: str) -> AsyncIterator[Any]:
    if not isinstance(store, ApprovalWatchStore):  # the optional role: else, poll
        yield None
        return
    async with store.watch_approval(request_id) as watch:
        yield watch
