"""Planted tokens, by class, through a real OAuth gateway call (oidc-provider, the SDK's
protected notes server, token exchange): the caller's inbound access token, the exchanged
upstream tokens and the gateway's client secret never reach the OpenTelemetry spans (content
capture on), the approval inbox's pages, nor ``anfitrion audit export`` — even when a model
pastes the caller's token into a tool's arguments."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

pytest.importorskip("mcp")
pytest.importorskip("opentelemetry.sdk", reason="needs the otel extra and the SDK")
from click.testing import CliRunner
from gateway_oauth import Notes, OAuthGateway, approve_all, exchange_to, mcp_client
from idp import GATEWAY_CLIENT, Idp
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from anfitrion._cli.main import cli
from anfitrion.mcp._config import ServerConfig
from anfitrion.policy import Policy, ToolRule, Verdict
from anfitrion.store._sqlite import SQLiteStore
from anfitrion.telemetry import HostTelemetry
from anfitrion.web import create_app

pytestmark = [pytest.mark.anyio]

INBOX_TOKEN = "inbox-token-0123456789abcdef"


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
        idp: Idp, notes: Notes, gateway: OAuthGateway, tmp_path: Path) -> None:
    url_of_store = f"sqlite:///{tmp_path}/s.db"
    migrated = await anyio.to_thread.run_sync(
        lambda: CliRunner().invoke(cli, ["db", "migrate", "--store", url_of_store]))
    assert migrated.exit_code == 0, migrated.output
    store = SQLiteStore.from_url(url_of_store)
    exchange = exchange_to(idp.token_endpoint, notes, "notes:read notes:write")
    configs = [ServerConfig(id="notes", url=notes.url, token_exchange=exchange)]
    await approve_all(configs, store)
    url = gateway.url
    alice = idp.user_token("alice", url, "tools:read notes:read notes:write")["access_token"]
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    policy = Policy([ToolRule("notes.*", Verdict.ALLOW)])
    asking = Policy([ToolRule("notes.read_notes", Verdict.ALLOW),
                     ToolRule("notes.write_note", Verdict.ASK)])
    before = len(notes.authorizations())
    async with gateway.running(configs, store, policy, approval_wait=0.5) as (served, _):
        served.runtime.add_listener(HostTelemetry(
            model_name="gateway", provider=None, agent_name="anfitrion",
            tracer_provider=provider, capture_content=True))
        async with mcp_client(url, alice) as session:
            read = await session.call_tool("notes.read_notes", {})
            assert "notes of alice" in read.content[0].text  # type: ignore[union-attr]
            # a model pastes the caller's token into the arguments; the upstream echoes it
            pasted = {"text": f"here is my token {alice} and Authorization: Bearer {alice}"}
            echoed = await session.call_tool("notes.write_note", pasted)
            assert alice in echoed.content[0].text  # type: ignore[union-attr]
            served.gate.policy = asking  # and once more, now waiting for a person
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
