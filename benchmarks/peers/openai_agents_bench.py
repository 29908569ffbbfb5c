"""OpenAI Agents SDK: an Agent with a custom Model and one function tool."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from _harness import ARGS_TEXT, RESULT, Stamps, one_call_request
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
    def __init__(self, call: Callable[[int], bool], stamps: Stamps) -> None:
        self.call = call
        self.stamps = stamps

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        n = self.stamps.stamp()
        if not self.call(n):
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


def _agent(stamps: Stamps, call: Callable[[int], bool]) -> Agent[Any]:
    set_tracing_disabled(True)

    @function_tool
    async def get_weather(location: str) -> dict[str, Any]:
        """Get the current weather for a given location."""
        return {**RESULT, "location": location}

    return Agent(name="bench", model=FakeModel(call, stamps), tools=[get_weather])


def conversation(calls: int) -> Stamps:
    stamps = Stamps()
    agent = _agent(stamps, lambda n: n <= calls)
    result = asyncio.run(Runner.run(agent, "go", max_turns=calls + 5))
    assert result.final_output == "done"
    return stamps


def conversations(n: int) -> Stamps:
    """*n* one-call conversations on one agent: CPU µs per conversation in ``total``."""
    stamps = Stamps()
    agent = _agent(stamps, one_call_request)

    async def main() -> None:
        assert (await Runner.run(agent, "go")).final_output == "done"
        started = time.process_time()
        for _ in range(n):
            assert (await Runner.run(agent, "go")).final_output == "done"
        stamps.total = (time.process_time() - started) * 1e6 / n

    asyncio.run(main())
    return stamps
