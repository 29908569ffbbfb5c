"""Two clients call one upstream server through the gateway at once: what the server sends
during a call reaches the client whose call caused it, and never the other one. Progress goes
by its token; a log message or an elicitation that could belong to either call (the server's
stdio says nothing of which) is not guessed: the elicitation is refused, the log message stays
in the gateway's log, and both are audited in the gateway's own session.

Real clients (the official SDK), a real upstream server process, over streamable HTTP and over
the stdio code path (in-memory sessions of the same gateway)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")
import httpx2
import mcp.types as mt
from gateway_helpers import approve_all, connected, serving_http, writes_allowed
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from anfitrion.mcp._config import ServerConfig
from anfitrion.mcp._gateway import Gateway
from anfitrion.mcp._toolset import McpServers
from anfitrion.store import MemoryStore

pytestmark = [pytest.mark.anyio, pytest.mark.mcp_servers]

ASKING = str(Path(__file__).parent / "servers" / "asking.py")
TOKEN = "test-token-0123456789abcdef"


@dataclass
class Seen:
    """What one client received."""

    name: str
    logs: list[Any] = field(default_factory=list)
    progress: list[str | None] = field(default_factory=list)
    questions: list[str] = field(default_factory=list)

    async def on_log(self, params: mt.LoggingMessageNotificationParams) -> None:
        self.logs.append(params.data)

    async def on_progress(self, value: float, total: float | None, message: str | None
                          ) -> None:
        self.progress.append(message)

    async def on_elicit(self, context: Any, params: Any) -> mt.ElicitResult:
        self.questions.append(params.message)
        return mt.ElicitResult(action="accept", content={"answer": f"from {self.name}"})

    def callbacks(self) -> dict[str, Any]:
        return {"logging_callback": self.on_log, "elicitation_callback": self.on_elicit}


@asynccontextmanager
async def two_clients(store: MemoryStore, transport: str, seen: list[Seen]
                      ) -> AsyncIterator[tuple[Gateway, list[ClientSession]]]:
    config = ServerConfig(id="ask", command=sys.executable, args=(ASKING,), elicitation=True,
                          protocol="legacy")
    await approve_all([config], store)
    async with McpServers([config], store) as servers, AsyncExitStack() as stack:
        gateway = Gateway(servers, store=store, policy=writes_allowed(), own_names=True)
        if transport == "memory":  # the stdio code path: one server run per client session
            sessions = [await stack.enter_async_context(connected(
                gateway.build_server(), **s.callbacks())) for s in seen]
            yield gateway, sessions
            return
        port = await stack.enter_async_context(serving(gateway))
        sessions = []
        for s in seen:
            http = await stack.enter_async_context(httpx2.AsyncClient(
                timeout=httpx2.Timeout(30, read=300), headers={"Authorization": f"Bearer {TOKEN}"}))
            read, write = await stack.enter_async_context(streamable_http_client(
                f"http://127.0.0.1:{port}/mcp", http_client=http))
            session = await stack.enter_async_context(ClientSession(read, write,
                                                                    **s.callbacks()))
            await session.initialize()
            sessions.append(session)
        yield gateway, sessions


@asynccontextmanager
async def serving(gateway: Gateway) -> AsyncIterator[int]:
    async with serving_http(gateway, TOKEN) as sock:
        yield sock.getsockname()[1]


async def relayed(store: MemoryStore) -> list[tuple[str, str, str]]:
    return [(r.session_id, r.data["tool"], r.data["detail"])
            for r in await store.audit_records() if r.type == "mcp.relayed"]


@pytest.mark.parametrize("transport", ["http", "memory"])
async def test_with_two_calls_in_flight_nothing_of_one_reaches_the_other(transport: str) -> None:
    store = MemoryStore()
    seen = [Seen("A"), Seen("B")]
    results: dict[str, str] = {}
    with anyio.fail_after(120):
        async with two_clients(store, transport, seen) as (gateway, sessions):
            async def run(client: ClientSession, who: Seen) -> None:
                result = await client.call_tool("pair", {"who": who.name, "together": 2},
                                                progress_callback=who.on_progress)
                results[who.name] = result.content[0].text  # type: ignore[union-attr]

            async with anyio.create_task_group() as tg:
                for client, who in zip(sessions, seen, strict=True):
                    tg.start_soon(run, client, who)
            own = gateway.session_id
    a, b = seen
    assert a.progress == ["progress for A"] and b.progress == ["progress for B"]  # by token
    assert a.logs == [] and b.logs == []  # either could own them: neither gets them
    assert a.questions == [] and b.questions == []
    for who in "AB":
        assert results[who].startswith("elicitation failed:"), results[who]
        assert "2 calls to this server are in flight" in results[who]
        assert "from A" not in results[who] and "from B" not in results[who]
    records = await relayed(store)
    assert {s for s, _, _ in records} == {own}  # the gateway's own session, no client's
    kept = [d for _, t, d in records if t == "ask.notifications/message"]
    refused = [d for _, t, d in records if t == "ask.elicitation/create"]
    assert len(kept) == 2 and all("kept in anfitrion's log" in d for d in kept)
    assert len(refused) == 2 and all(d.startswith("refused: 2 calls") for d in refused)


@pytest.mark.parametrize("transport", ["http", "memory"])
async def test_the_only_call_in_flight_gets_its_messages_and_the_idle_client_none(
        transport: str) -> None:
    store = MemoryStore()
    seen = [Seen("A"), Seen("B")]
    with anyio.fail_after(120):
        async with two_clients(store, transport, seen) as (_, sessions):
            result = await sessions[0].call_tool("pair", {"who": "A", "together": 1},
                                                 progress_callback=seen[0].on_progress)
            assert (await sessions[1].send_ping()) is not None
    a, b = seen
    assert result.content[0].text == 'elicited: accept {"answer": "from A"}'  # type: ignore[union-attr]
    assert (a.logs, a.progress, a.questions) == (["log for A"], ["progress for A"],
                                                 ["A question for A"])
    assert (b.logs, b.progress, b.questions) == ([], [], [])
    records = await relayed(store)
    (relay,) = [r for r in records if r[1] == "ask.elicitation/create"]
    assert relay[2].startswith("relayed to the client")
