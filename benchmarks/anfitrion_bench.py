"""anfitrion's host overhead per tool round trip, through the public API."""

from __future__ import annotations

import os
from typing import Any

import anyio
from _harness import ARGS_TEXT, RESULT, Stamps

from anfitrion import Effect, Host, Reply, ScriptedModel, StopReason, Toolbox, ToolCall


def make_tools(sync: bool = False) -> Toolbox:
    tools = Toolbox()
    if sync:
        @tools.tool(effect=Effect.READ, provenance="trusted", name="get_weather")
        def get_weather_sync(location: str) -> dict[str, object]:
            """Get the current weather for a given location."""
            return {**RESULT, "location": location}
    else:
        @tools.tool(effect=Effect.READ, provenance="trusted")
        async def get_weather(location: str) -> dict[str, object]:
            """Get the current weather for a given location."""
            return {**RESULT, "location": location}
    return tools


def make_model(calls: int, stamps: Stamps) -> ScriptedModel:
    def respond(request: Any) -> Reply | str:
        n = stamps.stamp()
        if n > calls:
            return "done"
        return Reply((ToolCall(f"call_{n}", "get_weather", ARGS_TEXT),), StopReason.TOOL_USE)

    return ScriptedModel(respond)


async def _conversation(calls: int, store: str, sync: bool, audit: bool,
                        otel: bool = False) -> Stamps:
    stamps = Stamps()
    host = Host(model=make_model(calls, stamps), tools=make_tools(sync), store=store,
                max_turns=calls + 2, audit=audit, max_tool_calls=None)
    if otel:  # the OpenTelemetry API with no SDK configured: the no-op providers
        from anfitrion.telemetry import instrument

        instrument(host)
    run = await host.run("go", principal="bench")
    assert run.status.value == "completed", run
    await host.store.close()
    return stamps


def conversation(calls: int, store: str = "memory://", sync: bool = False,
                 audit: bool = True, otel: bool = False) -> Stamps:
    return anyio.run(_conversation, calls, store, sync, audit, otel)


def store_url(kind: str, tmp: str) -> str:
    if kind == "memory":
        return "memory://"
    if kind == "sqlite":
        return f"sqlite:///{os.path.join(tmp, 'bench.db')}"
    if kind == "sqlite_normal":
        return f"sqlite:///{os.path.join(tmp, 'bench.db')}?synchronous=normal"
    return os.environ.get("ANFITRION_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")
