"""Pydantic AI: an Agent with its native FunctionModel and one plain tool."""

from __future__ import annotations

import asyncio
from typing import Any

from _harness import ARGS_TEXT, RESULT, Stamps
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import UsageLimits


def conversation(calls: int) -> Stamps:
    stamps = Stamps()

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = stamps.stamp()
        if n > calls:
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart("get_weather", ARGS_TEXT, f"call_{n}")])

    agent: Agent[None, str] = Agent(FunctionModel(respond))

    @agent.tool_plain
    async def get_weather(location: str) -> dict[str, Any]:
        """Get the current weather for a given location."""
        return {**RESULT, "location": location}

    result = asyncio.run(agent.run("go", usage_limits=UsageLimits(request_limit=None)))
    assert result.output == "done"
    return stamps
