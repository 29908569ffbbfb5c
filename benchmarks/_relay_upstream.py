"""The upstream MCP server of ``benchmarks/relay.py`` (the official ``mcp`` SDK): one cheap
side-effecting tool, ``echo``, over stdio, or streamable HTTP with ``--http PORT``."""

from __future__ import annotations

import sys

import mcp.types as mt
from mcp.server.mcpserver import MCPServer

server = MCPServer("relay-bench", log_level="WARNING")


@server.tool(annotations=mt.ToolAnnotations(readOnlyHint=False, destructiveHint=False,
                                           openWorldHint=False))
def echo(text: str) -> str:
    """Say the text back (a write as far as the gate knows: it goes through the ledger)."""
    return text


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
