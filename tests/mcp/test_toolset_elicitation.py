"""The client toolset asks the host's person when a server elicits during a call — only with
an application handler and the server's ``"elicitation": true`` — and applies the schema's
defaults (SEP-1034); every request and answer is audited."""

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
    # the older revisions: the server asks with server-to-client requests
    return ServerConfig(id="ask", command=sys.executable, args=(ASKING,), protocol="legacy",
                        **options)


async def call(config: ServerConfig, store: MemoryStore, tool: str,
               arguments: dict[str, Any], call_id: str = "call-1", **toolset: Any) -> str:
    await approve_all([config], store)
    with anyio.fail_after(60):
        async with McpToolset(config, store, **toolset) as tools:
            offered = await tools.list_tools(OfferContext(Principal("tester"), "session-1"))
            outcome = await through_gate(offered, f"ask.{tool}", arguments, store,
                                         call_id=call_id)
    assert not outcome.result.is_error, outcome.result.content
    return str(outcome.result.content)


async def relayed(store: MemoryStore) -> list[dict[str, Any]]:
    return [dict(r.data, session=r.session_id) for r in await store.audit_records()
            if r.type == "mcp.relayed"]


async def test_the_person_accepts_and_the_fields_left_out_get_their_defaults() -> None:
    store = MemoryStore()
    asked: list[Elicitation] = []

    async def person(question: Elicitation) -> ElicitationAnswer:
        asked.append(question)
        return ElicitationAnswer("accept", {"name": "Grace"})

    text = await call(asking(elicitation=True), store, "ask", {"kind": "form"},
                      elicitation=person)
    assert text == 'elicited: accept ' + json.dumps(
        {"age": 36, "colour": "green", "name": "Grace", "subscribe": False}, sort_keys=True)
    (question,) = asked
    assert (question.server, question.message, question.tool) == ("ask", "Who are you?",
                                                                  "ask.ask")
    assert question.fields == ["name", "age", "colour", "subscribe"]
    assert question.session_id == "session-1"
    (record,) = await relayed(store)
    assert record["tool"] == "ask.elicitation/create" and record["session"] == "session-1"
    assert record["detail"].startswith("accepted by the person: age, colour, name, subscribe")
    assert "defaults applied: age, colour, subscribe" in record["detail"]
    assert "Grace" not in record["detail"]  # the audit log names fields, never the values


@pytest.mark.parametrize("action", ["decline", "cancel"])
async def test_the_person_declines_or_cancels(action: Any) -> None:
    store = MemoryStore()

    async def person(question: Elicitation) -> ElicitationAnswer:
        return ElicitationAnswer(action)

    text = await call(asking(elicitation=True), store, "ask", {"kind": "form"},
                      elicitation=person)
    assert text == f"elicited: {action} null"
    (record,) = await relayed(store)
    assert record["detail"].startswith(f"{action}d by the person")


async def test_an_answer_that_breaks_the_schema_never_reaches_the_server() -> None:
    store = MemoryStore()

    async def person(question: Elicitation) -> ElicitationAnswer:
        return ElicitationAnswer("accept", {"name": "Grace", "age": "old", "extra": 1})

    text = await call(asking(elicitation=True), store, "ask", {"kind": "form"},
                      elicitation=person)
    assert text.startswith("elicitation failed:") and "does not match" in text
    assert "old" not in text
    (record,) = await relayed(store)
    assert record["detail"].startswith("answer dropped")


@pytest.mark.parametrize(("handler", "allowed", "declared", "reason"), [
    (False, True, False, "no elicitation handler"),
    (True, False, False, '"elicitation": true'),
    (True, True, True, None),
])
async def test_elicitation_is_declared_only_with_a_handler_and_the_servers_permission(
        handler: bool, allowed: bool, declared: bool, reason: str | None) -> None:
    store = MemoryStore()
    asked: list[Elicitation] = []

    async def person(question: Elicitation) -> ElicitationAnswer:
        asked.append(question)
        return ElicitationAnswer("accept")

    options = {"elicitation": person} if handler else {}
    caps = await call(asking(elicitation=allowed), store, "caps", {}, **options)
    assert json.loads(caps) == {"elicitation": declared, "sampling": False}
    # a server that asks anyway gets the reason (and the audit log has it)
    text = await call(asking(elicitation=allowed), store, "ask", {"kind": "form"}, "call-2",
                      **options)
    if reason is None:
        assert text.startswith("elicited: accept") and len(asked) == 1
        return
    assert text.startswith("elicitation failed:") and reason in text and asked == []
    (record,) = await relayed(store)
    assert record["detail"].startswith("refused:") and reason in record["detail"]
