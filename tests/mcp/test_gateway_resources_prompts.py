"""Resources, prompts, completion, sampling and elicitation through the gateway, with the
official SDK's client and a real server over stdio."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")
import mcp.types as mt
from gateway_helpers import approve_all, gateway_client, protocol_server
from mcp.shared.exceptions import MCPError

from anfitrion.mcp._pinning import PinBook
from anfitrion.store import MemoryStore

pytestmark = [pytest.mark.anyio, pytest.mark.mcp_servers]


async def relayed(store: MemoryStore) -> list[dict[str, Any]]:
    return [r.data for r in await store.audit_records() if r.type == "mcp.relayed"]


async def test_resources_are_listed_read_and_templated_through_the_gateway(
        store: MemoryStore) -> None:
    configs = [protocol_server(trusted=True)]
    await approve_all(configs, store)
    with anyio.fail_after(60):
        async with gateway_client(configs, store) as (_, client):
            listed = await client.list_resources()
            templates = await client.list_resource_templates()
            text = await client.read_resource("note://safe")
            blob = await client.read_resource("blob://one")
            templated = await client.read_resource("note://anything")
    assert sorted(str(r.uri) for r in listed.resources) == [
        "blob://one", "note://injected", "note://safe"]
    assert [t.uri_template for t in templates.resource_templates] == ["note://{name}"]
    assert text.contents[0].text == "note note://safe"  # type: ignore[union-attr]
    assert blob.contents[0].blob == "AAEC"  # type: ignore[union-attr]
    assert templated.contents[0].text == "note note://anything"  # type: ignore[union-attr]
    assert any("read note://safe (trusted)" in d["detail"] for d in await relayed(store))


async def test_a_subscription_relays_the_servers_update_to_the_subscriber(
        store: MemoryStore) -> None:
    configs = [protocol_server(trusted=True)]
    await approve_all(configs, store)
    updated = anyio.Event()
    seen: list[str] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, mt.ResourceUpdatedNotification):
            seen.append(str(message.params.uri))
            updated.set()

    with anyio.fail_after(60):
        async with gateway_client(configs, store, message_handler=on_message) as (_, client):
            await client.list_resources()
            await client.send_request(mt.SubscribeRequest(  # its method warns: removed in 2026
                params=mt.SubscribeRequestParams(uri="note://safe")), mt.EmptyResult)
            await updated.wait()  # the test server announces an update as it subscribes
            await client.send_request(mt.UnsubscribeRequest(
                params=mt.UnsubscribeRequestParams(uri="note://safe")), mt.EmptyResult)
    assert seen == ["note://safe"]


async def test_approved_prompts_are_listed_got_and_completed(store: MemoryStore) -> None:
    configs = [protocol_server(trusted=True)]
    await approve_all(configs, store)
    with anyio.fail_after(60):
        async with gateway_client(configs, store) as (_, client):
            assert (await client.list_prompts()).prompts == []  # seen now, not yet approved
            await PinBook(store).approve("proto.prompt:greet", by="operator")
            prompts = await client.list_prompts()
            got = await client.get_prompt("proto.greet", {"name": "Ada"})
            completed = await client.complete(
                mt.PromptReference(type="ref/prompt", name="proto.greet"),
                {"name": "name", "value": "A"})
    assert [p.name for p in prompts.prompts] == ["proto.greet"]
    assert got.messages[0].content.text == "Say hello to Ada."  # type: ignore[union-attr]
    assert completed.completion.values == ["Ada", "Alan"]


async def test_a_prompt_never_approved_is_neither_listed_nor_served(store: MemoryStore) -> None:
    configs = [protocol_server(trusted=True)]
    await approve_all(configs, store)  # tools and the server; prompts are seen only when listed
    with anyio.fail_after(60):
        async with gateway_client(configs, store) as (_, client):
            prompts = await client.list_prompts()
            with pytest.raises(MCPError, match="is blocked") as refused:
                await client.get_prompt("proto.greet", {"name": "Ada"})
    assert prompts.prompts == []
    assert "proto.prompt:greet" in refused.value.error.message


async def test_sampling_and_elicitation_are_relayed_when_the_config_allows_them_but_no_secret(
        store: MemoryStore) -> None:
    configs = [protocol_server(trusted=True, sampling=True, elicitation=True)]
    await approve_all(configs, store)
    asked: list[str] = []

    async def sampling(context: Any, params: mt.CreateMessageRequestParams) -> Any:
        asked.append("sampling")
        return mt.CreateMessageResult(role="assistant", model="test",
                                      content=mt.TextContent(type="text", text="no"))

    async def elicitation(context: Any, params: Any) -> Any:
        asked.append("elicitation")
        return mt.ElicitResult(action="decline")

    with anyio.fail_after(60):
        async with gateway_client(configs, store, sampling_callback=sampling,
                                  elicitation_callback=elicitation) as (_, client):
            sampled = await client.call_tool("proto.sample", {})
            elicited = await client.call_tool("proto.elicit", {})
    assert sampled.content[0].text == "sampled: no"  # type: ignore[union-attr]
    # the server's elicitation asks for a password: MCP forbids that in form mode, so the
    # gateway refuses it before the client (and its person) sees it
    text = elicited.content[0].text  # type: ignore[union-attr]
    assert text.startswith("elicitation failed:") and "asks for a secret" in text
    assert asked == ["sampling"]
    details = [d["detail"] for d in await relayed(store)]
    assert any(d.startswith("relayed to the client") for d in details)
    assert any(d.startswith("refused: field 'password' asks for a secret") for d in details)
