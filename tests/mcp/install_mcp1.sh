#!/usr/bin/env bash
# The 1.x MCP SDK in a venv of its own, for tests/mcp/test_sdk1_servers.py: real servers
# written with the SDK's previous major behind the client toolset and the gateway (which run on
# 2.x). Installed once into ~/.cache/anfitrion/mcp1 (about 10 s); the tests skip without it,
# unless ANFITRION_REQUIRE_MCP1=1 (CI).
set -euo pipefail
VENV="${ANFITRION_MCP1_VENV:-$HOME/.cache/anfitrion/mcp1}"
PYTHON="${PYTHON:-python3}"
if "$VENV/bin/python" -c 'import mcp.server.fastmcp' >/dev/null 2>&1; then
  exit 0
fi
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip --disable-pip-version-check -q install 'mcp>=1.10,<2'
"$VENV/bin/python" -c 'import importlib.metadata as m; print("mcp", m.version("mcp"), "in", __import__("sys").prefix)'
