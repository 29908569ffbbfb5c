"""Pure helpers shared by the stores: ledger transitions and (de)serialising records."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from .._canonical import canonical_json
from ..approvals import ApprovalAnswer, ApprovalRequest
from ..conversation import ToolResult, UserMessage, message_from_dict, message_to_dict
from ._base import PRE_CLAIM, ClaimState, LedgerState

__all__ = ["advances_from", "claim_state_sql", "claim_transition", "dump_json", "dump_result",
           "lease_free", "load_json", "load_result", "may_advance", "new_claim_token", "now_iso",
           "settled_state"]


def claim_transition(current: LedgerState | None, *,
                     retry_unknown: bool = False) -> tuple[LedgerState | None, ClaimState]:
    """For a claim finding *current*: the state to write (None: unchanged) and the answer.

    Unclaimed → claimed (the caller runs it). Claimed → unknown: whoever claimed it never
    settled, so the side effect may have happened. Settled states answer with their result.
    With *retry_unknown* (an idempotent tool), claimed and unknown are claimed again.
    """
    if current is None or current in PRE_CLAIM:
        return LedgerState.CLAIMED, ClaimState.CLAIMED
    if retry_unknown and current in (LedgerState.CLAIMED, LedgerState.UNKNOWN):
        return LedgerState.CLAIMED, ClaimState.CLAIMED
    if current is LedgerState.CLAIMED:
        return LedgerState.UNKNOWN, ClaimState.UNKNOWN
    if current is LedgerState.UNKNOWN:
        return None, ClaimState.UNKNOWN
    return None, ClaimState(current.value)


def new_claim_token() -> str:
    return uuid.uuid4().hex


def lease_free(owner: str | None, expires: float | None, *, me: str, now: float,
               replace: str | None) -> bool:
    """Whether a lease held by *owner* until *expires* may be taken by *me* (see
    :meth:`Store.acquire_lease`)."""
    return (owner is None or owner == me or (replace is not None and owner == replace)
            or expires is None or expires < now)


def may_advance(current: LedgerState | None, new: LedgerState) -> bool:
    """Whether a pre-claim state may be recorded over *current* (forward only)."""
    if new not in PRE_CLAIM:
        raise ValueError(f"advance_execution records only {[s.value for s in PRE_CLAIM]}")
    return current is None or (current in PRE_CLAIM
                               and PRE_CLAIM.index(current) < PRE_CLAIM.index(new))


def advances_from(new: LedgerState) -> list[str]:
    """The stored states *new* may be recorded over (as :func:`may_advance` says), for a
    single-statement ``INSERT … ON CONFLICT DO UPDATE … WHERE state = ANY(…)``."""
    return [s.value for s in LedgerState if may_advance(s, new)]


def claim_state_sql(column: str, *, retry_unknown: bool = False) -> str:
    """:func:`claim_transition` as a SQL ``CASE`` over the stored state in *column*.

    A claim then is one atomic upsert: insert ``claimed``, or move the stored state with
    this expression; the state it leaves is also the claimer's answer (``claimed`` only
    when this claim took it).
    """
    moves = " ".join(f"WHEN '{s.value}' THEN '{new.value}'" for s in LedgerState
                     if (new := claim_transition(s, retry_unknown=retry_unknown)[0])
                     is not None)
    return f"CASE {column} {moves} ELSE {column} END"


def settled_state(result: ToolResult) -> LedgerState:
    return LedgerState.FAILED if result.is_error else LedgerState.DONE


def dump_result(result: ToolResult) -> str:
    parts = message_to_dict(UserMessage((result,)))["parts"]
    assert isinstance(parts, list)
    return canonical_json(parts[0])


def load_result(text: str | None) -> ToolResult | None:
    if text is None:
        return None
    part = message_from_dict({"kind": "user", "parts": [json.loads(text)]}).parts[0]
    assert isinstance(part, ToolResult)
    return part


def dump_json(value: Mapping[str, Any]) -> str:
    """Canonical JSON text: what goes in, comes out byte for byte (the audit chain needs it)."""
    return canonical_json(value)


def load_json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def now_iso() -> str:
    return datetime.now(UTC).isoformat()


def load_approval(request: str, answer: str | None,
                  used: Any) -> tuple[ApprovalRequest, ApprovalAnswer | None, bool]:
    """One ``anfitrion_approvals`` row (request, answer, used) as the store returns it."""
    return (ApprovalRequest.from_dict(load_json(request)),
            None if answer is None else ApprovalAnswer.from_dict(load_json(answer)),
            bool(used))
