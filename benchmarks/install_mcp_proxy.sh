#!/usr/bin/env bash
# mcp-proxy (PyPI) in a venv of its own, for benchmarks/relay.py: it pins the 1.x MCP SDK
# (mcp<2), which cannot share the project's venv (2.x). Installed once into
# ~/.cache/anfitrion/mcp-proxy (about 10 s).
set -euo pipefail
VENV="${ANFITRION_MCP_PROXY_VENV:-$HOME/.cache/anfitrion/mcp-proxy}"
VERSION="${MCP_PROXY_VERSION:-0.13.0}"
PYTHON="${PYTHON:-python3}"
if "$VENV/bin/python" -c 'import importlib.metadata as m, sys; sys.exit(m.version("mcp-proxy") != sys.argv[1])' "$VERSION" >/dev/null 2>&1; then
  exit 0
fi
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip --disable-pip-version-check -q install "mcp-proxy==$VERSION"
"$VENV/bin/python" -c 'import importlib.metadata as m; print("mcp-proxy", m.version("mcp-proxy"), "mcp", m.version("mcp"), "in", __import__("sys").prefix)'
