"""The doors of the parity suite: one interface over the host, the embedding API and the MCP
gateway (driven by the official ``mcp`` client over streamable HTTP and over stdio).

Every door offers the same tools — the parity server's, through :class:`McpServers` — under the
same policy and store, for the principal ``alice``. A test proposes calls through a door and
asserts what the gate did; the same test runs through every door.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import anyio
import httpx2
from mcp.client.session import ClientSession
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from anfitrion import DeferredApprover, Host
from anfitrion._conversation import ToolResult, UserMessage
from anfitrion._runtime import GatedSession, Runtime
from anfitrion.mcp._config import ServerConfig
from anfitrion.mcp._gateway import Gateway
from anfitrion.mcp._pinning import PinBook
from anfitrion.mcp._sandbox import PathGrant, SandboxProfile
from anfitrion.mcp._toolset import McpServers
from anfitrion.models._base import ModelRequest
from anfitrion.policy import Policy, parse_policy
from anfitrion.store import Store, open_store
from anfitrion.testing import ScriptedModel, call
from mcp import Client, StdioServerParameters

SERVER = str(Path(__file__).with_name("parity_server.py"))
TOKEN = "parity-token-0123456789abcdef"
PRINCIPAL = "alice"
WAITING = re.compile(r"anfitrion approvals approve (\w+)")


@dataclass(frozen=True)
class Out:
    """What a door answered for one call: ``ok``, ``error`` or ``waiting`` (for a person)."""

    status: str
    text: str
    request_id: str | None = None


class Door(Protocol):
    name: str
    store: Store

    @property
    def session_id(self) -> str | None: ...

    async def call(self, name: str, arguments: dict[str, Any]) -> Out: ...

    async def retry(self) -> Out: ...


def server_config(effects: Path) -> ServerConfig:
    # the server appends what it did to the effects file: its folder is granted read-write
    return ServerConfig(id="p", command=sys.executable, args=(SERVER,),
                        env={"PARITY_EFFECTS": str(effects)}, trusted=True,
                        sandbox=SandboxProfile(paths=(PathGrant(str(effects.parent), "rw"),)))


def _result_out(result: ToolResult) -> Out:
    return Out("error" if result.is_error else "ok", result.content)


class HostDoor:
    """A scripted model proposes each call in a turn of its own; one session throughout."""

    name = "host"

    def __init__(self, servers: McpServers, store: Store, policy: Policy) -> None:
        self.store = store
        self._next: tuple[str, dict[str, Any]] | None = None
        self._count = 0
        self._sid: str | None = None
        self._call_id = ""
        self.host = Host(model=ScriptedModel(self._respond), tools=servers, store=store,
                         policy=policy, approver=DeferredApprover(), max_turns=2)

    @property
    def session_id(self) -> str | None:
        return self._sid

    def _respond(self, request: ModelRequest) -> Any:
        last = request.messages[-1]
        if isinstance(last, UserMessage) and any(isinstance(p, ToolResult) for p in last.parts):
            return "done"
        assert self._next is not None
        self._count += 1
        self._call_id = f"h{self._count}"
        return call(*self._next, id=self._call_id)

    def _out(self, run: Any) -> Out:
        if run.pending:
            return Out("waiting", "", run.pending[0].id)
        for message in reversed(run.transcript):
            for part in getattr(message, "parts", ()):
                if isinstance(part, ToolResult) and part.call_id == self._call_id:
                    return _result_out(part)
        raise AssertionError(f"no result for {self._call_id}: {run.status} {run.error}")

    async def call(self, name: str, arguments: dict[str, Any]) -> Out:
        self._next = (name, arguments)
        run = await self.host.run("go on", principal=PRINCIPAL, session_id=self._sid)
        self._sid = run.session_id
        return self._out(run)

    async def retry(self) -> Out:
        assert self._sid is not None
        return self._out(await self.host.resume(self._sid))


class EmbedDoor:
    """Code that runs its own loop: submit each call; after a person's answer the session is
    resumed (as another process would) and the same call submitted again."""

    name = "embed"

    def __init__(self, servers: McpServers, store: Store, policy: Policy) -> None:
        self.store = store
        self.runtime = Runtime(servers, policy=policy, approver=DeferredApprover(), store=store)
        self._gated: GatedSession | None = None
        self._last: tuple[str, dict[str, Any], str] | None = None
        self._count = 0

    @property
    def session_id(self) -> str | None:
        return self._gated.id if self._gated else None

    async def _submit(self, name: str, arguments: dict[str, Any], call_id: str) -> Out:
        assert self._gated is not None
        outcome = await self._gated.submit(name, arguments, call_id)
        if outcome.request is not None and outcome.result is None:
            await self._gated.suspend()  # leave it for a person, lease released
            return Out("waiting", outcome.text, outcome.request.id)
        assert outcome.result is not None
        return _result_out(outcome.result)

    async def call(self, name: str, arguments: dict[str, Any]) -> Out:
        if self._gated is None:
            self._gated = await self.runtime.open(PRINCIPAL)
        self._count += 1
        self._last = (name, arguments, f"e{self._count}")
        return await self._submit(*self._last)

    async def retry(self) -> Out:
        assert self._gated is not None and self._last is not None
        self._gated = await self.runtime.resume(self._gated.id)
        return await self._submit(*self._last)


class McpClientDoor:
    """The official MCP client against the gateway (HTTP in process, or a stdio process)."""

    def __init__(self, name: str, client: ClientSession, store: Store,
                 gateway: Gateway | None = None) -> None:
        self.name = name
        self.client = client
        self.store = store
        self.gateway = gateway
        self._last: tuple[str, dict[str, Any]] | None = None

    @property
    def session_id(self) -> str | None:
        return None  # one per client session: found through the store

    async def call(self, name: str, arguments: dict[str, Any]) -> Out:
        self._last = (name, arguments)
        result = await self.client.call_tool(name, arguments)
        text = "".join(getattr(c, "text", "") for c in result.content)
        if result.is_error and (waiting := WAITING.search(text)):
            return Out("waiting", text, waiting.group(1))
        return Out("error" if result.is_error else "ok", text)

    async def retry(self) -> Out:
        assert self._last is not None
        return await self.call(*self._last)


class StatelessDoor(McpClientDoor):
    """The official client speaking MCP 2026-07-28 to the gateway: no ``initialize``, no
    ``Mcp-Session-Id`` — every request stands alone, and names no conversation (a client that
    knows nothing of anfitrion). Its session is the principal's conversation."""

    def __init__(self, client: Client, store: Store, gateway: Gateway) -> None:
        super().__init__("gateway-stateless", client.session, store, gateway)
        self.modern = client
        self.handle: str | None = None
        """A conversation handle to name in each request's ``_meta`` (``None``: none)."""
        self.last_meta: dict[str, Any] | None = None

    async def call(self, name: str, arguments: dict[str, Any]) -> Out:
        assert self.modern.protocol_version == "2026-07-28"
        self._last = (name, arguments)
        meta = {"io.anfitrion/conversation": self.handle} if self.handle else None
        result = await self.modern.call_tool(name, arguments, meta=meta)  # type: ignore[arg-type]
        self.last_meta = dict(result.meta or {})
        text = "".join(getattr(c, "text", "") for c in result.content)
        if result.is_error and (waiting := WAITING.search(text)):
            return Out("waiting", text, waiting.group(1))
        return Out("error" if result.is_error else "ok", text)


async def approve_pins(servers: McpServers, store: Store) -> None:
    await servers.refresh()
    book = PinBook(store)
    for tool in ("lookup", "count", "fetch_page", "open_link", "send_mail"):
        await book.approve(f"p.{tool}", by="operator")


@asynccontextmanager
async def open_door(kind: str, store_url: str, policy_text: str,
                    tmp: Path) -> AsyncIterator[Door]:
    """A door of *kind* over a fresh parity server, with its pins approved."""
    effects = tmp / "effects.log"
    config = server_config(effects)
    policy = parse_policy(policy_text)
    store = open_store(store_url)
    async with AsyncExitStack() as stack:
        stack.push_async_callback(store.close)
        servers = await stack.enter_async_context(McpServers([config], store))
        await approve_pins(servers, store)
        if kind == "host":
            yield HostDoor(servers, store, policy)
        elif kind == "embed":
            yield EmbedDoor(servers, store, policy)
        elif kind == "gateway-http":
            gateway = Gateway(servers, store=store, policy=policy, principal=PRINCIPAL,
                              approval_wait=0.05, poll_interval=0.01)
            url = await _serve_http(stack, gateway)
            http = await stack.enter_async_context(
                httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=300),
                                  headers={"Authorization": f"Bearer {TOKEN}"}))
            read, write = await stack.enter_async_context(
                streamable_http_client(url, http_client=http))
            client = await stack.enter_async_context(ClientSession(read, write))
            await client.initialize()
            yield McpClientDoor(kind, client, store, gateway)
        elif kind == "gateway-stateless":
            gateway = Gateway(servers, store=store, policy=policy, principal=PRINCIPAL,
                              approval_wait=0.05, poll_interval=0.01)
            url = await _serve_http(stack, gateway)
            http = await stack.enter_async_context(
                httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=300),
                                  headers={"Authorization": f"Bearer {TOKEN}"}))
            modern = await stack.enter_async_context(
                Client(streamable_http_client(url, http_client=http), mode="2026-07-28"))
            yield StatelessDoor(modern, store, gateway)
        elif kind == "gateway-stdio":
            policy_file = tmp / "policy.toml"
            policy_file.write_text(policy_text)
            config_file = tmp / "mcp.json"
            config_file.write_text(json.dumps({
                "mcpServers": {"p": {"command": sys.executable, "args": [SERVER],
                                     "env": {"PARITY_EFFECTS": str(effects)},
                                     "trusted": True, "sandbox": {"paths": [
                                         {"path": str(effects.parent), "mode": "rw"}]}}},
                "gateway": {"principal": PRINCIPAL}}))
            params = StdioServerParameters(
                command=sys.executable,
                args=["-m", "anfitrion._cli.main", "gateway", "--config", str(config_file),
                      "--store", store_url, "--policy", str(policy_file),
                      "--approval-wait", "0.05"],
                env={**os.environ, "PYTHONWARNINGS": "ignore"})
            errlog = stack.enter_context(open(os.devnull, "w"))  # noqa: SIM115
            read, write = await stack.enter_async_context(stdio_client(params, errlog=errlog))
            client = await stack.enter_async_context(ClientSession(read, write))
            await client.initialize()
            yield McpClientDoor(kind, client, store)
        else:  # pragma: no cover - a typo in a parametrisation
            raise ValueError(kind)


async def _serve_http(stack: AsyncExitStack, gateway: Gateway) -> str:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    ready = anyio.Event()
    ports: list[int] = []
    stop = anyio.Event()

    def started(port: int) -> None:
        ports.append(port)
        ready.set()

    tg = await stack.enter_async_context(anyio.create_task_group())
    stack.callback(stop.set)
    tg.start_soon(partial(gateway.serve_http, token=TOKEN, sock=sock, started=started,
                          stop=stop))
    await ready.wait()
    return f"http://127.0.0.1:{ports[0]}/mcp"
