"""Helpers for the gateway's OAuth tests: the upstream notes server (a subprocess), the
gateway serving streamable HTTP as a resource server (:class:`OAuthGateway`, the ``gateway``
fixture of ``conftest.py``), and the official SDK client with a token.
"""

from __future__ import annotations

import html
import json
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import httpx2
from idp import GATEWAY_CLIENT
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from anfitrion.mcp._config import ServerConfig
from anfitrion.mcp._gateway import Gateway
from anfitrion.mcp._oauth_settings import OAuthSettings, TokenExchangeSettings
from anfitrion.mcp._pinning import PinBook
from anfitrion.mcp._toolset import McpServers
from anfitrion.store import Store

NOTES = Path(__file__).parent / "notes_server.py"


@dataclass
class Notes:
    """A running notes server: its URL and the Authorization headers it received."""

    url: str
    record: Path

    def authorizations(self) -> list[str | None]:
        if not self.record.exists():
            return []
        return [json.loads(line)["authorization"]
                for line in self.record.read_text().splitlines() if line]


@contextmanager
def notes_server(issuer: str, folder: Path, *, open_server: bool = False) -> Iterator[Notes]:
    record = folder / "notes-headers.jsonl"
    process = subprocess.Popen(
        [sys.executable, str(NOTES), issuer, str(record), *(["--open"] if open_server else [])],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    line: list[bytes] = []
    reader = threading.Thread(target=lambda: line.append(process.stdout.readline()  # type: ignore[union-attr]
                                                          ), daemon=True)
    reader.start()
    reader.join(60)
    try:
        if not line or not line[0].strip():
            raise RuntimeError("the notes server did not start within 60 s")
        yield Notes(json.loads(line[0])["url"], record)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        if process.stdout is not None:
            process.stdout.close()


async def approve_all(configs: list[ServerConfig], store: Store) -> None:
    """What ``anfitrion mcp approve`` does after a review."""
    async with McpServers(configs, store) as servers:
        await servers.refresh()
    book = PinBook(store)
    for pin in await book.pins():
        await book.approve(pin.name, by="operator")


def free_socket() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock


@asynccontextmanager
async def serving(gateway: Gateway, auth: OAuthSettings | None, sock: socket.socket,
                  token: str | None = None) -> AsyncIterator[str]:
    """The gateway on *sock* as a resource server; yields its MCP URL."""
    port = sock.getsockname()[1]
    ready, stop = anyio.Event(), anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(partial(gateway.serve_http, token=token, auth=auth, sock=sock, stop=stop,
                              started=lambda _: ready.set()))
        with anyio.fail_after(30):
            await ready.wait()
        try:
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            stop.set()


def settings_for(issuer: str, resource: str, **more: Any) -> OAuthSettings:
    """``gateway.auth`` for the tests' authorization server on loopback."""
    return replace(OAuthSettings(issuer=issuer, resource=resource, allow_internal=True,
                                 roles_claim="roles"), **more)


@asynccontextmanager
async def mcp_client(url: str, token: str) -> AsyncIterator[ClientSession]:
    """The official SDK client of the gateway, presenting *token*."""
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=300),
                                  headers={"Authorization": f"Bearer {token}"}) as http, \
            streamable_http_client(url, http_client=http) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        yield session


def exchange_to(token_endpoint: str, notes: Notes, scope: str) -> TokenExchangeSettings:
    """A server entry's ``tokenExchange`` to *notes*, as the gateway's client."""
    return TokenExchangeSettings(token_endpoint=token_endpoint, audience=notes.url, scope=scope,
                                 client_id=GATEWAY_CLIENT[0], client_secret=GATEWAY_CLIENT[1],
                                 allow_internal=True)


class OAuthGateway:
    """A gateway about to serve as a resource server of *issuer*: its address is reserved
    first (user tokens are minted for it), then :meth:`running` serves it."""

    def __init__(self, issuer: str) -> None:
        self.issuer = issuer
        self.sock = free_socket()
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/mcp"

    def auth(self, **more: Any) -> OAuthSettings:
        return settings_for(self.issuer, self.url, **more)

    @asynccontextmanager
    async def running(self, configs: Any, store: Store, policy: Any, *,
                      auth: OAuthSettings | None = None,
                      **options: Any) -> AsyncIterator[tuple[Gateway, McpServers]]:
        """*configs* (what :class:`McpServers` takes) behind the gateway with *policy* and
        *options*, served with *auth* (default :meth:`auth`)."""
        async with McpServers(configs, store) as servers:
            gateway = Gateway(servers, store=store, policy=policy, **options)
            async with serving(gateway, auth or self.auth(), self.sock):
                yield gateway, servers

    def close(self) -> None:
        self.sock.close()


def provider_url(started: Any) -> str:
    """Where the inbox's answer to a form that starts a flow sends the browser on to (its
    page refreshes there: a redirect after a form POST would break ``form-action 'self'``)."""
    assert started.status_code == 200, started.text
    assert started.headers["referrer-policy"] == "no-referrer"
    assert "location" not in started.headers
    url = html.unescape(started.text.split('content="0;url=')[1].split('"')[0])
    assert f'href="{html.escape(url, quote=True)}"' in started.text
    return url


def onward_path(done: Any) -> str:
    """The inbox's own page its answer to an authorization server's redirect goes on to (a
    same-site refresh, so that the ``SameSite=Strict`` session cookie is sent there)."""
    assert done.status_code == 200, done.text
    assert "location" not in done.headers
    return str(done.text.split('content="0;url=')[1].split('"')[0])
