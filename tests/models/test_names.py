"""Tool names a provider refuses (``git.log``) travel under stand-in names and come back real."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from anfitrion import Effect, Host, RunStatus, Toolbox
from anfitrion._conversation import Reply, StopReason, ToolCall, ToolResult, UserMessage
from anfitrion._tools import ToolDefinition
from anfitrion.models._base import Model, ModelRequest
from anfitrion.models._names import restore_names, wire_safe
from anfitrion.models._profiles import ANTHROPIC, OPENAI_CHAT

from .fake_providers import anthropic_brain, chat_brain, responses_brain, serve


def test_dotted_names_are_renamed_everywhere_in_a_request_and_mapped_back() -> None:
    call = ToolCall.from_object("c1", "git.log", {})
    request = ModelRequest(
        [UserMessage(()), Reply((call,), StopReason.TOOL_USE),
         UserMessage((ToolResult("c1", "git.log", "abc"),))],
        (ToolDefinition("git.log", "Log.", {"type": "object"}),
         ToolDefinition("get_weather", "W.", {"type": "object"})), tool_choice="git.log")
    safe, back = wire_safe(request, ANTHROPIC)
    assert [t.name for t in safe.tools] == ["git__log", "get_weather"]
    assert safe.messages[1].parts[0].name == "git__log"  # type: ignore[union-attr]
    assert safe.messages[2].parts[0].name == "git__log"  # type: ignore[union-attr]
    assert safe.tool_choice == "git__log"
    assert back == {"git__log": "git.log"}
    reply = Reply((ToolCall.from_object("c2", "git__log", {}),
                   ToolCall.from_object("c3", "invented", {})), StopReason.TOOL_USE)
    assert [c.name for c in restore_names(reply, back).tool_calls] == ["git.log", "invented"]
    assert request.messages[1].parts[0].name == "git.log"  # type: ignore[union-attr]


def test_valid_names_leave_the_request_untouched() -> None:
    request = ModelRequest([], (ToolDefinition("get_weather", "W.", {"type": "object"}),))
    assert wire_safe(request, OPENAI_CHAT) == (request, {})


def test_a_stand_in_never_collides_with_a_real_name() -> None:
    request = ModelRequest([], (ToolDefinition("git.log", "", {"type": "object"}),
                                ToolDefinition("git__log", "", {"type": "object"}),
                                ToolDefinition("x." + "y" * 80, "", {"type": "object"})))
    safe, back = wire_safe(request, ANTHROPIC)
    names = [t.name for t in safe.tools]
    assert len(set(names)) == 3
    assert all(ANTHROPIC.tool_name_pattern.fullmatch(n) for n in names)
    assert set(back.values()) == {"git.log", "x." + "y" * 80}


pytest.importorskip("anthropic")
pytest.importorskip("openai")

from anfitrion.models.anthropic import AnthropicModel  # noqa: E402
from anfitrion.models.openai_chat import OpenAIChatModel  # noqa: E402
from anfitrion.models.openai_responses import OpenAIResponsesModel  # noqa: E402


@pytest.mark.anyio
@pytest.mark.parametrize(("brain", "make"), [
    (anthropic_brain((("git__log", {"n": 2}),)),
     lambda url: AnthropicModel("c", api_key="k", base_url=url, max_retries=0)),
    (responses_brain((("git__log", {"n": 2}),)),
     lambda url: OpenAIResponsesModel("g", api_key="k", base_url=f"{url}/v1", max_retries=0)),
    (chat_brain((("git__log", {"n": 2}),)),
     lambda url: OpenAIChatModel("l", base_url=f"{url}/v1", max_retries=0)),
])
async def test_an_mcp_style_tool_runs_through_each_provider_format(
        brain: Any, make: Callable[[str], Model]) -> None:
    ran: list[int] = []
    tools = Toolbox()

    @tools.tool(name="git.log", effect=Effect.READ, provenance="trusted")
    def git_log(n: int) -> str:
        """Show the last commits."""
        ran.append(n)
        return "abc123 first commit"

    with serve(brain) as server:
        run = await Host(model=make(server.url), tools=tools, max_turns=3).run("log?")
    assert run.status is RunStatus.COMPLETED, run.error
    assert ran == [2]
    sent = server.requests[0].body.get("tools", [])
    assert "git.log" not in str(sent) and "git__log" in str(sent)
