"""The model protocol: what the host needs from any provider."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from .._conversation import Message, Reply
from .._tools import ToolDefinition

__all__ = ["Model", "ModelRequest"]


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One request to a model.

    Attributes:
        messages: the conversation so far (not copied; do not mutate).
        tools: the tools offered this turn.
        instructions: the host's system prompt, if any.
        tool_choice: ``None``/``"auto"``, ``"required"``, ``"none"`` or a tool name.
        on_text: called with each text delta as it arrives, when the model streams.
    """

    messages: Sequence[Message]
    tools: Sequence[ToolDefinition] = ()
    instructions: str | None = None
    tool_choice: str | None = None
    on_text: Callable[[str], None] | None = None


@runtime_checkable
class Model(Protocol):
    """A language model behind some provider. It proposes; the host disposes."""

    @property
    def name(self) -> str: ...

    async def respond(self, request: ModelRequest) -> Reply:
        """One reply for *request*. Raises :class:`~anfitrion.exceptions.ModelError`."""
        ...
