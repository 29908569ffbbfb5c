"""A server's ``isError`` result is a known outcome (the call ran and failed), not an unknown
one (#36 item 11): only a transport failure or a timeout leaves a write's outcome unknown. A
server whose errors may come after it acted is configured ``errorResults: "unknown"``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")
from mcp_helpers import MISBEHAVING, through_gate

from anfitrion._tools import OfferContext
from anfitrion.exceptions import ConfigError
from anfitrion.mcp import load_config
from anfitrion.mcp._config import ServerConfig
from anfitrion.mcp._toolset import McpToolset
from anfitrion.store import LedgerState, MemoryStore

pytestmark = [pytest.mark.anyio, pytest.mark.mcp_servers]


async def _call(store: MemoryStore, offer: OfferContext, **options: Any) -> Any:
    config = ServerConfig(id="bad", command=sys.executable, args=(MISBEHAVING,), **options)
    async with McpToolset(config, store) as toolset:
        await toolset.refresh()
        await toolset.pins.approve("bad.echo_error", by="operator")
        tools = await toolset.list_tools(offer)
        return await through_gate(tools, "bad.echo_error", {"text": "quota exceeded"}, store)


async def test_an_error_result_is_a_failed_call_not_an_unknown_outcome(
        offer: OfferContext) -> None:
    store = MemoryStore()
    outcome = await _call(store, offer)
    assert outcome.result.is_error
    assert outcome.result.error_kind == "tool_error"
    assert "the server reported an error: quota exceeded" in outcome.result.content
    assert "unknown" not in outcome.result.content
    entry = await store.execution_state("session-1", "call-1")
    assert entry is not None and entry.state is LedgerState.FAILED


async def test_a_server_configured_unknown_leaves_its_error_results_to_a_person(
        offer: OfferContext) -> None:
    store = MemoryStore()
    outcome = await _call(store, offer, error_results="unknown")
    assert outcome.result.error_kind == "outcome_unknown"
    entry = await store.execution_state("session-1", "call-1")
    assert entry is not None and entry.state is LedgerState.UNKNOWN


def test_error_results_is_read_from_the_config_and_checked(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    server = {"command": "srv"}
    path.write_text(json.dumps({"mcpServers": {"a": server}}))
    assert load_config(str(path)).servers["a"].error_results == "failed"
    path.write_text(json.dumps({"mcpServers": {"a": {**server, "errorResults": "unknown"}}}))
    assert load_config(str(path)).servers["a"].error_results == "unknown"
    path.write_text(json.dumps({"mcpServers": {"a": {**server, "errorResults": "maybe"}}}))
    with pytest.raises(ConfigError,
                       match=r"must be one of failed, unknown \(at mcpServers.a.errorResults\)"):
        load_config(str(path))
