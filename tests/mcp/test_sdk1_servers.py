"""Servers written with the MCP SDK's previous major (1.x, what many servers still run on)
work behind the client toolset and the gateway, which run on 2.x: over stdio and streamable
HTTP, and with a server that answers ``initialize`` with an older protocol version than the
client offers.

The servers run in a venv of their own (``tests/mcp/install_mcp1.sh``, made by ``make
install-test``); without it these tests are skipped, unless ``ANFITRION_REQUIRE_MCP1=1``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")
from gateway_helpers import approve_all, gateway_client
from mcp_helpers import through_gate

from anfitrion._principal import Principal
from anfitrion._tools import OfferContext
from anfitrion.mcp._config import ServerConfig
from anfitrion.mcp._toolset import McpServers
from anfitrion.store import MemoryStore

pytestmark = [pytest.mark.anyio, pytest.mark.mcp_servers]

VENV = Path(os.environ.get("ANFITRION_MCP1_VENV",
                           Path.home() / ".cache" / "anfitrion" / "mcp1"))
SERVER = str(Path(__file__).parent / "servers" / "sdk1.py")


@pytest.fixture(scope="module")
def mcp1_python() -> str:
    python = VENV / "bin" / "python"
    found = python.exists() and subprocess.run(
        [str(python), "-c", "import mcp.server.fastmcp"], capture_output=True).returncode == 0
    if not found:
        if os.environ.get("ANFITRION_REQUIRE_MCP1") == "1":
            pytest.fail(f"no 1.x MCP SDK in {VENV}: run tests/mcp/install_mcp1.sh")
        pytest.skip(f"no 1.x MCP SDK in {VENV} (tests/mcp/install_mcp1.sh installs it)")
    version = subprocess.run([str(python), "-c", "import importlib.metadata as m; "
                              "print(m.version('mcp'))"], capture_output=True, text=True,
                             check=True).stdout.strip()
    assert version.startswith("1."), version
    return str(python)


def _stdio(python: str, *extra: str, server_id: str = "old") -> ServerConfig:
    return ServerConfig(id=server_id, command=python, args=(SERVER, *extra), trusted=True)


@asynccontextmanager
async def _http_server(python: str) -> AsyncIterator[ServerConfig]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = await anyio.open_process([python, SERVER, "--http", "--port", str(port)],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with anyio.fail_after(30):
            while True:
                try:
                    await (await anyio.connect_tcp("127.0.0.1", port)).aclose()
                    break
                except OSError:
                    await anyio.sleep(0.1)
        yield ServerConfig(id="old", url=f"http://127.0.0.1:{port}/mcp", trusted=True)
    finally:
        process.terminate()
        with anyio.CancelScope(shield=True), anyio.move_on_after(5):
            await process.wait()


async def _through_toolset(config: ServerConfig, store: MemoryStore) -> dict[str, Any]:
    """The 1.x server's tools as the host gets them, each called once through the gate; and
    the protocol version the connection speaks."""
    await approve_all([config], store)
    async with McpServers([config], store) as servers:
        tools = await servers.list_tools(OfferContext(Principal("tester"), "session-1"))
        seen: dict[str, Any] = {"tools": sorted(t.name for t in tools)}
        for i, (name, arguments) in enumerate([("add", {"a": 2, "b": 3}),
                                               ("shout", {"text": "hi"}), ("about", {})]):
            outcome = await through_gate(tools, f"old.{name}", arguments, store,
                                         call_id=f"call-{i}")
            assert not outcome.result.is_error, outcome.result.content
            seen[name] = outcome.result.content
        connection = servers.toolsets[config.id]._connection
        assert connection is not None and connection.session is not None
        seen["protocol"] = connection.session.protocol_version
        # FastMCP 1.x returns a function's value as structured content: {"result": value}
        seen["add"] = json.loads(seen["add"])["result"]
        seen["about"] = json.loads(json.loads(seen["about"])["result"])
        return seen


async def test_a_1x_server_over_stdio_works_behind_the_toolset(mcp1_python: str) -> None:
    with anyio.fail_after(90):
        seen = await _through_toolset(_stdio(mcp1_python), MemoryStore())
    assert seen["tools"] == ["old.about", "old.add", "old.shout"]
    assert seen["add"] == 5
    assert json.loads(seen["shout"]) == {"text": "HI"}  # structured, checked against its schema
    assert seen["about"]["sdk"].startswith("1.")
    assert seen["protocol"] == seen["about"]["requested"]  # the newest both know


async def test_a_1x_server_over_streamable_http_works_behind_the_toolset(
        mcp1_python: str) -> None:
    with anyio.fail_after(90):
        async with _http_server(mcp1_python) as config:
            seen = await _through_toolset(config, MemoryStore())
    assert seen["add"] == 5
    assert json.loads(seen["shout"]) == {"text": "HI"}
    assert seen["about"]["sdk"].startswith("1.")


async def test_a_server_answering_an_older_protocol_version_is_spoken_to_in_it(
        mcp1_python: str) -> None:
    with anyio.fail_after(90):
        seen = await _through_toolset(_stdio(mcp1_python, "--protocol", "2024-11-05"),
                                      MemoryStore())
    assert seen["about"]["requested"] == "2025-11-25"  # what the 2.x client offered
    assert seen["protocol"] == "2024-11-05"  # what the server answered, and was kept
    assert seen["add"] == 5


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_1x_server_works_behind_the_gateway(mcp1_python: str, transport: str) -> None:
    store = MemoryStore()
    with anyio.fail_after(120):
        async with _one_server(transport, mcp1_python) as config:
            await approve_all([config], store)
            async with gateway_client([config], store) as (_, client):
                listed = sorted(t.name for t in (await client.list_tools()).tools)
                added = await client.call_tool("old.add", {"a": 20, "b": 22})
                shouted = await client.call_tool("old.shout", {"text": "up"})
    assert listed == ["old.about", "old.add", "old.shout"]
    assert not added.is_error and added.structured_content == {"result": 42}
    assert shouted.structured_content == {"text": "UP"}


@asynccontextmanager
async def _one_server(transport: str, python: str) -> AsyncIterator[ServerConfig]:
    if transport == "stdio":
        yield _stdio(python)
        return
    async with _http_server(python) as config:
        yield config
