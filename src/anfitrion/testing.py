"""Helpers for testing code built on anfitrion: an offline model, a store, event capture.

Example:
    >>> from anfitrion.testing import ScriptedModel, EventCapture, MemoryStore
"""

from __future__ import annotations

from .events import EventType, HostEvent
from .models.scripted import ScriptedModel, call, reply
from .store.memory import MemoryStore

__all__ = ["EventCapture", "MemoryStore", "ScriptedModel", "call", "reply"]


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
