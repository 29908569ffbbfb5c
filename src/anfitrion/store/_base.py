"""The store protocol and the records it keeps."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol, cast, runtime_checkable

from .._approvals import ApprovalAnswer, ApprovalRequest, ApprovalVote
from .._conversation import ToolResult
from .._effects import EffectKey

__all__ = [
    "ApprovalStore",
    "ApprovalWatchStore",
    "AuditRecord",
    "AuditStore",
    "AuditTrailStore",
    "CallCounterStore",
    "Claim",
    "ClaimState",
    "CredentialEntry",
    "CredentialStore",
    "EffectEntry",
    "FileStore",
    "LedgerEntry",
    "LedgerState",
    "LedgerStore",
    "MigratingStore",
    "PrunePlan",
    "RecordStore",
    "SessionAuditStore",
    "SessionState",
    "SessionStore",
    "Store",
    "StoredApproval",
    "VoteOutcome",
    "VoteState",
    "session_audit_role",
]


@dataclass
class SessionState:
    """Everything needed to resume a session in another process.

    Attributes:
        data: the session as plain JSON data, without its messages (owned by
            :mod:`anfitrion._host`).
        version: optimistic-concurrency version; saving with a stale version conflicts.
        messages: the transcript as plain JSON data, one mapping per message.
        saved_messages: how many of *messages* the store already holds unchanged. A save
            writes only ``messages[saved_messages:]`` in place of whatever was stored from that
            point on, so saving a long session costs what changed, not its length. A state
            with no messages leaves the stored ones as they are.
    """

    session_id: str
    principal_id: str
    status: str
    data: Mapping[str, Any]
    version: int = 0
    updated_at: datetime | None = None
    messages: Sequence[Mapping[str, Any]] = field(default_factory=list)
    saved_messages: int = 0
    lease_owner: str | None = None
    """Who runs the session now (``host/pidns:pid:token``); ``None`` when nobody does."""
    lease_expires: float | None = None
    """Until when (epoch seconds) the lease holds unless renewed; a lapsed lease is free."""


class ClaimState(StrEnum):
    CLAIMED = "claimed"
    """Claimed now by the caller: it must run the call and settle it."""
    DONE = "done"
    """Already ran and settled; ``result`` holds what it returned."""
    FAILED = "failed"
    """Already ran and failed; ``result`` holds the error result."""
    UNKNOWN = "unknown"
    """Claimed earlier and never settled: the side effect may or may not have happened."""
    DUPLICATE = "duplicate"
    """Not claimed: the call's effect key belongs to another call (``effect`` says which and
    how it stands: done — ``result`` holds what it returned —, unknown, or running)."""


@dataclass(frozen=True, slots=True)
class EffectEntry:
    """One reserved effect key and where the call holding it stands.

    ``state`` is the holding call's ledger state (``claimed``: running, or its run died;
    ``done``; ``failed``: it did not happen, the key is free again; ``unknown``).
    """

    key: str
    display: str
    scope: str
    tool: str
    session_id: str
    call_id: str
    state: LedgerState | None
    result: ToolResult | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    """When the holding call last moved (for done: when it happened)."""
    resolved_by: str | None = None
    resolution_note: str | None = None
    repeats: int = 0
    """How many times a person approved running it again."""
    arguments: Mapping[str, Any] | None = None
    """The exact arguments of the holding call (a reconcile hook needs them); ``None`` for an
    effect reserved before migration ``0007_effect_arguments``. Show them only redacted."""
    sensitive: frozenset[str] = frozenset()
    """The argument names the tool declares sensitive (never shown)."""


@dataclass(frozen=True, slots=True)
class Claim:
    """A claimer's answer. ``token`` (for ``claimed``) is what settling must present: a run
    whose claim was taken over since cannot settle, so ``unknown`` is never overwritten."""

    state: ClaimState
    result: ToolResult | None = None
    token: str | None = None
    effect: EffectEntry | None = None


class LedgerState(StrEnum):
    """Where one side-effecting call is in the execution ledger.

    ``proposed → decided → (approved) → claimed → done | failed | unknown``. The first three
    only move forward; ``claimed`` is entered once, atomically; ``unknown`` is a claim found
    unsettled by a later claimer (its process died, or is still running).
    """

    PROPOSED = "proposed"
    DECIDED = "decided"
    APPROVED = "approved"
    CLAIMED = "claimed"
    DONE = "done"
    FAILED = "failed"
    UNKNOWN = "unknown"


PRE_CLAIM: tuple[LedgerState, ...] = (LedgerState.PROPOSED, LedgerState.DECIDED,
                                      LedgerState.APPROVED)
"""States from which a call may still be claimed, in order."""


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One row of the execution ledger."""

    session_id: str
    call_id: str
    state: LedgerState
    digest: str
    result: ToolResult | None = None
    updated_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One stored, redacted, hash-chained audit event."""

    seq: int
    type: str
    session_id: str
    at: float
    data: Mapping[str, Any] = field(default_factory=dict)
    prev_hash: str = ""
    hash: str = ""


@dataclass(frozen=True, slots=True)
class StoredApproval:
    """What :meth:`ApprovalStore.get_approval` returns: a request as the store keeps it."""

    request: ApprovalRequest
    answer: ApprovalAnswer | None = None
    """The answer recorded (first one wins), if any."""
    used: bool = False
    """Whether the answer was consumed (:meth:`ApprovalStore.consume_approval`: once)."""


class VoteState(StrEnum):
    RECORDED = "recorded"
    """The vote counts (and may have decided the request: see ``answer``)."""
    DUPLICATE = "duplicate"
    """This person has voted on this request already: the second vote is not counted."""
    CLOSED = "closed"
    """No such request, it needs no quorum, its digest differs, or it was decided."""


@dataclass(frozen=True, slots=True)
class VoteOutcome:
    """What :meth:`ApprovalStore.add_approval_vote` did: the votes so far, in the order cast,
    and the answer they decided (recorded in the same transaction), if they decided it now."""

    state: VoteState
    votes: tuple[ApprovalVote, ...] = ()
    answer: ApprovalAnswer | None = None


@runtime_checkable
class SessionStore(Protocol):
    """Sessions, their transcripts and their leases (the session runtime's role)."""

    async def save_session(self, state: SessionState) -> SessionState:
        """Insert or update; raises ConflictError if *state.version* is stale."""
        ...

    async def load_session(self, session_id: str) -> SessionState | None: ...

    async def list_sessions(self, status: str | None = None) -> Sequence[SessionState]: ...

    async def claim_resumable(self, owner: str | None = None,
                              lease_seconds: float = 60.0) -> SessionState | None:
        """Take one session ready to continue, leasing it to *owner* and marking it running.

        Ready: suspended with every approval answered, or running under a lease that lapsed
        (its process died mid-turn). Concurrent workers never get the same session; resume it
        with ``Host.resume(session_id, force=True)`` under the same owner.
        """
        ...

    async def acquire_lease(self, session_id: str, owner: str, until: float, *, now: float,
                            replace: str | None = None) -> SessionState | None:
        """Lease the session to *owner* until *until*: only if nobody holds a live lease
        (none, lapsed before *now*, already *owner*'s, or held by *replace* — an owner known
        to be dead). Bumps the version (fencing every earlier holder's saves) and marks the
        session running. ``None`` if another owner holds it, or there is no such session."""
        ...

    async def renew_lease(self, session_id: str, owner: str, until: float) -> bool:
        """Extend *owner*'s lease; False if the lease is no longer theirs."""
        ...


@runtime_checkable
class ApprovalStore(Protocol):
    """Approval requests, their answers and quorum votes (the gate's and every door's role)."""

    async def create_approval(self, request: ApprovalRequest) -> None: ...

    async def get_approval(
        self, request_id: str
    ) -> StoredApproval | None:
        """The request, its answer (if any) and whether the answer was used."""
        ...

    async def list_approvals(self, *, pending_only: bool = True,
                             session_id: str | None = None) -> Sequence[ApprovalRequest]: ...

    async def answer_approval(self, answer: ApprovalAnswer) -> bool:
        """Record an answer once: False if already answered or the digest does not match.

        A request that needs a quorum takes no single approving answer (False): it is approved
        by votes only (:meth:`add_approval_vote`); a denial or a withdrawal is recorded.
        """
        ...

    async def add_approval_vote(self, vote: ApprovalVote) -> VoteOutcome:
        """Record one person's vote on a request that needs a quorum, atomically.

        A second vote by the same voter is ``duplicate`` and changes nothing. In the same
        transaction the votes are tallied (:func:`anfitrion.store._votes.tally`): a rejection,
        or the required number of approvals, records the request's answer (compare-and-set,
        so concurrent votes record one answer and lose no vote).
        """
        ...

    async def list_approval_votes(self, request_id: str) -> Sequence[ApprovalVote]:
        """The votes on *request_id*, in the order they were cast."""
        ...

    async def consume_approval(self, request_id: str, digest: str) -> ApprovalAnswer | None:
        """Mark the answer used (once) and return it; None if absent, used or mismatched.

        In the same transaction, an approving answer moves the call's ledger entry to
        ``approved`` (with *digest*), so a crash right after cannot lose the approval.
        """
        ...


@runtime_checkable
class LedgerStore(Protocol):
    """The execution ledger and the effect keys it reserves: every side-effecting call runs
    at most once (the gate's, the drafts' and the effect resolutions' role)."""

    async def claim_execution(self, session_id: str, call_id: str, digest: str, *,
                              retry_unknown: bool = False, effect: EffectKey | None = None,
                              repeat_of: tuple[str, str] | None = None,
                              owner: str | None = None) -> Claim:
        """Atomically claim a call for execution (compare-and-set).

        With *retry_unknown* (idempotent tools), an entry whose outcome is unknown — or a
        claim never settled — is claimed again by this caller, who runs it once more.

        With *effect*, the effect key is reserved for this call in the same transaction: a
        key held by another call answers ``duplicate`` and claims nothing — unless that call
        failed (the effect did not happen: the key moves to this call), or it is done and
        *repeat_of* names it (a person approved running it again).

        With *owner* (the run's lease owner), the claim is fenced in the same transaction:
        if another owner holds the session's lease, nothing is claimed or reserved.

        Raises:
            ConflictError: *owner* is given and another owner holds the session's lease.
        """
        ...

    async def effect_state(self, key: str) -> EffectEntry | None:
        """The effect reserved under *key* (an :class:`~anfitrion._effects.EffectKey` key)."""
        ...

    async def list_effects(self, *, unsettled_only: bool = False) -> Sequence[EffectEntry]:
        """Reserved effects, newest first; *unsettled_only*: those claimed or unknown."""
        ...

    async def resolve_effect(self, key: str, *, done: bool, by: str,
                             note: str = "") -> EffectEntry | None:
        """Settle an effect whose outcome is unknown (or whose run died) as a person (or a
        reconcile hook) found it: its call's ledger entry moves to ``done`` or ``failed``
        with a result saying who resolved it and why. ``None`` if there is no such key.

        Raises:
            ConflictError: the effect is not unsettled (done, failed, or never claimed).
        """
        ...

    async def settle_execution(self, session_id: str, call_id: str, result: ToolResult,
                               token: str) -> bool:
        """Record the outcome of the claim *token*; False (nothing written) if the entry is
        no longer claimed under that token (another run took it over: it stays unknown)."""
        ...

    async def advance_execution(self, session_id: str, call_id: str, state: LedgerState,
                                digest: str) -> None:
        """Record ``proposed``/``decided``/``approved``; never moves an entry backwards."""
        ...

    async def execution_state(self, session_id: str, call_id: str) -> LedgerEntry | None: ...

    async def list_unknown_executions(self) -> Sequence[tuple[str, str]]:
        """(session id, call id) of claims never settled: ``claimed`` or ``unknown``."""
        ...


@runtime_checkable
class AuditStore(Protocol):
    """The hash-chained audit log (the recorder's and the readers' role). The store chains
    each record (:func:`anfitrion._audit.chain_hash`) in one writer order."""

    async def append_audit(self, type: str, session_id: str, at: float,
                           data: Mapping[str, Any]) -> AuditRecord: ...

    async def append_audit_many(
            self, entries: Sequence[tuple[str, str, float, Mapping[str, Any]]]) -> None:
        """Append ``(type, session_id, at, data)`` records in order, in one transaction."""
        ...

    async def audit_records(self, session_id: str | None = None) -> Sequence[AuditRecord]: ...


@runtime_checkable
class CallCounterStore(Protocol):
    """Counted calls for rate limits (:mod:`anfitrion.policy._ratelimit`)."""

    async def count_calls(self, principal_id: str, tool: str, since: float) -> int: ...

    async def record_call(self, principal_id: str, tool: str, at: float) -> None: ...


@runtime_checkable
class RecordStore(Protocol):
    """Small named records: namespace + key -> JSON (MCP definition pins, mail drafts, ...)."""

    async def get_record(self, namespace: str, key: str) -> Mapping[str, Any] | None: ...

    async def put_record(self, namespace: str, key: str, value: Mapping[str, Any]) -> None: ...

    async def create_record(self, namespace: str, key: str, value: Mapping[str, Any]) -> bool:
        """Store *value* under *key* unless a record is there already (insert if absent).

        True if this call created it; False, writing nothing, if the key was taken. Atomic
        across every handle on the store (processes sharing a SQLite file or a database):
        of callers racing for one key, exactly one gets True."""
        ...

    async def list_records(self, namespace: str) -> Sequence[tuple[str, Mapping[str, Any]]]: ...


@runtime_checkable
class Store(SessionStore, ApprovalStore, LedgerStore, AuditStore, CallCounterStore, RecordStore,
            Protocol):
    """What the host needs from durable storage: every role, in one backend. Every method is
    safe under concurrency. Code that needs one role types against that role's protocol."""

    async def close(self) -> None: ...


class DraftStore(RecordStore, LedgerStore, Protocol):
    """The roles of propose-then-confirm (:class:`anfitrion.drafts.Drafts`): the drafts as
    records, each commit claimed and settled in the ledger so it runs once."""


class AuditedRecordStore(RecordStore, AuditStore, Protocol):
    """The roles of a change to a record that is audited (an entitlement granted or revoked)."""


class AnswerStore(ApprovalStore, AuditedRecordStore, Protocol):
    """The roles of answering an approval request (:mod:`anfitrion.answers`): the requests
    and votes, the audit, and the entitlements records an answer is checked against."""


class ResolutionStore(LedgerStore, SessionStore, AuditStore, Protocol):
    """The roles of settling an unknown effect by hand: the ledger, the session whose lease
    is released, and the audit of who settled it."""


@runtime_checkable
class SessionAuditStore(Protocol):
    """An optional role: a session's save and the audit records buffered with it, in one
    transaction (the SQLite and PostgreSQL stores). The session runtime uses it where the store
    class has it: one commit where it would take two."""

    async def save_session_and_audit(
            self, state: SessionState,
            entries: Sequence[tuple[str, str, float, Mapping[str, Any]]]) -> SessionState:
        """:meth:`SessionStore.save_session` and :meth:`AuditStore.append_audit_many` in one
        transaction; if the save fails (a conflict), neither is written."""
        ...


def _plays(store: object, role: type) -> bool:
    """Whether the class of *store* plays the optional *role* (a runtime-checkable protocol).

    Checked on the class (``issubclass``), not the instance: a wrapper that forwards unknown
    attributes to a store inside it does not play a role by forwarding, so its own methods are
    the ones called. The protocol check walks the class: once per class and role."""
    key = (type(store), role)
    plays = _PLAYS.get(key)
    if plays is None:
        plays = _PLAYS[key] = issubclass(type(store), role)
    return plays


_PLAYS: dict[tuple[type, type], bool] = {}


def session_audit_role(store: object) -> SessionAuditStore | None:
    """*store* as a :class:`SessionAuditStore` when its class plays the role, else ``None``
    (:func:`_plays`)."""
    return cast(SessionAuditStore, store) if _plays(store, SessionAuditStore) else None

Settlement = tuple[str, str, ToolResult, str]
"""One write's outcome to record: (session id, call id, result, claim token)."""


@runtime_checkable
class SettleSaveStore(Protocol):
    """An optional role: the settlements of writes that just ran, a session's save and the
    audit records buffered with it, in one transaction (the SQLite and PostgreSQL stores).
    :meth:`~anfitrion.GatedSession.submit` uses it where the store class has it: the write's
    settlement goes with the save that follows it at once — one commit where it would take
    two."""

    async def settle_and_save_session(
            self, settlements: Sequence[Settlement], state: SessionState,
            entries: Sequence[tuple[str, str, float, Mapping[str, Any]]]) -> SessionState:
        """:meth:`LedgerStore.settle_execution` of each settlement, then
        :meth:`SessionAuditStore.save_session_and_audit`, in one transaction.

        Raises:
            ConflictError: a settlement's claim was taken over by another run (nothing is
                written), or the save conflicts (nothing is written either).
        """
        ...


def settle_save_role(store: object) -> SettleSaveStore | None:
    """*store* as a :class:`SettleSaveStore` when its class plays the role, else ``None``
    (:func:`_plays`)."""
    return cast(SettleSaveStore, store) if _plays(store, SettleSaveStore) else None

AuditEntry = tuple[str, str, float, Mapping[str, Any]]
"""One audit record to append: (type, session id, at, data)."""


@runtime_checkable
class LeaseTailStore(Protocol):
    """An optional role: a session's row without its messages, and a lease taken with only the
    messages a process does not hold yet (all three stores). A runtime that keeps a
    conversation it released (a gateway replica, whose every request takes the conversation's
    lease and gives it back) continues it from there instead of reading and rebuilding every
    message of it each time."""

    async def acquire_lease_after(self, session_id: str, owner: str, until: float, *,
                                  now: float, known: int, replace: str | None = None
                                  ) -> tuple[SessionState, list[dict[str, Any]], int] | None:
        """:meth:`Store.acquire_lease`, answering ``(state, tail, total)``: the session as
        leased with no messages, its messages from index *known* on, and how many it holds
        in all (``-1`` when its stored indexes are not ``0 … total - 1``). ``None`` as
        ``acquire_lease``."""
        ...

    async def session_row(self, session_id: str) -> SessionState | None:
        """:meth:`Store.load_session` without its messages (``messages`` empty,
        ``saved_messages`` 0): whose it is, its status and lease, never a session to save."""
        ...


def lease_tail_role(store: object) -> LeaseTailStore | None:
    """*store* as a :class:`LeaseTailStore` when its class plays the role, else ``None``
    (:func:`_plays`)."""
    return cast(LeaseTailStore, store) if _plays(store, LeaseTailStore) else None


@runtime_checkable
class ClaimAuditStore(Protocol):
    """An optional role: a write's claim and the audit records that must be stored before
    its effect, in one transaction (the SQLite and PostgreSQL stores). The gate uses it where
    the store class has it: one commit where it would take two."""

    async def claim_execution_and_audit(
            self, session_id: str, call_id: str, digest: str, *,
            audit: Callable[[Claim], Sequence[AuditEntry]], retry_unknown: bool = False,
            effect: EffectKey | None = None, repeat_of: tuple[str, str] | None = None,
            owner: str | None = None) -> Claim:
        """:meth:`LedgerStore.claim_execution`, and in the same transaction
        :meth:`AuditStore.append_audit_many` of ``audit(claim)`` — the records as they are
        once the claim's outcome is known (a refused claim's records too). *audit* must be
        pure: it may run on the store's thread, and again if the transaction is retried.
        If the claim raises (a fenced :class:`ConflictError`), nothing is written."""
        ...


def claim_audit_role(store: object) -> ClaimAuditStore | None:
    """*store* as a :class:`ClaimAuditStore` when its class plays the role, else ``None``
    (:func:`_plays`)."""
    return cast(ClaimAuditStore, store) if _plays(store, ClaimAuditStore) else None


@runtime_checkable
class ApprovalWatchStore(Protocol):
    """An optional role: be woken when an approval request is answered, by any process (the
    PostgreSQL store, with ``LISTEN``/``NOTIFY``); without it a waiter polls."""

    def watch_approval(self, request_id: str) -> contextlib.AbstractAsyncContextManager[Any]:
        """A context whose value is woken when *request_id* is answered."""
        ...


@runtime_checkable
class MigratingStore(Protocol):
    """An optional role: a schema with migrations (the SQLite and PostgreSQL stores;
    ``anfitrion db``)."""

    async def migrate(self) -> list[str]:
        """Apply the pending migrations; the names applied now."""
        ...

    async def migration_status(self) -> list[tuple[str, str | None]]:
        """Every known migration and when it was applied (``None``: pending)."""
        ...


@runtime_checkable
class FileStore(Protocol):
    """An optional role: a store kept in a file of this machine (the SQLite store); its
    ``path`` (``":memory:"`` for none) is what a sandboxed server must never see."""

    @property
    def path(self) -> str: ...


@dataclass(frozen=True, slots=True)
class CredentialEntry:
    """One sealed OAuth credential: a principal's tokens (``kind="tokens"``) or a client
    registration (``kind="client"``) for one resource (an MCP server's URL) at one
    authorization server (*issuer*). *sealed* is the AES-GCM ciphertext (see
    :mod:`anfitrion.mcp.oauth`), never plain; *key_id* names the key that sealed it; *meta*
    holds what may be shown (scopes, expiry, client id) — never a token or a secret."""

    principal: str
    issuer: str
    resource: str
    kind: str
    key_id: str
    sealed: str
    meta: Mapping[str, Any] = field(default_factory=dict)
    updated_at: float = 0.0


@runtime_checkable
class CredentialStore(Protocol):
    """An optional role: OAuth credentials per (principal, issuer, resource, kind), sealed by the
    caller (the memory, SQLite and PostgreSQL stores have it)."""

    async def put_credential(self, entry: CredentialEntry) -> None:
        """Insert or replace the entry with the same principal, issuer, resource and kind."""
        ...

    async def get_credentials(self, principal: str, resource: str,
                              kind: str) -> Sequence[CredentialEntry]:
        """The entries of *principal* for *resource* and *kind*, newest first (one per
        issuer)."""
        ...

    async def delete_credentials(self, principal: str, resource: str, *,
                                 issuer: str | None = None, kind: str | None = None) -> int:
        """Delete the matching entries; how many there were."""
        ...

    async def list_credentials(self, principal: str | None = None) -> Sequence[CredentialEntry]:
        """Every entry (of *principal*), by principal, resource, issuer and kind."""
        ...


@dataclass(frozen=True, slots=True)
class PrunePlan:
    """What :meth:`AuditTrailStore.prune_audit` removed (or would have).

    Attributes:
        first_kept: the sequence number of the first record kept: a signed checkpoint, whose
            previous-hash link (*base_hash*) its signature covers.
        base_hash: the hash of the last record removed (the kept checkpoint links to it).
        removed: how many records were removed.
        held_by: ``(seq, session_id, call_id)`` of the first record of a call still unsettled
            (its ledger entry neither done nor failed), when one stopped the prune short.
        checkpoint_at: when the kept checkpoint was written (epoch seconds).
    """

    first_kept: int
    base_hash: str
    removed: int
    held_by: tuple[int, str, str] | None = None
    checkpoint_at: float = 0.0


@runtime_checkable
class AuditTrailStore(Protocol):
    """An optional role: signed checkpoints and retention of the audit log (the memory, SQLite
    and PostgreSQL stores have it; :mod:`anfitrion._audit_trail` uses it)."""

    async def append_audit_at_head(self, type: str, session_id: str, at: float,
                                   data_for: Callable[[int, str], Mapping[str, Any]]
                                   ) -> AuditRecord:
        """Append one record whose data depends on the record it follows: *data_for* gets the
        chain head (its seq and hash) under the head's lock, so the record links to exactly
        the head it was given (a checkpoint signs the head it follows)."""
        ...

    async def prune_audit(self, before: float, at: float,
                          data_for: Callable[[PrunePlan], Mapping[str, Any]]
                          ) -> PrunePlan | None:
        """Remove the records before the last checkpoint written before *before*, in one
        transaction with the record *data_for* makes of the plan (type ``audit.pruned``,
        appended at the head at *at*). Records of calls still unsettled are never removed:
        the cut moves back to the last checkpoint before the first of them. ``None`` when
        nothing can be removed (and nothing is written)."""
        ...

    async def prune_sessions(self, before: float) -> Sequence[str]:
        """Remove the sessions (and their transcripts) that ended (completed, failed, stopped,
        out of turns or budget) and were last saved before *before*, unless a call of theirs
        is unsettled; their ids. Suspended and running sessions are never removed."""
        ...
