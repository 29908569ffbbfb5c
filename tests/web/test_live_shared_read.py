"""The live inbox reads the pending list once per interval for all open pages, not once per
page (issue 35: 50 pages at 1,000 pending cost 0.65 of a core and starved): many streams, one
read per interval, and every stream still told of each change."""

from __future__ import annotations

import time
from contextlib import aclosing

import anyio
import pytest

from anfitrion._approvals import ApprovalRequest
from anfitrion.store import MemoryStore
from anfitrion.web._live import PendingEvents

pytestmark = pytest.mark.anyio


def _request(i: int) -> ApprovalRequest:
    return ApprovalRequest.for_call(
        session_id=f"s{i}", principal_id="alice", call_id=f"c{i}", tool_name="send_email",
        tool_definition_hash="h", arguments={"to": f"u{i}@example.org"}, effect="write",
        reason="writes need a person", rule_id="default.write")


async def test_fifty_pages_share_one_read_per_interval_and_all_see_each_change() -> None:
    store = MemoryStore()
    for i in range(20):
        await store.create_approval(_request(i))
    events = PendingEvents(store, interval=0.2)
    counts: list[list[str]] = [[] for _ in range(50)]

    async def page(seen: list[str]) -> None:
        async with aclosing(events.stream(lambda: True)) as stream:
            async for message in stream:
                if message.startswith("event: pending"):
                    seen.append(message.split("data: ", 1)[1].strip())
                    if len(seen) == 2:
                        return

    started = time.monotonic()
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            for seen in counts:
                tg.start_soon(page, seen)
            await anyio.sleep(1.0)
            await store.create_approval(_request(99))
    elapsed = time.monotonic() - started
    assert all(seen == ['{"count": 20}', '{"count": 21}'] for seen in counts)
    # one read per interval for all 50 streams (give or take the first and the last)
    assert events.reads <= elapsed / events.interval + 2
    assert events.reads < 50
