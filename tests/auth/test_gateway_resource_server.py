"""The gateway as an OAuth 2.1 resource server, with a real authorization server (oidc-provider)
and the official MCP client: metadata, 401/403 with the challenge, each token's subject its own
principal, the policy deciding per user, and the client's token never reaching an upstream."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx2
import pytest

pytest.importorskip("mcp")
from gateway_oauth import Notes, OAuthGateway, approve_all, mcp_client
from idp import Idp

from anfitrion._tools import Effect
from anfitrion.mcp._config import ServerConfig
from anfitrion.mcp._gateway import Gateway
from anfitrion.policy import Policy, ToolRule, Verdict
from anfitrion.store import MemoryStore

pytestmark = [pytest.mark.anyio]


def per_role_policy() -> Policy:
    """Reading notes allowed; writing a note only for the admin role; the rest denied (an
    untrusted server's tools are all writes)."""
    return Policy([ToolRule("notes.read_notes", Verdict.ALLOW),
                   ToolRule("notes.write_note", Verdict.ALLOW, roles=["admin"])],
                  defaults={Effect.READ: Verdict.ALLOW, Effect.WRITE: Verdict.DENY})


class Running:
    def __init__(self, gateway: Gateway, url: str, store: MemoryStore) -> None:
        self.gateway, self.url, self.store = gateway, url, store


@pytest.fixture
async def running(open_notes: Notes, gateway: OAuthGateway) -> AsyncIterator[Running]:
    store = MemoryStore()
    configs = [ServerConfig(id="notes", url=open_notes.url)]
    await approve_all(configs, store)
    auth = gateway.auth(required_scopes=("tools:read",))
    async with gateway.running(configs, store, per_role_policy(), auth=auth,
                               approval_wait=1) as (served, _):
        yield Running(served, gateway.url, store)


async def refusals(store: MemoryStore) -> list[dict[str, object]]:
    return [dict(r.data) for r in await store.audit_records() if r.type == "gateway.auth_refused"]


async def test_metadata_names_the_issuer_and_the_resource(running: Running, idp: Idp) -> None:
    base = running.url.removesuffix("/mcp")
    async with httpx2.AsyncClient() as http:
        found = (await http.get(f"{base}/.well-known/oauth-protected-resource/mcp")).json()
    assert found["resource"] == running.url
    assert found["authorization_servers"] == [idp.issuer]
    assert found["scopes_supported"] == ["tools:read"]


async def test_no_token_is_401_with_the_metadata_and_the_scope_and_is_audited(
        running: Running) -> None:
    async with httpx2.AsyncClient() as http:
        response = await http.post(running.url, json={"jsonrpc": "2.0", "id": 1,
                                                      "method": "tools/list"})
    assert response.status_code == 401
    challenge = response.headers["www-authenticate"]
    assert challenge.startswith("Bearer ")
    assert 'resource_metadata="' + running.url.removesuffix("/mcp") + \
        '/.well-known/oauth-protected-resource/mcp"' in challenge
    assert 'scope="tools:read"' in challenge
    assert response.json()["error"] == "invalid_token"
    [record] = await refusals(running.store)
    assert record["status"] == 401 and record["error"] == "invalid_token"


async def test_a_token_for_another_audience_is_refused(running: Running, idp: Idp) -> None:
    token = idp.user_token("alice", "http://127.0.0.1:9/other", "tools:read")["access_token"]
    async with httpx2.AsyncClient() as http:
        response = await http.post(running.url, headers={"Authorization": f"Bearer {token}"},
                                   json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert response.status_code == 401
    assert "another audience" in response.json()["error_description"]
    assert token not in str(await refusals(running.store))


async def test_a_token_without_the_required_scope_is_403_naming_it(running: Running,
                                                                 idp: Idp) -> None:
    token = idp.user_token("alice", running.url, "notes:read")["access_token"]
    async with httpx2.AsyncClient() as http:
        response = await http.post(running.url, headers={"Authorization": f"Bearer {token}"},
                                   json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert response.status_code == 403
    assert response.json()["error"] == "insufficient_scope"
    assert 'error="insufficient_scope"' in response.headers["www-authenticate"]
    assert 'scope="tools:read"' in response.headers["www-authenticate"]


async def test_two_users_are_two_principals_and_the_policy_decides_per_role(
        running: Running, idp: Idp, open_notes: Notes) -> None:
    alice = idp.user_token("alice", running.url, "tools:read tools:write")["access_token"]
    bob = idp.user_token("bob", running.url, "tools:read tools:write")["access_token"]
    async with mcp_client(running.url, alice) as session:
        names = {t.name for t in (await session.list_tools()).tools}
        assert {"notes.read_notes", "notes.write_note"} <= names
        wrote = await session.call_tool("notes.write_note", {"text": "hello"})
        assert not wrote.is_error, wrote
    async with mcp_client(running.url, bob) as session:
        names = {t.name for t in (await session.list_tools()).tools}
        assert "notes.write_note" not in names  # a deny that covers every call hides it
        refused = await session.call_tool("notes.write_note", {"text": "hello"})
        assert refused.is_error
        read = await session.call_tool("notes.read_notes", {})
        assert not read.is_error
    sessions = {s.principal_id: s for s in await running.store.list_sessions()}
    assert {"alice", "bob"} <= set(sessions)
    records = await running.store.audit_records()
    decided = [(r.data.get("principal"), r.data.get("tool"), r.data["decision"]["verdict"])
               for r in records if r.type == "call.decided"]
    assert ("alice", "notes.write_note", "allow") in decided
    assert ("bob", "notes.write_note", "allow") not in decided
    # bob's call was refused before it ran: not offered to him (the gate's own refusal)
    rejected = [(r.data.get("principal"), r.data.get("tool")) for r in records
                if r.type == "call.rejected"]
    assert ("bob", "notes.write_note") in rejected, [(r.type, dict(r.data)) for r in records]
    assert "bob wrote" not in str([dict(r.data) for r in records])
    # no token passthrough: the upstream never saw either user's token
    seen = open_notes.authorizations()
    assert seen and alice not in str(seen) and bob not in str(seen)


async def test_a_session_cannot_be_taken_over_with_another_users_token(
        running: Running, idp: Idp) -> None:
    alice = idp.user_token("alice", running.url, "tools:read")["access_token"]
    bob = idp.user_token("bob", running.url, "tools:read")["access_token"]
    async with httpx2.AsyncClient() as http:
        opened = await http.post(running.url, headers={
            "Authorization": f"Bearer {alice}", "Accept": "application/json, text/event-stream"},
            json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"}}})
        assert opened.status_code == 200, opened.text
        session_id = opened.headers["mcp-session-id"]
        hijack = await http.post(running.url, headers={
            "Authorization": f"Bearer {bob}", "Mcp-Session-Id": session_id,
            "Mcp-Protocol-Version": "2025-11-25",
            "Accept": "application/json, text/event-stream"},
            json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    assert hijack.status_code in (403, 404), hijack.text
    assert "notes." not in hijack.text
