"""An MCP server written with the SDK's previous major (1.x: ``FastMCP``), run by the Python of
the venv ``tests/mcp/install_mcp1.sh`` makes, never by the one the tests run in (2.x).

    python sdk1.py                          # stdio
    python sdk1.py --http --port N          # streamable HTTP at /mcp
    python sdk1.py --protocol 2024-11-05    # answers initialize with this version only

Tools: ``add`` (two integers), ``about`` (the SDK's version and the negotiated protocol
version, as JSON), ``shout`` (structured output, checked against its output schema).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json

import mcp.server.session
import mcp.types
from mcp.server.fastmcp import Context, FastMCP
from mcp.types import ToolAnnotations
from pydantic import BaseModel


class Shout(BaseModel):
    text: str


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", action="store_true")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--protocol", default=None)
    args = parser.parse_args()
    if args.protocol:  # an older server: it knows only this version, and answers with it
        mcp.server.session.SUPPORTED_PROTOCOL_VERSIONS = [args.protocol]  # type: ignore[misc]
        mcp.types.LATEST_PROTOCOL_VERSION = args.protocol  # type: ignore[misc]
    server = FastMCP("sdk1", host="127.0.0.1", port=args.port, log_level="WARNING")
    reads = ToolAnnotations(readOnlyHint=True, openWorldHint=False)  # of its own data

    @server.tool(description="Adds two integers.", annotations=reads)
    def add(a: int, b: int) -> int:
        return a + b

    @server.tool(description="The SDK's version and the protocol version the client asked "
                 "for.", annotations=reads)
    def about(ctx: Context) -> str:  # type: ignore[type-arg]
        params = ctx.session.client_params
        return json.dumps({"sdk": importlib.metadata.version("mcp"),
                           "requested": params.protocolVersion if params else None})

    @server.tool(description="The text, upper-cased, as structured content.",
                 annotations=reads)
    def shout(text: str) -> Shout:
        return Shout(text=text.upper())

    server.run("streamable-http" if args.http else "stdio")


if __name__ == "__main__":
    main()
