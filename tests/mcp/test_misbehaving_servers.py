"""A server's processes end with it, and its output is bounded: real misbehaving servers."""

from __future__ import annotations

import os
import select
import sys
from pathlib import Path
from typing import Any

import anyio.to_thread
import pytest

pytest.importorskip("mcp")
from mcp_helpers import MISBEHAVING, through_gate

from anfitrion._tools import OfferContext, Tool
from anfitrion.mcp._config import ServerConfig
from anfitrion.mcp._toolset import MAX_LINE_BYTES, MAX_NOISE_LINES, McpToolset
from anfitrion.store import MemoryStore

pytestmark = [pytest.mark.anyio, pytest.mark.mcp_servers]


def _config(**options: Any) -> ServerConfig:
    return ServerConfig(id="bad", command=sys.executable, args=(MISBEHAVING,), **options)


async def _approved(toolset: McpToolset, offer: OfferContext) -> list[Tool]:
    await toolset.refresh()
    for pin in await toolset.pins.pins(toolset.id):
        await toolset.pins.approve(pin.name, by="operator")
    return list(await toolset.list_tools(offer))


def _has_ended(pid: int) -> bool:
    """Waits (at most 30 s, for the signal to land) until the process *pid* has ended."""
    try:
        handle = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = select.select([handle], [], [], 30)
        return bool(readable)
    finally:
        os.close(handle)


def _alive(pid: int) -> bool:
    try:
        handle = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    try:
        readable, _, _ = select.select([handle], [], [], 0)
        return not readable
    finally:
        os.close(handle)


async def test_a_child_of_a_hung_server_does_not_survive_its_restart(
        tmp_path: Path, store: MemoryStore, offer: OfferContext) -> None:
    pidfile = tmp_path / "child.pid"
    async with McpToolset(_config(timeout=2), store) as toolset:
        tools = await _approved(toolset, offer)
        outcome = await through_gate(tools, "bad.spawn_and_hang", {"pidfile": str(pidfile)},
                                     store)
        assert outcome.result.is_error and "no answer within 2 seconds" in outcome.result.content
        child = int(pidfile.read_text())
        assert await anyio.to_thread.run_sync(_has_ended, child)
        assert "bad.echo" in {t.name for t in await toolset.list_tools(offer)}
        assert toolset.restarts == 1


async def test_what_a_server_left_running_ends_when_the_server_is_closed(
        tmp_path: Path, store: MemoryStore, offer: OfferContext) -> None:
    pidfile = tmp_path / "child.pid"
    async with McpToolset(_config(), store) as toolset:
        tools = await _approved(toolset, offer)
        outcome = await through_gate(tools, "bad.spawn", {"pidfile": str(pidfile)}, store)
        assert not outcome.result.is_error
        child = int(pidfile.read_text())
        assert _alive(child)
    assert await anyio.to_thread.run_sync(_has_ended, child)


@pytest.mark.parametrize(("tool", "arguments", "reason"), [
    ("bad.huge_line", {"mib": 32}, f"the server sent a line longer than {MAX_LINE_BYTES} bytes"),
    ("bad.noise", {}, f"the server wrote more than {MAX_NOISE_LINES} lines that are not "
                      "JSON-RPC messages"),
])
async def test_a_flood_on_stdout_closes_the_server_with_a_reason_and_it_restarts(
        store: MemoryStore, offer: OfferContext, tool: str, arguments: dict[str, Any],
        reason: str) -> None:
    async with McpToolset(_config(), store) as toolset:
        tools = await _approved(toolset, offer)
        outcome = await through_gate(tools, tool, arguments, store)
        assert outcome.result.is_error
        assert reason in outcome.result.content
        assert "may or may not have happened" in outcome.result.content
        assert toolset.last_error is not None
        again = await through_gate(await toolset.list_tools(offer), "bad.echo",
                                   {"text": "still here"}, store, call_id="call-2")
        assert again.result.content == "still here"
        assert toolset.restarts == 1


async def test_a_tool_whose_schema_backtracks_is_invalid_with_the_reason_even_once_approved(
        store: MemoryStore, offer: OfferContext) -> None:
    async with McpToolset(_config(), store) as toolset:
        before = {s.name: s for s in await toolset.refresh()}
        assert before["bad.backtracking"].state == "invalid"
        assert "pattern '^(a+)+$' is refused" in before["bad.backtracking"].problem
        assert "repeat inside a repeat" in before["bad.backtracking"].problem
        await toolset.pins.approve("bad.backtracking", by="operator")
        after = {s.name: s for s in await toolset.refresh()}
        assert after["bad.backtracking"].state == "invalid"
        assert "bad.backtracking" not in {t.name for t in await toolset.list_tools(offer)}


def test_review_shows_why_a_backtracking_schema_is_refused(tmp_path: Path) -> None:
    import json

    from click.testing import CliRunner

    from anfitrion._cli.mcp import command

    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"bad": {"command": sys.executable,
                                                         "args": [MISBEHAVING]}}}))
    result = CliRunner().invoke(command, ["review", "--launch", "--config", str(config)],
                                obj={"store": MemoryStore()})
    assert result.exit_code == 0, result.output
    assert "── bad.backtracking  [invalid]" in result.output
    assert "pattern '^(a+)+$' is refused: the regular expression uses a repeat inside a " \
           "repeat" in result.output
