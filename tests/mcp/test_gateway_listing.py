"""The gateway relays calls on a server's last listing (``gateway.listingTtl``): no
``tools/list`` round trip and no look at every pin per call — and still a fresh listing when
the server says its list changed, when a pin changes in the store (any process), when a call
names a tool the offer lacks, and before a call a person approved (the security suite's
definition-swap test)."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")
from gateway_helpers import approve_all, gateway_client, protocol_server

from anfitrion import Principal, ToolContext
from anfitrion.exceptions import ToolError
from anfitrion.mcp._pinning import NAMESPACE, PinBook, tool_key
from anfitrion.store import MemoryStore

pytestmark = [pytest.mark.anyio, pytest.mark.mcp_servers]


def _text(result: Any) -> str:
    return str(result.content[0].text)


async def _withdraw(store: MemoryStore, name: str) -> None:
    """A tool's approval withdrawn, written straight into the store (as another process
    would)."""
    key = tool_key(*name.split(".", 1))
    record = dict(await store.get_record(NAMESPACE, key) or {})
    record.update(approved_digest=None, approved_definition=None, approved_by=None,
                  approved_at=None)
    await store.put_record(NAMESPACE, key, record)


async def test_calls_reuse_one_listing_while_it_is_fresh() -> None:
    store = MemoryStore()
    await approve_all([protocol_server(trusted=True)], store)
    with anyio.fail_after(60):
        async with gateway_client([protocol_server(trusted=True)], store,
                                  gateway_options={"listing_ttl": 30}) as (gateway, client):
            toolset = gateway.servers.toolsets["proto"]
            assert not (await client.call_tool("proto.count", {})).is_error
            before = toolset.listings
            for _ in range(10):
                result = await client.call_tool("proto.count", {})
                assert not result.is_error, _text(result)
            assert toolset.listings == before


async def test_a_zero_ttl_lists_the_server_before_every_call() -> None:
    store = MemoryStore()
    await approve_all([protocol_server(trusted=True)], store)
    with anyio.fail_after(60):
        async with gateway_client([protocol_server(trusted=True)], store,
                                  gateway_options={"listing_ttl": 0}) as (gateway, client):
            toolset = gateway.servers.toolsets["proto"]
            assert not (await client.call_tool("proto.count", {})).is_error
            before = toolset.listings
            for _ in range(5):
                assert not (await client.call_tool("proto.count", {})).is_error
            assert toolset.listings - before == 5  # one per call: the offer's, reused by it


async def test_a_pin_revoked_in_the_store_stops_the_calls_within_a_second() -> None:
    """The attacker's hope: a cached offer keeps serving a tool an operator just revoked
    (here written straight into the store, as another process would)."""
    store = MemoryStore()
    await approve_all([protocol_server(trusted=True)], store)
    with anyio.fail_after(60):
        async with gateway_client([protocol_server(trusted=True)], store,
                                  gateway_options={"listing_ttl": 300}) as (gateway, client), \
                anyio.create_task_group() as tg:
            tg.start_soon(gateway._watch_offer, 0.1)
            assert not (await client.call_tool("proto.count", {})).is_error
            await anyio.sleep(0.3)  # the watcher has seen the pins once
            await _withdraw(store, "proto.count")
            revoked_at = anyio.current_time()
            served = 1
            while not (result := await client.call_tool("proto.count", {})).is_error:
                assert anyio.current_time() - revoked_at < 1.0, "still served after a second"
                served += 1
                await anyio.sleep(0.02)
            # refused at resolve (the offer already lacks it) or, when the watcher's fresh
            # listing lands between the offer and the call, by the tool itself: either way
            # the refusal says the approval is gone, and nothing reached the server
            assert "unknown tool" in _text(result) or \
                "it is not approved (its approval was withdrawn)" in _text(result), \
                _text(result)
            await PinBook(store).approve("proto.count", by="operator")
            while (again := await client.call_tool("proto.count", {})).is_error:
                await anyio.sleep(0.02)  # until the watcher offers it again
            assert json.loads(_text(again))["count"] == served + 1
            tg.cancel_scope.cancel()


async def test_a_call_whose_approval_is_withdrawn_after_its_offer_is_refused_saying_so(
) -> None:
    """The window the test above can land in: the gate resolved the tool from an offer made
    before the revocation, and the listing made right before the call (the watcher marked it
    stale) no longer offers it. The tool refuses, sends nothing, and says why."""
    store = MemoryStore()
    await approve_all([protocol_server(trusted=True)], store)
    with anyio.fail_after(60):
        async with gateway_client([protocol_server(trusted=True)], store,
                                  gateway_options={"listing_ttl": 300}) as (gateway, client):
            toolset = gateway.servers.toolsets["proto"]
            assert not (await client.call_tool("proto.count", {})).is_error
            offered = (await gateway.offered())["proto.count"]
            await _withdraw(store, "proto.count")
            toolset.mark_stale()  # what the pin watcher does
            with pytest.raises(ToolError) as refused:
                await offered.handler({}, ToolContext(Principal("tester"), "s", "c", offered.name))
            assert "it is not approved (its approval was withdrawn)" in str(refused.value)
            assert "Nothing was run" in str(refused.value)
            toolset.mark_stale()
            await PinBook(store).approve("proto.count", by="operator")
            again = await client.call_tool("proto.count", {})
            assert json.loads(_text(again))["count"] == 2


async def test_a_call_naming_a_tool_the_offer_lacks_lists_again() -> None:
    store = MemoryStore()
    await approve_all([protocol_server(trusted=True)], store)
    await _withdraw(store, "proto.text")
    with anyio.fail_after(60):
        async with gateway_client([protocol_server(trusted=True)], store,
                                  gateway_options={"listing_ttl": 300}) as (_, client):
            assert not (await client.call_tool("proto.count", {})).is_error
            assert (await client.call_tool("proto.text", {})).is_error  # not approved yet
            await PinBook(store).approve("proto.text", by="operator")
            result = await client.call_tool("proto.text", {})  # no watcher runs here
            assert not result.is_error, _text(result)
