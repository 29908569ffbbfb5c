"""anfitrion's host overhead per tool round trip, through the public API."""

from __future__ import annotations

import os
import time
from typing import Any

import anyio
from _harness import ARGS_TEXT, RESULT, Stamps, one_call_request

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


def _host(model: ScriptedModel, store: str, sync: bool, audit: bool, otel: bool,
          max_turns: int) -> Host:
    host = Host(model=model, tools=make_tools(sync), store=store, max_turns=max_turns,
                audit=audit, max_tool_calls=None)
    if otel:  # the OpenTelemetry API with no SDK configured: the no-op providers
        from anfitrion.telemetry import instrument

        instrument(host)
    return host


async def _conversation(calls: int, store: str, sync: bool, audit: bool,
                        otel: bool = False) -> Stamps:
    stamps = Stamps()
    host = _host(make_model(calls, stamps), store, sync, audit, otel, calls + 2)
    run = await host.run("go", principal="bench")
    assert run.status.value == "completed", run.status
    await host.store.close()
    return stamps


def conversation(calls: int, store: str = "memory://", sync: bool = False,
                 audit: bool = True, otel: bool = False) -> Stamps:
    return anyio.run(_conversation, calls, store, sync, audit, otel)


async def _conversations(n: int, store: str, sync: bool, audit: bool, otel: bool) -> Stamps:
    stamps = Stamps()

    def respond(request: Any) -> Reply | str:
        k = stamps.stamp()
        if not one_call_request(k):
            return "done"
        return Reply((ToolCall(f"call_{k}", "get_weather", ARGS_TEXT),), StopReason.TOOL_USE)

    # one host for every conversation, as an application serving requests holds one
    host = _host(ScriptedModel(respond), store, sync, audit, otel, 4)

    async def one() -> None:
        run = await host.run("go", principal="bench")
        assert run.status.value == "completed", run.status

    await one()  # the store's first use (connection, migrations) is not a conversation's cost
    started = time.process_time()
    for _ in range(n):
        await one()
    stamps.total = (time.process_time() - started) * 1e6 / n
    await host.store.close()
    return stamps


def conversations(n: int, store: str = "memory://", sync: bool = False, audit: bool = True,
                  otel: bool = False) -> Stamps:
    """*n* one-call conversations on one host: CPU µs per conversation in ``total``."""
    return anyio.run(_conversations, n, store, sync, audit, otel)


def store_url(kind: str, tmp: str) -> str:
    if kind == "memory":
        return "memory://"
    if kind == "sqlite":
        return f"sqlite:///{os.path.join(tmp, 'bench.db')}"
    if kind == "sqlite_normal":
        return f"sqlite:///{os.path.join(tmp, 'bench.db')}?synchronous=normal"
    return os.environ.get("ANFITRION_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")
