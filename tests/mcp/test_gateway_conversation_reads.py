"""A request continuing a stored conversation (a replica's, a 2026-07-28 client's) reads its
row once to check whose it is, then takes its lease: never its messages more than once, and
not at all when the process holds it (tests/store/test_store_warm_sessions.py)."""

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
        self.rows = 0

    async def load_session(self, session_id: str) -> SessionState | None:
        self.loads += 1
        return await super().load_session(session_id)

    async def session_row(self, session_id: str) -> SessionState | None:
        self.rows += 1
        return await super().session_row(session_id)


async def test_continuing_a_stored_conversation_reads_its_row_once_before_its_lease() -> None:
    store = CountingStore()
    async with McpServers([], store) as servers:
        gateway = Gateway(servers, store=store)
        first = await gateway._open_session("gateway-conversation-1")
        await first.close()  # stored, its lease released: any process may continue it
        store.loads = store.rows = 0
        again = await gateway._open_session("gateway-conversation-1")
        assert again.id == first.id
        assert (store.rows, store.loads) == (1, 0)
        assert again.session is first.session  # held by this process: continued
        await again.close()
