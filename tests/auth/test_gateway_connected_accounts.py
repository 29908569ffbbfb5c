"""Connected accounts through the gateway (``auth`` on a server entry), end to end with the
real authorization server (oidc-provider) and the SDK's own protected upstream server:

- each OAuth caller's call carries the token of the account *that* person connected (stored
  sealed for that principal), and the upstream's own scope check decides for that person;
- a caller without a connected account is refused with the inbox's connect link and the CLI
  command before anything is sent — never with another person's token, nor the operator's;
- each person's upstream connection is closed once idle, and opened again on the next call.
"""

from __future__ import annotations

import json

import anyio
import pytest

pytest.importorskip("mcp")
from gateway_oauth import Notes, OAuthGateway, approve_all, mcp_client
from idp import SERVICE_CLIENT, Idp
from mcp.shared.auth import OAuthToken

from anfitrion.mcp._config import AuthSettings, GatewaySettings, McpConfig, ServerConfig
from anfitrion.mcp._oauth import StoredTokens, TokenCipher, new_key
from anfitrion.policy import Policy, ToolRule, Verdict
from anfitrion.store import MemoryStore

pytestmark = [pytest.mark.anyio]

CONNECT = "https://inbox.example/connect"


def subject(idp: Idp, header: str, audience: str) -> str:
    return str(idp.claims(header, audience)["sub"])


async def connect(store: MemoryStore, cipher: TokenCipher, principal: str, issuer: str,
                  resource: str, response: dict[str, object]) -> None:
    """What ``anfitrion auth login`` (or the inbox's connect page) leaves in the store."""
    stored = StoredTokens(store, cipher, principal, resource)
    stored.issuer = issuer
    await stored.set_tokens(OAuthToken.model_validate(response))


async def test_each_caller_uses_their_own_connected_account_and_no_one_elses(
        idp: Idp, notes: Notes, gateway: OAuthGateway, monkeypatch: pytest.MonkeyPatch) -> None:
    key = new_key()
    monkeypatch.setenv("ANFITRION_TOKEN_KEY", key)
    cipher = TokenCipher.from_env({"ANFITRION_TOKEN_KEY": key})
    store = MemoryStore()
    server = ServerConfig(id="notes", url=notes.url, timeout=20,
                          auth=AuthSettings(issuer=idp.issuer, allow_internal=True,
                                            scopes=("notes:read", "notes:write")))
    # the operator's own account lists and pins the tools (principal "local")
    operator = idp.client_token(SERVICE_CLIENT, notes.url, "notes:read")
    await connect(store, cipher, "local", idp.issuer, notes.url, operator)
    await approve_all([server], store)
    alice_upstream = idp.user_token("alice", notes.url, "notes:read notes:write")
    await connect(store, cipher, "alice", idp.issuer, notes.url, alice_upstream)
    url = gateway.url
    auth = gateway.auth(connect_url=CONNECT)
    config = McpConfig({"notes": server}, GatewaySettings(auth=auth))
    asked = "tools:read notes:read notes:write"
    alice = idp.user_token("alice", url, asked)["access_token"]
    bob = idp.user_token("bob", url, asked)["access_token"]
    before = len(notes.authorizations())
    async with gateway.running(config, store, Policy([ToolRule("notes.*", Verdict.ALLOW)]),
                               auth=auth, approval_wait=1):
        async with mcp_client(url, bob) as session:  # bob has connected nothing
            refused = await session.call_tool("notes.read_notes", {})
            text = refused.content[0].text  # type: ignore[union-attr]
            assert refused.is_error, text
            assert f"open {CONNECT}/notes" in text
            assert "`anfitrion auth login notes` (--principal bob)" in text
            assert "Nothing was run" in text
        calls_before_alice = len(notes.authorizations())
        async with mcp_client(url, alice) as session:
            wrote = await session.call_tool("notes.write_note", {"text": "hi"})
            assert not wrote.is_error, wrote
            assert "alice wrote 'hi'" in wrote.content[0].text  # type: ignore[union-attr]
        alice_calls = notes.authorizations()[calls_before_alice:]
        async with mcp_client(url, bob) as session:  # still refused after alice's call
            refused = await session.call_tool("notes.write_note", {"text": "x"})
            assert refused.is_error
            assert "connect an account" in refused.content[0].text  # type: ignore[union-attr]
        after_bob = notes.authorizations()[calls_before_alice + len(alice_calls):]
    # alice's call carried her own token ("alice wrote", said the upstream from its sub); the
    # rest is the operator's listing before each call (relistBeforeCall)
    assert "alice" in {subject(idp, a, notes.url) for a in alice_calls if a}
    assert {subject(idp, a, notes.url) for a in after_bob if a} <= {"service"}  # bob: nothing
    seen = [a for a in notes.authorizations()[before:] if a]
    assert alice not in str(seen) and bob not in str(seen)  # no passthrough
    assert {subject(idp, a, notes.url) for a in seen} <= {"alice", "service"}
    records = [dict(r.data)["identity"] for r in await store.audit_records()
               if r.data.get("tool") == "notes.write_note" and r.data.get("principal") == "alice"]
    assert records and {r["subject"] for r in records} == {"alice"}
    assert records[-1]["upstream_tokens"] == [{"server": "notes",
                                               "scopes": ["notes:read", "notes:write"]}]
    everything = json.dumps([dict(r.data) for r in await store.audit_records()])
    for secret in (alice, bob, str(alice_upstream["access_token"]),
                   str(operator["access_token"])):
        assert secret not in everything


async def test_a_callers_connection_is_closed_when_idle_and_opened_again(
        idp: Idp, notes: Notes, gateway: OAuthGateway, monkeypatch: pytest.MonkeyPatch) -> None:
    key = new_key()
    monkeypatch.setenv("ANFITRION_TOKEN_KEY", key)
    cipher = TokenCipher.from_env({"ANFITRION_TOKEN_KEY": key})
    store = MemoryStore()
    server = ServerConfig(id="notes", url=notes.url, timeout=20,
                          auth=AuthSettings(issuer=idp.issuer, allow_internal=True))
    await connect(store, cipher, "local", idp.issuer, notes.url,
                  idp.client_token(SERVICE_CLIENT, notes.url, "notes:read"))
    await approve_all([server], store)
    await connect(store, cipher, "alice", idp.issuer, notes.url,
                  idp.user_token("alice", notes.url, "notes:read notes:write"))
    url = gateway.url
    alice = idp.user_token("alice", url, "tools:read")["access_token"]
    async with gateway.running([server], store, Policy([ToolRule("notes.*", Verdict.ALLOW)])
                               ) as (_, servers):
        toolset = servers.toolsets["notes"]
        toolset.idle_seconds = 0.5
        async with mcp_client(url, alice) as session:
            first = await session.call_tool("notes.write_note", {"text": "one"})
            assert "alice wrote 'one'" in first.content[0].text  # type: ignore[union-attr]
            (conn, _), = toolset._callers.values()
            with anyio.fail_after(10):
                while not conn.dead:
                    await anyio.sleep(0.05)
            assert toolset._callers == {} and "idle" in conn.error
            toolset.idle_seconds = 300
            again = await session.call_tool("notes.write_note", {"text": "two"})
            assert "alice wrote 'two'" in again.content[0].text  # type: ignore[union-attr]
            (reopened, _), = toolset._callers.values()
            assert reopened is not conn and not reopened.dead
