"""The host: the tool-use loop, and sessions that suspend and resume.

Example:
    >>> from anfitrion import Host, Toolbox, Effect, ScriptedModel
    >>> from anfitrion.models.scripted import call
    >>> tools = Toolbox()
    >>> @tools.tool(effect=Effect.READ, provenance="trusted")
    ... def get_weather(location: str) -> dict:
    ...     '''Get the current weather for a given location.'''
    ...     return {"location": location, "temp_c": 15}
    >>> model = ScriptedModel([call("get_weather", {"location": "Lisboa, PT"}), "15 °C."])
    >>> run = Host(model=model, tools=tools).run_sync("Weather in Lisboa?", principal="alice")
    >>> run.status, run.output
    (<RunStatus.COMPLETED: 'completed'>, '15 °C.')
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

import anyio

from .approvals import ApprovalRequest, Approver, DenyAllApprover
from .audit import AuditRecorder
from .conversation import (
    Message,
    Reply,
    Text,
    ToolResult,
    Transcript,
    Usage,
    UserMessage,
    dump_messages,
    load_messages,
    message_to_dict,
)
from .events import EventType, HostEvent, Listener, dispatch
from .exceptions import ConflictError, ModelError, SessionNotFound, UserError
from .gate import CallOutcome, CallScope, Gate, GateLimits, _silent
from .models._base import Model, ModelRequest
from .policy import Policy
from .principal import Principal
from .store import SessionState, Store, open_store
from .taint import TaintIndex
from .tools import Effect, OfferContext, Tool, Toolbox, ToolSource

__all__ = ["CallRecord", "Host", "RunResult", "RunStatus", "StopSignal"]

log = logging.getLogger("anfitrion.host")
T = TypeVar("T")


class RunStatus(StrEnum):
    COMPLETED = "completed"
    """The model answered in plain text."""
    SUSPENDED = "suspended"
    """A call waits for a person; resume the session after the answer."""
    TURN_LIMIT = "turn_limit"
    """The host reached ``max_turns`` model requests in this run."""
    BUDGET_EXHAUSTED = "budget_exhausted"
    """A budget ran out (tool calls, invalid-call retries)."""
    STOPPED = "stopped"
    """The host was asked to stop."""
    FAILED = "failed"
    """The model failed or sent a reply the host cannot accept; ``error`` says why."""


@dataclass(frozen=True, slots=True)
class CallRecord:
    """What the host decided and did for one call."""

    call_id: str
    tool: str
    stage: str
    verdict: str | None
    reason: str | None
    rule_id: str | None
    is_error: bool | None
    error_kind: str | None

    @classmethod
    def of(cls, outcome: CallOutcome) -> CallRecord:
        d, r = outcome.decision, outcome.result
        return cls(outcome.call.id, outcome.call.name, outcome.stage,
                   d.verdict.value if d else None, d.reason if d else None,
                   d.rule_id if d else None, r.is_error if r else None,
                   r.error_kind if r else None)


@dataclass(frozen=True, slots=True)
class RunResult:
    """How a run ended.

    Attributes:
        status: see :class:`RunStatus`.
        output: the final text of the model (empty unless completed).
        transcript: the whole conversation of the session.
        calls: what the gate decided for each call of this run.
        pending: approval requests waiting for a person (when suspended).
        usage: tokens consumed in this run.
        error: why the run failed, for ``failed`` and ``budget_exhausted``.
    """

    session_id: str
    status: RunStatus
    output: str
    transcript: Transcript
    calls: tuple[CallRecord, ...] = ()
    pending: tuple[ApprovalRequest, ...] = ()
    usage: Usage = field(default_factory=Usage)
    error: str | None = None


class StopSignal:
    """Ask a running session to stop at the next turn or call boundary."""

    def __init__(self) -> None:
        self._stopped = False

    def stop(self) -> None:
        self._stopped = True

    @property
    def stopped(self) -> bool:
        return self._stopped


@dataclass
class _Session:
    """The mutable state of one session; persisted as plain data."""

    id: str
    principal: Principal
    transcript: Transcript
    status: str = "running"
    turn: int = 0
    counters: dict[str, int] = field(default_factory=dict)
    invalid_by_tool: dict[str, int] = field(default_factory=dict)
    recent_calls: list[tuple[str, str]] = field(default_factory=list)
    untrusted_sources: list[str] = field(default_factory=list)
    pending: dict[str, str] = field(default_factory=dict)  # call id -> approval request id
    settled: dict[str, ToolResult] = field(default_factory=dict)  # results of the open turn
    version: int = 0
    # the transcript as plain data, built one message at a time, and how much the store holds
    dumped: list[dict[str, Any]] = field(default_factory=list)
    saved_messages: int = 0
    call_ids: set[str] = field(default_factory=set)  # every tool call id of the session
    taint: TaintIndex = field(default_factory=TaintIndex)  # rebuilt on load, never stored

    def add(self, message: Message) -> None:
        """Append to the transcript; the message is serialised once, here."""
        self.transcript.append(message)
        self.dumped.append(message_to_dict(message))
        if isinstance(message, Reply):
            self.call_ids.update(c.id for c in message.tool_calls)

    def to_state(self) -> SessionState:
        data = {
            "principal": self.principal.to_dict(), "turn": self.turn,
            "counters": self.counters, "invalid_by_tool": self.invalid_by_tool,
            "recent_calls": [list(c) for c in self.recent_calls],
            "untrusted_sources": self.untrusted_sources, "pending": self.pending,
            "settled": dump_messages([UserMessage(tuple(self.settled.values()))])[0]["parts"],
        }
        return SessionState(self.id, self.principal.id, self.status, data, self.version,
                            messages=self.dumped, saved_messages=self.saved_messages)

    def saved(self, state: SessionState) -> None:
        self.version = state.version
        self.saved_messages = state.saved_messages

    @classmethod
    def from_state(cls, state: SessionState) -> _Session:
        d = state.data
        settled_msg = load_messages([{"kind": "user", "parts": d.get("settled", [])}])[0]
        dumped = [dict(m) for m in state.messages]
        settled = {p.call_id: p for p in settled_msg.parts if isinstance(p, ToolResult)}
        transcript = Transcript(load_messages(dumped))
        return cls(
            id=state.session_id, principal=Principal.from_dict(d["principal"]),
            transcript=transcript, status=state.status,
            turn=int(d.get("turn", 0)), counters=dict(d.get("counters", {})),
            invalid_by_tool=dict(d.get("invalid_by_tool", {})),
            recent_calls=[(str(a), str(b)) for a, b in d.get("recent_calls", [])],
            untrusted_sources=list(d.get("untrusted_sources", [])),
            pending=dict(d.get("pending", {})),
            settled=settled, version=state.version, dumped=dumped,
            saved_messages=state.saved_messages,
            call_ids={c.id for m in transcript if isinstance(m, Reply) for c in m.tool_calls},
            taint=TaintIndex.from_messages(transcript, settled.values(),
                                           turn=int(d.get("turn", 0))))


class Host:
    """Runs the tool-use loop for any model, putting every call through the gate.

    Args:
        model: the model (a provider adapter, or :class:`ScriptedModel`), or a model string
            for :func:`~anfitrion.models.registry.resolve_model` (``"openai:gpt-4o"``).
        tools: a :class:`Toolbox` or any :class:`ToolSource`.
        policy: defaults to :meth:`Policy.default` (read → allow, write → ask).
        approver: who answers ``ask``; defaults to deny-all. A
            :class:`~anfitrion.approvals.DeferredApprover` suspends the session instead.
        store: a :class:`Store` or a URL (``memory://`` default, ``sqlite:///file.db``,
            ``postgresql://…``).
        instructions: the system prompt.
        max_turns: model requests per run before ``turn_limit``.
        max_tool_calls: tool calls per session before ``budget_exhausted`` (None: no cap).
        listeners: callables receiving every :class:`HostEvent`.
        limits: bounds on arguments and invalid-call retries.
        audit: record redacted, hash-chained audit events in the store.
    """

    def __init__(self, model: Model | str, tools: ToolSource | Iterable[Tool] | None = None, *,
                 policy: Policy | None = None, approver: Approver | None = None,
                 store: Store | str | None = None, instructions: str | None = None,
                 max_turns: int = 10, max_tool_calls: int | None = None,
                 listeners: Sequence[Listener] = (), limits: GateLimits | None = None,
                 audit: bool = True) -> None:
        if max_turns < 1:
            raise UserError("max_turns must be at least 1")
        from .models.registry import as_model  # model strings; refuses None and the like

        self.model: Model = as_model(model)
        if tools is None:
            tools = Toolbox()
        elif not isinstance(tools, ToolSource):
            tools = Toolbox(tools)
        self.tools: ToolSource = tools
        self.policy = policy or Policy.default()
        self.approver: Approver = approver or DenyAllApprover()
        self.store: Store = open_store(store)
        self.instructions = instructions
        self.max_turns = max_turns
        self.max_tool_calls = max_tool_calls
        self._listeners: list[Listener] = []
        if audit:
            self._recorder: AuditRecorder | None = AuditRecorder(self.store)
            self._listeners.append(self._recorder)
        else:
            self._recorder = None
        self._listeners.extend(listeners)
        # the gate hands its events straight to the listeners (one coroutine less per event)
        self.gate = Gate(policy=self.policy, approver=self.approver, store=self.store,
                         emit=functools.partial(dispatch, self._listeners) if self._listeners
                         else _silent, limits=limits)
        self._active: set[StopSignal] = set()

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)
        self.gate.emit = functools.partial(dispatch, self._listeners)

    async def _emit(self, event: HostEvent) -> None:
        await dispatch(self._listeners, event)

    def stop(self) -> None:
        """Stop every run of this host at its next turn or call boundary."""
        for signal in list(self._active):
            signal.stop()

    # -- public entry points -----------------------------------------------------------------

    async def run(self, prompt: str, *, principal: Principal | str = "user",
                  session_id: str | None = None, stop: StopSignal | None = None) -> RunResult:
        """Run the loop for *prompt* until text, a limit, a stop or a pending approval.

        With *session_id* of a stored, finished session, the conversation continues.

        Raises:
            UserError: the session exists for another principal, or waits for an approval.
        """
        who = Principal.of(principal)
        if session_id is not None and (state := await self.store.load_session(session_id)):
            session = _Session.from_state(state)
            if session.principal.id != who.id:
                raise UserError(f"session {session_id!r} belongs to another principal")
            if session.pending:
                raise UserError(f"session {session_id!r} waits for an approval: resume it")
            if session.status == "running":
                raise UserError(f"session {session_id!r} is running in another process (or "
                                "its process died: resume it with force=True)")
        else:
            session = _Session(session_id or uuid.uuid4().hex, who, Transcript())
        session.add(UserMessage((Text(prompt),)))
        session.taint.add_principal_text(prompt)
        await self._emit(HostEvent(EventType.RUN_STARTED, session.id, session.turn, who.id,
                                   detail=f"prompt of {len(prompt)} characters"))
        return await self._loop(session, stop or StopSignal(), resume_calls=False)

    async def resume(self, session_id: str, *, stop: StopSignal | None = None,
                     force: bool = False) -> RunResult:
        """Continue a suspended session (in this or any other process).

        Raises:
            SessionNotFound: no such session.
            ConflictError: another worker is resuming it right now.
            UserError: the session is not suspended (unless *force*).
        """
        state = await self.store.load_session(session_id)
        if state is None:
            raise SessionNotFound(session_id)
        if state.status != RunStatus.SUSPENDED and not force:
            raise UserError(f"session {session_id!r} is {state.status}, not suspended")
        session = _Session.from_state(state)
        session.status = "running"
        # the lease: a compare-and-set on the version
        session.saved(await self.store.save_session(session.to_state()))
        await self._emit(HostEvent(EventType.RUN_RESUMED, session.id, session.turn,
                                   session.principal.id))
        return await self._loop(session, stop or StopSignal(), resume_calls=True)

    def run_sync(self, prompt: str, **kwargs: Any) -> RunResult:
        """:meth:`run` for synchronous code. Refuses to run inside a live event loop."""
        return _run_sync(lambda: self.run(prompt, **kwargs))

    def resume_sync(self, session_id: str, **kwargs: Any) -> RunResult:
        """:meth:`resume` for synchronous code."""
        return _run_sync(lambda: self.resume(session_id, **kwargs))

    # -- the loop ----------------------------------------------------------------------------

    async def _loop(self, session: _Session, stop: StopSignal, *,
                    resume_calls: bool) -> RunResult:
        self._active.add(stop)
        records: list[CallRecord] = []
        usage = Usage()
        turns = 0
        try:
            if resume_calls:
                last = session.transcript[-1] if len(session.transcript) else None
                if isinstance(last, Reply) and last.tool_calls:
                    offered = await self._offered(session)
                    ended = await self._run_calls(session, last, offered, records, stop)
                    if ended is not None:
                        return await self._end(session, ended, records, usage)
            while True:
                if stop.stopped:
                    return await self._end(session, RunStatus.STOPPED, records, usage)
                if turns >= self.max_turns:
                    return await self._end(session, RunStatus.TURN_LIMIT, records, usage)
                offered = await self._offered(session)
                request = ModelRequest(session.transcript, tuple(t.definition for t in
                                                                  offered.values()),
                                       self.instructions)
                if self._listeners:  # per turn: no event is built for nobody
                    await self._emit(HostEvent(EventType.MODEL_REQUESTED, session.id,
                                               session.turn, session.principal.id))
                try:
                    reply = await self.model.respond(request)
                except ModelError as exc:
                    return await self._end(session, RunStatus.FAILED, records, usage,
                                           f"model error: {exc}")
                turns += 1
                session.turn += 1
                usage = usage + reply.usage
                problem = _reply_problem(reply, session.call_ids)
                if problem:
                    return await self._end(session, RunStatus.FAILED, records, usage, problem)
                session.add(reply)
                if self._listeners:
                    await self._emit(HostEvent(EventType.MODEL_REPLIED, session.id,
                                               session.turn, session.principal.id, reply=reply))
                calls = reply.tool_calls
                if not calls:
                    return await self._end(session, RunStatus.COMPLETED, records, usage,
                                           output=reply.text)
                if any(t is not None and t.effect is Effect.WRITE
                       for t in (offered.get(c.name) for c in calls)):
                    # checkpoint before a side effect: a crash from here on leaves a session
                    # that `resume --force` continues, the ledger answering for calls already
                    # claimed. Turns of reads only are not checkpointed: redoing them is safe.
                    session.status = "running"
                    session.saved(await self.store.save_session(session.to_state()))
                ended = await self._run_calls(session, reply, offered, records, stop)
                if ended is not None:
                    return await self._end(session, ended, records, usage)
        finally:
            self._active.discard(stop)

    async def _offered(self, session: _Session) -> dict[str, Tool]:
        context = OfferContext(session.principal, session.id, session.turn)
        tools = await self.tools.list_tools(context)
        offered = {t.name: t for t in tools if t.scopes <= session.principal.scopes}
        if self._recorder is not None:
            self._recorder.learn(offered.values())  # arguments it must never record
        return offered

    async def _run_calls(self, session: _Session, reply: Reply, offered: Mapping[str, Tool],
                         records: list[CallRecord], stop: StopSignal) -> RunStatus | None:
        """Gate every call of *reply*; append the results when all are settled.

        Returns a status when the run must end (suspended, stopped, budget), else None.
        """
        exhausted = False
        calls = reply.tool_calls
        for tool_call in calls:
            if tool_call.id in session.settled:
                continue
            if stop.stopped:
                return RunStatus.STOPPED
            if self.max_tool_calls is not None and \
                    session.counters.get("tool_calls", 0) >= self.max_tool_calls:
                session.settled[tool_call.id] = ToolResult(
                    tool_call.id, tool_call.name, "tool call budget exhausted; not run",
                    is_error=True, error_kind="budget_exhausted")
                exhausted = True
                continue
            scope = CallScope(session.principal, session.id, session.turn, session.counters,
                              session.invalid_by_tool, session.recent_calls,
                              session.untrusted_sources, session.pending.get(tool_call.id),
                              session.taint)
            outcome = await self.gate.process(tool_call, offered, scope)
            records.append(CallRecord.of(outcome))
            exhausted = exhausted or outcome.exhausted
            if outcome.result is None:
                assert outcome.request is not None
                session.pending[tool_call.id] = outcome.request.id
                continue
            session.pending.pop(tool_call.id, None)
            session.settled[tool_call.id] = outcome.result
            if outcome.stage == "execute":
                session.counters["tool_calls"] = session.counters.get("tool_calls", 0) + 1
            # taint only when third-party text arrived (not for the host's own error messages)
            if session.taint.add_result(outcome.result, session.turn) and \
                    tool_call.name not in session.untrusted_sources:
                session.untrusted_sources.append(tool_call.name)
        if session.pending:
            return RunStatus.SUSPENDED
        results = tuple(session.settled[c.id] for c in calls)
        session.add(UserMessage(results))
        session.settled.clear()
        return RunStatus.BUDGET_EXHAUSTED if exhausted else None

    async def _end(self, session: _Session, status: RunStatus, records: list[CallRecord],
                   usage: Usage, error: str | None = None, output: str = "") -> RunResult:
        session.status = status.value
        pending: tuple[ApprovalRequest, ...] = ()
        if status is RunStatus.SUSPENDED:
            found = [await self.store.get_approval(rid) for rid in session.pending.values()]
            pending = tuple(f[0] for f in found if f is not None)
        try:
            session.saved(await self.store.save_session(session.to_state()))
        except ConflictError:
            log.warning("session %s was changed by another worker; this run's state is not "
                        "saved", session.id)
            raise
        if status is RunStatus.BUDGET_EXHAUSTED and error is None:
            error = "a budget ran out (tool calls or invalid-call retries)"
        await self._emit(HostEvent(EventType.RUN_ENDED, session.id, session.turn,
                                   session.principal.id, status=status.value, detail=error))
        return RunResult(session.id, status, output, session.transcript, tuple(records),
                         pending, usage, error)


def _reply_problem(reply: Reply, used_ids: set[str]) -> str | None:
    if not reply.parts:
        return "the model sent an empty reply"
    seen: set[str] = set()
    for tool_call in reply.tool_calls:
        if not isinstance(tool_call.id, str) or not tool_call.id:
            return "the model sent a tool call without an id"
        if tool_call.id in seen:
            return f"the model sent two tool calls with the id {tool_call.id!r}; none was run"
        if tool_call.id in used_ids:
            # results pair by id, and the execution ledger is keyed by it: a reused id could
            # pass an earlier call's outcome off as this one's
            return (f"the model reused the tool call id {tool_call.id!r} of an earlier turn; "
                    "none was run")
        if not isinstance(tool_call.name, str) or not isinstance(tool_call.raw_arguments, str):
            return "the model sent a tool call whose name or arguments are not text"
        seen.add(tool_call.id)
    try:
        for part in reply.parts:
            if isinstance(part, Text):
                part.text.encode("utf-8")
            else:
                (part.id + part.name + part.raw_arguments).encode("utf-8")
    except UnicodeEncodeError:
        return "the model sent text that is not valid Unicode (an unpaired surrogate)"
    return None


def _run_sync(make: Callable[[], Awaitable[T]]) -> T:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise UserError("run_sync() was called inside a running event loop: await run() instead")

    async def main() -> T:
        return await make()

    return anyio.run(main)

