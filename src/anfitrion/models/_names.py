"""Tool names a provider refuses, sent under stand-in names and mapped back.

anfitrion's tool names may contain a dot (MCP tools are ``<server>.<tool>``); the providers'
function names may not. Before a request, :func:`wire_safe` renames such tools — in the offered
tool definitions and in every past call and result of the conversation, consistently — and after
the reply :func:`restore_names` gives the model's calls their real names back, so the gate
resolves the names the host offered, byte for byte. A name the model invents is left as it is
(and is refused at resolve).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Mapping

from .._conversation import Reply, Text, ToolCall, ToolResult, UserMessage
from ._base import ModelRequest
from ._profiles import Profile

__all__ = ["restore_names", "wire_safe"]


def _stand_in(name: str, pattern: re.Pattern[str], taken: set[str]) -> str:
    candidate = re.sub(r"[^a-zA-Z0-9_-]", "__", name)[:64]
    if candidate in taken or not pattern.fullmatch(candidate):
        suffix = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:10]
        candidate = f"{re.sub(r'[^a-zA-Z0-9_-]', '_', name)[:53]}_{suffix}"
    return candidate


def wire_safe(request: ModelRequest, profile: Profile) -> tuple[ModelRequest, dict[str, str]]:
    """*request* with every tool name the profile refuses renamed; and the map back."""
    pattern = profile.tool_name_pattern
    names = {t.name for t in request.tools}
    for message in request.messages:
        if isinstance(message, Reply):
            names.update(c.name for c in message.tool_calls)
    bad = sorted(n for n in names if isinstance(n, str) and not pattern.fullmatch(n))
    if not bad:
        return request, {}
    taken = set(names)
    forward: dict[str, str] = {}
    for name in bad:
        forward[name] = _stand_in(name, pattern, taken)
        taken.add(forward[name])

    def rename(part: Text | ToolCall | ToolResult) -> Text | ToolCall | ToolResult:
        if isinstance(part, (ToolCall, ToolResult)) and part.name in forward:
            return dataclasses.replace(part, name=forward[part.name])
        return part

    messages = [dataclasses.replace(m, parts=tuple(rename(p) for p in m.parts))  # type: ignore[arg-type]
                if isinstance(m, (Reply, UserMessage)) else m for m in request.messages]
    tools = tuple(dataclasses.replace(t, name=forward.get(t.name, t.name))
                  for t in request.tools)
    tool_choice = forward.get(request.tool_choice or "", request.tool_choice)
    safe = dataclasses.replace(request, messages=messages, tools=tools, tool_choice=tool_choice)
    return safe, {wire: name for name, wire in forward.items()}


def restore_names(reply: Reply, back: Mapping[str, str]) -> Reply:
    """*reply* with the stand-in names of its calls replaced by the real ones."""
    if not back or not any(c.name in back for c in reply.tool_calls):
        return reply
    parts = tuple(dataclasses.replace(p, name=back[p.name])
                  if isinstance(p, ToolCall) and p.name in back else p for p in reply.parts)
    return dataclasses.replace(reply, parts=parts)

