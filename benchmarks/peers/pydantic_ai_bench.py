"""Pydantic AI: an Agent with its native FunctionModel and one plain tool."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from _harness import ARGS_TEXT, RESULT, Stamps, one_call_request
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import UsageLimits


def _agent(stamps: Stamps, call: Any) -> Agent[None, str]:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = stamps.stamp()
        if not call(n):
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart("get_weather", ARGS_TEXT, f"call_{n}")])

    agent: Agent[None, str] = Agent(FunctionModel(respond))

    @agent.tool_plain
    async def get_weather(location: str) -> dict[str, Any]:
        """Get the current weather for a given location."""
        return {**RESULT, "location": location}

    return agent


def conversation(calls: int) -> Stamps:
    stamps = Stamps()
    agent = _agent(stamps, lambda n: n <= calls)
    result = asyncio.run(agent.run("go", usage_limits=UsageLimits(request_limit=None)))
    assert result.output == "done"
    return stamps


def conversations(n: int) -> Stamps:
    """*n* one-call conversations on one agent: CPU µs per conversation in ``total``."""
    stamps = Stamps()
    agent = _agent(stamps, one_call_request)

    async def main() -> None:
        assert (await agent.run("go")).output == "done"
        started = time.process_time()
        for _ in range(n):
            assert (await agent.run("go")).output == "done"
        stamps.total = (time.process_time() - started) * 1e6 / n

    asyncio.run(main())
    return stamps
