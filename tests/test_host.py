"""The host loop, driven through the public API with a scripted model (the gate's stages, driven
the same way: tests/test_gate.py)."""

from __future__ import annotations

import pytest

from anfitrion import (
    ApprovalAnswer,
    DeferredApprover,
    Effect,
    EventType,
    Host,
    Principal,
    Reply,
    RunStatus,
    ScriptedModel,
    StopSignal,
    Text,
    Tool,
    Toolbox,
    ToolContext,
    ToolResult,
    UserError,
    UserMessage,
)
from anfitrion._conversation import StopReason, ToolCall
from anfitrion.exceptions import SessionNotFound
from anfitrion.testing import EventCapture, MemoryStore, call


def weather_tools(executed: list[dict[str, object]] | None = None) -> Toolbox:
    tools = Toolbox()
    log = executed if executed is not None else []

    @tools.tool(effect=Effect.READ, provenance="trusted")
    def get_weather(location: str) -> dict[str, object]:
        """Get the current weather for a given location."""
        log.append({"location": location})
        return {"location": location, "temp_c": 15, "sky": "partly cloudy"}

    @tools.tool(effect=Effect.WRITE, provenance="trusted")
    def send_note(to: str, text: str) -> str:
        """Send a note."""
        log.append({"to": to, "text": text})
        return "sent"

    return tools


def results_of(run_transcript: object) -> list[ToolResult]:
    return [p for m in run_transcript if isinstance(m, UserMessage)  # type: ignore[attr-defined]
            for p in m.parts if isinstance(p, ToolResult)]


def test_lisboa_scenario_runs_the_tool_and_pairs_the_result_to_the_call_id() -> None:
    executed: list[dict[str, object]] = []
    model = ScriptedModel([call("get_weather", {"location": "Lisboa, PT"}, id="toolu_1"),
                           "15 °C and partly cloudy."])
    run = Host(model=model, tools=weather_tools(executed)).run_sync("Weather in Lisboa?",
                                                                    principal="alice")
    assert run.status is RunStatus.COMPLETED
    assert run.output == "15 °C and partly cloudy."
    assert executed == [{"location": "Lisboa, PT"}]
    [result] = results_of(run.transcript)
    assert result.call_id == "toolu_1"
    assert result.content == '{"location": "Lisboa, PT", "temp_c": 15, "sky": "partly cloudy"}'
    assert not result.is_error
    assert [c.verdict for c in run.calls] == ["allow"]
    # the model saw the tool and, on its second request, the result
    assert [t.name for t in model.requests[0].tools] == ["get_weather", "send_note"]
    assert model.requests[1].messages[2] == UserMessage((result,))  # a live view, not a copy


def test_several_calls_in_one_reply_are_gated_and_returned_together_in_order() -> None:
    executed: list[dict[str, object]] = []
    model = ScriptedModel([
        [call("get_weather", {"location": "Lisboa"}, id="a"), call("nope", {}, id="b"),
         call("get_weather", {"location": "Porto"}, id="c")],
        "ok",
    ])
    run = Host(model=model, tools=weather_tools(executed)).run_sync("hi")
    results = results_of(run.transcript)
    assert [r.call_id for r in results] == ["a", "b", "c"]
    assert [r.is_error for r in results] == [False, True, False]
    assert len([m for m in run.transcript if isinstance(m, UserMessage)]) == 2


def test_duplicate_call_ids_fail_the_run_and_run_nothing() -> None:
    executed: list[dict[str, object]] = []
    model = ScriptedModel([[call("get_weather", {"location": "a"}, id="x"),
                            call("get_weather", {"location": "b"}, id="x")]])
    run = Host(model=model, tools=weather_tools(executed)).run_sync("hi")
    assert run.status is RunStatus.FAILED
    assert "two tool calls with the id 'x'" in (run.error or "")
    assert executed == []


def test_an_empty_reply_fails_the_run_clearly() -> None:
    run = Host(model=ScriptedModel([Reply(())]), tools=weather_tools()).run_sync("hi")
    assert run.status is RunStatus.FAILED
    assert run.error == "the model sent an empty reply"


def test_a_model_error_fails_the_run_without_raising() -> None:
    run = Host(model=ScriptedModel([]), tools=weather_tools()).run_sync("hi")
    assert run.status is RunStatus.FAILED
    assert "scripted model has no step 1" in (run.error or "")


def test_the_turn_limit_ends_the_loop() -> None:
    model = ScriptedModel(lambda r: call("get_weather", {"location": "Lisboa"}))
    run = Host(model=model, tools=weather_tools(), max_turns=3).run_sync("loop")
    assert run.status is RunStatus.TURN_LIMIT
    assert len(model.requests) == 3


def test_the_tool_call_budget_ends_the_loop() -> None:
    model = ScriptedModel(lambda r: call("get_weather", {"location": "Lisboa"}))
    run = Host(model=model, tools=weather_tools(), max_turns=10,
               max_tool_calls=2).run_sync("loop")
    assert run.status is RunStatus.BUDGET_EXHAUSTED
    assert [r.error_kind for r in results_of(run.transcript)] == [None, None, "budget_exhausted"]


def test_a_stop_signal_stops_before_the_next_turn() -> None:
    stop = StopSignal()
    tools = Toolbox()

    @tools.tool(effect=Effect.READ)
    def halt(x: str) -> str:
        """Asks the host to stop."""
        stop.stop()
        return "stopping"

    model = ScriptedModel(lambda r: call("halt", {"x": "a"}))
    run = Host(model=model, tools=tools).run_sync("go", stop=stop)
    assert run.status is RunStatus.STOPPED
    assert len(model.requests) == 1


@pytest.mark.anyio
async def test_run_sync_refuses_to_run_inside_an_event_loop() -> None:
    host = Host(model=ScriptedModel(["hi"]))
    with pytest.raises(UserError, match="inside a running event loop"):
        host.run_sync("hello")


def test_tools_receive_the_principal_and_context() -> None:
    seen: list[tuple[str, str]] = []
    tools = Toolbox()

    @tools.tool(effect=Effect.READ)
    def whoami(principal: Principal, context: ToolContext) -> str:
        """Who is asking."""
        seen.append((principal.id, context.call_id))
        return principal.id

    Host(model=ScriptedModel([call("whoami", {}, id="c1"), "ok"]), tools=tools).run_sync(
        "hi", principal=Principal("alice", scopes=frozenset({"x"})))
    assert seen == [("alice", "c1")]


def test_tools_needing_scopes_are_not_offered_to_principals_without_them() -> None:
    tools = Toolbox([Tool.from_schema("admin_reset", {"type": "object"}, lambda a: "reset",
                                      effect=Effect.READ, scopes={"admin"})])
    model = ScriptedModel([call("admin_reset", {}), "ok"])
    run = Host(model=model, tools=tools).run_sync("hi", principal="bob")
    assert model.requests[0].tools == ()
    assert results_of(run.transcript)[0].error_kind == "unknown_tool"
    admin = Principal("root", scopes=frozenset({"admin"}))
    model2 = ScriptedModel([call("admin_reset", {}), "ok"])
    run2 = Host(model=model2, tools=tools).run_sync("hi", principal=admin)
    assert results_of(run2.transcript)[0].content == "reset"


def test_a_session_continues_with_a_new_prompt() -> None:
    host = Host(model=ScriptedModel(["first", "second"]))
    one = host.run_sync("a", principal="alice")
    two = host.run_sync("b", principal="alice", session_id=one.session_id)
    assert two.output == "second"
    assert len(two.transcript) == 4
    with pytest.raises(UserError, match="another principal"):
        host.run_sync("c", principal="mallory", session_id=one.session_id)


@pytest.mark.anyio
async def test_a_deferred_approval_suspends_and_resume_runs_the_call_once() -> None:
    executed: list[dict[str, object]] = []
    store = MemoryStore()
    model = ScriptedModel([
        [call("get_weather", {"location": "Lisboa"}, id="r1"),
         call("send_note", {"to": "bob", "text": "15 °C"}, id="w1")],
        "sent",
    ])
    host = Host(model=model, tools=weather_tools(executed), store=store,
                approver=DeferredApprover())
    run = await host.run("tell bob", principal="alice")
    assert run.status is RunStatus.SUSPENDED
    assert executed == [{"location": "Lisboa"}]  # the allowed call ran; the write waits
    [request] = run.pending
    assert request.arguments == {"to": "bob", "text": "15 °C"}

    # a second process: same store, new host
    other = Host(model=model, tools=weather_tools(executed), store=store,
                 approver=DeferredApprover())
    still = await other.resume(run.session_id)
    assert still.status is RunStatus.SUSPENDED  # nobody answered yet

    assert await store.answer_approval(ApprovalAnswer.to(request, True, "carol"))
    done = await other.resume(run.session_id)
    assert done.status is RunStatus.COMPLETED
    assert done.output == "sent"
    assert executed == [{"location": "Lisboa"}, {"to": "bob", "text": "15 °C"}]
    results = results_of(done.transcript)
    assert [r.call_id for r in results] == ["r1", "w1"]
    with pytest.raises(UserError, match="not suspended"):
        await other.resume(run.session_id)
    with pytest.raises(SessionNotFound):
        await other.resume("nope")


@pytest.mark.anyio
async def test_a_denied_deferred_approval_is_a_denial_on_resume() -> None:
    executed: list[dict[str, object]] = []
    store = MemoryStore()
    model = ScriptedModel([call("send_note", {"to": "bob", "text": "x"}), "not sent"])
    host = Host(model=model, tools=weather_tools(executed), store=store,
                approver=DeferredApprover())
    run = await host.run("send", principal="alice")
    await store.answer_approval(ApprovalAnswer.to(run.pending[0], False, "carol", "no"))
    done = await host.resume(run.session_id)
    assert results_of(done.transcript)[0].content == "declined by a person: no"
    assert executed == []


def test_every_stage_emits_an_event() -> None:
    capture = EventCapture()
    model = ScriptedModel([call("get_weather", {"location": "Lisboa"}), "ok"])
    Host(model=model, tools=weather_tools(), listeners=[capture]).run_sync("hi")
    assert capture.types() == [
        EventType.RUN_STARTED, EventType.MODEL_REQUESTED, EventType.MODEL_REPLIED,
        EventType.CALL_PROPOSED, EventType.CALL_VALIDATED, EventType.CALL_DECIDED,
        EventType.RESULT_RETURNED, EventType.MODEL_REQUESTED, EventType.MODEL_REPLIED,
        EventType.RUN_ENDED,
    ]


def test_a_failing_listener_does_not_break_the_run() -> None:
    def broken(event: object) -> None:
        raise RuntimeError("listener bug")

    run = Host(model=ScriptedModel(["hi"]), listeners=[broken]).run_sync("hello")
    assert run.status is RunStatus.COMPLETED


def test_a_call_without_an_id_fails_the_run() -> None:
    reply = Reply((ToolCall.from_object("", "get_weather", {"location": "x"}),),
                  StopReason.TOOL_USE)
    run = Host(model=ScriptedModel([reply]), tools=weather_tools()).run_sync("hi")
    assert run.status is RunStatus.FAILED


def test_text_and_calls_in_one_reply_keep_their_order() -> None:
    reply = Reply((Text("Let me check."), call("get_weather", {"location": "x"})),
                  StopReason.TOOL_USE)
    run = Host(model=ScriptedModel([reply, "done"]), tools=weather_tools()).run_sync("hi")
    assert run.transcript[1] == reply
