"""Which audit records a prune may remove: the part every store shares (no I/O).

A prune keeps a contiguous chain that starts at a signed checkpoint: it removes the records
before the last checkpoint written before the retention date, and never a record of a call
still unsettled (its ledger entry neither ``done`` nor ``failed``: an approval pending, a call
running, an outcome unknown), moving the cut back to the last checkpoint before the first such
record instead.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

from .._chain import CHECKPOINT, PRUNED

__all__ = ["CHECKPOINT", "ENDED", "FINAL_STATES", "PRUNED", "choose_cut", "ended_before",
           "first_held"]

FINAL_STATES = ("done", "failed")
"""Ledger states whose calls' records a prune may remove."""
ENDED = ("completed", "turn_limit", "budget_exhausted", "stopped", "failed")
"""Session statuses whose transcripts a prune may remove (never suspended or running)."""


def ended_before(rows: Iterable[tuple[str, str, str | datetime | None]], before: float,
                 unsettled: set[str]) -> list[str]:
    """The ids of *rows* (``session_id, status, updated_at``) that ended, were last saved
    before *before* and hold no unsettled call (*unsettled*: their session ids)."""
    out = []
    for session_id, status, updated in rows:
        when = datetime.fromisoformat(updated) if isinstance(updated, str) else updated
        if status in ENDED and when is not None and session_id not in unsettled and \
                (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp() < before:
            out.append(session_id)
    return out


def first_held(records: Iterable[tuple[int, str, str | object]],
               unsettled: set[tuple[str, str]]) -> tuple[int, str, str] | None:
    """The first of *records* (``seq, session_id, data`` — data as JSON text or a mapping)
    that belongs to an *unsettled* ``(session_id, call_id)``: ``(seq, session_id, call_id)``."""
    if not unsettled:
        return None
    sessions = {s for s, _ in unsettled}
    for seq, session_id, data in sorted(records, key=lambda r: r[0]):
        if session_id not in sessions:
            continue
        fields = json.loads(data) if isinstance(data, str) else data
        call_id = fields.get("call_id") if isinstance(fields, dict) else None
        if isinstance(call_id, str) and (session_id, call_id) in unsettled:
            return seq, session_id, call_id
    return None


def choose_cut(checkpoints: Sequence[tuple[int, float, str]], before: float, first_seq: int,
               held: int | None) -> tuple[int, str, float] | None:
    """The checkpoint to keep as the first record: the last of *checkpoints* (``seq, at,
    prev_hash``) written before *before*, after *first_seq* (the first record now) and not
    after *held* (the first record that must stay). ``(seq, prev_hash, at)``, or ``None``."""
    best: tuple[int, str, float] | None = None
    for seq, at, prev_hash in checkpoints:
        if at < before and seq > first_seq and (held is None or seq <= held) and \
                (best is None or seq > best[0]):
            best = (seq, prev_hash, at)
    return best
