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
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import pydantic

from . import _entitlements as entitlements
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
from ._events import EventType, HostEvent, Router, hand_out
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
from .store import (
    PRE_CLAIM,
    AuditEntry,
    Claim,
    ClaimState,
    EffectEntry,
    LedgerEntry,
    LedgerState,
    Settlement,
    Store,
    StoredApproval,
    claim_audit_role,
)

if TYPE_CHECKING:
    from ._session import Session
    from .store import ClaimAuditStore

__all__ = ["CallLedger", "CallOutcome", "Gate", "GateLimits", "GatedCall", "shape_result"]

log = logging.getLogger("anfitrion.gate")


class ClaimRecorder(Protocol):
    """What the gate needs of the audit recorder (:class:`anfitrion._audit.AuditRecorder`)
    to store the records before an effect in the claim's own transaction."""

    def record(self, event: HostEvent) -> Awaitable[None] | None: ...

    def entry(self, event: HostEvent) -> AuditEntry | None: ...

    def take(self) -> list[tuple[str, str, float, dict[str, Any]]]: ...

    def give_back(self, batch: list[tuple[str, str, float, dict[str, Any]]]) -> None: ...

    async def written(self, count: int) -> None: ...


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


class _Silent:
    """The emitter of a host with no listeners: it takes no kind, so no event is built."""

    kinds: frozenset[EventType] = frozenset()

    def __call__(self, event: HostEvent) -> None:
        return None


_silent = _Silent()


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


@dataclass(slots=True, eq=False)
class GatedCall:
    """One call on its way through the stages: what each stage found, for the stages after it.

    Built when a call enters the gate, and again for an approver's edit (a new proposal that
    goes through every stage again); :class:`CallLedger` reads its digest and effect key.
    """

    call: ToolCall
    session: Session
    offered: Mapping[str, Tool]
    handler: Handler | None
    pending: str | None = None
    """The approval request the call waits on (a resume), if any."""
    edit_of: str | None = None
    """The request whose answer edited the arguments into this call, if any."""
    edits: int = 0
    """How many edits led here."""
    approved_by: str | None = None
    """Who approved the edit together with making it ("approve with edits"), if they did."""
    tool: Tool | None = None
    """resolve: the offered tool, as the policy file declares it."""
    write: bool = False
    """resolve: whether the call goes through the execution ledger (a ``WRITE`` tool)."""
    parsed: dict[str, Any] = field(default_factory=dict)
    """validate: the arguments as sent (what is bound, digested and recorded)."""
    arguments: dict[str, Any] = field(default_factory=dict)
    """validate: the arguments as the handler takes them."""
    digest: str = ""
    """A write's ledger digest (session, principal, call, tool definition, arguments)."""
    effect: EffectKey | None = None
    """A write's effect key."""
    decision: Decision | None = None
    """decide: the policy's decision (with a repeat warning, after the checks)."""
    repeat: tuple[tuple[str, str], str] | None = None
    """check: the call whose effect this one repeats, and the warning a person is shown."""
    approved: ApprovalRequest | None = None
    """approve: the request a person approved."""
    edit: GatedCall | None = None
    """approve: an approver's edit, to go through the stages next."""
    settle_later: list[Settlement] | None = None
    """Where a write's settlement goes to be stored with the session's next save (in its
    transaction), instead of being stored at once; ``None``: at once."""

    @property
    def resolved(self) -> Tool:
        assert self.tool is not None, "the resolve stage sets the tool"
        return self.tool

    @property
    def bound(self) -> BoundCall:
        return BoundCall(self.call.id, self.resolved, self.parsed)

    @property
    def asked(self) -> bool:
        """Whether a person decides: the policy asks, or the call already waits on one."""
        return self.pending is not None or (self.decision is not None
                                            and self.decision.verdict is Verdict.ASK)

    def context(self) -> ToolContext:
        session = self.session
        return ToolContext(session.principal, session.id, self.call.id, self.resolved.name,
                           session.turn)


class CallLedger:
    """The execution ledger as the gate uses it: every read and write of a write call's entry
    and effect key, in the order advance → claim → settle, bound to the call's digest.

    An allowed call's first ledger write is its claim (which records the digest); ``decided``
    is written only for a call that stops after the policy or is put to a person.
    """

    def __init__(self, store: Store) -> None:
        self.store = store

    def open(self, rec: GatedCall) -> None:
        """Compute the digest and effect key of a validated write call (nothing is written)."""
        tool, session = rec.resolved, rec.session
        rec.digest = approval_digest(
            session_id=session.id, principal_id=session.principal.id, call_id=rec.call.id,
            tool_name=tool.name, tool_definition_hash=tool.definition_hash,
            arguments=rec.parsed)
        rec.effect = effect_key(
            tool=tool.name, arguments=rec.parsed, principal_id=session.principal.id,
            session_id=session.id, template=tool.effect_key, scope=tool.effect_scope,
            sensitive=tool.sensitive, schema=tool.input_schema)

    async def decided(self, rec: GatedCall) -> None:
        """Record ``decided`` for a write that stops here or waits for a person."""
        if rec.write:
            await self.store.advance_execution(rec.session.id, rec.call.id,
                                               LedgerState.DECIDED, rec.digest)

    async def _entry(self, rec: GatedCall) -> LedgerEntry | None:
        return await self.store.execution_state(rec.session.id, rec.call.id)

    async def ran_before(self, rec: GatedCall) -> bool:
        """Whether the write was claimed before (its entry answers, as the claim will)."""
        if not rec.write:
            return False
        entry = await self._entry(rec)
        return entry is not None and entry.state not in PRE_CLAIM

    async def approved_before(self, rec: GatedCall) -> bool:
        """Whether an approval for exactly this call was used already (the ledger moved to
        ``approved`` in the same transaction), by a process that may have died since."""
        if not rec.write:
            return False
        entry = await self._entry(rec)
        return entry is not None and entry.digest == rec.digest and entry.state not in (
            LedgerState.PROPOSED, LedgerState.DECIDED)

    async def holder(self, rec: GatedCall) -> EffectEntry | None:
        """The effect's entry if another call holds it and it may not simply run (free,
        failed, or unknown for an idempotent tool: ``None``)."""
        assert rec.effect is not None
        held = await self.store.effect_state(rec.effect.key)
        if held is None or (held.session_id, held.call_id) == (rec.session.id, rec.call.id) \
                or held.state is LedgerState.FAILED or \
                (rec.resolved.idempotent and held.state is LedgerState.UNKNOWN):
            return None
        return held

    async def resolve(self, rec: GatedCall, happened: bool) -> EffectEntry | None:
        """Settle the effect as the tool's reconcile hook found it; the entry as it is now."""
        assert rec.effect is not None
        try:
            return await self.store.resolve_effect(
                rec.effect.key, done=happened, by=f"reconcile:{rec.resolved.name}",
                note="the tool's reconcile hook asked the outside system")
        except ConflictError:  # settled meanwhile
            return await self.store.effect_state(rec.effect.key)

    async def claim(self, rec: GatedCall, repeat_of: tuple[str, str] | None) -> Claim:
        """Claim the call (and reserve its effect key) in one atomic step, fenced by the
        session's lease: a run whose lease another run took claims nothing (ConflictError)."""
        return await self.store.claim_execution(
            rec.session.id, rec.call.id, rec.digest, retry_unknown=rec.resolved.idempotent,
            effect=rec.effect, repeat_of=repeat_of, owner=rec.session.lease_owner)

    async def claim_and_audit(self, both: ClaimAuditStore, rec: GatedCall,
                              repeat_of: tuple[str, str] | None,
                              audit: Callable[[Claim], list[AuditEntry]]) -> Claim:
        """:meth:`claim`, with the records ``audit(claim)`` in the claim's transaction."""
        return await both.claim_execution_and_audit(
            rec.session.id, rec.call.id, rec.digest, audit=audit,
            retry_unknown=rec.resolved.idempotent, effect=rec.effect, repeat_of=repeat_of,
            owner=rec.session.lease_owner)

    async def settle(self, rec: GatedCall, result: ToolResult, token: str) -> None:
        """Record the outcome under the claim *token*.

        Raises:
            ConflictError: another run took the call over (this run's lease lapsed): the
                entry stays as that run left it — unknown — and this run must write nothing.
        """
        if not await self.store.settle_execution(rec.session.id, rec.call.id, result, token):
            raise ConflictError(f"session {rec.session.id!r}: the claim on call "
                                f"{rec.call.id!r} was taken over by another run; its outcome "
                                "stays unknown")


class Gate:
    """Runs the six stages for one call. Built by the host; stateless between calls.

    *emit* is fixed here: a :class:`~anfitrion._events.Router` (the runtime's, which takes
    later listeners in place), or any listener, routed to by the kinds it declares.
    """

    def __init__(self, *, policy: Policy, approver: Approver, store: Store, emit: Emit,
                 limits: GateLimits | None = None, shadow_policy: Policy | None = None,
                 recorder: ClaimRecorder | None = None) -> None:
        self.policy = policy
        self.recorder = recorder
        """The audit recorder among the listeners, if any: with a store that can, a write's
        claim stores the records before its effect in its own transaction."""
        self.shadow_policy = shadow_policy
        """Evaluated beside :attr:`policy` on every decision and recorded; never enforced."""
        self.approver = approver
        self.store = store
        self.ledger = CallLedger(store)
        self._router = emit if isinstance(emit, Router) else Router([emit])
        self.limits = limits or GateLimits()

    @property
    def emit(self) -> Router:
        """Where the events go: only the kinds some listener takes are built."""
        return self._router

    async def process(self, call: ToolCall, offered: Mapping[str, Tool], session: Session, *,
                      handler: Handler | None = None,
                      settle_later: list[Settlement] | None = None) -> CallOutcome:
        """Take one proposed call through the stages; never raises for bad input.

        The session says whether the call waits for an approval already, and is told what
        happened (proposals, invalid calls, requests); the caller records the result.
        *handler*, if given, runs in the execute stage instead of the tool's own (code that
        runs its own tools: the ledger's claim and settle still wrap it). With
        *settle_later*, a write's settlement is appended there instead of being stored: the
        caller stores it with the session's save that follows at once, in one transaction
        (:class:`~anfitrion.store.SettleSaveStore`), and must store it even if it does not save.

        Raises:
            ConflictError: the run lost its claim on a side effect to another run (its
                lease lapsed): it must stop and write nothing more.
        """
        rec = GatedCall(call, session, offered, handler, session.pending_request(call.id),
                        settle_later=settle_later)
        outcome = await self._through(rec)
        if outcome.result is not None and EventType.RESULT_RETURNED in self._router.kinds:
            pending = self._router(HostEvent(
                EventType.RESULT_RETURNED, session.id, session.turn, session.principal.id,
                outcome.call.id, outcome.call.name, result=outcome.result, status=outcome.stage))
            if pending is not None:
                await pending
        return outcome

    def _announce(self, type: EventType, rec: GatedCall,
                  **fields: Any) -> Awaitable[None] | None:
        """Hand out an event of *type* about *rec* if a listener takes it: what is left to
        await (a flush), or ``None`` — no coroutine for the events of the hot path."""
        if type not in self._router.kinds:  # no listener takes it: not even built
            return None
        session, call = rec.session, rec.call
        return self._router(HostEvent(type, session.id, session.turn, session.principal.id,
                                      call.id, call.name, **fields))

    async def _event(self, type: EventType, rec: GatedCall, **fields: Any) -> None:
        pending = self._announce(type, rec, **fields)
        if pending is not None:
            await pending

    # -- the stages, in order: each returns the outcome if the call ends there -------------

    async def _through(self, rec: GatedCall) -> CallOutcome:
        """The stages in order until one ends the call; an approver's edit is a new proposal
        and goes through all of them again."""
        if rec.pending is not None:
            # resuming a call whose pending request is an approver's edit: what waits for a
            # person is the edit, so the edit is what goes through the stages again
            edited = await self._pending_edit(rec)
            if edited is not None:
                return edited
        while True:
            if (flushing := self._announce(
                    EventType.CALL_PROPOSED, rec, call=rec.call,
                    detail="an approver's edit" if rec.edit_of else None)) is not None:
                await flushing
            outcome = (await self._resolve(rec) or await self._validate(rec)
                       or await self._decide(rec) or await self._before_running(rec)
                       or await self._execute(rec))
            if rec.edit is None:
                return outcome
            rec = rec.edit

    async def _resolve(self, rec: GatedCall) -> CallOutcome | None:
        """1. resolve — exact, byte-for-byte; only what was offered this turn, as the policy
        file declares it."""
        call, offered = rec.call, rec.offered
        tool = offered.get(call.name) if isinstance(call.name, str) else None
        if tool is None:
            result = _error(call, "unknown_tool", f"unknown tool {_shown_name(call.name)}: "
                            f"it is not one of the tools offered ({', '.join(sorted(offered))})")
            await self._event(EventType.CALL_REJECTED, rec, detail="unknown tool")
            return CallOutcome(call, "resolve", result)
        # the policy file's [tools."<name>"] may declare the effect and effect identity of a
        # tool the operator does not own: every later stage sees the tool as declared
        try:
            rec.tool = declared = self.policy.declared(tool)
        except ConfigError as exc:
            log.error("%s", exc)
            await self._event(EventType.CALL_REJECTED, rec, detail=str(exc)[:500])
            result = _error(call, "refused", "refused: the operator's declaration of this tool "
                            "does not fit it; nothing was run. Ask the operator.", tool)
            return CallOutcome(call, "resolve", result)
        rec.write = declared.effect is Effect.WRITE
        return None

    async def _validate(self, rec: GatedCall) -> CallOutcome | None:
        """2. validate — strict parse, schema, business rules; bounded retries."""
        tool = rec.resolved
        try:
            rec.parsed = parse_json_strict(rec.call.raw_arguments or "{}",
                                           max_bytes=self.limits.max_argument_bytes,
                                           max_depth=self.limits.max_argument_depth)
            rec.arguments = tool.validate(rec.parsed)
        except (JsonError, ArgumentError) as exc:
            return await self._invalid(rec, str(exc))
        if (flushing := self._announce(EventType.CALL_VALIDATED, rec,
                                       arguments=rec.parsed)) is not None:
            await flushing
        if rec.write:  # side effects go through the ledger, bound to this digest and key
            self.ledger.open(rec)
        return None

    async def _decide(self, rec: GatedCall) -> CallOutcome | None:
        """3. decide — the policy's decision (and the shadow's, recorded). A new proposal
        (not a resume, not an edit) feeds the repeated-call guard."""
        bound, session = rec.bound, rec.session
        tool, parsed = bound.tool, bound.arguments
        # rate counts come from the store; the policy itself does no I/O
        now = self.policy.now()
        rate_counts: dict[str, int] = {}
        for key in self.policy.rate_keys(tool.name):
            rate_counts[key.id] = await self.store.count_calls(
                session.principal.id, key.tool,
                (now - timedelta(seconds=key.seconds)).timestamp())
        # argument provenance first, so rules can see values that came from untrusted results
        context = session.policy_context(now, rate_counts, session.flag(parsed))
        # external decision points are asked here, the policy deciding without I/O
        context = await self.policy.consult(bound, context)
        rec.decision = decision = self.policy.decide(bound, context)
        # one canonical digest of the arguments serves the repeated-call guard and the audit
        args_digest = arguments_digest(parsed)
        if rec.pending is None and rec.edit_of is None:
            session.record_proposal(tool.name, args_digest)
        if (flushing := self._announce(EventType.CALL_DECIDED, rec, arguments=parsed,
                                       arguments_sha256=args_digest, decision=decision,
                                       policy_sha256=self.policy.sha256,
                                       detail=self.policy.consulted(context))) is not None:
            await flushing
        if self.shadow_policy is not None:
            await self._shadow(self.shadow_policy, rec, context, decision)
        if decision.verdict is Verdict.DENY:
            await self.ledger.decided(rec)
            result = _error(rec.call, "denied", f"denied by policy: {decision.reason}",
                            rec.tool)
            return CallOutcome(rec.call, "decide", result, decision)
        return None

    async def _before_running(self, rec: GatedCall) -> CallOutcome | None:
        """The stages between the decision and the run, each where it applies (most calls:
        none): the checks, then for a call a person decides, approve and the recheck."""
        if rec.effect is not None or rec.resolved.precheck is not None:
            outcome = await self._check(rec)
            if outcome is not None:
                return outcome
        if rec.asked:
            return await self._approve(rec) or await self._recheck(rec)
        return None

    async def _check(self, rec: GatedCall) -> CallOutcome | None:
        """The checks before a person is asked: the same effect held by another call (never
        run silently; a person asked to run it again is told that it already ran), and the
        tool's precheck."""
        outcome = await self._held(rec)
        if outcome is None:
            outcome = await self._precheck(rec)
        if outcome is not None:
            await self.ledger.decided(rec)
        return outcome

    async def _approve(self, rec: GatedCall) -> CallOutcome | None:
        """4. approve — unless the ledger shows this exact call approved before a crash; a
        call a person was asked about stays theirs to decide, even if the policy now allows
        it."""
        if await self.ledger.approved_before(rec):
            return None
        if rec.pending is None:  # put to a person: the ledger shows the decision
            await self.ledger.decided(rec)
        now = self.policy.now()
        tool, session, decision = rec.resolved, rec.session, rec.decision
        assert decision is not None
        fresh = ApprovalRequest.for_call(
            session_id=session.id, principal_id=session.principal.id, call_id=rec.call.id,
            tool_name=tool.name, tool_definition_hash=tool.definition_hash,
            arguments=rec.parsed, effect=tool.effect.value, reason=decision.reason,
            rule_id=decision.rule_id, warnings=decision.warnings, now=now,
            ttl=self.policy.approvals.ttl, edit_of=rec.edit_of,
            tool_description=tool.description, quorum=decision.quorum,
            preview=tool.metadata.get("preview"))
        pending, orphan = rec.pending, False
        if pending is None and rec.edit_of is None:
            pending = await self._open_request(rec, fresh.digest)
            if pending is not None:
                session.record_waiting(rec.call.id, pending)
                orphan = True  # stored, but the process that asked died before its answer
        if pending is not None:
            answered = await self._stored_answer(rec, pending, fresh, now, ask_again=orphan)
        else:
            answered = await self._ask(rec, fresh, now)
        if isinstance(answered, CallOutcome):
            return answered
        return await self._use_answer(rec, *answered)

    async def _recheck(self, rec: GatedCall) -> CallOutcome | None:
        """A definition can change while a person approves: right before an approved call
        runs, a tool that can tell (an MCP tool's ``recheck``) is listed again, and the call
        refused if its definition is no longer the pinned one the person approved. Nothing
        runs; the ledger stays ``approved``."""
        recheck = getattr(rec.resolved, "recheck", None)
        if recheck is None:
            return None
        problem = await recheck((rec.session.id, rec.session.turn))
        if problem is None:
            return None
        await self._event(EventType.CALL_REJECTED, rec, detail=str(problem)[:500])
        result = _error(rec.call, "refused", f"refused: {problem}. Nothing was run."[:2000],
                        rec.tool)
        return CallOutcome(rec.call, "approve", result, rec.decision)

    async def _execute(self, rec: GatedCall) -> CallOutcome:
        """5. execute, 6. shape; a repeat runs only if its approver was told of the run it
        repeats."""
        repeat, approved = rec.repeat, rec.approved
        repeat_of = repeat[0] if repeat is not None and approved is not None and \
            repeat[1] in approved.warnings else None
        if rec.write:
            result = await self._effect(rec, repeat_of)
        else:
            if counted := self._counted(rec):
                await self._count(rec, counted)
            result = await self._run(rec)
        if rec.edit_of is not None:  # the model proposed other arguments: tell it what ran
            result = dataclasses.replace(result, content="[a person edited the arguments to "
                                         f"{canonical_json(rec.parsed)}]\n{result.content}")
        return CallOutcome(rec.call, "execute", result, rec.decision)

    async def _effect(self, rec: GatedCall, repeat_of: tuple[str, str] | None) -> ToolResult:
        """Run a write between its claim and its settlement, and shape the result; a write
        that may not run gets what the ledger says instead."""
        claimed = await self._claim(rec, repeat_of)
        if isinstance(claimed, ToolResult):
            return claimed
        if counted := self._counted(rec):
            await self._count(rec, counted)
        result = await self._run(rec)
        await self._settle(rec, result, claimed)
        return result

    # -- what the stages use -----------------------------------------------------------------

    async def _held(self, rec: GatedCall) -> CallOutcome | None:
        """The same effect run by another call: refused, or (done, and a person will be
        asked) a repeat with its warning — looked up before asking."""
        if rec.effect is None or not (rec.asked or rec.resolved.reconcile is not None
                                      or rec.resolved.precheck is not None):
            # a write the policy allows, with no hook to ask first: its claim reserves the
            # key, or finds it held and refuses it as this check would, in one atomic step —
            # a store read fewer per call
            return None
        held = await self._held_elsewhere(rec)
        decision = rec.decision
        assert decision is not None
        if held is None:
            return None
        if held.state is LedgerState.DONE and decision.verdict is Verdict.ASK:
            warning = _repeat_warning(held)
            rec.decision = dataclasses.replace(decision, warnings=(*decision.warnings, warning))
            rec.repeat = (held.session_id, held.call_id), warning
            return None
        await self._event(EventType.EXECUTION_CLAIMED, rec, status="duplicate",
                          effect_key=rec.effect.key,
                          detail=f"effect held by call {held.call_id} "
                                 f"({held.state.value if held.state else 'unclaimed'})")
        return CallOutcome(rec.call, "execute", _duplicate(rec.call, rec.resolved, held),
                           decision)

    async def _precheck(self, rec: GatedCall) -> CallOutcome | None:
        """The tool's own check needing I/O, before a person is asked (not for a call that
        already ran: its ledger entry answers, as the claim will)."""
        precheck = rec.resolved.precheck
        if precheck is None or await self.ledger.ran_before(rec):
            return None
        problem = await precheck(rec.arguments, rec.context())
        if problem is None:
            return None
        await self._event(EventType.CALL_REJECTED, rec, detail=problem)
        result = _error(rec.call, "refused", f"refused before anyone was asked: "
                        f"{problem}"[:2000], rec.tool)
        return CallOutcome(rec.call, "decide", result, rec.decision)

    async def _shadow(self, shadow: Policy, rec: GatedCall, context: PolicyContext,
                      enforced: Decision) -> None:
        """Decide the call with the shadow policy and record it; nothing here can change the
        enforced decision or stop the call."""
        if EventType.CALL_SHADOW_DECIDED not in self._router.kinds:  # nobody sees it: moot
            return
        bound, session = rec.bound, rec.session
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
        # BLE001 - operator code under trial: the shadow never breaks a live call
        except Exception as exc:
            log.exception("the shadow policy failed on %s (session %s, call %s)",
                          bound.tool.name, session.id, rec.call.id)
            fields = {"status": "error",
                      "detail": f"the shadow policy failed ({type(exc).__name__})"}
        await self._event(EventType.CALL_SHADOW_DECIDED, rec, enforced=enforced, **fields)

    async def _pending_edit(self, rec: GatedCall) -> CallOutcome | None:
        """If the pending request holds an approver's edit of the call, make the edit what
        goes through the stages (the chain of edits checked back to the model's call)."""
        assert rec.pending is not None
        call = rec.call
        stored = await self.store.get_approval(rec.pending)
        if stored is None or stored.request.edit_of is None:
            return None
        request, first_parent = stored.request, stored.request.edit_of
        child, depth = request, 0
        parent_id: str | None = first_parent
        while parent_id is not None and depth <= self.policy.approvals.max_edits:
            parent = await self.store.get_approval(parent_id)
            if parent is None or not _edited_into(parent, child, rec):
                result = _error(call, "denied", "denied by policy: the edited call does not "
                                "match the approval it came from")
                return CallOutcome(call, "approve", result, None, request)
            child, parent_id, depth = parent.request, parent.request.edit_of, depth + 1
        rec.call = ToolCall.from_object(call.id, call.name, dict(request.arguments),
                                        call.provider_details)
        rec.edit_of, rec.edits = first_parent, depth
        return None

    async def _invalid(self, rec: GatedCall, problem: str) -> CallOutcome:
        tool, call = rec.resolved, rec.call
        count, total = rec.session.record_invalid(tool.name)
        await self._event(EventType.CALL_REJECTED, rec, detail=problem)
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
        pending = await self.store.list_approvals(pending_only=True, session_id=session.id)
        if sum(1 for r in pending if not r.expired(now)) >= limits.max_pending:
            return "too many approval requests are waiting in this session"
        asked = await self.store.list_approvals(pending_only=False, session_id=session.id)
        recent = [r for r in asked if r.created_at > now - limits.per]
        if len(recent) >= limits.max_asks and \
                await self._unanswered(recent) >= limits.max_asks:
            return "approval requests are being raised too fast in this session"
        return None

    async def _unanswered(self, requests: list[ApprovalRequest]) -> int:
        """How many of *requests* are still open or were refused: a request a person approved
        is a person keeping up, not a flood (the pending cap bounds the rest)."""
        unanswered = 0
        for r in requests:
            found = await self.store.get_approval(r.id)
            if found is None or found.answer is None or not found.answer.approved:
                unanswered += 1
        return unanswered

    async def _open_request(self, rec: GatedCall, digest: str) -> str | None:
        """A request already raised for exactly this call that may still be used.

        A process that died after storing a request but before saving the session as
        suspended leaves the request orphaned: reusing it means the person's answer is the
        one that counts, never a second request for the same call."""
        for request in await self.store.list_approvals(pending_only=False,
                                                       session_id=rec.session.id):
            if request.call_id != rec.call.id or request.digest != digest:
                continue
            found = await self.store.get_approval(request.id)
            if found is None or found.used:  # gone, or its answer already used
                continue
            if found.answer is None and request.expired(self.policy.now()):
                continue
            return request.id
        return None

    async def _use_answer(self, rec: GatedCall, request: ApprovalRequest,
                          answer: ApprovalAnswer) -> CallOutcome | None:
        """Check a person's answer against the request and use it (once): ``None`` if the call
        goes on (approved, or an edit in :attr:`GatedCall.edit`), else the outcome."""
        if answer.digest != request.digest or answer.request_id != request.id:
            return _refused(rec, "the answer was given for a different call", request)
        # the gate's clock decides, not the time an answer claims to have been given
        if request.expired(self.policy.now()):
            return _refused(rec, "the approval request expired", request)
        if answer.edited_arguments is not None:
            return await self._take_edit(rec, request, answer)
        if not answer.approved:
            return _declined(rec, answer, request)
        if await self.store.consume_approval(request.id, request.digest) is None:
            return _refused(rec, "this approval was already used", request)
        rec.approved = request
        return None

    async def _take_edit(self, rec: GatedCall, request: ApprovalRequest,
                         answer: ApprovalAnswer) -> CallOutcome:
        """An approver's edit is a new proposal: validate, decide and approve again."""
        if await self.store.consume_approval(request.id, request.digest) is None:
            return _refused(rec, "this answer was already used", request)
        if rec.edits >= self.policy.approvals.max_edits:
            return _refused(rec, "the arguments were edited too many times", request)
        call = rec.call
        assert answer.edited_arguments is not None
        edited = ToolCall.from_object(call.id, call.name, dict(answer.edited_arguments),
                                      call.provider_details)
        rec.edit = GatedCall(edited, rec.session, rec.offered, rec.handler, None,
                             edit_of=request.id, edits=rec.edits + 1,
                             approved_by=answer.approver if answer.approved else None,
                             settle_later=rec.settle_later)
        return CallOutcome(call, "approve", None, rec.decision, request)  # the edit goes on

    async def _stored_answer(
        self, rec: GatedCall, pending: str, fresh: ApprovalRequest, now: datetime, *,
        ask_again: bool = False,
    ) -> CallOutcome | tuple[ApprovalRequest, ApprovalAnswer]:
        """The stored request *pending* and its answer, or the outcome: refused, or waiting.

        *ask_again*: the request was found orphaned (stored by a process that died before
        recording its approver's answer, or before saving the session as waiting); still
        unanswered, it is put to the configured approver again — an in-process approver
        that died with the process would otherwise never be asked, and the session would
        wait on nobody. A deferring approver answers ``None`` again: the session waits."""
        stored = await self.store.get_approval(pending)
        if stored is None:
            return _refused(rec, "the approval request no longer exists", None)
        request, answer = stored.request, stored.answer
        if request.digest != fresh.digest:
            return _refused(rec, "the call or the tool changed after approval was asked",
                            request)
        if answer is None:
            if request.expired(now):
                return _refused(rec, "the approval request expired", request)
            if ask_again:
                return await self._approvers_answer(
                    rec, request, now, detail="answered via approver, asked again after the "
                                              "process that first asked it ended")
            return CallOutcome(rec.call, "approve", None, rec.decision, request)
        # the answer was recorded (and audited) where it was given: say it reached the call
        await self._event(EventType.APPROVAL_RESUMED, rec, request=request, answer=answer)
        return request, answer

    async def _ask(self, rec: GatedCall, fresh: ApprovalRequest,
                   now: datetime) -> CallOutcome | tuple[ApprovalRequest, ApprovalAnswer]:
        """Raise *fresh* and ask the approver: the request and its answer, or the outcome."""
        flood = await self._flood_guard(rec.session, now)
        if flood is not None:
            await self._event(EventType.CALL_REJECTED, rec, detail=flood)
            return _refused(rec, flood, None)
        await self.store.create_approval(fresh)
        rec.session.record_approval_asked()
        await self._event(EventType.APPROVAL_REQUESTED, rec, arguments=rec.parsed,
                          decision=rec.decision, request=fresh)
        return await self._approvers_answer(rec, fresh, now)

    async def _approvers_answer(
        self, rec: GatedCall, request: ApprovalRequest, now: datetime,
        detail: str = "answered via approver",
    ) -> CallOutcome | tuple[ApprovalRequest, ApprovalAnswer]:
        """Ask the configured approver about the stored *request*; record its answer."""
        answer: ApprovalAnswer | None
        if rec.approved_by is not None and rec.edit_of is not None:
            # the person who made this edit approved it with the edit ("approve with
            # edits"); it still passed validate and decide again, and binds to this digest
            answer = ApprovalAnswer.to(request, True, rec.approved_by,
                                       "approved with the edit", at=now)
        else:
            answer = await self.approver.decide(request)
        if answer is not None and answer.approved and request.quorum is not None:
            answer = None  # a quorum is gathered from people's votes (anfitrion._answers)
        if answer is None:
            return CallOutcome(rec.call, "approve", None, rec.decision, request)
        if answer.approved:  # held to the reviewers' grants like any door (_entitlements)
            entitled, grounds = await entitlements.check(self.store, request, answer.approver)
            if not entitled:
                await entitlements.audit_refusal(
                    self.store, request, answer.approver,
                    "edit" if rec.edit_of is not None else "approver", grounds)
                return CallOutcome(rec.call, "approve", None, rec.decision, request)
        if not await self.store.answer_approval(answer):
            return _refused(rec, "the answer did not match the request", request)
        # recorded once, when given (here, by the approver in process); an answer given
        # through a door was recorded there (anfitrion._answers), not again when used
        await self._event(EventType.APPROVAL_ANSWERED, rec, request=request, answer=answer,
                          detail=detail)
        return request, answer

    def _shadow_rate_keys(self, tool_name: str) -> tuple[RateKey, ...]:
        try:
            return self.shadow_policy.rate_keys(tool_name) if self.shadow_policy else ()
        except Exception:  # BLE001 - operator code under trial: the shadow never stops a call
            log.exception("the shadow policy failed to name its rate keys for %s", tool_name)
            return ()

    async def _held_elsewhere(self, rec: GatedCall) -> EffectEntry | None:
        """The effect if another call holds it and it may not simply run; an unknown one is
        first reconciled by the tool's hook, if it has one."""
        held = await self.ledger.holder(rec)
        if held is not None and held.state is LedgerState.UNKNOWN and \
                rec.resolved.reconcile is not None:
            held = await self._reconcile(rec) or held
            if held.state is LedgerState.FAILED:
                return None
        return held

    async def _reconcile(self, rec: GatedCall) -> EffectEntry | None:
        """Ask the tool's reconcile hook what happened; settle the effect with its answer."""
        happened = await ask_reconcile_hook(rec.resolved, rec.arguments, rec.context())
        if happened is None:
            return None
        entry = await self.ledger.resolve(rec, bool(happened))
        assert rec.effect is not None
        await self._event(EventType.EXECUTION_SETTLED, rec, effect_key=rec.effect.key,
                          status="resolved_done" if happened else "resolved_failed",
                          detail=f"reconciled by {rec.resolved.name}'s hook")
        return entry

    async def _claim(self, rec: GatedCall,
                     repeat_of: tuple[str, str] | None) -> ToolResult | str:
        """Claim a write: its claim token, or the result to give instead of running it."""
        effect, call, tool = rec.effect, rec.call, rec.resolved
        claim = await self._claimed(rec, repeat_of)
        if claim.state is ClaimState.CLAIMED and claim.token is not None:
            return claim.token
        if claim.state is ClaimState.DUPLICATE and claim.effect is not None:
            return _duplicate(call, tool, claim.effect)
        if claim.state in (ClaimState.DONE, ClaimState.FAILED) and claim.result is not None:
            return claim.result
        if claim.state is ClaimState.UNKNOWN and effect is not None and \
                tool.reconcile is not None:  # resumed after a crash: ask what happened
            settled = await self._reconciled_own(rec)
            if settled is not None:
                return settled
        return _error(call, "outcome_unknown", "outcome unknown — the action may have "
                      "happened; it was not run again. A person must resolve it "
                      "(anfitrion effects).", tool)

    def _claimed_event(self, rec: GatedCall, repeat_of: tuple[str, str] | None,
                       claim: Claim) -> HostEvent:
        """The ``execution.claimed`` event of *claim*."""
        status = claim.state.value
        if repeat_of is not None and claim.state is ClaimState.CLAIMED:
            status = "claimed_repeat"  # a person approved running this effect again
        session, call, effect = rec.session, rec.call, rec.effect
        detail = f"repeat of call {repeat_of[1]}" if repeat_of else None
        held = claim.effect
        if claim.state is ClaimState.DUPLICATE and held is not None:  # as the check says it
            detail = (f"effect held by call {held.call_id} "
                      f"({held.state.value if held.state else 'unclaimed'})")
        return HostEvent(EventType.EXECUTION_CLAIMED, session.id, session.turn,
                         session.principal.id, call.id, call.name, status=status,
                         effect_key=effect.key if effect else None, detail=detail)

    async def _claimed(self, rec: GatedCall, repeat_of: tuple[str, str] | None) -> Claim:
        """Claim a write and announce it. With the audit recorder and a store that can, the
        records buffered so far (the call's proposal, validation, decision) and the claim's own
        record are stored in the claim's transaction — one commit, before the effect — and the
        other listeners are told; else the recorder flushes them after the claim, as any
        listener told of it."""
        recorder, router = self.recorder, self._router
        kind = EventType.EXECUTION_CLAIMED
        both = claim_audit_role(self.store) if recorder is not None else None
        if recorder is None or both is None or recorder.record not in router.listeners(kind):
            claim = await self.ledger.claim(rec, repeat_of)
            if kind in router.kinds:
                await self._deliver(router(self._claimed_event(rec, repeat_of, claim)))
            return claim
        batch = recorder.take()
        told: dict[ClaimState, tuple[HostEvent, list[AuditEntry]]] = {}

        def audit(claim: Claim) -> list[AuditEntry]:
            # the same records each time: a retried transaction writes what the first would
            if claim.state not in told:
                event = self._claimed_event(rec, repeat_of, claim)
                record = recorder.entry(event)
                told[claim.state] = event, [*batch, record] if record is not None else [*batch]
            return told[claim.state][1]

        try:
            claim = await self.ledger.claim_and_audit(both, rec, repeat_of, audit)
        except BaseException:
            recorder.give_back(batch)  # not written: they go with the next write
            raise
        event, written = told.get(claim.state) or (
            self._claimed_event(rec, repeat_of, claim), [])
        if written:
            await recorder.written(len(written))
        others = [listener for listener in router.listeners(kind)
                  if listener != recorder.record]
        await self._deliver(hand_out(others, event) if others else None)
        return claim

    @staticmethod
    async def _deliver(pending: Awaitable[None] | None) -> None:
        if pending is not None:
            await pending

    async def _reconciled_own(self, rec: GatedCall) -> ToolResult | None:
        """The result the tool's reconcile hook settled this very call with, if it could."""
        settled = await self._reconcile(rec)
        if settled is None or settled.result is None or \
                (settled.session_id, settled.call_id) != (rec.session.id, rec.call.id):
            return None
        return dataclasses.replace(settled.result, call_id=rec.call.id)

    def _counted(self, rec: GatedCall) -> list[str]:
        """(policy) The names the call is counted under for rate limits: each a limit on
        this tool (or the shadow's) reads; most tools: none."""
        name = rec.resolved.name
        rate_keys = self.policy.rate_keys(name)
        if self.shadow_policy is not None:  # the shadow's rate limits count calls too
            rate_keys = (*rate_keys, *self._shadow_rate_keys(name))
        return list(dict.fromkeys(k.tool for k in rate_keys)) if rate_keys else []

    async def _count(self, rec: GatedCall, counted: list[str]) -> None:
        at = self.policy.now().timestamp()
        for name in counted:
            await self.store.record_call(rec.session.principal.id, name, at)

    async def _run(self, rec: GatedCall) -> ToolResult:
        """Run the handler with the principal's authority; its value shaped, or the error."""
        call, tool, ledger = rec.call, rec.resolved, rec.write
        handler = rec.handler or tool.handler
        unknown = (" The outcome is unknown: it may have happened. It will not run again "
                   "until a person resolves it.") if ledger else ""
        try:
            if tool.timeout is not None:
                with anyio.fail_after(tool.timeout):
                    value = await handler(rec.arguments, rec.context())
            else:
                value = await handler(rec.arguments, rec.context())
            return shape_result(call.id, tool, value, self.policy.media)
        except TimeoutError:
            after = f" after {tool.timeout:g} seconds" if tool.timeout is not None else ""
            return _error(call, "outcome_unknown" if ledger else "timeout",
                          f"{tool.name} timed out{after}.{unknown}", tool)
        except ToolError as exc:
            if ledger and exc.executed is not False:
                return _error(call, "outcome_unknown",
                              f"{tool.name} failed: {exc}"[:2000] + unknown, tool)
            return _error(call, "tool_error", f"{tool.name} failed: {exc}"[:2000], tool)
        # BLE001 - the tool's handler is application code: an error result, logged
        except Exception as exc:
            log.exception("tool %s raised (session %s, call %s)", tool.name, rec.session.id,
                          call.id)
            return _error(call, "outcome_unknown" if ledger else "tool_error",
                          f"{tool.name} failed with an internal error ({type(exc).__name__})."
                          f"{unknown}", tool)

    async def _settle(self, rec: GatedCall, result: ToolResult, token: str) -> None:
        if rec.settle_later is not None:  # stored with the save that follows, in its commit
            rec.settle_later.append((rec.session.id, rec.call.id, result, token))
        else:
            await self.ledger.settle(rec, result, token)
        status = "failed" if result.is_error else "done"
        if result.error_kind == "outcome_unknown":
            status = "unknown"
        await self._event(EventType.EXECUTION_SETTLED, rec, result=result, status=status,
                          effect_key=rec.effect.key if rec.effect else None)


def _edited_into(parent: StoredApproval, child: ApprovalRequest, rec: GatedCall) -> bool:
    """Whether the answer to *parent* edited its call into the request *child*, in *rec*'s
    session, for its principal, call and tool."""
    answer, request, session = parent.answer, parent.request, rec.session
    return answer is not None and answer.edited_arguments is not None and \
        canonical_json(dict(answer.edited_arguments)) == canonical_json(dict(child.arguments)) \
        and (request.session_id, request.principal_id, request.call_id, request.tool_name) == \
        (session.id, session.principal.id, rec.call.id, rec.call.name)


def _refused(rec: GatedCall, why: str, request: ApprovalRequest | None) -> CallOutcome:
    """A call denied at the approve stage: the model sees the operator's or approver's words
    only, never rule internals."""
    result = _error(rec.call, "denied", f"denied by policy: {why}", rec.tool)
    return CallOutcome(rec.call, "approve", result, rec.decision, request)


def _declined(rec: GatedCall, answer: ApprovalAnswer, request: ApprovalRequest) -> CallOutcome:
    """A call a person said no to: the model is told it was a person, with their note — never
    the policy's words, so it does not argue with a rule when a person decided (#36)."""
    if answer.approver == NO_APPROVER:
        return _refused(rec, answer.note or "a person must approve this call", request)
    return CallOutcome(rec.call, "approve", _error(rec.call, "denied",
                                                   declined_text(answer.note), rec.tool),
                       rec.decision, request)


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
