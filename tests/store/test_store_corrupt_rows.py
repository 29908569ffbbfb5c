"""A corrupt row (data the store did not write: an edited database, a bad restore) is a
StoreError naming its table and key, and listings skip it so the rest stays usable.

On SQLite and PostgreSQL, with rows corrupted behind the store's back by plain SQL.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from anfitrion import DeferredApprover, Effect, Host, Toolbox
from anfitrion._host import RunStatus
from anfitrion._redaction import redact
from anfitrion.exceptions import StoreError
from anfitrion.store import LedgerState, Store, open_store
from anfitrion.store._rows import skipped_rows
from anfitrion.testing import ScriptedModel, call

from .pg_schema import pg_schema_url

pytestmark = pytest.mark.anyio

Corrupt = Callable[[str, tuple[Any, ...]], None]

# what an edited or damaged row may hold instead of the JSON the store wrote
BAD_JSON = ["{not json", "", '{"a": 1', '{"a": "\x07"}', "[" * 5000, '"just a string"', "[]",
            "null"]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
    else:
        yield from pg_schema_url()


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    opened = open_store(store_url)
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
def corrupt(store_url: str) -> Corrupt:
    """Run one SQL statement on the store's database, behind the store's back."""
    def run(sql: str, args: tuple[Any, ...]) -> None:
        if store_url.startswith("sqlite:"):
            with sqlite3.connect(store_url.removeprefix("sqlite:///")) as conn:
                assert conn.execute(sql, args).rowcount == 1
        else:
            import psycopg

            with psycopg.connect(store_url, autocommit=True) as conn:
                assert conn.execute(sql.replace("?", "%s"), args).rowcount == 1
    return run


async def suspended(store: Store, n: int) -> list[tuple[str, str]]:
    """*n* suspended sessions, each waiting for one approval: (session id, request id)."""
    tools = Toolbox()

    @tools.tool(effect=Effect.WRITE, provenance="trusted")
    def send(to: str) -> str:
        """Send a message."""
        return f"sent to {to}"

    out = []
    for i in range(n):
        host = Host(model=ScriptedModel([call("send", {"to": f"bob{i}"}), "Sent."]),
                    tools=tools, store=store, approver=DeferredApprover())
        run = await host.run("send it", principal="alice")
        assert run.status is RunStatus.SUSPENDED
        out.append((run.session_id, run.pending[0].id))
    return out


@pytest.mark.parametrize("bad", BAD_JSON)
async def test_a_corrupt_session_row_names_its_table_and_key_and_listing_skips_it(
        store: Store, corrupt: Corrupt, bad: str, caplog: pytest.LogCaptureFixture) -> None:
    (good, _), (broken, _) = await suspended(store, 2)
    corrupt("UPDATE anfitrion_sessions SET data = ? WHERE session_id = ?", (bad, broken))
    with pytest.raises(StoreError) as raised:
        await store.load_session(broken)
    assert "anfitrion_sessions" in str(raised.value) and broken in str(raised.value)
    with caplog.at_level(logging.WARNING, "anfitrion.store"):
        listed = await store.list_sessions()
    assert [s.session_id for s in listed] == [good]
    assert [(r.table, r.key) for r in skipped_rows(listed)] == [
        ("anfitrion_sessions", f"session_id={broken!r}")]
    # the log is redacted like the audit: a random id can read as an IBAN ("[iban]")
    assert any(redact(f"session_id={broken!r}") in m and "skipped" in m for m in caplog.messages)
    assert (await store.load_session(good)) is not None


async def test_a_corrupt_message_row_names_the_session_and_index(
        store: Store, corrupt: Corrupt) -> None:
    [(broken, _)] = await suspended(store, 1)
    corrupt("UPDATE anfitrion_session_messages SET data = ? WHERE session_id = ? AND idx = 1",
            ("{truncated", broken))
    with pytest.raises(StoreError, match=rf"anfitrion_session_messages \(session_id="
                                         rf"'{broken}', idx=1\): invalid JSON"):
        await store.load_session(broken)


@pytest.mark.parametrize(("column", "bad"), [
    ("request", "{not json"), ("request", "{}"), ("request", '{"id": 1}'),
    ("request", "[]"), ("answer", "{not json"), ("answer", '{"approved": true}'),
])
async def test_a_corrupt_approval_row_names_its_key_and_listing_skips_it(
        store: Store, corrupt: Corrupt, column: str, bad: str) -> None:
    (_, good), (_, broken) = await suspended(store, 2)
    corrupt(f"UPDATE anfitrion_approvals SET {column} = ? WHERE id = ?", (bad, broken))
    with pytest.raises(StoreError, match=rf"anfitrion_approvals \(id='{broken}'\)"):
        await store.get_approval(broken)
    for pending_only in (False, True) if column == "request" else (False,):
        listed = await store.list_approvals(pending_only=pending_only)
        assert [r.id for r in listed] == [good]
        assert [r.key for r in skipped_rows(listed)] == [f"id={broken!r}"]
    assert (await store.get_approval(good)) is not None


async def test_corrupt_audit_ledger_and_record_rows_are_store_errors_naming_them(
        store: Store, corrupt: Corrupt) -> None:
    [(session_id, _)] = await suspended(store, 1)
    await store.put_record("pins", "git", {"hash": "abc"})
    await store.advance_execution(session_id, "c1", LedgerState.PROPOSED, "d")
    corrupt("UPDATE anfitrion_audit SET data = ? WHERE seq = 2", ("{oops",))
    corrupt("UPDATE anfitrion_ledger SET result = ? WHERE call_id = ?", ("{oops", "c1"))
    corrupt("UPDATE anfitrion_records SET value = ? WHERE key = ?", ("{oops", "git"))
    with pytest.raises(StoreError, match=r"anfitrion_audit \(seq=2\): invalid JSON"):
        await store.audit_records()
    with pytest.raises(StoreError, match=rf"anfitrion_ledger \(session_id='{session_id}', "
                                         r"call_id='c1'\): invalid JSON"):
        await store.execution_state(session_id, "c1")
    with pytest.raises(StoreError, match=r"anfitrion_records \(namespace='pins', key='git'\)"):
        await store.get_record("pins", "git")


async def test_a_key_with_control_characters_is_shown_escaped(
        store: Store, corrupt: Corrupt) -> None:
    [(session_id, _)] = await suspended(store, 1)
    hostile = "evil\x1b[2J\u202e"
    corrupt("UPDATE anfitrion_sessions SET session_id = ?, data = ? WHERE session_id = ?",
            (hostile, "{", session_id))
    [row] = skipped_rows(await store.list_sessions())
    assert "\x1b" not in str(row) and "\u202e" not in str(row)
    assert "\\x1b" in str(row)


async def test_a_corrupt_session_does_not_block_resume_ready_for_the_others(
        store: Store, corrupt: Corrupt) -> None:
    from anfitrion import _answers as answers

    sessions = await suspended(store, 3)
    for _, request_id in sessions:
        assert (await answers.answer(store, request_id, None, approved=True, approver="bob",
                                     via="test")).answer is not None
    corrupt("UPDATE anfitrion_sessions SET data = 'nope' WHERE session_id = ?",
            (sessions[0][0],))
    taken = []
    while (state := await store.claim_resumable("worker:1:a")) is not None:
        taken.append(state.session_id)
    assert sorted(taken) == sorted(s for s, _ in sessions[1:])
