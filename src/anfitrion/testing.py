"""Helpers for testing code built on anfitrion: an offline model, a store, event capture.

Example:
    >>> from anfitrion.testing import ScriptedModel, EventCapture, MemoryStore
"""

from __future__ import annotations

from collections.abc import Mapping

from ._events import EventType, HostEvent
from ._principal import Principal
from ._session import Session
from .models import ScriptedModel, call, reply
from .store import MemoryStore

__all__ = ["EventCapture", "MemoryStore", "ScriptedModel", "call", "gate_session", "reply"]


class EventCapture:
    """A listener that keeps every host event, for assertions."""

    def __init__(self) -> None:
        self.events: list[HostEvent] = []

    def __call__(self, event: HostEvent) -> None:
        self.events.append(event)

    def types(self) -> list[EventType]:
        return [e.type for e in self.events]

    def of(self, type: EventType) -> list[HostEvent]:
        return [e for e in self.events if e.type is type]


def gate_session(principal: Principal | str = "user", session_id: str = "s1", *, turn: int = 1,
                 waiting: Mapping[str, str] | None = None) -> Session:
    """A fresh :class:`~anfitrion._session.Session` for driving :class:`~anfitrion._gate.Gate`
    directly: at *turn*, with the calls of *waiting* (call id → request id) waiting."""
    session = Session(session_id, Principal.of(principal))
    for _ in range(turn):
        session.begin_turn()
    for call_id, request_id in (waiting or {}).items():
        session.record_waiting(call_id, request_id)
    return session
