"""OAuth to upstream MCP servers, attacked by class (docs/auth-client.md):

- confused deputy: a token of principal A is never sent for principal B, at rest (a sealed
  token moved to B's row does not open) or on the wire (B gets the "connect your account"
  refusal, the server never sees A's token);
- mix-up between authorization servers: metadata naming another issuer, an authorization
  response from another issuer, a server that names an issuer the operator did not configure;
- state mismatch: a redirect whose state is not the one sent reaches no token endpoint;
- SSRF through metadata URLs: loopback, private, link-local, mapped and plain-HTTP addresses
  are refused unless ``allowInternal``; oversized answers are cut off;
- secrets in output: tokens and client secrets never appear in errors, logs or ``auth status``.

The upstream is a real HTTP server on 127.0.0.1 (uvicorn) speaking the OAuth discovery
documents of a protected MCP server; the client is the real toolset with the SDK's provider.
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("mcp")
import httpx2
from click.testing import CliRunner
from mcp.shared.auth import AuthorizationCodeResult, OAuthToken

from anfitrion._cli.main import cli
from anfitrion.exceptions import McpServerError
from anfitrion.mcp._config import AuthSettings, ServerConfig
from anfitrion.mcp._oauth import (
    AccountNotConnected,
    CredentialError,
    GuardedTransport,
    OAuthAccess,
    StoredTokens,
    TokenCipher,
)
from anfitrion.mcp._toolset import McpToolset
from anfitrion.store import MemoryStore
from anfitrion.store._sqlite import SQLiteStore

pytestmark = pytest.mark.anyio

PLANTED_TOKEN = "at-PLANTED-7c1e9b0d5f"
PLANTED_SECRET = "cs-PLANTED-4a8d2e6f1b"


def _cipher() -> TokenCipher:
    return TokenCipher.from_env({"ANFITRION_TOKEN_KEY": TokenCipher.new_key()})


class Upstream:
    """A protected MCP endpoint and its authorization server's documents, recording every
    request (path, Authorization header)."""

    def __init__(self, *, as_issuer: str | None = None, huge: bool = False) -> None:
        self.port = 0
        self.seen: list[tuple[str, str]] = []
        self.as_issuer = as_issuer
        self.huge = huge

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        path = scope["path"]
        auth = dict(scope["headers"]).get(b"authorization", b"").decode()
        self.seen.append((path, auth))
        status, body, headers = self.answer(path)
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), *headers]})
        await send({"type": "http.response.body", "body": body})

    def answer(self, path: str) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        prm = f"{self.base}/.well-known/oauth-protected-resource/mcp"
        if path == "/mcp":
            return 401, b"{}", [(b"www-authenticate",
                                 f'Bearer resource_metadata="{prm}"'.encode())]
        if path == "/.well-known/oauth-protected-resource/mcp":
            return 200, json.dumps({"resource": f"{self.base}/mcp",
                                    "authorization_servers": [self.base]}).encode(), []
        if path == "/.well-known/oauth-authorization-server":
            doc: dict[str, Any] = {
                "issuer": self.as_issuer or self.base,
                "authorization_endpoint": f"{self.base}/authorize",
                "token_endpoint": f"{self.base}/token",
                "registration_endpoint": f"{self.base}/register",
                "response_types_supported": ["code"],
                "code_challenge_methods_supported": ["S256"]}
            if self.huge:
                doc["padding"] = "x" * (1024 * 1024)
            return 200, json.dumps(doc).encode(), []
        if path == "/register":
            return 201, json.dumps({"client_id": "registered", "client_secret": PLANTED_SECRET,
                                    "redirect_uris": ["http://127.0.0.1:1/callback"],
                                    "token_endpoint_auth_method": "client_secret_post"}
                                   ).encode(), []
        return 404, b"{}", []


@asynccontextmanager
async def serving(app: Upstream) -> AsyncIterator[Upstream]:
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    app.port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_level="critical",
                                           access_log=False))
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve, [sock])
        with anyio.fail_after(30):
            while not server.started:
                await anyio.sleep(0.01)
        try:
            yield app
        finally:
            server.should_exit = True


class WrongState:
    """A redirect back whose state was not the one sent (an attacker's link)."""

    async def redirect(self, url: str) -> None:
        return None

    async def callback(self) -> AuthorizationCodeResult:
        return AuthorizationCodeResult(code="attacker-code", state="not-the-state")


def _config(upstream: Upstream, **auth: Any) -> ServerConfig:
    return ServerConfig(id="docs", url=f"{upstream.base}/mcp", timeout=10,
                        auth=AuthSettings(allow_internal=True, **auth))


async def _connect(config: ServerConfig, access: OAuthAccess) -> str:
    async with McpToolset(config, access.store, oauth=access) as toolset:  # type: ignore[arg-type]
        with pytest.raises(McpServerError) as caught:
            await toolset.refresh()
    return str(caught.value)


# -- confused deputy -----------------------------------------------------------------------

@pytest.mark.parametrize("store_kind", ["memory", "sqlite"])
async def test_a_token_of_alice_is_never_read_for_bob(store_kind: str, tmp_path: Any) -> None:
    store = MemoryStore() if store_kind == "memory" else \
        SQLiteStore.from_url(f"sqlite:///{tmp_path}/s.db")
    cipher = _cipher()
    alice = StoredTokens(store, cipher, "alice", "https://docs.example/mcp")
    alice.issuer = "https://as.example"
    await alice.set_tokens(OAuthToken(access_token=PLANTED_TOKEN, expires_in=3600))
    for other in ("bob", "alice ", "ALICE", "alice\x00", ""):
        assert await StoredTokens(store, cipher, other, alice.resource).get_tokens() is None
    assert await StoredTokens(store, cipher, "alice", "https://docs.example/mcp/").get_tokens() \
        is None  # another resource
    assert (await alice.get_tokens()).access_token == PLANTED_TOKEN  # type: ignore[union-attr]
    await store.close()


async def test_a_sealed_token_moved_to_another_principals_row_does_not_open() -> None:
    store, cipher = MemoryStore(), _cipher()
    alice = StoredTokens(store, cipher, "alice", "https://docs.example/mcp")
    alice.issuer = "https://as.example"
    await alice.set_tokens(OAuthToken(access_token=PLANTED_TOKEN))
    (entry,) = await store.list_credentials("alice")
    for field in ("principal", "issuer", "resource"):
        moved = {**entry.__dict__} if hasattr(entry, "__dict__") else {
            name: getattr(entry, name) for name in entry.__slots__}  # type: ignore[attr-defined]
        moved[field] = "bob" if field == "principal" else "https://evil.example"
        await store.put_credential(type(entry)(**moved))
    bob = StoredTokens(store, cipher, "bob", "https://docs.example/mcp")
    with pytest.raises(CredentialError, match="does not open"):
        await bob.get_tokens()


async def test_a_principal_without_a_token_gets_the_connect_command_not_anothers_token(
        caplog: pytest.LogCaptureFixture) -> None:
    async with serving(Upstream()) as upstream:
        store, cipher = MemoryStore(), _cipher()
        config = _config(upstream)
        alice = OAuthAccess(store, cipher, "alice").storage(config)
        alice.issuer = upstream.base
        await alice.set_tokens(OAuthToken(access_token=PLANTED_TOKEN, expires_in=3600))
        caplog.set_level(logging.DEBUG)
        error = await _connect(config, OAuthAccess(store, cipher, "bob"))
    assert "anfitrion auth login docs" in error
    assert "'bob'" in error
    assert all(PLANTED_TOKEN not in auth for _, auth in upstream.seen)
    assert ("/token", "") not in [(p, "") for p, _ in upstream.seen]
    assert PLANTED_TOKEN not in caplog.text
    assert PLANTED_SECRET not in caplog.text
    assert PLANTED_SECRET not in error


def test_the_refusal_names_the_exact_command() -> None:
    error = AccountNotConnected("docs", "alice")
    assert "`anfitrion auth login docs` (--principal alice)" in str(error)


# -- mix-up, state --------------------------------------------------------------------------

async def test_metadata_naming_another_issuer_is_refused_before_registration() -> None:
    async with serving(Upstream(as_issuer="https://attacker.example")) as upstream:
        error = await _connect(_config(upstream), OAuthAccess(MemoryStore(), _cipher(), "a"))
    assert "issuer mismatch" in error
    assert "/register" not in [path for path, _ in upstream.seen]


async def test_a_server_naming_an_unconfigured_authorization_server_is_refused() -> None:
    async with serving(Upstream()) as upstream:
        config = _config(upstream, issuer="https://login.example")
        error = await _connect(config, OAuthAccess(MemoryStore(), _cipher(), "a"))
    assert "not the configured issuer" in error
    assert "/.well-known/oauth-authorization-server" not in [p for p, _ in upstream.seen]


async def test_a_redirect_with_another_state_reaches_no_token_endpoint() -> None:
    async with serving(Upstream()) as upstream:
        error = await _connect(_config(upstream),
                               OAuthAccess(MemoryStore(), _cipher(), "a", WrongState()))
    assert "State parameter mismatch" in error
    assert "/token" not in [path for path, _ in upstream.seen]


async def test_an_oversized_metadata_document_is_cut_off() -> None:
    async with serving(Upstream(huge=True)) as upstream:
        error = await _connect(_config(upstream), OAuthAccess(MemoryStore(), _cipher(), "a"))
    assert "over" in error
    assert "bytes" in error


# -- SSRF -----------------------------------------------------------------------------------

_INTERNAL = st.one_of(
    st.ip_addresses(network="127.0.0.0/8"), st.ip_addresses(network="10.0.0.0/8"),
    st.ip_addresses(network="172.16.0.0/12"), st.ip_addresses(network="192.168.0.0/16"),
    st.ip_addresses(network="169.254.0.0/16"), st.ip_addresses(network="100.64.0.0/10"),
    st.ip_addresses(network="fc00::/7"), st.ip_addresses(network="fe80::/10"),
    st.just("::1"), st.just("0.0.0.0"), st.just("::ffff:127.0.0.1"),
    st.just("::ffff:169.254.169.254"))


@settings(max_examples=60, deadline=None)
@given(address=_INTERNAL)
def test_metadata_urls_on_internal_addresses_are_refused(address: Any) -> None:
    host = f"[{address}]" if ":" in str(address) else str(address)
    guard = GuardedTransport("https://mcp.example/mcp", allow_internal=False)

    async def check() -> None:
        with pytest.raises(CredentialError, match="internal address"):
            await guard.check(httpx2.URL(f"https://{host}/.well-known/oauth-authorization-server"))

    anyio.run(check)


@pytest.mark.parametrize("url", ["http://as.example/token", "http://169.254.169.254/latest",
                                 "https://localhost/.well-known/openid-configuration",
                                 "https://127.1/x"])
async def test_plain_http_and_loopback_names_are_refused(url: str) -> None:
    guard = GuardedTransport("https://mcp.example/mcp", allow_internal=False)
    with pytest.raises(CredentialError, match="refused"):
        await guard.check(httpx2.URL(url))
    await GuardedTransport("https://mcp.example/mcp", allow_internal=True).check(
        httpx2.URL(url))  # the operator's explicit choice


# -- secrets in output ----------------------------------------------------------------------

def test_auth_status_shows_no_token_or_secret(tmp_path: Any,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    key = TokenCipher.new_key()
    url = f"sqlite:///{tmp_path}/s.db"

    async def plant() -> None:
        store = SQLiteStore.from_url(url)
        stored = StoredTokens(store, TokenCipher.from_env({"ANFITRION_TOKEN_KEY": key}),
                              "alice", "https://docs.example/mcp")
        stored.issuer = "https://as.example"
        await stored.set_tokens(OAuthToken(access_token=PLANTED_TOKEN, scope="read",
                                           refresh_token=PLANTED_SECRET, expires_in=60))
        await store.close()

    anyio.run(plant)
    monkeypatch.setenv("ANFITRION_TOKEN_KEY", key)
    for args in (["auth", "status", "--store", url], ["auth", "status", "--store", url,
                                                      "--json"]):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 0, result.output
        assert "alice" in result.output
        assert PLANTED_TOKEN not in result.output
        assert PLANTED_SECRET not in result.output
    raw = (tmp_path / "s.db").read_bytes()
    assert PLANTED_TOKEN.encode() not in raw  # sealed at rest
    assert PLANTED_SECRET.encode() not in raw
