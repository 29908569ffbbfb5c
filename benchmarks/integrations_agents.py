"""CPU per tool round trip, bare and behind the gate, for each framework integration.

The workload of ``_harness.py`` (one trivial read tool, one call per turn, a fake model that
stamps the process CPU time at each request) run in each framework's own loop twice: bare, and
with the tool behind anfitrion's gate (``anfitrion.integrations``), on the in-memory store and on
a SQLite file. The Claude Agent SDK runs its tools in Claude Code, a separate process: what is
measured there is the permission callback alone (``can_use_tool``), bare (allow) and gated.

Run from ``benchmarks/``: ``python integrations_agents.py [--calls 40] [--repeat 5]``. Short
conversations: the frameworks' own cost per call grows with the message history, which would
drown the gate's. The SQLite column includes what the embedding API does after every submit: the
session saved and the audit records written (one transaction each).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from _harness import ARGS_TEXT, RESULT, Stamps

from anfitrion import Runtime
from anfitrion._runtime import GatedSession


async def _session(store: str) -> GatedSession:
    session = await Runtime(store=store, max_tool_calls=None).open("bench")
    session.add_user_text("weather, again and again")
    return session


def pydantic_ai(calls: int, store: str | None) -> Stamps:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.toolsets import FunctionToolset
    from pydantic_ai.usage import UsageLimits

    from anfitrion.integrations.pydantic_ai import GatedToolset

    stamps = Stamps()

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = stamps.stamp()
        if n > calls:
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart("get_weather", ARGS_TEXT, f"call_{n}")])

    toolset: FunctionToolset[None] = FunctionToolset()

    @toolset.tool_plain
    async def get_weather(location: str) -> dict[str, Any]:
        """Get the current weather for a given location."""
        return {**RESULT, "location": location}

    async def run() -> None:
        used: Any = toolset
        if store is not None:
            used = GatedToolset(toolset, session=await _session(store),
                                effects={"get_weather": "read"}, trusted=["get_weather"])
        agent: Agent[None, str] = Agent(FunctionModel(respond), toolsets=[used])
        result = await agent.run("go", usage_limits=UsageLimits(request_limit=None))
        assert result.output == "done", result.output

    asyncio.run(run())
    return stamps


def openai_agents(calls: int, store: str | None) -> Stamps:
    from agents import Agent, Runner, function_tool, set_tracing_disabled
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    from anfitrion.integrations.openai_agents import AgentsGate

    set_tracing_disabled(True)
    stamps = Stamps()

    class FakeModel(Model):
        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
            n = stamps.stamp()
            if n > calls:
                output: list[Any] = [ResponseOutputMessage(
                    id="msg", type="message", role="assistant", status="completed",
                    content=[ResponseOutputText(type="output_text", text="done",
                                                annotations=[])])]
            else:
                output = [ResponseFunctionToolCall(type="function_call", id=f"fc_{n}",
                                                   call_id=f"call_{n}", name="get_weather",
                                                   arguments=ARGS_TEXT)]
            return ModelResponse(output=output, usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            raise NotImplementedError

    @function_tool
    async def get_weather(location: str) -> dict[str, Any]:
        """Get the current weather for a given location."""
        return {**RESULT, "location": location}

    async def run() -> None:
        tools = [get_weather]
        if store is not None:
            from anfitrion import DeferredApprover

            session = await Runtime(store=store, approver=DeferredApprover()).open("bench")
            tools = AgentsGate(session, effects={"get_weather": "read"},
                               trusted=["get_weather"]).tools(tools)
        agent = Agent(name="bench", model=FakeModel(), tools=tools)
        result = await Runner.run(agent, "go", max_turns=calls + 5)
        assert result.final_output == "done"

    asyncio.run(run())
    return stamps


def claude_agent_sdk(calls: int, store: str | None) -> Stamps:
    from claude_agent_sdk.types import PermissionResultAllow, ToolPermissionContext

    from anfitrion.integrations.claude_agent_sdk import ClaudeGate

    stamps = Stamps()
    schema = {"type": "object", "properties": {"location": {"type": "string"}},
              "required": ["location"]}

    async def run() -> None:
        async def bare(name: str, args: dict[str, Any], ctx: ToolPermissionContext) -> Any:
            return PermissionResultAllow(updated_input=args)

        decide = bare
        if store is not None:
            gate = ClaudeGate(await _session(store), schemas={"get_weather": schema},
                              effects={"get_weather": "read"}, trusted=["get_weather"])
            decide = gate.can_use_tool
        stamps.stamp()
        for n in range(calls):
            args = {"location": "Lisboa, PT"}
            decision = await decide("get_weather", args, ToolPermissionContext(
                tool_use_id=f"toolu_{n}"))
            assert isinstance(decision, PermissionResultAllow)
            stamps.stamp()

    asyncio.run(run())
    return stamps


FRAMEWORKS: dict[str, Callable[[int, str | None], Stamps]] = {
    "pydantic-ai": pydantic_ai, "openai-agents": openai_agents,
    "claude-agent-sdk (permission callback)": claude_agent_sdk}


def per_call_us(stamps: Stamps) -> float:
    return statistics.median(stamps.deltas_us())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        stores = {"memory": "memory://", "sqlite": f"sqlite:///{Path(tmp) / 'bench.db'}"}
        print(f"CPU µs per tool round trip (median over {args.calls} calls, best of "
              f"{args.repeat} runs); ratio = gated / bare\n")
        print("| framework | bare | gated (memory) | ratio | added | gated (SQLite) | ratio |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for name, bench in FRAMEWORKS.items():
            figures = []
            for store in (None, stores["memory"], stores["sqlite"]):
                runs = []
                for i in range(args.repeat):
                    if store is not None and store.startswith("sqlite"):
                        store = f"sqlite:///{Path(tmp) / f'{name[:6]}-{i}-{time.time_ns()}.db'}"
                    runs.append(per_call_us(bench(args.calls, store)))
                figures.append(min(runs))
            bare, memory, sqlite = figures
            print(f"| {name} | {bare:.0f} | {memory:.0f} | {memory / bare:.2f} | "
                  f"{memory - bare:+.0f} | {sqlite:.0f} | {sqlite / bare:.2f} |")


if __name__ == "__main__":
    main()
