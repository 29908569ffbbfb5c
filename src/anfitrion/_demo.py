"""The offline demo scenario: a toolbox and a scripted model that plays the model's part.

No network, no key. The scripted model reacts to the conversation like a model would: it calls
a tool, reads the result (or the error), corrects itself, and answers. The approval part uses the
built-in toolkits: ``files`` scoped to a temporary workspace, and ``mail`` (propose, then confirm)
delivering to a Maildir inside it.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Literal

from .conversation import Reply, ToolResult, UserMessage
from .models._base import ModelRequest
from .models.scripted import ScriptedModel, call
from .store import MemoryStore, Store
from .toolkits import files, mail
from .tools import Effect, Toolbox

__all__ = ["SCENES", "demo_model", "demo_toolbox"]

SCENES: tuple[tuple[str, str], ...] = (
    ("A read tool, allowed by default", "Weather in Lisboa?"),
    ("A tool that does not exist", "Please delete notes.txt."),
    ("Invalid arguments, corrected by the model", "And the weather in Porto, in kelvin?"),
    ("A write tool that needs a person's approval",
     "Save a note for the team: Lisboa 15 °C, partly cloudy."),
    ("A path outside the workspace, refused before anyone is asked",
     "Also put a copy in ~/weather.md."),
    ("Propose, then confirm: the model drafts an e-mail, a person approves sending it",
     "Email the forecast to team@example.com."),
)

EMAIL = {"to": ["team@example.com"], "subject": "Weather in Lisboa",
         "body": "Lisboa: 15 °C, partly cloudy."}


def demo_toolbox(workdir: str | Path | None = None, *, store: Store | None = None) -> Toolbox:
    """The demo's tools: ``get_weather``, ``files`` over *workdir*/``workspace`` and ``mail``
    delivering to *workdir*/``Maildir`` (a new temporary folder when *workdir* is None)."""
    base = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(
        prefix="anfitrion-demo-"))
    workspace = base / "workspace"
    (workspace / "drafts").mkdir(parents=True, exist_ok=True)
    tools = Toolbox()

    @tools.tool(effect=Effect.READ, provenance="trusted")
    def get_weather(location: str,
                    units: Literal["celsius", "fahrenheit"] = "celsius") -> dict[str, object]:
        """Get the current weather for a given location.

        Args:
            location: City and country, e.g. "Lisboa, PT".
            units: Temperature units.
        """
        temp_c = 15 if location.lower().startswith("lisboa") else 17
        if units == "fahrenheit":
            return {"location": location, "temp_f": round(temp_c * 9 / 5 + 32),
                    "sky": "partly cloudy"}
        return {"location": location, "temp_c": temp_c, "sky": "partly cloudy"}

    tools.include(files(workspace, allow_delete=False).only("write_draft"))
    tools.include(mail(store or MemoryStore(), sender="demo@anfitrion.invalid",
                       maildir=base / "Maildir", allowed_domains=["example.com"]))
    return tools


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
