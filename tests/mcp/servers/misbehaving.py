"""An MCP server (stdio) that misbehaves at the process and transport level, for tests.

Run: ``python misbehaving.py``

Tools:
    spawn_and_hang(pidfile): starts a long-lived child, writes its pid to *pidfile*, never
        answers.
    spawn(pidfile): starts a long-lived child, writes its pid, answers (the child is left behind).
    huge_line(mib): writes one line of *mib* MiB on stdout (no newline until the end).
    noise: writes lines that are not JSON-RPC on stdout, without end.
    echo(text) / echo_error(text) / echo_structured(text): *text* back as a text result, an
        error result, or structured content matching the declared outputSchema.
    backtracking: an input schema whose pattern backtracks exponentially (``^(a+)+$``).
    huge_result(mib, order): answers with a result of *mib* MiB (it ran: ``ran.log`` in the
        working folder gets a line); *order* ``sdk`` as this SDK writes it, ``result_first``
        as the TypeScript SDK does (the id last).
    stubborn_flood(pidfile): ignores SIGTERM and its input's end, starts a child that ignores
        SIGTERM too (pids in *pidfile*), then writes a notification line over the limit.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import mcp.types as mt
from lowlevel import Context, tools_server
from mcp.server.stdio import stdio_server

TEXT = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
PIDFILE = {"type": "object", "properties": {"pidfile": {"type": "string"}},
           "required": ["pidfile"]}
SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]
STUBBORN = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, "
            "signal.SIG_IGN); time.sleep(600)"]


WIRE = os.dup(1)
"""The pipe to the client: the SDK's stdio server points fd 1 at stderr while it serves."""


def _write_all(data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(WIRE, view):]


def main() -> None:
    async def list_tools() -> list[mt.Tool]:
        return [
            mt.Tool(name="spawn_and_hang", description="Starts a helper.", inputSchema=PIDFILE),
            mt.Tool(name="spawn", description="Starts a helper.", inputSchema=PIDFILE),
            mt.Tool(name="huge_line", description="One long line.", inputSchema={
                "type": "object", "properties": {"mib": {"type": "integer"}}}),
            mt.Tool(name="noise", description="Writes noise.", inputSchema={"type": "object"}),
            mt.Tool(name="echo", description="Echoes.", inputSchema=TEXT),
            mt.Tool(name="huge_result", description="A big answer.", inputSchema={
                "type": "object", "properties": {"mib": {"type": "integer"},
                                                 "order": {"type": "string"}}}),
            mt.Tool(name="stubborn_flood", description="Floods.", inputSchema=PIDFILE),
            mt.Tool(name="backtracking", description="Looks up a code.", inputSchema={
                "type": "object", "properties": {"code": {"type": "string",
                                                          "pattern": "^(a+)+$"}}}),
            mt.Tool(name="echo_error", description="Echoes as an error.", inputSchema=TEXT),
            mt.Tool(name="echo_structured", description="Echoes as structured content.",
                    inputSchema=TEXT, outputSchema={
                        "type": "object", "properties": {"value": {"type": "string"}},
                        "required": ["value"]}),
        ]

    async def call_tool(ctx: Context, name: str, arguments: dict[str, Any]) -> Any:
        if name in ("spawn_and_hang", "spawn"):
            child = subprocess.Popen(SLEEPER, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL)
            Path(arguments["pidfile"]).write_text(str(child.pid))
            if name == "spawn":
                return [mt.TextContent(type="text", text=str(child.pid))]
            await anyio.sleep_forever()
        if name == "huge_line":
            size = int(arguments.get("mib", 32)) * 1024 * 1024
            _write_all(b'{"jsonrpc": "2.0", "method": "notifications/message", "params": '
                       b'{"level": "info", "data": "')
            chunk = b"x" * (1024 * 1024)
            for _ in range(size // len(chunk)):
                _write_all(chunk)
            _write_all(b'"}}\n')
            return [mt.TextContent(type="text", text="sent")]
        if name == "huge_result":
            with open("ran.log", "a", encoding="utf-8") as ran:
                ran.write("ran\n")
            text = "y" * (int(arguments.get("mib", 5)) * 1024 * 1024)
            if arguments.get("order") != "result_first":
                return [mt.TextContent(type="text", text=text)]
            _write_all(b'{"result": {"content": [{"type": "text", "text": "' + text.encode()
                       + b'"}]}, "jsonrpc": "2.0", "id": '
                       + json.dumps(ctx.request_id).encode() + b"}\n")
            await anyio.sleep_forever()  # answered by hand, never by the SDK
        if name == "stubborn_flood":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            threading.Thread(target=time.sleep, args=(600,)).start()  # outlives its input
            child = subprocess.Popen(STUBBORN, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL)
            Path(arguments["pidfile"]).write_text(f"{os.getpid()} {child.pid}")
            _write_all(b'{"jsonrpc": "2.0", "method": "notifications/message", "params": '
                       b'{"level": "info", "data": "' + b"z" * (5 * 1024 * 1024) + b'"}}\n')
            await anyio.sleep_forever()
        if name == "noise":
            while True:
                _write_all(b"this is not JSON-RPC\n" * 64)
        text = str(arguments.get("text", ""))
        if name == "echo":
            return [mt.TextContent(type="text", text=text)]
        if name == "echo_error":
            return mt.CallToolResult(content=[mt.TextContent(type="text", text=text)],
                                     isError=True)
        if name == "echo_structured":
            return mt.CallToolResult(content=[], structuredContent={"value": text})
        return [mt.TextContent(type="text", text=f"unknown tool {name}")]

    server = tools_server("misbehaving", list_tools, call_tool)

    async def run() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(run)


if __name__ == "__main__":
    main()
