"""A gateway task past its ``ttlMs`` is gone: ``tasks/get`` and ``tasks/cancel`` find nothing
(as for an id that never existed), so an old task id cannot complete or withdraw a call."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

pytest.importorskip("mcp")

from anfitrion import Principal
from anfitrion.mcp._gateway_tasks import KEEP_AFTER_EXPIRY_S, NAMESPACE, TaskBook
from anfitrion.store import MemoryStore

pytestmark = pytest.mark.anyio


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


async def _task(book: TaskBook, alice: Principal) -> str:
    task = await book.create(principal=alice, session_id="s1", handle=None, tool="send",
                             arguments={"to": "bob@example.com"}, call_id="c1",
                             request_id="r1", message="waits for a person",
                             expires_at=datetime.now(UTC) + timedelta(minutes=5))
    return task.id


async def test_a_task_is_found_until_its_ttl_and_gone_after() -> None:
    store, alice = MemoryStore(), Principal("alice")
    book = TaskBook(store)
    task_id = await _task(book, alice)
    task = await book.load(task_id, alice)
    assert task is not None and task.ttl_ms >= (5 * 60 + KEEP_AFTER_EXPIRY_S) * 1000 - 2000
    assert await book.for_call("s1", "c1", alice) is not None
    # the same record, made as long ago as its ttl and a second more
    aged = replace(task, created_at=_iso(datetime.now(UTC) - timedelta(
        milliseconds=task.ttl_ms + 1000)))
    await store.put_record(NAMESPACE, task_id, aged.record())
    assert await book.load(task_id, alice) is None
    assert await book.for_call("s1", "c1", alice) is None


@pytest.mark.parametrize("created", ["", "yesterday", "2026-13-40T00:00:00Z"])
async def test_a_record_that_cannot_say_when_it_began_is_gone(created: str) -> None:
    store, alice = MemoryStore(), Principal("alice")
    book = TaskBook(store)
    task_id = await _task(book, alice)
    task = await book.load(task_id, alice)
    assert task is not None
    await store.put_record(NAMESPACE, task_id, replace(task, created_at=created).record())
    assert await book.load(task_id, alice) is None
