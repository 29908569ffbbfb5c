"""Group commit: concurrent writes share transactions, and nothing is lost or misreported.

The SQLite store runs consecutive writes waiting for its thread in one transaction; the
PostgreSQL store writes concurrent audit appends in one statement or transaction. To put
writes in one batch for certain, the SQLite tests hold the store's thread on a job until the
writes are queued behind it.
"""

from __future__ import annotations

import gc
import sqlite3
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import pytest

from anfitrion._audit import verify_chain
from anfitrion.exceptions import ConflictError, StoreError
from anfitrion.store import ClaimState, SessionState, Store, open_store
from anfitrion.store._sqlite import SQLiteStore

from .pg_schema import pg_schema_url

pytestmark = pytest.mark.anyio


async def test_many_concurrent_writers_are_all_committed(store: Store, store_url: str) -> None:
    async def session(n: int) -> None:
        saved = await store.save_session(SessionState(f"s{n}", "alice", "running", {"n": n}))
        await store.append_audit_many([("call.proposed", f"s{n}", 1.0 + n, {"n": n, "i": i})
                                       for i in range(3)])
        assert (await store.claim_execution(f"s{n}", "c", "d")).state is ClaimState.CLAIMED
        await store.save_session(SessionState(f"s{n}", "alice", "completed", {"n": n},
                                              saved.version))

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for n in range(100):
                tg.start_soon(session, n)
    reader = store if store_url == "memory://" else open_store(store_url)
    try:
        records = await reader.audit_records()
        assert [r.seq for r in records] == list(range(1, 301))
        assert verify_chain(records).ok
        assert len(await reader.list_sessions("completed")) == 100
        assert len(await reader.list_unknown_executions()) == 100  # claimed, never settled
    finally:
        if reader is not store:
            await reader.close()


# -- SQLite: one transaction per batch ----------------------------------------------------------


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'group.db'}"


@asynccontextmanager
async def held(store: SQLiteStore, queued: int) -> AsyncIterator[Callable[[], Awaitable[None]]]:
    """Hold the store's thread on a job; yields a function that waits (bounded) until
    *queued* more jobs wait behind it. The thread goes on when the block ends."""
    started, release = threading.Event(), threading.Event()

    def hold(_: sqlite3.Connection) -> None:
        started.set()
        release.wait(30)

    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: store._run(hold))
        await anyio.to_thread.run_sync(started.wait, 30)

        async def wait_queued() -> None:
            worker = store._worker
            assert worker is not None
            while worker.jobs.qsize() < queued:
                await anyio.sleep(0)

        try:
            yield wait_queued
        finally:
            release.set()


def commits(store: SQLiteStore) -> list[str]:
    """Record the transaction statements the store's connection runs from now on."""
    seen: list[str] = []
    worker = store._worker
    assert worker is not None and worker._conn is not None
    worker._conn.set_trace_callback(
        lambda sql: seen.append(sql) if sql in ("BEGIN IMMEDIATE", "COMMIT", "ROLLBACK") else None)
    return seen


async def gather(*calls: Callable[[], Awaitable[Any]]) -> list[Any]:
    """Run *calls* concurrently; each one's result or exception, in order."""
    out: list[Any] = [None] * len(calls)

    async def one(i: int) -> None:
        try:
            out[i] = await calls[i]()
        except Exception as exc:  # noqa: BLE001 - the test looks at each outcome
            out[i] = exc

    async with anyio.create_task_group() as tg:
        for i in range(len(calls)):
            tg.start_soon(one, i)
    return out


async def test_writes_waiting_together_share_one_transaction(sqlite_url: str) -> None:
    store = SQLiteStore.from_url(sqlite_url)
    try:
        await store.put_record("warm", "up", {})
        seen = commits(store)
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg, held(store, 40) as wait_queued:
                for n in range(20):
                    tg.start_soon(store.put_record, "ns", f"k{n}", {"n": n})
                    tg.start_soon(store.append_audit, "run.started", f"s{n}", 1.0, {"n": n})
                await wait_queued()
        assert seen == ["BEGIN IMMEDIATE", "COMMIT"]
    finally:
        await store.close()
    again = SQLiteStore.from_url(sqlite_url)
    try:
        assert len(await again.list_records("ns")) == 20
        records = await again.audit_records()
        assert len(records) == 20
        assert verify_chain(records).ok
    finally:
        await again.close()


async def test_a_failing_write_is_rolled_back_alone_and_the_others_commit(sqlite_url: str) -> None:
    store = SQLiteStore.from_url(sqlite_url)
    try:
        first = await store.save_session(SessionState("s", "alice", "running", {}))
        await store.save_session(SessionState("s", "alice", "running", {}, first.version))

        def half_done(c: sqlite3.Connection) -> None:
            c.execute("INSERT INTO anfitrion_records (namespace, key, value) "
                      "VALUES ('ns', 'half', '{}')")
            raise ValueError("changed its mind")

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg, held(store, 4) as wait_queued:
                results: list[Any] = []

                async def run_all() -> None:
                    results.extend(await gather(
                        lambda: store.put_record("ns", "before", {}),
                        lambda: store._write(half_done),
                        lambda: store.save_session(SessionState("s", "alice", "stale", {},
                                                                first.version)),
                        lambda: store.put_record("ns", "after", {})))

                tg.start_soon(run_all)
                await wait_queued()
        assert results[0] is None and results[3] is None
        assert isinstance(results[1], ValueError)
        assert isinstance(results[2], ConflictError)
        assert [k for k, _ in await store.list_records("ns")] == ["after", "before"]
        loaded = await store.load_session("s")
        assert loaded is not None
        assert (loaded.status, loaded.version) == ("running", 2)
    finally:
        await store.close()


async def test_a_failed_commit_is_reported_to_every_writer_of_its_transaction(
        sqlite_url: str) -> None:
    store = SQLiteStore.from_url(sqlite_url)
    try:
        # a constraint checked only at COMMIT: a child row whose parent never comes
        await store._run(lambda c: c.execute("PRAGMA foreign_keys = ON"))
        await store._write(lambda c: c.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)"))
        await store._write(lambda c: c.execute(
            "CREATE TABLE child (pid INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY "
            "DEFERRED)"))
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg, held(store, 3) as wait_queued:
                results: list[Any] = []

                async def run_all() -> None:
                    results.extend(await gather(
                        lambda: store.put_record("ns", "a", {}),
                        lambda: store._write(lambda c: c.execute(
                            "INSERT INTO child (pid) VALUES (1)")),
                        lambda: store.append_audit("run.started", "s", 1.0, {})))

                tg.start_soon(run_all)
                await wait_queued()
        assert all(isinstance(r, StoreError) for r in results), results
        assert all("FOREIGN KEY" in str(r) for r in results)
        assert await store.list_records("ns") == []
        assert await store.audit_records() == []
        await store.put_record("ns", "later", {})  # the store goes on
        assert [k for k, _ in await store.list_records("ns")] == ["later"]
    finally:
        await store.close()


async def test_an_operation_raising_past_exception_is_undone_and_the_store_goes_on(
        sqlite_url: str) -> None:
    store = SQLiteStore.from_url(sqlite_url)
    try:
        def interrupted(c: sqlite3.Connection) -> None:
            c.execute("INSERT INTO anfitrion_records (namespace, key, value) "
                      "VALUES ('ns', 'k', '{}')")
            raise SystemExit(3)

        with pytest.raises(StoreError, match="interrupted"):
            await store._write(interrupted)
        assert await store.list_records("ns") == []
        await store.put_record("ns", "after", {})
        assert [k for k, _ in await store.list_records("ns")] == ["after"]
    finally:
        await store.close()


async def test_close_waits_for_every_write_queued_before_it(sqlite_url: str) -> None:
    store = SQLiteStore.from_url(sqlite_url)
    await store.put_record("warm", "up", {})
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg, held(store, 31) as wait_queued:
            for n in range(30):
                tg.start_soon(store.put_record, "ns", f"k{n}", {"n": n})
            tg.start_soon(store.close)
            await wait_queued()
    again = SQLiteStore.from_url(sqlite_url)
    try:
        assert len(await again.list_records("ns")) == 30
    finally:
        await again.close()
    await store.put_record("ns", "reopened", {})  # a closed store opens again when used
    assert len(await store.list_records("ns")) == 31
    await store.close()


async def test_a_cancelled_caller_still_has_its_write_committed(sqlite_url: str) -> None:
    store = SQLiteStore.from_url(sqlite_url)
    try:
        await store.put_record("warm", "up", {})
        went_on: list[bool] = []
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg, held(store, 1) as wait_queued:
                async def write_then_continue(scope: anyio.CancelScope) -> None:
                    with scope:
                        await store.put_record("ns", "k", {})
                        await anyio.lowlevel.checkpoint()  # the cancellation lands here
                        went_on.append(True)

                scope = anyio.CancelScope()
                tg.start_soon(write_then_continue, scope)
                await wait_queued()
                scope.cancel()
        assert went_on == []
        assert await store.get_record("ns", "k") == {}
    finally:
        await store.close()


async def test_a_store_dropped_without_closing_ends_its_thread(sqlite_url: str) -> None:
    store = SQLiteStore.from_url(sqlite_url)
    await store.put_record("ns", "k", {})
    worker = store._worker
    assert worker is not None
    del store
    gc.collect()
    await anyio.to_thread.run_sync(worker._thread.join, 10)
    assert not worker._thread.is_alive()
    assert worker._conn is None


# -- PostgreSQL: audit appends -----------------------------------------------------------------


@pytest.fixture
def pg_url() -> Iterator[str]:
    yield from pg_schema_url()


@pytest.mark.postgres
async def test_appends_from_processes_taking_turns_keep_one_chain(pg_url: str) -> None:
    """Each handle's remembered head is stale at every append: each is written under the
    head's lock instead, after the other handle's records."""
    first, second = open_store(pg_url), open_store(pg_url)
    try:
        for n in range(10):
            await (first if n % 2 else second).append_audit("run.started", "s", 1.0 + n,
                                                            {"n": n})
        records = await first.audit_records()
        assert [r.seq for r in records] == list(range(1, 11))
        assert [r.data["n"] for r in records] == list(range(10))
        assert verify_chain(records).ok
    finally:
        await first.close()
        await second.close()


@pytest.mark.postgres
async def test_a_failed_audit_batch_is_reported_to_every_appender_in_it(pg_url: str) -> None:
    store = open_store(pg_url)
    try:
        await store.append_audit("run.started", "s", 1.0, {})
        # the first append is written at once; the next three queue behind it and are
        # written together, and PostgreSQL refuses the NUL in one of their session ids
        results = await gather(
            lambda: store.append_audit_many([("call.proposed", "s", 2.0, {"n": 0})]),
            lambda: store.append_audit_many([("call.proposed", "s", 3.0, {"n": 1})]),
            lambda: store.append_audit_many([("call.proposed", "bad\x00", 4.0, {"n": 2})]),
            lambda: store.append_audit_many([("call.proposed", "s", 5.0, {"n": 3})]))
        assert results[0] is None
        assert all(isinstance(r, StoreError) for r in results[1:]), results
        await store.append_audit("run.ended", "s", 6.0, {})
        records = await store.audit_records()
        assert [r.data.get("n") for r in records] == [None, 0, None]
        assert verify_chain(records).ok
    finally:
        await store.close()


@pytest.mark.postgres
async def test_close_waits_for_the_audit_appends_under_way(pg_url: str) -> None:
    store = open_store(pg_url)
    await store.append_audit("run.started", "s", 1.0, {})
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            for n in range(20):
                tg.start_soon(store.append_audit, "call.proposed", "s", 2.0 + n, {"n": n})
            tg.start_soon(store.close)
    again = open_store(pg_url)
    try:
        records = await again.audit_records()
        assert len(records) == 21
        assert verify_chain(records).ok
    finally:
        await again.close()


@pytest.mark.postgres
async def test_sessions_starting_together_open_one_pool(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    psycopg_pool = pytest.importorskip("psycopg_pool")
    from anfitrion.store import _postgres as postgres

    opened: list[object] = []

    class CountedPool(psycopg_pool.AsyncConnectionPool):  # type: ignore[misc,name-defined]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            opened.append(self)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(postgres, "AsyncConnectionPool", CountedPool)
    store = open_store(pg_url)
    try:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                for n in range(30):
                    tg.start_soon(store.get_record, "ns", f"k{n}")
        assert len(opened) == 1
    finally:
        await store.close()
