"""An upstream MCP server for the gateway's OAuth tests: the SDK's own ``MCPServer`` over
streamable HTTP, protected by the tests' authorization server through ``mcp.server.auth``
(its bearer middleware, Protected Resource Metadata, a JWT verifier on PyJWT), and checking a
scope itself: ``write_note`` needs ``notes:write`` in the token it is called with.

    python notes_server.py ISSUER RECORD_FILE [--open]

Prints ``{"url": "http://127.0.0.1:PORT/mcp"}`` once it listens. Every request's
``Authorization`` header is appended to RECORD_FILE (one JSON line each), so a test can say
exactly which tokens reached it. ``--open``: no authorization at all (it still records).
"""

from __future__ import annotations

import json
import socket
import sys
from typing import Any

import anyio
import httpx2
import jwt
import uvicorn
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError


class Verifier:
    """The resource server's own check of a token: this issuer's signature, this audience."""

    def __init__(self, issuer: str, audience: str) -> None:
        self.issuer, self.audience = issuer, audience
        self.keys = jwt.PyJWKSet.from_dict(httpx2.get(f"{issuer}/jwks", timeout=10).json())

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            kid = jwt.get_unverified_header(token).get("kid", "")
            claims = jwt.decode(token, self.keys[kid], algorithms=["RS256"],
                                audience=self.audience, issuer=self.issuer)
        except (jwt.PyJWTError, KeyError):
            return None
        return AccessToken(token=token, client_id=str(claims.get("client_id", "")),
                           scopes=str(claims.get("scope", "")).split(),
                           expires_at=int(claims["exp"]), resource=self.audience,
                           subject=str(claims.get("sub")), claims=claims)


def build(issuer: str, url: str, open_server: bool) -> MCPServer:
    options: dict[str, Any] = {}
    if not open_server:
        options = {"token_verifier": Verifier(issuer, url),
                   "auth": AuthSettings(issuer_url=issuer, resource_server_url=url,
                                        required_scopes=["notes:read"],
                                        validate_token_resource=True)}
    server = MCPServer("notes", **options)

    def who() -> tuple[str, list[str]]:
        token = get_access_token()
        return (token.subject or "", sorted(token.scopes)) if token else ("anonymous", [])

    @server.tool()
    def read_notes() -> str:
        """Read the caller's notes."""
        subject, scopes = who()
        return f"notes of {subject} (scopes: {' '.join(scopes)})"

    @server.tool()
    def write_note(text: str) -> str:
        """Write a note as the caller."""
        subject, scopes = who()
        if not open_server and "notes:write" not in scopes:
            raise ToolError(f"{subject} may not write notes (the token lacks notes:write)")
        return f"{subject} wrote {text!r}"

    return server


def main() -> None:
    issuer, record = sys.argv[1], sys.argv[2]
    open_server = "--open" in sys.argv[3:]
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    app = build(issuer, url, open_server).streamable_http_app()

    async def recording(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                       for k, v in scope.get("headers", [])}
            with open(record, "a", encoding="utf-8") as out:
                out.write(json.dumps({"path": scope.get("path"),
                                      "authorization": headers.get("authorization")}) + "\n")
        await app(scope, receive, send)

    server = uvicorn.Server(uvicorn.Config(recording, log_level="warning", lifespan="on"))
    print(json.dumps({"url": url}), flush=True)
    anyio.run(lambda: server.serve(sockets=[sock]))


if __name__ == "__main__":
    main()
