"""Pure helpers shared by the stores: ledger transitions and (de)serialising records.

**Loading rows.** A row whose stored text is not what the store wrote (invalid JSON, a missing
field, a value of the wrong type — an edited database, a bad restore, a disk error) raises
:class:`~anfitrion.exceptions.StoreError` naming the table and the row's key, never a bare
``JSONDecodeError`` or ``KeyError``. Listing methods skip such rows, log a warning and keep
what they skipped in :attr:`Rows.skipped`, so one bad row does not make the rest of the store
unusable; loading that one row by its key still raises.
"""

from __future__ import annotations

import enum
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from .._approvals import ApprovalAnswer, ApprovalRequest
from .._canonical import canonical_json
from .._conversation import ToolResult, UserMessage, message_from_dict, message_to_dict
from .._effects import EffectKey
from ..exceptions import ConflictError, StoreError, UserError
from ._base import (
    PRE_CLAIM,
    AuditRecord,
    ClaimState,
    CredentialEntry,
    EffectEntry,
    LedgerEntry,
    LedgerState,
    SessionState,
    StoredApproval,
)

__all__ = [
    "CREDENTIAL_COLUMNS",
    "EFFECT_COLUMNS",
    "CorruptRow",
    "CorruptRowError",
    "EffectMove",
    "Rows",
    "advances_from",
    "approval_row",
    "approval_rows",
    "audit_row",
    "claim_state_sql",
    "claim_transition",
    "credential_row",
    "dump_json",
    "dump_result",
    "effect_arguments",
    "effect_move",
    "effect_row",
    "entry_row",
    "fence_claim",
    "first_readable",
    "lease_free",
    "load_json",
    "load_result",
    "may_advance",
    "message_rows",
    "new_claim_token",
    "now_iso",
    "record_value",
    "refuse_while_running",
    "resolution_result",
    "row_of",
    "session_row",
    "session_rows",
    "settled_state",
    "settlement_conflict",
    "skipped_rows",
]

log = logging.getLogger("anfitrion.store")

T = TypeVar("T")

# what a loader raises on data it did not write (RecursionError: absurdly deep JSON)
_ROW_PROBLEMS = (ValueError, TypeError, KeyError, AttributeError, IndexError, RecursionError)


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


class EffectMove(enum.Enum):
    OWN = "own"
    """The key is this call's already (or new): claim the call as usual."""
    TAKE = "take"
    """The holding call failed (the effect did not happen): the key moves to this call."""
    REPEAT = "repeat"
    """The holding call is done and a person approved running it again."""
    DUPLICATE = "duplicate"
    """Another call holds it (done, running or unknown): claim nothing."""


def effect_move(holder: tuple[str, str] | None, me: tuple[str, str],
                holder_state: LedgerState | None, repeat_of: tuple[str, str] | None, *,
                retry_unknown: bool = False) -> EffectMove:
    """What a claim of call *me* does with an effect key held by *holder* (None: free).

    *retry_unknown* (an idempotent tool): an effect whose outcome is unknown may be run again.
    """
    if holder is None or holder == me:
        return EffectMove.OWN
    if holder_state is LedgerState.FAILED or (retry_unknown and
                                              holder_state is LedgerState.UNKNOWN):
        return EffectMove.TAKE
    if holder_state is LedgerState.DONE and repeat_of == holder:
        return EffectMove.REPEAT
    return EffectMove.DUPLICATE


EFFECT_COLUMNS = ("e.key, e.display, e.scope, e.tool, e.session_id, e.call_id, e.created_at, "
                  "e.updated_at, e.resolved_by, e.resolution_note, e.repeats, l.state, l.result, "
                  "l.updated_at, e.arguments, e.sensitive")
"""The columns :func:`effect_row` reads: ``anfitrion_effects e LEFT JOIN anfitrion_ledger l``."""


def effect_row(row: Sequence[Any]) -> EffectEntry:
    key = f"key={row[0]!r}"
    with row_of("anfitrion_effects", key):
        return EffectEntry(row[0], row[1], row[2], row[3], row[4], row[5],
                           LedgerState(row[11]) if row[11] is not None else None,
                           load_result(row[12], key), _when(row[6]),
                           _when(row[13]) if row[13] is not None else _when(row[7]),
                           row[8], row[9], int(row[10]), _arguments(row[14]),
                           frozenset(_names(row[15])))


def _arguments(text: str | None) -> dict[str, Any] | None:
    value = load_json(text)
    if value is not None and not isinstance(value, dict):
        raise StoreError("corrupt data in the store: effect arguments are not an object")
    return value


def _names(text: str | None) -> list[str]:
    value = load_json(text)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise StoreError("corrupt data in the store: sensitive names are not a list of strings")
    return value


def effect_arguments(effect: EffectKey) -> tuple[str | None, str | None]:
    """The ``arguments`` and ``sensitive`` columns of a reserved *effect* (canonical JSON)."""
    if effect.arguments is None:
        return None, None
    return canonical_json(dict(effect.arguments)), canonical_json(sorted(effect.sensitive))


def resolution_result(call_id: str, tool: str, *, done: bool, by: str, note: str) -> ToolResult:
    """The result an effect resolved by a person (or a reconcile hook) is settled with."""
    what = "it happened" if done else "it did not happen"
    text = f"resolved by {by}: {what}" + (f" ({note})" if note else "")
    return ToolResult(call_id, tool, text[:2000], is_error=not done,
                      error_kind=None if done else "resolved_not_done")


def fence_claim(session_id: str, call_id: str, held_by: str | None, owner: str) -> None:
    """The claim's fence: a run claims a side effect only while its session's lease is its own.

    A run that stalled past its lease (a long GC pause, a stopped process, a partitioned
    replica) may find, when it wakes, that another process took the session over and has
    moved its state on (a tainting read, a denial, a spent budget). The call it was deciding
    was decided on the state it loaded before: claiming it now would run a side effect the
    current state might forbid. Checked in the claim's own transaction, so no takeover can
    fall between the check and the claim. A session leased by nobody (never leased, or
    released) is not fenced.

    Raises:
        ConflictError: another owner holds *session_id*'s lease.
    """
    if held_by is not None and held_by != owner:
        raise ConflictError(f"session {session_id!r} is leased by {held_by}, not this run: "
                            f"call {call_id!r} was decided on state another run has since "
                            "taken over; nothing was claimed or run")


def refuse_while_running(key: str, session_id: str, owner: str | None,
                         expires: float | None) -> None:
    """Refuse resolving a *claimed* effect while the run holding it keeps a live lease on its
    session: its handler may still be acting, and a "failed" written now would let the next
    proposal run the effect a second time. That run settles it; or, if it died, a person
    resolves it once the lease lapses (``anfitrion resume --ready`` / the reaper free it).

    Raises:
        ConflictError: the lease of *session_id* is live.
    """
    if owner is not None and expires is not None and float(expires) > time.time():
        raise ConflictError(f"effect {key[:12]}… is still running: session {session_id} is "
                            f"leased by {owner}; that run settles it (resolve it after its "
                            "lease lapses if the run died)")


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
        raise UserError(f"advance_execution records only {[s.value for s in PRE_CLAIM]}")
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
    """``outcome_unknown`` (a write tool raised after it may have acted, or timed out) settles
    as ``unknown``: a person or a reconcile hook must say what happened."""
    if result.is_error and result.error_kind == "outcome_unknown":
        return LedgerState.UNKNOWN
    return LedgerState.FAILED if result.is_error else LedgerState.DONE


def settlement_conflict(session_id: str, call_id: str) -> str:
    """What a settlement whose claim another run took over says (nothing was written)."""
    return (f"session {session_id!r}: the claim on call {call_id!r} was taken over by "
            "another run; its outcome stays unknown")


def dump_result(result: ToolResult) -> str:
    parts = message_to_dict(UserMessage((result,)))["parts"]
    assert isinstance(parts, list)
    return canonical_json(parts[0])


def load_result(text: str | None, key: str = "a stored result") -> ToolResult | None:
    if text is None:
        return None
    with row_of("anfitrion_ledger", key):
        part = message_from_dict({"kind": "user", "parts": [json.loads(text)]}).parts[0]
        if not isinstance(part, ToolResult):
            raise TypeError("the result is not a tool result")
        return part


def dump_json(value: Mapping[str, Any]) -> str:
    """Canonical JSON text: what goes in, comes out byte for byte (the audit chain needs it)."""
    return canonical_json(value)


def load_json(text: str | None) -> Any:
    """JSON the store wrote; anything else is a :class:`StoreError` (see :func:`row_of`)."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise StoreError(f"corrupt data in the store: {_problem(exc)}") from exc


@dataclass(frozen=True, slots=True)
class CorruptRow:
    """A row a listing skipped: its table, its key and what is wrong with it."""

    table: str
    key: str
    problem: str

    def __str__(self) -> str:
        return f"corrupt row in {self.table} ({self.key}): {self.problem}"


class Rows(list[T]):
    """What a listing returns: the rows it could load, and the corrupt ones it skipped."""

    skipped: tuple[CorruptRow, ...] = ()


def first_readable(rows: Iterable[Sequence[Any]],
                   read: Callable[[Sequence[Any]], object]) -> Sequence[Any] | None:
    """The first of *rows* that *read* loads without a :class:`StoreError`: a corrupt session
    never blocks the ones behind it (it is logged and passed over)."""
    for row in rows:
        try:
            read(row)
        except StoreError as exc:
            log.warning("%s; it is not resumed", exc)
            continue
        return row
    return None


def skipped_rows(listing: Iterable[Any]) -> tuple[CorruptRow, ...]:
    """The corrupt rows a store's listing skipped (none for stores that cannot hold any)."""
    skipped: tuple[CorruptRow, ...] = getattr(listing, "skipped", ())
    return skipped


class CorruptRowError(StoreError):
    """A row the store cannot load (a :class:`StoreError`); *row* says which and why."""

    def __init__(self, row: CorruptRow) -> None:
        super().__init__(str(row))
        self.row = row


def _problem(exc: BaseException) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"invalid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
    if isinstance(exc, KeyError):
        return f"missing field {exc}"
    if isinstance(exc, RecursionError):
        return "JSON nested too deeply"
    text = str(exc)
    if isinstance(exc.__cause__, json.JSONDecodeError):
        text = _problem(exc.__cause__)
    return (text[:200] + "…") if len(text) > 200 else text or type(exc).__name__


@contextmanager
def row_of(table: str, key: str) -> Iterator[None]:
    """Loading one row of *table*: whatever its data makes fail is a :class:`StoreError`
    naming the table and *key* (``id='…'``)."""
    try:
        yield
    except CorruptRowError:
        raise
    except (StoreError, *_ROW_PROBLEMS) as exc:
        raise CorruptRowError(CorruptRow(table, key, _problem(exc))) from exc


def _loaded(rows: Iterable[Sequence[Any]], load: Callable[[Sequence[Any]], T]) -> Rows[T]:
    """*load* each row; skip (log, keep in ``skipped``) the ones that raise a corrupt-row error."""
    out: Rows[T] = Rows()
    skipped: list[CorruptRow] = []
    for row in rows:
        try:
            out.append(load(row))
        except CorruptRowError as exc:
            log.warning("%s; skipped", exc.row)
            skipped.append(exc.row)
    out.skipped = tuple(skipped)
    return out


def _json_object(text: Any, what: str) -> dict[str, Any]:
    value = json.loads(text)
    if not isinstance(value, dict):
        raise TypeError(f"{what} is not a JSON object")
    return value


def _when(value: Any) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(value)


def session_row(row: Sequence[Any]) -> SessionState:
    """An ``anfitrion_sessions`` row (id, principal, status, data, version, updated_at[,
    lease_owner, lease_expires]), without its messages."""
    with row_of("anfitrion_sessions", f"session_id={row[0]!r}"):
        lease = (row[6], None if row[7] is None else float(row[7])) if len(row) > 7 else \
            (None, None)
        return SessionState(row[0], row[1], row[2], _json_object(row[3], "data"), int(row[4]),
                            _when(row[5]), lease_owner=lease[0], lease_expires=lease[1])


def session_rows(rows: Iterable[Sequence[Any]]) -> Rows[SessionState]:
    """Listed sessions; corrupt rows skipped."""
    return _loaded(rows, session_row)


def message_rows(session_id: str, rows: Iterable[Sequence[Any]]) -> list[Any]:
    """A session's ``anfitrion_session_messages`` rows (idx, data), in order."""
    messages = []
    for idx, data in rows:
        with row_of("anfitrion_session_messages", f"session_id={session_id!r}, idx={idx}"):
            messages.append(_json_object(data, "the message"))
    return messages


def tail_rows(session_id: str, rows: Sequence[Sequence[Any]], known: int
              ) -> tuple[list[Any], int]:
    """The messages and :func:`tail_total` of a ``TAIL_AND_SPAN`` answer (its first row the
    span, then the tail's rows from *known* on)."""
    (_, _, count, top), *tail = rows
    return (message_rows(session_id, [(r[0], r[1]) for r in tail]),
            tail_total(count, top, [r[0] for r in tail], known))


def tail_total(count: int, top: int | None, tail: Sequence[int], known: int) -> int:
    """How many messages a session holds, from ``COUNT(*)`` and ``MAX(idx)`` of its rows and
    the indexes of its *tail* (from *known* on); ``-1`` unless its indexes run ``0 … n - 1``
    (a caller then reads it whole, as :meth:`~anfitrion.store.Store.load_session` does)."""
    total = 0 if top is None else int(top) + 1
    if int(count) != total or list(tail) != list(range(known, max(total, known))):
        return -1
    return total


def approval_row(request_id: str, request: str, answer: str | None,
                 used: Any) -> StoredApproval:
    """One ``anfitrion_approvals`` row (request, answer, used) as the store returns it."""
    with row_of("anfitrion_approvals", f"id={request_id!r}"):
        return StoredApproval(
            ApprovalRequest.from_dict(_json_object(request, "the request")),
            None if answer is None
            else ApprovalAnswer.from_dict(_json_object(answer, "the answer")),
            bool(used))


def approval_rows(rows: Iterable[Sequence[Any]]) -> Rows[ApprovalRequest]:
    """Listed approval requests from (id, request, answer, used) rows; corrupt rows skipped."""
    return _loaded(rows, lambda r: approval_row(*r).request)


def entry_row(row: Sequence[Any]) -> LedgerEntry:
    """An ``anfitrion_ledger`` row (session, call, state, digest, result, updated_at)."""
    key = f"session_id={row[0]!r}, call_id={row[1]!r}"
    with row_of("anfitrion_ledger", key):
        return LedgerEntry(row[0], row[1], LedgerState(row[2]), row[3],
                           load_result(row[4], key), _when(row[5]))


def audit_row(row: Sequence[Any]) -> AuditRecord:
    """An ``anfitrion_audit`` row (seq, type, session, at, data, prev_hash, hash).

    Not skipped when corrupt: the chain would read as a deleted record.
    """
    with row_of("anfitrion_audit", f"seq={row[0]}"):
        return AuditRecord(int(row[0]), row[1], row[2], float(row[3]),
                           _json_object(row[4], "data"), row[5], row[6])


def record_value(namespace: str, key: str, text: str) -> Mapping[str, Any]:
    """An ``anfitrion_records`` value."""
    with row_of("anfitrion_records", f"namespace={namespace!r}, key={key!r}"):
        return _json_object(text, "the value")


def now_iso() -> str:
    return datetime.now(UTC).isoformat()




CREDENTIAL_COLUMNS = "principal, issuer, resource, kind, key_id, sealed, meta, updated_at"
"""The columns of ``anfitrion_credentials``, in :func:`credential_row`'s order."""


def credential_row(row: Sequence[Any]) -> CredentialEntry:
    """An ``anfitrion_credentials`` row (:data:`CREDENTIAL_COLUMNS`)."""
    with row_of("anfitrion_credentials", f"principal={row[0]!r}, resource={row[2]!r}"):
        return CredentialEntry(str(row[0]), str(row[1]), str(row[2]), str(row[3]), str(row[4]),
                               str(row[5]), _json_object(row[6], "the meta"), float(row[7]))
