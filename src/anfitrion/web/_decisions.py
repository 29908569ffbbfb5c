"""Answering a request from the inbox or the API: one place for the digest binding and the edits.

A decision names the request id *and* the digest the reviewer saw. It is recorded only if the
request still has that digest, is unanswered and has not expired; the store's compare-and-set
(:meth:`Store.answer_approval`) makes a double submission record exactly one answer.

"Approve with edits" denies the request and stores the reviewer's arguments as a new request for
the same call, approved by the reviewer and linked to the original in the store namespace
``approval_edits``. When the host resumes, the gate swaps in the edited arguments and puts them
through validation and policy before the approval is consumed: a policy denial or a schema error
still stops the call, and the model's result says that a reviewer edited the arguments.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from .._canonical import canonical_json, digest
from .._json import JsonError, parse_json_strict
from ..approvals import ApprovalAnswer, ApprovalRequest
from ..gate import APPROVAL_EDITS
from ..store import Store

__all__ = ["EDITS_NAMESPACE", "Refusal", "RequestState", "answer", "edit_for", "notify",
           "parse_edited_arguments", "propose_edit", "state_of"]

EDITS_NAMESPACE = APPROVAL_EDITS
MAX_NOTE_CHARS = 2000
MAX_EDIT_BYTES = 256 * 1024

OnAnswer = Callable[[ApprovalRequest, ApprovalAnswer], Awaitable[None]]

log = logging.getLogger("anfitrion.web")


async def notify(on_answer: OnAnswer, request: ApprovalRequest, answer: ApprovalAnswer) -> None:
    """Run the *on_answer* hook after the response; its failure never undoes the decision."""
    try:
        await on_answer(request, answer)
    except Exception:  # the top of a background task: log, the answer stays recorded
        log.exception("on_answer failed for approval request %s (session %s)", request.id,
                      request.session_id)


class RequestState(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    EXPIRED = "expired"


class Refusal(StrEnum):
    """Why a decision was not recorded (each maps to one HTTP status)."""

    NOT_FOUND = "no such approval request"
    STALE = "the request changed since the page was shown (digest mismatch): reload and review"
    ANSWERED = "the request was already decided"
    EXPIRED = "the request expired: the host will deny the call"
    INVALID = "invalid input"


def state_of(request: ApprovalRequest, answer: ApprovalAnswer | None,
             now: datetime | None = None) -> RequestState:
    if answer is not None:
        return RequestState.APPROVED if answer.approved else RequestState.DENIED
    return RequestState.EXPIRED if request.expired(now) else RequestState.PENDING


@dataclass(frozen=True, slots=True)
class Outcome:
    answer: ApprovalAnswer | None
    refusal: Refusal | None = None
    detail: str = ""


async def answer(store: Store, request_id: str, seen_digest: str, *, approved: bool,
                 approver: str, note: str = "", on_answer: OnAnswer | None = None) -> Outcome:
    """Record one decision bound to *seen_digest*; refuse stale, decided or expired requests."""
    found = await store.get_approval(request_id)
    if found is None:
        return Outcome(None, Refusal.NOT_FOUND)
    request, existing, _ = found
    if existing is not None:
        return Outcome(None, Refusal.ANSWERED)
    if seen_digest != request.digest:
        return Outcome(None, Refusal.STALE)
    if request.expired():
        return Outcome(None, Refusal.EXPIRED)
    decision = ApprovalAnswer(request.id, seen_digest, approved, approver,
                              note[:MAX_NOTE_CHARS], datetime.now(UTC))
    if not await store.answer_approval(decision):
        return Outcome(None, Refusal.ANSWERED)  # a concurrent answer won the compare-and-set
    if on_answer is not None:
        await on_answer(request, decision)
    return Outcome(decision)


def parse_edited_arguments(text: str) -> dict[str, Any]:
    """The reviewer's arguments: a JSON object, parsed strictly.

    Raises:
        ValueError: not JSON, too large, or not an object.
    """
    try:
        value = parse_json_strict(text, max_bytes=MAX_EDIT_BYTES)
    except JsonError as exc:
        raise ValueError(f"the edited arguments are not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise ValueError("the edited arguments must be a JSON object")
    return value


async def propose_edit(store: Store, request_id: str, seen_digest: str,
                       arguments: Mapping[str, Any], *, approver: str, note: str = "",
                       on_answer: OnAnswer | None = None) -> Outcome:
    """Replace the request's arguments with the reviewer's: deny it, approve the edited call.

    The original is denied (compare-and-set, bound to *seen_digest*); only then the edited call
    is stored as a new request for the same session, call and tool, approved by the reviewer,
    and linked under :data:`~anfitrion.gate.APPROVAL_EDITS`. On resume the gate validates the
    edited arguments, asks the policy, and runs them only if both agree.
    """
    found = await store.get_approval(request_id)
    if found is None:
        return Outcome(None, Refusal.NOT_FOUND)
    request = found[0]
    if canonical_json(dict(arguments)) == canonical_json(dict(request.arguments)):
        return Outcome(None, Refusal.INVALID, "the edited arguments equal the proposed ones: "
                       "approve the call instead")
    replacement = ApprovalRequest.for_call(
        session_id=request.session_id, principal_id=request.principal_id,
        call_id=request.call_id, tool_name=request.tool_name,
        tool_definition_hash=request.tool_definition_hash, arguments=dict(arguments),
        effect=request.effect, reason=f"edited by {approver} from request {request.id}",
        rule_id=request.rule_id, warnings=request.warnings)
    shown = json.dumps(dict(arguments), sort_keys=True, ensure_ascii=False)
    text = f"replaced by the reviewer's edited call {replacement.id}: {shown}"
    if note:
        text += f" (note: {note})"
    outcome = await answer(store, request_id, seen_digest, approved=False, approver=approver,
                           note=text)
    if outcome.answer is None:
        return outcome
    await store.create_approval(replacement)
    await store.answer_approval(ApprovalAnswer.to(replacement, True, approver, note))
    await store.put_record(EDITS_NAMESPACE, request.id, {
        "request_id": request.id, "replacement_id": replacement.id,
        "session_id": request.session_id, "tool_name": request.tool_name,
        "arguments": dict(arguments), "arguments_sha256": digest(dict(arguments)),
        "editor": approver, "note": note, "at": outcome.answer.at.isoformat()})
    if on_answer is not None:
        await on_answer(request, outcome.answer)
    return outcome


async def edit_for(store: Store, request_id: str) -> Mapping[str, Any] | None:
    """The edit a reviewer made to *request_id*, if any."""
    return await store.get_record(EDITS_NAMESPACE, request_id)
