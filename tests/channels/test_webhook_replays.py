"""A callback's delivery id is spent once across every process sharing the store: the replay
check is one insert-if-absent in the store (``create_record``), not a read then a write that
two inbox processes could both pass."""

from __future__ import annotations

import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from functools import partial
from pathlib import Path

import anyio
import pytest
from anyio.abc import TaskStatus

from anfitrion.channels import CallbackVerifier, signature_header
from anfitrion.channels._webhooks import DELIVERY_HEADER, SEEN_NAMESPACE, SIGNATURE_HEADER
from anfitrion.store import Store, open_store

sys.path.insert(0, str(Path(__file__).parents[1] / "store"))  # pg_schema
from pg_schema import pg_schema_url

pytestmark = pytest.mark.anyio

SECRET = "whsec-0123456789abcdef"
NOW = 1_764_614_400
ROUNDS = 20


@pytest.fixture(params=["memory", "sqlite",
                        pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "memory":
        yield "memory://"
    elif request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
    else:
        yield from pg_schema_url()


@pytest.fixture
async def handles(store_url: str) -> AsyncIterator[Callable[[], Store]]:
    """Independent handles on one store, as separate inbox processes hold them (the memory
    store has one handle: it lives in one process)."""
    opened: list[Store] = []
    shared = open_store(store_url) if store_url == "memory://" else None

    def make() -> Store:
        if shared is not None:
            return shared
        handle = open_store(store_url)
        opened.append(handle)
        return handle

    try:
        yield make
    finally:
        for handle in opened:
            await handle.close()
        if shared is not None:
            await shared.close()


async def _race(calls: list[Callable[[], Awaitable[None]]]) -> None:
    """Start every call at once: each task waits at the line until all are at it."""
    line = anyio.Event()

    async def run(call: Callable[[], Awaitable[None]], *, task_status: TaskStatus[None]
                  ) -> None:
        task_status.started()
        await line.wait()
        await call()

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for call in calls:
                await tg.start(run, call)
            line.set()


async def _check(problems: list[str | None], verifier: CallbackVerifier,
                 headers: dict[str, str], body: bytes) -> None:
    problems.append(await verifier.check(headers, body))


async def test_one_callback_raced_through_two_inbox_processes_is_accepted_once(
        handles: Callable[[], Store]) -> None:
    """Two inboxes sharing one store (two handles: two SQLite connections, two PostgreSQL
    pools) each get the same signed callback at once, as a replaying attacker sends it: one
    takes it, the other refuses it as a replay."""
    verifiers = [CallbackVerifier([SECRET], handles(), clock=lambda: NOW) for _ in range(2)]
    for verifier in verifiers:
        assert await verifier.store.get_record("warm", "up") is None
    for _ in range(ROUNDS):
        body, delivery = b'{"decision": "approve"}', uuid.uuid4().hex
        headers = {DELIVERY_HEADER: delivery,
                   SIGNATURE_HEADER: signature_header([SECRET], NOW, delivery, body)}
        problems: list[str | None] = []
        await _race([partial(_check, problems, v, headers, body) for v in verifiers])
        assert sorted(problems, key=str) == [None, "this delivery id was used already (replay)"]
        for verifier in verifiers:
            assert await verifier.check(headers, body) is not None
    seen = await verifiers[1].store.list_records(SEEN_NAMESPACE)
    assert len(seen) == ROUNDS
