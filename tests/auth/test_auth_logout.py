"""``anfitrion auth logout``, end to end with the real authorization server (oidc-provider):
the principal's tokens are revoked there (RFC 7009) and deleted here, nobody else's; the
revocation endpoint is taken only from metadata that names the issuer the tokens came from
(RFC 8414 §3.3), so a look-alike server never receives them; a missing store is refused and
nothing is created."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import anyio
import pytest
from click.testing import CliRunner
from idp import PUBLIC_CLIENT, REDIRECT_URI, Idp
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

from anfitrion._cli.main import cli
from anfitrion.mcp._oauth import StoredTokens, TokenCipher
from anfitrion.store._sqlite import SQLiteStore

# "opaque" in the resource: the provider issues opaque tokens for it, which it can revoke
RESOURCE = "http://127.0.0.1:9/opaque-notes/mcp"


def _config(tmp_path: Path, issuer: str) -> Path:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"notes": {
        "url": RESOURCE, "auth": {"issuer": issuer, "allowInternal": True}}}}))
    return path


async def _plant(url: str, key: str, principal: str, issuer: str,
                 response: dict[str, Any]) -> None:
    """What ``anfitrion auth login`` leaves in the store: the tokens and the client."""
    store = SQLiteStore.from_url(url)
    try:
        stored = StoredTokens(store, TokenCipher.from_env({"ANFITRION_TOKEN_KEY": key}),
                              principal, RESOURCE)
        stored.issuer = issuer
        await stored.set_tokens(OAuthToken.model_validate(response))
        await stored.set_client_info(OAuthClientInformationFull(
            client_id=PUBLIC_CLIENT, redirect_uris=[REDIRECT_URI]))  # type: ignore[list-item]
    finally:
        await store.close()


async def _principals(url: str) -> list[str]:
    store = SQLiteStore.from_url(url)
    try:
        return sorted({e.principal for e in await store.list_credentials(None)})
    finally:
        await store.close()


def _logout(config: Path, url: str, principal: str) -> Any:
    return CliRunner().invoke(cli, ["auth", "logout", "notes", "--config", str(config),
                                    "--store", url, "--principal", principal])


def test_logout_revokes_at_the_server_and_forgets_that_principal_only(
        idp: Idp, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = TokenCipher.new_key()
    monkeypatch.setenv("ANFITRION_TOKEN_KEY", key)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    alice = idp.user_token("alice", RESOURCE, "notes:read")
    bob = idp.user_token("bob", RESOURCE, "notes:read")
    anyio.run(_plant, url, key, "alice", idp.issuer, alice)
    anyio.run(_plant, url, key, "bob", idp.issuer, bob)
    assert idp.introspect(alice["access_token"])["active"] is True
    config = _config(tmp_path, idp.issuer)

    out = _logout(config, url, "alice")
    assert out.exit_code == 0, out.output
    assert "alice's tokens for notes: revoked at the authorization server and deleted" \
        in out.output
    assert idp.introspect(alice["access_token"])["active"] is False
    assert idp.introspect(bob["access_token"])["active"] is True  # not anyone else's
    assert anyio.run(_principals, url) == ["bob"]
    again = _logout(config, url, "alice")
    assert again.exit_code == 0 and "alice had no account connected to notes" in again.output


class _LookAlike(BaseHTTPRequestHandler):
    """An authorization server whose metadata names another issuer; it records every POST
    (what a revocation would send it: the tokens)."""

    issuer = ""
    posts: ClassVar[list[bytes]] = []

    def do_GET(self) -> None:
        port = self.server.server_address[1]
        body = json.dumps({
            "issuer": self.issuer, "authorization_endpoint": f"http://127.0.0.1:{port}/auth",
            "token_endpoint": f"http://127.0.0.1:{port}/token",
            "revocation_endpoint": f"http://127.0.0.1:{port}/revoke",
            "response_types_supported": ["code"]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.posts.append(self.rfile.read(length))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def look_alike() -> Iterator[tuple[str, type[_LookAlike]]]:
    handler = type("Handler", (_LookAlike,), {"posts": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("named", ["other", "path", "slash-path"])
def test_logout_sends_no_token_where_the_metadata_names_another_issuer(
        idp: Idp, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        look_alike: tuple[str, type[_LookAlike]], named: str) -> None:
    """The tokens came from the look-alike's address (as stored at login), but its metadata
    says it is another issuer: the real one, or another path of its own. Its revocation
    endpoint is not trusted with the tokens; they are still deleted here."""
    origin, handler = look_alike
    handler.issuer = {"other": idp.issuer, "path": f"{origin}/tenant",
                      "slash-path": f"{origin}//"}[named]
    key = TokenCipher.new_key()
    monkeypatch.setenv("ANFITRION_TOKEN_KEY", key)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    anyio.run(_plant, url, key, "alice", origin,
              {"access_token": "planted-access-token", "token_type": "Bearer",
               "refresh_token": "planted-refresh-token", "expires_in": 600})
    out = _logout(_config(tmp_path, origin), url, "alice")
    assert out.exit_code == 0, out.output
    assert "alice's tokens for notes: deleted." in out.output
    assert handler.posts == []
    assert anyio.run(_principals, url) == []


def test_logout_refuses_a_missing_store_and_creates_nothing(
        idp: Idp, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANFITRION_TOKEN_KEY", TokenCipher.new_key())
    missing = tmp_path / "new folder" / "typo.db"
    out = _logout(_config(tmp_path, idp.issuer), f"sqlite:///{missing}", "alice")
    assert out.exit_code != 0
    assert f"no store at {missing}" in out.output
    assert not missing.parent.exists()
