"""The client toolset speaks 2026-07-28 to a server that does (``server/discover``): a question
the server asks in an ``input_required`` result is answered by the application's elicitation
handler, checked exactly as a server-to-client ``elicitation/create`` is (flat schema, no
secrets, defaults, the answer against the schema), and the call is sent again with the answer
and the server's ``requestState`` echoed. Sampling and URL mode stay refused.

A real server process (``servers/asking.py``, the official SDK), in both revisions."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")
from gateway_helpers import approve_all
from mcp_helpers import through_gate

from anfitrion._principal import Principal
from anfitrion._tools import OfferContext
from anfitrion.mcp import Elicitation, ElicitationAnswer
from anfitrion.mcp._config import ServerConfig
from anfitrion.mcp._toolset import McpToolset
from anfitrion.store import MemoryStore

pytestmark = [pytest.mark.anyio, pytest.mark.mcp_servers]

ASKING = str(Path(__file__).parent / "servers" / "asking.py")


def asking(**options: Any) -> ServerConfig:
    return ServerConfig(id="ask", command=sys.executable, args=(ASKING,), **options)


async def call(config: ServerConfig, store: MemoryStore, tool: str, arguments: dict[str, Any],
               **toolset: Any) -> tuple[str, bool, str | None]:
    """The call's result text, whether it is an error, and the revision spoken."""
    await approve_all([config], store)
    with anyio.fail_after(60):
        async with McpToolset(config, store, **toolset) as tools:
            offered = await tools.list_tools(OfferContext(Principal("tester"), "session-1"))
            conn = tools._connection
            assert conn is not None and conn.session is not None
            version = conn.session.protocol_version
            outcome = await through_gate(offered, f"ask.{tool}", arguments, store)
    return str(outcome.result.content), outcome.result.is_error, version


async def relayed(store: MemoryStore) -> list[str]:
    return [str(r.data["detail"]) for r in await store.audit_records()
            if r.type == "mcp.relayed"]


async def test_the_handler_answers_and_the_request_state_comes_back() -> None:
    store, asked = MemoryStore(), []

    async def person(question: Elicitation) -> ElicitationAnswer:
        asked.append(question)
        return ElicitationAnswer("accept", {"name": "Grace"})

    text, error, version = await call(asking(elicitation=True), store, "ask", {"kind": "form"},
                                      elicitation=person)
    assert version == "2026-07-28"
    # the server read the answer only because its requestState came back byte for byte
    assert not error and text == "elicited: accept " + json.dumps(
        {"age": 36, "colour": "green", "name": "Grace", "subscribe": False}, sort_keys=True)
    (question,) = asked
    assert (question.message, question.tool, question.session_id) == (
        "Who are you?", "ask.ask", "session-1")
    (detail,) = await relayed(store)
    assert detail.startswith("accepted by the person") and "Grace" not in detail


@pytest.mark.parametrize("kind", ["secret", "format_password", "api_key", "nested", "ref",
                                  "pattern", "huge_enum", "url"])
async def test_a_question_the_relay_refuses_is_refused_in_an_input_required_result(
        kind: str) -> None:
    """The same checks as a server-to-client request: the person never sees it, the call
    fails with the reason, and nothing the person could type reaches the server."""
    store, asked = MemoryStore(), []

    async def person(question: Elicitation) -> ElicitationAnswer:
        asked.append(question)
        return ElicitationAnswer("accept", {"password": "hunter2", "apiKey": "sk-1"})

    text, error, version = await call(asking(elicitation=True), store, "ask", {"kind": kind},
                                      elicitation=person)
    assert version == "2026-07-28"
    assert asked == [] and error and "refused by anfitrion" in text
    assert "hunter2" not in text and "sk-1" not in text
    (detail,) = await relayed(store)
    assert detail.startswith("refused")


async def test_without_the_servers_permission_the_person_is_not_asked() -> None:
    store, asked = MemoryStore(), []

    async def person(question: Elicitation) -> ElicitationAnswer:
        asked.append(question)
        return ElicitationAnswer("accept")

    text, error, _ = await call(asking(), store, "ask", {"kind": "form"}, elicitation=person)
    assert error and '"elicitation": true' in text and asked == []


async def test_sampling_in_an_input_required_result_is_refused() -> None:
    store = MemoryStore()
    text, error, version = await call(asking(sampling=True), store, "sample", {})
    assert version == "2026-07-28"
    assert error and "does not let MCP servers use its model" in text
    assert "delete_everything" not in text
    (detail,) = await relayed(store)
    assert detail.startswith("refused")


async def test_legacy_keeps_the_handshake() -> None:
    store = MemoryStore()

    async def person(question: Elicitation) -> ElicitationAnswer:
        return ElicitationAnswer("accept", {"name": "Ada"})

    text, error, version = await call(asking(elicitation=True, protocol="legacy"), store, "ask",
                                      {"kind": "form"}, elicitation=person)
    assert version == "2025-11-25" and not error and text.startswith("elicited: accept")
