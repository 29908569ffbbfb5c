"""Pydantic AI agents behind the gate: a toolset wrapper, approvals as deferred tools.

:class:`GatedToolset` wraps any Pydantic AI toolset. Every call the agent's model proposes to
one of its tools goes through :meth:`GatedSession.submit` — resolve, strict parse and schema
validation, policy, approval bound to the call's digest, the execution ledger, shaping, audit —
with the wrapped tool as ``execute=``. Pydantic AI's own argument validation runs after ours,
inside the execute stage, so it converts types but never replaces the gate's checks.

A call that needs a person raises :class:`~pydantic_ai.exceptions.ApprovalRequired` carrying
the request id and digest in its metadata; the run ends with
:class:`~pydantic_ai.tools.DeferredToolRequests`. Answer it in the framework
(:meth:`GatedToolset.answer`, or ``DeferredToolResults(approvals=...)`` as Pydantic AI documents)
or in anfitrion (the inbox, the CLI, :func:`anfitrion._answers.answer`, then
:meth:`GatedToolset.results`), and run the agent again with the results: an approval counts
only for the arguments the request was raised for, whichever door it came through.

Example:
    >>> agent = Agent(model, toolsets=[GatedToolset(toolset, session)],  # doctest: +SKIP
    ...               output_type=[str, DeferredToolRequests])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from .. import _answers as answers
from .._approvals import declined_text
from .._runtime import GatedSession, Submission, SubmissionStatus
from .._tools import Effect
from ..exceptions import MissingDependencyError, UserError
from ._offered import AgentTools, approve_in_framework, belongs_to, submit

try:
    from pydantic_ai import RunContext
    from pydantic_ai.exceptions import ApprovalRequired, ToolFailed
    from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults, ToolDenied
    from pydantic_ai.toolsets import AbstractToolset, ToolsetTool, WrapperToolset
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingDependencyError("pydantic-ai", "pydantic_ai") from exc

__all__ = ["APPROVER", "REQUEST_DIGEST", "REQUEST_ID", "GatedToolset", "gate_toolsets"]

VIA = "pydantic-ai"
REQUEST_ID = "anfitrion_request_id"
"""The metadata key of a deferred call's approval request id."""
REQUEST_DIGEST = "anfitrion_digest"
"""The metadata key of the digest the request is bound to (what a person approves)."""
APPROVER = "anfitrion_approver"
"""The metadata key naming who approved, in ``DeferredToolResults.metadata``."""
_RAW = "\x00anfitrion.raw"


class _RawArguments:
    """Hands the model's argument text through unchanged, so the gate parses it first."""

    def validate_json(self, input: str | bytes | bytearray, *,
                      allow_partial: bool | Literal["off", "on", "trailing-strings"] = False,
                      **kwargs: Any) -> Any:
        text = input if isinstance(input, str) else bytes(input).decode("utf-8", "replace")
        return {_RAW: text}

    def validate_python(self, input: Any, *,
                        allow_partial: bool | Literal["off", "on", "trailing-strings"] = False,
                        **kwargs: Any) -> Any:
        return {_RAW: input}


@dataclass
class GatedToolset(WrapperToolset[Any]):
    """A Pydantic AI toolset whose every call goes through an anfitrion session's gate.

    Args:
        wrapped: the toolset to gate (a ``FunctionToolset``, an MCP server, ...).
        session: the open :class:`GatedSession` (its runtime's policy, store, audit).
        effects: tool name → :class:`Effect`; tools not named are writes.
        trusted: tools whose results only the operator can write (others are untrusted).
        approver: who approved, for approvals given as plain ``DeferredToolResults``.
    """

    session: GatedSession = field(kw_only=True)
    effects: Mapping[str, Effect | str] = field(default_factory=dict, kw_only=True)
    trusted: Sequence[str] = field(default=(), kw_only=True)
    approver: str = field(default="pydantic-ai", kw_only=True)
    _originals: dict[str, ToolsetTool[Any]] = field(default_factory=dict, init=False,
                                                    repr=False)

    def __post_init__(self) -> None:
        belongs_to(self.session, VIA)

    @property
    def agent_tools(self) -> AgentTools:
        return AgentTools.of(self.session)

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        tools = await self.wrapped.get_tools(ctx)
        offered = self.agent_tools
        gated: dict[str, ToolsetTool[Any]] = {}
        for name, tool in tools.items():
            d = tool.tool_def
            offered.describe(name, d.description or "", d.parameters_json_schema,
                             effect=self.effects.get(name), trusted=name in self.trusted or None)
            self._originals[name] = tool
            gated[name] = replace(tool, toolset=self, args_validator=_RawArguments(),
                                  args_validator_func=None)
        return gated

    async def call_tool(self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any],
                        tool: ToolsetTool[Any]) -> Any:
        original = self._originals.get(name, tool)
        raw = tool_args.get(_RAW, tool_args)
        call_id = ctx.tool_call_id or ""
        refusal = None
        if ctx.tool_call_approved:
            meta = ctx.tool_call_metadata if isinstance(ctx.tool_call_metadata, dict) else {}
            refusal = await approve_in_framework(
                self.session, self.agent_tools.get(name), call_id, raw,
                approver=str(meta.get(APPROVER) or self.approver), via=VIA,
                seen_digest=meta.get(REQUEST_DIGEST))

        async def run(arguments: dict[str, Any]) -> Any:
            validated = original.args_validator.validate_python(
                arguments, context=ctx.validation_context)
            if original.args_validator_func is not None:
                checked = original.args_validator_func(ctx, **validated)
                if hasattr(checked, "__await__"):
                    await checked
            return await self.wrapped.call_tool(name, validated, ctx, original)

        submission = await submit(self.session, name, raw, call_id or None, execute=run)
        return _answer(submission, refusal)

    async def answer(self, requests: DeferredToolRequests,
                     approvals: Mapping[str, bool | str], *, approver: str
                     ) -> DeferredToolResults:
        """Record a person's answers to *requests* through anfitrion (``via="pydantic-ai"``)
        and return the results to run the agent with.

        *approvals*: call id → ``True`` (approve), ``False`` or a reason (deny). Each answer
        is bound to the digest the request carried; an approval is used only if the call still
        has those arguments when the run resumes.

        Raises:
            UserError: a deferred call names a request that no call of this session waits on
                (another session's, another call's, one answered before); then no answer is
                recorded.
        """
        chosen = []
        for call in requests.approvals:
            verdict = approvals.get(call.tool_call_id)
            meta = requests.metadata.get(call.tool_call_id, {})
            if verdict is not None and REQUEST_ID in meta:
                chosen.append((call, verdict, meta, self._waited_on(call.tool_call_id, meta)))
        results: dict[str, bool | ToolDenied] = {}
        metadata: dict[str, dict[str, Any]] = {}
        for call, verdict, meta, request_id in chosen:
            approved = verdict is True
            note = verdict if isinstance(verdict, str) else ""
            outcome = await answers.answer(
                self.session.runtime.store, request_id, meta.get(REQUEST_DIGEST),
                approved=approved, approver=approver, note=note, via=VIA)
            if outcome.answer is None and outcome.refusal is not answers.Refusal.ANSWERED:
                assert outcome.refusal is not None
                results[call.tool_call_id] = ToolDenied(outcome.refusal.value)
                continue
            results[call.tool_call_id] = True if approved else ToolDenied(declined_text(note))
            metadata[call.tool_call_id] = {**meta, APPROVER: approver}
        return DeferredToolResults(approvals=dict(results), metadata=metadata)

    def _waited_on(self, call_id: str, meta: Mapping[str, Any]) -> str:
        """The id of the request *call_id* waits on in this session, which *meta* must name
        (the session's own record of its waiting calls: no store read)."""
        named = meta.get(REQUEST_ID)
        if named is None or self.session.pending.get(call_id) != named:
            raise UserError(
                f"deferred call {call_id[:80]!r} names approval request {str(named)[:80]!r}, "
                f"which it does not wait on in session {self.session.id!r} (a request of "
                "another session, of another call, or answered before): no answer was "
                "recorded")
        return str(named)

    async def results(self, requests: DeferredToolRequests) -> DeferredToolResults:
        """The answers anfitrion holds for *requests* (given in the inbox, the CLI, the API),
        as results to run the agent with; calls still waiting are left out.

        Raises:
            UserError: a deferred call names a request that no call of this session waits on
                (its answer is never read for this session).
        """
        store = self.session.runtime.store
        results: dict[str, bool | ToolDenied] = {}
        for call in requests.approvals:
            meta = requests.metadata.get(call.tool_call_id, {})
            if REQUEST_ID not in meta:
                continue
            found = await store.get_approval(self._waited_on(call.tool_call_id, meta))
            if found is None or found.answer is None or found.answer.withdrawn:
                continue
            given = found.answer
            results[call.tool_call_id] = True if given.approved else ToolDenied(
                declined_text(given.note))
        return DeferredToolResults(approvals=dict(results), metadata={
            k: v for k, v in requests.metadata.items() if k in results})


def _answer(submission: Submission, refusal: str | None) -> Any:
    if submission.status is SubmissionStatus.EXECUTED:
        return submission.text
    if submission.status is SubmissionStatus.WAITING:
        if refusal is not None:
            raise ToolFailed(refusal)
        request = submission.request
        assert request is not None
        raise ApprovalRequired(metadata={REQUEST_ID: request.id, REQUEST_DIGEST: request.digest,
                                         "tool": request.tool_name, "reason": request.reason})
    raise ToolFailed(submission.text)


def gate_toolsets(toolsets: Sequence[AbstractToolset[Any]], session: GatedSession,
                  **options: Any) -> list[AbstractToolset[Any]]:
    """Each of *toolsets* behind the gate (options as for :class:`GatedToolset`)."""
    return [GatedToolset(t, session=session, **options) for t in toolsets]
