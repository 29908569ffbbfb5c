"""An upstream MCP server's stderr is passed on redacted, like anfitrion's own logs: a real
stdio server (the `mcp-server-time` package, started through a wrapper that first writes what
a careless or hostile server would) prints its API key, a bearer token, a private key line, a
card number and terminal escape sequences; none reaches the operator's stream as written."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

pytest.importorskip("mcp")
pytest.importorskip("mcp_server_time")

from anfitrion.mcp._config import ServerConfig
from anfitrion.mcp._toolset import McpToolset
from anfitrion.store import MemoryStore

pytestmark = [pytest.mark.anyio, pytest.mark.mcp_servers]

PLANTED = {
    "api key": "OPENAI_API_KEY=sk-proj-Abcdefghijklmnopqrstuvwxyz0123456789",
    "bearer": "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJlc2ln",
    "github": "using token ghp_0123456789abcdefghijABCDEFGHIJ012345 for the API",
    "card": "charged card 4111 1111 1111 1111 ok",
    "password": "db password=hunter2-very-secret",
}
ESCAPE = "\x1b]0;pwned\x07\x1b[2J"


def _wrapper() -> list[str]:
    lines = [*PLANTED.values(), f"title {ESCAPE} done", "starting the time server"]
    code = ("import sys, runpy\n"
            f"sys.stderr.write({''.join(line + chr(10) for line in lines)!r})\n"
            "sys.stderr.write('no newline at the end, key sk-live-0123456789abcdefghijklmnop')\n"
            "sys.stderr.flush()\n"
            "sys.argv = ['mcp_server_time', '--local-timezone', 'UTC']\n"
            "runpy.run_module('mcp_server_time', run_name='__main__')\n")
    return ["-c", code]


async def test_secrets_and_escapes_on_a_servers_stderr_are_masked(tmp_path: Path) -> None:
    log = tmp_path / "stderr.log"
    config = ServerConfig(id="time", command=sys.executable, args=tuple(_wrapper()),
                          trusted=True)
    with log.open("w", encoding="utf-8") as errlog:
        async with McpToolset(config, MemoryStore(), errlog=errlog) as toolset:
            statuses = await toolset.refresh()
            assert statuses  # the server works: only its stderr was rewritten
            with anyio.fail_after(30):
                while "starting the time server" not in log.read_text(encoding="utf-8"):
                    await anyio.sleep(0.05)
    text = log.read_text(encoding="utf-8")
    for secret in ("sk-proj-Abcdefghijklmnop", "eyJhbGciOiJIUzI1NiJ9", "ghp_0123456789",
                   "4111 1111 1111 1111", "hunter2", "\x1b", "\x07"):
        assert secret not in text, secret
    assert "[secret]" in text
    assert "starting the time server" in text
