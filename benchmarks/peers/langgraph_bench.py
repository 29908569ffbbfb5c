"""LangGraph: langchain's create_agent (a LangGraph graph with its tool node) and a fake model."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

from _harness import RESULT, Stamps, one_call_request
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool


class FakeToolModel(GenericFakeChatModel):
    call: Any = None
    stamps: Any = None

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        n = self.stamps.stamp()
        if not self.call(n):
            message = AIMessage(content="done")
        else:
            message = AIMessage(content="", tool_calls=[
                {"name": "get_weather", "args": {"location": "Lisboa, PT"}, "id": f"call_{n}"}])
        return ChatResult(generations=[ChatGeneration(message=message)])


def _agent(stamps: Stamps, call: Callable[[int], bool]) -> Any:
    @tool
    async def get_weather(location: str) -> dict[str, Any]:
        """Get the current weather for a given location."""
        return {**RESULT, "location": location}

    model = FakeToolModel(messages=iter([]), call=call, stamps=stamps)
    return create_agent(model, tools=[get_weather])


def conversation(calls: int) -> Stamps:
    stamps = Stamps()
    agent = _agent(stamps, lambda n: n <= calls)
    result = asyncio.run(agent.ainvoke({"messages": [("user", "go")]},
                                       {"recursion_limit": 2 * calls + 10}))
    assert result["messages"][-1].content == "done"
    return stamps


def conversations(n: int) -> Stamps:
    """*n* one-call conversations on one agent: CPU µs per conversation in ``total``."""
    stamps = Stamps()
    agent = _agent(stamps, one_call_request)

    async def one() -> None:
        result = await agent.ainvoke({"messages": [("user", "go")]})
        assert result["messages"][-1].content == "done"

    async def main() -> None:
        await one()
        started = time.process_time()
        for _ in range(n):
            await one()
        stamps.total = (time.process_time() - started) * 1e6 / n

    asyncio.run(main())
    return stamps
