"""LangChain 1.x agents behind anfitrion's gate: a ``create_agent`` middleware.

:class:`AnfitrionMiddleware` is a ``wrap_tool_call`` middleware: every tool call the agent's
model proposes goes through the :class:`~anfitrion.Runtime`'s gate — by exact name, whatever
other middleware is configured — with the agent's own tool execution as the handler. Approvals
use LangChain's human-in-the-loop mechanism, ``interrupt()``, one per call, carrying
anfitrion's approval request and bound to its digest (see :mod:`anfitrion.integrations.langgraph`,
which does the work). Use it *instead of* ``HumanInTheLoopMiddleware``.

Example:
    >>> runtime = Runtime(gated_tools(tools, reads={"get_weather"}),         # doctest: +SKIP
    ...                   approver=DeferredApprover(), store="sqlite:///agent.db")
    >>> agent = create_agent(model, tools, middleware=[AnfitrionMiddleware(runtime)],
    ...                      checkpointer=InMemorySaver())                     # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from .._principal import Principal
from .._runtime import Runtime
from ..exceptions import MissingDependencyError
from .langgraph import (
    APPROVAL,
    Result,
    ToolGate,
    approval_value,
    approve,
    edit,
    gated_tools,
    reject,
)

try:
    from langchain.agents.middleware import AgentMiddleware
    from langgraph.prebuilt.tool_node import ToolCallRequest
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingDependencyError("langgraph", "langchain") from exc

__all__ = ["APPROVAL", "AnfitrionMiddleware", "approval_value", "approve", "edit",
           "gated_tools", "reject"]


class AnfitrionMiddleware(AgentMiddleware):  # type: ignore[type-arg]
    """Every tool call of a ``create_agent`` agent through anfitrion's gate.

    Args:
        runtime: the runtime (policy, approver, store, audit); its tools from
            :func:`gated_tools` over the agent's tools.
        principal: who the agent acts for, or a function of the call's request.
        session_id: the anfitrion session of a call (default ``langgraph-<thread_id>``).

    The agent needs a checkpointer and a ``thread_id``: a call that waits for a person
    interrupts the run. List this middleware after others that wrap tool calls and have no
    side effects of their own (it is the innermost gate before the tool runs).
    """

    def __init__(self, runtime: Runtime, *,
                 principal: Principal | str | Callable[[ToolCallRequest], Principal | str]
                 = "user",
                 session_id: Callable[[ToolCallRequest], str] | None = None) -> None:
        super().__init__()
        self.gate = ToolGate(runtime, principal=principal, session_id=session_id)

    @property
    def name(self) -> str:
        return "AnfitrionMiddleware"

    def wrap_tool_call(self, request: ToolCallRequest,
                       handler: Callable[[ToolCallRequest], Result]) -> Result:
        return self.gate.wrap(request, handler)

    async def awrap_tool_call(self, request: ToolCallRequest,
                              handler: Callable[[ToolCallRequest], Awaitable[Result]]
                              ) -> Result:
        return await self.gate.awrap(request, handler)

