"""The in-memory store: the reference implementation of :class:`Store`, for tests."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from .._approvals import ApprovalAnswer, ApprovalRequest, ApprovalVote
from .._canonical import canonical_json
from .._chain import GENESIS, chain_batch, chain_hash, pack_batch
from .._conversation import ToolResult
from .._effects import EffectKey
from ..exceptions import ConflictError
from ._base import (
    AuditRecord,
    Claim,
    ClaimState,
    CredentialEntry,
    EffectEntry,
    LedgerEntry,
    LedgerState,
    PrunePlan,
    SessionState,
    StoredApproval,
    VoteOutcome,
    VoteState,
)
from ._retention import CHECKPOINT, FINAL_STATES, PRUNED, choose_cut, ended_before, first_held
from ._rows import (
    EffectMove,
    claim_transition,
    effect_move,
    fence_claim,
    lease_free,
    may_advance,
    new_claim_token,
    refuse_while_running,
    resolution_result,
    settled_state,
)
from ._votes import tally

__all__ = ["MemoryStore"]


class MemoryStore:
    """Everything in dictionaries, guarded by one lock (safe across worker threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sessions: dict[str, SessionState] = {}
        self._messages: dict[str, list[dict[str, Any]]] = {}
        self._requests: dict[str, ApprovalRequest] = {}
        self._answers: dict[str, ApprovalAnswer] = {}
        self._votes: dict[str, list[ApprovalVote]] = {}
        self._used: set[str] = set()
        self._ledger: dict[tuple[str, str], LedgerEntry] = {}
        self._claim_tokens: dict[tuple[str, str], str] = {}
        self._effects: dict[str, EffectEntry] = {}
        """Key → the reserved effect (its state/result fields unused: read from the ledger)."""
        self._audit: list[AuditRecord] = []
        """The records read back so far (:meth:`_unpacked`), in sequence order."""
        self._packed: list[tuple[int, str, str, bytes]] = []
        """Batches appended since the last read, after :attr:`_audit`: (first seq, previous
        hash, hash, the hashed body) — one bytes object per batch, read back when asked for."""
        self._audit_head: tuple[int, str] = (0, GENESIS)  # kept apart: a prune removes records
        self._calls: list[tuple[str, str, float]] = []
        self._records: dict[str, dict[str, dict[str, Any]]] = {}
        self._credentials: dict[tuple[str, str, str, str], CredentialEntry] = {}

    async def save_session(self, state: SessionState) -> SessionState:
        with self._lock:
            current = self._sessions.get(state.session_id)
            if current is not None and current.version != state.version:
                raise ConflictError(f"session {state.session_id!r} was changed concurrently")
            if current is None and state.version != 0:
                raise ConflictError(f"session {state.session_id!r} no longer exists")
            stored = self._messages.setdefault(state.session_id, [])
            if state.saved_messages > len(stored):
                raise ConflictError(f"session {state.session_id!r}: messages out of step")
            if state.messages:
                del stored[state.saved_messages:]
                stored.extend(dict(m) for m in state.messages[state.saved_messages:])
            saved = SessionState(state.session_id, state.principal_id, state.status,
                                 dict(state.data), state.version + 1, datetime.now(UTC),
                                 lease_owner=state.lease_owner,
                                 lease_expires=state.lease_expires)
            self._sessions[state.session_id] = saved
            return self._with_messages(saved)

    def _with_messages(self, state: SessionState) -> SessionState:
        messages = list(self._messages.get(state.session_id, ()))
        return SessionState(state.session_id, state.principal_id, state.status, state.data,
                            state.version, state.updated_at, messages, len(messages),
                            state.lease_owner, state.lease_expires)

    async def load_session(self, session_id: str) -> SessionState | None:
        with self._lock:
            state = self._sessions.get(session_id)
            return None if state is None else self._with_messages(state)

    async def list_sessions(self, status: str | None = None) -> Sequence[SessionState]:
        with self._lock:
            return [s for s in self._sessions.values() if status is None or s.status == status]

    async def claim_resumable(self, owner: str | None = None,
                              lease_seconds: float = 60.0) -> SessionState | None:
        now = datetime.now(UTC)
        with self._lock:
            waiting = {r.session_id for r in self._requests.values() if r.id not in self._answers}
            ready = sorted((s for s in self._sessions.values() if _resumable(
                s, waiting, now.timestamp())),
                           key=lambda s: s.updated_at or datetime.min.replace(tzinfo=UTC))
            if not ready:
                return None
            state = ready[0]
            taken = SessionState(state.session_id, state.principal_id, "running", state.data,
                                 state.version + 1, now, lease_owner=owner,
                                 lease_expires=now.timestamp() + lease_seconds if owner
                                 else None)
            self._sessions[state.session_id] = taken
            return self._with_messages(taken)

    async def acquire_lease(self, session_id: str, owner: str, until: float, *, now: float,
                            replace: str | None = None) -> SessionState | None:
        with self._lock:
            state = self._sessions.get(session_id)
            if state is None or not lease_free(state.lease_owner, state.lease_expires, me=owner,
                                               now=now, replace=replace):
                return None
            taken = SessionState(state.session_id, state.principal_id, "running", state.data,
                                 state.version + 1, datetime.now(UTC), lease_owner=owner,
                                 lease_expires=until)
            self._sessions[session_id] = taken
            return self._with_messages(taken)

    async def session_row(self, session_id: str) -> SessionState | None:
        with self._lock:
            state = self._sessions.get(session_id)
            return None if state is None else dataclasses.replace(state, messages=[],
                                                                  saved_messages=0)

    async def acquire_lease_after(self, session_id: str, owner: str, until: float, *,
                                  now: float, known: int, replace: str | None = None
                                  ) -> tuple[SessionState, list[dict[str, Any]], int] | None:
        taken = await self.acquire_lease(session_id, owner, until, now=now, replace=replace)
        if taken is None:
            return None
        messages = taken.messages  # copied under the lock
        row = dataclasses.replace(taken, messages=[], saved_messages=0)
        return row, [dict(m) for m in messages[known:]], len(messages)

    async def renew_lease(self, session_id: str, owner: str, until: float) -> bool:
        with self._lock:
            state = self._sessions.get(session_id)
            if state is None or state.lease_owner != owner:
                return False
            state.lease_expires = until
            return True

    async def create_approval(self, request: ApprovalRequest) -> None:
        with self._lock:
            self._requests.setdefault(request.id, request)

    async def get_approval(
        self, request_id: str
    ) -> StoredApproval | None:
        with self._lock:
            request = self._requests.get(request_id)
            if request is None:
                return None
            return StoredApproval(request, self._answers.get(request_id), request_id in self._used)

    async def list_approvals(self, *, pending_only: bool = True,
                             session_id: str | None = None) -> Sequence[ApprovalRequest]:
        with self._lock:
            found = [r for r in self._requests.values()
                     if (not pending_only or r.id not in self._answers)
                     and (session_id is None or r.session_id == session_id)]
        return sorted(found, key=lambda r: r.created_at, reverse=True)

    async def answer_approval(self, answer: ApprovalAnswer) -> bool:
        with self._lock:
            request = self._requests.get(answer.request_id)
            if request is None or request.digest != answer.digest:
                return False
            if answer.request_id in self._answers:
                return False
            if request.quorum is not None and answer.approved:
                return False  # approved by votes only
            self._answers[answer.request_id] = answer
            return True

    async def add_approval_vote(self, vote: ApprovalVote) -> VoteOutcome:
        with self._lock:
            request = self._requests.get(vote.request_id)
            if request is None or request.quorum is None or request.digest != vote.digest \
                    or vote.request_id in self._answers:
                return VoteOutcome(VoteState.CLOSED,
                                   tuple(self._votes.get(vote.request_id, ())))
            votes = self._votes.setdefault(vote.request_id, [])
            if any(v.voter == vote.voter for v in votes):
                return VoteOutcome(VoteState.DUPLICATE, tuple(votes))
            votes.append(vote)
            decided = tally(votes, request.quorum.required)
            if decided is not None:
                self._answers[vote.request_id] = decided
            return VoteOutcome(VoteState.RECORDED, tuple(votes), decided)

    async def list_approval_votes(self, request_id: str) -> Sequence[ApprovalVote]:
        with self._lock:
            return tuple(self._votes.get(request_id, ()))

    async def consume_approval(self, request_id: str, digest: str) -> ApprovalAnswer | None:
        with self._lock:
            answer = self._answers.get(request_id)
            if answer is None or answer.digest != digest or request_id in self._used:
                return None
            self._used.add(request_id)
            if answer.approved:
                request = self._requests[request_id]
                self._advance(request.session_id, request.call_id, LedgerState.APPROVED, digest)
            return answer

    def _advance(self, session_id: str, call_id: str, state: LedgerState, digest: str) -> None:
        current = self._ledger.get((session_id, call_id))
        if may_advance(current.state if current else None, state):
            self._ledger[(session_id, call_id)] = LedgerEntry(session_id, call_id, state, digest,
                                                              None, datetime.now(UTC))

    async def advance_execution(self, session_id: str, call_id: str, state: LedgerState,
                                digest: str) -> None:
        with self._lock:
            self._advance(session_id, call_id, state, digest)

    async def execution_state(self, session_id: str, call_id: str) -> LedgerEntry | None:
        with self._lock:
            return self._ledger.get((session_id, call_id))

    async def claim_execution(self, session_id: str, call_id: str, digest: str, *,
                              retry_unknown: bool = False, effect: EffectKey | None = None,
                              repeat_of: tuple[str, str] | None = None,
                              owner: str | None = None) -> Claim:
        key = (session_id, call_id)
        with self._lock:
            if owner is not None and (leased := self._sessions.get(session_id)) is not None:
                fence_claim(session_id, call_id, leased.lease_owner, owner)
            if effect is not None:
                held = self._effects.get(effect.key)
                holder = (held.session_id, held.call_id) if held else None
                holder_entry = self._ledger.get(holder) if holder else None
                move = effect_move(holder, key, holder_entry.state if holder_entry else None,
                                   repeat_of, retry_unknown=retry_unknown)
                if move is EffectMove.DUPLICATE:
                    assert held is not None
                    return Claim(ClaimState.DUPLICATE,
                                 holder_entry.result if holder_entry else None,
                                 effect=self._effect_entry(held))
                now = datetime.now(UTC)
                if held is None:
                    self._effects[effect.key] = EffectEntry(
                        effect.key, effect.display, effect.scope.value, effect.tool,
                        session_id, call_id, None, created_at=now, updated_at=now,
                        arguments=_copied(effect.arguments), sensitive=effect.sensitive)
                elif move is not EffectMove.OWN:
                    self._effects[effect.key] = dataclasses.replace(
                        held, session_id=session_id, call_id=call_id, updated_at=now,
                        resolved_by=None, resolution_note=None,
                        repeats=held.repeats + (move is EffectMove.REPEAT),
                        arguments=_copied(effect.arguments), sensitive=effect.sensitive)
            entry = self._ledger.get(key)
            new, answer = claim_transition(entry.state if entry else None,
                                           retry_unknown=retry_unknown)
            token = None
            if new is not None:
                self._ledger[key] = LedgerEntry(session_id, call_id, new,
                                                entry.digest if entry else digest, None,
                                                datetime.now(UTC))
                if new is LedgerState.CLAIMED:
                    token = self._claim_tokens[key] = new_claim_token()
            return Claim(answer, entry.result if entry else None, token)

    def _effect_entry(self, held: EffectEntry) -> EffectEntry:
        entry = self._ledger.get((held.session_id, held.call_id))
        return dataclasses.replace(
            held, state=entry.state if entry else None, result=entry.result if entry else None,
            updated_at=entry.updated_at if entry else held.updated_at)

    async def effect_state(self, key: str) -> EffectEntry | None:
        with self._lock:
            held = self._effects.get(key)
            return self._effect_entry(held) if held is not None else None

    async def list_effects(self, *, unsettled_only: bool = False) -> Sequence[EffectEntry]:
        with self._lock:
            entries = [self._effect_entry(e) for e in self._effects.values()]
        if unsettled_only:
            entries = [e for e in entries
                       if e.state in (LedgerState.CLAIMED, LedgerState.UNKNOWN)]
        return sorted(entries, key=lambda e: e.created_at or datetime.min.replace(tzinfo=UTC),
                      reverse=True)

    async def resolve_effect(self, key: str, *, done: bool, by: str,
                             note: str = "") -> EffectEntry | None:
        with self._lock:
            held = self._effects.get(key)
            if held is None:
                return None
            call = (held.session_id, held.call_id)
            entry = self._ledger.get(call)
            if entry is None or entry.state not in (LedgerState.CLAIMED, LedgerState.UNKNOWN):
                raise ConflictError(f"effect {key[:12]}… is not unsettled "
                                    f"({entry.state.value if entry else 'never claimed'})")
            if entry.state is LedgerState.CLAIMED:
                owner = self._sessions.get(held.session_id)
                refuse_while_running(key, held.session_id,
                                     owner.lease_owner if owner else None,
                                     owner.lease_expires if owner else None)
            result = resolution_result(held.call_id, held.tool, done=done, by=by, note=note)
            self._ledger[call] = LedgerEntry(held.session_id, held.call_id, settled_state(result),
                                             entry.digest, result, datetime.now(UTC))
            self._claim_tokens.pop(call, None)
            self._effects[key] = dataclasses.replace(held, resolved_by=by,
                                                     resolution_note=note)
            return self._effect_entry(self._effects[key])

    async def settle_execution(self, session_id: str, call_id: str, result: ToolResult,
                               token: str) -> bool:
        key = (session_id, call_id)
        with self._lock:
            entry = self._ledger.get(key)
            if entry is None or entry.state is not LedgerState.CLAIMED or \
                    self._claim_tokens.get(key) != token:
                return False
            self._ledger[key] = LedgerEntry(session_id, call_id, settled_state(result),
                                            entry.digest, result, datetime.now(UTC))
            return True

    async def list_unknown_executions(self) -> Sequence[tuple[str, str]]:
        with self._lock:
            return [k for k, e in self._ledger.items()
                    if e.state in (LedgerState.CLAIMED, LedgerState.UNKNOWN)]

    async def append_audit(self, type: str, session_id: str, at: float,
                           data: Mapping[str, Any]) -> AuditRecord:
        return self._append_audit([(type, session_id, at, data)])

    async def append_audit_many(
            self, entries: Sequence[tuple[str, str, float, Mapping[str, Any]]]) -> None:
        if entries:
            self._append_audit(entries)

    def _append_audit(
            self, entries: Sequence[tuple[str, str, float, Mapping[str, Any]]]) -> AuditRecord:
        """Chain *entries* in order under one lock; the last record."""
        with self._lock:
            return self._chain(entries)

    def _chain(self, entries: Sequence[tuple[str, str, float, Mapping[str, Any]]]
               ) -> AuditRecord:
        """Chain *entries* after the head as the other stores chain them (format 3, one hash
        per batch; one record alone: format 1); the last record."""
        seq, prev = self._audit_head
        # one serialisation for the batch, kept as the bytes hashed: what is read back is
        # what was hashed, whatever the caller does with its dictionaries after
        body = pack_batch(entries)
        if len(entries) == 1:
            type, session_id, at, data = entries[0]
            digest = chain_hash(seq + 1, type, session_id, at, data, prev)
        else:
            digest = chain_batch(seq, prev, body)
        self._packed.append((seq + 1, prev, digest, body))
        self._audit_head = (seq + len(entries), digest)
        type, session_id, at, data = entries[-1]
        return AuditRecord(seq + len(entries), type, session_id, at, _copy(data), prev, digest)

    def _unpacked(self) -> list[AuditRecord]:
        """Every record kept, the batches appended since the last read unpacked."""
        if self._packed:
            audit = self._audit
            for first, prev, digest, body in self._packed:
                for i, (type, session_id, at, data) in enumerate(_unpack(body)):
                    audit.append(AuditRecord(first + i, type, session_id, at, data, prev,
                                             digest))
            self._packed.clear()
        return self._audit

    async def append_audit_at_head(self, type: str, session_id: str, at: float,
                                   data_for: Callable[[int, str], Mapping[str, Any]]
                                   ) -> AuditRecord:
        with self._lock:
            return self._chain([(type, session_id, at, data_for(*self._audit_head))])

    async def prune_audit(self, before: float, at: float,
                          data_for: Callable[[PrunePlan], Mapping[str, Any]]
                          ) -> PrunePlan | None:
        with self._lock:
            audit = self._unpacked()
            if not audit:
                return None
            unsettled = {k for k, e in self._ledger.items() if e.state not in FINAL_STATES}
            held = first_held(((r.seq, r.session_id, r.data) for r in audit), unsettled)
            cut = choose_cut([(r.seq, r.at, r.prev_hash) for r in audit if r.type == CHECKPOINT],
                             before, audit[0].seq, None if held is None else held[0])
            if cut is None:
                return None
            kept = next(i for i, r in enumerate(audit) if r.seq == cut[0])
            plan = PrunePlan(cut[0], cut[1], kept, held, cut[2])
            del audit[:kept]
            self._chain([(PRUNED, "", at, data_for(plan))])
            return plan

    async def prune_sessions(self, before: float) -> Sequence[str]:
        with self._lock:
            unsettled = {s for (s, _), e in self._ledger.items() if e.state not in FINAL_STATES}
            gone = ended_before(((s.session_id, s.status, s.updated_at)
                                 for s in self._sessions.values()), before, unsettled)
            for session_id in gone:
                del self._sessions[session_id]
                self._messages.pop(session_id, None)
            return gone

    async def audit_records(self, session_id: str | None = None) -> Sequence[AuditRecord]:
        with self._lock:
            return [r for r in self._unpacked()
                    if session_id is None or r.session_id == session_id]

    async def count_calls(self, principal_id: str, tool: str, since: float) -> int:
        with self._lock:
            return sum(1 for p, t, at in self._calls if p == principal_id and t == tool
                       and at >= since)

    async def record_call(self, principal_id: str, tool: str, at: float) -> None:
        with self._lock:
            self._calls.append((principal_id, tool, at))

    async def get_record(self, namespace: str, key: str) -> Mapping[str, Any] | None:
        with self._lock:
            value = self._records.get(namespace, {}).get(key)
            return None if value is None else dict(value)

    async def put_record(self, namespace: str, key: str, value: Mapping[str, Any]) -> None:
        with self._lock:
            self._records.setdefault(namespace, {})[key] = dict(value)

    async def create_record(self, namespace: str, key: str, value: Mapping[str, Any]) -> bool:
        with self._lock:
            records = self._records.setdefault(namespace, {})
            if key in records:
                return False
            records[key] = dict(value)
            return True

    async def list_records(self, namespace: str) -> Sequence[tuple[str, Mapping[str, Any]]]:
        with self._lock:
            return sorted((k, dict(v)) for k, v in self._records.get(namespace, {}).items())

    async def put_credential(self, entry: CredentialEntry) -> None:
        with self._lock:
            key = (entry.principal, entry.resource, entry.issuer, entry.kind)
            self._credentials[key] = dataclasses.replace(entry, meta=dict(entry.meta))

    async def get_credentials(self, principal: str, resource: str,
                              kind: str) -> Sequence[CredentialEntry]:
        with self._lock:
            found = [e for (p, r, _, k), e in self._credentials.items()
                     if (p, r, k) == (principal, resource, kind)]
        return sorted(found, key=lambda e: -e.updated_at)

    async def delete_credentials(self, principal: str, resource: str, *,
                                 issuer: str | None = None, kind: str | None = None) -> int:
        with self._lock:
            doomed = [key for key in self._credentials
                      if key[:2] == (principal, resource) and issuer in (None, key[2])
                      and kind in (None, key[3])]
            for key in doomed:
                del self._credentials[key]
        return len(doomed)

    async def list_credentials(self, principal: str | None = None) -> Sequence[CredentialEntry]:
        with self._lock:
            return [e for key, e in sorted(self._credentials.items())
                    if principal in (None, key[0])]

    async def close(self) -> None:
        return None


def _resumable(state: SessionState, waiting: set[str], now: float) -> bool:
    """Suspended with every approval answered, or running under a lapsed lease."""
    if state.lease_owner is not None and state.lease_expires is not None and \
            state.lease_expires >= now:
        return False
    if state.status == "suspended":
        return state.session_id not in waiting
    return state.status == "running" and state.lease_owner is not None


def _copied(arguments: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A deep copy, as the other stores' JSON round trip gives: a caller mutating the
    arguments it passed changes nothing stored."""
    return None if arguments is None else json.loads(canonical_json(dict(arguments)))


def _copy(data: Mapping[str, Any]) -> dict[str, Any]:
    return dict(data)


def _unpack(body: bytes) -> list[list[Any]]:
    """The records of a packed batch (:func:`anfitrion._chain.pack_batch`), as stored."""
    rows: list[list[Any]] = json.loads(body.decode("utf-8", "surrogatepass"))
    return rows
