#!/usr/bin/env bash
# What the sandbox tests (tests/sandbox/) need: bubblewrap (Debian/Ubuntu package `bubblewrap`;
# Fedora `bubblewrap`; Arch `bubblewrap`) and the npm reference server
# @modelcontextprotocol/server-filesystem, installed once into ~/.cache/anfitrion/mcp-servers.
# Idempotent: a second run does nothing. Without bubblewrap the sandbox tests skip, unless
# ANFITRION_REQUIRE_SANDBOX=1 (CI).
set -euo pipefail
FS_VERSION=2026.8.31
DIR="${ANFITRION_MCP_SERVERS_HOME:-$HOME/.cache/anfitrion/mcp-servers}/filesystem-$FS_VERSION"

if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap
  else
    echo "sandbox: install bubblewrap (e.g. sudo apt-get install bubblewrap) for tests/sandbox" >&2
  fi
fi

if [ ! -f "$DIR/.installed" ] && command -v npm >/dev/null 2>&1; then
  rm -rf "$DIR"
  mkdir -p "$DIR"
  npm install --prefix "$DIR" --no-audit --no-fund --no-save --loglevel=error \
    "@modelcontextprotocol/server-filesystem@$FS_VERSION"
  touch "$DIR/.installed"
fi
