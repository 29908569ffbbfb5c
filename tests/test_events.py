"""Event routing: listeners get the kinds they declare, in order, and nothing is built for
a kind no listener takes."""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest

from anfitrion import Effect, EventType, Host, ScriptedModel, Toolbox
from anfitrion._events import HostEvent, Router
from anfitrion.models._scripted import call


def _tools() -> Toolbox:
    tools = Toolbox()

    @tools.tool(effect=Effect.READ, provenance="trusted")
    def get_weather(location: str) -> dict[str, Any]:
        """Weather."""
        return {"location": location}

    return tools


def _run(listeners: list[Any], audit: bool = False) -> Host:
    host = Host(ScriptedModel([call("get_weather", {"location": "x"}), "done"]), _tools(),
                listeners=listeners, audit=audit)
    run = host.run_sync("go")
    assert run.status.value == "completed"
    return host


class Only:
    def __init__(self, *kinds: EventType) -> None:
        self.kinds = frozenset(kinds)
        self.seen: list[EventType] = []

    def __call__(self, event: HostEvent) -> None:
        self.seen.append(event.type)


class Everything:
    def __init__(self) -> None:
        self.seen: list[EventType] = []

    def __call__(self, event: HostEvent) -> None:
        self.seen.append(event.type)


def test_a_listener_gets_only_the_kinds_it_declares() -> None:
    only, everything = Only(EventType.CALL_DECIDED, EventType.RUN_ENDED), Everything()
    _run([only, everything])
    assert only.seen == [EventType.CALL_DECIDED, EventType.RUN_ENDED]
    assert EventType.CALL_VALIDATED in everything.seen
    assert EventType.MODEL_REQUESTED in everything.seen


def test_no_event_is_built_for_a_kind_no_listener_takes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import anfitrion._gate
    import anfitrion._runtime

    built: list[EventType] = []

    class Counting(HostEvent):
        __slots__ = ()

        def __init__(self, type: EventType, *args: Any, **kwargs: Any) -> None:
            built.append(type)
            super().__init__(type, *args, **kwargs)

    monkeypatch.setattr(anfitrion._gate, "HostEvent", Counting)
    monkeypatch.setattr(anfitrion._runtime, "HostEvent", Counting)
    only = Only(EventType.RESULT_RETURNED)
    _run([only])
    assert only.seen == [EventType.RESULT_RETURNED]
    assert built == [EventType.RESULT_RETURNED]


def test_listeners_run_in_order_and_an_awaitable_is_awaited_before_the_next(
        caplog: pytest.LogCaptureFixture) -> None:
    order: list[str] = []

    async def slow(event: HostEvent) -> None:
        await anyio.sleep(0)
        order.append("slow")

    def failing(event: HostEvent) -> None:
        order.append("failing")
        raise RuntimeError("boom")

    def last(event: HostEvent) -> None:
        order.append("last")

    router = Router([slow, failing, last])
    event = HostEvent(EventType.RUN_ENDED, "s")

    async def main() -> None:
        pending = router(event)
        assert pending is not None
        assert order == []  # nothing after the awaitable ran before it was awaited
        await pending

    with caplog.at_level(logging.ERROR, logger="anfitrion"):
        anyio.run(main)
    assert order == ["slow", "failing", "last"]
    assert "failed on run.ended" in caplog.text


def test_synchronous_listeners_leave_nothing_to_await() -> None:
    seen: list[str] = []
    router = Router([lambda e: seen.append("a"), lambda e: seen.append("b")])
    assert router(HostEvent(EventType.RUN_ENDED, "s")) is None
    assert seen == ["a", "b"]
    assert Router([Only(EventType.RUN_ENDED)]).kinds == {EventType.RUN_ENDED}
