"""The gate: every proposed call passes the same six stages, in order.

1. **resolve** — exact match among the tools offered this turn; unknown → error result.
2. **validate** — strict JSON parse of the argument text, JSON Schema, business rules; each
   failure is an error result naming the field, and retries are bounded.
3. **decide** — the :class:`~anfitrion.policy.Policy` answers allow, deny or ask.
4. **approve** — for ask: an approval bound to the call's digest, answered now or later.
5. **execute** — the handler runs with the principal's authority, side effects through the
   execution ledger (claimed before, settled after: never twice).
6. **shape** — the result is capped, labelled with its provenance and paired to the call id.

Each stage emits a :class:`~anfitrion.events.HostEvent`. The gate knows no wire format.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import pydantic

from ._json import DEFAULT_MAX_BYTES, DEFAULT_MAX_DEPTH, JsonError, parse_json_strict
from .approvals import ApprovalAnswer, ApprovalRequest, Approver
from .conversation import Provenance, ToolCall, ToolResult
from .events import EventType, HostEvent
from .policy import Decision, Policy, PolicyContext, Verdict
from .principal import Principal
from .store import ClaimState, Store
from .tools import ArgumentError, BoundCall, Effect, Tool, ToolContext

__all__ = ["CallOutcome", "Gate", "GateLimits", "ToolError", "shape_result"]

log = logging.getLogger("anfitrion.gate")


class ToolError(Exception):
    """Raise from a tool to tell the model what went wrong; the message is shown as is."""


@dataclass(frozen=True, slots=True)
class GateLimits:
    """Bounds on what a model may send."""

    max_argument_bytes: int = DEFAULT_MAX_BYTES
    max_argument_depth: int = DEFAULT_MAX_DEPTH
    max_invalid_per_tool: int = 3
    max_invalid_per_session: int = 10


@dataclass
class CallScope:
    """What the gate needs to know about the session for one call (built by the host)."""

    principal: Principal
    session_id: str
    turn: int
    counters: dict[str, int] = field(default_factory=dict)
    invalid_by_tool: dict[str, int] = field(default_factory=dict)
    recent_calls: list[tuple[str, str]] = field(default_factory=list)
    untrusted_sources: list[str] = field(default_factory=list)
    pending_request_id: str | None = None


@dataclass(frozen=True, slots=True)
class CallOutcome:
    """How one call left the gate. ``result is None`` means: waiting for a person."""

    call: ToolCall
    stage: str
    result: ToolResult | None
    decision: Decision | None = None
    request: ApprovalRequest | None = None
    exhausted: bool = False


Emit = Callable[[HostEvent], Awaitable[None]]


async def _silent(event: HostEvent) -> None:
    """The emitter of a host with no listeners: events are not even built."""


def _jsonable(value: Any) -> Any:
    if isinstance(value, pydantic.BaseModel):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return str(value)


def shape_result(call_id: str, tool: Tool, value: Any) -> ToolResult:
    """Turn what a handler returned into a capped, labelled result."""
    if isinstance(value, ToolResult):
        value = value.content
    if isinstance(value, str):
        text = value
    elif isinstance(value, bytes):
        text = value.decode("utf-8", errors="replace")
    else:
        text = json.dumps(value, ensure_ascii=False, default=_jsonable)
    cap = tool.max_result_chars
    truncated = len(text) > cap
    if truncated:
        text = f"{text[:cap]}\n[truncated: showing {cap} of {len(text)} characters]"
    return ToolResult(call_id, tool.name, text, truncated=truncated, provenance=tool.provenance)


def _error(call: ToolCall, kind: str, message: str, tool: Tool | None = None) -> ToolResult:
    # a host-written error (unknown tool) is trusted; anything from a tool keeps its label
    provenance = tool.provenance if tool is not None else Provenance.TRUSTED
    return ToolResult(call.id, call.name, message, is_error=True, error_kind=kind,
                      provenance=provenance)


def _shown_name(name: str) -> str:
    return repr(name if len(name) <= 64 else name[:64] + "…")


class Gate:
    """Runs the six stages for one call. Built by the host; stateless between calls."""

    def __init__(self, *, policy: Policy, approver: Approver, store: Store, emit: Emit,
                 limits: GateLimits | None = None) -> None:
        self.policy = policy
        self.approver = approver
        self.store = store
        self.emit = emit
        self.limits = limits or GateLimits()

    async def _event(self, type: EventType, scope: CallScope, proposed: ToolCall,
                     **fields: Any) -> None:
        if self.emit is _silent:
            return
        await self.emit(HostEvent(type, scope.session_id, scope.turn, scope.principal.id,
                                  proposed.id, proposed.name, **fields))

    async def _finish(self, scope: CallScope, outcome: CallOutcome) -> CallOutcome:
        if outcome.result is not None:
            await self._event(EventType.RESULT_RETURNED, scope, outcome.call,
                              result=outcome.result, status=outcome.stage)
        return outcome

    async def process(self, call: ToolCall, offered: Mapping[str, Tool],
                      scope: CallScope) -> CallOutcome:
        """Take one proposed call through the stages; never raises for bad input."""
        await self._event(EventType.CALL_PROPOSED, scope, call, call=call)

        # 1. resolve — exact, byte-for-byte; only what was offered this turn.
        tool = offered.get(call.name) if isinstance(call.name, str) else None
        if tool is None:
            result = _error(call, "unknown_tool", f"unknown tool {_shown_name(call.name)}: "
                            f"it is not one of the tools offered ({', '.join(sorted(offered))})")
            await self._event(EventType.CALL_REJECTED, scope, call, detail="unknown tool")
            return await self._finish(scope, CallOutcome(call, "resolve", result))

        # 2. validate — strict parse, schema, business rules; bounded retries.
        try:
            parsed = parse_json_strict(call.raw_arguments or "{}",
                                       max_bytes=self.limits.max_argument_bytes,
                                       max_depth=self.limits.max_argument_depth)
            arguments = tool.validate(parsed)
        except (JsonError, ArgumentError) as exc:
            return await self._finish(scope, await self._invalid(call, tool, scope, str(exc)))
        bound = BoundCall(call.id, tool, parsed)
        await self._event(EventType.CALL_VALIDATED, scope, call, arguments=parsed)

        # 3. decide
        decision = self.policy.decide(bound, self._policy_context(scope))
        await self._event(EventType.CALL_DECIDED, scope, call, arguments=parsed,
                          decision=decision)
        if decision.verdict is Verdict.DENY:
            result = _error(call, "denied", f"denied by policy: {decision.reason}", tool)
            return await self._finish(scope, CallOutcome(call, "decide", result, decision))

        # 4. approve
        digest: str | None = None
        if decision.verdict is Verdict.ASK:
            outcome, digest = await self._approve(call, bound, decision, scope)
            if outcome is not None:
                return await self._finish(scope, outcome)

        # 5. execute, 6. shape
        result = await self._execute(call, tool, arguments, scope, digest)
        return await self._finish(scope, CallOutcome(call, "execute", result, decision))

    def _policy_context(self, scope: CallScope) -> PolicyContext:
        return PolicyContext(principal=scope.principal, session_id=scope.session_id,
                             turn=scope.turn, counters=scope.counters,
                             recent_calls=tuple(scope.recent_calls),
                             untrusted_sources=tuple(scope.untrusted_sources))

    async def _invalid(self, call: ToolCall, tool: Tool, scope: CallScope,
                       problem: str) -> CallOutcome:
        count = scope.invalid_by_tool.get(tool.name, 0) + 1
        scope.invalid_by_tool[tool.name] = count
        total = scope.counters.get("invalid_calls", 0) + 1
        scope.counters["invalid_calls"] = total
        await self._event(EventType.CALL_REJECTED, scope, call, detail=problem)
        exhausted = (count > self.limits.max_invalid_per_tool
                     or total > self.limits.max_invalid_per_session)
        if exhausted:
            message = (f"invalid arguments for {tool.name}: {problem}. Too many invalid calls; "
                       "stop calling this tool.")
            return CallOutcome(call, "validate", _error(call, "retry_limit", message, tool),
                               exhausted=True)
        message = f"invalid arguments for {tool.name}: {problem}. Fix the arguments and retry."
        return CallOutcome(call, "validate", _error(call, "invalid_arguments", message, tool))

    async def _approve(self, call: ToolCall, bound: BoundCall, decision: Decision,
                       scope: CallScope) -> tuple[CallOutcome | None, str]:
        fresh = ApprovalRequest.for_call(
            session_id=scope.session_id, principal_id=scope.principal.id, call_id=call.id,
            tool_name=bound.tool.name, tool_definition_hash=bound.tool.definition_hash,
            arguments=bound.arguments, effect=bound.tool.effect.value, reason=decision.reason,
            rule_id=decision.rule_id, warnings=decision.warnings)

        def denied(message: str, request: ApprovalRequest | None) -> CallOutcome:
            return CallOutcome(call, "approve", _error(call, "denied", message, bound.tool),
                               decision, request)

        answer: ApprovalAnswer | None
        if scope.pending_request_id is not None:
            stored = await self.store.get_approval(scope.pending_request_id)
            if stored is None:
                return denied("denied: the approval request no longer exists", None), ""
            request, answer, _ = stored
            if request.digest != fresh.digest:
                return denied("denied: the call or the tool changed after approval was asked",
                              request), ""
            if answer is None:
                if request.expired():
                    return denied("denied: the approval request expired", request), ""
                return CallOutcome(call, "approve", None, decision, request), ""
        else:
            request = fresh
            await self.store.create_approval(request)
            await self._event(EventType.APPROVAL_REQUESTED, scope, call,
                              arguments=bound.arguments, decision=decision, request=request)
            answer = await self.approver.decide(request)
            if answer is None:
                return CallOutcome(call, "approve", None, decision, request), ""
            if not await self.store.answer_approval(answer):
                return denied("denied: the answer did not match the request", request), ""
        await self._event(EventType.APPROVAL_ANSWERED, scope, call, request=request,
                          answer=answer)
        if answer.digest != request.digest:
            return denied("denied: the answer was given for different arguments", request), ""
        if request.expired(answer.at):
            return denied("denied: the approval request expired before it was answered",
                          request), ""
        if not answer.approved:
            note = f": {answer.note}" if answer.note else ""
            return denied(f"denied by {answer.approver}{note}", request), ""
        if await self.store.consume_approval(request.id, request.digest) is None:
            return denied("denied: this approval was already used", request), ""
        return None, request.digest

    async def _execute(self, call: ToolCall, tool: Tool, arguments: dict[str, Any],
                       scope: CallScope, digest: str | None) -> ToolResult:
        ledger = tool.effect is Effect.WRITE
        if ledger:
            claim = await self.store.claim_execution(scope.session_id, call.id, digest or "")
            await self._event(EventType.EXECUTION_CLAIMED, scope, call,
                              status=claim.state.value)
            if claim.state in (ClaimState.DONE, ClaimState.FAILED) and claim.result is not None:
                return claim.result
            if claim.state is ClaimState.UNKNOWN and not tool.idempotent:
                return _error(call, "outcome_unknown", "outcome unknown — the action may have "
                              "happened; it was not run again. Ask the operator to check.", tool)
        context = ToolContext(scope.principal, scope.session_id, call.id, tool.name, scope.turn)
        try:
            if tool.timeout is not None:
                with anyio.fail_after(tool.timeout):
                    value = await tool.handler(arguments, context)
            else:
                value = await tool.handler(arguments, context)
            result = shape_result(call.id, tool, value)
        except TimeoutError:
            hint = " The action may have happened." if ledger else ""
            result = _error(call, "timeout", f"{tool.name} timed out after {tool.timeout:g} "
                            f"seconds.{hint}", tool)
        except ToolError as exc:
            result = _error(call, "tool_error", f"{tool.name} failed: {exc}"[:2000], tool)
        except Exception as exc:
            log.exception("tool %s raised (session %s, call %s)", tool.name, scope.session_id,
                          call.id)
            result = _error(call, "tool_error",
                            f"{tool.name} failed with an internal error ({type(exc).__name__}).",
                            tool)
        if ledger:
            await self.store.settle_execution(scope.session_id, call.id, result)
            await self._event(EventType.EXECUTION_SETTLED, scope, call, result=result,
                              status="failed" if result.is_error else "done")
        return result
