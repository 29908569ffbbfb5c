"""Token exchange (RFC 8693) through the gateway, end to end: the upstream server (the SDK's
own, protected by the same authorization server through ``mcp.server.auth``) receives each
user's own exchanged token — never the token the client gave the gateway — and its own
authorization (a scope it checks) refuses what that user may not do. Every call's audit says
who called (issuer, subject, client id) and the upstream token's scopes, never a token."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("mcp")
from gateway_oauth import Notes, OAuthGateway, approve_all, exchange_to, mcp_client
from idp import Idp

from anfitrion.mcp._config import ServerConfig
from anfitrion.mcp._gateway import Gateway
from anfitrion.mcp._toolset import McpServers
from anfitrion.policy import Policy, ToolRule, Verdict
from anfitrion.store import MemoryStore

pytestmark = [pytest.mark.anyio]


async def test_each_user_reaches_the_upstream_with_their_own_exchanged_token(
        idp: Idp, notes: Notes, gateway: OAuthGateway) -> None:
    store = MemoryStore()
    exchange = exchange_to(idp.token_endpoint, notes, "notes:read notes:write")
    configs = [ServerConfig(id="notes", url=notes.url, token_exchange=exchange)]
    await approve_all(configs, store)  # listed with the gateway's own (client) token
    url = gateway.url
    policy = Policy([ToolRule("notes.*", Verdict.ALLOW)])  # the upstream decides
    asked = "tools:read notes:read notes:write"
    alice = idp.user_token("alice", url, asked)["access_token"]
    bob = idp.user_token("bob", url, asked)["access_token"]
    async with gateway.running(configs, store, policy, approval_wait=1) as (_, servers):
        async with mcp_client(url, alice) as session:
            wrote = await session.call_tool("notes.write_note", {"text": "hi"})
            assert not wrote.is_error, wrote
            assert "alice wrote 'hi'" in wrote.content[0].text  # type: ignore[union-attr]
        async with mcp_client(url, bob) as session:
            read = await session.call_tool("notes.read_notes", {})
            assert "notes of bob (scopes: notes:read)" in read.content[0].text  # type: ignore[union-attr]
            refused = await session.call_tool("notes.write_note", {"text": "hi"})
            assert refused.is_error
            assert "bob may not write notes" in refused.content[0].text  # type: ignore[union-attr]
        # a second call reuses the cached exchanged token: no new exchange
        exchanges = servers.toolsets["notes"].exchanger.exchanges  # type: ignore[union-attr]
        async with mcp_client(url, alice) as session:
            await session.call_tool("notes.read_notes", {})
        assert servers.toolsets["notes"].exchanger.exchanges == exchanges  # type: ignore[union-attr]
    seen = [a for a in notes.authorizations() if a]
    assert seen and alice not in str(seen) and bob not in str(seen)  # no passthrough
    subjects = set()
    for header in seen:
        found = idp.claims(header, notes.url)
        subjects.add(found["sub"])
        if found["sub"] in ("alice", "bob"):
            assert found["act"] == {"sub": "gateway"}  # on behalf of, by the gateway
    assert subjects == {"alice", "bob", "gateway"}
    records = [dict(r.data) for r in await store.audit_records() if r.data.get("tool")]
    assert records and all("identity" in r for r in records)  # every stage of every call
    by_user: dict[tuple[str, str], list[dict[str, object]]] = {}
    for found in records:
        by_user.setdefault((found["identity"]["subject"], found["tool"]), []).append(
            found["identity"])
    record = by_user[("bob", "notes.write_note")][-1]  # after the upstream call
    assert record["issuer"] == idp.issuer and record["client_id"] == "mcp-client"
    assert record["upstream_tokens"] == [{"server": "notes", "scopes": ["notes:read"]}]
    assert by_user[("alice", "notes.write_note")][-1]["upstream_tokens"] == [
        {"server": "notes", "scopes": ["notes:read", "notes:write"]}]
    assert "upstream_tokens" not in by_user[("bob", "notes.write_note")][0]  # proposed: none
    everything = json.dumps([dict(r.data) for r in await store.audit_records()])
    assert alice not in everything and bob not in everything
    for header in seen:
        assert header.removeprefix("Bearer ") not in everything


async def test_without_an_oauth_caller_a_token_exchange_server_is_never_called(
        idp: Idp, notes: Notes) -> None:
    store = MemoryStore()
    exchange = exchange_to(idp.token_endpoint, notes, "notes:read")
    configs = [ServerConfig(id="notes", url=notes.url, token_exchange=exchange)]
    await approve_all(configs, store)
    before = len(notes.authorizations())
    async with McpServers(configs, store) as servers:
        gateway = Gateway(servers, store=store, policy=Policy([ToolRule("notes.*",
                                                                        Verdict.ALLOW)]))
        listed = {t.name for t in await gateway.list_tools()}
        assert "notes.write_note" in listed, servers.toolsets["notes"].last_error
        result = await gateway.call_tool("notes.write_note", {"text": "x"})
        assert result.is_error and "no OAuth caller" in result.content[0].text  # type: ignore[union-attr]
    later = [a for a in notes.authorizations()[before:] if a]
    assert all(idp.claims(a, notes.url)["sub"] == "gateway"
               for a in later)  # only the gateway's own listing, never a user's token
