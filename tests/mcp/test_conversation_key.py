"""Gateway replicas started together without ``ANFITRION_GATEWAY_KEY`` agree on the one
conversation key the store keeps: made once (insert if absent), never overwritten by a
second replica, so a conversation maps to one session on every replica — its taint, repeat
guard and budgets carried over — and a handle one replica minted is good on the others."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

pytest.importorskip("mcp")
from anfitrion.mcp._conversations import Conversations
from anfitrion.store import Store, open_store

sys.path.insert(0, str(Path(__file__).parents[1] / "store"))  # pg_schema
from pg_schema import pg_schema_url

pytestmark = pytest.mark.anyio

REPLICAS = 6
ROUNDS = 5


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_urls(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[list[str]]:
    """One fresh store per round (the key is made once per store)."""
    if request.param == "sqlite":
        yield [f"sqlite:///{tmp_path / f'store-{i}.db'}" for i in range(ROUNDS)]
    else:
        urls = [pg_schema_url() for _ in range(ROUNDS)]
        yield [next(url) for url in urls]
        for url in urls:
            next(url, None)  # drops the schema


async def _load_together(handles: list[Store]) -> list[Conversations]:
    """Every replica loads the key at the same moment."""
    keepers: list[Conversations] = []
    start = anyio.Event()

    async def load(handle: Store) -> None:
        await start.wait()
        keepers.append(await Conversations.load(handle))

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for handle in handles:
                tg.start_soon(load, handle)
            await anyio.sleep(0.05)
            start.set()
    return keepers


async def test_replicas_starting_together_share_one_conversation_key(
        store_urls: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANFITRION_GATEWAY_KEY", raising=False)
    for url in store_urls:
        handles: list[Store] = [open_store(url) for _ in range(REPLICAS)]
        try:
            for handle in handles:  # connected, the schema made, before the race
                assert await handle.get_record("warm", "up") is None
            keepers = await _load_together(handles)
            sessions = {k.session_id("alice", "handle-1") for k in keepers}
            assert len(sessions) == 1, "replicas disagree on alice's conversation"
            minted = keepers[0].mint("alice")
            assert all(k.check("alice", minted) == minted for k in keepers)
        finally:
            for handle in handles:
                await handle.close()
