"""The gate: every proposed call passes the same six stages, in order.

1. **resolve** — exact match among the tools offered this turn; unknown → error result.
2. **validate** — strict JSON parse of the argument text, JSON Schema, business rules; each
   failure is an error result naming the field, and retries are bounded.
3. **decide** — the :class:`~anfitrion.policy.Policy` answers allow, deny or ask.
4. **approve** — for ask: an approval bound to the call's digest, answered now or later.
5. **execute** — the handler runs with the principal's authority, side effects through the
   execution ledger (claimed before, settled after: never twice).
6. **shape** — the result is capped, labelled with its provenance and paired to the call id.

Each stage emits a :class:`~anfitrion._events.HostEvent`. The gate knows no wire format.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import anyio
import pydantic

from ._approvals import (
    NO_APPROVER,
    ApprovalAnswer,
    ApprovalRequest,
    Approver,
    approval_digest,
    declined_text,
)
from ._canonical import canonical_json
from ._conversation import Media, Provenance, ToolCall, ToolResult
from ._effects import EffectKey, effect_key
from ._events import EventType, HostEvent, kinds_of
from ._json import DEFAULT_MAX_BYTES, DEFAULT_MAX_DEPTH, parse_json_strict
from ._media import MediaResult, MediaSettings, admit
from ._resolutions import ask_reconcile_hook
from ._tools import BoundCall, Effect, Handler, Tool, ToolContext
from .exceptions import (
    ArgumentError,
    ConfigError,
    ConflictError,
    JsonError,
    ToolError,
)
from .policy import Decision, Policy, PolicyContext, RateKey, Verdict, arguments_digest
from .store import ClaimState, EffectEntry, LedgerState, Store
from .store._base import PRE_CLAIM

if TYPE_CHECKING:
    from ._session import Session

__all__ = ["CallOutcome", "Gate", "GateLimits", "shape_result"]

log = logging.getLogger("anfitrion.gate")


@dataclass(frozen=True, slots=True)
class GateLimits:
    """Bounds on what a model may send."""

    max_argument_bytes: int = DEFAULT_MAX_BYTES
    max_argument_depth: int = DEFAULT_MAX_DEPTH
    max_invalid_per_tool: int = 3
    max_invalid_per_session: int = 10
    max_calls_per_reply: int = 32
    """Calls of one model reply that are gated; the rest are refused (``too_many_calls``)."""


@dataclass(frozen=True, slots=True)
class CallOutcome:
    """How one call left the gate. ``result is None`` means: waiting for a person."""

    call: ToolCall
    stage: str
    result: ToolResult | None
    decision: Decision | None = None
    request: ApprovalRequest | None = None
    exhausted: bool = False


Emit = Callable[[HostEvent], Awaitable[None] | None]
"""Where the gate's events go: an awaitable to wait for, or ``None`` when nothing waits."""


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


# what json.dumps(value, ensure_ascii=False, default=_jsonable) builds on every call
_RESULT_ENCODER = json.JSONEncoder(ensure_ascii=False, default=_jsonable)


def shape_result(call_id: str, tool: Tool, value: Any,
                 media: MediaSettings | None = None) -> ToolResult:
    """Turn what a handler returned into a capped, labelled result.

    Images and sounds the handler returned — a :class:`~anfitrion._media.MediaResult`, a bare
    :class:`~anfitrion._conversation.Media`, a :class:`ToolResult`'s media — are admitted
    under *media* (the policy's ``[media]`` settings); the others are summarised in the text.
    """
    candidates: tuple[Media, ...] = ()
    if isinstance(value, MediaResult):
        value, candidates = value.value, value.media
    elif isinstance(value, Media):
        value, candidates = "", (value,)
    if isinstance(value, ToolResult):
        value, candidates = value.content, (*candidates, *value.media)
    if isinstance(value, str):
        text = value
    elif isinstance(value, bytes):
        text = value.decode("utf-8", errors="replace")
    else:
        text = _RESULT_ENCODER.encode(value)
    admitted: tuple[Media, ...] = ()
    if candidates:  # most results carry none: no settings or admission built for them
        admitted, shown = admit(candidates, media or MediaSettings())
        if shown:
            text = "\n".join([text, *shown] if text else shown)
    text = _storable(text)
    cap = tool.max_result_chars
    truncated = len(text) > cap
    if truncated:
        text = f"{text[:cap]}\n[truncated: showing {cap} of {len(text)} characters]"
    return ToolResult(call_id, tool.name, text, truncated=truncated, provenance=tool.provenance,
                      media=admitted)


def _storable(text: str) -> str:
    """*text* with unpaired surrogates shown as escapes: valid UTF-8, storable and auditable."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def _error(call: ToolCall, kind: str, message: str, tool: Tool | None = None) -> ToolResult:
    # a host-written error (unknown tool) is trusted; anything from a tool keeps its label
    provenance = tool.provenance if tool is not None else Provenance.TRUSTED
    return ToolResult(call.id, call.name, _storable(message), is_error=True, error_kind=kind,
                      provenance=provenance)


def _shown_name(name: object) -> str:
    if not isinstance(name, str):
        return f"<{type(name).__name__}>"
    return repr(name if len(name) <= 64 else name[:64] + "…")


class Gate:
    """Runs the six stages for one call. Built by the host; stateless between calls."""

    def __init__(self, *, policy: Policy, approver: Approver, store: Store, emit: Emit,
                 limits: GateLimits | None = None, shadow_policy: Policy | None = None) -> None:
        self.policy = policy
        self.shadow_policy = shadow_policy
        """Evaluated beside :attr:`policy` on every decision and recorded; never enforced."""
        self.approver = approver
        self.store = store
        self.emit = emit
        self.limits = limits or GateLimits()

    @property
    def emit(self) -> Emit:
        """Where the events go; an emitter with a ``kinds`` attribute (a
        :class:`~anfitrion._events.Router`) is given, and the gate builds, only those kinds."""
        return self._emit

    @emit.setter
    def emit(self, emit: Emit) -> None:
        self._emit = emit
        self._wanted = frozenset() if emit is _silent else kinds_of(emit)

    async def process(self, call: ToolCall, offered: Mapping[str, Tool], session: Session, *,
                      handler: Handler | None = None) -> CallOutcome:
        """Take one proposed call through the stages; never raises for bad input.

        The session says whether the call waits for an approval already, and is told what
        happened (proposals, invalid calls, requests); the caller records the result.
        *handler*, if given, runs in the execute stage instead of the tool's own (code that
        runs its own tools: the ledger's claim and settle still wrap it).

        Raises:
            ConflictError: the run lost its claim on a side effect to another run (its
                lease lapsed): it must stop and write nothing more.
        """
        outcome = await self._process(call, offered, session, session.pending_request(call.id),
                                      None, 0, None, handler)
        if outcome.result is not None and EventType.RESULT_RETURNED in self._wanted:
            pending = self._emit(HostEvent(
                EventType.RESULT_RETURNED, session.id, session.turn, session.principal.id,
                outcome.call.id, outcome.call.name, result=outcome.result, status=outcome.stage))
            if pending is not None:
                await pending
        return outcome

    def _announce(self, type: EventType, session: Session, proposed: ToolCall,
                  **fields: Any) -> Awaitable[None] | None:
        """Hand out an event of *type* if a listener takes it: what is left to await (a
        flush), or ``None`` — no coroutine for the events of the hot path."""
        if type not in self._wanted:  # no listener takes it: not even built
            return None
        return self._emit(HostEvent(type, session.id, session.turn, session.principal.id,
                                    proposed.id, proposed.name, **fields))

    async def _event(self, type: EventType, session: Session, proposed: ToolCall,
                     **fields: Any) -> None:
        pending = self._announce(type, session, proposed, **fields)
        if pending is not None:
            await pending

    async def _process(self, call: ToolCall, offered: Mapping[str, Tool], session: Session,
                       pending: str | None, edit_of: str | None, edits: int,
                       approved_by: str | None, handler: Handler | None) -> CallOutcome:
        """*edit_of* / *edits* / *approved_by*: set when an approver's edit re-enters the gate
        as a new proposal (the request it came from, how many edits led here, and who approved
        the edit together with making it, if they did)."""
        # (policy) resuming a call whose pending request is an approver's edit: what waits for
        # a person is the edit, so the edit is what goes through the stages again.
        if pending is not None and edit_of is None:
            edited = await self._pending_edit(call, session, pending)
            if isinstance(edited, CallOutcome):
                return edited
            if edited is not None:
                call, edit_of, edits = edited
        if (flushing := self._announce(EventType.CALL_PROPOSED, session, call, call=call,
                                       detail="an approver's edit" if edit_of else None)
            ) is not None:
            await flushing
        # 1. resolve — exact, byte-for-byte; only what was offered this turn.
        tool = await self._resolve(call, offered, session)
        if isinstance(tool, CallOutcome):
            return tool
        # 2. validate — strict parse, schema, business rules; bounded retries.
        try:
            parsed = parse_json_strict(call.raw_arguments or "{}",
                                       max_bytes=self.limits.max_argument_bytes,
                                       max_depth=self.limits.max_argument_depth)
            arguments = tool.validate(parsed)
        except (JsonError, ArgumentError) as exc:
            return await self._invalid(call, tool, session, str(exc))
        bound = BoundCall(call.id, tool, parsed)
        if (flushing := self._announce(EventType.CALL_VALIDATED, session, call,
                                       arguments=parsed)) is not None:
            await flushing
        # side effects go through the ledger: proposed → decided → (approved) → claimed → …
        ledger = tool.effect is Effect.WRITE
        ledger_digest, effect = await self._proposed(call, tool, parsed, session, ledger)
        # 3. decide
        decision = await self._decide(bound, call, session,
                                      proposal=pending is None and edit_of is None)
        if ledger:
            await self.store.advance_execution(session.id, call.id, LedgerState.DECIDED,
                                               ledger_digest)
        if decision.verdict is Verdict.DENY:
            result = _error(call, "denied", f"denied by policy: {decision.reason}", tool)
            return CallOutcome(call, "decide", result, decision)
        checked = await self._before_asking(call, tool, arguments, session, decision, effect)
        if isinstance(checked, CallOutcome):
            return checked
        decision, repeat = checked
        # 4. approve — unless the ledger shows this exact call approved before a crash; a call
        # a person was asked about stays theirs to decide, even if the policy now allows it
        asked = decision.verdict is Verdict.ASK or pending is not None
        approved: ApprovalRequest | None = None
        if asked and not (ledger and await self._approved_before(session, call, ledger_digest)):
            outcome, approved, edit = await self._approve(call, bound, decision, session,
                                                          pending, edit_of, edits, approved_by)
            if edit is not None:
                # an approver's edit is a new proposal: validate, decide and approve again
                edited_call, parent, editor = edit
                return await self._process(edited_call, offered, session, None, parent,
                                           edits + 1, editor, handler)
            if outcome is not None:
                return outcome
        # a definition can change while a person approves: list it again and compare the pin
        if asked and (changed := await self._changed_since_asked(call, tool, session,
                                                                 decision)) is not None:
            return changed
        # 5. execute, 6. shape; a repeat runs only if its approver was told of the run it repeats
        repeat_of = repeat[0] if repeat is not None and approved is not None and \
            repeat[1] in approved.warnings else None
        result = await self._execute(call, tool, arguments, session, ledger_digest,
                                     handler or tool.handler, effect, repeat_of)
        if edit_of is not None:  # the model proposed other arguments: tell it what ran
            result = dataclasses.replace(result, content="[a person edited the arguments to "
                                         f"{canonical_json(parsed)}]\n{result.content}")
        return CallOutcome(call, "execute", result, decision)

    async def _proposed(self, call: ToolCall, tool: Tool, parsed: dict[str, Any],
                        session: Session, ledger: bool) -> tuple[str, EffectKey | None]:
        """A write's ledger digest and effect key, its ledger moved to ``proposed``."""
        if not ledger:
            return "", None
        ledger_digest = approval_digest(
            session_id=session.id, principal_id=session.principal.id, call_id=call.id,
            tool_name=tool.name, tool_definition_hash=tool.definition_hash, arguments=parsed)
        await self.store.advance_execution(session.id, call.id, LedgerState.PROPOSED,
                                           ledger_digest)
        return ledger_digest, _effect_of(tool, parsed, session)

    async def _changed_since_asked(self, call: ToolCall, tool: Tool, session: Session,
                                   decision: Decision) -> CallOutcome | None:
        """Right before an approved call runs: a tool that can tell (an MCP tool's
        ``recheck``) is listed again, and the call refused if its definition is no longer
        the pinned one the person approved. Nothing runs; the ledger stays ``approved``."""
        recheck = getattr(tool, "recheck", None)
        if recheck is None:
            return None
        problem = await recheck((session.id, session.turn))
        if problem is None:
            return None
        await self._event(EventType.CALL_REJECTED, session, call, detail=str(problem)[:500])
        result = _error(call, "refused", f"refused: {problem}. Nothing was run."[:2000], tool)
        return CallOutcome(call, "approve", result, decision)

    async def _resolve(self, call: ToolCall, offered: Mapping[str, Tool],
                       session: Session) -> Tool | CallOutcome:
        """The offered tool *call* names (as the policy file declares it), or the refusal."""
        tool = offered.get(call.name) if isinstance(call.name, str) else None
        if tool is None:
            result = _error(call, "unknown_tool", f"unknown tool {_shown_name(call.name)}: "
                            f"it is not one of the tools offered ({', '.join(sorted(offered))})")
            await self._event(EventType.CALL_REJECTED, session, call, detail="unknown tool")
            return CallOutcome(call, "resolve", result)
        # the policy file's [tools."<name>"] may declare the effect and effect identity of a
        # tool the operator does not own: every later stage sees the tool as declared
        try:
            return self.policy.declared(tool)
        except ConfigError as exc:
            log.error("%s", exc)
            await self._event(EventType.CALL_REJECTED, session, call, detail=str(exc)[:500])
            result = _error(call, "refused", "refused: the operator's declaration of this tool "
                            "does not fit it; nothing was run. Ask the operator.", tool)
            return CallOutcome(call, "resolve", result)

    async def _decide(self, bound: BoundCall, call: ToolCall, session: Session, *,
                      proposal: bool) -> Decision:
        """The policy's decision (and the shadow's, recorded); *proposal*: a new proposal
        (not a resume, not an edit), which feeds the repeated-call guard."""
        tool, parsed = bound.tool, bound.arguments
        # rate counts come from the store; the policy itself does no I/O
        now = self.policy.now()
        rate_counts: dict[str, int] = {}
        for key in self.policy.rate_keys(tool.name):
            rate_counts[key.id] = await self.store.count_calls(
                session.principal.id, key.tool,
                (now - timedelta(seconds=key.seconds)).timestamp())
        # argument provenance first, so rules can see values that came from untrusted results
        flags = session.flag(parsed)
        context = session.policy_context(now, rate_counts, flags)
        # external decision points are asked here, the policy deciding without I/O
        context = await self.policy.consult(bound, context)
        decision = self.policy.decide(bound, context)
        # one canonical digest of the arguments serves the repeated-call guard and the audit
        args_digest = arguments_digest(parsed)
        if proposal:
            session.record_proposal(tool.name, args_digest)
        if (flushing := self._announce(EventType.CALL_DECIDED, session, call, arguments=parsed,
                                       arguments_sha256=args_digest, decision=decision,
                                       policy_sha256=self.policy.sha256,
                                       detail=self.policy.consulted(context))) is not None:
            await flushing
        if self.shadow_policy is not None:
            await self._shadow(self.shadow_policy, bound, call, session, context, decision)
        return decision

    async def _before_asking(
        self, call: ToolCall, tool: Tool, arguments: dict[str, Any], session: Session,
        decision: Decision, effect: EffectKey | None,
    ) -> CallOutcome | tuple[Decision, tuple[tuple[str, str], str] | None]:
        """The checks before a person is asked: the same effect held by another call, and the
        tool's precheck. The outcome if the call stops here, else the decision (with a repeat
        warning) and the repeat (the call it repeats, the warning) if any."""
        # the same effect run by another call: never run silently, and a person asked to
        # run it again is told that it already ran (looked up before asking)
        repeat: tuple[tuple[str, str], str] | None = None
        if effect is not None:
            held = await self._held_elsewhere(effect, tool, arguments, session, call)
            if held is not None and held.state is LedgerState.DONE and \
                    decision.verdict is Verdict.ASK:
                warning = _repeat_warning(held)
                decision = dataclasses.replace(decision,
                                               warnings=(*decision.warnings, warning))
                repeat = (held.session_id, held.call_id), warning
            elif held is not None:
                result = _duplicate(call, tool, held)
                await self._event(EventType.EXECUTION_CLAIMED, session, call,
                                  status="duplicate", effect_key=effect.key,
                                  detail=f"effect held by call {held.call_id} "
                                         f"({held.state.value if held.state else 'unclaimed'})")
                return CallOutcome(call, "execute", result, decision)
        # checks needing I/O, before a person is asked (not for a call that already ran: its
        # ledger entry answers, as the claim will)
        ledger = tool.effect is Effect.WRITE
        if tool.precheck is not None and not (ledger and await self._ran_before(session, call)):
            problem = await tool.precheck(
                arguments, ToolContext(session.principal, session.id, call.id, tool.name,
                                       session.turn))
            if problem is not None:
                await self._event(EventType.CALL_REJECTED, session, call, detail=problem)
                result = _error(call, "refused", f"refused before anyone was asked: "
                                f"{problem}"[:2000], tool)
                return CallOutcome(call, "decide", result, decision)
        return decision, repeat

    async def _shadow(self, shadow: Policy, bound: BoundCall, call: ToolCall, session: Session,
                      context: PolicyContext, enforced: Decision) -> None:
        """Decide *bound* with the shadow policy and record it; nothing here can change the
        enforced decision or stop the call."""
        if EventType.CALL_SHADOW_DECIDED not in self._wanted:  # a decision nobody sees is moot
            return
        fields: dict[str, Any]
        try:
            missing = [k for k in shadow.rate_keys(bound.tool.name)
                       if k.id not in context.rate_counts]
            if missing:
                counts = dict(context.rate_counts)
                for key in missing:
                    counts[key.id] = await self.store.count_calls(
                        session.principal.id, key.tool,
                        (context.now - timedelta(seconds=key.seconds)).timestamp())
                context = dataclasses.replace(context, rate_counts=counts)
            context = await shadow.consult(bound, context)  # its own decision points
            decision = shadow.decide(bound, context)
            fields = {"decision": decision, "policy_sha256": shadow.sha256,
                      "status": "agree" if decision.verdict is enforced.verdict else "disagree"}
        except Exception as exc:  # operator code under trial: it must never break a live call
            log.exception("the shadow policy failed on %s (session %s, call %s)",
                          bound.tool.name, session.id, call.id)
            fields = {"status": "error",
                      "detail": f"the shadow policy failed ({type(exc).__name__})"}
        await self._event(EventType.CALL_SHADOW_DECIDED, session, call, enforced=enforced,
                          **fields)

    async def _pending_edit(self, call: ToolCall, session: Session,
                            pending: str) -> tuple[ToolCall, str, int] | CallOutcome | None:
        """If the pending request holds an approver's edit of *call*, the edited call."""
        stored = await self.store.get_approval(pending)
        if stored is None or stored.request.edit_of is None:
            return None
        request, first_parent = stored.request, stored.request.edit_of
        child, depth = request, 0
        parent_id: str | None = first_parent
        while parent_id is not None and depth <= self.policy.approvals.max_edits:
            parent = await self.store.get_approval(parent_id)
            answer = parent.answer if parent is not None else None
            if parent is None or answer is None or answer.edited_arguments is None or \
                    canonical_json(dict(answer.edited_arguments)) != \
                    canonical_json(dict(child.arguments)) or \
                    (parent.request.session_id, parent.request.principal_id, parent.request.call_id,
                     parent.request.tool_name) != (session.id, session.principal.id, call.id,
                                              call.name):
                result = _error(call, "denied", "denied by policy: the edited call does not "
                                "match the approval it came from")
                return CallOutcome(call, "approve", result, None, request)
            child, parent_id, depth = parent.request, parent.request.edit_of, depth + 1
        edited = ToolCall.from_object(call.id, call.name, dict(request.arguments),
                                      call.provider_details)
        return edited, first_parent, depth

    async def _invalid(self, call: ToolCall, tool: Tool, session: Session,
                       problem: str) -> CallOutcome:
        count, total = session.record_invalid(tool.name)
        await self._event(EventType.CALL_REJECTED, session, call, detail=problem)
        exhausted = (count > self.limits.max_invalid_per_tool
                     or total > self.limits.max_invalid_per_session)
        if exhausted:
            message = (f"invalid arguments for {tool.name}: {problem}. Too many invalid calls; "
                       "stop calling this tool.")
            return CallOutcome(call, "validate", _error(call, "retry_limit", message, tool),
                               exhausted=True)
        message = f"invalid arguments for {tool.name}: {problem}. Fix the arguments and retry."
        return CallOutcome(call, "validate", _error(call, "invalid_arguments", message, tool))

    async def _flood_guard(self, session: Session, now: datetime) -> str | None:
        """Why a new approval request must not be raised now, or ``None``."""
        limits = self.policy.approvals
        asked = await self.store.list_approvals(pending_only=False, session_id=session.id)
        pending = await self.store.list_approvals(pending_only=True, session_id=session.id)
        if sum(1 for r in pending if not r.expired(now)) >= limits.max_pending:
            return "too many approval requests are waiting in this session"
        recent = [r for r in asked if r.created_at > now - limits.per]
        if len(recent) >= limits.max_asks:
            # a request a person approved is a person keeping up, not a flood: only the ones
            # still open or refused count against the rate (the pending cap bounds the rest)
            unanswered = 0
            for r in recent:
                found = await self.store.get_approval(r.id)
                if found is None or found.answer is None or not found.answer.approved:
                    unanswered += 1
            if unanswered >= limits.max_asks:
                return "approval requests are being raised too fast in this session"
        return None

    async def _open_request(self, session: Session, call: ToolCall,
                            digest: str) -> str | None:
        """A request already raised for exactly this call that may still be used.

        A process that died after storing a request but before saving the session as
        suspended leaves the request orphaned: reusing it means the person's answer is the
        one that counts, never a second request for the same call."""
        for request in await self.store.list_approvals(pending_only=False,
                                                       session_id=session.id):
            if request.call_id != call.id or request.digest != digest:
                continue
            found = await self.store.get_approval(request.id)
            if found is None or found.used:  # gone, or its answer already used
                continue
            if found.answer is None and request.expired(self.policy.now()):
                continue
            return request.id
        return None

    async def _approve(
        self, call: ToolCall, bound: BoundCall, decision: Decision, session: Session,
        pending: str | None, edit_of: str | None, edits: int, approved_by: str | None,
    ) -> tuple[CallOutcome | None, ApprovalRequest | None,
               tuple[ToolCall, str, str | None] | None]:
        """Returns (outcome if the call stops here, the request approved, edit if any)."""
        now = self.policy.now()
        fresh = ApprovalRequest.for_call(
            session_id=session.id, principal_id=session.principal.id, call_id=call.id,
            tool_name=bound.tool.name, tool_definition_hash=bound.tool.definition_hash,
            arguments=bound.arguments, effect=bound.tool.effect.value, reason=decision.reason,
            rule_id=decision.rule_id, warnings=decision.warnings, now=now,
            ttl=self.policy.approvals.ttl, edit_of=edit_of,
            tool_description=bound.tool.description, quorum=decision.quorum,
            preview=bound.tool.metadata.get("preview"))
        orphan = False
        if pending is None and edit_of is None:
            pending = await self._open_request(session, call, fresh.digest)
            if pending is not None:
                session.record_waiting(call.id, pending)
                orphan = True  # stored, but the process that asked died before its answer
        if pending is not None:
            answered = await self._stored_answer(call, bound, decision, session, pending,
                                                 fresh, now, ask_again=orphan)
        else:
            answered = await self._ask(call, bound, decision, session, fresh, now, edit_of,
                                       approved_by)
        if isinstance(answered, CallOutcome):
            return answered, None, None
        request, answer = answered
        if answer.digest != request.digest or answer.request_id != request.id:
            return _refused(call, bound, decision, "the answer was given for a different call",
                            request), None, None
        # the gate's clock decides, not the time an answer claims to have been given
        if request.expired(self.policy.now()):
            return _refused(call, bound, decision, "the approval request expired",
                            request), None, None
        if answer.edited_arguments is not None:
            if await self.store.consume_approval(request.id, request.digest) is None:
                return _refused(call, bound, decision, "this answer was already used",
                                request), None, None
            if edits >= self.policy.approvals.max_edits:
                return _refused(call, bound, decision, "the arguments were edited too many "
                                "times", request), None, None
            edited = ToolCall.from_object(call.id, call.name, dict(answer.edited_arguments),
                                          call.provider_details)
            return None, None, (edited, request.id,
                                answer.approver if answer.approved else None)
        if not answer.approved:
            return _declined(call, bound, decision, answer, request), None, None
        if await self.store.consume_approval(request.id, request.digest) is None:
            return _refused(call, bound, decision, "this approval was already used",
                            request), None, None
        return None, request, None

    async def _stored_answer(
        self, call: ToolCall, bound: BoundCall, decision: Decision, session: Session,
        pending: str, fresh: ApprovalRequest, now: datetime, *, ask_again: bool = False,
    ) -> CallOutcome | tuple[ApprovalRequest, ApprovalAnswer]:
        """The stored request *pending* and its answer, or the outcome: refused, or waiting.

        *ask_again*: the request was found orphaned (stored by a process that died before
        recording its approver's answer, or before saving the session as waiting); still
        unanswered, it is put to the configured approver again — an in-process approver
        that died with the process would otherwise never be asked, and the session would
        wait on nobody. A deferring approver answers ``None`` again: the session waits."""
        stored = await self.store.get_approval(pending)
        if stored is None:
            return _refused(call, bound, decision, "the approval request no longer exists",
                            None)
        request, answer = stored.request, stored.answer
        if request.digest != fresh.digest:
            return _refused(call, bound, decision, "the call or the tool changed after "
                            "approval was asked", request)
        if answer is None:
            if request.expired(now):
                return _refused(call, bound, decision, "the approval request expired", request)
            if ask_again:
                return await self._approvers_answer(
                    call, bound, decision, session, request, now, None, None,
                    detail="answered via approver, asked again after the process that first "
                           "asked it ended")
            return CallOutcome(call, "approve", None, decision, request)
        # the answer was recorded (and audited) where it was given: say it reached the call
        await self._event(EventType.APPROVAL_RESUMED, session, call, request=request,
                          answer=answer)
        return request, answer

    async def _ask(
        self, call: ToolCall, bound: BoundCall, decision: Decision, session: Session,
        fresh: ApprovalRequest, now: datetime, edit_of: str | None, approved_by: str | None,
    ) -> CallOutcome | tuple[ApprovalRequest, ApprovalAnswer]:
        """Raise *fresh* and ask the approver: the request and its answer, or the outcome."""
        flood = await self._flood_guard(session, now)
        if flood is not None:
            await self._event(EventType.CALL_REJECTED, session, call, detail=flood)
            return _refused(call, bound, decision, flood, None)
        request = fresh
        await self.store.create_approval(request)
        session.record_approval_asked()
        await self._event(EventType.APPROVAL_REQUESTED, session, call,
                          arguments=bound.arguments, decision=decision, request=request)
        return await self._approvers_answer(call, bound, decision, session, request, now,
                                            edit_of, approved_by)

    async def _approvers_answer(
        self, call: ToolCall, bound: BoundCall, decision: Decision, session: Session,
        request: ApprovalRequest, now: datetime, edit_of: str | None, approved_by: str | None,
        detail: str = "answered via approver",
    ) -> CallOutcome | tuple[ApprovalRequest, ApprovalAnswer]:
        """Ask the configured approver about the stored *request*; record its answer."""
        answer: ApprovalAnswer | None
        if approved_by is not None and edit_of is not None:
            # the person who made this edit approved it with the edit ("approve with
            # edits"); it still passed validate and decide again, and binds to this digest
            answer = ApprovalAnswer.to(request, True, approved_by, "approved with the edit",
                                       at=now)
        else:
            answer = await self.approver.decide(request)
        if answer is not None and answer.approved and request.quorum is not None:
            answer = None  # a quorum is gathered from people's votes (anfitrion._answers)
        if answer is None:
            return CallOutcome(call, "approve", None, decision, request)
        if not await self.store.answer_approval(answer):
            return _refused(call, bound, decision, "the answer did not match the request",
                            request)
        # recorded once, when given (here, by the approver in process); an answer given
        # through a door was recorded there (anfitrion._answers), not again when used
        await self._event(EventType.APPROVAL_ANSWERED, session, call, request=request,
                          answer=answer, detail=detail)
        return request, answer

    def _shadow_rate_keys(self, tool_name: str) -> tuple[RateKey, ...]:
        try:
            return self.shadow_policy.rate_keys(tool_name) if self.shadow_policy else ()
        except Exception:  # as in _shadow: the shadow never stops a call
            log.exception("the shadow policy failed to name its rate keys for %s", tool_name)
            return ()

    async def _held_elsewhere(self, effect: EffectKey, tool: Tool, arguments: dict[str, Any],
                              session: Session, call: ToolCall) -> EffectEntry | None:
        """The effect if another call holds it and it may not simply run (free, or failed:
        ``None``); an unknown one is first reconciled by the tool's hook, if it has one."""
        held = await self.store.effect_state(effect.key)
        if held is None or (held.session_id, held.call_id) == (session.id, call.id) or \
                held.state is LedgerState.FAILED or \
                (tool.idempotent and held.state is LedgerState.UNKNOWN):
            return None
        if held.state is LedgerState.UNKNOWN and tool.reconcile is not None:
            held = await self._reconcile(effect, tool, arguments, session, call) or held
            if held.state is LedgerState.FAILED:
                return None
        return held

    async def _reconcile(self, effect: EffectKey, tool: Tool, arguments: dict[str, Any],
                         session: Session, call: ToolCall) -> EffectEntry | None:
        """Ask the tool's reconcile hook what happened; settle the effect with its answer."""
        context = ToolContext(session.principal, session.id, call.id, tool.name, session.turn)
        happened = await ask_reconcile_hook(tool, arguments, context)
        if happened is None:
            return None
        try:
            entry = await self.store.resolve_effect(
                effect.key, done=bool(happened), by=f"reconcile:{tool.name}",
                note="the tool's reconcile hook asked the outside system")
        except ConflictError:  # settled meanwhile
            return await self.store.effect_state(effect.key)
        await self._event(EventType.EXECUTION_SETTLED, session, call, effect_key=effect.key,
                          status="resolved_done" if happened else "resolved_failed",
                          detail=f"reconciled by {tool.name}'s hook")
        return entry

    async def _ran_before(self, session: Session, call: ToolCall) -> bool:
        entry = await self.store.execution_state(session.id, call.id)
        return entry is not None and entry.state not in PRE_CLAIM

    async def _approved_before(self, session: Session, call: ToolCall, digest: str) -> bool:
        """Whether an approval for exactly this call was used already (the ledger moved to
        ``approved`` in the same transaction), by a process that may have died since."""
        entry = await self.store.execution_state(session.id, call.id)
        return entry is not None and entry.digest == digest and entry.state not in (
            LedgerState.PROPOSED, LedgerState.DECIDED)

    async def _execute(self, call: ToolCall, tool: Tool, arguments: dict[str, Any],
                       session: Session, digest: str, handler: Handler,
                       effect: EffectKey | None = None,
                       repeat_of: tuple[str, str] | None = None) -> ToolResult:
        ledger = tool.effect is Effect.WRITE
        token = ""
        if ledger:
            claim = await self.store.claim_execution(session.id, call.id, digest,
                                                     retry_unknown=tool.idempotent,
                                                     effect=effect, repeat_of=repeat_of)
            status = claim.state.value
            if repeat_of is not None and claim.state is ClaimState.CLAIMED:
                status = "claimed_repeat"  # a person approved running this effect again
            await self._event(EventType.EXECUTION_CLAIMED, session, call, status=status,
                              effect_key=effect.key if effect else None,
                              detail=f"repeat of call {repeat_of[1]}" if repeat_of else None)
            if claim.state is ClaimState.DUPLICATE and claim.effect is not None:
                return _duplicate(call, tool, claim.effect)
            if claim.state in (ClaimState.DONE, ClaimState.FAILED) and claim.result is not None:
                return claim.result
            if claim.state is ClaimState.UNKNOWN and effect is not None and \
                    tool.reconcile is not None:  # resumed after a crash: ask what happened
                settled = await self._reconcile(effect, tool, arguments, session, call)
                if settled is not None and settled.result is not None and \
                        (settled.session_id, settled.call_id) == (session.id, call.id):
                    return dataclasses.replace(settled.result, call_id=call.id)
            if claim.state is not ClaimState.CLAIMED or claim.token is None:
                return _error(call, "outcome_unknown", "outcome unknown — the action may have "
                              "happened; it was not run again. A person must resolve it "
                              "(anfitrion effects).", tool)
            token = claim.token
        # (policy) count the call for rate limits, under each key a limit on this tool reads
        rate_keys = self.policy.rate_keys(tool.name)
        if self.shadow_policy is not None:  # the shadow's rate limits count calls too
            rate_keys = (*rate_keys, *self._shadow_rate_keys(tool.name))
        if rate_keys:
            at = self.policy.now().timestamp()
            for counted in dict.fromkeys(k.tool for k in rate_keys):
                await self.store.record_call(session.principal.id, counted, at)
        context = ToolContext(session.principal, session.id, call.id, tool.name, session.turn)
        unknown = (" The outcome is unknown: it may have happened. It will not run again "
                   "until a person resolves it.")
        try:
            if tool.timeout is not None:
                with anyio.fail_after(tool.timeout):
                    value = await handler(arguments, context)
            else:
                value = await handler(arguments, context)
            result = shape_result(call.id, tool, value, self.policy.media)
        except TimeoutError:
            after = f" after {tool.timeout:g} seconds" if tool.timeout is not None else ""
            result = _error(call, "outcome_unknown" if ledger else "timeout",
                            f"{tool.name} timed out{after}.{unknown if ledger else ''}", tool)
        except ToolError as exc:
            if ledger and exc.executed is not False:
                result = _error(call, "outcome_unknown",
                                f"{tool.name} failed: {exc}"[:2000] + unknown, tool)
            else:
                result = _error(call, "tool_error", f"{tool.name} failed: {exc}"[:2000], tool)
        except Exception as exc:
            log.exception("tool %s raised (session %s, call %s)", tool.name, session.id,
                          call.id)
            result = _error(call, "outcome_unknown" if ledger else "tool_error",
                            f"{tool.name} failed with an internal error ({type(exc).__name__})."
                            f"{unknown if ledger else ''}", tool)
        if ledger:
            if not await self.store.settle_execution(session.id, call.id, result, token):
                # another run took this call over (this run's lease lapsed): the entry stays
                # as that run left it — unknown — and this run must write nothing more
                raise ConflictError(f"session {session.id!r}: the claim on call {call.id!r} "
                                    "was taken over by another run; its outcome stays unknown")
            status = "failed" if result.is_error else "done"
            if result.error_kind == "outcome_unknown":
                status = "unknown"
            await self._event(EventType.EXECUTION_SETTLED, session, call, result=result,
                              status=status, effect_key=effect.key if effect else None)
        return result


def _refused(call: ToolCall, bound: BoundCall, decision: Decision, why: str,
             request: ApprovalRequest | None) -> CallOutcome:
    """A call denied at the approve stage: the model sees the operator's or approver's words
    only, never rule internals."""
    result = _error(call, "denied", f"denied by policy: {why}", bound.tool)
    return CallOutcome(call, "approve", result, decision, request)


def _declined(call: ToolCall, bound: BoundCall, decision: Decision, answer: ApprovalAnswer,
              request: ApprovalRequest) -> CallOutcome:
    """A call a person said no to: the model is told it was a person, with their note — never
    the policy's words, so it does not argue with a rule when a person decided (#36)."""
    if answer.approver == NO_APPROVER:
        return _refused(call, bound, decision, answer.note or "a person must approve this call",
                        request)
    return CallOutcome(call, "approve", _error(call, "denied", declined_text(answer.note),
                                               bound.tool), decision, request)


def _effect_of(tool: Tool, arguments: Mapping[str, Any], session: Session) -> EffectKey:
    return effect_key(tool=tool.name, arguments=arguments, principal_id=session.principal.id,
                      session_id=session.id, template=tool.effect_key, scope=tool.effect_scope,
                      sensitive=tool.sensitive, schema=tool.input_schema)


def _when(entry: EffectEntry) -> str:
    at = entry.updated_at
    return at.strftime("%Y-%m-%d %H:%M:%S UTC") if at is not None else "an unknown time"


def _excerpt(result: ToolResult | None) -> str:
    if result is None:
        return "no result recorded"
    text = result.content.replace("\n", " ")
    return text if len(text) <= 160 else text[:160] + "…"


def _repeat_warning(held: EffectEntry) -> str:
    """What a person asked to approve a repeat is told (it also grants the repeat)."""
    return (f"this exact effect ({held.display}) already ran at {_when(held)} (call "
            f"{held.call_id}; result: {_excerpt(held.result)}); approve running it again?")


def _duplicate(call: ToolCall, tool: Tool, held: EffectEntry) -> ToolResult:
    """What the model is told when the effect of *call* belongs to another call."""
    if held.state is LedgerState.DONE and held.result is not None:
        who = f" (resolved by {held.resolved_by})" if held.resolved_by else ""
        text = (f"[not run again: this exact effect ({held.display}) already happened at "
                f"{_when(held)}{who}; its result then follows]\n{held.result.content}")
        return ToolResult(call.id, call.name, _storable(text), provenance=held.result.provenance,
                          media=held.result.media)
    if held.state is LedgerState.CLAIMED:
        return _error(call, "effect_running", f"not run: this exact effect ({held.display}) is "
                      "being run by another call right now, or that run died (then its outcome "
                      "is unknown). Do not retry; a person must resolve it if it does not "
                      "finish.", tool)
    return _error(call, "outcome_unknown", f"not run: this exact effect ({held.display}) was "
                  f"attempted at {_when(held)} and its outcome is unknown — it may have "
                  "happened. A person must resolve it before it can run again.", tool)
