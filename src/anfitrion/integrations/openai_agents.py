"""OpenAI Agents SDK agents behind the gate: gated function tools, approvals as interruptions.

:meth:`AgentsGate.tools` returns each :class:`~agents.FunctionTool` of an agent as a gated
one. Its ``on_invoke_tool`` submits the model's argument text, exactly as sent, through
:meth:`GatedSession.submit` — resolve, strict parse and schema validation, policy, approval bound
to the call's digest, the execution ledger, shaping, audit — with the original tool as
``execute=`` (the SDK's own validation of a decorated function runs after ours). Its
``needs_approval`` asks the gate's policy first: a call that needs a person raises its approval
request in anfitrion and interrupts the run (``result.interruptions``).

Answer it in the framework — :meth:`AgentsGate.approve` / :meth:`AgentsGate.reject` record the
answer in anfitrion (``via="openai-agents"``) and then call ``RunState.approve`` / ``reject`` —
or in anfitrion (the inbox, the CLI, :func:`anfitrion._answers.answer`) and apply it with
:meth:`AgentsGate.apply_answers`. Then run the state again. An approval counts only for the
arguments the request was raised for: a state whose call was changed since is refused.

Example:
    >>> gate = AgentsGate(session, effects={"get_weather": "read"})  # doctest: +SKIP
    >>> agent = Agent(name="a", tools=gate.tools([get_weather, send_mail]))  # doctest: +SKIP
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from .._approvals import DeferredApprover, declined_text
from .._runtime import GatedSession, SubmissionStatus
from .._tools import Effect
from ..exceptions import MissingDependencyError, ToolError, UserError
from ._offered import (
    AgentTools,
    approve_in_framework,
    belongs_to,
    pending_request,
    submit,
    would_ask,
)

try:
    from agents import FunctionTool, RunContextWrapper, RunState, ToolApprovalItem
    from agents.tool_context import ToolContext
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingDependencyError("openai-agents", "agents") from exc

__all__ = ["AgentsGate"]

VIA = "openai-agents"

def _never(arguments: dict[str, Any]) -> Any:
    # needs_approval only raises the request; the call runs in on_invoke_tool after approval
    raise ToolError("this call runs only after its approval, through its agent framework")

def _call_id(item: ToolApprovalItem) -> str:
    raw = item.raw_item
    value = raw.get("call_id") if isinstance(raw, dict) else getattr(raw, "call_id", None)
    if not isinstance(value, str):
        raise UserError("the approval item has no call id")
    return value

def _arguments(item: ToolApprovalItem) -> str | None:
    raw = item.raw_item
    value = raw.get("arguments") if isinstance(raw, dict) else getattr(raw, "arguments", None)
    return value if isinstance(value, str) else None

class AgentsGate:
    """An anfitrion session's gate for OpenAI Agents SDK function tools.

    Args:
        session: the open :class:`GatedSession` (its runtime's policy, store, audit); its
            runtime's approver must be a :class:`DeferredApprover` (answers come through the
            run's interruptions or the inbox).
        effects: tool name → :class:`Effect`; tools not named are writes.
        trusted: tools whose results only the operator can write (others are untrusted).
    """

    def __init__(self, session: GatedSession, *, effects: Mapping[str, Effect | str] = {},
                 trusted: Sequence[str] = ()) -> None:
        if not isinstance(session.runtime.approver, DeferredApprover):
            raise UserError("AgentsGate needs a Runtime(approver=DeferredApprover()): the "
                            "run's interruptions and the inbox answer its requests")
        self.session = belongs_to(session, VIA)
        self.effects = dict(effects)
        self.trusted = frozenset(trusted)
        self.offered = AgentTools.of(session)
        self._refused: dict[str, str] = {}

    def tools(self, tools: Sequence[FunctionTool]) -> list[FunctionTool]:
        """Each function tool behind the gate."""
        return [self.tool(t) for t in tools]

    def tool(self, original: FunctionTool) -> FunctionTool:
        """*original* behind the gate (same name, description and schema)."""
        name = original.name
        self.offered.describe(name, original.description, original.params_json_schema,
                              effect=self.effects.get(name), trusted=name in self.trusted or None)
        session = self.session

        async def needs_approval(ctx: RunContextWrapper[Any], params: dict[str, Any],
                                 call_id: str) -> bool:
            if not await would_ask(session, self.offered.get(name), call_id, params):
                # the tool's own setting still counts: the gate never makes a call less guarded
                own = original.needs_approval
                return bool(await own(ctx, params, call_id)) if callable(own) else own
            if session.pending.get(call_id) is not None:
                return True
            submission = await submit(session, name, params, call_id, execute=_never)
            if submission.status is SubmissionStatus.WAITING:
                return True
            self._refused[call_id] = submission.text  # e.g. too many requests waiting
            return False

        async def invoke(ctx: ToolContext[Any], arguments: str) -> Any:
            call_id = ctx.tool_call_id
            if call_id in self._refused:
                return self._refused.pop(call_id)
            found = await pending_request(session, call_id)
            refusal = None
            if found is not None and not found[1]:
                # the SDK calls a tool that waits only once the run's state approved it
                refusal = await approve_in_framework(session, self.offered.get(name), call_id,
                                                     arguments, approver=VIA, via=VIA)

            async def run(checked: dict[str, Any]) -> Any:
                return await original.on_invoke_tool(ctx, json.dumps(checked))

            submission = await submit(session, name, arguments, call_id, execute=run)
            if submission.status is SubmissionStatus.WAITING and refusal is not None:
                return refusal
            return submission.text

        return replace(original, on_invoke_tool=invoke, needs_approval=needs_approval)

    async def approve(self, state: RunState[Any], item: ToolApprovalItem, *,
                      approver: str) -> str | None:
        """Approve *item* in anfitrion (bound to the arguments it carries) and in *state*.
        Returns why it was refused (then the state is left unapproved), or ``None``."""
        call_id = _call_id(item)
        refusal = await approve_in_framework(
            self.session, self.offered.get(item.tool_name or ""), call_id, _arguments(item),
            approver=approver, via=VIA)
        if refusal is None:
            state.approve(item)
        return refusal

    async def reject(self, state: RunState[Any], item: ToolApprovalItem, *, approver: str,
                     reason: str = "") -> None:
        """Deny *item* in anfitrion and reject it in *state* (the model is told a person
        declined it, with *reason*)."""
        await approve_in_framework(self.session, None, _call_id(item), None, approver=approver,
                                   via=VIA, approved=False, note=reason)
        state.reject(item, rejection_message=declined_text(reason))

    async def apply_answers(self, state: RunState[Any]) -> list[ToolApprovalItem]:
        """Apply to *state* the answers anfitrion holds (given in the inbox, the CLI, the API)
        for its interruptions; returns the items that still wait."""
        waiting = []
        for item in state.get_interruptions():
            found = await pending_request(self.session, _call_id(item))
            if found is None:
                waiting.append(item)
                continue
            stored = await self.session.runtime.store.get_approval(found[0].id)
            given = stored.answer if stored is not None else None
            if given is None or given.withdrawn:
                waiting.append(item)
            elif given.approved:
                state.approve(item)
            else:
                state.reject(item, rejection_message=declined_text(given.note))
        return waiting

