"""A resource read through the gateway is content a third party may have written: from a
server that is not trusted it taints the client's session, so a write the policy would allow
asks a person afterwards — the injection in the resource cannot act unseen."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

pytest.importorskip("mcp")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mcp"))
from gateway_helpers import approve_all, gateway_client, protocol_server

from anfitrion.store import MemoryStore

pytestmark = [pytest.mark.anyio, pytest.mark.mcp_servers]

# writes run without asking; only taint makes them ask (Policy.default's taint rule)
FAST = {"approval_wait": 0.2}


async def test_reading_an_injected_resource_makes_the_next_write_ask_a_person() -> None:
    store = MemoryStore()
    configs = [protocol_server()]  # not trusted: its tools are writes, its words untrusted
    await approve_all(configs, store)
    with anyio.fail_after(90):
        async with gateway_client(configs, store, gateway_options=FAST) as (_, clean):
            ran = await clean.call_tool("proto.text", {})  # an untainted session: it runs
        async with gateway_client(configs, store, gateway_options=FAST) as (_, client):
            read = await client.read_resource("note://injected")
            asked = await client.call_tool("proto.text", {})
            requests = await store.list_approvals()  # waiting while the client is connected
    assert ran.content[0].text == "plain text"  # type: ignore[union-attr]
    assert "ignore previous instructions" in read.contents[0].text  # type: ignore[union-attr]
    assert asked.is_error
    assert "needs a person's approval" in asked.content[0].text  # type: ignore[union-attr]
    assert [r.tool_name for r in requests] == ["proto.text"]
    audit = [r.data for r in await store.audit_records() if r.type == "mcp.relayed"]
    assert any(d["detail"] == "read note://injected (untrusted)" for d in audit)


async def test_a_trusted_servers_resource_does_not_taint() -> None:
    store = MemoryStore()
    configs = [protocol_server(trusted=True)]
    await approve_all(configs, store)
    with anyio.fail_after(60):
        async with gateway_client(configs, store, gateway_options=FAST) as (_, client):
            await client.read_resource("note://injected")
            # a write of the trusted server's (no readOnlyHint): allowed, not asked
            after = await client.call_tool("proto.count", {})
    assert not after.is_error
    assert await store.list_approvals() == []


async def test_a_server_not_approved_serves_no_resource() -> None:
    store = MemoryStore()
    configs = [protocol_server(trusted=True)]
    with anyio.fail_after(60):
        async with gateway_client(configs, store) as (_, client):
            listed = await client.list_resources()  # the server's own pin is new
    assert listed.resources == []
