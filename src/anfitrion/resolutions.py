"""Resolving an effect whose outcome is unknown: the one path every door uses.

A write tool that raised after it may have acted, timed out, or whose process died while it
ran leaves its effect ``unknown`` (or ``claimed`` with nobody running it). The model is
refused that effect until a person — through ``anfitrion effects resolve``, the JSON API — or
the tool's ``reconcile`` hook says what happened. Each resolution is audited with who, why
and through which door.
"""

from __future__ import annotations

from collections.abc import Sequence

from .events import EventType, HostEvent
from .store import EffectEntry, LedgerState, Store

__all__ = ["MAX_NOTE_CHARS", "MIN_PREFIX", "effect_json", "effect_state_name", "find_effect",
           "resolve"]

MIN_PREFIX = 8
"""The fewest characters of a key that are accepted for it."""

MAX_NOTE_CHARS = 1000


async def find_effect(store: Store, key: str) -> EffectEntry | list[EffectEntry] | None:
    """The effect with this key or unique prefix (≥ 8 characters); the matches if several."""
    found = await store.effect_state(key)
    if found is not None or len(key) < MIN_PREFIX:
        return found
    matches: Sequence[EffectEntry] = [e for e in await store.list_effects()
                                      if e.key.startswith(key)]
    if len(matches) == 1:
        return matches[0]
    return list(matches) or None


async def resolve(store: Store, key: str, *, done: bool, by: str, note: str = "",
                  via: str = "cli") -> EffectEntry | None:
    """Settle the effect *key* as *done* (it happened) or not, and audit who did and why.

    Returns:
        the effect as resolved; ``None`` if there is no such key.

    Raises:
        ConflictError: the effect is not unsettled (already done, failed or resolved).
    """
    entry = await store.resolve_effect(key, done=done, by=by, note=note[:MAX_NOTE_CHARS])
    if entry is None:
        return None
    from .audit import AuditRecorder  # the recorder's module imports the store package

    recorder = AuditRecorder(store)
    await recorder(HostEvent(EventType.EFFECT_RESOLVED, entry.session_id, 0, None,
                             entry.call_id, entry.tool, effect_key=entry.key,
                             status="resolved_done" if done else "resolved_failed",
                             detail=f"resolved by {by} via {via}"
                                    + (f": {note[:MAX_NOTE_CHARS]}" if note else "")))
    await recorder.flush()
    return entry


def effect_state_name(entry: EffectEntry) -> str:
    """How an effect stands, in one word: running, unknown, done, failed, resolved_…"""
    if entry.resolved_by is not None and entry.state in (LedgerState.DONE, LedgerState.FAILED):
        return "resolved_done" if entry.state is LedgerState.DONE else "resolved_failed"
    if entry.state is LedgerState.CLAIMED:
        return "running"
    return entry.state.value if entry.state is not None else "unclaimed"


def effect_json(entry: EffectEntry) -> dict[str, object]:
    """One effect as the CLI's ``--json`` and the API show it."""
    return {"key": entry.key, "display": entry.display, "scope": entry.scope,
            "tool": entry.tool, "session_id": entry.session_id, "call_id": entry.call_id,
            "state": effect_state_name(entry),
            "since": entry.updated_at.isoformat() if entry.updated_at else None,
            "result": entry.result.content if entry.result else None,
            "resolved_by": entry.resolved_by, "note": entry.resolution_note,
            "repeats": entry.repeats}
