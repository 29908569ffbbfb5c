"""The scripted model: an offline :class:`Model` that replays replies or computes them.

Example:
    >>> from anfitrion._conversation import ToolCall
    >>> model = ScriptedModel([
    ...     ToolCall.from_object("call_1", "get_weather", {"location": "Lisboa, PT"}),
    ...     "It is 15 °C and partly cloudy in Lisboa.",
    ... ])
"""

from __future__ import annotations

import inspect
import itertools
import os
import secrets
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TypeAlias

from .._conversation import Reply, StopReason, Text, ToolCall, Usage
from ..exceptions import ModelError
from ._base import ModelRequest

__all__ = ["ScriptStep", "ScriptedModel", "call", "reply"]

ScriptStep: TypeAlias = "str | ToolCall | Sequence[ToolCall] | Reply"
_Step: TypeAlias = "Reply | str | ToolCall | Sequence[ToolCall]"
ReplyFunction: TypeAlias = Callable[[ModelRequest], "_Step | Awaitable[_Step]"]


def _new_numbering() -> None:
    """A random prefix per process (again in a forked child) and a counter: ids stay short
    and readable (``call_3fa2c1_1``), and a script built again in another process — to resume
    a session there — never repeats an id the session already holds."""
    global _prefix, _ids
    _prefix = secrets.token_hex(3)
    _ids = itertools.count(1)


_prefix: str
_ids: itertools.count[int]
_new_numbering()
if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_new_numbering)


def call(name: str, arguments: object = None, *, id: str | None = None,
         raw: str | None = None) -> ToolCall:
    """A tool call for scripts; *raw* sends argument text exactly as a model might.

    Without *id*, the call gets ``call_<process prefix>_<n>``: unique in this process and, by
    the random prefix, across processes.
    """
    call_id = id or f"call_{_prefix}_{next(_ids)}"
    if raw is not None:
        return ToolCall.from_raw(call_id, name, raw)
    return ToolCall.from_object(call_id, name, {} if arguments is None else arguments)


def reply(step: str | ToolCall | Sequence[ToolCall] | Reply) -> Reply:
    """Normalise a script step into a :class:`Reply`."""
    if isinstance(step, Reply):
        return step
    if isinstance(step, str):
        return Reply((Text(step),), StopReason.END_TURN, Usage(), "scripted")
    calls = (step,) if isinstance(step, ToolCall) else tuple(step)
    return Reply(calls, StopReason.TOOL_USE, Usage(), "scripted")


class ScriptedModel:
    """Replays a list of steps in order, or asks a function for each reply.

    Args:
        script: replies to give in order — text, a tool call, several calls, or a ``Reply`` —
            or a function ``(request) -> step`` (sync or async) that can look at the
            conversation, e.g. to correct a call after an error result.
        name: the model name reported in replies.

    Raises (from :meth:`respond`):
        ModelError: the script is exhausted.
    """

    def __init__(self, script: Iterable[ScriptStep] | ReplyFunction, *,
                 name: str = "scripted") -> None:
        self._function: ReplyFunction | None = None
        self._steps: list[ScriptStep] = []
        if callable(script):
            self._function = script
        else:
            self._steps = list(script)
        self._name = name
        self.requests: list[ModelRequest] = []

    @property
    def name(self) -> str:
        return self._name

    async def respond(self, request: ModelRequest) -> Reply:
        self.requests.append(request)
        if self._function is not None:
            step = self._function(request)
            if inspect.isawaitable(step):
                step = await step
        else:
            index = len(self.requests) - 1
            if index >= len(self._steps):
                raise ModelError(f"scripted model has no step {index + 1} "
                                 f"(script has {len(self._steps)})", provider="scripted")
            step = self._steps[index]
        result = reply(step)  # type: ignore[arg-type]
        if request.on_text is not None and result.text:
            request.on_text(result.text)
        return result
