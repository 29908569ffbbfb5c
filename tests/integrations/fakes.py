"""Fake chat models that propose tool calls, for the framework integrations' tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage


class ToolCallingFakeModel(FakeMessagesListChatModel):
    """LangChain's fake chat model, replying with the given messages (tool calls included)
    in order, whatever tools it is bound to."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ToolCallingFakeModel:
        return self


def calls(*proposed: tuple[str, dict[str, Any], str]) -> AIMessage:
    """A model reply proposing these (name, arguments, call id) tool calls."""
    return AIMessage("", tool_calls=[{"name": n, "args": a, "id": i} for n, a, i in proposed])


def fake_model(*replies: BaseMessage) -> ToolCallingFakeModel:
    return ToolCallingFakeModel(responses=[*replies, AIMessage("done")])


class Ran:
    """Which tool ran, with what: the tools append here."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def of(self, name: str) -> list[dict[str, Any]]:
        return [args for n, args in self.calls if n == name]


THREAD = {"configurable": {"thread_id": "t1"}}
