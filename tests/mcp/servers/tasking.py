"""An MCP server (stdio, the SDK's low-level server) whose tools run only as tasks
(``execution.taskSupport: "required"``, the Tasks extension of 2026-07-28).

Run: ``python tasking.py EFFECTS`` — each ``tools/call`` (task created) and ``tasks/cancel``
appends a line to EFFECTS.

Tools: ``send`` (a write: ``working`` once, then ``completed`` with ``sent <to>``), ``fail``
(``failed``: "disk full"), ``forever`` (``working`` until cancelled), ``malformed`` (a
``tasks/get`` answer whose ``status`` is a number), ``huge`` (a 5 MB completed result).
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp.types as mt
from lowlevel import Context
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

TASKS = "io.modelcontextprotocol/tasks"
ARGS: dict[str, Any] = {"type": "object", "properties": {"to": {"type": "string"}}}
REQUIRED = mt.ToolExecution(taskSupport="required")


def main() -> None:
    effects = Path(sys.argv[1])
    tasks: dict[str, dict[str, Any]] = {}
    ids = itertools.count(1)

    def note(line: str) -> None:
        with effects.open("a") as out:
            out.write(line + "\n")

    async def list_tools(ctx: Context, params: mt.PaginatedRequestParams | None
                         ) -> mt.ListToolsResult:
        return mt.ListToolsResult(tools=[
            mt.Tool(name=name, description=f"{name}, as a task", inputSchema=ARGS,
                    execution=REQUIRED, annotations=mt.ToolAnnotations(
                        readOnlyHint=False, destructiveHint=True, openWorldHint=True))
            for name in ("send", "fail", "forever", "malformed", "huge")])

    async def call(ctx: Context, params: mt.CallToolRequestParams) -> dict[str, Any]:
        task_id = f"t{next(ids)}"
        tasks[task_id] = {"tool": params.name, "args": params.arguments or {}, "polls": 0}
        note(f"called {params.name} {task_id} {(params.arguments or {}).get('to', '')}")
        return {"resultType": "task", "taskId": task_id, "status": "working",
                "pollIntervalMs": 50, "ttlMs": 60000, "createdAt": "2026-01-01T00:00:00Z",
                "lastUpdatedAt": "2026-01-01T00:00:00Z"}

    async def get(ctx: Context, params: mt.GetTaskRequestParams) -> dict[str, Any]:
        task = tasks[params.task_id]
        task["polls"] += 1
        base = {"taskId": params.task_id, "createdAt": "2026-01-01T00:00:00Z",
                "lastUpdatedAt": "2026-01-01T00:00:00Z", "ttlMs": 60000,
                "pollIntervalMs": 50}
        tool = task["tool"]
        if task.get("cancelled"):
            return {**base, "status": "cancelled"}
        if tool == "forever" or task["polls"] < 2:
            return {**base, "status": "working"}
        if tool == "send":
            return {**base, "status": "completed", "result": {
                "content": [{"type": "text", "text": f"sent {task['args'].get('to')}"}]}}
        if tool == "fail":
            return {**base, "status": "failed",
                    "error": {"code": -32603, "message": "disk full"}}
        if tool == "malformed":
            return {**base, "status": 7, "result": "not an object"}
        return {**base, "status": "completed", "result": {
            "content": [{"type": "text", "text": "x" * (5 * 1024 * 1024)}]}}

    async def cancel(ctx: Context, params: mt.CancelTaskRequestParams) -> dict[str, Any]:
        if params.task_id in tasks:
            tasks[params.task_id]["cancelled"] = True
            note(f"cancelled {params.task_id}")
        return {}

    server: Server[Any] = Server("tasking", on_list_tools=list_tools)
    server.add_request_handler("tools/call", mt.CallToolRequestParams, call)
    server.extensions[TASKS] = {}
    server.add_request_handler("tasks/get", mt.GetTaskRequestParams, get)
    server.add_request_handler("tasks/cancel", mt.CancelTaskRequestParams, cancel)

    async def run() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(run)


if __name__ == "__main__":
    main()
