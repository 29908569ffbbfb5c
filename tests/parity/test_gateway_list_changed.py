"""``notifications/tools/list_changed`` reaches a connected client within a second of a tool's
approval in the store (by any process), with the official client over streamable HTTP."""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp.types as mt
import pytest

pytest.importorskip("mcp")

from doors import PRINCIPAL, TOKEN, _serve_http, server_config
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from anfitrion.mcp._gateway import Gateway
from anfitrion.mcp._pinning import PinBook
from anfitrion.mcp._toolset import McpServers
from anfitrion.store._sqlite import SQLiteStore

pytestmark = [pytest.mark.anyio, pytest.mark.mcp_servers]


async def test_an_approval_in_the_store_tells_connected_clients_within_a_second(
        tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "a.db")
    notices: list[Any] = []
    changed = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, mt.ToolListChangedNotification):
            notices.append(message)
            changed.set()

    with anyio.fail_after(120):
        async with McpServers([server_config(tmp_path / "fx.log")], store) as servers:
            await servers.refresh()
            book = PinBook(store)
            await book.approve("p.lookup", by="operator")  # p.count waits for a review
            gateway = Gateway(servers, store=store, principal=PRINCIPAL)
            async with AsyncExitStack() as stack:
                url = await _serve_http(stack, gateway)
                http = await stack.enter_async_context(httpx2.AsyncClient(
                    timeout=httpx2.Timeout(30, read=300),
                    headers={"Authorization": f"Bearer {TOKEN}"}))
                read, write = await stack.enter_async_context(
                    streamable_http_client(url, http_client=http))
                client = await stack.enter_async_context(
                    ClientSession(read, write, message_handler=on_message))
                await client.initialize()
                names = [t.name for t in (await client.list_tools()).tools]
                assert names == ["p.lookup"] and not notices
                # a person approves p.count (the CLI, another process: only the store)
                other = SQLiteStore(tmp_path / "a.db")
                await PinBook(other).approve("p.count", by="bob")
                await other.close()
                # the gateway looks every half second (bound: 3 s, for a loaded machine)
                with anyio.fail_after(3):
                    await changed.wait()
                names = [t.name for t in (await client.list_tools()).tools]
                assert sorted(names) == ["p.count", "p.lookup"]
    await store.close()
