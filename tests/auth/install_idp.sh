#!/usr/bin/env bash
# Installs the tests' authorization server (oidc-provider, pinned in tests/auth/idp/package.json
# and package-lock.json) from the npm registry into a cache folder, with the Node 22 of the
# conformance suite (tests/conformance/install.sh installs it). Idempotent: a second run with the
# same lock file does nothing. tests/auth/idp.py starts tests/auth/idp/provider.mjs with it.
#
#   tests/auth/install_idp.sh            # into ~/.cache/anfitrion/idp
#   ANFITRION_IDP_HOME=DIR tests/auth/install_idp.sh
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
HOME_DIR=${ANFITRION_IDP_HOME:-$HOME/.cache/anfitrion/idp}
CONFORMANCE_HOME=${ANFITRION_CONFORMANCE_HOME:-$HOME/.cache/anfitrion/conformance}

if [ ! -f "$CONFORMANCE_HOME/current" ]; then
  bash "$here/../conformance/install.sh"
fi
node_bin=$(head -n 1 "$CONFORMANCE_HOME/current")
lock_sum=$(cat "$here/idp/package.json" "$here/idp/package-lock.json" | sha256sum | cut -c1-16)
prefix=$HOME_DIR/idp-$lock_sum

if [ ! -f "$prefix/.installed" ]; then
  rm -rf "$prefix"
  mkdir -p "$prefix"
  cp "$here/idp/package.json" "$here/idp/package-lock.json" "$prefix/"
  (cd "$prefix" && PATH=$(dirname "$node_bin"):$PATH npm ci --no-audit --no-fund --loglevel=error)
  touch "$prefix/.installed"
fi
test -f "$prefix/node_modules/oidc-provider/package.json"

# what the tests read (tests/auth/idp.py): the node binary and the node_modules folder
printf '%s\n%s\n' "$node_bin" "$prefix/node_modules" > "$HOME_DIR/current.tmp"
mv "$HOME_DIR/current.tmp" "$HOME_DIR/current"
