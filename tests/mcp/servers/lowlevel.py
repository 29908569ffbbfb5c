"""The test servers' one use of the SDK's low-level server (2.x): tools listed by one function
and called by another, given the request's context as the 1.x SDK's ``request_context`` was.

Run as a script's sibling (the servers are started as ``python <server>.py``): the server's
folder is first on ``sys.path``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import mcp.types as mt
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server

Context = ServerRequestContext[Any, Any]


def as_result(value: Any) -> mt.CallToolResult | mt.InputRequiredResult:
    """What a test tool returns (content blocks, or a whole result) as the SDK's result."""
    if isinstance(value, (mt.CallToolResult, mt.InputRequiredResult)):
        return value
    return mt.CallToolResult(content=list(value))


def tools_server(name: str, list_tools: Callable[[], Awaitable[Sequence[mt.Tool]]],
                 call_tool: Callable[[Context, str, dict[str, Any]], Awaitable[Any]],
                 **more: Any) -> Server[Any]:
    """A server offering *list_tools*' tools, each call answered by *call_tool*."""
    async def on_list(ctx: Context, params: mt.PaginatedRequestParams | None
                      ) -> mt.ListToolsResult:
        return mt.ListToolsResult(tools=list(await list_tools()))

    async def on_call(ctx: Context, params: mt.CallToolRequestParams
                      ) -> mt.CallToolResult | mt.InputRequiredResult:
        return as_result(await call_tool(ctx, params.name, params.arguments or {}))

    return Server(name, on_list_tools=on_list, on_call_tool=on_call, **more)
