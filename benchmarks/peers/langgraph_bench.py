"""LangGraph: langchain's create_agent (a LangGraph graph with its tool node) and a fake model."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from _harness import RESULT, Stamps
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool


class FakeToolModel(GenericFakeChatModel):
    calls: int = 0
    stamps: Any = None

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        n = self.stamps.stamp()
        if n > self.calls:
            message = AIMessage(content="done")
        else:
            message = AIMessage(content="", tool_calls=[
                {"name": "get_weather", "args": {"location": "Lisboa, PT"}, "id": f"call_{n}"}])
        return ChatResult(generations=[ChatGeneration(message=message)])


def conversation(calls: int) -> Stamps:
    stamps = Stamps()

    @tool
    async def get_weather(location: str) -> dict[str, Any]:
        """Get the current weather for a given location."""
        return {**RESULT, "location": location}

    model = FakeToolModel(messages=iter([]), calls=calls, stamps=stamps)
    agent = create_agent(model, tools=[get_weather])
    result = asyncio.run(agent.ainvoke({"messages": [("user", "go")]},
                                       {"recursion_limit": 2 * calls + 10}))
    assert result["messages"][-1].content == "done"
    return stamps
