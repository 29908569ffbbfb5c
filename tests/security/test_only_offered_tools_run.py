"""Attacks on resolve: a hostile model names tools that were not offered to it."""

from __future__ import annotations

from typing import Any

import pytest

from anfitrion import DeferredApprover, Effect, Host, Principal, Tool, Toolbox
from anfitrion._tools import OfferContext
from anfitrion.models._scripted import ScriptedModel, call
from anfitrion.store import MemoryStore


def _tools(ran: list[str]) -> Toolbox:
    tools = Toolbox()

    @tools.tool(effect=Effect.WRITE)
    def write_draft(path: str) -> str:
        """Write a draft."""
        ran.append(path)
        return "written"

    return tools


@pytest.mark.anyio
@pytest.mark.parametrize("name", [
    "Write_Draft", "WRITE_DRAFT", "write_draft ", " write_draft", "write_draft\n",
    "write_draft\u200b", "\u200bwrite_draft", "write\u00addraft", "write-draft", "write.draft",
    "ｗrite_draft", "write_draſt", "write_draft\x00", "write_draft\x00rm", "wrіte_draft",
    "functions.write_draft", "default_api.write_draft", "write_draft()", "*", "", "x" * 10_000,
])
async def test_a_name_that_is_not_byte_for_byte_an_offered_tool_runs_nothing(
        hostile: Any, name: str) -> None:
    ran: list[str] = []
    outcome = await hostile(_tools(ran), [call(name, {"path": "a.md"})])
    assert outcome.result.error_kind == "unknown_tool"
    assert ran == [] and outcome.asked == []
    assert len(outcome.result.content) < 300


@pytest.mark.anyio
async def test_a_registered_tool_that_is_not_offered_this_turn_cannot_be_called(
        hostile: Any) -> None:
    ran: list[str] = []
    hidden = Toolbox(list(_tools(ran)), offer=lambda tool, context: False)
    outcome = await hostile(hidden, [call("write_draft", {"path": "a.md"})])
    assert outcome.result.error_kind == "unknown_tool"
    assert ran == [] and outcome.asked == []


@pytest.mark.anyio
async def test_a_tool_offered_only_in_an_earlier_turn_cannot_be_called_later(
        hostile: Any) -> None:
    ran: list[str] = []

    def first_turn_only(tool: Tool, context: OfferContext) -> bool:
        return context.turn == 0

    tools = Toolbox(list(_tools(ran)), offer=first_turn_only)
    outcome = await hostile(tools, [call("write_draft", {"path": "a.md"}),
                                    call("write_draft", {"path": "b.md"})])
    assert [r.error_kind for r in outcome.results] == [None, "unknown_tool"]
    assert ran == ["a.md"]


@pytest.mark.anyio
async def test_a_tool_needing_a_scope_the_principal_lacks_is_never_run(hostile: Any) -> None:
    ran: list[str] = []
    tool = Tool.from_function(lambda: ran.append("x"), name="admin_reset", effect=Effect.READ,
                              scopes={"admin"})
    outcome = await hostile([tool], [call("admin_reset", {})], principal=Principal("eve"))
    assert outcome.result.is_error
    assert ran == []


@pytest.mark.anyio
async def test_a_call_waiting_for_approval_is_refused_on_resume_when_the_tool_is_withdrawn(
        ) -> None:
    ran: list[str] = []
    store = MemoryStore()
    host = Host(model=ScriptedModel([call("write_draft", {"path": "a.md"}), "done"]),
                tools=_tools(ran), approver=DeferredApprover(), store=store)
    run = await host.run("go", principal="alice")
    assert run.status == "suspended"
    from anfitrion._approvals import ApprovalAnswer
    assert await store.answer_approval(ApprovalAnswer.to(run.pending[0], True, "bob"))
    withdrawn = Host(model=ScriptedModel(["done"]), tools=Toolbox(), store=store)
    resumed = await withdrawn.resume(run.session_id)
    assert resumed.transcript.tool_results[-1].error_kind == "unknown_tool"
    assert ran == []


@pytest.mark.anyio
@pytest.mark.parametrize("zone", ["../../../etc/passwd", "/etc/localtime", "Europe/../UTC",
                                  "europe/lisbon", "Europe/Lisbon\x00", "posix/../UTC", ""])
async def test_a_time_zone_that_is_a_path_or_not_exactly_a_zone_name_is_refused(
        hostile: Any, zone: str) -> None:
    from anfitrion.toolkits import clock

    outcome = await hostile([clock()], [call("current_time", {"zone": zone})])
    assert outcome.result.error_kind == "invalid_arguments"


@pytest.mark.anyio
async def test_a_call_whose_name_is_not_a_string_runs_nothing(hostile: Any) -> None:
    from anfitrion._conversation import ToolCall

    ran: list[str] = []
    outcome = await hostile(_tools(ran), [ToolCall("c1", None, "{}")])  # type: ignore[arg-type]
    assert outcome.run.status == "failed"
    assert outcome.run.error == "the model sent a tool call whose name or arguments are not text"
    assert ran == []
