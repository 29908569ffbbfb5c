"""A gateway in normal operation writes no warning and no traceback: list, call, close with
the official client over stdio (its stderr read) and over streamable HTTP (its log records)."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

import anyio
import pytest

pytest.importorskip("mcp")
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from test_gateway import approve_pins, http_gateway, mcp_client

from anfitrion.mcp._config import ServerConfig, load_config
from anfitrion.mcp._pinning import PinBook
from anfitrion.mcp._toolset import McpServers
from anfitrion.store import MemoryStore, open_store

pytestmark = [pytest.mark.anyio, pytest.mark.mcp_servers]

ANFITRION = str(Path(sys.executable).parent / "anfitrion")
PARITY = str(Path(__file__).parents[1] / "parity" / "parity_server.py")


def noise(text: str) -> list[str]:
    return [line for line in text.splitlines()
            if "traceback" in line.lower() or "warning" in line.lower() or "error" in line.lower()]


async def test_over_stdio_list_call_and_close_leave_stderr_without_warnings(
        tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {
        "time": {"command": sys.executable, "trusted": True,
                 "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]},
        "p": {"command": sys.executable, "args": [PARITY], "trusted": True,
              "env": {"PARITY_EFFECTS": str(tmp_path / "effects.log")}}}}))
    url = f"sqlite:///{tmp_path / 'anfitrion.db'}"
    store = open_store(url)
    try:
        async with McpServers(load_config(config), store) as servers:
            await servers.refresh()
        for name in ("time.get_current_time", "p.lookup"):
            await PinBook(store).approve(name, by="operator")
    finally:
        await store.close()
    env = {k: os.environ[k] for k in ("PYTHONPATH", "ANFITRION_HOME") if k in os.environ}
    params = StdioServerParameters(command=ANFITRION, env=env, cwd=str(tmp_path),
                                   args=["gateway", "--config", str(config), "--store", url])
    errlog = tmp_path / "stderr.txt"
    with anyio.fail_after(90), errlog.open("w") as err:
        async with stdio_client(params, errlog=err) as (read, write), \
                ClientSession(read, write) as client:
            await client.initialize()
            names = sorted(t.name for t in (await client.list_tools()).tools)
            assert names == ["p.lookup", "time.get_current_time"]
            for _ in range(2):
                assert not (await client.call_tool("time.get_current_time",
                                                   {"timezone": "UTC"})).is_error
            looked = await client.call_tool("p.lookup", {"name": "Ada"})
            assert "Ada sits in room 4" in looked.content[0].text  # type: ignore[union-attr]
    assert noise(errlog.read_text()) == []


async def test_over_http_sessions_that_end_log_no_warning_and_no_traceback(
        time_server: ServerConfig, store: MemoryStore,
        caplog: pytest.LogCaptureFixture) -> None:
    await approve_pins([time_server], store, ["time.get_current_time"])
    caplog.set_level(logging.INFO)
    with anyio.fail_after(60):
        async with http_gateway([time_server], store) as (_, url):
            for _ in range(2):  # each client session ends (DELETE) before the next begins
                async with mcp_client(url) as client:
                    assert [t.name for t in (await client.list_tools()).tools] == [
                        "time.get_current_time"]
                    assert not (await client.call_tool("time.get_current_time",
                                                       {"timezone": "UTC"})).is_error
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    assert [(r.name, r.getMessage()) for r in loud] == []
