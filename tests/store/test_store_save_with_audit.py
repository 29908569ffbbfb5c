"""A session's save carries the audit records buffered so far, in the same SQLite transaction.

A one-call conversation used to commit five times (its start, its turn, the save, the records
of the save, its end); a commit is an fsync with ``synchronous=full``. It now commits twice:
its first turn with its start, and the session with the records of its last turn and its end.
A save that fails writes neither.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from anfitrion import Effect, Host, Reply, ScriptedModel, StopReason, Toolbox, ToolCall
from anfitrion.audit import verify_chain
from anfitrion.exceptions import ConflictError
from anfitrion.store import SessionState
from anfitrion.store.sqlite import SQLiteStore

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


async def test_a_save_that_conflicts_writes_no_audit_record(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "a.db")
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
    await store.close()
