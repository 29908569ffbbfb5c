"""Planted tokens, by class, through a real OAuth gateway call (oidc-provider, the SDK's
protected notes server, token exchange): the caller's inbound access token, the exchanged
upstream tokens and the gateway's client secret never reach the OpenTelemetry spans (content
capture on), the approval inbox's pages, nor ``anfitrion audit export`` — even when a model
pastes the caller's token into a tool's arguments."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

pytest.importorskip("mcp")
pytest.importorskip("opentelemetry.sdk", reason="needs the otel extra and the SDK")
from click.testing import CliRunner
from gateway_oauth import (
    Notes,
    approve_all,
    free_socket,
    mcp_client,
    notes_server,
    serving,
    settings_for,
)
from idp import GATEWAY_CLIENT, Idp
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from anfitrion._cli.main import cli
from anfitrion.mcp._config import ServerConfig
from anfitrion.mcp._gateway import Gateway
from anfitrion.mcp._oauth_settings import TokenExchangeSettings
from anfitrion.mcp._toolset import McpServers
from anfitrion.policy import Policy, ToolRule, Verdict
from anfitrion.store._sqlite import SQLiteStore
from anfitrion.telemetry import HostTelemetry
from anfitrion.web import create_app

pytestmark = [pytest.mark.anyio]

INBOX_TOKEN = "inbox-token-0123456789abcdef"


@pytest.fixture(scope="module")
def notes(idp: Idp, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Notes]:
    with notes_server(idp.issuer, tmp_path_factory.mktemp("masked")) as found:
        yield found


def span_text(exporter: InMemorySpanExporter) -> str:
    parts: list[Any] = []
    for span in exporter.get_finished_spans():
        parts += [span.name, dict(span.attributes or {}),
                  [(e.name, dict(e.attributes or {})) for e in span.events]]
    return json.dumps(parts, default=str)


async def inbox_text(store: SQLiteStore) -> str:
    app = create_app(store, token=INBOX_TOKEN)
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app),
                                  base_url="http://127.0.0.1",
                                  headers={"origin": "http://127.0.0.1"}) as browser:
        await browser.post("/login", data={"token": INBOX_TOKEN})
        pages = [(await browser.get(path)).text for path in ("/", "/history", "/sessions")]
        for request in await store.list_approvals():
            pages.append((await browser.get(f"/approvals/{request.id}")).text)
            pages.append((await browser.get(f"/sessions/{request.session_id}")).text)
        api = await browser.get("/api/v1/approvals",
                                headers={"authorization": f"Bearer {INBOX_TOKEN}"})
        pages.append(api.text)
    assert any("notes.write_note" in page for page in pages)  # the pages did show the call
    return "\n".join(pages)


async def test_no_token_or_secret_reaches_spans_the_inbox_or_exports(
        idp: Idp, notes: Notes, tmp_path: Path) -> None:
    url_of_store = f"sqlite:///{tmp_path}/s.db"
    migrated = await anyio.to_thread.run_sync(
        lambda: CliRunner().invoke(cli, ["db", "migrate", "--store", url_of_store]))
    assert migrated.exit_code == 0, migrated.output
    store = SQLiteStore.from_url(url_of_store)
    exchange = TokenExchangeSettings(token_endpoint=idp.token_endpoint, audience=notes.url,
                                     scope="notes:read notes:write",
                                     client_id=GATEWAY_CLIENT[0],
                                     client_secret=GATEWAY_CLIENT[1], allow_internal=True)
    configs = [ServerConfig(id="notes", url=notes.url, token_exchange=exchange)]
    await approve_all(configs, store)
    sock = free_socket()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    alice = idp.user_token("alice", url, "tools:read notes:read notes:write")["access_token"]
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    policy = Policy([ToolRule("notes.*", Verdict.ALLOW)])
    asking = Policy([ToolRule("notes.read_notes", Verdict.ALLOW),
                     ToolRule("notes.write_note", Verdict.ASK)])
    before = len(notes.authorizations())
    async with McpServers(configs, store) as servers:
        gateway = Gateway(servers, store=store, policy=policy, approval_wait=0.5)
        gateway.runtime.add_listener(HostTelemetry(
            model_name="gateway", provider=None, agent_name="anfitrion",
            tracer_provider=provider, capture_content=True))
        async with serving(gateway, settings_for(idp.issuer, url), sock), \
                mcp_client(url, alice) as session:
            read = await session.call_tool("notes.read_notes", {})
            assert "notes of alice" in read.content[0].text  # type: ignore[union-attr]
            # a model pastes the caller's token into the arguments; the upstream echoes it
            pasted = {"text": f"here is my token {alice} and Authorization: Bearer {alice}"}
            echoed = await session.call_tool("notes.write_note", pasted)
            assert alice in echoed.content[0].text  # type: ignore[union-attr]
            gateway.gate.policy = asking  # and once more, now waiting for a person
            pasted["text"] += " again"
            waiting = await session.call_tool("notes.write_note", pasted)
            assert waiting.is_error and "approval" in waiting.content[0].text  # type: ignore[union-attr]
    provider.force_flush()
    upstream = [a.removeprefix("Bearer ") for a in notes.authorizations()[before:] if a]
    assert upstream  # the exchanged tokens (and the gateway's own) that reached the upstream
    secrets = {"the caller's token": alice, "the gateway's client secret": GATEWAY_CLIENT[1],
               **{f"upstream token {i}": t for i, t in enumerate(upstream)}}
    exported = await anyio.to_thread.run_sync(
        lambda: CliRunner().invoke(cli, ["audit", "export", "--store", url_of_store]))
    assert exported.exit_code == 0 and '"upstream_tokens"' in exported.output
    places = {"spans": span_text(exporter), "inbox": await inbox_text(store),
              "audit export": exported.output}
    assert "notes.write_note" in places["spans"]
    for place, text in places.items():
        for what, secret in secrets.items():
            assert secret not in text, f"{what} reached {place}"
            assert secret[-24:] not in text, f"the end of {what} reached {place}"
    await store.close()
