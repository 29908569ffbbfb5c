"""The script of the offline demo's model: it reacts to the conversation like a model would.

It calls a tool, reads the result (or the error), corrects itself, and answers. It lives with
the models so that ``scripted:demo`` resolves without the demo's tools (:mod:`anfitrion._demo`
builds those, above the core).
"""

from __future__ import annotations

import json

from .._conversation import Reply, ToolResult, UserMessage
from ._base import ModelRequest
from ._scripted import ScriptedModel, call

__all__ = ["EMAIL", "demo_model"]

EMAIL = {"to": ["team@example.com"], "subject": "Weather in Lisboa",
         "body": "Lisboa: 15 °C, partly cloudy."}


def _last_results(request: ModelRequest) -> tuple[ToolResult, ...]:
    last = request.messages[-1] if request.messages else None
    if isinstance(last, UserMessage):
        return tuple(p for p in last.parts if isinstance(p, ToolResult))
    return ()


def _last_prompt(request: ModelRequest) -> str:
    for message in reversed(request.messages):
        if isinstance(message, UserMessage) and message.text:
            return message.text
    return ""


def _respond(request: ModelRequest) -> Reply | str | object:
    prompt = _last_prompt(request)
    results = _last_results(request)
    if "Lisboa?" in prompt:
        return "done" if results else call("get_weather", {"location": "Lisboa, PT"})
    if "delete" in prompt:
        if results:
            return "I can't delete files: the host has no such tool."
        return call("delete_file", {"path": "notes.txt"})
    if "Porto" in prompt:
        if not results:
            return call("get_weather", {"location": "Porto, PT", "units": "kelvin"})
        if results[-1].is_error:
            return call("get_weather", {"location": "Porto, PT", "units": "celsius"})
        return "It is 17 °C and partly cloudy in Porto (kelvin is not offered: celsius instead)."
    if "note" in prompt:
        if not results:
            return call("write_draft", {"path": "drafts/weather.md",
                                        "text": "Lisboa 15 °C, partly cloudy."})
        if results[-1].is_error:
            return f"I could not save the note: {results[-1].content}"
        return "Saved the note to drafts/weather.md."
    if "copy" in prompt:
        if not results:
            return call("write_draft", {"path": "~/weather.md",
                                        "text": "Lisboa 15 °C, partly cloudy."})
        return "I can only write inside the workspace, so there is no copy in ~/weather.md."
    if "Email" in prompt:
        if not results:
            return call("draft_email", EMAIL)
        last = results[-1]
        if last.is_error:
            return f"The e-mail was not sent: {last.content}"
        if last.name == "draft_email":
            draft_id = json.loads(last.content)["draft_id"]
            return call("send_email", {"draft_id": draft_id, **EMAIL})
        return "Sent the forecast to team@example.com."
    return "I have nothing to do for that."


def demo_model() -> ScriptedModel:
    """The scripted stand-in for a model in the demo."""
    return ScriptedModel(_respond, name="scripted-demo")  # type: ignore[arg-type]
