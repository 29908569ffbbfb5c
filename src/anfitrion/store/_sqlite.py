"""The SQLite store: the embedded default (stdlib ``sqlite3``).

One connection per store object, in WAL mode with a busy timeout, owned by one thread of the
store (never the event loop). Every write is a ``BEGIN IMMEDIATE`` transaction, so other
*processes* sharing the file queue on the write lock instead of failing: claims, answers and
the audit chain are compare-and-set under that lock.

**Group commit.** Operations queue for the store's thread, which takes every operation waiting
and runs consecutive writes in one transaction, each in its own savepoint, with one commit
(one ``fsync``) for all of them. A caller hears back only after the commit that holds its
write: a failed operation is rolled back alone and its caller gets its error; a failed commit
is reported to every caller of that transaction. One session alone pays one transaction per
write, as before; a thousand concurrent sessions share their commits.

Example:
    >>> store = SQLiteStore.from_url("sqlite:///anfitrion.db")  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import sqlite3
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

import anyio

from .._approvals import ApprovalAnswer, ApprovalRequest, ApprovalVote
from .._canonical import float_free_bytes
from .._chain import chain_rows
from .._conversation import ToolResult
from .._effects import EffectKey
from ..exceptions import AnfitrionError, ConflictError, StoreError, UserError
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
from ._retention import (
    CHECKPOINT,
    ENDED,
    FINAL_STATES,
    PRUNED,
    choose_cut,
    ended_before,
    first_held,
)
from ._rows import (
    CREDENTIAL_COLUMNS,
    EffectMove,
    approval_row,
    approval_rows,
    audit_row,
    claim_transition,
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
    may_advance,
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
)
from ._votes import tally, vote_of

__all__ = ["SQLiteStore", "sqlite_file"]

log = logging.getLogger("anfitrion.store")

T = TypeVar("T")
Conn = sqlite3.Connection

MAX_BATCH = 256
"""Operations taken from the queue at once: bounds how long one group transaction runs."""


def _state(value: str | None) -> LedgerState | None:
    return None if value is None else LedgerState(value)


def _parse_url(url: str) -> tuple[str, dict[str, Any]]:
    """The file and the options of a ``sqlite:`` URL (see :meth:`SQLiteStore.from_url`)."""
    parts = urlsplit(url)
    if parts.scheme != "sqlite" or parts.netloc or not parts.path.startswith("/") \
            or len(parts.path) < 2:
        raise UserError(f"bad SQLite URL {url!r}: use sqlite:///relative/file.db or "
                        "sqlite:////absolute/file.db")
    query = parse_qs(parts.query)
    try:
        timeout = float(query.get("timeout", ["30"])[0])
    except ValueError:
        raise UserError(f"bad SQLite URL {url!r}: timeout must be a number") from None
    synchronous = query.get("synchronous", ["full"])[0].lower()
    migrate = query.get("migrate", ["1"])[0] not in ("0", "false", "no")
    return unquote(parts.path[1:]), {"timeout": timeout, "migrate": migrate,
                                     "synchronous": synchronous}


def sqlite_file(url: str) -> str:
    """The file a ``sqlite:`` store URL names, without opening it.

    Raises:
        UserError: the URL names no file.
    """
    return _parse_url(url)[0]


class SQLiteStore:
    """A :class:`~anfitrion.store.Store` in one SQLite file.

    Args:
        path: the database file (created with its folder), or ``:memory:``.
        timeout: seconds to wait for another process's write lock.
        migrate: apply pending migrations on first use (``anfitrion db migrate`` otherwise).
        synchronous: ``"full"`` (default: a commit is on disk before the caller goes on) or
            ``"normal"`` (survives a crash of the process, not a power loss).

    The store runs on asyncio (as the PostgreSQL store does).
    """

    def __init__(self, path: str | Path, *, timeout: float = 30.0, migrate: bool = True,
                 synchronous: str = "full") -> None:
        if synchronous not in ("full", "normal"):
            raise UserError(f"synchronous must be 'full' or 'normal', not {synchronous!r}")
        self.synchronous = synchronous
        self.path = str(path)
        self.timeout = timeout
        self.auto_migrate = migrate
        self._worker_lock = threading.Lock()
        self._worker: _Worker | None = None
        self._finalizer: weakref.finalize[Any, SQLiteStore] | None = None

    @classmethod
    def from_url(cls, url: str) -> SQLiteStore:
        """``sqlite:///relative.db``, ``sqlite:////absolute/path.db``; ``?timeout=SECONDS``,
        ``?synchronous=normal``, ``?migrate=0``.

        Raises:
            UserError: the URL names no file.
        """
        path, options = _parse_url(url)
        return cls(path, timeout=options["timeout"], migrate=options["migrate"],
                   synchronous=options["synchronous"])

    @property
    def url(self) -> str:
        return f"sqlite:///{self.path}"

    # -- plumbing ------------------------------------------------------------------------------

    async def _run(self, fn: Callable[[Conn], T], *, write: bool = False,
                   migrate: bool = True) -> T:
        """Run *fn* on the store's thread; with *write*, inside a (group) transaction."""
        loop = asyncio.get_running_loop()
        job = _Job(fn, write, migrate, loop, loop.create_future())
        with self._worker_lock:
            if self._worker is None:
                self._worker = _Worker(self.path, self.timeout, self.synchronous,
                                       self.auto_migrate)
                # a store dropped without close(): its thread closes the connection and ends
                self._finalizer = weakref.finalize(self, self._worker.stop)
            self._worker.jobs.put(job)
        # as with a worker-thread call, the job runs to its end and a cancellation of the
        # caller takes effect after it: a write is never left with its outcome unreported
        with anyio.CancelScope(shield=True):
            result: T = await job.future
        return result

    async def _write(self, fn: Callable[[Conn], T]) -> T:
        return await self._run(fn, write=True)

    # -- migrations ----------------------------------------------------------------------------

    async def migrate(self) -> list[str]:
        """Apply pending migrations; return the names applied now."""
        return await self._run(_apply_migrations, migrate=False)

    async def migration_status(self) -> list[tuple[str, str | None]]:
        """Every known migration and when it was applied (None: pending)."""
        def read(c: Conn) -> list[tuple[str, str | None]]:
            applied = dict(c.execute("SELECT name, applied_at FROM anfitrion_migrations"))
            return [(m.name, applied.get(m.name)) for m in MIGRATIONS]
        return await self._run(read, migrate=False)

    # -- sessions ------------------------------------------------------------------------------

    async def save_session(self, state: SessionState) -> SessionState:
        return await self._write(self._saver(state))

    async def save_session_and_audit(
            self, state: SessionState,
            entries: Sequence[tuple[str, str, float, Mapping[str, Any]]]) -> SessionState:
        """:meth:`save_session` and :meth:`append_audit_many` in one transaction (one commit
        instead of two: the session runtime saves a session with the records buffered so far).
        If the save fails, neither is written."""
        return await self.settle_and_save_session((), state, entries)

    async def settle_and_save_session(
            self, settlements: Sequence[Settlement], state: SessionState,
            entries: Sequence[tuple[str, str, float, Mapping[str, Any]]]) -> SessionState:
        """The writes' settlements, the session's save and the records, in one transaction
        (one commit instead of two: a write's settlement goes with the save that follows it).
        If a settlement's claim was taken over or the save conflicts, nothing is written."""
        save, rows = self._saver(state), _audit_rows(entries)
        settles = [(settled_state(result).value, dump_result(result), session_id, call_id,
                    token) for session_id, call_id, result, token in settlements]

        def all_of(c: Conn) -> SessionState:
            if settles:
                now = now_iso()
                for (value, text, session_id, call_id, token) in settles:
                    if c.execute(SETTLE, (value, text, now, session_id, call_id,
                                          token)).rowcount != 1:
                        raise ConflictError(settlement_conflict(session_id, call_id))
            saved = save(c)
            if rows:
                _append_audit(c, rows)
            return saved

        return await self._write(all_of)

    def _saver(self, state: SessionState) -> Callable[[Conn], SessionState]:
        data = dump_json(state.data)
        new = [(state.session_id, state.saved_messages + i, dump_json(m))
               for i, m in enumerate(state.messages[state.saved_messages:])]

        def save(c: Conn) -> SessionState:
            now = now_iso()
            if state.version == 0:
                cur = c.execute(
                    "INSERT INTO anfitrion_sessions (session_id, principal_id, status, data, "
                    "version, updated_at, lease_owner, lease_expires) "
                    "VALUES (?, ?, ?, ?, 1, ?, ?, ?) ON CONFLICT DO NOTHING",
                    (state.session_id, state.principal_id, state.status, data, now,
                     state.lease_owner, state.lease_expires))
            else:
                cur = c.execute(
                    "UPDATE anfitrion_sessions SET principal_id = ?, status = ?, data = ?, "
                    "version = version + 1, updated_at = ?, lease_owner = ?, lease_expires = ? "
                    "WHERE session_id = ? AND version = ?",
                    (state.principal_id, state.status, data, now, state.lease_owner,
                     state.lease_expires, state.session_id, state.version))
            if cur.rowcount != 1:
                raise ConflictError(f"session {state.session_id!r} was changed concurrently")
            if state.messages:  # only what changed: messages after the saved ones
                c.execute("DELETE FROM anfitrion_session_messages WHERE session_id = ? "
                          "AND idx >= ?", (state.session_id, state.saved_messages))
                c.executemany("INSERT INTO anfitrion_session_messages (session_id, idx, data) "
                              "VALUES (?, ?, ?)", new)
                return SessionState(state.session_id, state.principal_id, state.status,
                                    state.data, state.version + 1, datetime.fromisoformat(now),
                                    state.messages, len(state.messages), state.lease_owner,
                                    state.lease_expires)
            return _with_messages(c, SessionState(
                state.session_id, state.principal_id, state.status, state.data,
                state.version + 1, datetime.fromisoformat(now), lease_owner=state.lease_owner,
                lease_expires=state.lease_expires))

        return save

    async def load_session(self, session_id: str) -> SessionState | None:
        def load(c: Conn) -> SessionState | None:
            row = c.execute(SESSION_ROW, (session_id,)).fetchone()
            return None if row is None else _with_messages(c, _session(row))

        return await self._run(load)

    async def list_sessions(self, status: str | None = None) -> Sequence[SessionState]:
        sql = f"SELECT {SESSION_COLUMNS} FROM anfitrion_sessions"
        args: tuple[Any, ...] = ()
        if status is not None:
            sql += " WHERE status = ?"
            args = (status,)
        rows = await self._run(lambda c: c.execute(sql + " ORDER BY updated_at DESC",
                                                   args).fetchall())
        return session_rows(rows)

    async def claim_resumable(self, owner: str | None = None,
                              lease_seconds: float = 60.0) -> SessionState | None:
        def claim(c: Conn) -> SessionState | None:
            at = time.time()
            rows = c.execute(
                CLAIMABLE_SESSIONS, (at, CLAIM_CANDIDATES)).fetchall()
            row = first_readable(rows, lambda r: _with_messages(c, _session(r)))
            if row is None:
                return None
            now = now_iso()
            until = at + lease_seconds if owner else None
            c.execute("UPDATE anfitrion_sessions SET status = 'running', version = version + 1, "
                      "updated_at = ?, lease_owner = ?, lease_expires = ? WHERE session_id = ?",
                      (now, owner, until, row[0]))
            state = _with_messages(c, _session(row))
            return SessionState(state.session_id, state.principal_id, "running", state.data,
                                state.version + 1, datetime.fromisoformat(now), state.messages,
                                state.saved_messages, owner, until)
        return await self._write(claim)

    async def acquire_lease(self, session_id: str, owner: str, until: float, *, now: float,
                            replace: str | None = None) -> SessionState | None:
        def acquire(c: Conn) -> SessionState | None:
            row = _leased(c, session_id, owner, until, now, replace)
            return None if row is None else _with_messages(c, _session(row))
        return await self._write(acquire)

    async def session_row(self, session_id: str) -> SessionState | None:
        row = await self._run(lambda c: c.execute(SESSION_ROW, (session_id,)).fetchone())
        return None if row is None else _session(row)

    async def acquire_lease_after(self, session_id: str, owner: str, until: float, *,
                                  now: float, known: int, replace: str | None = None
                                  ) -> tuple[SessionState, list[dict[str, Any]], int] | None:
        def acquire(c: Conn) -> tuple[SessionState, list[dict[str, Any]], int] | None:
            row = _leased(c, session_id, owner, until, now, replace)
            if row is None:
                return None
            messages, total = tail_rows(session_id, c.execute(
                TAIL_AND_SPAN, (session_id, session_id, known)).fetchall(), known)
            return _session(row), messages, total
        return await self._write(acquire)

    async def renew_lease(self, session_id: str, owner: str, until: float) -> bool:
        count = await self._write(lambda c: c.execute(
            "UPDATE anfitrion_sessions SET lease_expires = ? WHERE session_id = ? "
            "AND lease_owner = ?", (until, session_id, owner)).rowcount)
        return bool(count == 1)

    # -- approvals -----------------------------------------------------------------------------

    async def create_approval(self, request: ApprovalRequest) -> None:
        await self._write(lambda c: c.execute(
            "INSERT INTO anfitrion_approvals (id, session_id, call_id, digest, request, "
            "created_at, quorum) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            (request.id, request.session_id, request.call_id, request.digest,
             dump_json(request.to_dict()), request.created_at.isoformat(),
             request.quorum.required if request.quorum else 0)))

    async def get_approval(
        self, request_id: str
    ) -> StoredApproval | None:
        rows = await self._run(lambda c: c.execute(APPROVAL, (request_id,)).fetchall())
        if not rows:
            return None
        return approval_row(request_id, *rows[0])

    async def list_approvals(self, *, pending_only: bool = True,
                             session_id: str | None = None) -> Sequence[ApprovalRequest]:
        sql, args = approvals_query(pending_only, session_id)
        rows = await self._run(lambda c: c.execute(sql, args).fetchall())
        return approval_rows(rows)

    async def answer_approval(self, answer: ApprovalAnswer) -> bool:
        text = dump_json(answer.to_dict())
        count = await self._write(lambda c: c.execute(
            "UPDATE anfitrion_approvals SET answer = ? "
            "WHERE id = ? AND digest = ? AND answer IS NULL AND (quorum = 0 OR ? = 0)",
            (text, answer.request_id, answer.digest, int(answer.approved))).rowcount)
        return bool(count == 1)

    async def add_approval_vote(self, vote: ApprovalVote) -> VoteOutcome:
        def add(c: Conn) -> VoteOutcome:
            row = c.execute("SELECT quorum FROM anfitrion_approvals WHERE id = ? AND digest = ? "
                            "AND answer IS NULL AND quorum > 0",
                            (vote.request_id, vote.digest)).fetchone()
            if row is None:
                return VoteOutcome(VoteState.CLOSED, _votes(c, vote.request_id))
            inserted = c.execute(
                "INSERT INTO anfitrion_approval_votes (request_id, voter, seq, digest, approved, "
                "data) VALUES (?, ?, (SELECT COUNT(*) FROM anfitrion_approval_votes "
                "WHERE request_id = ?), ?, ?, ?) ON CONFLICT DO NOTHING",
                (vote.request_id, vote.voter, vote.request_id, vote.digest, int(vote.approved),
                 dump_json(vote.to_dict()))).rowcount
            votes = _votes(c, vote.request_id)
            if inserted != 1:
                return VoteOutcome(VoteState.DUPLICATE, votes)
            decided = tally(votes, int(row[0]))
            if decided is not None:
                c.execute("UPDATE anfitrion_approvals SET answer = ? WHERE id = ? "
                          "AND answer IS NULL", (dump_json(decided.to_dict()), vote.request_id))
            return VoteOutcome(VoteState.RECORDED, votes, decided)
        return await self._write(add)

    async def list_approval_votes(self, request_id: str) -> Sequence[ApprovalVote]:
        return await self._run(lambda c: _votes(c, request_id))

    async def consume_approval(self, request_id: str, digest: str) -> ApprovalAnswer | None:
        def consume(c: Conn) -> ApprovalAnswer | None:
            row = c.execute(
                "UPDATE anfitrion_approvals SET used = 1 WHERE id = ? AND digest = ? "
                "AND answer IS NOT NULL AND used = 0 RETURNING answer, session_id, call_id",
                (request_id, digest)).fetchone()
            if row is None:
                return None
            answer = ApprovalAnswer.from_dict(load_json(row[0]))
            if answer.approved:
                _advance(c, row[1], row[2], LedgerState.APPROVED, digest)
            return answer
        return await self._write(consume)

    # -- execution ledger ----------------------------------------------------------------------

    async def advance_execution(self, session_id: str, call_id: str, state: LedgerState,
                                digest: str) -> None:
        await self._write(lambda c: _advance(c, session_id, call_id, state, digest))

    async def execution_state(self, session_id: str, call_id: str) -> LedgerEntry | None:
        rows = await self._run(lambda c: c.execute(
            "SELECT session_id, call_id, state, digest, result, updated_at FROM anfitrion_ledger "
            "WHERE session_id = ? AND call_id = ?", (session_id, call_id)).fetchall())
        return _entry(rows[0]) if rows else None

    async def claim_execution(self, session_id: str, call_id: str, digest: str, *,
                              retry_unknown: bool = False, effect: EffectKey | None = None,
                              repeat_of: tuple[str, str] | None = None,
                              owner: str | None = None) -> Claim:
        return await self._write(_claimer(session_id, call_id, digest, retry_unknown, effect,
                                          repeat_of, owner))

    async def claim_execution_and_audit(
            self, session_id: str, call_id: str, digest: str, *,
            audit: Callable[[Claim], Sequence[AuditEntry]], retry_unknown: bool = False,
            effect: EffectKey | None = None, repeat_of: tuple[str, str] | None = None,
            owner: str | None = None) -> Claim:
        """:meth:`claim_execution` and the records *audit* gives for its outcome, in one
        transaction (one commit instead of two: the gate's records before the effect)."""
        claim = _claimer(session_id, call_id, digest, retry_unknown, effect, repeat_of, owner)

        def both(c: Conn) -> Claim:
            claimed = claim(c)
            rows = _audit_rows(audit(claimed))
            if rows:
                _append_audit(c, rows)
            return claimed

        return await self._write(both)

    async def effect_state(self, key: str) -> EffectEntry | None:
        return await self._run(lambda c: _effect(c, key))

    async def list_effects(self, *, unsettled_only: bool = False) -> Sequence[EffectEntry]:
        where = UNSETTLED_EFFECTS if unsettled_only else ""
        rows = await self._run(lambda c: c.execute(EFFECTS + where + EFFECTS_ORDER).fetchall())
        return [effect_row(r) for r in rows]

    async def resolve_effect(self, key: str, *, done: bool, by: str,
                             note: str = "") -> EffectEntry | None:
        def resolve(c: Conn) -> EffectEntry | None:
            found = _effect(c, key)
            if found is None:
                return None
            if found.state not in (LedgerState.CLAIMED, LedgerState.UNKNOWN):
                raise ConflictError(f"effect {key[:12]}… is not unsettled "
                                    f"({found.state.value if found.state else 'never claimed'})")
            if found.state is LedgerState.CLAIMED:
                lease = c.execute("SELECT lease_owner, lease_expires FROM anfitrion_sessions "
                                  "WHERE session_id = ?", (found.session_id,)).fetchone()
                refuse_while_running(key, found.session_id, *(lease or (None, None)))
            result = resolution_result(found.call_id, found.tool, done=done, by=by, note=note)
            c.execute("UPDATE anfitrion_ledger SET state = ?, result = ?, updated_at = ?, "
                      "claim_token = NULL WHERE session_id = ? AND call_id = ? AND state = ?",
                      (settled_state(result).value, dump_result(result), now_iso(),
                       found.session_id, found.call_id, found.state.value))
            c.execute("UPDATE anfitrion_effects SET resolved_by = ?, resolution_note = ?, "
                      "updated_at = ? WHERE key = ?", (by, note, now_iso(), key))
            return _effect(c, key)
        return await self._write(resolve)

    async def settle_execution(self, session_id: str, call_id: str, result: ToolResult,
                               token: str) -> bool:
        state, text, now = settled_state(result).value, dump_result(result), now_iso()
        count = await self._write(lambda c: c.execute(
            SETTLE,
            (state, text, now, session_id, call_id, token)).rowcount)
        return bool(count == 1)

    async def list_unknown_executions(self) -> Sequence[tuple[str, str]]:
        rows = await self._run(lambda c: c.execute(UNSETTLED_CALLS).fetchall())
        return [(r[0], r[1]) for r in rows]

    # -- audit ---------------------------------------------------------------------------------

    async def append_audit(self, type: str, session_id: str, at: float,
                           data: Mapping[str, Any]) -> AuditRecord:
        text = dump_json(data)
        stored = load_json(text)
        records = await self._write(lambda c: _append_audit(c, [(type, session_id, at, text)]))
        seq, prev, digest = records[0]
        return AuditRecord(seq, type, session_id, at, stored, prev, digest)

    async def append_audit_many(
            self, entries: Sequence[tuple[str, str, float, Mapping[str, Any]]]) -> None:
        rows = _audit_rows(entries)
        await self._write(lambda c: _append_audit(c, rows))

    async def append_audit_at_head(self, type: str, session_id: str, at: float,
                                   data_for: Callable[[int, str], Mapping[str, Any]]
                                   ) -> AuditRecord:
        def append(c: Conn) -> AuditRecord:
            seq, prev = c.execute("SELECT seq, hash FROM anfitrion_audit_head "
                                  "WHERE id = 1").fetchone()
            data = data_for(int(seq), str(prev))
            [(n, before, digest)] = _append_audit(c, _audit_rows([(type, session_id, at, data)]))
            return AuditRecord(n, type, session_id, at, load_json(dump_json(data)), before,
                               digest)
        return await self._write(append)

    async def prune_audit(self, before: float, at: float,
                          data_for: Callable[[PrunePlan], Mapping[str, Any]]
                          ) -> PrunePlan | None:
        def prune(c: Conn) -> PrunePlan | None:
            first = c.execute("SELECT min(seq) FROM anfitrion_audit").fetchone()[0]
            if first is None:
                return None
            checkpoints = c.execute("SELECT seq, at, prev_hash FROM anfitrion_audit "
                                    "WHERE type = ? AND at < ?", (CHECKPOINT, before)).fetchall()
            if not checkpoints:
                return None
            unsettled = {(r[0], r[1]) for r in c.execute(
                "SELECT session_id, call_id FROM anfitrion_ledger WHERE state NOT IN (?, ?)",
                FINAL_STATES)}
            last = max(r[0] for r in checkpoints)
            held = first_held(c.execute(
                "SELECT a.seq, a.session_id, a.data FROM anfitrion_audit a WHERE a.seq < ? AND "
                "a.session_id IN (SELECT session_id FROM anfitrion_ledger WHERE state NOT IN "
                "(?, ?))", (last, *FINAL_STATES)).fetchall(), unsettled)
            cut = choose_cut(checkpoints, before, int(first), None if held is None else held[0])
            if cut is None:
                return None
            removed = c.execute("DELETE FROM anfitrion_audit WHERE seq < ?", (cut[0],)).rowcount
            plan = PrunePlan(cut[0], cut[1], int(removed), held, cut[2])
            _append_audit(c, _audit_rows([(PRUNED, "", at, data_for(plan))]))
            return plan
        return await self._write(prune)

    async def prune_sessions(self, before: float) -> Sequence[str]:
        def prune(c: Conn) -> list[str]:
            unsettled = {r[0] for r in c.execute(
                "SELECT session_id FROM anfitrion_ledger WHERE state NOT IN (?, ?)",
                FINAL_STATES)}
            gone = ended_before(c.execute(
                f"SELECT session_id, status, updated_at FROM anfitrion_sessions WHERE status IN "
                f"({', '.join('?' * len(ENDED))})", ENDED).fetchall(), before, unsettled)
            for table in ("anfitrion_session_messages", "anfitrion_sessions"):
                c.executemany(f"DELETE FROM {table} WHERE session_id = ?",
                              [(g,) for g in gone])
            return gone
        return await self._write(prune)

    async def audit_records(self, session_id: str | None = None) -> Sequence[AuditRecord]:
        sql = "SELECT seq, type, session_id, at, data, prev_hash, hash FROM anfitrion_audit"
        args: tuple[Any, ...] = ()
        if session_id is not None:
            sql += " WHERE session_id = ?"
            args = (session_id,)
        rows = await self._run(lambda c: c.execute(sql + " ORDER BY seq", args).fetchall())
        return [audit_row(r) for r in rows]

    # -- counters and records ------------------------------------------------------------------

    async def count_calls(self, principal_id: str, tool: str, since: float) -> int:
        row = await self._run(lambda c: c.execute(
            "SELECT count(*) FROM anfitrion_call_log WHERE principal_id = ? AND tool = ? "
            "AND at >= ?", (principal_id, tool, since)).fetchone())
        return int(row[0])

    async def record_call(self, principal_id: str, tool: str, at: float) -> None:
        await self._write(lambda c: c.execute(
            "INSERT INTO anfitrion_call_log (principal_id, tool, at) VALUES (?, ?, ?)",
            (principal_id, tool, at)))

    async def get_record(self, namespace: str, key: str) -> Mapping[str, Any] | None:
        rows = await self._run(lambda c: c.execute(
            "SELECT value FROM anfitrion_records WHERE namespace = ? AND key = ?",
            (namespace, key)).fetchall())
        return record_value(namespace, key, rows[0][0]) if rows else None

    async def put_record(self, namespace: str, key: str, value: Mapping[str, Any]) -> None:
        text = dump_json(value)
        await self._write(lambda c: c.execute(
            "INSERT INTO anfitrion_records (namespace, key, value) VALUES (?, ?, ?) "
            "ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value",
            (namespace, key, text)))

    async def create_record(self, namespace: str, key: str, value: Mapping[str, Any]) -> bool:
        text = dump_json(value)
        created = await self._write(lambda c: c.execute(
            "INSERT INTO anfitrion_records (namespace, key, value) VALUES (?, ?, ?) "
            "ON CONFLICT (namespace, key) DO NOTHING", (namespace, key, text)).rowcount)
        return bool(created == 1)

    async def list_records(self, namespace: str) -> Sequence[tuple[str, Mapping[str, Any]]]:
        rows = await self._run(lambda c: c.execute(
            "SELECT key, value FROM anfitrion_records WHERE namespace = ? ORDER BY key",
            (namespace,)).fetchall())
        return [(r[0], record_value(namespace, r[0], r[1])) for r in rows]

    async def put_credential(self, entry: CredentialEntry) -> None:
        await self._write(lambda c: c.execute(
            f"INSERT INTO anfitrion_credentials ({CREDENTIAL_COLUMNS}) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (principal, resource, issuer, kind) "
            "DO UPDATE SET key_id = excluded.key_id, sealed = excluded.sealed, "
            "meta = excluded.meta, updated_at = excluded.updated_at",
            (entry.principal, entry.issuer, entry.resource, entry.kind, entry.key_id,
             entry.sealed, dump_json(entry.meta), entry.updated_at)))

    async def get_credentials(self, principal: str, resource: str,
                              kind: str) -> Sequence[CredentialEntry]:
        rows = await self._run(lambda c: c.execute(
            f"SELECT {CREDENTIAL_COLUMNS} FROM anfitrion_credentials WHERE principal = ? "
            "AND resource = ? AND kind = ? ORDER BY updated_at DESC",
            (principal, resource, kind)).fetchall())
        return [credential_row(r) for r in rows]

    async def delete_credentials(self, principal: str, resource: str, *,
                                 issuer: str | None = None, kind: str | None = None) -> int:
        cursor = await self._write(lambda c: c.execute(
            "DELETE FROM anfitrion_credentials WHERE principal = ? AND resource = ? "
            "AND (? IS NULL OR issuer = ?) AND (? IS NULL OR kind = ?)",
            (principal, resource, issuer, issuer, kind, kind)))
        return int(cursor.rowcount)

    async def list_credentials(self, principal: str | None = None) -> Sequence[CredentialEntry]:
        rows = await self._run(lambda c: c.execute(
            f"SELECT {CREDENTIAL_COLUMNS} FROM anfitrion_credentials WHERE (? IS NULL OR "
            "principal = ?) ORDER BY principal, resource, issuer, kind",
            (principal, principal)).fetchall())
        return [credential_row(r) for r in rows]

    async def close(self) -> None:
        """Close the connection once every operation queued before has finished.

        The store opens a new connection if it is used again.
        """
        with self._worker_lock:
            worker, self._worker = self._worker, None
            if self._finalizer is not None:
                self._finalizer.detach()
                self._finalizer = None
        if worker is not None:
            loop = asyncio.get_running_loop()
            done: asyncio.Future[None] = loop.create_future()
            worker.stop(loop, done)
            with anyio.CancelScope(shield=True):
                await done


@dataclass(slots=True)
class _Job:
    fn: Callable[[Conn], Any]
    write: bool
    migrate: bool
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]


class _Worker:
    """One connection and the one thread that uses it.

    The thread takes every job waiting (up to :data:`MAX_BATCH`), runs each run of
    consecutive writes as one transaction — a savepoint per job, one commit — and reads as
    they come, then reports every outcome to its caller's event loop. Jobs run in the order
    they were queued, so a caller's later read sees its earlier write.
    """

    def __init__(self, path: str, timeout: float, synchronous: str, auto_migrate: bool) -> None:
        self.jobs: queue.SimpleQueue[_Job | _Stop] = queue.SimpleQueue()
        self._path, self._timeout, self._synchronous = path, timeout, synchronous
        self._auto_migrate = auto_migrate
        self._conn: Conn | None = None
        self._migrated = False
        self._thread = threading.Thread(target=self._serve, name="anfitrion-sqlite",
                                        daemon=True)
        self._thread.start()

    def stop(self, loop: asyncio.AbstractEventLoop | None = None,
             done: asyncio.Future[None] | None = None) -> None:
        """Close after the jobs queued so far; resolve *done* (on *loop*) when closed."""
        self.jobs.put(_Stop(loop, done))

    # -- the thread ----------------------------------------------------------------------------

    def _serve(self) -> None:
        while True:
            batch = [self.jobs.get()]
            while len(batch) < MAX_BATCH:
                try:
                    batch.append(self.jobs.get_nowait())
                except queue.Empty:
                    break
            outcomes: list[tuple[_Job, bool, Any]] = []
            stop: _Stop | None = None
            jobs: list[_Job] = []
            for item in batch:
                if isinstance(item, _Stop):
                    stop = item  # nothing is queued after a stop (close() detached us)
                    break
                jobs.append(item)
            try:
                self._run_batch(jobs, outcomes)
            except BaseException as exc:  # noqa: BLE001 - a job raised past Exception: its
                # transaction is undone and the jobs not answered yet fail; the thread goes on
                if self._conn is not None and self._conn.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        self._conn.execute("ROLLBACK")
                answered = {id(outcome[0]) for outcome in outcomes}
                error = StoreError(f"SQLite store: an operation was interrupted ({exc!r})")
                error.__cause__ = exc
                outcomes.extend((job, False, error) for job in jobs if id(job) not in answered)
            _report(outcomes)
            if stop is not None:
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None
                if stop.loop is not None and stop.done is not None:
                    _call_soon(stop.loop, _resolve, stop.done)
                return

    def _run_batch(self, jobs: list[_Job], outcomes: list[tuple[_Job, bool, Any]]) -> None:
        try:
            # only `migrate()` may turn an existing empty file into a store
            conn = self._connect(create=any(job.fn is _apply_migrations for job in jobs))
            if not self._migrated and any(job.migrate for job in jobs):
                self._ensure_migrated(conn)
        except Exception as exc:  # noqa: BLE001 - the thread's top level: goes to the callers
            error = _translate(exc)
            outcomes.extend((job, False, error) for job in jobs)
            return
        i = 0
        while i < len(jobs):
            if not jobs[i].write:
                job = jobs[i]
                try:
                    outcomes.append((job, True, job.fn(conn)))
                except Exception as exc:  # noqa: BLE001 - the thread's top level: to the caller
                    outcomes.append((job, False, _translate(exc)))
                i += 1
                continue
            j = i + 1
            while j < len(jobs) and jobs[j].write:
                j += 1
            _transaction(conn, jobs[i:j], outcomes)
            i = j

    def _connect(self, *, create: bool = False) -> Conn:
        """The connection, opened on first use.

        A file that does not exist becomes a new store. An existing file must be an SQLite
        database: an empty one (0 bytes: truncated, or made by something else) is refused
        unless *create* (``anfitrion db migrate``), since opening it would pass an empty store
        off as the one that was there.
        """
        if self._conn is None:
            if self._path != ":memory:":
                Path(self._path).parent.mkdir(parents=True, exist_ok=True)
                _check_database_file(Path(self._path), create=create)
            conn = sqlite3.connect(self._path, timeout=self._timeout, isolation_level=None,
                                   check_same_thread=False)
            try:
                conn.execute(f"PRAGMA busy_timeout = {int(self._timeout * 1000)}")
                _set_wal(conn, self._timeout)
                # FULL (default): every commit is on disk before the host goes on. NORMAL
                # (WAL): commits survive a crash of the process but not a power loss.
                conn.execute(f"PRAGMA synchronous = {self._synchronous.upper()}")
                conn.execute(MIGRATIONS_TABLE)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def _ensure_migrated(self, conn: Conn) -> None:
        if self._auto_migrate:
            _apply_migrations(conn)
        else:
            applied = {r[0] for r in conn.execute("SELECT name FROM anfitrion_migrations")}
            if pending(applied):
                raise StoreError(f"the store {self._path} needs migrations: run "
                                 "`anfitrion db migrate`")
        self._migrated = True


@dataclass(frozen=True, slots=True)
class _Stop:
    loop: asyncio.AbstractEventLoop | None
    done: asyncio.Future[None] | None


def _transaction(conn: Conn, jobs: Sequence[_Job],
                 outcomes: list[tuple[_Job, bool, Any]]) -> None:
    """Run write *jobs* in one transaction: each in a savepoint (a job that fails is rolled
    back alone), one commit for all. If the transaction itself fails, every job fails."""
    single = len(jobs) == 1
    done: list[tuple[_Job, bool, Any]] = []
    try:
        conn.execute("BEGIN IMMEDIATE")
        for job in jobs:
            if not single:
                conn.execute("SAVEPOINT job")
            try:
                value = job.fn(conn)
            # BLE001 - re-raised, or handed to the job's caller by the thread's top level
            except Exception as exc:
                if single:
                    raise
                try:
                    conn.execute("ROLLBACK TO job")
                    conn.execute("RELEASE job")
                except sqlite3.Error:  # the error ended the transaction: it is lost
                    raise exc from None
                done.append((job, False, _translate(exc)))
            else:
                if not single:
                    conn.execute("RELEASE job")
                done.append((job, True, value))
        conn.execute("COMMIT")
    except Exception as exc:  # noqa: BLE001 - the thread's top level: goes to the callers
        if conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        error = _translate(exc)
        if single or isinstance(exc, sqlite3.Error):
            outcomes.extend((job, False, error) for job in jobs)
        else:  # a job's own error that ended the transaction: its peers are not committed
            lost = StoreError(f"SQLite store: the transaction was rolled back: {exc}")
            lost.__cause__ = exc
            outcomes.extend((job, False, error if job is jobs[len(done)] else lost)
                            for job in jobs)
        return
    outcomes.extend(done)


def _translate(exc: Exception) -> Exception:
    if isinstance(exc, sqlite3.Error) and not isinstance(exc, AnfitrionError):
        error = StoreError(f"SQLite store: {exc}")
        error.__cause__ = exc
        return error
    return exc


def _report(outcomes: Sequence[tuple[_Job, bool, Any]]) -> None:
    """Hand the outcomes to their event loops: one wake-up per loop."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[_Job, bool, Any]]] = {}
    for outcome in outcomes:
        by_loop.setdefault(outcome[0].loop, []).append(outcome)
    for loop, some in by_loop.items():
        _call_soon(loop, _settle, some)


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Callable[..., None], *args: Any) -> None:
    with contextlib.suppress(RuntimeError):  # a closed loop: nobody is waiting any more
        loop.call_soon_threadsafe(fn, *args)


def _settle(outcomes: Sequence[tuple[_Job, bool, Any]]) -> None:
    for job, ok, value in outcomes:
        if not job.future.done():
            if ok:
                job.future.set_result(value)
            else:
                job.future.set_exception(value)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _apply_migrations(conn: Conn) -> list[str]:
    """Apply pending migrations, each with its record, in one transaction."""
    done: list[str] = []

    def apply(c: Conn) -> None:
        applied = {r[0] for r in c.execute("SELECT name FROM anfitrion_migrations")}
        for migration in pending(applied):
            for statement in migration.statements:
                c.execute(statement)
            c.execute("INSERT INTO anfitrion_migrations (name, applied_at) VALUES (?, ?)",
                      (migration.name, now_iso()))
            done.append(migration.name)

    _write(conn, apply)
    return done


def _claimer(session_id: str, call_id: str, digest: str, retry_unknown: bool,
             effect: EffectKey | None, repeat_of: tuple[str, str] | None,
             owner: str | None) -> Callable[[Conn], Claim]:
    """The claim of :meth:`SQLiteStore.claim_execution`, to run in a write transaction."""
    def claim(c: Conn) -> Claim:
        if owner is not None and (leased := c.execute(
                "SELECT lease_owner FROM anfitrion_sessions WHERE session_id = ?",
                (session_id,)).fetchone()) is not None:
            fence_claim(session_id, call_id, leased[0], owner)
        if effect is not None:
            duplicate = _reserve_effect(c, effect, (session_id, call_id), repeat_of,
                                        retry_unknown)
            if duplicate is not None:
                return Claim(ClaimState.DUPLICATE, duplicate.result, effect=duplicate)
        row = c.execute("SELECT state, result FROM anfitrion_ledger "
                        "WHERE session_id = ? AND call_id = ?",
                        (session_id, call_id)).fetchone()
        current = _state(row[0]) if row else None
        new, answer = claim_transition(current, retry_unknown=retry_unknown)
        token = new_claim_token() if new is LedgerState.CLAIMED else None
        if new is not None and row is None:
            c.execute("INSERT INTO anfitrion_ledger (session_id, call_id, state, digest, "
                      "updated_at, claim_token) VALUES (?, ?, ?, ?, ?, ?)",
                      (session_id, call_id, new.value, digest, now_iso(), token))
        elif new is not None:
            # compare-and-set: only from the state just read (we hold the write lock)
            cur = c.execute("UPDATE anfitrion_ledger SET state = ?, updated_at = ?, "
                            "claim_token = coalesce(?, claim_token) "
                            "WHERE session_id = ? AND call_id = ? AND state = ?",
                            (new.value, now_iso(), token, session_id, call_id, row[0]))
            if cur.rowcount != 1:  # pragma: no cover - impossible under BEGIN IMMEDIATE
                raise ConflictError(f"ledger entry {call_id!r} changed during its claim")
        return Claim(answer, load_result(row[1]) if row else None, token)
    return claim


def _audit_rows(entries: Sequence[tuple[str, str, float, Mapping[str, Any]]]
                ) -> list[tuple[str, str, float, str]]:
    # records hold no floats (audit.event_record_data): no search for a NaN
    return [(type, session_id, at, float_free_bytes(data).decode("utf-8", "surrogatepass"))
            for type, session_id, at, data in entries]


def _append_audit(c: Conn, rows: Sequence[tuple[str, str, float, str]]
                  ) -> list[tuple[int, str, str]]:
    """Chain *rows* (type, session, at, canonical data text) after the head, under the write
    lock; returns each record's (seq, prev_hash, hash)."""
    seq, prev = c.execute("SELECT seq, hash FROM anfitrion_audit_head WHERE id = 1").fetchone()
    out = chain_rows(seq, prev, rows)
    inserts = [(n, kind, session_id, at, text, before, digest)
               for (kind, session_id, at, text), (n, before, digest) in zip(rows, out, strict=True)]
    if out:
        seq, prev = out[-1][0], out[-1][2]
    c.executemany("INSERT INTO anfitrion_audit (seq, type, session_id, at, data, prev_hash, "
                  "hash) VALUES (?, ?, ?, ?, ?, ?, ?)", inserts)
    c.execute("UPDATE anfitrion_audit_head SET seq = ?, hash = ? WHERE id = 1", (seq, prev))
    return out


SQLITE_HEADER = b"SQLite format 3\x00"


def _check_database_file(path: Path, *, create: bool) -> None:
    """Refuse an existing *path* that is empty (unless *create*) or not an SQLite database;
    create a missing one so that it never exists as an empty file (see :func:`_create_new`).

    Raises:
        StoreError: the file is empty, not an SQLite database, or cannot be read.
    """
    try:
        with path.open("rb") as file:
            head = file.read(len(SQLITE_HEADER))
    except FileNotFoundError:
        _create_new(path)
        return
    except IsADirectoryError:
        raise StoreError(f"the SQLite store {path} is a folder, not a database file") from None
    except OSError as exc:
        raise StoreError(f"cannot read the SQLite store {path}: {exc.strerror or exc}") from exc
    if not head and not create:
        raise StoreError(
            f"the SQLite store {path} is an empty file (0 bytes), not a store: it may have "
            "been truncated. Restore it from a backup; to start a new store there, run "
            f"`anfitrion db migrate --store sqlite:///{path}` (or delete the file).")
    if head and head != SQLITE_HEADER:
        raise StoreError(f"{path} is not an SQLite database (it does not begin with the SQLite "
                         "header): refusing to use it as a store")


def _create_new(path: Path) -> None:
    """Create an SQLite database at *path*, which never exists as an empty file.

    ``sqlite3.connect`` creates an empty file and writes the header only later, so another
    process opening the same new store in between would see an empty file and refuse it.
    The database is made under a temporary name and hard-linked into place: whoever links
    first creates the store, the others use it. Where hard links are not supported, the
    file is created as SQLite does.
    """
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.new")
    try:
        made = sqlite3.connect(temporary, isolation_level=None)
        try:
            made.execute("PRAGMA journal_mode = WAL")  # writes the header (4 KiB)
        finally:
            made.close()
        with contextlib.suppress(FileExistsError):
            os.link(temporary, path)
    except (OSError, sqlite3.Error):
        pass  # no hard links (or no temporary file) here: sqlite3.connect creates the file
    finally:
        with contextlib.suppress(OSError):
            temporary.unlink()


def _set_wal(conn: Conn, timeout: float) -> None:
    """Switch to WAL. SQLite answers "locked" at once, without its busy handler, when several
    connections open a new file together: retry until the timeout."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _write(conn: Conn, fn: Callable[[Conn], T]) -> T:
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = fn(conn)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return result


def _advance(c: Conn, session_id: str, call_id: str, state: LedgerState, digest: str) -> None:
    row = c.execute("SELECT state FROM anfitrion_ledger WHERE session_id = ? AND call_id = ?",
                    (session_id, call_id)).fetchone()
    if not may_advance(_state(row[0]) if row else None, state):
        return
    c.execute("INSERT INTO anfitrion_ledger (session_id, call_id, state, digest, updated_at) "
              "VALUES (?, ?, ?, ?, ?) ON CONFLICT (session_id, call_id) DO UPDATE "
              "SET state = excluded.state, digest = excluded.digest, "
              "updated_at = excluded.updated_at",
              (session_id, call_id, state.value, digest, now_iso()))


def _votes(c: Conn, request_id: str) -> tuple[ApprovalVote, ...]:
    return tuple(vote_of(row[0]) for row in c.execute(VOTES, (request_id,)).fetchall())


def _effect(c: Conn, key: str) -> EffectEntry | None:
    row = c.execute(EFFECTS + " WHERE e.key = ?", (key,)).fetchone()
    return effect_row(row) if row else None


def _reserve_effect(c: Conn, effect: EffectKey, me: tuple[str, str],
                    repeat_of: tuple[str, str] | None, retry_unknown: bool) -> EffectEntry | None:
    """Reserve *effect* for call *me* (under the write lock); the entry holding it if it is
    another call's (a duplicate), else ``None``."""
    held = _effect(c, effect.key)
    holder = (held.session_id, held.call_id) if held else None
    move = effect_move(holder, me, held.state if held else None, repeat_of,
                       retry_unknown=retry_unknown)
    now = now_iso()
    if move is EffectMove.DUPLICATE:
        return held
    if held is None:
        c.execute(EFFECT_INSERT,
                  (effect.key, effect.display, effect.scope.value, effect.tool, me[0], me[1],
                   now, now, *effect_arguments(effect)))
    elif move is not EffectMove.OWN:
        c.execute(EFFECT_TAKE_OVER,
                  (me[0], me[1], now, int(move is EffectMove.REPEAT), *effect_arguments(effect),
                   effect.key))
    return None


def _leased(c: Conn, session_id: str, owner: str, until: float, now: float,
            replace: str | None) -> Any:
    """The session's row, leased to *owner* (``None``: another owner's live lease, or none)."""
    return c.execute(LEASE, (now_iso(), owner, until, session_id, owner, replace,
                             now)).fetchone()


def _with_messages(c: Conn, state: SessionState) -> SessionState:
    rows = c.execute("SELECT idx, data FROM anfitrion_session_messages WHERE session_id = ? "
                     "ORDER BY idx", (state.session_id,)).fetchall()
    messages = message_rows(state.session_id, rows)
    return SessionState(state.session_id, state.principal_id, state.status, state.data,
                        state.version, state.updated_at, messages, len(messages),
                        state.lease_owner, state.lease_expires)




def _session(row: Sequence[Any]) -> SessionState:
    return session_row(row)


def _entry(row: Sequence[Any]) -> LedgerEntry:
    return entry_row(row)
