"""Claude Agent SDK sessions behind the gate: ``can_use_tool`` decides, hooks report results.

Claude Code (the CLI the SDK drives) runs its tools itself — built-in ones (``Read``,
``Bash``, …) and in-process SDK MCP tools alike. What anfitrion can hold is the permission
decision: :meth:`ClaudeGate.can_use_tool` submits every proposed call through
:meth:`GatedSession.submit` — resolve among the tools declared to the gate, strict schema
validation, policy, approval bound to the call's digest, the ledger, audit — and answers
``allow`` with ``updated_input`` set to exactly the arguments the gate checked, or ``deny`` with
the gate's reason. The ``PostToolUse`` hook (:meth:`ClaudeGate.post_tool_use`) reports what
the tool returned, with its provenance, so taint sees it.

A call that needs a person: with ``ask`` (your own prompt, the SDK's HITL), the gate asks it and
records the answer through :func:`anfitrion._answers.answer` (``via="claude-agent-sdk"``);
without, the call is denied for now and its request waits in the inbox — once answered there,
the same call (same tool use id, same input) is allowed. A permission request without a tool
use id (the SDK always sends one) is denied.

Example:
    >>> gate = ClaudeGate(session, effects={"Read": "read"})  # doctest: +SKIP
    >>> options = ClaudeAgentOptions(**gate.options())  # doctest: +SKIP
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from .. import _answers as answers
from .._approvals import ApprovalRequest
from .._runtime import GatedSession, SubmissionStatus
from .._tools import Effect
from ..exceptions import MissingDependencyError
from ._offered import AgentTools, belongs_to, submit

try:
    from claude_agent_sdk import HookMatcher, SdkMcpTool
    from claude_agent_sdk.types import (
        HookContext,
        HookInput,
        HookJSONOutput,
        PermissionResult,
        PermissionResultAllow,
        PermissionResultDeny,
        ToolPermissionContext,
    )
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingDependencyError("claude-agent-sdk", "claude_agent_sdk") from exc

__all__ = ["ClaudeGate"]

VIA = "claude-agent-sdk"
ANY_OBJECT: Mapping[str, Any] = {"type": "object", "additionalProperties": True}
Ask = Callable[[ApprovalRequest], Awaitable[bool]]
NO_TOOL_USE_ID = ("denied: the permission request carries no tool use id, which anfitrion binds "
                  "approvals and the execution ledger to (update claude-agent-sdk: it always "
                  "sends one)")


def _wire_schema(sdk_tool: SdkMcpTool[Any]) -> Mapping[str, Any]:
    """The JSON Schema the SDK sends Claude Code for *sdk_tool* (``{"x": str}`` shorthand,
    TypedDicts and JSON Schema alike), so the gate checks what the model was shown."""
    try:  # the SDK's own conversion; private, so fall back to what is certain
        from claude_agent_sdk import _build_input_schema
    except ImportError:  # pragma: no cover - another SDK release
        given = sdk_tool.input_schema
        return given if isinstance(given, dict) and "properties" in given else ANY_OBJECT
    schema: Mapping[str, Any] = _build_input_schema(sdk_tool)
    return schema


class ClaudeGate:
    """An anfitrion session's gate for a Claude Agent SDK session.

    Args:
        session: the open :class:`GatedSession` (its runtime's policy, store, audit).
        tools: SDK MCP tools (``@tool``) to declare with their schemas.
        server: the name the SDK MCP server of *tools* is given in ``mcp_servers``; Claude
            Code calls them ``mcp__<server>__<tool>``.
        schemas: other tool names (built-in tools such as ``Read``, MCP tools as
            ``mcp__server__name``) → input schema; ``None`` accepts any object. A tool
            declared nowhere is unknown and refused.
        effects: tool name → :class:`Effect`; tools not named are writes.
        trusted: tools whose results only the operator can write (others are untrusted).
        ask: ``async (request) -> bool``, a person's answer now; without it a call that
            needs a person is denied until it is answered in anfitrion.
        approver: who *ask* answers as, in the audit log.
    """

    def __init__(self, session: GatedSession, *, tools: Sequence[SdkMcpTool[Any]] = (),
                 server: str | None = None,
                 schemas: Mapping[str, Mapping[str, Any] | None] = {},
                 effects: Mapping[str, Effect | str] = {}, trusted: Sequence[str] = (),
                 ask: Ask | None = None, approver: str = VIA) -> None:
        self.session = belongs_to(session, VIA)
        self.ask = ask
        self.approver = approver
        self.offered = AgentTools.of(session)
        trusted_names = frozenset(trusted)
        for t in tools:
            schema = _wire_schema(t)
            name = f"mcp__{server}__{t.name}" if server else t.name
            self._declare(name, t.description, schema, effects, trusted_names)
        for name, given in schemas.items():
            self._declare(name, "", given or ANY_OBJECT, effects, trusted_names)

    def _declare(self, name: str, description: str, schema: Mapping[str, Any],
                 effects: Mapping[str, Effect | str], trusted: frozenset[str]) -> None:
        self.offered.describe(name, description, schema, effect=effects.get(name),
                              trusted=name in trusted or None)

    def options(self) -> dict[str, Any]:
        """``ClaudeAgentOptions`` keywords wiring this gate in (``can_use_tool``, hooks)."""
        return {"can_use_tool": self.can_use_tool,
                "hooks": {"PostToolUse": [HookMatcher(hooks=[self.post_tool_use])]}}

    async def can_use_tool(self, tool_name: str, tool_input: dict[str, Any],
                           context: ToolPermissionContext) -> PermissionResult:
        """The SDK's permission callback: the gate decides, for exactly these arguments.

        A call without a tool use id is denied before the gate sees it: the SDK always gives
        one (its wire protocol requires it), and approvals, the ledger and reported results
        are bound to it — under a made-up id a person's answer could never reach the call,
        and every try would raise a new request."""
        call_id = context.tool_use_id
        if not call_id:
            return PermissionResultDeny(message=NO_TOOL_USE_ID)
        checked: dict[str, Any] = {}

        def hand_over(arguments: dict[str, Any]) -> str:
            checked.update(arguments)
            return "allowed; Claude Code runs the tool"

        submission = await submit(self.session, tool_name, tool_input, call_id,
                                  execute=hand_over)
        if submission.status is SubmissionStatus.WAITING and self.ask is not None:
            request = submission.request
            assert request is not None
            approved = await self.ask(request)
            await answers.answer(self.session.runtime.store, request.id, request.digest,
                                 approved=approved, approver=self.approver, via=VIA)
            submission = await submit(self.session, tool_name, tool_input, call_id,
                                      execute=hand_over)
        if submission.status is SubmissionStatus.EXECUTED:
            return PermissionResultAllow(updated_input=checked)
        if submission.status is SubmissionStatus.WAITING:
            request = submission.request
            assert request is not None
            return PermissionResultDeny(
                message=f"{submission.text} Approve request {request.id} in anfitrion "
                        "(inbox or `anfitrion approvals approve`), then try again.",
                interrupt=True)
        return PermissionResultDeny(message=submission.text)

    async def post_tool_use(self, input: HookInput, tool_use_id: str | None,
                            context: HookContext) -> HookJSONOutput:
        """The ``PostToolUse`` hook: report what the tool returned, with its provenance."""
        if input["hook_event_name"] == "PostToolUse":
            name = input["tool_name"]
            response = input["tool_response"]
            content = response if isinstance(response, str) else json.dumps(response,
                                                                             default=str)
            tool = self.offered.get(name)
            provenance = tool.provenance if tool is not None else "untrusted"
            await self.session.report_result(name, content, provenance=provenance,
                                             call_id=f"{input['tool_use_id']}:result")
        return {}
