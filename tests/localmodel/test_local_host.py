"""End to end: the real local model, through the Chat Completions adapter, the host and the gate.

Assertions are on structure (tool names, parseable arguments, statuses), never on wording.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from anfitrion import Effect, Host, RunStatus, Toolbox
from anfitrion._conversation import Reply, Text, ToolCall, ToolResult, UserMessage
from anfitrion.models import ModelRequest

pytestmark = pytest.mark.local_model


@pytest.fixture
def local(model_path: Path) -> Iterator[Any]:
    """``local_model`` itself; every endpoint it started is stopped after the test."""
    from anfitrion.localmodel import local_model, shutdown_servers

    yield local_model
    shutdown_servers()


def weather_toolbox() -> tuple[Toolbox, list[dict[str, Any]]]:
    tools = Toolbox()
    ran: list[dict[str, Any]] = []

    @tools.tool(effect=Effect.READ, provenance="trusted")
    def get_weather(location: str) -> dict[str, object]:
        """Get the current weather for a given location.

        Args:
            location: City and country, e.g. "Lisboa, PT".
        """
        ran.append({"location": location})
        return {"location": location, "temp_c": 15, "sky": "partly cloudy"}

    return tools, ran


@pytest.mark.anyio
async def test_real_model_calls_get_weather_for_lisboa_through_the_gate(local: Any) -> None:
    tools, ran = weather_toolbox()
    host = Host(model=local("smollm2"), tools=tools, max_turns=4)
    run = await host.run("Weather in Lisboa?", principal="alice")
    assert run.status is RunStatus.COMPLETED
    assert [(c.tool, c.stage, c.verdict, c.is_error) for c in run.calls] == [
        ("get_weather", "execute", "allow", False)]
    [call] = [p for m in run.transcript if isinstance(m, Reply) for p in m.tool_calls]
    assert isinstance(json.loads(call.raw_arguments)["location"], str)
    assert ran == [call.arguments]
    [result] = run.transcript.tool_results
    assert result.call_id == call.id
    assert not result.is_error
    assert run.output


@pytest.mark.anyio
async def test_extra_key_arguments_are_rejected_with_an_error_result_the_model_sees(
        local: Any) -> None:
    """Allowed to add keys (``open``), the model adds some for a question with extra details."""
    tools, ran = weather_toolbox()
    host = Host(model=local("smollm2", arguments="open"), tools=tools, max_turns=4)
    run = await host.run("What's the weather in Lisboa, PT, in kelvin, for tomorrow morning?",
                         principal="alice")
    assert ran == []
    rejected = run.transcript.tool_results[0]
    assert rejected.is_error
    assert rejected.error_kind == "invalid_arguments"
    assert "unexpected properties" in rejected.content
    messages = list(run.transcript)
    carrying = next(i for i, m in enumerate(messages)
                    if isinstance(m, UserMessage) and rejected in m.parts)
    assert isinstance(messages[carrying + 1], Reply)  # the model answered after seeing it
    assert run.status is RunStatus.COMPLETED


@pytest.mark.anyio
@pytest.mark.parametrize(("choice", "expected"), [
    (None, "get_weather"), ("auto", "get_weather"), ("required", "some tool"),
    ("save_note", "save_note"), ("none", "text")])
async def test_tool_choice_variants_reach_the_model(local: Any, choice: str | None,
                                                    expected: str) -> None:
    tools, _ = weather_toolbox()

    @tools.tool(effect=Effect.WRITE)
    def save_note(path: str, text: str) -> str:
        """Save a short note for the team under drafts/. Use only when asked to."""
        return "saved"

    definitions = tuple(t.definition for t in tools)
    request = ModelRequest([UserMessage((Text("Weather in Lisboa?"),))], definitions,
                           tool_choice=choice)
    reply = await local("smollm2").respond(request)
    if expected == "text":
        assert not reply.tool_calls
        assert reply.text
        return
    [call] = reply.tool_calls
    assert isinstance(call, ToolCall)
    if expected != "some tool":
        assert call.name == expected
    assert isinstance(json.loads(call.raw_arguments), dict)


@pytest.mark.anyio
async def test_streamed_reply_through_the_adapter_is_one_call(local: Any) -> None:
    tools, _ = weather_toolbox()
    pieces: list[str] = []
    request = ModelRequest([UserMessage((Text("Weather in Lisboa?"),))],
                           tuple(t.definition for t in tools), on_text=pieces.append)
    reply = await local("smollm2").respond(request)
    [call] = reply.tool_calls
    assert call.name == "get_weather"
    assert isinstance(json.loads(call.raw_arguments)["location"], str)


@pytest.mark.anyio
async def test_model_answers_in_text_after_the_tool_result(local: Any) -> None:
    tools, _ = weather_toolbox()
    call = ToolCall.from_object("call_1", "get_weather", {"location": "Lisboa, PT"})
    messages = [UserMessage((Text("Weather in Lisboa?"),)), Reply((call,)),
                UserMessage((ToolResult("call_1", "get_weather",
                                        '{"location": "Lisboa, PT", "temp_c": 15}'),))]
    reply = await local("smollm2").respond(
        ModelRequest(messages, tuple(t.definition for t in tools)))
    assert not reply.tool_calls
    assert reply.text
