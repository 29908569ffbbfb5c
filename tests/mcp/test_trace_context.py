"""Trace context crosses MCP: the host's execute_tool span continues in the server (``_meta``)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

pytest.importorskip("mcp")
pytest.importorskip("opentelemetry.sdk")

from mcp_helpers import through_gate
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from anfitrion._tools import OfferContext
from anfitrion.mcp._config import ServerConfig
from anfitrion.mcp._toolset import McpToolset
from anfitrion.store import MemoryStore
from anfitrion.telemetry import extracted_context, trace_meta

pytestmark = pytest.mark.anyio


async def test_a_call_carries_the_current_trace_to_the_server_in_meta(
        malicious: Callable[..., ServerConfig], store: MemoryStore,
        offer: OfferContext) -> None:
    tracer = TracerProvider().get_tracer("test")
    async with McpToolset(malicious(), store) as toolset:
        await toolset.refresh()
        await toolset.pins.approve("mal.meta", by="operator")
        with tracer.start_as_current_span("execute_tool mal.meta") as span:
            outcome = await through_gate(await toolset.list_tools(offer), "mal.meta", {},
                                         store)
    meta = json.loads(outcome.result.content)
    trace_id, span_id = meta["traceparent"].split("-")[1:3]
    assert trace_id == f"{span.get_span_context().trace_id:032x}"
    assert span_id == f"{span.get_span_context().span_id:016x}"


async def test_without_a_current_span_no_meta_is_sent(
        malicious: Callable[..., ServerConfig], store: MemoryStore,
        offer: OfferContext) -> None:
    assert trace_meta() is None
    async with McpToolset(malicious(), store) as toolset:
        await toolset.refresh()
        await toolset.pins.approve("mal.meta", by="operator")
        outcome = await through_gate(await toolset.list_tools(offer), "mal.meta", {}, store)
    assert "traceparent" not in outcome.result.content


def test_the_gateway_continues_an_incoming_trace() -> None:
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    with extracted_context({"traceparent": parent, "progressToken": 1}):
        carried = trace_meta()
    assert carried is not None
    assert carried["traceparent"].split("-")[1] == "0af7651916cd43dd8448eb211c80319c"
    with extracted_context(None):
        assert trace.get_current_span().get_span_context().is_valid is False
