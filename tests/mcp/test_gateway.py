"""The gateway: the official MCP client SDK against ``anfitrion gateway`` over streamable HTTP
(in process, with the store shared with the test) and over stdio (a subprocess)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")
import httpx
import httpx2
import mcp.types as mt
from gateway_helpers import serving_http, url_of
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp_helpers import through_gate

from anfitrion._approvals import ApprovalAnswer
from anfitrion._events import EventType, HostEvent
from anfitrion._tools import OfferContext
from anfitrion.mcp._config import ServerConfig
from anfitrion.mcp._gateway import Gateway
from anfitrion.mcp._pinning import PinBook
from anfitrion.mcp._toolset import McpServers, McpToolset
from anfitrion.policy import Decision, Policy
from anfitrion.store import MemoryStore

pytestmark = [pytest.mark.anyio, pytest.mark.mcp_servers]

TOKEN = "test-token-0123456789abcdef"


async def approve_pins(configs: Sequence[ServerConfig], store: MemoryStore,
                       names: Sequence[str]) -> None:
    async with McpServers(configs, store) as servers:
        await servers.refresh()
    for name in names:
        await PinBook(store).approve(name, by="operator")


@asynccontextmanager
async def http_gateway(configs: Sequence[ServerConfig], store: MemoryStore, *,
                       policy: Policy | None = None, approval_wait: float = 30,
                       on_event: Callable[[HostEvent], Any] | None = None,
                       store_url: str | None = None,
                       ) -> AsyncIterator[tuple[Gateway, str]]:
    async with McpServers(configs, store) as servers:
        gateway = Gateway(servers, store=store, policy=policy, approval_wait=approval_wait,
                          poll_interval=0.05, listeners=[on_event] if on_event else [],
                          store_url=store_url)
        async with serving_http(gateway, TOKEN, max_body_bytes=64 * 1024) as sock:
            yield gateway, url_of(sock)


@asynccontextmanager
async def mcp_client(url: str, seen: list[Any] | None = None) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {TOKEN}"}

    async def keep(message: Any) -> None:
        if seen is not None:
            seen.append(message)

    async with httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=300),
                                  headers=headers) as http, \
            streamable_http_client(url, http_client=http) as (read, write), \
            ClientSession(read, write, message_handler=keep) as session:
        await session.initialize()
        yield session


def answering(store: MemoryStore, approved: bool) -> Callable[[HostEvent], Any]:
    """A listener that answers each approval request through the store, as the CLI would."""
    async def listener(event: HostEvent) -> None:
        if event.type is EventType.APPROVAL_REQUESTED and event.request is not None:
            assert await store.answer_approval(
                ApprovalAnswer.to(event.request, approved, "alice", "checked"))
    return listener


async def test_tools_list_shows_only_approved_tools_and_a_read_call_passes(
        time_server: ServerConfig, malicious: Callable[..., ServerConfig],
        store: MemoryStore) -> None:
    configs = [time_server, malicious()]
    await approve_pins(configs, store, ["time.get_current_time", "mal.rug"])
    with anyio.fail_after(60):
        async with http_gateway(configs, store) as (_, url), mcp_client(url) as client:
            listed = await client.list_tools()
            assert sorted(t.name for t in listed.tools) == ["mal.rug", "time.get_current_time"]
            hints = {t.name: t.annotations for t in listed.tools}
            assert hints["time.get_current_time"].read_only_hint is True
            assert hints["mal.rug"].read_only_hint is False
            result = await client.call_tool("time.get_current_time", {"timezone": "UTC"})
            assert not result.is_error
            assert '"timezone": "UTC"' in result.content[0].text
    kinds = [r.type for r in await store.audit_records()]
    assert "call.decided" in kinds
    assert "result.returned" in kinds


async def test_tools_list_hides_tools_the_policy_denies_whatever_the_arguments(
        time_server: ServerConfig, malicious: Callable[..., ServerConfig],
        store: MemoryStore) -> None:
    from anfitrion.policy import parse_policy

    configs = [time_server, malicious()]
    await approve_pins(configs, store, ["time.get_current_time", "mal.rug", "mal.pid"])
    policy = parse_policy('[defaults]\nread = "allow"\nwrite = "deny"\n'
                          '[[rules]]\ntool = "mal.pid"\nverdict = "ask"\n')
    with anyio.fail_after(60):
        async with http_gateway(configs, store, policy=policy) as (_, url), \
                mcp_client(url) as client:
            listed = await client.list_tools()
    # mal.rug is a write (untrusted server) no rule lifts from the default deny: not listed
    assert sorted(t.name for t in listed.tools) == ["mal.pid", "time.get_current_time"]


async def test_a_write_call_waits_for_approval_through_the_store_and_then_runs(
        malicious: Callable[..., ServerConfig], store: MemoryStore) -> None:
    configs = [malicious()]
    await approve_pins(configs, store, ["mal.rug"])
    with anyio.fail_after(60):
        async with http_gateway(configs, store, on_event=answering(store, True)) as (_, url), \
                mcp_client(url) as client:
            result = await client.call_tool("mal.rug", {"a": 2, "b": 3})
    assert not result.is_error, result.content
    assert result.content[0].text == "5"
    (request,) = await store.list_approvals(pending_only=False)
    assert request.tool_name == "mal.rug"


async def test_a_call_denied_by_a_person_returns_an_mcp_tool_error(
        malicious: Callable[..., ServerConfig], store: MemoryStore, tmp_path: Any) -> None:
    victim = tmp_path / "precious.txt"
    victim.write_text("keep")
    configs = [malicious()]
    await approve_pins(configs, store, ["mal.delete_file"])
    with anyio.fail_after(60):
        async with http_gateway(configs, store, on_event=answering(store, False)) as (_, url), \
                mcp_client(url) as client:
            result = await client.call_tool("mal.delete_file", {"name": "precious.txt"})
    assert result.is_error
    assert result.content[0].text == "declined by a person: checked"
    assert "checked" in result.content[0].text  # the person's note reaches the client
    assert victim.exists()


async def test_a_call_denied_by_policy_returns_an_mcp_tool_error(
        malicious: Callable[..., ServerConfig], store: MemoryStore) -> None:
    def no_deleting(call: Any, context: Any) -> Decision | None:
        return Decision.deny("deleting is off", "no-delete") \
            if call.name == "mal.delete_file" else None

    configs = [malicious()]
    await approve_pins(configs, store, ["mal.delete_file"])
    with anyio.fail_after(60):
        async with http_gateway(configs, store, policy=Policy([no_deleting])) as (_, url), \
                mcp_client(url) as client:
            result = await client.call_tool("mal.delete_file", {"name": "x"})
    assert result.is_error
    assert "denied by policy: deleting is off" in result.content[0].text


async def test_without_an_answer_the_call_says_where_to_approve_and_a_retry_runs_it(
        malicious: Callable[..., ServerConfig], store: MemoryStore) -> None:
    configs = [malicious()]
    await approve_pins(configs, store, ["mal.rug"])
    with anyio.fail_after(60):
        async with http_gateway(configs, store, approval_wait=0.2) as (_, url), \
                mcp_client(url) as client:
            first = await client.call_tool("mal.rug", {"a": 1, "b": 1})
            assert first.is_error
            (request,) = await store.list_approvals()
            assert f"anfitrion approvals approve {request.id}" in first.content[0].text
            assert await store.answer_approval(ApprovalAnswer.to(request, True, "alice"))
            retried = await client.call_tool("mal.rug", {"a": 1, "b": 1})
            assert not retried.is_error
            assert retried.content[0].text == "2"
            other = await client.call_tool("mal.rug", {"a": 5, "b": 5})
            assert other.is_error  # the approval covered exactly one call


async def test_the_approve_hint_names_the_store_when_it_is_not_the_default(
        malicious: Callable[..., ServerConfig], store: MemoryStore, tmp_path: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """#36: `anfitrion approvals approve ID` alone would look in another store."""
    monkeypatch.setenv("ANFITRION_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("ANFITRION_STORE", raising=False)
    elsewhere = f"sqlite:///{tmp_path / 'gateway store.db'}"
    default = f"sqlite:///{tmp_path / 'home' / 'anfitrion.db'}"
    configs = [malicious()]
    await approve_pins(configs, store, ["mal.rug"])
    for url, expected in ((elsewhere, f" --store '{elsewhere}'` "), (default, "`")):
        with anyio.fail_after(60):
            async with http_gateway(configs, store, approval_wait=0.05, store_url=url) \
                    as (_, mcp_url), mcp_client(mcp_url) as client:
                first = await client.call_tool("mal.rug", {"a": 2, "b": len(url)})
        text = first.content[0].text
        found = re.search(r"approvals approve ([0-9a-f]{32})", text)
        assert found is not None
        assert f"anfitrion approvals approve {found.group(1)}{expected}" in text


async def test_unapproved_and_unknown_tools_are_refused(
        malicious: Callable[..., ServerConfig], store: MemoryStore) -> None:
    configs = [malicious()]
    await approve_pins(configs, store, ["mal.rug"])
    with anyio.fail_after(60):
        async with http_gateway(configs, store) as (_, url), mcp_client(url) as client:
            result = await client.call_tool("mal.delete_file", {"name": "x"})
    assert result.is_error
    assert "unknown tool" in result.content[0].text


@pytest.mark.parametrize(("headers", "body", "status"), [
    ({}, b"{}", 401),
    ({"Authorization": "Bearer wrong-token-0123456789"}, b"{}", 401),
    ({"Authorization": f"Bearer {TOKEN}", "Host": "evil.example"}, b"{}", 421),
    ({"Authorization": f"Bearer {TOKEN}", "Origin": "https://evil.example"}, b"{}", 403),
    ({"Authorization": f"Bearer {TOKEN}"}, b"x" * (65 * 1024), 413),
])
async def test_the_http_transport_refuses_requests_it_cannot_trust(
        malicious: Callable[..., ServerConfig], store: MemoryStore, headers: dict[str, str],
        body: bytes, status: int) -> None:
    with anyio.fail_after(60):
        async with http_gateway([malicious()], store) as (_, url), httpx.AsyncClient() as http:
            response = await http.post(url, content=body, headers={
                "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream", **headers})
    assert response.status_code == status


async def test_a_definition_changed_while_a_call_waits_voids_the_approval(
        malicious: Callable[..., ServerConfig], store: MemoryStore) -> None:
    configs = [malicious()]
    await approve_pins(configs, store, ["mal.rug", "mal.flip"])
    gateways: list[Gateway] = []

    async def rug_pull_then_approve(event: HostEvent) -> None:
        if event.type is EventType.APPROVAL_REQUESTED and event.request is not None:
            offered = await gateways[0].offered()
            await through_gate(offered.values(), "mal.flip", {}, store, call_id="flip")
            assert await store.answer_approval(ApprovalAnswer.to(event.request, True, "alice"))

    seen: list[Any] = []
    with anyio.fail_after(60):
        async with http_gateway(configs, store, on_event=rug_pull_then_approve) as (gw, url), \
                mcp_client(url, seen) as client:
            gateways.append(gw)
            assert len((await client.list_tools()).tools) == 2
            result = await client.call_tool("mal.rug", {"a": 1, "b": 2})
            listed = [t.name for t in (await client.list_tools()).tools]
    assert any(isinstance(m, mt.ToolListChangedNotification) for m in seen)
    assert result.is_error
    assert "unknown tool 'mal.rug'" in result.content[0].text
    assert listed == ["mal.flip"]


async def test_an_upstream_streamable_http_server_is_a_tool_source_with_its_headers(
        time_server: ServerConfig, store: MemoryStore, offer: OfferContext) -> None:
    await approve_pins([time_server], store, ["time.get_current_time"])
    client_store = MemoryStore()
    with anyio.fail_after(60):
        async with http_gateway([time_server], store) as (_, url):
            remote = ServerConfig(id="remote", url=url,
                                  headers={"Authorization": f"Bearer {TOKEN}"})
            async with McpToolset(remote, client_store) as toolset:
                statuses = await toolset.refresh()
                assert [s.name for s in statuses] == ["remote.time.get_current_time"]
                await toolset.pins.approve("remote.time.get_current_time", by="operator")
                outcome = await through_gate(await toolset.list_tools(offer),
                                             "remote.time.get_current_time",
                                             {"timezone": "UTC"}, client_store)
            refused = ServerConfig(id="remote", url=url,
                                   headers={"Authorization": "Bearer not-the-token-at-all"})
            async with McpToolset(refused, client_store) as toolset:
                assert await toolset.list_tools(offer) == []
                assert toolset.last_error
    assert json.loads(outcome.result.content)["timezone"] == "UTC"


async def test_an_upstream_list_change_reaches_a_connected_client_within_a_second(
        malicious: Callable[..., ServerConfig], store: MemoryStore) -> None:
    """The upstream server sends ``notifications/tools/list_changed`` (its tool ``rug`` turned
    hostile, as ``flip`` makes it): a client connected meanwhile — not the one whose call
    caused it — hears ``notifications/tools/list_changed`` from the gateway within a second,
    and its next listing no longer offers the changed tool."""
    from anfitrion.policy import parse_policy

    configs = [malicious("--notify")]
    await approve_pins(configs, store, ["mal.rug", "mal.flip"])
    allow_flip = parse_policy('[[rules]]\ntool = "mal.flip"\nverdict = "allow"\n'
                              'reason = "the test flips the upstream"\n')
    heard = anyio.Event()
    heard_at: list[float] = []

    def on_notice(message: Any) -> None:
        if isinstance(message, mt.ToolListChangedNotification) and not heard_at:
            heard_at.append(anyio.current_time())
            heard.set()

    seen = _Noticing(on_notice)
    with anyio.fail_after(60):
        async with http_gateway(configs, store, policy=allow_flip) as (_, url), \
                mcp_client(url, seen) as listener, mcp_client(url) as caller:
            assert sorted(t.name for t in (await listener.list_tools()).tools) == \
                ["mal.flip", "mal.rug"]
            await anyio.sleep(0.5)  # the listener's event stream (GET) is open
            flipped = await caller.call_tool("mal.flip", {})
            assert not flipped.is_error, flipped.content
            returned_at = anyio.current_time()
            with anyio.fail_after(1.0):
                await heard.wait()
            assert heard_at[0] - returned_at < 1.0
            listed = [t.name for t in (await listener.list_tools()).tools]
    assert listed == ["mal.flip"]  # the changed definition waits for a review


class _Noticing(list[Any]):
    """A message list for :func:`mcp_client` that also calls *on_append* with each one."""

    def __init__(self, on_append: Callable[[Any], None]) -> None:
        super().__init__()
        self.on_append = on_append

    def append(self, message: Any) -> None:
        super().append(message)
        self.on_append(message)
