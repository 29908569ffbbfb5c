"""A session's save carries the audit records buffered so far, in the same transaction
(SQLite and PostgreSQL).

A one-call conversation used to commit five times on SQLite (its start, its turn, the save, the
records of the save, its end); a commit is an fsync with ``synchronous=full``. It now commits
twice: its first turn with its start, and the session with the records of its last turn and its
end. On PostgreSQL it committed four times (the session, then three audit appends: its turn,
the save's records, ``run.ended``) and now twice too. A save that fails writes neither.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest

from anfitrion import Effect, Host, Reply, ScriptedModel, StopReason, Toolbox, ToolCall
from anfitrion._audit import verify_chain
from anfitrion.exceptions import ConflictError
from anfitrion.store import SessionAuditStore, SessionState, open_store
from anfitrion.store._sqlite import SQLiteStore

from .pg_schema import pg_schema_url

pytestmark = pytest.mark.anyio


def _tools() -> Toolbox:
    tools = Toolbox()

    @tools.tool(effect=Effect.READ, provenance="trusted")
    async def get_weather(location: str) -> str:
        """The weather."""
        return f"sunny in {location}"

    return tools


class CountingStore(SQLiteStore):
    """The real SQLite store, counting the write transactions it is asked for."""

    writes = 0

    async def _write(self, fn):  # type: ignore[no-untyped-def]
        self.writes += 1
        return await super()._write(fn)


async def test_a_one_call_conversation_commits_twice_and_its_chain_verifies(
        tmp_path: Path) -> None:
    store = CountingStore(tmp_path / "a.db")
    await store.migrate()
    store.writes = 0
    script = [Reply((ToolCall("c1", "get_weather", '{"location": "Lisboa"}'),),
                    StopReason.TOOL_USE), "done"]
    run = await Host(model=ScriptedModel(script), tools=_tools(), store=store).run("go")
    assert run.status.value == "completed"
    # the first turn with the run's start; the session with the second turn's records and
    # the run's end
    assert store.writes == 2
    records = await store.audit_records()
    assert [r.type for r in records] == [
        "run.started", "model.requested", "model.replied", "call.proposed", "call.validated",
        "call.decided", "result.returned", "model.requested", "model.replied", "run.ended"]
    assert verify_chain(records).ok
    await store.close()


@pytest.fixture
def pg_url() -> Iterator[str]:
    yield from pg_schema_url()


@pytest.mark.postgres
async def test_a_one_call_conversation_commits_twice_on_postgresql(pg_url: str) -> None:
    from anfitrion.store._postgres import PostgresStore

    class CountingPg(PostgresStore):
        """The real PostgreSQL store, counting its transactions and its audit-only appends
        (each a commit of its own)."""

        commits = 0

        def _connection(self, *, transaction: bool = False
                        ) -> AbstractAsyncContextManager[Any]:
            self.commits += transaction
            return super()._connection(transaction=transaction)

        async def _write_audit_batch(self, pool: Any) -> None:
            self.commits += 1
            await super()._write_audit_batch(pool)

    store = CountingPg(pg_url)
    await store.migrate()
    store.commits = 0
    script = [Reply((ToolCall("c1", "get_weather", '{"location": "Lisboa"}'),),
                    StopReason.TOOL_USE), "done"]
    run = await Host(model=ScriptedModel(script), tools=_tools(), store=store).run("go")
    assert run.status.value == "completed"
    # the first turn's records with the run's start; the session with the second turn's
    # records and the run's end, in one transaction
    assert store.commits == 2
    records = await store.audit_records()
    assert [r.type for r in records][-3:] == ["model.requested", "model.replied", "run.ended"]
    assert len(records) == 10 and verify_chain(records).ok
    await store.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def durable(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    if request.param == "sqlite":
        opened = open_store(f"sqlite:///{tmp_path / 'a.db'}")
        yield opened
        await opened.close()
        return
    for url in pg_schema_url():
        opened = open_store(url)
        yield opened
        await opened.close()


async def test_a_save_that_conflicts_writes_no_audit_record(durable: Any) -> None:
    store = durable
    assert isinstance(store, SessionAuditStore)
    first = await store.save_session(SessionState("s1", "alice", "running", {"turn": 0}))
    await store.save_session(SessionState("s1", "alice", "running", {"turn": 1},
                                          first.version))
    stale = SessionState("s1", "alice", "completed", {"turn": 2}, first.version)
    with pytest.raises(ConflictError):
        await store.save_session_and_audit(stale, [("run.ended", "s1", 1.0, {"status": "x"})])
    assert await store.audit_records() == []
    saved = await store.save_session_and_audit(
        SessionState("s1", "alice", "completed", {"turn": 2}, first.version + 1),
        [("run.ended", "s1", 1.0, {"status": "completed"})])
    assert saved.version == first.version + 2
    records = await store.audit_records()
    assert [r.type for r in records] == ["run.ended"] and verify_chain(records).ok
