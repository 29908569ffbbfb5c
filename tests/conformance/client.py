"""The client the conformance suite launches for its client scenarios: anfitrion's host, the
server at the URL (last argument) as its only tool source (:class:`McpToolset`), a scripted
model proposing the calls the scenario (``$MCP_CONFORMANCE_SCENARIO``) expects.

    python tests/conformance/client.py http://127.0.0.1:PORT/mcp

Every listed tool is approved first (the operator's review), every call is allowed; what the
host did is printed, and the exit status is 1 when a call did not succeed. The server may ask
the person (``"elicitation": true``); the person accepts with the server's defaults.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import anyio

from anfitrion import Host
from anfitrion._approvals import CallbackApprover
from anfitrion._conversation import ToolCall
from anfitrion.mcp import Elicitation, ElicitationAnswer
from anfitrion.mcp._config import ServerConfig
from anfitrion.mcp._toolset import McpToolset
from anfitrion.policy import Policy
from anfitrion.testing import MemoryStore, ScriptedModel

SERVER_ID = "conformance"
CALLS: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "initialize": [],
    "tools_call": [("add_numbers", {"a": 5, "b": 3})],
    "elicitation-sep1034-client-defaults": [("test_client_elicitation_defaults", {})],
    "sse-retry": [("test_reconnection", {})],
}
"""Scenario → the tools the model calls (by the server's names), in one turn."""


async def accept_defaults(asked: Elicitation) -> ElicitationAnswer:
    """The person accepts, leaving every field at the server's default (SEP-1034)."""
    print(f"elicitation from {asked.server}: {asked.message!r} fields={asked.fields}")
    return ElicitationAnswer("accept")


async def main(url: str, scenario: str) -> int:
    store = MemoryStore()
    calls = CALLS.get(scenario)
    if calls is None:
        print(f"client: scenario {scenario!r} is not supported", file=sys.stderr)
        return 2
    config = ServerConfig(id=SERVER_ID, url=url, timeout=20, elicitation=True)
    async with McpToolset(config, store, elicitation=accept_defaults) as toolset:
        for status in await toolset.refresh():
            await toolset.pins.approve(status.name, by="conformance")
        script: list[Any] = []
        if calls:
            script.append([ToolCall.from_object(f"call_{i}", f"{SERVER_ID}.{name}", arguments)
                           for i, (name, arguments) in enumerate(calls)])
        script.append("done")
        host = Host(ScriptedModel(script), toolset, store=store, policy=Policy.default(),
                    approver=CallbackApprover(lambda request: True))
        result = await host.run(f"conformance scenario {scenario}")
    failed = 0
    for record in result.calls:
        print(f"{record.tool}: {record.stage} {record.verdict} error={record.is_error} "
              f"{record.reason or ''}")
        failed += record.is_error is not False
    print(f"run: {result.status.value} {result.error or ''}")
    return 1 if failed or result.error else 0


if __name__ == "__main__":
    sys.exit(anyio.run(main, sys.argv[-1], os.environ.get("MCP_CONFORMANCE_SCENARIO", "")))
