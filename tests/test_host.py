"""The host loop and the gate, driven through the public API with a scripted model."""

from __future__ import annotations

import logging

import anyio
import pytest

from anfitrion import (
    ApprovalAnswer,
    CallbackApprover,
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
    ToolError,
    ToolResult,
    UserError,
    UserMessage,
)
from anfitrion._conversation import StopReason, ToolCall
from anfitrion.exceptions import SessionNotFound
from anfitrion.models import ModelRequest
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


@pytest.mark.parametrize("name", ["delete_file", "get_wether", "GET_WEATHER", "get_weather ",
                                  "get_weather\u200b"])
def test_unknown_tool_returns_error_result_without_fuzzy_matching(name: str) -> None:
    executed: list[dict[str, object]] = []
    model = ScriptedModel([call(name, {"location": "x"}), "ok"])
    run = Host(model=model, tools=weather_tools(executed)).run_sync("hi")
    [result] = results_of(run.transcript)
    assert result.is_error and result.error_kind == "unknown_tool"
    assert result.content.startswith("unknown tool ")
    assert executed == []
    assert run.status is RunStatus.COMPLETED


def test_a_registered_tool_that_is_not_offered_cannot_be_called() -> None:
    tools = Toolbox(list(weather_tools()), offer=lambda tool, ctx: tool.name != "send_note")
    model = ScriptedModel([call("send_note", {"to": "a", "text": "b"}), "ok"])
    run = Host(model=model, tools=tools).run_sync("hi")
    [result] = results_of(run.transcript)
    assert result.error_kind == "unknown_tool"


def test_invalid_arguments_become_an_error_result_the_model_can_fix() -> None:
    executed: list[dict[str, object]] = []

    def respond(request: ModelRequest) -> object:
        last = request.messages[-1]
        if isinstance(last, UserMessage) and isinstance(last.parts[0], ToolResult):
            if last.parts[0].is_error:
                return call("get_weather", {"location": "Porto, PT"})
            return "done"
        return call("get_weather", {"location": 42, "extra": True})

    run = Host(model=ScriptedModel(respond), tools=weather_tools(executed)).run_sync("hi")  # type: ignore[arg-type]
    first, second = results_of(run.transcript)
    assert first.error_kind == "invalid_arguments"
    assert "location: 42 is not of type 'string'" in first.content
    assert "unexpected properties 'extra'" in first.content
    assert not second.is_error
    assert executed == [{"location": "Porto, PT"}]
    assert run.status is RunStatus.COMPLETED


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ('{"location": "a", "location": "b"}', "duplicate key"),
        ('{"location": NaN}', "NaN"),
        ("{not json", "invalid JSON"),
        ("[" * 50 + "]" * 50, "nesting deeper"),
        ('"just a string"', "must be a JSON object"),
        ('{"location": "' + "x" * 300_000 + '"}', "limit"),
    ],
)
def test_malformed_argument_text_is_an_error_result(raw: str, problem: str) -> None:
    executed: list[dict[str, object]] = []
    model = ScriptedModel([call("get_weather", raw=raw), "ok"])
    run = Host(model=model, tools=weather_tools(executed)).run_sync("hi")
    [result] = results_of(run.transcript)
    assert result.error_kind == "invalid_arguments"
    assert problem in result.content
    assert executed == []


def test_retries_are_bounded_per_tool() -> None:
    bad = call("get_weather", {"location": 1})
    model = ScriptedModel(lambda request: call("get_weather", {"location": 1}))
    run = Host(model=model, tools=weather_tools(), max_turns=20).run_sync("hi")
    assert run.status is RunStatus.BUDGET_EXHAUSTED
    kinds = [r.error_kind for r in results_of(run.transcript)]
    assert kinds == ["invalid_arguments"] * 3 + ["retry_limit"]
    assert bad.name == "get_weather"


def test_write_without_an_approver_is_denied_saying_a_person_must_approve() -> None:
    executed: list[dict[str, object]] = []
    model = ScriptedModel([call("send_note", {"to": "bob", "text": "hi"}), "could not"])
    run = Host(model=model, tools=weather_tools(executed)).run_sync("send it")
    [result] = results_of(run.transcript)
    assert result.error_kind == "denied"
    assert "a person must approve" in result.content
    assert executed == []
    assert run.calls[0].verdict == "ask"


def test_an_approver_sees_the_exact_arguments_and_its_yes_runs_them() -> None:
    executed: list[dict[str, object]] = []
    seen = []

    def approve(request: object) -> bool:
        seen.append(request)
        return True

    model = ScriptedModel([call("send_note", {"to": "bob", "text": "hi"}), "sent"])
    run = Host(model=model, tools=weather_tools(executed),
               approver=CallbackApprover(approve)).run_sync("send it", principal="alice")
    assert executed == [{"to": "bob", "text": "hi"}]
    [request] = seen
    assert request.arguments == {"to": "bob", "text": "hi"}  # type: ignore[attr-defined]
    assert request.principal_id == "alice"  # type: ignore[attr-defined]
    assert "to = bob" in request.describe()  # type: ignore[attr-defined]
    assert run.status is RunStatus.COMPLETED


def test_an_approvers_no_is_a_denial_the_model_sees() -> None:
    executed: list[dict[str, object]] = []
    model = ScriptedModel([call("send_note", {"to": "bob", "text": "hi"}), "ok"])
    run = Host(model=model, tools=weather_tools(executed),
               approver=CallbackApprover(lambda r: False, name="carol")).run_sync("send it")
    [result] = results_of(run.transcript)
    assert result.content == "declined by a person (no reason given)"
    assert executed == []


def test_an_answer_for_other_arguments_is_refused() -> None:
    executed: list[dict[str, object]] = []

    def forged(request: object) -> ApprovalAnswer:
        return ApprovalAnswer(request.id, "0" * 64, True, "mallory")  # type: ignore[attr-defined]

    model = ScriptedModel([call("send_note", {"to": "bob", "text": "hi"}), "ok"])
    run = Host(model=model, tools=weather_tools(executed),
               approver=CallbackApprover(forged)).run_sync("send it")
    [result] = results_of(run.transcript)
    assert result.error_kind == "denied"
    assert executed == []


def test_a_tool_exception_is_a_short_error_result_and_logged(
        caplog: pytest.LogCaptureFixture) -> None:
    tools = Toolbox()

    @tools.tool(effect=Effect.READ)
    def leaky(x: str) -> str:
        """Fails."""
        raise RuntimeError("password=hunter2 at /secret/path")

    model = ScriptedModel([call("leaky", {"x": "a"}), "ok"])
    with caplog.at_level(logging.ERROR, logger="anfitrion.gate"):
        run = Host(model=model, tools=tools).run_sync("hi")
    [result] = results_of(run.transcript)
    assert result.content == "leaky failed with an internal error (RuntimeError)."
    assert "hunter2" not in result.content
    # the operator's log names the error, redacted like the audit log (issue 17)
    assert "RuntimeError: password=[secret]" in caplog.text
    assert "hunter2" not in caplog.text


def test_a_tool_error_message_is_shown_to_the_model() -> None:
    tools = Toolbox()

    @tools.tool(effect=Effect.READ)
    def picky(x: str) -> str:
        """Fails politely."""
        raise ToolError("no data for that day")

    run = Host(model=ScriptedModel([call("picky", {"x": "a"}), "ok"]), tools=tools).run_sync("hi")
    [result] = results_of(run.transcript)
    assert result.content == "picky failed: no data for that day"
    assert result.error_kind == "tool_error"


def test_a_slow_tool_times_out() -> None:
    tools = Toolbox()

    @tools.tool(effect=Effect.READ, timeout=0.05)
    async def slow(x: str) -> str:
        """Never returns in time."""
        await anyio.sleep_forever()
        return x

    run = Host(model=ScriptedModel([call("slow", {"x": "a"}), "ok"]), tools=tools).run_sync("hi")
    [result] = results_of(run.transcript)
    assert result.error_kind == "timeout"
    assert "timed out after 0.05 seconds" in result.content


def test_large_results_are_capped_with_a_marker() -> None:
    tools = Toolbox()

    @tools.tool(effect=Effect.READ, max_result_chars=100)
    def big(x: str) -> str:
        """Returns a lot."""
        return "y" * 1000

    run = Host(model=ScriptedModel([call("big", {"x": "a"}), "ok"]), tools=tools).run_sync("hi")
    [result] = results_of(run.transcript)
    assert result.truncated
    assert result.content == "y" * 100 + "\n[truncated: showing 100 of 1000 characters]"


def test_default_cap_is_16_kib() -> None:
    tools = Toolbox()

    @tools.tool(effect=Effect.READ)
    def big(x: str) -> list[str]:
        """Returns a lot."""
        return ["z" * 100] * 1000

    run = Host(model=ScriptedModel([call("big", {"x": "a"}), "ok"]), tools=tools).run_sync("hi")
    [result] = results_of(run.transcript)
    assert result.truncated and result.content.startswith('["zzz')
    assert "showing 16384 of" in result.content


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
