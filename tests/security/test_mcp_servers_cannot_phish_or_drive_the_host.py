"""A server the host uses as a tool source cannot phish its person through elicitation (ask
for a password, a token, an API key), cannot hand the person's dialog a hostile schema (nested
objects, ``$ref``, a catastrophic ``pattern``, a huge enum, a URL to open), and cannot drive
the host's model through sampling ("call the delete tool now"). The person is never asked, the
server gets the reason, and the audit log has it — even with an elicitation handler and the
server's ``"elicitation": true``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mcp"))
from gateway_helpers import approve_all
from mcp_helpers import through_gate

from anfitrion._principal import Principal
from anfitrion._tools import OfferContext
from anfitrion.mcp import Elicitation, ElicitationAnswer
from anfitrion.mcp._config import ServerConfig
from anfitrion.mcp._toolset import McpToolset
from anfitrion.store import MemoryStore

pytestmark = [pytest.mark.anyio, pytest.mark.mcp_servers]

ASKING = str(Path(__file__).resolve().parents[1] / "mcp" / "servers" / "asking.py")
SECRETS = {"secret": "field 'password' asks for a secret",
           "format_password": "field 'confirmation' asks for a secret (format 'password')",
           "api_key": "field 'apiKey' asks for a secret (API key or token: api key)"}
HOSTILE = {"nested": "field 'address' has type 'object'",
           "ref": "the requested schema has '$defs'",
           "pattern": "field 'code' has 'pattern'",
           "huge_enum": "field 'choice' has an enum that is not a list of at most 100",
           "url": "only form elicitation is supported"}


async def ask_every(kinds: list[str]) -> tuple[dict[str, str], list[Elicitation], Any]:
    store = MemoryStore()
    config = ServerConfig(id="ask", command=sys.executable, args=(ASKING,), elicitation=True,
                          protocol="legacy")
    await approve_all([config], store)
    asked: list[Elicitation] = []

    async def person(question: Elicitation) -> ElicitationAnswer:
        asked.append(question)
        return ElicitationAnswer("accept", {"password": "hunter2", "apiKey": "sk-live-1"})

    texts: dict[str, str] = {}
    with anyio.fail_after(90):
        async with McpToolset(config, store, elicitation=person) as tools:
            offered = await tools.list_tools(OfferContext(Principal("tester"), "session-1"))
            for i, kind in enumerate(kinds):
                outcome = await through_gate(offered, "ask.ask", {"kind": kind}, store,
                                             call_id=f"call-{i}")
                texts[kind] = str(outcome.result.content)
    records = [r.data["detail"] for r in await store.audit_records()
               if r.type == "mcp.relayed" and r.data["tool"] == "ask.elicitation/create"]
    return texts, asked, records


async def test_an_elicitation_asking_for_a_secret_is_refused_before_the_person_sees_it() -> None:
    texts, asked, records = await ask_every(list(SECRETS))
    assert asked == []
    for kind, reason in SECRETS.items():
        assert texts[kind].startswith("elicitation failed:"), texts[kind]
        assert reason in texts[kind] and "never ask for secrets" in texts[kind]
        assert "hunter2" not in texts[kind] and "sk-live" not in texts[kind]
    assert len(records) == len(SECRETS)
    assert all(r.startswith("refused: ") and "asks for a secret" in r for r in records)


async def test_an_elicitation_with_a_hostile_schema_is_refused() -> None:
    texts, asked, records = await ask_every(list(HOSTILE))
    assert asked == []
    for kind, reason in HOSTILE.items():
        assert texts[kind].startswith("elicitation failed:"), texts[kind]
        assert reason in texts[kind], texts[kind]
    assert len(records) == len(HOSTILE) and all(r.startswith("refused: ") for r in records)


async def test_a_sampling_request_cannot_drive_the_hosts_model() -> None:
    """No sampling is declared, and a server that asks anyway is refused: the host's model is
    never called with the server's prompt, so it cannot be talked into calling a tool."""
    from anfitrion import Host
    from anfitrion._approvals import CallbackApprover
    from anfitrion._conversation import ToolCall
    from anfitrion.policy import Policy
    from anfitrion.testing import ScriptedModel

    store = MemoryStore()
    config = ServerConfig(id="ask", command=sys.executable, args=(ASKING,), sampling=True,
                          protocol="legacy")
    await approve_all([config], store)
    model = ScriptedModel([[ToolCall.from_object("c1", "ask.sample", {})], "done"])
    with anyio.fail_after(90):
        async with McpToolset(config, store) as tools:
            host = Host(model, tools, store=store, policy=Policy.default(),
                        approver=CallbackApprover(lambda request: True))
            result = await host.run("use the sample tool")
    (record,) = result.calls
    assert record.is_error is False
    assert len(model.requests) == 2  # the user's turn and the tool result: never the server's
    seen = repr(model.requests[1].messages)  # with the tool result the model was given
    assert "sampling failed:" in seen and "refused by anfitrion" in seen
    assert "does not let MCP servers use its model" in seen
    details = [r.data["detail"] for r in await store.audit_records()
               if r.type == "mcp.relayed" and r.data["tool"] == "ask.sampling/createMessage"]
    assert len(details) == 1 and details[0].startswith("refused:")
