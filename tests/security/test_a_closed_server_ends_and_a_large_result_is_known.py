"""Processes and results of a stdio MCP server, real processes: every close ends the server's
whole process group — waited for, killed after a short grace — and an answer too large to take
is a known outcome (the tool ran: done, said so), not framing abuse left for a person.

An attacker who read ``mcp._toolset``: a server that ignores SIGTERM and the end of its input,
with a child that ignores SIGTERM too, floods a line over the limit; a server returns a result
over the limit in the Python SDK's member order and in the TypeScript SDK's (the id last).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import anyio.to_thread
import pytest

pytest.importorskip("mcp")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mcp"))
from mcp_helpers import MISBEHAVING, through_gate

from anfitrion._principal import Principal
from anfitrion._tools import OfferContext, Tool
from anfitrion.mcp._config import ServerConfig
from anfitrion.mcp._sandbox import OFF
from anfitrion.mcp._toolset import MAX_LINE_BYTES, TERMINATE_GRACE, McpToolset
from anfitrion.store import LedgerState, MemoryStore

pytestmark = [pytest.mark.anyio, pytest.mark.mcp_servers]

OFFER = OfferContext(Principal("tester"), "session-1")


async def _approved(toolset: McpToolset) -> list[Tool]:
    await toolset.refresh()
    for pin in await toolset.pins.pins(toolset.id):
        await toolset.pins.approve(pin.name, by="operator")
    return list(await toolset.list_tools(OFFER))


def _running(pid: int) -> bool:
    """Alive and not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2:].split()[0] != b"Z"


async def test_a_stubborn_server_and_its_stubborn_child_end_soon_after_a_framing_close(
        tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    store = MemoryStore()
    config = ServerConfig(id="bad", command=sys.executable, args=(MISBEHAVING,), sandbox=OFF)
    async with McpToolset(config, store) as toolset:
        tools = await _approved(toolset)
        outcome = await through_gate(tools, "bad.stubborn_flood", {"pidfile": str(pidfile)},
                                     store)
        closed_at = time.monotonic()
        assert outcome.result.is_error
        assert f"longer than {MAX_LINE_BYTES} bytes" in outcome.result.content
        server, child = map(int, pidfile.read_text().split())
        # an abuser gets no polite wait: SIGTERM at once, and as both ignore it, SIGKILL
        # after one grace; the close waits for the group, so the next call restarts it clean
        while (_running(server) or _running(child)) and \
                time.monotonic() - closed_at < 2 * TERMINATE_GRACE + 3:
            await anyio.sleep(0.05)
        assert not _running(server) and not _running(child)
        assert time.monotonic() - closed_at < TERMINATE_GRACE + 1.5


async def test_every_close_waits_for_the_whole_group(tmp_path: Path) -> None:
    """Closing the toolset returns only once the server's group has ended."""
    pidfile = tmp_path / "pid"
    store = MemoryStore()
    config = ServerConfig(id="bad", command=sys.executable, args=(MISBEHAVING,), sandbox=OFF)
    async with McpToolset(config, store) as toolset:
        tools = await _approved(toolset)
        outcome = await through_gate(tools, "bad.spawn", {"pidfile": str(pidfile)}, store)
        assert not outcome.result.is_error
        child = int(pidfile.read_text())
        assert _running(child)
    assert not _running(child)  # no waiting here: the close waited


@pytest.mark.parametrize("order", ["sdk", "result_first"])
async def test_a_result_over_the_limit_is_done_with_a_clear_message_and_the_server_stays(
        tmp_path: Path, order: str) -> None:
    store = MemoryStore()
    config = ServerConfig(id="bad", command=sys.executable, args=(MISBEHAVING,),
                          cwd=str(tmp_path), sandbox=OFF, timeout=60)
    async with McpToolset(config, store) as toolset:
        tools = await _approved(toolset)
        outcome = await through_gate(tools, "bad.huge_result", {"mib": 6, "order": order},
                                     store)
        result = outcome.result
        assert not result.is_error, result.content
        assert "over the 4,194,304-byte limit" in result.content
        assert "the tool ran and answered, but its result is not shown" in result.content
        assert "y" * 100 not in result.content
        entry = await store.execution_state("session-1", "call-1")
        assert entry is not None and entry.state is LedgerState.DONE  # known, not unknown
        assert (tmp_path / "ran.log").read_text() == "ran\n"
        # the same connection goes on
        again = await through_gate(await toolset.list_tools(OFFER), "bad.echo",
                                   {"text": "still here"}, store, call_id="call-2")
        assert again.result.content == "still here" and toolset.restarts == 0


async def test_a_server_cannot_forge_the_too_large_marker() -> None:
    """The marker is recognised by a secret of this process: a result carrying the meta key
    with any value is an ordinary result, checked as every other."""
    import mcp.types as mt

    from anfitrion.mcp._oversized import OVERSIZED_META, is_oversized_marker

    for value in ("", "x", None, 1, {"a": 1}, "a" * 32):
        forged: Any = mt.CallToolResult(content=[], _meta={OVERSIZED_META: value})
        assert not is_oversized_marker(forged)
