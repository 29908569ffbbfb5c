"""CPU per tool round trip: a LangChain ``create_agent`` agent bare, and the same agent behind
anfitrion's gate (``AnfitrionMiddleware``; memory and SQLite stores), with a fake chat model.

    cd benchmarks && PYTHONPATH=../src python integrations_langchain.py [--calls 200] [--repeat 3]

The workload is the benchmarks' one (``_harness``): one trivial read per turn, one call per model
request; the fake model stamps the process CPU time, so a round trip is model → tool → model,
measured inside one process. Both agents have a checkpointer and a thread (the gate needs one).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from _harness import RESULT, Stamps, mean_per_call_us
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from anfitrion import Runtime
from anfitrion.integrations.langchain import AnfitrionMiddleware
from anfitrion.integrations.langgraph import gated_tools


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


def conversation(calls: int, store: str | None) -> float:
    """Mean CPU µs per round trip; *store* ``None``: the bare agent."""
    stamps = Stamps()

    @tool
    async def get_weather(location: str) -> dict[str, Any]:
        """Get the current weather for a given location."""
        return {**RESULT, "location": location}

    tools = [get_weather]
    middleware = []
    if store is not None:
        runtime = Runtime(gated_tools(tools, reads={"get_weather"}, trusted={"get_weather"}),
                          store=store)
        middleware.append(AnfitrionMiddleware(runtime))
    model = FakeToolModel(messages=iter([]), calls=calls, stamps=stamps)
    agent = create_agent(model, tools=tools, middleware=middleware, checkpointer=InMemorySaver())
    config = {"recursion_limit": 2 * calls + 10, "configurable": {"thread_id": "bench"}}
    result = asyncio.run(agent.ainvoke({"messages": [("user", "go")]}, config))
    assert result["messages"][-1].content == "done"
    assert "temp_c" in result["messages"][-2].content
    return mean_per_call_us(stamps, calls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        variants = {"bare create_agent": None, "gated, memory store": "memory://",
                    "gated, SQLite store": f"sqlite:///{tmp}/bench.db"}
        figures = {}
        for label, store in variants.items():
            runs = []
            for i in range(args.repeat):
                url = f"{store[:-3]}{i}.db" if store and store.endswith(".db") else store
                runs.append(conversation(args.calls, url))
            figures[label] = statistics.median(runs)
    bare = figures["bare create_agent"]
    print(f"CPU per tool round trip, {args.calls} calls, median of {args.repeat} runs")
    for label, us in figures.items():
        print(f"  {label:<22} {us:8.0f} µs   ×{us / bare:.2f}")


if __name__ == "__main__":
    main()
