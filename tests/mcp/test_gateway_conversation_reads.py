"""A request continuing a stored conversation (a replica's, a 2026-07-28 client's) reads it
from the store once to check whose it is, and takes its lease with a fresh copy: no other."""

from __future__ import annotations

import pytest

pytest.importorskip("mcp")
from anfitrion.mcp._gateway import Gateway
from anfitrion.mcp._toolset import McpServers
from anfitrion.store import MemoryStore, SessionState

pytestmark = pytest.mark.anyio


class CountingStore(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.loads = 0

    async def load_session(self, session_id: str) -> SessionState | None:
        self.loads += 1
        return await super().load_session(session_id)


async def test_continuing_a_stored_conversation_reads_it_once_before_its_lease() -> None:
    store = CountingStore()
    async with McpServers([], store) as servers:
        gateway = Gateway(servers, store=store)
        first = await gateway._open_session("gateway-conversation-1")
        await first.close()  # stored, its lease released: any process may continue it
        store.loads = 0
        again = await gateway._open_session("gateway-conversation-1")
        assert again.id == first.id
        assert store.loads == 1
        await again.close()
