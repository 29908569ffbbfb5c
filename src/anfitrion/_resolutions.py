"""Resolving an effect whose outcome is unknown: the one path every door uses.

A write tool that raised after it may have acted, timed out, or whose process died while it
ran leaves its effect ``unknown`` (or ``claimed`` with nobody running it). The model is
refused that effect until a person — through ``anfitrion effects resolve``, the inbox, the
JSON API — or the tool's ``reconcile`` hook says what happened (:func:`reconcile`: run by the
gate when the model proposes the effect again or a crashed call resumes, and by ``anfitrion
effects reconcile``). Each resolution is audited with who, why and through which door.

The hook gets the exact arguments of the call that holds the effect: the store keeps them
with the reservation (as it keeps an approval request's), and whatever shows an effect —
the CLI, the API, the inbox, the audit log — shows them only redacted (:func:`effect_json`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._events import EventType, HostEvent
from ._owners import dead_local_owner
from ._principal import Principal
from ._tools import Tool, ToolContext
from .exceptions import ConflictError
from .store import EffectEntry, LedgerState, LedgerStore, ResolutionStore

__all__ = ["MAX_NOTE_CHARS", "MIN_PREFIX", "Reconciled", "arguments_preview",
           "ask_reconcile_hook", "effect_json", "effect_state_name", "find_effect", "reconcile",
           "resolve"]

log = logging.getLogger("anfitrion.resolutions")

MIN_PREFIX = 8
"""The fewest characters of a key that are accepted for it."""

MAX_NOTE_CHARS = 1000


async def find_effect(store: LedgerStore, key: str) -> EffectEntry | list[EffectEntry] | None:
    """The effect with this key or unique prefix (≥ 8 characters); the matches if several."""
    found = await store.effect_state(key)
    if found is not None or len(key) < MIN_PREFIX:
        return found
    matches: Sequence[EffectEntry] = [e for e in await store.list_effects()
                                      if e.key.startswith(key)]
    if len(matches) == 1:
        return matches[0]
    return list(matches) or None


async def resolve(store: ResolutionStore, key: str, *, done: bool, by: str, note: str = "",
                  via: str = "cli") -> EffectEntry | None:
    """Settle the effect *key* as *done* (it happened) or not, and audit who did and why.

    Returns:
        the effect as resolved; ``None`` if there is no such key.

    Raises:
        ConflictError: the effect is not unsettled (already done, failed or resolved).
    """
    found = await store.effect_state(key)
    if found is not None:  # its run died on this machine: its lease need not lapse first
        state = await store.load_session(found.session_id)
        if state is not None and state.lease_owner is not None \
                and dead_local_owner(state.lease_owner):
            await store.renew_lease(found.session_id, state.lease_owner, 0.0)
    entry = await store.resolve_effect(key, done=done, by=by, note=note[:MAX_NOTE_CHARS])
    if entry is None:
        return None
    from ._audit import AuditRecorder  # the recorder's module imports the store package

    recorder = AuditRecorder(store)
    await recorder(HostEvent(EventType.EFFECT_RESOLVED, entry.session_id, 0, None,
                             entry.call_id, entry.tool, effect_key=entry.key,
                             status="resolved_done" if done else "resolved_failed",
                             detail=f"resolved by {by} via {via}"
                                    + (f": {note[:MAX_NOTE_CHARS]}" if note else "")))
    await recorder.flush()
    return entry


async def ask_reconcile_hook(tool: Tool, arguments: Mapping[str, Any],
                             context: ToolContext) -> bool | None:
    """What *tool*'s reconcile hook says of the effect of a call with *arguments*: it
    happened (True), it did not (False), or it cannot tell (``None``; also when the hook
    raises — logged, never propagated: a broken hook leaves the effect for a person).

    Only the documented type settles an effect: ``True`` or ``False`` exactly. Any other
    answer (``"no"``, ``0``, ``1``, a dict, a status object) is not read by truthiness — the
    hook cannot tell, and the effect stays for a person (logged)."""
    if tool.reconcile is None:
        return None
    try:
        happened = tool.reconcile(dict(arguments), context)
        if isinstance(happened, Awaitable):
            happened = await happened
    # BLE001 - a reconcile hook is application code: logged, the effect stays for a person
    except Exception:
        log.exception("reconcile hook of %s raised (call %s)", tool.name, context.call_id)
        return None
    if happened is None or type(happened) is bool:
        return happened
    log.warning("reconcile hook of %s answered a %s, not True, False or None (call %s): the "
                "effect stays unknown", tool.name, type(happened).__name__, context.call_id)
    return None


@dataclass(frozen=True, slots=True)
class Reconciled:
    """What :func:`reconcile` did with one effect.

    ``outcome``: ``done`` / ``failed`` (the hook settled it), ``undecided`` (the hook could
    not tell), or why it was not asked: ``settled`` (nothing to reconcile), ``running`` (its
    session's lease is live), ``no_hook``, ``no_arguments`` (reserved before the store kept
    them), ``no_tool``.
    """

    entry: EffectEntry
    outcome: str
    detail: str


_HOOK_NOTE = "the tool's reconcile hook asked the outside system"


async def reconcile(store: ResolutionStore, entry: EffectEntry, tool: Tool | None, *,
                    principal: Principal, by: str, note: str = "",
                    via: str = "cli") -> Reconciled:
    """Ask *tool*'s reconcile hook what happened to the unsettled effect *entry*, with the
    arguments the store kept, and settle it with the answer (audited like :func:`resolve`:
    ``by`` names who ran the hook, e.g. ``cli:alice``).

    A claimed effect is reconciled only when its run is known to be over (its session's
    lease is free or lapsed); otherwise that run settles it, or a person does.
    """
    if entry.state not in (LedgerState.CLAIMED, LedgerState.UNKNOWN):
        return Reconciled(entry, "settled", f"it is {effect_state_name(entry)}: nothing to "
                          "reconcile")
    if entry.state is LedgerState.CLAIMED:
        # a claim is reconciled only when its run is known to be over: a hook asked while the
        # handler is still acting could say "did not happen" just before it happens
        session = await store.load_session(entry.session_id)
        if session is None:
            return Reconciled(entry, "running", f"no session {entry.session_id} is recorded to "
                              "say whether the run holding it is over: a person must resolve "
                              "it")
        if session.lease_owner is not None and (session.lease_expires or 0.0) > time.time():
            return Reconciled(entry, "running", f"session {entry.session_id} is being run by "
                              f"{session.lease_owner}: that run settles it (or, if it died, "
                              "try again when its lease lapses)")
    if tool is None:
        return Reconciled(entry, "no_tool", f"no tool {entry.tool!r} among the tools loaded")
    if tool.reconcile is None:
        return Reconciled(entry, "no_hook", f"tool {tool.name!r} declares no reconcile hook: "
                          "a person must resolve it (anfitrion effects resolve)")
    if entry.arguments is None:
        return Reconciled(entry, "no_arguments", "reserved before the store kept arguments "
                          "(migration 0007): a person must resolve it")
    context = ToolContext(principal, entry.session_id, entry.call_id, tool.name)
    happened = await ask_reconcile_hook(tool, entry.arguments, context)
    if happened is None:
        return Reconciled(entry, "undecided", f"the reconcile hook of {tool.name!r} could not "
                          "tell: a person must resolve it")
    try:
        settled = await resolve(store, entry.key, done=happened,
                                by=f"reconcile:{tool.name} (run by {by})",
                                note=_HOOK_NOTE + (f"; {note}" if note else ""), via=via)
    except ConflictError:  # settled meanwhile, by its own run or a person
        now = await store.effect_state(entry.key)
        return Reconciled(now or entry, "settled", "settled meanwhile")
    assert settled is not None  # it was there, and effects are never deleted
    return Reconciled(settled, "done" if happened else "failed",
                      f"the reconcile hook of {tool.name!r} says it "
                      + ("happened" if happened else "did not happen"))


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
            "repeats": entry.repeats, "arguments": arguments_preview(entry)}


def arguments_preview(entry: EffectEntry) -> dict[str, Any] | None:
    """The effect's arguments as people may see them: redacted as the audit log redacts
    (declared-sensitive and secret-named ones dropped, secrets and personal data masked)."""
    if entry.arguments is None:
        return None
    from ._redaction import _redact_arguments  # the audit's one redaction rule, not a second one

    return _redact_arguments(entry.arguments, entry.sensitive)
