"""The gateway forwards the protocol: every content type, structured content, list metadata,
pagination, -32601, own names, tasks — with the official SDK's client and a real server."""

from __future__ import annotations

import json
import warnings
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")
import mcp.types as mt
from gateway_helpers import approve_all, connected, gateway_client, protocol_server
from mcp.shared.exceptions import MCPError

from anfitrion.exceptions import UserError
from anfitrion.mcp._gateway import Gateway
from anfitrion.mcp._gateway_content import ANNOTATIONS_META
from anfitrion.mcp._toolset import McpServers
from anfitrion.policy import Policy
from anfitrion.store import MemoryStore

pytestmark = [pytest.mark.anyio, pytest.mark.mcp_servers]

ALLOW = Policy.default()  # reads allowed; writes ask (answered in the store by the tests)


async def _all_tools(session: Any) -> list[mt.Tool]:
    tools: list[mt.Tool] = []
    cursor = None
    while True:
        listed = await session.list_tools(params=mt.PaginatedRequestParams(cursor=cursor)
                                          if cursor else None)
        tools += listed.tools
        cursor = listed.next_cursor
        if not cursor:
            return tools


@pytest.fixture
def trusted() -> list[Any]:
    return [protocol_server(trusted=True)]


async def test_every_content_type_is_forwarded_as_itself(trusted: list[Any],
                                                         store: MemoryStore) -> None:
    await approve_all(trusted, store)
    with anyio.fail_after(60):
        async with gateway_client(trusted, store) as (_, client):
            image = await client.call_tool("proto.image", {})
            audio = await client.call_tool("proto.audio", {})
            embedded = await client.call_tool("proto.embedded", {})
            mixed = await client.call_tool("proto.mixed", {})
    assert not image.is_error, image
    assert isinstance(image.content[0], mt.ImageContent)
    assert image.content[0].mime_type == "image/png"
    assert isinstance(audio.content[0], mt.AudioContent)
    assert isinstance(embedded.content[0], mt.EmbeddedResource)
    assert embedded.content[0].resource.text == "embedded text"  # type: ignore[union-attr]
    kinds = [b.type for b in mixed.content]
    assert kinds == ["text", "image", "resource", "resource_link"]
    assert mixed.content[0].annotations == mt.Annotations(audience=["user"], priority=0.5)


async def test_structured_content_is_forwarded_and_checked_against_the_pinned_schema(
        trusted: list[Any], store: MemoryStore) -> None:
    await approve_all(trusted, store)
    with anyio.fail_after(60):
        async with gateway_client(trusted, store) as (_, client):
            good = await client.call_tool("proto.structured", {})
            lie = await client.call_tool("proto.structured_lie", {})
    assert good.structured_content == {"sum": 3}
    assert lie.is_error
    # the gate's check, against the approved schema (the SDK's own is not made)
    assert "does not match the approved output schema at sum" in \
        lie.content[0].text  # type: ignore[union-attr]
    assert lie.structured_content is None
    decided = [r for r in await store.audit_records() if r.type == "result.returned"]
    assert any(r.data["result"]["is_error"] for r in decided)


async def test_the_list_carries_title_output_schema_and_execution_and_trusted_annotations(
        trusted: list[Any], store: MemoryStore) -> None:
    await approve_all(trusted, store)
    with anyio.fail_after(60):
        async with gateway_client(trusted, store) as (_, client):
            tools = {t.name: t for t in await _all_tools(client)}
    mixed = tools["proto.mixed"]
    assert mixed.title == "Mixed content"
    assert mixed.annotations is not None and mixed.annotations.read_only_hint is True
    assert mixed.annotations.title == "Mixed"
    assert tools["proto.structured"].output_schema == {
        "type": "object", "properties": {"sum": {"type": "integer"}}, "required": ["sum"]}


async def test_an_untrusted_servers_annotations_are_the_gateways_and_its_claims_are_marked(
        store: MemoryStore) -> None:
    configs = [protocol_server()]
    await approve_all(configs, store)
    with anyio.fail_after(60):
        async with gateway_client(configs, store) as (_, client):
            tools = {t.name: t for t in await _all_tools(client)}
    mixed = tools["proto.mixed"]
    assert mixed.annotations is not None and mixed.annotations.read_only_hint is False
    assert mixed.meta is not None
    assert mixed.meta[ANNOTATIONS_META]["claimed"]["readOnlyHint"] is True
    assert mixed.meta[ANNOTATIONS_META]["trusted"] is False


async def test_a_tool_that_runs_only_as_a_task_is_kept_out_with_a_reason(
        trusted: list[Any], store: MemoryStore, caplog: pytest.LogCaptureFixture) -> None:
    await approve_all(trusted, store)
    with anyio.fail_after(60):
        async with gateway_client(trusted, store) as (_, client):
            names = [t.name for t in await _all_tools(client)]
    assert "proto.task_only" not in names
    assert "proto.text" in names
    assert any("runs only as a task" in r.getMessage() for r in caplog.records)


async def test_tools_list_is_paginated_with_an_opaque_cursor(store: MemoryStore) -> None:
    configs = [protocol_server("proto", "--many", "30", trusted=True)]
    await approve_all(configs, store)
    with anyio.fail_after(60):
        async with gateway_client(configs, store, gateway_options={"page_size": 10}) as (
                _, client):
            first = await client.list_tools()
            everything = await _all_tools(client)
            with pytest.raises(MCPError) as bad:
                await client.list_tools(params=mt.PaginatedRequestParams(cursor="nonsense"))
    assert len(first.tools) == 10 and first.next_cursor is not None
    assert len({t.name for t in everything}) == len(everything) > 40
    assert bad.value.error.code == mt.INVALID_PARAMS


async def test_an_unknown_method_answers_method_not_found(trusted: list[Any],
                                                           store: MemoryStore) -> None:
    await approve_all(trusted, store)
    with anyio.fail_after(60):
        async with gateway_client(trusted, store) as (_, client):
            unknown_request = mt.PingRequest.model_construct(method="tools/frobnicate")
            with warnings.catch_warnings():  # pydantic: the method is not one it knows
                warnings.simplefilter("ignore", UserWarning)
                with pytest.raises(MCPError) as unknown:
                    await client.send_request(unknown_request, mt.EmptyResult)
            assert (await client.send_ping()) is not None  # the session goes on
    assert unknown.value.error.code == mt.METHOD_NOT_FOUND


async def test_own_names_present_the_one_servers_tools_as_it_names_them(
        trusted: list[Any], store: MemoryStore) -> None:
    await approve_all(trusted, store)
    with anyio.fail_after(60):
        async with gateway_client(trusted, store, gateway_options={"own_names": True}) as (
                _, client):
            names = {t.name for t in await _all_tools(client)}
            result = await client.call_tool("text", {})
    assert "text" in names and "proto.text" not in names
    assert result.content[0].text == "plain text"  # type: ignore[union-attr]
    calls = [r for r in await store.audit_records() if r.type == "call.decided"]
    assert calls[-1].data["tool"] == "proto.text"  # the gate and the audit keep the server


async def test_own_names_are_refused_with_more_than_one_server(store: MemoryStore) -> None:
    configs = [protocol_server("a"), protocol_server("b")]
    async with McpServers(configs, store) as servers:
        with pytest.raises(UserError, match="exactly one wrapped server"):
            Gateway(servers, store=store, own_names=True)


async def test_a_call_forwards_progress_and_log_messages_to_its_client(
        trusted: list[Any], store: MemoryStore) -> None:
    await approve_all(trusted, store)
    logs: list[mt.LoggingMessageNotificationParams] = []
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_log(params: mt.LoggingMessageNotificationParams) -> None:
        logs.append(params)

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    with anyio.fail_after(60):
        async with gateway_client(trusted, store, logging_callback=on_log) as (_, client):
            await client.send_request(mt.SetLevelRequest(params=mt.SetLevelRequestParams(
                level="info")), mt.EmptyResult)  # its method warns: deprecated in 2026
            await client.call_tool("proto.logging", {})
            await client.call_tool("proto.progress", {}, progress_callback=on_progress)
            await client.send_request(mt.SetLevelRequest(params=mt.SetLevelRequestParams(
                level="error")), mt.EmptyResult)  # its method warns: deprecated in 2026
            await client.call_tool("proto.logging", {})
    assert [p.data for p in logs] == ["started", "working", "done"]
    assert logs[0].logger == "proto/worker"
    assert progress == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]


async def test_cancelling_one_call_keeps_the_server_and_its_state(
        trusted: list[Any], store: MemoryStore) -> None:
    await approve_all(trusted, store)
    with anyio.fail_after(60):
        async with gateway_client(trusted, store) as (gateway, client):
            before = json.loads((await client.call_tool("proto.count", {})).content[0].text)  # type: ignore[union-attr]
            cancelled: list[BaseException] = []

            async def slow() -> None:
                try:
                    await client.call_tool("proto.slow", {})
                except MCPError as exc:  # the gateway answers the cancelled request
                    cancelled.append(exc)

            async with anyio.create_task_group() as tg:
                tg.start_soon(slow)
                await anyio.wait_all_tasks_blocked()
                # the SDK sends notifications/cancelled for the request it gives up
                tg.cancel_scope.cancel()
            while True:  # the server ends the cancelled call in its own time: bounded above
                after = json.loads((await client.call_tool("proto.count", {})).content[0].text)  # type: ignore[union-attr]
                if after["cancelled"]:
                    break
            restarts = gateway.servers.toolsets["proto"].restarts
    assert after["pid"] == before["pid"]
    assert after["count"] > before["count"]
    assert after["cancelled"] == 1
    assert restarts == 0


async def test_log_messages_reach_only_the_client_whose_call_caused_them(
        trusted: list[Any], store: MemoryStore) -> None:
    await approve_all(trusted, store)
    seen: dict[str, list[Any]] = {"a": [], "b": []}

    def keep(who: str) -> Any:
        async def on_log(params: mt.LoggingMessageNotificationParams) -> None:
            seen[who].append(params.data)
        return on_log

    with anyio.fail_after(60):
        async with McpServers(trusted, store) as servers:
            gateway = Gateway(servers, store=store, policy=ALLOW)
            async with connected(
                    gateway.build_server(), logging_callback=keep("a")) as a, \
                    connected(
                        gateway.build_server(), logging_callback=keep("b")) as b:
                await a.call_tool("proto.logging", {})
                await b.send_ping()
    assert seen == {"a": ["started", "working", "done"], "b": []}
