"""The gateway's sessions: one durable anfitrion session per MCP client session; what waits for
a person when a client goes is withdrawn, visibly; a fixed session survives a restart."""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import httpx2
import pytest

pytest.importorskip("mcp")

from doors import PRINCIPAL, TOKEN, WAITING, _serve_http, approve_pins, server_config
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from anfitrion import _answers as answers
from anfitrion.mcp._gateway import Gateway
from anfitrion.mcp._toolset import McpServers
from anfitrion.policy import parse_policy
from anfitrion.store import MemoryStore

pytestmark = [pytest.mark.anyio, pytest.mark.mcp_servers]

POLICY = parse_policy('[repeat_guard]\nmax_repeats = 2\n[[rules]]\ntool = "p.send_mail"\n'
                      'verdict = "ask"\nreason = "a person approves every mail"\n')


async def _client(stack: AsyncExitStack, url: str) -> ClientSession:
    http = await stack.enter_async_context(
        httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=300),
                                  headers={"Authorization": f"Bearer {TOKEN}"}))
    read, write = await stack.enter_async_context(streamable_http_client(url,
                                                                         http_client=http))
    client = await stack.enter_async_context(ClientSession(read, write))
    await client.initialize()
    return client


async def test_each_client_session_is_its_own_session_and_its_waiting_calls_are_withdrawn(
        tmp_path: Path) -> None:
    store = MemoryStore()
    with anyio.fail_after(90):
        async with McpServers([server_config(tmp_path / "fx.log")], store) as servers:
            await approve_pins(servers, store)
            gateway = Gateway(servers, store=store, policy=POLICY, principal=PRINCIPAL,
                              approval_wait=0.05, poll_interval=0.01)
            async with AsyncExitStack() as outer:
                url = await _serve_http(outer, gateway)
                async with AsyncExitStack() as first:
                    a = await _client(first, url)
                    for _ in range(2):
                        assert not (await a.call_tool("p.lookup", {"name": "ana"})).is_error
                    # a's repeat guard is a's own: the third identical call is refused …
                    assert (await a.call_tool("p.lookup", {"name": "ana"})).is_error
                    async with AsyncExitStack() as second:
                        b = await _client(second, url)
                        # … while b, another client session, starts afresh
                        assert not (await b.call_tool("p.lookup", {"name": "ana"})).is_error
                    waiting = await a.call_tool("p.send_mail", {"to": "x@example.org",
                                                                "body": "hi"})
                    match = WAITING.search(waiting.content[0].text)  # type: ignore[union-attr]
                    assert waiting.is_error and match is not None
                    request_id = match.group(1)
                    assert [r.id for r in await store.list_approvals()] == [request_id]
                # a's client session ended: its request is withdrawn, never left to approve
                with anyio.fail_after(10):
                    while await store.list_approvals():
                        await anyio.sleep(0.01)
    found = await store.get_approval(request_id)
    assert found is not None and found.answer is not None and found.answer.withdrawn
    assert answers.state_of(found.request, found.answer) is answers.RequestState.WITHDRAWN
    refused = await answers.answer(store, request_id, None, approved=True, approver="bob",
                                   via="cli")
    assert refused.answer is None and refused.refusal is answers.Refusal.ANSWERED
    assert "withdrawn" in refused.detail and "client session" in refused.detail
    sessions = {s.session_id: s.status for s in await store.list_sessions()}
    assert len(sessions) == 2 and set(sessions.values()) == {"ended"}
    assert all(s.startswith("gateway-") for s in sessions)
    withdrawn = [r for r in await store.audit_records() if r.type == "approval.answered"]
    assert len(withdrawn) == 1 and withdrawn[0].data  # the withdrawal is audited
    assert not (tmp_path / "fx.log").exists()  # nothing ran


async def test_a_fixed_gateway_session_keeps_its_state_across_a_restart(tmp_path: Path) -> None:
    store = MemoryStore()
    with anyio.fail_after(90):
        for attempt in range(3):
            async with McpServers([server_config(tmp_path / "fx.log")], store) as servers:
                await approve_pins(servers, store)
                gateway = Gateway(servers, store=store, policy=POLICY, principal=PRINCIPAL,
                                  session_id="desk", approval_wait=0.05)
                try:
                    outcome = await gateway.call_tool("p.lookup", {"name": "ana"})
                finally:
                    await gateway.close()
                # the repeat guard remembers the earlier processes' calls in the third
                assert outcome.is_error is (attempt == 2)
    state = await store.load_session("desk")
    assert state is not None and state.data["app"] == "anfitrion:gateway"
    assert len(state.data["recent_calls"]) == 3
