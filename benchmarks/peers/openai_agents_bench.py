"""OpenAI Agents SDK: an Agent with a custom Model and one function tool."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from _harness import ARGS_TEXT, RESULT, Stamps
from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)


class FakeModel(Model):
    def __init__(self, calls: int, stamps: Stamps) -> None:
        self.calls = calls
        self.stamps = stamps

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        n = self.stamps.stamp()
        if n > self.calls:
            output: list[Any] = [ResponseOutputMessage(
                id="msg", type="message", role="assistant", status="completed",
                content=[ResponseOutputText(type="output_text", text="done", annotations=[])])]
        else:
            output = [ResponseFunctionToolCall(type="function_call", id=f"fc_{n}",
                                               call_id=f"call_{n}", name="get_weather",
                                               arguments=ARGS_TEXT)]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError


def conversation(calls: int) -> Stamps:
    set_tracing_disabled(True)
    stamps = Stamps()

    @function_tool
    async def get_weather(location: str) -> dict[str, Any]:
        """Get the current weather for a given location."""
        return {**RESULT, "location": location}

    agent = Agent(name="bench", model=FakeModel(calls, stamps), tools=[get_weather])
    result = asyncio.run(Runner.run(agent, "go", max_turns=calls + 5))
    assert result.final_output == "done"
    return stamps
