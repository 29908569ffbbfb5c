"""Helpers for the gateway protocol tests: the protocol test server behind a real gateway,
and an official SDK client connected to it in memory (the stdio code path)."""

from __future__ import annotations

import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import anyio
from mcp.client.session import ClientSession
from mcp.shared.memory import create_client_server_memory_streams

from anfitrion._tools import Effect
from anfitrion.mcp._config import ServerConfig
from anfitrion.mcp._gateway import Gateway
from anfitrion.mcp._pinning import PinBook
from anfitrion.mcp._toolset import McpServers
from anfitrion.policy import Policy, SecretArguments, Verdict
from anfitrion.policy._taint import taint_rule
from anfitrion.store import Store

PROTOCOL = str(Path(__file__).parent / "servers" / "protocol.py")


def writes_allowed() -> Policy:
    """Writes allowed (the protocol server's tools are writes unless trusted and read-only),
    taint containment and the secrets rule on, as in the default policy."""
    return Policy([taint_rule(), SecretArguments()], defaults={Effect.WRITE: Verdict.ALLOW})


def protocol_server(server_id: str = "proto", *extra: str, **options: Any) -> ServerConfig:
    # a 2025-era server: it asks (sampling, elicitation, roots) with server-to-client requests
    options.setdefault("protocol", "legacy")
    return ServerConfig(id=server_id, command=sys.executable, args=(PROTOCOL, *extra),
                        **options)


async def approve_all(configs: list[ServerConfig], store: Store) -> None:
    """What `anfitrion mcp approve 'proto.*'` does after a review."""
    async with McpServers(configs, store) as servers:
        await servers.refresh()
    book = PinBook(store)
    for pin in await book.pins():
        await book.approve(pin.name, by="operator")


@asynccontextmanager
async def gateway_client(configs: list[ServerConfig], store: Store, *,
                         gateway_options: dict[str, Any] | None = None,
                         **client: Any) -> AsyncIterator[tuple[Gateway, ClientSession]]:
    """A gateway over *configs* and one client session of it (callbacks in *client*)."""
    async with McpServers(configs, store) as servers:
        options: dict[str, Any] = {"policy": writes_allowed(), "approval_wait": 5,
                                   "poll_interval": 0.05, **(gateway_options or {})}
        gateway = Gateway(servers, store=store, **options)
        async with connected(gateway.build_server(), **client) as session:
            yield gateway, session


@asynccontextmanager
async def connected(server: Any, **client: Any) -> AsyncIterator[ClientSession]:
    """An SDK client session, initialized, of *server* run in memory."""
    async with create_client_server_memory_streams() as (client_streams, server_streams), \
            anyio.create_task_group() as tg:
        tg.start_soon(server.run, *server_streams, server.create_initialization_options())
        async with ClientSession(*client_streams, **client) as session:
            await session.initialize()
            yield session
        tg.cancel_scope.cancel()


@asynccontextmanager
async def serving_http(gateway: Gateway, token: str | None, *,
                       sock: socket.socket | None = None, **options: Any
                       ) -> AsyncIterator[socket.socket]:
    """*gateway* served over HTTP (bearer *token*; other ``serve_http`` *options*, e.g.
    ``auth``) on *sock* or a free local port until the block ends; yields the listening
    socket."""
    if sock is None:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
    ready, stop = anyio.Event(), anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(partial(gateway.serve_http, token=token, sock=sock, stop=stop,
                              started=lambda _: ready.set(), **options))
        with anyio.fail_after(30):
            await ready.wait()
        try:
            yield sock
        finally:
            stop.set()


def url_of(sock: socket.socket) -> str:
    """The MCP URL of a gateway served on *sock*."""
    return f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
