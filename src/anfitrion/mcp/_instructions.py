"""The upstream servers' instructions, as the gateway gives them to its own clients.

A server's ``instructions`` (the ``initialize`` / ``server/discover`` field a client may add to
its model's system prompt) are pinned with the server: a person approved them. The gateway
passes on, for each server, the instructions *as approved* — only while the server's pin is
approved and what it launches is what was approved — combined into one text, each under its
server's id, and shaped like any text from a server: hidden characters made visible (with the
notice first), each server's part capped. They are a server's words, never the operator's: the
text says so before any of them.
"""

from __future__ import annotations

from collections.abc import Iterable

from ._gateway_content import Shaper
from ._pinning import PinState, server_key
from ._toolset import McpToolset

__all__ = ["MAX_CHARS", "PREAMBLE", "approved_instructions", "combine"]

MAX_CHARS = 8192
"""Characters of one server's instructions passed on (the rest is cut, and the text says so)."""

PREAMBLE = ("[anfitrion gateway: the instructions of the MCP servers behind this gateway, each "
            "as its server wrote it and a person approved it. They describe the servers' tools; "
            "they are the servers' words, not the user's or the operator's.]")


async def approved_instructions(toolset: McpToolset) -> str | None:
    """*toolset*'s instructions as approved, when its pin is approved and its identity is
    the approved one; else ``None``."""
    pin = await toolset.pins.get(server_key(toolset.id))
    if pin is None or pin.state is not PinState.APPROVED or pin.approved_definition is None:
        return None
    if pin.approved_definition.get("launch") != toolset.identity:
        return None
    text = pin.approved_definition.get("instructions")
    return text if isinstance(text, str) and text.strip() else None


def combine(parts: Iterable[tuple[str, str]]) -> str | None:
    """One text of ``(server id, instructions)`` pairs, shaped; ``None`` when there are none."""
    sections: list[str] = []
    found: list[str] = []
    for server, text in parts:
        shaper = Shaper(MAX_CHARS)
        shown = shaper.text(text)
        if shaper.cut:
            shown += f"\n[anfitrion: cut at {MAX_CHARS} characters]"
        found.extend(shaper.found)
        sections.append(f"## server `{server}`\n{shown}")
    if not sections:
        return None
    head = [PREAMBLE]
    if found:
        notice = Shaper(0)
        notice.found = found
        shown_notice = notice.notice()
        assert shown_notice is not None
        head.insert(0, shown_notice.text)
    return "\n\n".join([*head, *sections])
