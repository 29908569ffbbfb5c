"""A plain LangGraph ``ToolNode`` next to the gated one runs its tools ungated and unaudited,
whatever ``gated_tools`` described: ``ungated_tool_nodes`` / ``ToolGate.check`` find every such
node — beside the gated one, inside a subgraph, wrapped by something else, in a LangChain agent
without our middleware — and pass graphs whose every tool node goes through a gate (ours
directly, or our middleware alone or composed with others).
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("langgraph")
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage
from langchain_core.tools import BaseTool, tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

from anfitrion import DeferredApprover, Runtime
from anfitrion.exceptions import UserError
from anfitrion.integrations.langchain import AnfitrionMiddleware
from anfitrion.integrations.langgraph import ToolGate, gated_tools, ungated_tool_nodes

pytestmark = pytest.mark.anyio
SENT: list[str] = []


@tool
def send_mail(to: str) -> str:
    """Send an e-mail."""
    SENT.append(to)
    return f"sent to {to}"


TOOLS: list[BaseTool] = [send_mail]


class Fake(FakeMessagesListChatModel):
    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


class Passing(AgentMiddleware):  # type: ignore[type-arg]
    """Someone else's middleware: wraps tool calls, gates nothing."""

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        return handler(request)

    async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
        return await handler(request)


def _runtime() -> Runtime:
    return Runtime(gated_tools(TOOLS), approver=DeferredApprover())


def _graph(*nodes: tuple[str, Any]) -> StateGraph[Any]:
    builder: StateGraph[Any] = StateGraph(MessagesState)
    for name, node in nodes:
        builder.add_node(name, node)
    builder.add_edge(START, nodes[0][0])
    return builder


def test_every_ungated_tool_node_is_named() -> None:
    gate = ToolGate(_runtime())
    inner = _graph(("plain", ToolNode(TOOLS))).compile()

    async def other_wrapper(request: Any, handler: Any) -> Any:
        return await handler(request)

    builder = _graph(("gated", gate.tool_node(TOOLS)), ("beside", ToolNode(TOOLS)),
                     ("sub", inner),
                     ("wrapped", ToolNode(TOOLS, awrap_tool_call=other_wrapper)))
    assert ungated_tool_nodes(builder) == ["beside", "sub/plain", "wrapped"]
    assert ungated_tool_nodes(builder.compile()) == ["beside", "sub/plain", "wrapped"]
    with pytest.raises(UserError, match="'beside', 'sub/plain', 'wrapped'"):
        gate.check(builder.compile())


def test_agents_are_gated_only_with_our_middleware() -> None:
    runtime = _runtime()
    model = Fake(responses=[AIMessage("done")])
    assert ungated_tool_nodes(create_agent(model, TOOLS)) == ["tools"]
    assert ungated_tool_nodes(create_agent(model, TOOLS, middleware=[Passing()])) == ["tools"]
    for middleware in ([AnfitrionMiddleware(runtime)],
                       [Passing(), AnfitrionMiddleware(runtime)],
                       [AnfitrionMiddleware(runtime), Passing()]):
        assert ungated_tool_nodes(create_agent(model, TOOLS, middleware=middleware)) == []


def test_a_fully_gated_graph_passes_the_check_and_the_plain_node_really_is_ungated() -> None:
    runtime = _runtime()
    gate = ToolGate(runtime)
    gated = _graph(("tools", gate.tool_node(TOOLS))).compile()
    assert gate.check(gated) is gated
    # what the check is for: the plain node sends the mail with no question and no record
    plain = _graph(("tools", ToolNode(TOOLS))).compile()
    call = AIMessage("", tool_calls=[{"name": "send_mail", "args": {"to": "eve@evil.example"},
                                      "id": "c1"}])
    plain.invoke({"messages": [call]})
    assert SENT == ["eve@evil.example"]
