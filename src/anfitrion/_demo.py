"""The offline demo scenario: a toolbox and a scripted model that plays the model's part.

No network, no key. The scripted model (``scripted:demo``, whose script is
:mod:`anfitrion.models._demo_script`) reacts to the conversation like a model would: it calls a
tool, reads the result (or the error), corrects itself, and answers. The approval part uses the
built-in toolkits: ``files`` scoped to a temporary workspace, and ``mail`` (propose, then
confirm) delivering to a Maildir inside it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Literal

from ._tools import Effect, Toolbox
from .models import Model, resolve_model
from .store import DraftStore, MemoryStore
from .toolkits import files, mail

__all__ = ["SCENES", "demo_parts", "demo_toolbox"]

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


def demo_toolbox(workdir: str | Path | None = None, *, store: DraftStore | None = None) -> Toolbox:
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


def demo_parts(store: DraftStore) -> tuple[Model, Toolbox]:
    """The demo's model and tools for a host on *store*.

    The workspace and Maildir live in ``$ANFITRION_HOME/demo`` and mail drafts in *store*, so
    that ``anfitrion resume`` in another process finds what the suspended run left.
    """
    from ._home import home_dir

    return resolve_model("scripted:demo"), demo_toolbox(home_dir() / "demo", store=store)
