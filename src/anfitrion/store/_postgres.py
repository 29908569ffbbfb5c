"""The PostgreSQL store: many host processes on many machines share one database.

psycopg 3 with an async connection pool (extra ``postgres``). Concurrency rules:

- sessions: optimistic versions (``UPDATE … WHERE version = %s``) — a stale writer conflicts;
- approvals: an answer is recorded by ``UPDATE … WHERE answer IS NULL`` (first one wins), and
  used once by ``UPDATE … WHERE used = 0``;
- ledger: a claim is one upsert (``INSERT … ON CONFLICT DO UPDATE``) that inserts the entry
  or moves it under its row lock, so one claimer wins and a second one sees ``claimed`` and
  reports ``unknown``; an advance is one upsert that only moves forward;
- audit: every append moves the one chain-head row under its row lock, so the hash chain has
  a single writer order across every process: one statement that moves the head only if it is
  still the one this process last wrote, else ``SELECT … FOR UPDATE`` on the head first.
  Within a process, appends waiting at the same time are written together (group commit);
- :meth:`PostgresStore.claim_resumable` hands suspended sessions whose approvals are all
  answered to workers with ``FOR UPDATE SKIP LOCKED``.

Example:
    >>> store = PostgresStore.from_url("postgresql://app@db/anfitrion")  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import anyio

from .._approvals import ApprovalAnswer, ApprovalRequest, ApprovalVote
from .._chain import chain_rows, head_free_parts
from .._conversation import ToolResult
from .._effects import EffectKey
from ..exceptions import ConflictError, MissingDependencyError, StoreError, map_exceptions
from ._base import (
    AuditEntry,
    AuditRecord,
    Claim,
    ClaimState,
    CredentialEntry,
    EffectEntry,
    LedgerEntry,
    LedgerState,
    PrunePlan,
    SessionState,
    Settlement,
    StoredApproval,
    VoteOutcome,
    VoteState,
)
from ._migrations import MIGRATIONS, MIGRATIONS_TABLE, pending
from ._rows import (
    CREDENTIAL_COLUMNS,
    EffectMove,
    advances_from,
    approval_row,
    approval_rows,
    audit_row,
    claim_state_sql,
    credential_row,
    dump_json,
    dump_result,
    effect_arguments,
    effect_move,
    effect_row,
    entry_row,
    fence_claim,
    first_readable,
    load_json,
    load_result,
    message_rows,
    new_claim_token,
    now_iso,
    record_value,
    refuse_while_running,
    resolution_result,
    session_row,
    session_rows,
    settled_state,
    settlement_conflict,
    tail_rows,
)

try:
    import psycopg
    from psycopg_pool import AsyncConnectionPool
except ImportError as exc:  # pragma: no cover - exercised on a bare install
    raise MissingDependencyError("postgres", exc.name or "psycopg") from exc

from ._retention import (
    CHECKPOINT,
    ENDED,
    FINAL_STATES,
    PRUNED,
    choose_cut,
    ended_before,
    first_held,
)
from ._sql import (
    APPROVAL,
    CLAIM_CANDIDATES,
    CLAIMABLE_SESSIONS,
    EFFECT_INSERT,
    EFFECT_TAKE_OVER,
    EFFECTS,
    EFFECTS_ORDER,
    LEASE,
    SESSION_COLUMNS,
    SESSION_ROW,
    SETTLE,
    TAIL_AND_SPAN,
    UNSETTLED_CALLS,
    UNSETTLED_EFFECTS,
    VOTES,
    approvals_query,
    for_postgres,
)
from ._votes import tally, vote_of
from ._wakeups import CHANNEL, ApprovalWatch, Listener

__all__ = ["PostgresStore"]

log = logging.getLogger("anfitrion.store")

_MIGRATION_LOCK = 0x616E6669  # "anfi": one migrator at a time across processes
_Conn = psycopg.AsyncConnection[Any]


def _pg_errors() -> contextlib.AbstractContextManager[None]:
    """The store's one exception mapping: a psycopg error is a :class:`StoreError`."""
    return map_exceptions({psycopg.Error: StoreError}, "PostgreSQL store")


class PostgresStore:
    """A :class:`~anfitrion.store.Store` in PostgreSQL.

    Args:
        conninfo: a libpq URL or connection string.
        min_size / max_size: connection pool bounds (per process).
        migrate: apply pending migrations on first use.
    """

    def __init__(self, conninfo: str, *, min_size: int = 1, max_size: int = 10,
                 migrate: bool = True) -> None:
        self.conninfo = conninfo
        self.min_size = min_size
        self.max_size = max_size
        self.auto_migrate = migrate
        self._pool: AsyncConnectionPool | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._migrated = False
        self._lock: asyncio.Lock | None = None
        self._lock_loop: asyncio.AbstractEventLoop | None = None
        self._audit_queue: list[_AuditAppend] = []
        self._audit_writing: asyncio.Future[None] | None = None  # done when writes stop
        self._audit_task: asyncio.Task[None] | None = None
        self._listener = Listener(conninfo)

    @classmethod
    def from_url(cls, url: str) -> PostgresStore:
        """``postgresql://user@host:port/db?pool_max=10&migrate=0`` (other parameters go to
        libpq, e.g. ``options=-csearch_path%3Dtenant``)."""
        parts = urlsplit(url)
        ours: dict[str, str] = {}
        theirs: list[tuple[str, str]] = []
        for key, value in parse_qsl(parts.query, keep_blank_values=True):
            (ours.__setitem__(key, value) if key in ("pool_min", "pool_max", "migrate")
             else theirs.append((key, value)))
        conninfo = urlunsplit(("postgresql", parts.netloc, parts.path, urlencode(theirs),
                               parts.fragment))
        return cls(conninfo, min_size=int(ours.get("pool_min", 1)),
                   max_size=int(ours.get("pool_max", 10)),
                   migrate=ours.get("migrate", "1") not in ("0", "false", "no"))

    @property
    def url(self) -> str:
        return self.conninfo

    # -- plumbing ------------------------------------------------------------------------------

    def _setup_lock(self, loop: asyncio.AbstractEventLoop) -> asyncio.Lock:
        """One lock per event loop for opening the pool and migrating: many sessions that
        start together open one pool and migrate once, not one each."""
        if self._lock is None or self._lock_loop is not loop:
            self._lock, self._lock_loop = asyncio.Lock(), loop
        return self._lock

    async def _get_pool(self) -> AsyncConnectionPool:
        loop = asyncio.get_running_loop()
        if self._pool is not None and self._loop is loop:
            return self._pool
        async with self._setup_lock(loop):
            if self._pool is None or self._loop is not loop:
                # a pool belongs to one event loop: run_sync() starts a new loop each time
                pool = AsyncConnectionPool(self.conninfo, min_size=self.min_size,
                                           max_size=self.max_size, open=False,
                                           kwargs={"autocommit": True})
                with _pg_errors():
                    await pool.open(wait=True)
                self._pool, self._loop = pool, loop
            return self._pool

    async def _ready(self) -> AsyncConnectionPool:
        pool = await self._get_pool()
        if not self._migrated:
            async with self._setup_lock(asyncio.get_running_loop()):
                if not self._migrated:
                    if self.auto_migrate:
                        await self._migrate(pool)
                    elif any(at is None for _, at in await self._migration_status(pool)):
                        raise StoreError("the store needs migrations: run "
                                         "`anfitrion db migrate`")
                    self._migrated = True
        return pool

    # -- migrations ----------------------------------------------------------------------------

    async def migrate(self) -> list[str]:
        """Apply pending migrations (one migrator at a time); return the names applied now."""
        return await self._migrate(await self._get_pool())

    async def _migrate(self, pool: AsyncConnectionPool) -> list[str]:
        done: list[str] = []
        with _pg_errors():
            async with pool.connection() as conn, conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
                await conn.execute(MIGRATIONS_TABLE)
                cur = await conn.execute("SELECT name FROM anfitrion_migrations")
                applied = {r[0] for r in await cur.fetchall()}
                for migration in pending(applied):
                    for statement in migration.statements:
                        await conn.execute(statement)  # type: ignore[arg-type]
                    await conn.execute("INSERT INTO anfitrion_migrations (name, applied_at) "
                                       "VALUES (%s, %s)", (migration.name, now_iso()))
                    done.append(migration.name)
        self._migrated = True
        return done

    async def migration_status(self) -> list[tuple[str, str | None]]:
        return await self._migration_status(await self._get_pool())

    async def _migration_status(self, pool: AsyncConnectionPool) -> list[tuple[str, str | None]]:
        with _pg_errors():
            async with pool.connection() as conn:
                await conn.execute(MIGRATIONS_TABLE)
                cur = await conn.execute("SELECT name, applied_at FROM anfitrion_migrations")
                applied = {r[0]: r[1] for r in await cur.fetchall()}
        return [(m.name, applied.get(m.name)) for m in MIGRATIONS]

    @contextlib.asynccontextmanager
    async def _connection(self, *, transaction: bool = False) -> AsyncIterator[_Conn]:
        """A pooled connection (in a transaction with *transaction*), the store migrated, and
        psycopg's errors raised as :class:`StoreError` (ours pass through)."""
        pool = await self._ready()
        with _pg_errors():
            async with pool.connection() as conn:
                if not transaction:
                    yield conn
                    return
                async with conn.transaction():
                    yield conn

    async def _fetch(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        async with self._connection() as conn:
            cur = await conn.execute(sql, args)  # type: ignore[arg-type]
            return await cur.fetchall() if cur.description else []

    async def _rowcount(self, sql: str, args: Sequence[Any] = ()) -> int:
        async with self._connection() as conn:
            cur = await conn.execute(sql, args)  # type: ignore[arg-type]
            return int(cur.rowcount)

    # -- sessions ------------------------------------------------------------------------------

    async def save_session(self, state: SessionState) -> SessionState:
        return await self.save_session_and_audit(state, ())

    async def save_session_and_audit(
            self, state: SessionState,
            entries: Sequence[tuple[str, str, float, Mapping[str, Any]]]) -> SessionState:
        """:meth:`save_session` and :meth:`append_audit_many` in one transaction (one commit
        instead of two: the session runtime saves a session with the records buffered so far,
        and a run's end with its ``run.ended`` record). If the save fails, neither is written.

        The records are chained last, just before the commit, so the chain head's row lock
        (which orders every appender of every process) is held for one statement.
        """
        return await self.settle_and_save_session((), state, entries)

    async def settle_and_save_session(
            self, settlements: Sequence[Settlement], state: SessionState,
            entries: Sequence[tuple[str, str, float, Mapping[str, Any]]]) -> SessionState:
        """The writes' settlements, then :meth:`save_session_and_audit`, in one transaction
        (one commit instead of two: a write's settlement goes with the save that follows it).
        If a settlement's claim was taken over or the save conflicts, nothing is written."""
        data, now = dump_json(state.data), now_iso()
        new = [(state.session_id, state.saved_messages + i, dump_json(m))
               for i, m in enumerate(state.messages[state.saved_messages:])]
        rows = [(kind, session_id, at, dump_json(fields))
                for kind, session_id, at, fields in entries]
        settles = [(settled_state(result).value, dump_result(result), now, session_id,
                    call_id, token) for session_id, call_id, result, token in settlements]
        # a save that writes nothing but the session's row (a lease given back) is one
        # statement: no transaction to open and commit around it
        alone = not settles and not rows and not new and state.version > 0
        async with self._connection(transaction=not alone) as conn:
            for settle in settles:
                cur = await conn.execute(_SETTLE, settle)
                if cur.rowcount != 1:
                    raise ConflictError(settlement_conflict(settle[3], settle[4]))
            await _save_session(conn, state, data, new, now)
            if rows:  # last: the head stays locked only for this statement and the commit
                await _chain_on(conn, rows)
        messages = state.messages or await self._messages(state.session_id)
        return SessionState(state.session_id, state.principal_id, state.status, state.data,
                            state.version + 1, datetime.fromisoformat(now), messages,
                            len(messages), state.lease_owner, state.lease_expires)

    async def _messages(self, session_id: str) -> list[Any]:
        rows = await self._fetch("SELECT idx, data FROM anfitrion_session_messages "
                                 "WHERE session_id = %s ORDER BY idx", (session_id,))
        return message_rows(session_id, rows)

    async def _with_messages(self, state: SessionState) -> SessionState:
        messages = await self._messages(state.session_id)
        return dataclasses.replace(state, messages=messages, saved_messages=len(messages))

    async def load_session(self, session_id: str) -> SessionState | None:
        row = await self.session_row(session_id)
        return None if row is None else await self._with_messages(row)

    async def session_row(self, session_id: str) -> SessionState | None:
        rows = await self._fetch(_SESSION_ROW, (session_id,))
        return _session(rows[0]) if rows else None

    async def list_sessions(self, status: str | None = None) -> Sequence[SessionState]:
        if status is None:
            rows = await self._fetch(f"SELECT {SESSION_COLUMNS} FROM anfitrion_sessions "
                                     "ORDER BY updated_at DESC")
        else:
            rows = await self._fetch(f"SELECT {SESSION_COLUMNS} FROM anfitrion_sessions "
                                     "WHERE status = %s ORDER BY updated_at DESC", (status,))
        return session_rows(rows)

    async def claim_resumable(self, owner: str | None = None,
                              lease_seconds: float = 60.0) -> SessionState | None:
        """Take one session ready to continue for this worker (see :class:`Store`).

        The session is marked ``running`` and leased (its version bumped) inside the same
        transaction that locked it with ``FOR UPDATE SKIP LOCKED``: concurrent workers each get
        a different session, never the same one. Resume it with
        ``Host.resume(id, force=True)`` under the same owner.
        """
        at = time.time()
        until = at + lease_seconds if owner else None
        async with self._connection(transaction=True) as conn:
            cur = await conn.execute(_CLAIMABLE, (at, CLAIM_CANDIDATES))
            row = first_readable(await cur.fetchall(), session_row)
            if row is None:
                return None
            now = now_iso()
            await conn.execute("UPDATE anfitrion_sessions SET status = 'running', "
                               "version = version + 1, updated_at = %s, lease_owner = %s, "
                               "lease_expires = %s WHERE session_id = %s",
                               (now, owner, until, row[0]))
        state = _session(row)
        messages = await self._messages(state.session_id)
        return SessionState(state.session_id, state.principal_id, "running", state.data,
                            state.version + 1, datetime.fromisoformat(now), messages,
                            len(messages), owner, until)

    async def acquire_lease(self, session_id: str, owner: str, until: float, *, now: float,
                            replace: str | None = None) -> SessionState | None:
        leased = await self._leased(session_id, owner, until, now, replace)
        return None if leased is None else await self._with_messages(leased)

    async def acquire_lease_after(self, session_id: str, owner: str, until: float, *,
                                  now: float, known: int, replace: str | None = None
                                  ) -> tuple[SessionState, list[dict[str, Any]], int] | None:
        leased = await self._leased(session_id, owner, until, now, replace)
        if leased is None:
            return None
        messages, total = tail_rows(session_id, await self._fetch(
            _TAIL_AND_SPAN, (session_id, session_id, known)), known)
        return leased, messages, total

    async def _leased(self, session_id: str, owner: str, until: float, now: float,
                      replace: str | None) -> SessionState | None:
        """The session leased to *owner* (``None``: another owner's live lease, or none)."""
        rows = await self._fetch(_LEASE, (now_iso(), owner, until, session_id, owner, replace,
                                          now))
        return _session(rows[0]) if rows else None

    async def renew_lease(self, session_id: str, owner: str, until: float) -> bool:
        count = await self._rowcount("UPDATE anfitrion_sessions SET lease_expires = %s "
                                     "WHERE session_id = %s AND lease_owner = %s",
                                     (until, session_id, owner))
        return count == 1

    # -- approvals -----------------------------------------------------------------------------

    async def create_approval(self, request: ApprovalRequest) -> None:
        await self._rowcount(
            "INSERT INTO anfitrion_approvals (id, session_id, call_id, digest, request, "
            "created_at, quorum) VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
            (request.id, request.session_id, request.call_id, request.digest,
             dump_json(request.to_dict()), request.created_at.isoformat(),
             request.quorum.required if request.quorum else 0))

    async def get_approval(
        self, request_id: str
    ) -> StoredApproval | None:
        rows = await self._fetch(_APPROVAL, (request_id,))
        if not rows:
            return None
        return approval_row(request_id, *rows[0])

    async def list_approvals(self, *, pending_only: bool = True,
                             session_id: str | None = None) -> Sequence[ApprovalRequest]:
        sql, args = approvals_query(pending_only, session_id)
        rows = await self._fetch(for_postgres(sql), args)
        return approval_rows(rows)

    async def answer_approval(self, answer: ApprovalAnswer) -> bool:
        async with self._connection(transaction=True) as conn:
            cur = await conn.execute(
                "UPDATE anfitrion_approvals SET answer = %s "
                "WHERE id = %s AND digest = %s AND answer IS NULL AND (quorum = 0 OR %s = 0)",
                (dump_json(answer.to_dict()), answer.request_id, answer.digest,
                 int(answer.approved)))
            if cur.rowcount != 1:
                return False
            # delivered on commit: a call waiting on any process looks at once
            await conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, answer.request_id))
        return True

    def watch_approval(self, request_id: str
                       ) -> contextlib.AbstractAsyncContextManager[ApprovalWatch]:
        """Be woken when *request_id* is answered, by any process (``LISTEN``/``NOTIFY``,
        :mod:`anfitrion.store._wakeups`)."""
        return self._listener.watch(request_id)

    async def add_approval_vote(self, vote: ApprovalVote) -> VoteOutcome:
        async with self._connection(transaction=True) as conn:
            # the request row's lock orders concurrent votes: each tallies all before it
            cur = await conn.execute(
                "SELECT quorum FROM anfitrion_approvals WHERE id = %s AND digest = %s "
                "AND answer IS NULL AND quorum > 0 FOR UPDATE",
                (vote.request_id, vote.digest))
            row = await cur.fetchone()
            if row is None:
                return VoteOutcome(VoteState.CLOSED, await _votes(conn, vote.request_id))
            cur = await conn.execute(
                "INSERT INTO anfitrion_approval_votes (request_id, voter, seq, digest, "
                "approved, data) VALUES (%s, %s, (SELECT COUNT(*) FROM "
                "anfitrion_approval_votes WHERE request_id = %s), %s, %s, %s) "
                "ON CONFLICT DO NOTHING",
                (vote.request_id, vote.voter, vote.request_id, vote.digest,
                 int(vote.approved), dump_json(vote.to_dict())))
            inserted = cur.rowcount
            votes = await _votes(conn, vote.request_id)
            if inserted != 1:
                return VoteOutcome(VoteState.DUPLICATE, votes)
            decided = tally(votes, int(row[0]))
            if decided is not None:
                await conn.execute("UPDATE anfitrion_approvals SET answer = %s WHERE id = %s "
                                   "AND answer IS NULL",
                                   (dump_json(decided.to_dict()), vote.request_id))
                await conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, vote.request_id))
            return VoteOutcome(VoteState.RECORDED, votes, decided)

    async def list_approval_votes(self, request_id: str) -> Sequence[ApprovalVote]:
        rows = await self._fetch("SELECT data FROM anfitrion_approval_votes "
                                 "WHERE request_id = %s ORDER BY seq", (request_id,))
        return tuple(vote_of(r[0]) for r in rows)

    async def consume_approval(self, request_id: str, digest: str) -> ApprovalAnswer | None:
        async with self._connection(transaction=True) as conn:
            cur = await conn.execute(
                "UPDATE anfitrion_approvals SET used = 1 WHERE id = %s AND digest = %s "
                "AND answer IS NOT NULL AND used = 0 RETURNING answer, session_id, call_id",
                (request_id, digest))
            row = await cur.fetchone()
            if row is None:
                return None
            answer = ApprovalAnswer.from_dict(load_json(row[0]))
            if answer.approved:
                await _advance(conn, row[1], row[2], LedgerState.APPROVED, digest)
            return answer

    # -- execution ledger ----------------------------------------------------------------------

    async def advance_execution(self, session_id: str, call_id: str, state: LedgerState,
                                digest: str) -> None:
        async with self._connection() as conn:
            await _advance(conn, session_id, call_id, state, digest)

    async def execution_state(self, session_id: str, call_id: str) -> LedgerEntry | None:
        rows = await self._fetch("SELECT session_id, call_id, state, digest, result, updated_at "
                                 "FROM anfitrion_ledger WHERE session_id = %s AND call_id = %s",
                                 (session_id, call_id))
        return _entry(rows[0]) if rows else None

    async def claim_execution(self, session_id: str, call_id: str, digest: str, *,
                              retry_unknown: bool = False, effect: EffectKey | None = None,
                              repeat_of: tuple[str, str] | None = None,
                              owner: str | None = None) -> Claim:
        # one statement: the row lock taken by the upsert makes concurrent claims take turns
        token = new_claim_token()
        args = (session_id, call_id, LedgerState.CLAIMED.value, digest, now_iso(), token)
        sql = _CLAIM_RETRY if retry_unknown else _CLAIM
        if effect is None and owner is None:
            rows = await self._fetch(sql, args)
            state, result, stored_token = rows[0]
            # the token is fresh: the entry holds it only if this statement claimed it
            claimed = ClaimState(state) is ClaimState.CLAIMED and stored_token == token
            return Claim(ClaimState(state), load_result(result), token if claimed else None)
        async with self._connection(transaction=True) as conn:
            return await _claim_on(conn, (session_id, call_id), sql, args, effect=effect,
                                   repeat_of=repeat_of, owner=owner,
                                   retry_unknown=retry_unknown)

    async def claim_execution_and_audit(
            self, session_id: str, call_id: str, digest: str, *,
            audit: Callable[[Claim], Sequence[AuditEntry]], retry_unknown: bool = False,
            effect: EffectKey | None = None, repeat_of: tuple[str, str] | None = None,
            owner: str | None = None) -> Claim:
        """:meth:`claim_execution` and the records *audit* gives for its outcome, in one
        transaction (one commit instead of two: the gate's records before the effect). The
        records are chained last, as in :meth:`save_session_and_audit`."""
        token = new_claim_token()
        args = (session_id, call_id, LedgerState.CLAIMED.value, digest, now_iso(), token)
        sql = _CLAIM_RETRY if retry_unknown else _CLAIM
        async with self._connection(transaction=True) as conn:
            claim = await _claim_on(conn, (session_id, call_id), sql, args, effect=effect,
                                    repeat_of=repeat_of, owner=owner,
                                    retry_unknown=retry_unknown)
            rows = [(kind, sid, at, dump_json(fields))
                    for kind, sid, at, fields in audit(claim)]
            if rows:
                await _chain_on(conn, rows)
        return claim

    async def effect_state(self, key: str) -> EffectEntry | None:
        rows = await self._fetch(EFFECTS + " WHERE e.key = %s", (key,))
        return effect_row(rows[0]) if rows else None

    async def list_effects(self, *, unsettled_only: bool = False) -> Sequence[EffectEntry]:
        where = UNSETTLED_EFFECTS if unsettled_only else ""
        rows = await self._fetch(EFFECTS + where + EFFECTS_ORDER)
        return [effect_row(r) for r in rows]

    async def resolve_effect(self, key: str, *, done: bool, by: str,
                             note: str = "") -> EffectEntry | None:
        async with self._connection(transaction=True) as conn:
            found = await _locked_effect(conn, key)
            if found is None:
                return None
            if found.state not in (LedgerState.CLAIMED, LedgerState.UNKNOWN):
                state = found.state.value if found.state else "never claimed"
                raise ConflictError(f"effect {key[:12]}… is not unsettled ({state})")
            if found.state is LedgerState.CLAIMED:
                cur = await conn.execute("SELECT lease_owner, lease_expires FROM "
                                         "anfitrion_sessions WHERE session_id = %s",
                                         (found.session_id,))
                lease = await cur.fetchone()
                refuse_while_running(key, found.session_id, *(lease or (None, None)))
            result = resolution_result(found.call_id, found.tool, done=done, by=by,
                                       note=note)
            cur = await conn.execute(
                "UPDATE anfitrion_ledger SET state = %s, result = %s, updated_at = %s, "
                "claim_token = NULL WHERE session_id = %s AND call_id = %s AND state = %s",
                (settled_state(result).value, dump_result(result), now_iso(),
                 found.session_id, found.call_id, found.state.value))
            if cur.rowcount != 1:
                raise ConflictError(f"effect {key[:12]}… changed while it was resolved")
            await conn.execute(
                "UPDATE anfitrion_effects SET resolved_by = %s, resolution_note = %s, "
                "updated_at = %s WHERE key = %s", (by, note, now_iso(), key))
            cur = await conn.execute(EFFECTS + " WHERE e.key = %s", (key,))
            row = await cur.fetchone()
        assert row is not None
        return effect_row(row)

    async def settle_execution(self, session_id: str, call_id: str, result: ToolResult,
                               token: str) -> bool:
        count = await self._rowcount(
            _SETTLE,
            (settled_state(result).value, dump_result(result), now_iso(), session_id, call_id,
             token))
        return count == 1

    async def list_unknown_executions(self) -> Sequence[tuple[str, str]]:
        rows = await self._fetch(UNSETTLED_CALLS)
        return [(r[0], r[1]) for r in rows]

    # -- audit ---------------------------------------------------------------------------------

    async def append_audit(self, type: str, session_id: str, at: float,
                           data: Mapping[str, Any]) -> AuditRecord:
        text = dump_json(data)
        [(seq, prev, digest)] = await self._append_audit([(type, session_id, at, text)])
        return AuditRecord(seq, type, session_id, at, load_json(text), prev, digest)

    async def append_audit_many(
            self, entries: Sequence[tuple[str, str, float, Mapping[str, Any]]]) -> None:
        await self._append_audit([(type, session_id, at, dump_json(data))
                                  for type, session_id, at, data in entries])

    async def _append_audit(self, rows: Sequence[tuple[str, str, float, str]]
                            ) -> list[tuple[int, str, str]]:
        """Chain *rows* after the head; appends waiting together share one transaction.

        With no write under way, the caller writes what is queued (its own rows among them)
        at once; appends that queue meanwhile are written together by a task that runs while
        any are left. Each caller hears back after the commit holding its rows, or its error.
        """
        pool = await self._ready()
        loop = asyncio.get_running_loop()
        job = _AuditAppend(rows, loop.create_future())
        self._audit_queue.append(job)
        # the append runs to its end, and a cancellation of the caller takes effect after it
        with anyio.CancelScope(shield=True):
            if self._audit_writing is None:
                self._audit_writing = writing = loop.create_future()
                try:
                    await self._write_audit_batch(pool)
                finally:
                    if self._audit_queue:
                        self._audit_task = loop.create_task(self._write_audit(pool, writing))
                    else:
                        self._audit_writing = None
                        writing.set_result(None)
            chained = await job.future
        return chained

    async def _write_audit(self, pool: AsyncConnectionPool, writing: asyncio.Future[None]
                           ) -> None:
        try:
            while self._audit_queue:
                await self._write_audit_batch(pool)
        finally:
            self._audit_writing = self._audit_task = None
            writing.set_result(None)

    async def _write_audit_batch(self, pool: AsyncConnectionPool) -> None:
        batch, self._audit_queue = self._audit_queue, []
        try:
            chained = await _chain_audit(pool, [r for job in batch for r in job.rows])
        # BLE001 - the writer task's top: each waiting job gets the error; re-raised if not
        # an Exception (a cancellation)
        except BaseException as exc:
            for job in batch:
                if not job.future.done():
                    job.future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        start = 0
        for job in batch:
            if not job.future.done():
                job.future.set_result([(seq, prev, digest) for seq, _, _, _, _, prev, digest
                                       in chained[start:start + len(job.rows)]])
            start += len(job.rows)

    async def append_audit_at_head(self, type: str, session_id: str, at: float,
                                   data_for: Callable[[int, str], Mapping[str, Any]]
                                   ) -> AuditRecord:
        async with self._connection(transaction=True) as conn:
            seq, prev = await _locked_head(conn)
            text = dump_json(data_for(seq, prev))
            [row] = await _insert_chained(conn, (seq, prev), [(type, session_id, at, text)])
        return AuditRecord(row[0], type, session_id, at, load_json(text), row[5], row[6])

    async def prune_audit(self, before: float, at: float,
                          data_for: Callable[[PrunePlan], Mapping[str, Any]]
                          ) -> PrunePlan | None:
        async with self._connection(transaction=True) as conn:
            head = await _locked_head(conn)  # one prune at a time, and no append meanwhile
            cur = await conn.execute("SELECT min(seq) FROM anfitrion_audit")
            first = (await cur.fetchone() or (None,))[0]
            cur = await conn.execute("SELECT seq, at, prev_hash FROM anfitrion_audit "
                                     "WHERE type = %s AND at < %s", (CHECKPOINT, before))
            checkpoints = [(int(r[0]), float(r[1]), str(r[2])) for r in await cur.fetchall()]
            if first is None or not checkpoints:
                return None
            cur = await conn.execute("SELECT session_id, call_id FROM anfitrion_ledger "
                                     "WHERE state <> ALL(%s)", (list(FINAL_STATES),))
            unsettled = {(r[0], r[1]) for r in await cur.fetchall()}
            cur = await conn.execute(
                "SELECT seq, session_id, data FROM anfitrion_audit WHERE seq < %s AND "
                "session_id = ANY(%s)", (max(c[0] for c in checkpoints),
                                         sorted({s for s, _ in unsettled})))
            held = first_held(await cur.fetchall(), unsettled)
            cut = choose_cut(checkpoints, before, int(first), None if held is None else held[0])
            if cut is None:
                return None
            cur = await conn.execute("DELETE FROM anfitrion_audit WHERE seq < %s", (cut[0],))
            plan = PrunePlan(cut[0], cut[1], int(cur.rowcount), held, cut[2])
            await _insert_chained(conn, head, [(PRUNED, "", at, dump_json(data_for(plan)))])
        return plan

    async def prune_sessions(self, before: float) -> Sequence[str]:
        async with self._connection(transaction=True) as conn:
            cur = await conn.execute("SELECT session_id FROM anfitrion_ledger "
                                     "WHERE state <> ALL(%s)", (list(FINAL_STATES),))
            unsettled = {r[0] for r in await cur.fetchall()}
            cur = await conn.execute("SELECT session_id, status, updated_at FROM "
                                     "anfitrion_sessions WHERE status = ANY(%s) FOR UPDATE",
                                     (list(ENDED),))
            gone = ended_before(await cur.fetchall(), before, unsettled)
            for table in ("anfitrion_session_messages", "anfitrion_sessions"):
                await conn.execute(f"DELETE FROM {table} WHERE session_id = ANY(%s)",  # type: ignore[arg-type]
                                   (gone,))
        return gone

    async def audit_records(self, session_id: str | None = None) -> Sequence[AuditRecord]:
        sql = "SELECT seq, type, session_id, at, data, prev_hash, hash FROM anfitrion_audit"
        if session_id is None:
            rows = await self._fetch(sql + " ORDER BY seq")
        else:
            rows = await self._fetch(sql + " WHERE session_id = %s ORDER BY seq", (session_id,))
        return [audit_row(r) for r in rows]

    # -- counters and records ------------------------------------------------------------------

    async def count_calls(self, principal_id: str, tool: str, since: float) -> int:
        rows = await self._fetch("SELECT count(*) FROM anfitrion_call_log WHERE principal_id = %s "
                                 "AND tool = %s AND at >= %s", (principal_id, tool, since))
        return int(rows[0][0])

    async def record_call(self, principal_id: str, tool: str, at: float) -> None:
        await self._rowcount("INSERT INTO anfitrion_call_log (principal_id, tool, at) "
                             "VALUES (%s, %s, %s)", (principal_id, tool, at))

    async def get_record(self, namespace: str, key: str) -> Mapping[str, Any] | None:
        rows = await self._fetch("SELECT value FROM anfitrion_records WHERE namespace = %s "
                                 "AND key = %s", (namespace, key))
        return record_value(namespace, key, rows[0][0]) if rows else None

    async def put_record(self, namespace: str, key: str, value: Mapping[str, Any]) -> None:
        await self._rowcount(
            "INSERT INTO anfitrion_records (namespace, key, value) VALUES (%s, %s, %s) "
            "ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value",
            (namespace, key, dump_json(value)))

    async def create_record(self, namespace: str, key: str, value: Mapping[str, Any]) -> bool:
        created = await self._rowcount(
            "INSERT INTO anfitrion_records (namespace, key, value) VALUES (%s, %s, %s) "
            "ON CONFLICT (namespace, key) DO NOTHING", (namespace, key, dump_json(value)))
        return created == 1

    async def list_records(self, namespace: str) -> Sequence[tuple[str, Mapping[str, Any]]]:
        rows = await self._fetch("SELECT key, value FROM anfitrion_records WHERE namespace = %s "
                                 "ORDER BY key", (namespace,))
        return [(r[0], record_value(namespace, r[0], r[1])) for r in rows]

    async def put_credential(self, entry: CredentialEntry) -> None:
        await self._rowcount(
            f"INSERT INTO anfitrion_credentials ({CREDENTIAL_COLUMNS}) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (principal, resource, issuer, "
            "kind) DO UPDATE SET key_id = excluded.key_id, sealed = excluded.sealed, "
            "meta = excluded.meta, updated_at = excluded.updated_at",
            (entry.principal, entry.issuer, entry.resource, entry.kind, entry.key_id,
             entry.sealed, dump_json(entry.meta), entry.updated_at))

    async def get_credentials(self, principal: str, resource: str,
                              kind: str) -> Sequence[CredentialEntry]:
        rows = await self._fetch(
            f"SELECT {CREDENTIAL_COLUMNS} FROM anfitrion_credentials WHERE principal = %s "
            "AND resource = %s AND kind = %s ORDER BY updated_at DESC", (principal, resource, kind))
        return [credential_row(r) for r in rows]

    async def delete_credentials(self, principal: str, resource: str, *,
                                 issuer: str | None = None, kind: str | None = None) -> int:
        return await self._rowcount(
            "DELETE FROM anfitrion_credentials WHERE principal = %s AND resource = %s "
            "AND (%s::text IS NULL OR issuer = %s) AND (%s::text IS NULL OR kind = %s)",
            (principal, resource, issuer, issuer, kind, kind))

    async def list_credentials(self, principal: str | None = None) -> Sequence[CredentialEntry]:
        rows = await self._fetch(
            f"SELECT {CREDENTIAL_COLUMNS} FROM anfitrion_credentials WHERE (%s::text IS NULL OR "
            "principal = %s) ORDER BY principal, resource, issuer, kind", (principal, principal))
        return [credential_row(r) for r in rows]

    async def close(self) -> None:
        """Close the pool once the audit appends queued so far are written.

        A pool (or a writer) made on an event loop that has ended — ``run_sync()`` starts one
        per call — cannot be awaited from this one: it is dropped, and its connections close
        with it, as the listener's are (:meth:`Listener.close`)."""
        running = asyncio.get_running_loop()
        writing = self._audit_writing
        if writing is not None and writing.get_loop() is running:
            with anyio.CancelScope(shield=True):
                await asyncio.wait([writing])
        await self._listener.close()
        pool, loop = self._pool, self._loop
        self._pool = self._loop = None
        self._migrated = False
        if pool is not None and loop is running:
            await pool.close()


@dataclass(frozen=True, slots=True)
class _AuditAppend:
    rows: Sequence[tuple[str, str, float, str]]
    future: asyncio.Future[list[tuple[int, str, str]]]


def _chain(head: tuple[int, str], rows: Sequence[tuple[str, str, float, str]]
           ) -> list[tuple[int, str, str, float, str, str, str]]:
    """Chain *rows* (type, session, at, canonical data text) after *head* (seq, hash)."""
    return [(n, kind, session_id, at, text, before, digest)
            for (kind, session_id, at, text), (n, before, digest)
            in zip(rows, chain_rows(head[0], head[1], rows), strict=True)]


# The whole append in one statement, in one writer order across every process: the head is
# locked (``FOR UPDATE``: in READ COMMITTED, a statement that waited reads the head as the
# other writer left it), the batch's hash is finished there from the parts no head decides
# (:func:`anfitrion._chain.head_free_parts`), the head moved and the rows inserted. One round
# trip, whoever wrote last; the head's lock is held from here to the commit.
_APPEND = (
    "WITH head AS (SELECT seq, hash FROM anfitrion_audit_head WHERE id = 1 FOR UPDATE), "
    "chained AS (SELECT seq AS base, hash AS prev, encode(sha256(%b || convert_to("
    "(seq + 1)::text, 'UTF8') || %b || convert_to(to_json(hash)::text, 'UTF8') || %b), "
    "'hex') AS digest FROM head), "
    "moved AS (UPDATE anfitrion_audit_head AS h SET seq = c.base + %s, hash = c.digest "
    "FROM chained AS c WHERE h.id = 1 RETURNING c.base, c.prev, c.digest) "
    "INSERT INTO anfitrion_audit (seq, type, session_id, at, data, prev_hash, hash) "
    "SELECT m.base + r.n, r.type, r.session_id, r.at, r.data, m.prev, m.digest "
    "FROM moved AS m, unnest(%b::text[], %b::text[], %b::float8[], %b::text[]) "
    "WITH ORDINALITY AS r(type, session_id, at, data, n) "
    "RETURNING seq, prev_hash, hash")


async def _chain_audit(pool: AsyncConnectionPool, rows: Sequence[tuple[str, str, float, str]]
                       ) -> list[tuple[int, str, str, float, str, str, str]]:
    """Append *rows* after the chain head on a connection of its own (:func:`_chain_on`)."""
    with _pg_errors():
        async with pool.connection() as conn:
            return await _chain_on(conn, rows)


async def _claim_on(conn: _Conn, call: tuple[str, str], sql: str, args: tuple[Any, ...], *,
                    effect: EffectKey | None, repeat_of: tuple[str, str] | None,
                    owner: str | None, retry_unknown: bool) -> Claim:
    """The claim of :meth:`PostgresStore.claim_execution`, inside the caller's transaction:
    fenced by the session's lease, the effect key reserved, then the ledger's upsert."""
    session_id, call_id = call
    if owner is not None:
        # FOR SHARE: a takeover (an UPDATE of the row) waits for this claim
        cur = await conn.execute(
            "SELECT lease_owner FROM anfitrion_sessions WHERE session_id = %s "
            "FOR SHARE", (session_id,))
        if (leased := await cur.fetchone()) is not None:
            fence_claim(session_id, call_id, leased[0], owner)
    if effect is not None:
        duplicate = await _reserve_effect(conn, effect, call, repeat_of, retry_unknown)
        if duplicate is not None:
            return Claim(ClaimState.DUPLICATE, duplicate.result, effect=duplicate)
    cur = await conn.execute(sql, args)  # type: ignore[arg-type]
    state, result, stored_token = (await cur.fetchone()) or ("", None, None)
    # the token is fresh: the entry holds it only if this statement claimed it
    claimed = ClaimState(state) is ClaimState.CLAIMED and stored_token == args[5]
    return Claim(ClaimState(state), load_result(result), args[5] if claimed else None)


async def _chain_on(conn: _Conn, rows: Sequence[tuple[str, str, float, str]]
                    ) -> list[tuple[int, str, str, float, str, str, str]]:
    """Append *rows* (type, session, at, canonical data text) after the chain head, in one
    statement (:data:`_APPEND`); each row as ``(seq, type, session, at, text, prev_hash,
    hash)``."""
    before, between, after = head_free_parts(rows)
    cur = await conn.execute(_APPEND, (before, between, after, len(rows),
                                       *(list(column) for column in zip(*rows, strict=True))))
    found = sorted(await cur.fetchall())
    if len(found) != len(rows):  # pragma: no cover - the head row always exists (migration 1)
        raise StoreError("PostgreSQL store: the audit chain's head is missing")
    return [(int(seq), kind, session_id, at, text, str(prev), str(digest))
            for (seq, prev, digest), (kind, session_id, at, text) in zip(found, rows, strict=True)]


async def _locked_head(conn: _Conn) -> tuple[int, str]:
    """The chain head, locked until the transaction ends."""
    cur = await conn.execute("SELECT seq, hash FROM anfitrion_audit_head WHERE id = 1 FOR UPDATE")
    found = await cur.fetchone()
    assert found is not None
    return int(found[0]), str(found[1])


async def _insert_chained(conn: _Conn, head: tuple[int, str],
                          rows: Sequence[tuple[str, str, float, str]]
                          ) -> list[tuple[int, str, str, float, str, str, str]]:
    """Chain *rows* after the locked *head*, insert them and move the head."""
    chained = _chain(head, rows)
    async with conn.cursor() as many:
        await many.executemany("INSERT INTO anfitrion_audit (seq, type, session_id, at, data, "
                               "prev_hash, hash) VALUES (%s, %s, %s, %s, %s, %s, %s)", chained)
    await conn.execute("UPDATE anfitrion_audit_head SET seq = %s, hash = %s WHERE id = 1",
                       (chained[-1][0], chained[-1][6]))
    return chained


async def _save_session(conn: _Conn, state: SessionState, data: str,
                        new: Sequence[tuple[str, int, str]], now: str) -> None:
    """Insert or update the session (compare-and-set on its version) and write its messages
    after the saved ones.

    Raises:
        ConflictError: *state.version* is stale (or a new session's id is taken).
    """
    if state.version == 0:
        cur = await conn.execute(
            "INSERT INTO anfitrion_sessions (session_id, principal_id, status, data, "
            "version, updated_at, lease_owner, lease_expires) "
            "VALUES (%s, %s, %s, %s, 1, %s, %s, %s) ON CONFLICT DO NOTHING",
            (state.session_id, state.principal_id, state.status, data, now,
             state.lease_owner, state.lease_expires))
        if cur.rowcount != 1:
            raise ConflictError(f"session {state.session_id!r} was changed concurrently")
        if state.messages:
            await conn.execute("DELETE FROM anfitrion_session_messages "
                               "WHERE session_id = %s AND idx >= %s",
                               (state.session_id, state.saved_messages))
    else:
        update = (state.principal_id, state.status, data, now, state.lease_owner,
                  state.lease_expires, state.session_id, state.version)
        if state.messages:  # only what changed: messages after the saved ones
            cur = await conn.execute(_UPDATE_SESSION_CUT,
                                     (*update, state.session_id, state.saved_messages))
            saved = ((await cur.fetchone()) or (0,))[0]
        else:
            saved = (await conn.execute(_UPDATE_SESSION, update)).rowcount
        if saved != 1:
            raise ConflictError(f"session {state.session_id!r} was changed concurrently")
    if new:
        async with conn.cursor() as many:
            await many.executemany(
                "INSERT INTO anfitrion_session_messages (session_id, idx, data) "
                "VALUES (%s, %s, %s)", new)


_UPDATE_SESSION = (
    "UPDATE anfitrion_sessions SET principal_id = %s, status = %s, data = %s, "
    "version = version + 1, updated_at = %s, lease_owner = %s, lease_expires = %s "
    "WHERE session_id = %s AND version = %s")
# The compare-and-set update and, only if it applied, the stored messages from the saved
# ones on removed: one statement (one round trip), whose count is the update's.
_UPDATE_SESSION_CUT = (
    f"WITH saved AS ({_UPDATE_SESSION} RETURNING 1), "
    "cut AS (DELETE FROM anfitrion_session_messages WHERE session_id = %s AND idx >= %s "
    "AND EXISTS (SELECT FROM saved)) SELECT count(*) FROM saved")


async def _advance(conn: _Conn, session_id: str, call_id: str, state: LedgerState,
                   digest: str) -> None:
    """Record *state* if it is ahead of the stored one: one upsert, atomic under its row lock."""
    await conn.execute(
        "INSERT INTO anfitrion_ledger (session_id, call_id, state, digest, updated_at) "
        "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (session_id, call_id) DO UPDATE "
        "SET state = excluded.state, digest = excluded.digest, updated_at = excluded.updated_at "
        "WHERE anfitrion_ledger.state = ANY(%b::text[])",
        (session_id, call_id, state.value, digest, now_iso(), advances_from(state)))


_APPROVAL = for_postgres(APPROVAL)
_SESSION_ROW = for_postgres(SESSION_ROW)
_LEASE = for_postgres(LEASE)
_TAIL_AND_SPAN = for_postgres(TAIL_AND_SPAN)
_CLAIMABLE = for_postgres(CLAIMABLE_SESSIONS) + " FOR UPDATE SKIP LOCKED"
_SETTLE = for_postgres(SETTLE)
_VOTES = for_postgres(VOTES)
_EFFECT_INSERT = for_postgres(EFFECT_INSERT) + " ON CONFLICT (key) DO NOTHING"
_EFFECT_TAKE_OVER = for_postgres(EFFECT_TAKE_OVER)


async def _locked_effect(conn: _Conn, key: str) -> EffectEntry | None:
    """The effect under *key*, its row locked until the transaction ends."""
    cur = await conn.execute(EFFECTS + " WHERE e.key = %s FOR UPDATE OF e", (key,))
    row = await cur.fetchone()
    return effect_row(row) if row else None


async def _reserve_effect(conn: _Conn, effect: EffectKey, me: tuple[str, str],
                          repeat_of: tuple[str, str] | None,
                          retry_unknown: bool) -> EffectEntry | None:
    """Reserve *effect* for call *me*; the entry holding it if it is another call's.

    The insert waits on a concurrent reserver's uncommitted row, and the row lock then
    serialises every claimer of the key: exactly one holds it."""
    now = now_iso()
    cur = await conn.execute(
        _EFFECT_INSERT,
        (effect.key, effect.display, effect.scope.value, effect.tool, me[0], me[1], now, now,
         *effect_arguments(effect)))
    if cur.rowcount == 1:
        return None
    held = await _locked_effect(conn, effect.key)
    assert held is not None  # effects are never deleted
    move = effect_move((held.session_id, held.call_id), me, held.state, repeat_of,
                       retry_unknown=retry_unknown)
    if move is EffectMove.DUPLICATE:
        return held
    if move is not EffectMove.OWN:
        await conn.execute(
            _EFFECT_TAKE_OVER,
            (me[0], me[1], now, int(move is EffectMove.REPEAT), *effect_arguments(effect),
             effect.key))
    return None


def _claim_sql(retry_unknown: bool) -> str:
    moved = claim_state_sql("l.state", retry_unknown=retry_unknown)
    return (
        "INSERT INTO anfitrion_ledger AS l (session_id, call_id, state, digest, updated_at, "
        "claim_token) VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (session_id, call_id) DO UPDATE "
        f"SET state = {moved}, updated_at = CASE WHEN {moved} = l.state AND l.state <> 'claimed' "
        "THEN l.updated_at ELSE excluded.updated_at END, claim_token = CASE WHEN "
        f"{moved} = 'claimed' THEN excluded.claim_token ELSE l.claim_token END "
        "RETURNING state, result, claim_token")


_CLAIM = _claim_sql(False)
"""Claim a call: insert it ``claimed``, or move the stored entry as :func:`claim_transition`
says. The state it leaves is the claimer's answer; the token is this claimer's only if this
statement wrote it."""
_CLAIM_RETRY = _claim_sql(True)


def _session(row: Sequence[Any]) -> SessionState:
    return session_row(row)


def _entry(row: Sequence[Any]) -> LedgerEntry:
    return entry_row(row)


async def _votes(conn: _Conn, request_id: str) -> tuple[ApprovalVote, ...]:
    cur = await conn.execute(_VOTES, (request_id,))
    return tuple(vote_of(row[0]) for row in await cur.fetchall())
