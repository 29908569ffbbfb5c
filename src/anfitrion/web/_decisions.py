"""Answering a request from the inbox or the API: one place for the digest binding and the edits.

A decision names the request id *and* the digest the reviewer saw. It is recorded only if the
request still has that digest, is unanswered and has not expired; the store's compare-and-set
(:meth:`Store.answer_approval`) makes a double submission record exactly one answer.

"Approve with edits" does not run anything the model did not propose: it denies the request and
hands the reviewer's arguments back to the model in the denial note, and records the edit under
the store namespace ``approval_edits``. The model may then propose the edited call; that new call
goes through validation, policy and a fresh approval like any other, and the inbox marks it as
matching the reviewer's edit.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from .._canonical import canonical_json, digest
from .._json import JsonError, parse_json_strict
from ..approvals import ApprovalAnswer, ApprovalRequest
from ..store import Store

__all__ = ["EDITS_NAMESPACE", "Refusal", "RequestState", "answer", "edit_for", "matching_edit",
           "parse_edited_arguments", "propose_edit", "state_of"]

EDITS_NAMESPACE = "approval_edits"
MAX_NOTE_CHARS = 2000
MAX_EDIT_BYTES = 256 * 1024

OnAnswer = Callable[[ApprovalRequest, ApprovalAnswer], Awaitable[None]]


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
    """Deny the request, handing the reviewer's arguments back to the model; record the edit."""
    found = await store.get_approval(request_id)
    if found is None:
        return Outcome(None, Refusal.NOT_FOUND)
    request = found[0]
    if canonical_json(dict(arguments)) == canonical_json(dict(request.arguments)):
        return Outcome(None, Refusal.INVALID, "the edited arguments equal the proposed ones: "
                       "approve the call instead")
    shown = json.dumps(dict(arguments), sort_keys=True, ensure_ascii=False)
    text = (f"the reviewer did not approve these arguments and asks for a call to "
            f"{request.tool_name} with these arguments instead: {shown}")
    if note:
        text += f" (note: {note})"
    outcome = await answer(store, request_id, seen_digest, approved=False, approver=approver,
                           note=text, on_answer=None)
    if outcome.answer is None:
        return outcome
    await store.put_record(EDITS_NAMESPACE, request.id, {
        "request_id": request.id, "session_id": request.session_id,
        "tool_name": request.tool_name, "arguments": dict(arguments),
        "arguments_sha256": digest(dict(arguments)), "editor": approver, "note": note,
        "at": outcome.answer.at.isoformat()})
    if on_answer is not None:
        await on_answer(request, outcome.answer)
    return outcome


async def edit_for(store: Store, request_id: str) -> Mapping[str, Any] | None:
    """The edit a reviewer made to *request_id*, if any."""
    return await store.get_record(EDITS_NAMESPACE, request_id)


def matching_edit(request: ApprovalRequest,
                  edits: Sequence[tuple[str, Mapping[str, Any]]]) -> Mapping[str, Any] | None:
    """The recorded edit this new request carries out exactly (same session, tool, arguments)."""
    wanted = digest(dict(request.arguments))
    for _, edit in edits:
        if (edit.get("session_id") == request.session_id
                and edit.get("tool_name") == request.tool_name
                and edit.get("arguments_sha256") == wanted
                and edit.get("request_id") != request.id):
            return edit
    return None
