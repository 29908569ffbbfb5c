"""Resource exhaustion through the model: one reply with hundreds of calls, or a session that
never stops calling. Both have defaults that hold without any configuration."""

from __future__ import annotations

from typing import Any

from anfitrion import Effect, GateLimits, Host, Reply, ScriptedModel, Toolbox
from anfitrion._conversation import ToolCall, ToolResult, UserMessage
from anfitrion._host import DEFAULT_MAX_TOOL_CALLS


def _tools(ran: list[int]) -> Toolbox:
    tools = Toolbox()

    @tools.tool(effect=Effect.READ, provenance="trusted")
    def ping(n: int) -> str:
        """Answer pong."""
        ran.append(n)
        return "pong"

    return tools


def _fan_out(count: int, start: int = 0) -> Reply:
    return Reply(tuple(ToolCall.from_object(f"c{start + i}", "ping", {"n": start + i})
                       for i in range(count)))


def _results(run: Any) -> list[ToolResult]:
    return [p for m in run.transcript if isinstance(m, UserMessage) for p in m.parts
            if isinstance(p, ToolResult)]


def test_a_reply_with_500_calls_runs_the_first_32_and_refuses_the_rest() -> None:
    ran: list[int] = []
    run = Host(model=ScriptedModel([_fan_out(500), "done"]), tools=_tools(ran)).run_sync("go")
    assert ran == list(range(32))
    results = _results(run)
    assert len(results) == 500  # every call is answered, paired to its id, in order
    assert [r.call_id for r in results] == [f"c{i}" for i in range(500)]
    refused = [r for r in results if r.error_kind == "too_many_calls"]
    assert len(refused) == 468 and "at most 32" in refused[0].content


def test_the_cap_per_reply_is_configurable_and_holds_for_any_size() -> None:
    for cap, size in ((1, 3), (5, 5), (8, 40)):
        ran: list[int] = []
        Host(model=ScriptedModel([_fan_out(size), "done"]), tools=_tools(ran),
             limits=GateLimits(max_calls_per_reply=cap)).run_sync("go")
        assert ran == list(range(min(cap, size)))


def test_a_session_has_a_default_budget_of_tool_calls() -> None:
    ran: list[int] = []
    replies: list[Any] = [_fan_out(25, 25 * i) for i in range(DEFAULT_MAX_TOOL_CALLS // 25 + 2)]
    host = Host(model=ScriptedModel([*replies, "done"]), tools=_tools(ran), max_turns=100)
    run = host.run_sync("go")
    assert len(ran) == DEFAULT_MAX_TOOL_CALLS
    assert run.status == "budget_exhausted"
