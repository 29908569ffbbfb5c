"""The SQLite store: the embedded default (stdlib ``sqlite3``).

One connection per store object, in WAL mode with a busy timeout, used from worker threads
(never on the event loop) behind a lock. Every write is one ``BEGIN IMMEDIATE`` transaction,
so other *processes* sharing the file queue on the write lock instead of failing: claims,
answers and the audit chain are compare-and-set under that lock.

Example:
    >>> store = SQLiteStore.from_url("sqlite:///anfitrion.db")  # doctest: +SKIP
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

import anyio.to_thread

from ..approvals import ApprovalAnswer, ApprovalRequest
from ..conversation import ToolResult
from ..exceptions import ConflictError, StoreError, UserError, map_exceptions
from ._base import AuditRecord, Claim, LedgerEntry, LedgerState, SessionState
from ._migrations import MIGRATIONS, MIGRATIONS_TABLE, pending
from ._rows import (
    claim_transition,
    dump_json,
    dump_result,
    load_approval,
    load_json,
    load_result,
    may_advance,
    now_iso,
    settled_state,
)

__all__ = ["SQLiteStore"]

T = TypeVar("T")
Conn = sqlite3.Connection


def _state(value: str | None) -> LedgerState | None:
    return None if value is None else LedgerState(value)


class SQLiteStore:
    """A :class:`~anfitrion.store.Store` in one SQLite file.

    Args:
        path: the database file (created with its folder), or ``:memory:``.
        timeout: seconds to wait for another process's write lock.
        migrate: apply pending migrations on first use (``anfitrion db migrate`` otherwise).
    """

    def __init__(self, path: str | Path, *, timeout: float = 30.0, migrate: bool = True,
                 synchronous: str = "full") -> None:
        if synchronous not in ("full", "normal"):
            raise UserError(f"synchronous must be 'full' or 'normal', not {synchronous!r}")
        self.synchronous = synchronous
        self.path = str(path)
        self.timeout = timeout
        self.auto_migrate = migrate
        self._lock = threading.Lock()
        self._conn: Conn | None = None
        self._migrated = False

    @classmethod
    def from_url(cls, url: str) -> SQLiteStore:
        """``sqlite:///relative.db``, ``sqlite:////absolute/path.db``; ``?timeout=SECONDS``.

        Raises:
            UserError: the URL names no file.
        """
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
        return cls(unquote(parts.path[1:]), timeout=timeout, migrate=migrate,
                   synchronous=synchronous)

    @property
    def url(self) -> str:
        return f"sqlite:///{self.path}"

    # -- plumbing ------------------------------------------------------------------------------

    def _connect(self) -> Conn:
        if self._conn is None:
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None,
                                   check_same_thread=False)
            conn.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
            _set_wal(conn, self.timeout)
            # FULL (default): every commit is on disk before the host goes on. NORMAL (WAL):
            # commits survive a crash of the process but not a power loss; much faster.
            conn.execute(f"PRAGMA synchronous = {self.synchronous.upper()}")
            conn.execute(MIGRATIONS_TABLE)
            self._conn = conn
        return self._conn

    def _migrate(self, conn: Conn) -> list[str]:
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
        self._migrated = True
        return done

    def _call(self, fn: Callable[[Conn], T], migrate: bool) -> T:
        with self._lock, map_exceptions({sqlite3.Error: StoreError}, "SQLite store"):
            conn = self._connect()
            if migrate and not self._migrated:
                if not self.auto_migrate:
                    applied = {r[0] for r in conn.execute(
                        "SELECT name FROM anfitrion_migrations")}
                    if pending(applied):
                        raise StoreError(f"the store {self.path} needs migrations: run "
                                         "`anfitrion db migrate`")
                    self._migrated = True
                else:
                    self._migrate(conn)
            return fn(conn)

    async def _run(self, fn: Callable[[Conn], T], *, migrate: bool = True) -> T:
        return await anyio.to_thread.run_sync(self._call, fn, migrate)

    async def _write(self, fn: Callable[[Conn], T]) -> T:
        return await self._run(lambda c: _write(c, fn))

    # -- migrations ----------------------------------------------------------------------------

    async def migrate(self) -> list[str]:
        """Apply pending migrations; return the names applied now."""
        return await self._run(self._migrate, migrate=False)

    async def migration_status(self) -> list[tuple[str, str | None]]:
        """Every known migration and when it was applied (None: pending)."""
        def read(c: Conn) -> list[tuple[str, str | None]]:
            applied = dict(c.execute("SELECT name, applied_at FROM anfitrion_migrations"))
            return [(m.name, applied.get(m.name)) for m in MIGRATIONS]
        return await self._run(read, migrate=False)

    # -- sessions ------------------------------------------------------------------------------

    async def save_session(self, state: SessionState) -> SessionState:
        data = dump_json(state.data)
        new = [(state.session_id, state.saved_messages + i, dump_json(m))
               for i, m in enumerate(state.messages[state.saved_messages:])]

        def save(c: Conn) -> SessionState:
            now = now_iso()
            if state.version == 0:
                cur = c.execute(
                    "INSERT INTO anfitrion_sessions (session_id, principal_id, status, data, "
                    "version, updated_at) VALUES (?, ?, ?, ?, 1, ?) ON CONFLICT DO NOTHING",
                    (state.session_id, state.principal_id, state.status, data, now))
            else:
                cur = c.execute(
                    "UPDATE anfitrion_sessions SET principal_id = ?, status = ?, data = ?, "
                    "version = version + 1, updated_at = ? WHERE session_id = ? AND version = ?",
                    (state.principal_id, state.status, data, now, state.session_id,
                     state.version))
            if cur.rowcount != 1:
                raise ConflictError(f"session {state.session_id!r} was changed concurrently")
            if state.messages:  # only what changed: messages after the saved ones
                c.execute("DELETE FROM anfitrion_session_messages WHERE session_id = ? "
                          "AND idx >= ?", (state.session_id, state.saved_messages))
                c.executemany("INSERT INTO anfitrion_session_messages (session_id, idx, data) "
                              "VALUES (?, ?, ?)", new)
                return SessionState(state.session_id, state.principal_id, state.status,
                                    state.data, state.version + 1, datetime.fromisoformat(now),
                                    state.messages, len(state.messages))
            return _with_messages(c, SessionState(
                state.session_id, state.principal_id, state.status, state.data,
                state.version + 1, datetime.fromisoformat(now)))

        return await self._write(save)

    async def load_session(self, session_id: str) -> SessionState | None:
        def load(c: Conn) -> SessionState | None:
            row = c.execute(
                "SELECT session_id, principal_id, status, data, version, updated_at "
                "FROM anfitrion_sessions WHERE session_id = ?", (session_id,)).fetchone()
            return None if row is None else _with_messages(c, _session(row))

        return await self._run(load)

    async def list_sessions(self, status: str | None = None) -> Sequence[SessionState]:
        sql = ("SELECT session_id, principal_id, status, data, version, updated_at "
               "FROM anfitrion_sessions")
        args: tuple[Any, ...] = ()
        if status is not None:
            sql += " WHERE status = ?"
            args = (status,)
        rows = await self._run(lambda c: c.execute(sql + " ORDER BY updated_at DESC",
                                                   args).fetchall())
        return [_session(r) for r in rows]

    async def claim_resumable(self) -> SessionState | None:
        def claim(c: Conn) -> SessionState | None:
            row = c.execute(
                "SELECT session_id, principal_id, status, data, version, updated_at "
                "FROM anfitrion_sessions s WHERE s.status = 'suspended' AND NOT EXISTS "
                "(SELECT 1 FROM anfitrion_approvals a WHERE a.session_id = s.session_id "
                "AND a.answer IS NULL) ORDER BY s.updated_at LIMIT 1").fetchone()
            if row is None:
                return None
            now = now_iso()
            c.execute("UPDATE anfitrion_sessions SET status = 'running', version = version + 1, "
                      "updated_at = ? WHERE session_id = ?", (now, row[0]))
            state = _with_messages(c, _session(row))
            return SessionState(state.session_id, state.principal_id, "running", state.data,
                                state.version + 1, datetime.fromisoformat(now), state.messages,
                                state.saved_messages)
        return await self._write(claim)

    # -- approvals -----------------------------------------------------------------------------

    async def create_approval(self, request: ApprovalRequest) -> None:
        await self._write(lambda c: c.execute(
            "INSERT INTO anfitrion_approvals (id, session_id, call_id, digest, request, "
            "created_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            (request.id, request.session_id, request.call_id, request.digest,
             dump_json(request.to_dict()), request.created_at.isoformat())))

    async def get_approval(
        self, request_id: str
    ) -> tuple[ApprovalRequest, ApprovalAnswer | None, bool] | None:
        rows = await self._run(lambda c: c.execute(
            "SELECT request, answer, used FROM anfitrion_approvals WHERE id = ?",
            (request_id,)).fetchall())
        if not rows:
            return None
        return load_approval(*rows[0])

    async def list_approvals(self, *, pending_only: bool = True,
                             session_id: str | None = None) -> Sequence[ApprovalRequest]:
        sql = "SELECT request FROM anfitrion_approvals WHERE 1 = 1"
        args: list[Any] = []
        if pending_only:
            sql += " AND answer IS NULL"
        if session_id is not None:
            sql += " AND session_id = ?"
            args.append(session_id)
        rows = await self._run(lambda c: c.execute(sql + " ORDER BY created_at DESC",
                                                   args).fetchall())
        return [ApprovalRequest.from_dict(load_json(r[0])) for r in rows]

    async def answer_approval(self, answer: ApprovalAnswer) -> bool:
        cur = await self._write(lambda c: c.execute(
            "UPDATE anfitrion_approvals SET answer = ? "
            "WHERE id = ? AND digest = ? AND answer IS NULL",
            (dump_json(answer.to_dict()), answer.request_id, answer.digest)))
        return bool(cur.rowcount == 1)

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

    async def claim_execution(self, session_id: str, call_id: str, digest: str) -> Claim:
        def claim(c: Conn) -> Claim:
            row = c.execute("SELECT state, result FROM anfitrion_ledger "
                            "WHERE session_id = ? AND call_id = ?",
                            (session_id, call_id)).fetchone()
            current = _state(row[0]) if row else None
            new, answer = claim_transition(current)
            if new is not None and row is None:
                c.execute("INSERT INTO anfitrion_ledger (session_id, call_id, state, digest, "
                          "updated_at) VALUES (?, ?, ?, ?, ?)",
                          (session_id, call_id, new.value, digest, now_iso()))
            elif new is not None:
                # compare-and-set: only from the state just read (we hold the write lock)
                cur = c.execute("UPDATE anfitrion_ledger SET state = ?, updated_at = ? "
                                "WHERE session_id = ? AND call_id = ? AND state = ?",
                                (new.value, now_iso(), session_id, call_id, row[0]))
                if cur.rowcount != 1:  # pragma: no cover - impossible under BEGIN IMMEDIATE
                    raise ConflictError(f"ledger entry {call_id!r} changed during its claim")
            return Claim(answer, load_result(row[1]) if row else None)
        return await self._write(claim)

    async def settle_execution(self, session_id: str, call_id: str, result: ToolResult) -> None:
        state, text, now = settled_state(result).value, dump_result(result), now_iso()
        await self._write(lambda c: c.execute(
            "INSERT INTO anfitrion_ledger (session_id, call_id, state, digest, result, "
            "updated_at) VALUES (?, ?, ?, '', ?, ?) ON CONFLICT (session_id, call_id) DO UPDATE "
            "SET state = excluded.state, result = excluded.result, "
            "updated_at = excluded.updated_at",
            (session_id, call_id, state, text, now)))

    async def list_unknown_executions(self) -> Sequence[tuple[str, str]]:
        rows = await self._run(lambda c: c.execute(
            "SELECT session_id, call_id FROM anfitrion_ledger WHERE state IN (?, ?) "
            "ORDER BY updated_at", (LedgerState.CLAIMED.value,
                                    LedgerState.UNKNOWN.value)).fetchall())
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
        rows = [(type, session_id, at, dump_json(data)) for type, session_id, at, data in entries]
        await self._write(lambda c: _append_audit(c, rows))

    async def audit_records(self, session_id: str | None = None) -> Sequence[AuditRecord]:
        sql = "SELECT seq, type, session_id, at, data, prev_hash, hash FROM anfitrion_audit"
        args: tuple[Any, ...] = ()
        if session_id is not None:
            sql += " WHERE session_id = ?"
            args = (session_id,)
        rows = await self._run(lambda c: c.execute(sql + " ORDER BY seq", args).fetchall())
        return [AuditRecord(r[0], r[1], r[2], r[3], load_json(r[4]), r[5], r[6]) for r in rows]

    async def audit_head(self) -> tuple[int, str]:
        """The chain head the store recorded: (last seq, last hash)."""
        row = await self._run(lambda c: c.execute(
            "SELECT seq, hash FROM anfitrion_audit_head WHERE id = 1").fetchone())
        return int(row[0]), str(row[1])

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
        return load_json(rows[0][0]) if rows else None

    async def put_record(self, namespace: str, key: str, value: Mapping[str, Any]) -> None:
        text = dump_json(value)
        await self._write(lambda c: c.execute(
            "INSERT INTO anfitrion_records (namespace, key, value) VALUES (?, ?, ?) "
            "ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value",
            (namespace, key, text)))

    async def list_records(self, namespace: str) -> Sequence[tuple[str, Mapping[str, Any]]]:
        rows = await self._run(lambda c: c.execute(
            "SELECT key, value FROM anfitrion_records WHERE namespace = ? ORDER BY key",
            (namespace,)).fetchall())
        return [(r[0], load_json(r[1])) for r in rows]

    async def close(self) -> None:
        def close() -> None:
            with self._lock:
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None
                    self._migrated = False
        await anyio.to_thread.run_sync(close)


def _append_audit(c: Conn, rows: Sequence[tuple[str, str, float, str]]
                  ) -> list[tuple[int, str, str]]:
    """Chain *rows* (type, session, at, canonical data text) after the head, under the write
    lock; returns each record's (seq, prev_hash, hash)."""
    from ..audit import chain_hash

    seq, prev = c.execute("SELECT seq, hash FROM anfitrion_audit_head WHERE id = 1").fetchone()
    out: list[tuple[int, str, str]] = []
    inserts = []
    for type, session_id, at, text in rows:
        seq += 1
        digest = chain_hash(seq, type, session_id, at, {}, prev, data_text=text)
        inserts.append((seq, type, session_id, at, text, prev, digest))
        out.append((seq, prev, digest))
        prev = digest
    c.executemany("INSERT INTO anfitrion_audit (seq, type, session_id, at, data, prev_hash, "
                  "hash) VALUES (?, ?, ?, ?, ?, ?, ?)", inserts)
    c.execute("UPDATE anfitrion_audit_head SET seq = ?, hash = ? WHERE id = 1", (seq, prev))
    return out


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


def _with_messages(c: Conn, state: SessionState) -> SessionState:
    rows = c.execute("SELECT data FROM anfitrion_session_messages WHERE session_id = ? "
                     "ORDER BY idx", (state.session_id,)).fetchall()
    messages = [load_json(r[0]) for r in rows]
    return SessionState(state.session_id, state.principal_id, state.status, state.data,
                        state.version, state.updated_at, messages, len(messages))


def _session(row: Sequence[Any]) -> SessionState:
    return SessionState(row[0], row[1], row[2], load_json(row[3]), int(row[4]),
                        datetime.fromisoformat(row[5]))


def _entry(row: Sequence[Any]) -> LedgerEntry:
    return LedgerEntry(row[0], row[1], LedgerState(row[2]), row[3], load_result(row[4]),
                       datetime.fromisoformat(row[5]))
