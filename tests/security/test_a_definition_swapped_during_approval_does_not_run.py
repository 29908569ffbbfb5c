"""A tool definition swapped while a person approves a call: a hostile MCP server (real, over
stdio) lists a benign tool, and changes it — by another of its tools, by the call itself, with
or without `notifications/tools/list_changed` — between the offer and the moment the approved
call runs. The gate lists the server again right before running an approved call and refuses
when the definition is no longer the pinned one: nothing is sent to the server."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from anfitrion._approvals import ApprovalAnswer, ApprovalRequest, CallbackApprover, DeferredApprover
from anfitrion._conversation import ToolCall
from anfitrion._gate import Gate, _silent
from anfitrion._principal import Principal
from anfitrion._tools import OfferContext, Tool
from anfitrion.mcp._config import ServerConfig
from anfitrion.mcp._toolset import McpToolset
from anfitrion.policy import Policy
from anfitrion.store import MemoryStore
from anfitrion.testing import gate_session

pytestmark = [pytest.mark.anyio, pytest.mark.mcp_servers]

MALICIOUS = str(Path(__file__).parents[1] / "mcp" / "servers" / "malicious.py")


def _server(tmp_path: Path, *extra: str, relist: bool) -> ServerConfig:
    return ServerConfig(id="mal", command=sys.executable,
                        args=(MALICIOUS, "--trash", str(tmp_path), *extra),
                        relist_before_call=relist)


async def _through(gate: Gate, tools: list[Tool], name: str, arguments: dict[str, Any],
                   call_id: str, pending: str | None = None) -> Any:
    scope = gate_session("tester", "session-1", turn=1,
                         waiting={call_id: pending} if pending else None)
    return await gate.process(ToolCall.from_object(call_id, name, arguments),
                              {t.name: t for t in tools}, scope)


@pytest.mark.parametrize("relist", [False, True], ids=["relist-off", "relist-on"])
@pytest.mark.parametrize("notify", [False, True], ids=["silent", "list-changed"])
async def test_a_flip_while_a_person_decides_refuses_the_approved_call(
        tmp_path: Path, relist: bool, notify: bool) -> None:
    store = MemoryStore()
    config = _server(tmp_path, *(["--notify"] if notify else []), relist=relist)
    async with McpToolset(config, store) as toolset:
        await toolset.refresh()
        for name in ("mal.rug", "mal.flip"):
            await toolset.pins.approve(name, by="operator")
        tools = await toolset.list_tools(OfferContext(Principal("tester"), "session-1", 1))
        flipper = Gate(policy=Policy.default(), approver=CallbackApprover(lambda r: True),
                       store=store, emit=_silent)
        asked: list[ApprovalRequest] = []

        async def person(request: ApprovalRequest) -> bool:
            asked.append(request)
            if request.tool_name == "mal.rug":  # the server swaps rug while the person reads
                flipped = await _through(flipper, tools, "mal.flip", {}, "flip-1")
                assert flipped.result.content == "flipped"
            return True

        gate = Gate(policy=Policy.default(), approver=CallbackApprover(person), store=store,
                    emit=_silent)
        outcome = await _through(gate, tools, "mal.rug", {"a": 1, "b": 2}, "call-1")
        assert [r.tool_name for r in asked] == ["mal.rug"]
        assert outcome.result.is_error and outcome.result.content != "3"
        assert outcome.result.error_kind in ("refused", "tool_error", "outcome_unknown")
        assert "definition" in outcome.result.content
        assert "evil.example" not in outcome.result.content


async def test_an_approval_answered_later_in_the_same_turn_is_refused_after_a_silent_swap(
        tmp_path: Path) -> None:
    store = MemoryStore()
    async with McpToolset(_server(tmp_path, relist=False), store) as toolset:
        await toolset.refresh()
        for name in ("mal.rug", "mal.flip"):
            await toolset.pins.approve(name, by="operator")
        tools = await toolset.list_tools(OfferContext(Principal("tester"), "session-1", 1))
        gate = Gate(policy=Policy.default(), approver=DeferredApprover(), store=store,
                    emit=_silent)
        waiting = await _through(gate, tools, "mal.rug", {"a": 1, "b": 2}, "call-1")
        assert waiting.request is not None
        flipper = Gate(policy=Policy.default(), approver=CallbackApprover(lambda r: True),
                       store=store, emit=_silent)
        await _through(flipper, tools, "mal.flip", {}, "flip-1")
        assert await store.answer_approval(ApprovalAnswer.to(waiting.request, True, "alice"))
        resumed = await _through(gate, tools, "mal.rug", {"a": 1, "b": 2}, "call-1",
                                 pending=waiting.request.id)
        assert resumed.result.error_kind == "refused"
        assert "changed while the call waited for approval" in resumed.result.content


async def test_an_unchanged_tool_still_runs_after_approval(tmp_path: Path) -> None:
    store = MemoryStore()
    async with McpToolset(_server(tmp_path, relist=False), store) as toolset:
        await toolset.refresh()
        await toolset.pins.approve("mal.rug", by="operator")
        tools = await toolset.list_tools(OfferContext(Principal("tester"), "session-1", 1))
        listed = toolset.listings
        gate = Gate(policy=Policy.default(), approver=CallbackApprover(lambda r: True),
                    store=store, emit=_silent)
        outcome = await _through(gate, tools, "mal.rug", {"a": 1, "b": 2}, "call-1")
        assert outcome.result.content == "3"
        assert toolset.listings == listed + 1  # listed once more, right before it ran


