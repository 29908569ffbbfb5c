"""The session runtime: one assembly of the gate, used by every door.

:class:`Runtime` puts together what a gate needs — tools, policy, approver, store, the audit
recorder, listeners, limits, budgets — once. :class:`Host` runs its loop on it, the MCP
gateway serves its clients on it, and code that runs its own tool loop (a framework, an
application) uses it directly: open or resume a :class:`GatedSession` for a principal, submit
each proposed call, report results obtained elsewhere, answer and resume in any process.

Every door goes through :meth:`GatedSession.process`, so a repeat guard, an invalid-call
limit, a budget, a rate limit, taint and argument provenance mean the same everywhere.

A session is run under a *lease*: an owner (``host/pidns:pid:token``) and an expiry, renewed while
the run lives. A second run cannot take a live lease; a lease whose process died (on this
machine: its pid is gone) or that lapsed is free, so a crashed session is recoverable by
``resume --ready`` instead of staying ``running`` for ever. Taking a lease bumps the session's
version, so every save of an earlier holder conflicts, and a ledger entry can only be settled
under the claim token its claimer got: a run that lost its lease writes nothing.

Example:
    >>> from anfitrion import Effect, Runtime, Toolbox
    >>> tools = Toolbox()
    >>> @tools.tool(effect=Effect.READ, provenance="trusted")
    ... def get_weather(location: str) -> dict:
    ...     '''Get the current weather for a given location.'''
    ...     return {"location": location, "temp_c": 15}
    >>> with Runtime(tools=tools).sync() as runtime:
    ...     session = runtime.open("alice")
    ...     outcome = session.submit("get_weather", {"location": "Lisboa"}, call_id="c1")
    ...     session.close()
    >>> outcome.status, outcome.text
    (<SubmissionStatus.EXECUTED: 'executed'>, '{"location": "Lisboa", "temp_c": 15}')
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

import anyio
import anyio.from_thread

from ._approvals import ApprovalRequest, Approver, DenyAllApprover
from ._audit import AuditRecorder
from ._audit_trail import Checkpointer
from ._conversation import Provenance, Reply, ToolCall, ToolResult
from ._events import EventType, HostEvent, Listener, Router, hand_out
from ._gate import CallOutcome, Gate, GateLimits
from ._media import split
from ._owners import dead_local_owner, mint_owner
from ._principal import Principal
from ._session import Session
from ._tools import Handler, OfferContext, Tool, Toolbox, ToolContext, ToolSource
from .exceptions import ConflictError, SessionNotFound, UserError
from .policy import Decision, Policy
from .store import (
    SessionState,
    SessionStore,
    Settlement,
    Store,
    lease_tail_role,
    open_store,
    session_audit_role,
    settle_save_role,
)

__all__ = ["GatedSession", "Runtime", "Submission", "SubmissionStatus", "SyncRuntime",
           "SyncSession", "reap_dead_leases"]

T = TypeVar("T")

log = logging.getLogger("anfitrion.runtime")

DEFAULT_LEASE_SECONDS = 60.0

WARM_SESSIONS = 32
"""How many released sessions the MCP gateway's runtime keeps to continue from what it holds
(the least recently released go first): ``Runtime(keep_released=…)``."""


async def reap_dead_leases(store: SessionStore) -> list[str]:
    """Let the leases of sessions whose process died on this machine lapse now, so that
    :meth:`Store.claim_resumable` (``resume --ready``) takes them without waiting for the
    expiry. Returns their session ids."""
    reaped = []
    for state in await store.list_sessions("running"):
        if dead_local_owner(state.lease_owner) and state.lease_owner is not None and \
                await store.renew_lease(state.session_id, state.lease_owner, 0.0):
            reaped.append(state.session_id)
    return reaped


class SubmissionStatus(StrEnum):
    EXECUTED = "executed"
    """The gate allowed it and the handler ran (through the ledger, for writes)."""
    WAITING = "waiting"
    """A person must answer ``request``; submit the same call again (any process) after."""
    REFUSED = "refused"
    """Not run: unknown tool, invalid arguments, denied, a budget; ``text`` says why."""


@dataclass(frozen=True, slots=True)
class Submission:
    """What the gate did with one submitted call.

    Attributes:
        status: executed, waiting or refused.
        call: the call as the gate saw it.
        result: the shaped result (executed or refused) to give the model.
        request: the approval request (waiting).
        decision: the policy's decision, when the call got that far.
        stage: the gate stage it left at (``resolve``, ``validate``, ``decide``, ``approve``,
            ``execute``, ``budget``).
    """

    status: SubmissionStatus
    call: ToolCall
    result: ToolResult | None
    request: ApprovalRequest | None
    decision: Decision | None
    stage: str

    @property
    def text(self) -> str:
        """What the model should be told (a text-only model: media items as summary lines)."""
        if self.result is not None:
            return split(self.result, frozenset())[0]
        assert self.request is not None
        return (f"{self.call.name} waits for a person's approval (request {self.request.id}); "
                "nothing was run yet.")

    @classmethod
    def of(cls, outcome: CallOutcome) -> Submission:
        if outcome.result is None:
            status = SubmissionStatus.WAITING
        elif outcome.stage == "execute":
            status = SubmissionStatus.EXECUTED
        else:
            status = SubmissionStatus.REFUSED
        return cls(status, outcome.call, outcome.result, outcome.request, outcome.decision,
                   outcome.stage)


class Runtime:
    """The gate and everything around it, assembled once.

    Args:
        tools: a :class:`Toolbox` or any :class:`ToolSource` (or tools).
        policy: defaults to :meth:`Policy.default`.
        approver: who answers ``ask`` now (default: deny-all; ``DeferredApprover()``
            waits for a person in the inbox or the CLI).
        store: a :class:`Store` or a URL (default ``memory://``).
        listeners: callables receiving every :class:`HostEvent`.
        limits: bounds on arguments and invalid-call retries.
        audit: record redacted, hash-chained audit events in the store.
        max_tool_calls: executed tool calls per session before calls are refused.
        lease_seconds: how long a run's lease holds unless renewed.
        app: recorded in new sessions: who may resume them (see :class:`Session`).
        shadow_policy: a second policy evaluated beside *policy* on every call, its decision
            recorded (``call.shadow_decided``) and never enforced; default: the ``[shadow]``
            policy *policy*'s file names, if any.
        keep_released: how many sessions this runtime keeps after releasing them (closed or
            suspended), so that resuming one here reads only what was stored since
            (docs/store.md, *Suspend and resume*; the MCP gateway keeps
            :data:`WARM_SESSIONS`). Resuming such a session continues the very objects its
            closed :class:`GatedSession` held: do not use that one after closing it.
    """

    def __init__(self, tools: ToolSource | Iterable[Tool] | None = None, *,
                 policy: Policy | None = None, approver: Approver | None = None,
                 store: Store | str | None = None, listeners: Sequence[Listener] = (),
                 limits: GateLimits | None = None, audit: bool = True,
                 max_tool_calls: int | None = None,
                 lease_seconds: float = DEFAULT_LEASE_SECONDS, app: str | None = None,
                 shadow_policy: Policy | None = None, keep_released: int = 0) -> None:
        if tools is None:
            tools = Toolbox()
        elif not isinstance(tools, ToolSource):
            tools = Toolbox(tools)
        if max_tool_calls is not None and max_tool_calls < 0:
            raise UserError("max_tool_calls must not be negative")
        if lease_seconds <= 0:
            raise UserError("lease_seconds must be positive")
        if keep_released < 0:
            raise UserError("keep_released must not be negative")
        self.tools: ToolSource = tools
        self.policy = policy or Policy.default()
        self.approver: Approver = approver or DenyAllApprover()
        self.store: Store = open_store(store)
        self.max_tool_calls = max_tool_calls
        self.lease_seconds = lease_seconds
        self.app = app
        self.owner = mint_owner()
        """This runtime's lease owner id."""
        self.keep_released = keep_released
        self._warm: OrderedDict[str, Session] = OrderedDict()
        """Sessions this runtime stored and released, newest last (at most
        :attr:`keep_released`): the next lease of one reads only the messages it lacks."""
        self._recorder = AuditRecorder(
            self.store, checkpoints=Checkpointer.from_env(self.store)) if audit else None
        # the recorder's own entry point: no coroutine for an event that only joins its buffer
        self._record = self._recorder.record if self._recorder is not None else None
        listening: list[Listener] = [self._record] if self._record is not None else []
        listening.extend(listeners)
        self.shadow_policy = shadow_policy or self.policy.shadow
        if self.policy.approvals.webhooks:  # [[approvals.webhooks]]: signed, in the background
            from .channels import webhook_listeners
            listening += webhook_listeners(self.store, self.policy.approvals.webhooks)
        # where events go, fixed here: one router for the gate and every door. A kind only
        # the recorder takes goes straight to it (its flush logs its own failures); a kind no
        # listener takes is never built; listeners added later join this same router.
        self._router = Router(listening, quiet=(self._record,) if self._record else ())
        self.gate = Gate(policy=self.policy, approver=self.approver, store=self.store,
                         emit=self._router, limits=limits, shadow_policy=self.shadow_policy,
                         recorder=self._recorder)

    def wants(self, kind: EventType) -> bool:
        """Whether some listener takes events of *kind* (else none need be built)."""
        return kind in self._router.kinds

    def add_listener(self, listener: Listener) -> None:
        self._router.add(listener)

    @property
    def listeners(self) -> tuple[Listener, ...]:
        """Every listener events go to (the audit recorder's entry point first, when on)."""
        return self._router.every_listener

    def announce(self, event: HostEvent, *, recorded: bool = False) -> Awaitable[None] | None:
        """Give *event* to the listeners of its kind (*recorded*: the audit recorder has it
        already); what is left to await, or ``None``."""
        if not recorded or self._record is None:
            return self._router(event) if event.type in self._router.kinds else None
        record = self._record
        others = [listener for listener in self._router.listeners(event.type)
                  if listener != record]
        return hand_out(others, event) if others else None

    async def emit(self, event: HostEvent, *, recorded: bool = False) -> None:
        """:meth:`announce`, awaited."""
        pending = self.announce(event, recorded=recorded)
        if pending is not None:
            await pending

    async def flush(self) -> None:
        """Store the audit records buffered so far."""
        if self._recorder is not None:
            await self._recorder.flush()

    async def offered(self, session: Session) -> dict[str, Tool]:
        """The tools *session* may see and call this turn."""
        context = OfferContext(session.principal, session.id, session.turn)
        tools = await self.tools.list_tools(context)
        offered = {t.name: t for t in tools if t.scopes <= session.principal.scopes}
        if self._recorder is not None:
            self._recorder.learn(offered.values())  # arguments it must never record
        return offered

    # -- sessions ------------------------------------------------------------------------------

    async def open(self, principal: Principal | str = "user", session_id: str | None = None,
                   *, app: str | None = None) -> GatedSession:
        """A new session for *principal*, or the stored, idle session *session_id* of theirs.

        Raises:
            UserError: the session belongs to another principal, waits for an approval
                (resume it), or is running elsewhere.
        """
        who = Principal.of(principal)
        state = await self.store.load_session(session_id) if session_id is not None else None
        if state is None:
            session = Session(session_id or uuid.uuid4().hex, who, app=app or self.app)
            session.lease_owner = self.owner
            session.lease_expires = time.time() + self.lease_seconds
            return GatedSession(self, session)
        if state.principal_id != who.id:
            raise UserError(f"session {session_id!r} belongs to another principal")
        stored = Session.from_state(state)
        if stored.pending:
            raise UserError(f"session {session_id!r} waits for an approval: resume it")
        if state.status == "running":
            raise UserError(f"session {session_id!r} is running in another process (or its "
                            "process died: resume it with force=True)")
        return GatedSession(self, await self._lease(state, "continue"))

    async def resume(self, session_id: str, *, force: bool = False,
                     lease_from: str | None = None) -> GatedSession:
        """Take the stored session *session_id* to continue it (any process).

        *lease_from*: the owner that leased it for this runtime to continue (the one given
        to :meth:`Store.claim_resumable`); its live lease is taken over.

        Raises:
            SessionNotFound: no such session.
            UserError: it is not suspended (unless *force*: a session left running by a
                process that died).
            ConflictError: another run holds its lease.
        """
        return await self._resume(session_id, await self._row(session_id), force=force,
                                  lease_from=lease_from)

    async def _row(self, session_id: str) -> SessionState | None:
        """The stored session *session_id* to decide on (whose it is, its status and lease):
        without its messages where the store can (its lease then reads what is needed)."""
        tails = lease_tail_role(self.store)
        if tails is not None:
            return await tails.session_row(session_id)
        return await self.store.load_session(session_id)

    async def _resume(self, session_id: str, state: SessionState | None, *, force: bool,
                      lease_from: str | None = None) -> GatedSession:
        """:meth:`resume` with the session's state as its caller just read it (its lease
        is taken with a fresh copy: nothing is decided on *state* but whether to try)."""
        if state is None:
            raise SessionNotFound(session_id)
        if state.status != "suspended" and not force:
            raise UserError(f"session {session_id!r} is {state.status}, not suspended")
        return GatedSession(self, await self._lease(state, "resume", lease_from))

    async def _lease(self, state: SessionState, doing: str,
                     lease_from: str | None = None) -> Session:
        now = time.time()
        replace = state.lease_owner if dead_local_owner(state.lease_owner) else lease_from
        until = now + self.lease_seconds
        warm = self._warm.pop(state.session_id, None)
        tails = lease_tail_role(self.store)
        if warm is not None and tails is not None and warm.continuable():
            leased = await tails.acquire_lease_after(state.session_id, self.owner, until,
                                                     now=now, known=warm.message_count,
                                                     replace=replace)
            if leased is None:  # held elsewhere: kept for the next try, unchanged
                self._warm[state.session_id] = warm
                raise await self._held(state.session_id, doing, now)
            row, tail, total = leased
            if warm.catch_up(row, tail, total):
                return warm
            whole = await self.store.load_session(state.session_id)  # leased to us now
            if whole is None:
                raise SessionNotFound(state.session_id)
            return Session.from_state(whole)
        taken = await self.store.acquire_lease(state.session_id, self.owner, until, now=now,
                                               replace=replace)
        if taken is None:
            raise await self._held(state.session_id, doing, now)
        return Session.from_state(taken)

    async def _held(self, session_id: str, doing: str, now: float) -> Exception:
        """Why *session_id* could not be leased: another run's live lease (or no session)."""
        current = await self.store.load_session(session_id)
        if current is None:
            return SessionNotFound(session_id)
        until = current.lease_expires or now
        return ConflictError(
            f"cannot {doing} session {session_id!r}: it is running under the lease "
            f"of {current.lease_owner} for {max(until - now, 0):.0f} more seconds (a "
            "process that died frees it then, or at once on this machine)")

    def _keep_warm(self, session: Session) -> None:
        """*session* was stored with its lease released: kept for its next lease here."""
        if not self.keep_released or lease_tail_role(self.store) is None \
                or not session.continuable():
            return
        self._warm.pop(session.id, None)
        self._warm[session.id] = session
        while len(self._warm) > self.keep_released:
            self._warm.popitem(last=False)

    def sync(self) -> SyncRuntime:
        """A synchronous facade (a context manager running an event loop in a thread)."""
        return SyncRuntime(self)


class GatedSession:
    """One session opened on a :class:`Runtime`: the embedding API, and what the host runs.

    Use it from code that runs its own loop: :meth:`add_user_text` for the principal's words,
    :meth:`submit` for each proposed call, :meth:`report_result` for results obtained
    elsewhere, :meth:`close` at the end (or :meth:`suspend` to leave it for a person).
    """

    def __init__(self, runtime: Runtime, session: Session) -> None:
        self.runtime = runtime
        self.session = session
        self.lease_lost = False
        # saves of one session are serialised in the process (concurrent calls of one
        # client merge into the one in-memory session, never conflicting with each other),
        # and a save that waited finds its changes already written by the save before it
        self._saving = anyio.Lock()
        self._asked = 0
        self._written = 0
        self._settlements: list[Settlement] = []
        """Writes that ran, whose settlements go with the next save (:meth:`submit`)."""

    @property
    def id(self) -> str:
        return self.session.id

    @property
    def principal(self) -> Principal:
        return self.session.principal

    @property
    def pending(self) -> Mapping[str, str]:
        return self.session.pending

    def add_user_text(self, text: str) -> None:
        """The principal's own words (a prompt): values found here are never flagged."""
        self.session.add_principal_text(text)

    async def offered(self) -> dict[str, Tool]:
        return await self.runtime.offered(self.session)

    async def process(self, call: ToolCall, offered: Mapping[str, Tool], *,
                      handler: Handler | None = None,
                      settle_later: list[Settlement] | None = None) -> CallOutcome:
        """Gate one call of the open turn and record its outcome in the session (with
        *settle_later*: see :meth:`Gate.process`)."""
        session = self.session
        budget = self.runtime.max_tool_calls
        if budget is not None and session.pending_request(call.id) is None and \
                session.tool_calls >= budget:
            result = ToolResult(call.id, call.name, "tool call budget exhausted; not run",
                                is_error=True, error_kind="budget_exhausted")
            session.record_result(result, executed=False)
            return CallOutcome(call, "budget", result, exhausted=True)
        outcome = await self.runtime.gate.process(call, offered, session, handler=handler,
                                                  settle_later=settle_later)
        if outcome.result is None:
            assert outcome.request is not None
            session.record_waiting(call.id, outcome.request.id)
        else:
            session.record_result(outcome.result, executed=outcome.stage == "execute")
        return outcome

    async def submit(self, name: str, arguments: str | Mapping[str, Any] | None = None,
                     call_id: str | None = None, *,
                     execute: Callable[..., Any] | None = None) -> Submission:
        """Put one proposed call through the gate.

        Args:
            name: the tool name the model proposed (resolved among the runtime's tools).
            arguments: the argument text exactly as the model sent it, or an object.
            call_id: the model's call id (default: a new one). Submitting a call that waits
                for a person again, after the answer, continues it.
            execute: run this instead of the tool's own handler — ``fn(arguments)`` or
                ``fn(arguments, context)``, sync or async — for tools the caller runs
                itself; the ledger's claim and settle still wrap it, so a write runs once.

        Returns:
            the :class:`Submission` (executed, waiting or refused), with the text for the model.
        """
        session = self.session
        call_id = call_id or f"call_{uuid.uuid4().hex[:16]}"
        if isinstance(arguments, str):
            call = ToolCall.from_raw(call_id, name, arguments)
        else:
            call = ToolCall.from_object(call_id, name, dict(arguments or {}))
        resuming = session.pending_request(call_id) is not None
        if not resuming and session.used_call_id(call_id):
            result = ToolResult(call_id, name, f"the call id {call_id!r} was used before in "
                                "this session; nothing was run", is_error=True,
                                error_kind="denied")
            return Submission(SubmissionStatus.REFUSED, call, result, None, None, "resolve")
        if not resuming:
            session.begin_turn()
            session.add(Reply((call,)))
        # a write's settlement is stored with the save that follows at once, in its
        # transaction (one commit fewer), where the store can
        later = self._settlements if settle_save_role(self.runtime.store) is not None else None
        try:
            outcome = await self.process(call, await self.offered(),
                                         handler=_as_handler(execute) if execute else None,
                                         settle_later=later)
        except BaseException:  # no save follows: what ran is settled on its own
            await self._settle_alone([s for s in self._settlements if s[1] == call_id])
            raise
        if outcome.result is not None:
            session.close_turn([call])
        await self.save()
        return Submission.of(outcome)

    async def report_result(self, name: str, content: str, *,
                            provenance: Provenance | str = Provenance.UNTRUSTED,
                            call_id: str | None = None) -> None:
        """A result the caller obtained itself (a tool outside the gate, a retrieval step):
        taint and argument provenance see it like any tool result."""
        result = ToolResult(call_id or f"outside_{uuid.uuid4().hex[:12]}", name, content,
                            provenance=Provenance(provenance))
        self.session.record_outside_result(result)

    async def save(self) -> None:
        """Store the session now (compare-and-set on its version), and the audit records
        buffered so far — in the same transaction where the store can.

        Concurrent saves of this object are serialised, and coalesce: a save waiting for
        another one returns as soon as a write that began after it was asked has stored
        everything it would have (one commit for several calls that finished together).
        """
        self._asked += 1
        asked = self._asked
        async with self._saving:
            if self._written >= asked:
                return
            self._written = self._asked  # what this write covers: every change asked so far
            try:
                await self._write()
            except BaseException:
                self._written = asked - 1
                raise

    async def _write(self) -> None:
        store, recorder = self.runtime.store, self.runtime._recorder
        if self._settlements:
            await self._settle_and_write()
            return
        both = session_audit_role(store)  # on the class: a forwarding wrapper is not one
        if both is None or recorder is None:
            self.session.saved(await store.save_session(self.session.to_state()))
            await self.runtime.flush()
            return
        batch = recorder.take()
        try:
            state = await both.save_session_and_audit(self.session.to_state(), batch)
        except BaseException:
            recorder.give_back(batch)  # not written: they go with the next write
            raise
        self.session.saved(state)
        if batch and recorder.checkpoints is not None:
            await recorder.written(len(batch))

    async def _settle_and_write(self) -> None:
        """The settlements of the writes that ran, the session and the records buffered so
        far, in one transaction. If it fails, the settlements are stored on their own: the
        ledger keeps what ran (a re-send is answered with the stored result) even when the
        session could not be saved."""
        store, recorder = self.runtime.store, self.runtime._recorder
        together = settle_save_role(store)
        assert together is not None, "settlements wait for a save only where the store can"
        settlements, self._settlements[:] = list(self._settlements), []
        batch = recorder.take() if recorder is not None else []
        try:
            state = await together.settle_and_save_session(settlements,
                                                           self.session.to_state(), batch)
        except BaseException:
            if recorder is not None:
                recorder.give_back(batch)  # not written: they go with the next write
            await self._settle_alone(settlements)
            raise
        self.session.saved(state)
        if recorder is None:
            return
        if batch and recorder.checkpoints is not None:
            await recorder.written(len(batch))

    async def _settle_alone(self, settlements: Sequence[Settlement]) -> None:
        """Store *settlements* one by one (no save follows, or it failed); one whose claim
        another run took over stays unknown, as :meth:`CallLedger.settle` leaves it."""
        store = self.runtime.store
        with anyio.CancelScope(shield=True):
            for settlement in settlements:
                with contextlib.suppress(ValueError):
                    self._settlements.remove(settlement)
                try:
                    await store.settle_execution(*settlement)
                except Exception:  # BLE001 - the caller's own error goes on; this is logged
                    log.exception("the settlement of call %s could not be stored",
                                  settlement[1])

    async def renew(self) -> bool:
        """Extend the lease; False (and :attr:`lease_lost`) if another run took it."""
        if self.session.version == 0:
            return True
        until = time.time() + self.runtime.lease_seconds
        ok = await self.runtime.store.renew_lease(self.session.id, self.runtime.owner, until)
        if ok:
            self.session.lease_expires = until
        else:
            self.lease_lost = True
        return ok

    async def keep_lease(self) -> None:
        """Renew the lease until cancelled (run it beside the work of a long run)."""
        while not self.lease_lost:
            await anyio.sleep(self.runtime.lease_seconds / 3)
            await self.renew()

    async def end(self, status: str, *, detail: str | None = None,
                  announce: bool = False) -> None:
        """Save the session with *status*, releasing its lease; then, with *announce*, emit
        ``run.ended`` (*detail*: why, for a failed run).

        Where the store saves a session and audit records together, the ``run.ended`` record
        is written in the save's transaction (one commit, not two), and the listeners hear of
        it once the save succeeded, as before; a save that fails leaves no such record.
        """
        session = self.session
        session.status = status
        session.lease_owner = None
        session.lease_expires = None
        runtime = self.runtime
        if not announce or not runtime.wants(EventType.RUN_ENDED):
            await self.save()
            runtime._keep_warm(session)
            return
        event = HostEvent(EventType.RUN_ENDED, session.id, session.turn, session.principal.id,
                          status=status, detail=detail)
        recorder = runtime._recorder
        together = recorder is not None and session_audit_role(runtime.store) is not None
        if recorder is not None and together:
            recorder.add_unflushed(event)
        try:
            await self.save()
        except BaseException:
            if recorder is not None and together:
                recorder.forget(event)
            raise
        runtime._keep_warm(session)
        pending = runtime.announce(event, recorded=together)
        if pending is not None:
            await pending

    async def suspend(self) -> None:
        """Leave the session for a person: suspended, its lease released."""
        await self.end("suspended" if self.session.pending else "completed")

    async def close(self) -> None:
        """End the session's run: suspended if calls wait for a person, else completed."""
        await self.suspend()

    async def pending_requests(self) -> tuple[ApprovalRequest, ...]:
        found = [await self.runtime.store.get_approval(rid)
                 for rid in self.session.pending.values()]
        return tuple(f.request for f in found if f is not None)

    async def emit(self, type: EventType, **fields: Any) -> None:
        """Give the listeners an event of *type* in this session (built only if one takes
        that kind)."""
        pending = self.announce(type, **fields)
        if pending is not None:
            await pending

    def announce(self, type: EventType, **fields: Any) -> Awaitable[None] | None:
        """:meth:`emit` without a coroutine: what is left to await, or ``None``."""
        runtime = self.runtime
        if type not in runtime._router.kinds:
            return None
        session = self.session
        return runtime._router(HostEvent(type, session.id, session.turn, session.principal.id,
                                       **fields))


def _as_handler(fn: Callable[..., Any]) -> Handler:
    wants_context = len(inspect.signature(fn).parameters) >= 2

    async def handler(arguments: dict[str, Any], context: ToolContext) -> Any:
        value = fn(arguments, context) if wants_context else fn(arguments)
        if inspect.isawaitable(value):
            value = await value
        return value

    return handler


class SyncRuntime:
    """:class:`Runtime` for synchronous code: an event loop in a worker thread for its life.

    Example:
        >>> with Runtime().sync() as runtime:  # doctest: +SKIP
        ...     session = runtime.open("alice")
    """

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._portal: anyio.from_thread.BlockingPortal | None = None
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> SyncRuntime:
        try:
            import asyncio

            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise UserError("Runtime.sync() was used inside a running event loop: use the "
                            "async API instead")
        self._portal = self._stack.enter_context(anyio.from_thread.start_blocking_portal())
        return self

    def __exit__(self, *exc: object) -> None:
        portal = self._portal
        if portal is not None:
            with contextlib.suppress(Exception):
                portal.call(self.runtime.flush)
        self._stack.close()
        self._portal = None

    def _call(self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        if self._portal is None:
            raise UserError("use the synchronous runtime inside `with runtime.sync() as …:`")
        return self._portal.call(functools.partial(fn, *args, **kwargs))

    def open(self, principal: Principal | str = "user", session_id: str | None = None,
             **kwargs: Any) -> SyncSession:
        return SyncSession(self, self._call(self.runtime.open, principal, session_id, **kwargs))

    def resume(self, session_id: str, *, force: bool = False) -> SyncSession:
        return SyncSession(self, self._call(self.runtime.resume, session_id, force=force))


class SyncSession:
    """:class:`GatedSession` for synchronous code (see :class:`SyncRuntime`)."""

    def __init__(self, runtime: SyncRuntime, session: GatedSession) -> None:
        self._runtime = runtime
        self.gated = session

    @property
    def id(self) -> str:
        return self.gated.id

    @property
    def pending(self) -> Mapping[str, str]:
        return self.gated.pending

    def add_user_text(self, text: str) -> None:
        self.gated.add_user_text(text)

    def submit(self, name: str, arguments: str | Mapping[str, Any] | None = None,
               call_id: str | None = None, *,
               execute: Callable[..., Any] | None = None) -> Submission:
        return self._runtime._call(self.gated.submit, name, arguments, call_id,
                                   execute=execute)

    def report_result(self, name: str, content: str, *,
                      provenance: Provenance | str = Provenance.UNTRUSTED) -> None:
        self._runtime._call(self.gated.report_result, name, content, provenance=provenance)

    def close(self) -> None:
        self._runtime._call(self.gated.close)

