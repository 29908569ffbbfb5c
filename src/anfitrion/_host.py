"""The host: the tool-use loop, and sessions that suspend and resume.

Example:
    >>> from anfitrion import Host, Toolbox, Effect, ScriptedModel
    >>> from anfitrion.models._scripted import call
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
import contextlib
import logging
import re
from collections.abc import (
    Awaitable,
    Callable,
    Coroutine,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

import anyio

from ._approvals import ApprovalRequest, Approver, make_visible
from ._conversation import Reply, Text, ToolResult, Transcript, Usage
from ._events import EventType, Listener
from ._gate import CallOutcome, Gate, GateLimits
from ._principal import Principal
from ._runtime import DEFAULT_LEASE_SECONDS, GatedSession, Runtime
from ._tools import Effect, Tool, ToolSource
from .exceptions import ConflictError, ModelError, UserError
from .models import Model, ModelRequest
from .policy import Policy
from .store import AuditRecord, Store

__all__ = ["CallRecord", "Host", "RunResult", "RunStatus", "StopSignal", "audit_outcomes",
           "call_outcome", "unperformed_note"]

log = logging.getLogger("anfitrion.host")

DEFAULT_MAX_TOOL_CALLS = 500
"""Executed tool calls a host session may make unless told otherwise."""
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
    effect: str | None = None
    """The tool's effect (``read``, ``write``), when the tool was known."""
    detail: str = ""
    """What the model was told of a refusal or a failure (the host's words), else ``""``."""

    @classmethod
    def of(cls, outcome: CallOutcome, tool: Tool | None = None) -> CallRecord:
        d, r = outcome.decision, outcome.result
        detail = r.content[:300] if r is not None and r.is_error else ""
        return cls(outcome.call.id, outcome.call.name, outcome.stage,
                   d.verdict.value if d else None, d.reason if d else None,
                   d.rule_id if d else None, r.is_error if r else None,
                   r.error_kind if r else None, tool.effect.value if tool else None, detail)

    @property
    def outcome(self) -> str:
        """What became of the call, by the gate (never by the model): see
        :func:`call_outcome`."""
        return call_outcome(self.stage, self.is_error, self.error_kind)


def call_outcome(stage: str, is_error: bool | None, error_kind: str | None) -> str:
    """``executed`` (ran and succeeded), ``failed`` (ran and reported an error), ``unknown``
    (may or may not have happened: a person resolves it), ``waiting`` (no result: a person
    answers first) or ``refused`` (not run) — from the stage a call left the gate at and its
    result."""
    if is_error is None:
        return "waiting"
    if error_kind == "outcome_unknown":
        return "unknown"
    if stage == "execute":
        return "failed" if is_error else "executed"
    return "refused"


def audit_outcomes(records: Sequence[AuditRecord]) -> list[dict[str, str]]:
    """The outcome of each call of a session, from its audit records (``call.proposed``,
    ``approval.requested``, ``result.returned``): what the inbox's session page shows. A call
    proposed with no result and no approval asked has not settled: ``unknown``."""
    calls: dict[str, dict[str, str]] = {}
    for record in records:
        data = record.data
        call_id = str(data.get("call_id") or "")
        if not call_id:
            continue
        row = calls.setdefault(call_id, {"call_id": call_id, "tool": str(data.get("tool", "")),
                                         "outcome": "unknown", "why": ""})
        if record.type == "approval.requested" and row["outcome"] == "unknown":
            row["outcome"] = "waiting"
        elif record.type == "result.returned":
            result = data.get("result")
            result = result if isinstance(result, dict) else {}
            is_error = result.get("is_error")
            row["outcome"] = call_outcome(str(data.get("status", "")), bool(is_error),
                                          result.get("error_kind"))
            row["why"] = str(result.get("preview", ""))[:160] if is_error else ""
    return list(calls.values())


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

    def report(self) -> str:
        """The run's outcome report, one line per call, from the gate's records of this run
        (the same outcomes its ledger and audit hold), never from the model's words;
        ``""`` when the run made no call."""
        lines = []
        for record in self.calls:
            why = record.detail or record.reason or ""
            why = make_visible(" ".join(why.split())[:160])
            lines.append(f"  {record.outcome:<8} {make_visible(record.tool)} "
                         f"({make_visible(record.call_id)})"
                         + (f": {why}" if why and record.outcome != "executed" else ""))
        return "host report (what ran, by the gate):\n" + "\n".join(lines) if lines else ""


class StopSignal:
    """Ask a running session to stop at the next turn or call boundary."""

    def __init__(self) -> None:
        self._stopped = False

    def stop(self) -> None:
        self._stopped = True

    @property
    def stopped(self) -> bool:
        return self._stopped


class Host:
    """Runs the tool-use loop for any model, putting every call through the gate.

    The host is one door of the session runtime (:class:`~anfitrion._runtime.Runtime`): the
    gate, the policy, the store and the audit log are assembled there, once, and the MCP
    gateway and embedders use the same assembly.

    Args:
        model: the model (a provider adapter, or :class:`ScriptedModel`), or a model string
            for :func:`~anfitrion.models._registry.resolve_model` (``"openai:gpt-4o"``).
        tools: a :class:`Toolbox` or any :class:`ToolSource`.
        policy: defaults to :meth:`Policy.default` (read → allow, write → ask).
        approver: who answers ``ask``; defaults to deny-all. A
            :class:`~anfitrion._approvals.DeferredApprover` suspends the session instead.
        store: a :class:`Store` or a URL (``memory://`` default, ``sqlite:///file.db``,
            ``postgresql://…``).
        instructions: the system prompt.
        max_turns: model requests per run before ``turn_limit``.
        max_tool_calls: executed tool calls per session before ``budget_exhausted``
            (default 500; None: no cap). One reply's calls are capped too
            (``GateLimits.max_calls_per_reply``, 32).
        listeners: callables receiving every :class:`HostEvent`.
        limits: bounds on arguments and invalid-call retries.
        audit: record redacted, hash-chained audit events in the store.
        app: recorded in each new session — who may resume it: an import reference
            (``"myapp.agent:host"``) that ``anfitrion resume --app`` loads, or a name.
        lease_seconds: how long a run's lease on its session holds unless renewed.
        runtime: an assembled :class:`~anfitrion._runtime.Runtime` to run on instead of
            building one from the arguments above.
        shadow_policy: a policy evaluated beside *policy* and recorded, never enforced
            (see :class:`~anfitrion._runtime.Runtime`).
        note_unperformed: append a one-line host note to the final text when it claims an
            action ("sent", "done", …) while a write of this run did not succeed and no call of
            that tool succeeded (see :func:`unperformed_note`).
    """

    def __init__(self, model: Model | str, tools: ToolSource | Iterable[Tool] | None = None, *,
                 policy: Policy | None = None, approver: Approver | None = None,
                 store: Store | str | None = None, instructions: str | None = None,
                 max_turns: int = 10, max_tool_calls: int | None = DEFAULT_MAX_TOOL_CALLS,
                 listeners: Sequence[Listener] = (), limits: GateLimits | None = None,
                 audit: bool = True, app: str | None = None,
                 lease_seconds: float = DEFAULT_LEASE_SECONDS,
                 runtime: Runtime | None = None, shadow_policy: Policy | None = None,
                 note_unperformed: bool = False) -> None:
        if max_turns < 1:
            raise UserError("max_turns must be at least 1")
        from .models import as_model  # model strings; refuses None and the like

        self.model: Model = as_model(model)
        self.runtime = runtime or Runtime(
            tools, policy=policy, approver=approver, store=store, listeners=listeners,
            limits=limits, audit=audit, max_tool_calls=max_tool_calls,
            lease_seconds=lease_seconds, app=app, shadow_policy=shadow_policy)
        self.instructions = instructions
        self.max_turns = max_turns
        self.note_unperformed = note_unperformed
        self._active: set[StopSignal] = set()

    @property
    def tools(self) -> ToolSource:
        return self.runtime.tools

    @property
    def policy(self) -> Policy:
        return self.runtime.policy

    @property
    def approver(self) -> Approver:
        return self.runtime.approver

    @property
    def store(self) -> Store:
        return self.runtime.store

    @property
    def gate(self) -> Gate:
        return self.runtime.gate

    @property
    def max_tool_calls(self) -> int | None:
        return self.runtime.max_tool_calls

    def add_listener(self, listener: Listener) -> None:
        self.runtime.add_listener(listener)

    def stop(self) -> None:
        """Stop every run of this host at its next turn or call boundary."""
        for signal in list(self._active):
            signal.stop()

    # -- public entry points -----------------------------------------------------------------

    async def run(self, prompt: str, *, principal: Principal | str = "user",
                  session_id: str | None = None, stop: StopSignal | None = None,
                  plan: Iterable[str] | None = None) -> RunResult:
        """Run the loop for *prompt* until text, a limit, a stop or a pending approval.

        With *session_id* of a stored, finished session, the conversation continues.

        *plan*: tool-name globs the application fixes for this session before the model
        answers: under the taint rule's ``plan = "before-taint"`` the plan (the tools the
        model proposes before any untrusted content) holds only tools matching them, and
        a later ``plan`` narrows it further, never widens it (stored with the session).

        Raises:
            UserError: the session exists for another principal, or waits for an approval.
            ConflictError: the session is running in another process.
        """
        if isinstance(plan, str):
            raise UserError("plan: give a list of tool-name globs, not one string")
        globs = None if plan is None else tuple(str(g) for g in plan)
        try:
            gated = await self.runtime.open(principal, session_id)
        except ConflictError as exc:
            raise UserError(f"session {session_id!r} is running in another process (or its "
                            f"process died: resume it with force=True): {exc}") from exc
        if globs is not None:
            gated.session.narrow_plan(globs)
        gated.add_user_text(prompt)
        await gated.emit(EventType.RUN_STARTED, detail=f"prompt of {len(prompt)} characters")
        return await self._loop(gated, stop or StopSignal(), resume_calls=False)

    async def resume(self, session_id: str, *, stop: StopSignal | None = None,
                     force: bool = False, lease_from: str | None = None) -> RunResult:
        """Continue a suspended session (in this or any other process).

        *lease_from*: the lease owner that :meth:`Store.claim_resumable` leased the session
        to, for this host to continue it (``anfitrion resume --ready``).

        Raises:
            SessionNotFound: no such session.
            ConflictError: another worker is resuming it right now.
            UserError: the session is not suspended (unless *force*).
        """
        gated = await self.runtime.resume(session_id, force=force, lease_from=lease_from)
        await gated.emit(EventType.RUN_RESUMED)
        return await self._loop(gated, stop or StopSignal(), resume_calls=True)

    def run_sync(self, prompt: str, **kwargs: Any) -> RunResult:
        """:meth:`run` for synchronous code. Refuses to run inside a live event loop."""
        return _run_sync(lambda: self.run(prompt, **kwargs))

    def resume_sync(self, session_id: str, **kwargs: Any) -> RunResult:
        """:meth:`resume` for synchronous code."""
        return _run_sync(lambda: self.resume(session_id, **kwargs))

    # -- the loop ----------------------------------------------------------------------------

    async def _loop(self, gated: GatedSession, stop: StopSignal, *,
                    resume_calls: bool) -> RunResult:
        self._active.add(stop)
        try:
            with _lease_kept(gated):
                return await self._turns(gated, stop, resume_calls)
        finally:
            self._active.discard(stop)

    async def _turns(self, gated: GatedSession, stop: StopSignal,
                     resume_calls: bool) -> RunResult:
        session = gated.session
        records: list[CallRecord] = []
        usage = Usage()
        turns = 0
        if resume_calls:
            last = session.last_reply()
            if last is not None and last.tool_calls:
                offered = await self.runtime.offered(session)
                ended = await self._run_calls(gated, last, offered, records, stop)
                if ended is not None:
                    return await self._end(gated, ended, records, usage)
        # per turn: no event is built for nobody, and none awaited for a listener that
        # returns nothing to wait for
        requested = self.runtime.wants(EventType.MODEL_REQUESTED)
        replied = self.runtime.wants(EventType.MODEL_REPLIED)
        while True:
            if stop.stopped:
                return await self._end(gated, RunStatus.STOPPED, records, usage)
            if turns >= self.max_turns:
                return await self._end(gated, RunStatus.TURN_LIMIT, records, usage)
            offered = await self.runtime.offered(session)
            request = ModelRequest(session.transcript, tuple(t.definition for t in
                                                              offered.values()),
                                   self.instructions)
            if requested and (pending := gated.announce(EventType.MODEL_REQUESTED)) is not None:
                await pending
            try:
                reply = await self.model.respond(request)
            except ModelError as exc:
                return await self._end(gated, RunStatus.FAILED, records, usage,
                                       f"model error: {exc}")
            turns += 1
            session.begin_turn()
            usage = usage + reply.usage
            problem = _reply_problem(reply, session.used_call_id)
            if problem:
                return await self._end(gated, RunStatus.FAILED, records, usage, problem)
            session.add(reply)
            if replied and \
                    (pending := gated.announce(EventType.MODEL_REPLIED, reply=reply)) is not None:
                await pending
            calls = reply.tool_calls
            if not calls:
                note = unperformed_note(reply.text, records) if self.note_unperformed else None
                return await self._end(gated, RunStatus.COMPLETED, records, usage,
                                       output=f"{reply.text}\n\n{note}" if note else reply.text)
            if any(t is not None and t.effect is Effect.WRITE
                   for t in (offered.get(c.name) for c in calls)):
                # checkpoint before a side effect: a crash from here on leaves a session whose
                # lease lapses, and `resume --ready` continues it, the ledger answering for
                # calls already claimed. Turns of reads only are not checkpointed.
                await gated.save()
            ended = await self._run_calls(gated, reply, offered, records, stop)
            if ended is not None:
                return await self._end(gated, ended, records, usage)

    async def _run_calls(self, gated: GatedSession, reply: Reply, offered: Mapping[str, Tool],
                         records: list[CallRecord], stop: StopSignal) -> RunStatus | None:
        """Gate every call of *reply*; append the results when all are settled.

        Returns a status when the run must end (suspended, stopped, budget), else None.
        """
        session = gated.session
        exhausted = False
        calls = reply.tool_calls
        cap = self.runtime.gate.limits.max_calls_per_reply
        for index, tool_call in enumerate(calls):
            if session.settled(tool_call.id) is not None:
                continue
            if stop.stopped:
                return RunStatus.STOPPED
            if index >= cap:  # a reply fanning out to hundreds of calls: the rest never run
                session.record_result(ToolResult(
                    tool_call.id, tool_call.name, f"not run: at most {cap} tool calls of one "
                    f"reply are run, and this reply had {len(calls)}; propose fewer at a time",
                    is_error=True, error_kind="too_many_calls"), executed=False)
                continue
            outcome = await gated.process(tool_call, offered)
            if outcome.stage != "budget":
                records.append(CallRecord.of(outcome, offered.get(tool_call.name)))
            exhausted = exhausted or outcome.exhausted
        if session.pending:
            return RunStatus.SUSPENDED
        session.close_turn(calls)
        return RunStatus.BUDGET_EXHAUSTED if exhausted else None

    async def _end(self, gated: GatedSession, status: RunStatus, records: list[CallRecord],
                   usage: Usage, error: str | None = None, output: str = "") -> RunResult:
        session = gated.session
        pending: tuple[ApprovalRequest, ...] = ()
        if status is RunStatus.SUSPENDED:
            pending = await gated.pending_requests()
        if status is RunStatus.BUDGET_EXHAUSTED and error is None:
            error = "a budget ran out (tool calls or invalid-call retries)"
        try:
            await gated.end(status.value, detail=error, announce=True)  # and run.ended
        except ConflictError:
            log.warning("session %s was changed by another worker; this run's state is not "
                        "saved", session.id)
            raise
        await self.runtime.flush()
        return RunResult(session.id, status, output, session.transcript, tuple(records),
                         pending, usage, error)


_CLAIMED = re.compile(
    r"(?<!not )(?<!n't )(?<!never )\b(sent|done|created|deleted|removed|scheduled|booked|paid|"
    r"transferred|posted|published|saved|updated|submitted|notified|forwarded|e-?mailed|"
    r"completed|executed|cancell?ed|ordered|uploaded|moved|renamed|written|wrote|added)\b",
    re.IGNORECASE)


def unperformed_note(text: str, calls: Sequence[CallRecord]) -> str | None:
    """A one-line host note when *text* claims an action that did not happen, else ``None``.

    Conservative: only when the text says something was done (a completion word not right
    after "not", "n't", "never") and a write of this run was refused, failed, waits or has
    an unknown outcome, with no call of that tool executed this run.
    """
    succeeded = {c.tool for c in calls if c.outcome == "executed"}
    missed = {c.tool: c.outcome for c in calls
              if c.effect != Effect.READ.value and c.outcome != "executed"
              and c.tool not in succeeded}
    if not missed or not _CLAIMED.search(text):
        return None
    said = ", ".join(f"{tool} {outcome}" for tool, outcome in missed.items())
    return f"[anfitrion: whatever the answer above says, this turn: {said}]"


def _reply_problem(reply: Reply, used: Callable[[str], bool]) -> str | None:
    if not reply.parts:
        return "the model sent an empty reply"
    seen: set[str] = set()
    for tool_call in reply.tool_calls:
        if not isinstance(tool_call.id, str) or not tool_call.id:
            return "the model sent a tool call without an id"
        if tool_call.id in seen:
            return f"the model sent two tool calls with the id {tool_call.id!r}; none was run"
        if used(tool_call.id):
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


@contextlib.contextmanager
def _lease_kept(gated: GatedSession) -> Iterator[None]:
    """Renew *gated*'s lease while the block runs, every third of the lease.

    A timer, not a task: most runs end before the first renewal is due, and a task group
    around every run cost a third of a short conversation. The renewing task starts only when
    a run outlives a third of its lease, and is cancelled when the block ends."""
    loop = asyncio.get_running_loop()
    tasks: list[asyncio.Task[None]] = []

    async def renew_and_keep() -> None:
        await gated.renew()
        await gated.keep_lease()

    def start() -> None:
        # the coroutine is made when the task first runs: a task cancelled before it started
        # (the block ended just after the timer fired) leaves no coroutine never awaited
        tasks.append(loop.create_task(_quietly(renew_and_keep)))

    timer = loop.call_later(gated.runtime.lease_seconds / 3, start)
    try:
        yield
    finally:
        timer.cancel()
        for task in tasks:
            task.cancel()


async def _quietly(background: Callable[[], Coroutine[Any, Any, None]]) -> None:
    try:
        await background()
    # BLE001 - a background task's top: a failed lease renewal is logged; fencing holds
    except Exception:
        log.exception("lease renewal failed")


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

