"""Over streamable HTTP (what the conformance suite speaks), the gateway relays a call's
progress, the server's log messages and its sampling request on the call's own stream, and
serves rich content, resources and prompts."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")
import httpx2
import mcp.types as mt
from gateway_helpers import approve_all, protocol_server, serving_http, writes_allowed
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from anfitrion.mcp._gateway import Gateway
from anfitrion.mcp._toolset import McpServers
from anfitrion.store import MemoryStore

pytestmark = [pytest.mark.anyio, pytest.mark.mcp_servers]

TOKEN = "test-token-0123456789abcdef"


@asynccontextmanager
async def http_client(store: MemoryStore, **callbacks: Any) -> AsyncIterator[ClientSession]:
    configs = [protocol_server(trusted=True, sampling=True)]
    await approve_all(configs, store)
    async with McpServers(configs, store) as servers:
        gateway = Gateway(servers, store=store, policy=writes_allowed(), own_names=True)
        async with serving_http(gateway, TOKEN) as sock:
            port = sock.getsockname()[1]
            async with httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=300),
                                          headers={"Authorization": f"Bearer {TOKEN}"}) \
                    as http, streamable_http_client(f"http://127.0.0.1:{port}/mcp",
                                                    http_client=http) as (read, write), \
                    ClientSession(read, write, **callbacks) as session:
                await session.initialize()
                yield session


async def test_progress_logs_and_sampling_reach_the_http_client_during_its_call() -> None:
    store = MemoryStore()
    logs: list[Any] = []
    progress: list[float] = []

    async def on_log(params: mt.LoggingMessageNotificationParams) -> None:
        logs.append(params.data)

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    async def sampling(context: Any, params: Any) -> Any:
        return mt.CreateMessageResult(role="assistant", model="m",
                                      content=mt.TextContent(type="text", text="fine"))

    with anyio.fail_after(90):
        async with http_client(store, logging_callback=on_log,
                               sampling_callback=sampling) as client:
            await client.send_request(mt.SetLevelRequest(params=mt.SetLevelRequestParams(
                level="debug")), mt.EmptyResult)  # its method warns: deprecated in 2026
            await client.call_tool("logging", {})
            await client.call_tool("progress", {}, progress_callback=on_progress)
            sampled = await client.call_tool("sample", {})
            mixed = await client.call_tool("mixed", {})
            read = await client.read_resource("note://safe")
            prompts = await client.list_prompts()
    assert logs == ["started", "working", "done"]
    assert progress == [1, 2, 3]
    assert sampled.content[0].text == "sampled: fine"  # type: ignore[union-attr]
    assert [b.type for b in mixed.content] == ["text", "image", "resource", "resource_link"]
    assert read.contents[0].text == "note note://safe"  # type: ignore[union-attr]
    assert prompts.prompts == []  # seen, not yet approved
