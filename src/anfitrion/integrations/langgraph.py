"""LangGraph behind anfitrion's gate: every tool call of a graph through one :class:`Runtime`.

:func:`gated_tools` describes the graph's LangChain tools to anfitrion (name, description, the
JSON schema the model sees, a declared effect and provenance); :class:`ToolGate` wraps each
tool call of a :class:`~langgraph.prebuilt.ToolNode` (``ToolNode(..., wrap_tool_call=...)``, or
:meth:`ToolGate.tool_node`) and submits it to the runtime's gate with the framework's own
handler as ``execute=``: resolve among the tools the graph offers, strict validation, policy,
approval bound to the call's digest, the execution ledger, shaping and audit.

A call that must wait for a person raises LangGraph's ``interrupt()`` carrying the approval
request (id, digest, description). The graph resumes with ``Command(resume=approve(value))``;
the answer is recorded through :func:`anfitrion._answers.answer` (``via="langgraph"``) bound to
the digest it names, so the same request can be answered in the inbox or the CLI instead, and
an answer for other arguments is refused. A resume value answers only the request its call
waits on in its thread: one naming another request (another thread's, another call's, one
answered before) is refused — nothing is recorded, and the call's next interrupt says why
(``refused``). One LangGraph thread is one anfitrion session (``langgraph-<thread_id>``):
taint and argument provenance carry across the graph's turns.

Example:
    >>> runtime = Runtime(gated_tools(tools, reads={"get_weather"}))  # doctest: +SKIP
    >>> builder.add_node("tools", ToolGate(runtime).tool_node(tools))  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from .. import _answers as answers
from .._conversation import Reply, Text, ToolResult, UserMessage
from .._json import parse_json_strict
from .._principal import Principal
from .._runtime import GatedSession, Runtime, Submission, SubmissionStatus
from .._session import Session
from .._tools import Effect, OfferContext, Tool
from ..exceptions import JsonError, MissingDependencyError, ToolError, UserError
from ._offered import belongs_to

try:
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langchain_core.tools import BaseTool
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from langgraph.errors import GraphBubbleUp
    from langgraph.prebuilt import ToolNode
    from langgraph.prebuilt.tool_node import ToolCallRequest, ToolRuntime
    from langgraph.types import Command, interrupt
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingDependencyError("langgraph", "langgraph") from exc

__all__ = ["APPROVAL", "LangChainTools", "ToolGate", "approval_value", "approve", "edit",
           "gated_tools", "reject", "ungated_tool_nodes"]

APPROVAL = "anfitrion.approval"
"""The ``type`` of the value an approval ``interrupt()`` carries."""

VIA = "langgraph"

SESSIONS_KEPT = 256
"""Sessions a gate keeps in memory between calls (taken again without reloading them when
nobody else changed them since)."""

# the tool names the graph offers to the call being gated (what resolve may find)
_AGENT_TOOLS: contextvars.ContextVar[frozenset[str] | None] = contextvars.ContextVar(
    "anfitrion_langgraph_tools", default=None)

Result = ToolMessage | Command[Any]


class LangChainTools:
    """A :class:`~anfitrion._tools.ToolSource` of LangChain tools, described for the gate.

    While the gate handles a call of a graph, only the tools that graph offers are offered
    (resolve is exact, by name); outside a graph, all of them. Build it with
    :func:`gated_tools`.
    """

    def __init__(self, tools: Iterable[Tool]) -> None:
        self._tools = {t.name: t for t in tools}

    def __iter__(self) -> Any:
        return iter(self._tools.values())

    async def list_tools(self, context: OfferContext) -> list[Tool]:
        offered = _AGENT_TOOLS.get()
        if offered is None:
            return list(self._tools.values())
        return [t for name, t in self._tools.items() if name in offered]


def _schema_of(tool: BaseTool) -> dict[str, Any]:
    parameters = convert_to_openai_tool(tool)["function"].get("parameters")
    schema = dict(parameters) if isinstance(parameters, Mapping) else {}
    schema.setdefault("type", "object")
    return schema


def gated_tools(tools: Sequence[BaseTool], *, reads: Collection[str] = (),
                trusted: Collection[str] = (), idempotent: Collection[str] = (),
                sensitive: Mapping[str, Collection[str]] | None = None) -> LangChainTools:
    """Describe LangChain tools for a :class:`Runtime`.

    Args:
        tools: the tools the agent or graph is given.
        reads: names of tools that only read (``Effect.READ``); every other tool is a write:
            it asks a person by default and runs through the execution ledger.
        trusted: names of tools whose results nobody else could have written; the results of
            every other tool are untrusted (taint).
        idempotent: tools safe to run again when a crash left their outcome unknown.
        sensitive: argument names per tool never written to the audit log.

    Raises:
        ToolDefinitionError: a tool name or schema anfitrion cannot gate.
    """
    sensitive = sensitive or {}
    described = []
    for lc_tool in tools:
        def run(arguments: dict[str, Any], _tool: BaseTool = lc_tool) -> Awaitable[Any]:
            # outside a graph (e.g. anfitrion's own host): run the LangChain tool directly
            return _tool.ainvoke(arguments)

        described.append(Tool.from_schema(
            lc_tool.name, _schema_of(lc_tool), run, description=lc_tool.description or "",
            effect=Effect.READ if lc_tool.name in reads else Effect.WRITE,
            provenance="trusted" if lc_tool.name in trusted else "untrusted",
            idempotent=lc_tool.name in idempotent,
            sensitive=frozenset(sensitive.get(lc_tool.name, ())),
            metadata={"langchain_tool": lc_tool}))
    return LangChainTools(described)


def ungated_tool_nodes(graph: Any) -> list[str]:
    """The names (``outer/inner`` in subgraphs) of the ``ToolNode`` s of *graph* whose calls do
    not go through a :class:`ToolGate`: a plain ``ToolNode`` runs its tools ungated and
    unaudited, whatever :func:`gated_tools` described. *graph*: a ``StateGraph`` or a compiled
    graph (its builder is read); other graphs (the functional API) cannot be inspected."""
    return _ungated(graph, "", set())


def _ungated(graph: Any, prefix: str, seen: set[int]) -> list[str]:
    builder = getattr(graph, "builder", graph)
    if id(builder) in seen:
        return []
    seen.add(id(builder))
    found: list[str] = []
    for name, spec in getattr(builder, "nodes", {}).items():
        runnable = getattr(spec, "runnable", spec)
        for candidate in (runnable, getattr(runnable, "bound", None)):
            if isinstance(candidate, ToolNode):
                if not _goes_through_a_gate(getattr(candidate, "_awrap_tool_call", None)):
                    found.append(f"{prefix}{name}")
                break
            if candidate is not None and hasattr(candidate, "builder"):  # a subgraph
                found.extend(_ungated(candidate, f"{prefix}{name}/", seen))
                break
    return found


def _goes_through_a_gate(wrapper: Any, depth: int = 0) -> bool:
    """Whether a tool node's wrapper is, or composes, a :class:`ToolGate`'s: its bound method,
    a middleware holding one (``AnfitrionMiddleware.gate``), or a function closing over
    either (LangChain composes an agent's middleware wrappers into one function)."""
    if wrapper is None or depth > 6:
        return False
    owner = getattr(wrapper, "__self__", None)
    if isinstance(owner, ToolGate) or isinstance(getattr(owner, "gate", None), ToolGate):
        return True
    inner = [getattr(wrapper, "__wrapped__", None), getattr(wrapper, "func", None)]
    inner += [cell.cell_contents for cell in getattr(wrapper, "__closure__", None) or ()
              if cell.cell_contents is not wrapper]
    for value in inner:
        if isinstance(value, ToolGate) or isinstance(getattr(value, "gate", None), ToolGate):
            return True
        if callable(value) and _goes_through_a_gate(value, depth + 1):
            return True
    return False


# -- answers ---------------------------------------------------------------------------------

def approve(value: Mapping[str, Any], *, approver: str, note: str = "") -> dict[str, Any]:
    """The resume answer approving the request an approval ``interrupt()`` carried."""
    return _decision(value, "approve", approver, note)


def reject(value: Mapping[str, Any], *, approver: str, note: str = "") -> dict[str, Any]:
    """The resume answer declining it (*note* is what the model is told)."""
    return _decision(value, "reject", approver, note)


def edit(value: Mapping[str, Any], arguments: Mapping[str, Any], *, approver: str,
         note: str = "") -> dict[str, Any]:
    """The resume answer approving the call with other arguments (validated and decided
    again by the gate, like an edit in the inbox)."""
    return {**_decision(value, "edit", approver, note), "arguments": dict(arguments)}


def _decision(value: Mapping[str, Any], decision: str, approver: str,
              note: str) -> dict[str, Any]:
    return {"type": f"{APPROVAL}.answer", "request_id": value["request_id"],
            "digest": value["digest"], "decision": decision, "approver": approver,
            "note": note}


def _answers_in(value: Any) -> list[Mapping[str, Any]]:
    """The answers a resume value carries (one, a list, or ``{"answers": [...]}``)."""
    if isinstance(value, Mapping) and "answers" in value:
        value = value["answers"]
    items = value if isinstance(value, list) else [value]
    return [i for i in items if isinstance(i, Mapping) and isinstance(i.get("request_id"), str)]


# -- the gate around a tool node ------------------------------------------------------------

class _Escape(BaseException):
    """Carries LangGraph's control flow (an interrupt inside a tool) past the gate's handler,
    which would make an ordinary exception an error result."""

    def __init__(self, bubble: GraphBubbleUp) -> None:
        super().__init__()
        self.bubble = bubble


class _ThreadLock:
    __slots__ = ("__weakref__", "lock")

    def __init__(self) -> None:
        self.lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class _Call:
    id: str
    name: str
    arguments: str | dict[str, Any]
    session_id: str


class ToolGate:
    """Puts every tool call of a LangGraph tool node through a :class:`Runtime`'s gate.

    Args:
        runtime: the runtime (policy, approver, store, audit) — its tools from
            :func:`gated_tools`.
        principal: who the graph acts for, or a function of the call's request.
        session_id: the anfitrion session of a call (default ``langgraph-<thread_id>``).
        via: the door named in the audit record of answers given through ``Command(resume=…)``.

    Use :meth:`wrap` / :meth:`awrap` as a ``ToolNode``'s ``wrap_tool_call`` /
    ``awrap_tool_call``, or :meth:`tool_node`. The graph needs a checkpointer and a
    ``thread_id`` (approvals suspend it).
    """

    def __init__(self, runtime: Runtime, *,
                 principal: Principal | str | Callable[[ToolCallRequest], Principal | str]
                 = "user",
                 session_id: Callable[[ToolCallRequest], str] | None = None,
                 via: str = VIA) -> None:
        self.runtime = runtime
        self._principal = principal
        self._session_id = session_id
        self.via = via
        self._async_locks: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, weakref.WeakValueDictionary[str, asyncio.Lock]
        ] = weakref.WeakKeyDictionary()
        self._thread_locks: weakref.WeakValueDictionary[str, _ThreadLock] = \
            weakref.WeakValueDictionary()
        self._guard = threading.Lock()
        self._kept: OrderedDict[str, Session] = OrderedDict()

    def tool_node(self, tools: Sequence[BaseTool], **options: Any) -> ToolNode:
        """A ``ToolNode`` whose every call goes through the gate."""
        return ToolNode(tools, wrap_tool_call=self.wrap, awrap_tool_call=self.awrap, **options)

    def check(self, graph: Any) -> Any:
        """*graph* (a ``StateGraph`` or a compiled graph) as it is, when every ``ToolNode`` in
        it — subgraphs included — is gated by a :class:`ToolGate`.

        Raises:
            UserError: naming each tool node whose calls would run ungated and unaudited
                (a plain ``ToolNode`` next to the gated one, or one wrapped by something else).
        """
        found = ungated_tool_nodes(graph)
        if found:
            raise UserError(f"tool node(s) {', '.join(map(repr, found))} run tools without "
                            "anfitrion's gate: no policy, approval or audit. Build them with "
                            "ToolGate(runtime).tool_node(tools)")
        return graph

    # -- the two entry points -------------------------------------------------------------

    async def awrap(self, request: ToolCallRequest,
                    handler: Callable[[ToolCallRequest], Awaitable[Result]]) -> Result:
        """``awrap_tool_call``: gate *request*, run *handler* if the gate says so."""
        call = self._call(request)
        loop = asyncio.get_running_loop()
        with self._guard:
            locks = self._async_locks.setdefault(loop, weakref.WeakValueDictionary())
            lock = locks.get(call.session_id)
            if lock is None:
                lock = locks[call.session_id] = asyncio.Lock()
        return await self._gate(request, call, handler, lock)

    def wrap(self, request: ToolCallRequest,
             handler: Callable[[ToolCallRequest], Result]) -> Result:
        """``wrap_tool_call``: the same, for graphs run synchronously (one event loop per
        call in the calling thread; calls of one thread are gated one at a time)."""
        call = self._call(request)
        with self._guard:
            held = self._thread_locks.get(call.session_id)
            if held is None:
                held = self._thread_locks[call.session_id] = _ThreadLock()

        async def run(req: ToolCallRequest) -> Result:
            return handler(req)

        with held.lock:
            return anyio.run(self._gate, request, call, run, None)

    # -- the gate -------------------------------------------------------------------------

    def _call(self, request: ToolCallRequest) -> _Call:
        tool_call = request.tool_call
        call_id = tool_call.get("id")
        if not call_id:
            raise UserError(f"tool call {tool_call.get('name')!r} has no id: anfitrion pairs "
                            "results and approvals by call id")
        sid = self._session_id(request) if self._session_id else _thread_session(request)
        return _Call(call_id, tool_call["name"], _raw_arguments(request), sid)

    def principal_of(self, request: ToolCallRequest) -> Principal:
        who = self._principal
        return Principal.of(who(request) if callable(who) else who)

    async def _gate(self, request: ToolCallRequest, call: _Call,
                    handler: Callable[[ToolCallRequest], Awaitable[Result]],
                    lock: asyncio.Lock | None) -> Result:
        ran: list[Result] = []
        token = _AGENT_TOOLS.set(_offered_by(request))
        try:
            submission, refused = await self._submit(request, call, handler, ran, lock)
            while submission.status is SubmissionStatus.WAITING:
                asked = submission.request
                assert asked is not None
                # the first time, this suspends the graph; on resume it returns the answer
                value = interrupt(approval_value(asked, refused=refused))
                submission, refused = await self._submit(request, call, handler, ran, lock,
                                                         value)
        except _Escape as escape:
            raise escape.bubble from None
        finally:
            _AGENT_TOOLS.reset(token)
        return _message(submission, request, ran[-1] if ran else None)

    async def _submit(self, request: ToolCallRequest, call: _Call,
                      handler: Callable[[ToolCallRequest], Awaitable[Result]],
                      ran: list[Result], lock: asyncio.Lock | None,
                      resumed: Any = None) -> tuple[Submission, str | None]:
        """Submit the call (after recording the answers *resumed* carries): the submission,
        and why those answers were refused, if they were."""
        if lock is not None:
            async with lock:
                return await self._submit_locked(request, call, handler, ran, resumed)
        return await self._submit_locked(request, call, handler, ran, resumed)

    async def _submit_locked(self, request: ToolCallRequest, call: _Call,
                             handler: Callable[[ToolCallRequest], Awaitable[Result]],
                             ran: list[Result], resumed: Any
                             ) -> tuple[Submission, str | None]:
        gated = await self._open(call.session_id, self.principal_of(request))
        try:
            refused = await self._record(gated, call, resumed)
            _note_principal_text(gated, request.state)
            await _note_outside_results(gated, request.state)
            replayed = _replay(gated, call, request.state)
            if replayed is not None:
                await self._close(gated)
                return replayed, refused
            waited_on = gated.pending.get(call.id)
            store = self.runtime.store

            async def execute(arguments: dict[str, Any]) -> Any:
                if waited_on is not None:
                    # a person's answer counts even if the policy no longer asks on resume
                    found = await store.get_approval(waited_on)
                    if found is None or found.answer is None or not found.answer.approved:
                        raise ToolError("a person declined this call; it was not run")
                to_run = request.override(tool_call={**request.tool_call, "args": arguments})
                try:
                    result = await handler(to_run)
                except GraphBubbleUp as bubble:
                    raise _Escape(bubble) from None
                ran.append(result)
                message = _tool_message(result, call.id)
                if message is None:
                    return ""
                if message.status == "error":
                    raise ToolError(message.text)
                return message.content

            submission = await gated.submit(call.name, call.arguments, call.id, execute=execute)
        except BaseException:
            await self._release(gated)
            raise
        await self._close(gated)
        return submission, refused

    async def _close(self, gated: GatedSession) -> None:
        await gated.close()
        with self._guard:
            self._kept[gated.id] = gated.session
            self._kept.move_to_end(gated.id)
            while len(self._kept) > SESSIONS_KEPT:
                self._kept.popitem(last=False)

    async def _take_kept(self, session_id: str, principal: Principal) -> GatedSession | None:
        """The session this gate saved last, leased again without reloading it — if the
        store's copy is still the one it saved (the version says so)."""
        with self._guard:
            kept = self._kept.pop(session_id, None)
        if kept is None or kept.principal.id != principal.id:
            return None
        runtime = self.runtime
        now = time.time()
        taken = await runtime.store.acquire_lease(session_id, runtime.owner,
                                                  now + runtime.lease_seconds, now=now)
        if taken is None:
            return None  # held elsewhere: the full path says by whom
        if taken.version == kept.version + 1:
            kept.saved(taken)
            kept.status, kept.lease_owner, kept.lease_expires = \
                taken.status, taken.lease_owner, taken.lease_expires
            return GatedSession(runtime, kept)
        return GatedSession(runtime, Session.from_state(taken))

    async def _open(self, session_id: str, principal: Principal) -> GatedSession:
        return belongs_to(await self._opened(session_id, principal), self.via)

    async def _opened(self, session_id: str, principal: Principal) -> GatedSession:
        runtime = self.runtime
        kept = await self._take_kept(session_id, principal)
        if kept is not None:
            return kept
        state = await runtime.store.load_session(session_id)
        if state is None:
            return await runtime.open(principal, session_id)
        if state.principal_id != principal.id:
            raise UserError(f"session {session_id!r} belongs to another principal")
        if state.status == "suspended":
            return await runtime.resume(session_id)
        if state.status == "running":  # left by a run that died: free once its lease is
            return await runtime.resume(session_id, force=True)
        return await runtime.open(principal, session_id)

    async def _release(self, gated: GatedSession) -> None:
        """Let the lease lapse without saving what the failed call changed in memory."""
        with self._guard:
            self._kept.pop(gated.id, None)
        if gated.session.version:
            await self.runtime.store.renew_lease(gated.id, self.runtime.owner, 0.0)
        await self.runtime.flush()

    async def _record(self, gated: GatedSession, call: _Call, value: Any) -> str | None:
        """Record the answers a resume value carries, each bound to the digest it names; or
        refuse them all: returns why (the call's next interrupt carries it), else ``None``.

        The value resumes this call's interrupt in this thread, so its answers may answer only
        the request this call waits on in the thread's session (the session's own record of
        its waiting calls, as for every framework). One naming another request — another
        thread's (another session or principal), another call's, one answered before — is
        refused, whoever could send the value: nothing is recorded, and the call asks again.
        Not raised: LangGraph keeps a resume value its node consumed and hands it back each
        time the node runs again, so an exception would leave the thread unable to continue.
        """
        given = _answers_in(value)
        if not given:
            return None
        waiting = gated.pending.get(call.id)
        for item in given:
            named = item["request_id"]
            if named != waiting:
                return (f"the answer to approval request {named[:80]!r} was refused: call "
                        f"{call.id[:80]!r} ({call.name[:80]!r}) of this thread does not wait on it "
                        "(a request of another thread, of another call, or answered before). "
                        "Nothing was recorded and nothing ran; answer the request this "
                        "interrupt carries")
        store = self.runtime.store
        for item in given:
            request_id, seen = item["request_id"], item.get("digest")
            if not isinstance(seen, str):
                continue  # an answer must name the digest the person saw
            approver = str(item.get("approver") or self.via)
            note = str(item.get("note") or "")
            decision = item.get("decision")
            if decision == "edit" and isinstance(item.get("arguments"), Mapping):
                outcome = await answers.propose_edit(store, request_id, seen, item["arguments"],
                                                     approver=approver, note=note, via=self.via)
            elif decision in ("approve", "reject"):
                outcome = await answers.answer(store, request_id, seen,
                                               approved=decision == "approve",
                                               approver=approver, note=note, via=self.via)
            else:
                continue
            if outcome.refusal is answers.Refusal.STALE:
                # approved for other arguments than the call now has: never run it
                await answers.withdraw(store, request_id, "an answer for another call (digest "
                                       "mismatch) came through " + self.via, via=self.via)
        return None


def approval_value(request: Any, *, refused: str | None = None) -> dict[str, Any]:
    """What an approval ``interrupt()`` carries: the request, bound to its digest, and
    (``refused``) why the answers the previous resume value carried were not recorded."""
    return {"type": APPROVAL, "request_id": request.id, "digest": request.digest,
            "session_id": request.session_id, "tool_call_id": request.call_id,
            "tool": request.tool_name, "arguments": dict(request.arguments),
            "effect": request.effect, "reason": request.reason,
            "warnings": list(request.warnings), "description": request.describe(),
            "expires_at": request.expires_at.isoformat(timespec="seconds"),
            "decisions": ["approve", "reject", "edit"],
            **({"refused": refused} if refused is not None else {})}


def _thread_session(request: ToolCallRequest) -> str:
    runtime = request.runtime
    config = runtime.config if isinstance(runtime, ToolRuntime) else None
    thread = (config or {}).get("configurable", {}).get("thread_id")
    if thread is None:
        raise UserError("the graph runs without a thread_id: give it a checkpointer and "
                        "config={'configurable': {'thread_id': ...}} (one thread is one "
                        "anfitrion session)")
    return f"langgraph-{thread}"


def _offered_by(request: ToolCallRequest) -> frozenset[str]:
    runtime = request.runtime
    if isinstance(runtime, ToolRuntime) and runtime.tools:
        return frozenset(t.name for t in runtime.tools)
    return frozenset({request.tool.name}) if request.tool is not None else frozenset()


def _messages(state: Any) -> list[Any]:
    if isinstance(state, Mapping):
        found = state.get("messages", [])
    elif isinstance(state, list):
        found = state
    else:
        found = getattr(state, "messages", [])
    return list(found) if isinstance(found, list) else []


def _raw_arguments(request: ToolCallRequest) -> str | dict[str, Any]:
    """The argument text exactly as the provider sent it, when the message kept it and it
    says what the framework parsed; else the framework's parsed arguments."""
    tool_call = request.tool_call
    args = dict(tool_call.get("args") or {})
    for message in reversed(_messages(request.state)):
        if not isinstance(message, AIMessage):
            continue
        for raw in message.additional_kwargs.get("tool_calls") or ():
            if not isinstance(raw, Mapping) or raw.get("id") != tool_call.get("id"):
                continue
            text = (raw.get("function") or {}).get("arguments")
            if isinstance(text, str):
                try:
                    same = json.loads(text or "{}") == args
                except ValueError:
                    same = False
                if same:
                    return text
            return args
        if any(c.get("id") == tool_call.get("id") for c in message.tool_calls):
            return args
    return args


def _note_principal_text(gated: GatedSession, state: Any) -> None:
    """The principal's own words in the graph state: values found there are never flagged."""
    seen: dict[str, int] = {}
    for message in gated.session.transcript:
        if isinstance(message, UserMessage):
            for part in message.parts:
                if isinstance(part, Text):
                    seen[part.text] = seen.get(part.text, 0) + 1
    for message in _messages(state):
        if isinstance(message, HumanMessage) and isinstance(message.content, str):
            if seen.get(message.content, 0):
                seen[message.content] -= 1
            else:
                gated.add_user_text(message.content)


async def _note_outside_results(gated: GatedSession, state: Any) -> None:
    """Tool results in the graph state that no gated call produced (another node, another
    middleware) enter the session as untrusted content, so taint sees them."""
    session = gated.session
    outside = [m for m in _messages(state) if isinstance(m, ToolMessage)
               and not session.used_call_id(m.tool_call_id)]
    if not outside:
        return
    known = {p.call_id for m in session.transcript if isinstance(m, UserMessage)
             for p in m.parts if isinstance(p, ToolResult)}
    for message in outside:
        if message.tool_call_id not in known:
            content = message.content if isinstance(message.content, str) else \
                json.dumps(message.content, ensure_ascii=False, default=str)
            await gated.report_result(message.name or "outside", content,
                                      call_id=message.tool_call_id)


def _replay(gated: GatedSession, call: _Call, state: Any) -> Submission | None:
    """The recorded outcome of a call the graph runs again (a node re-executed on resume)
    with the same id and arguments; ``None`` if this is not such a call."""
    session = gated.session
    if not session.used_call_id(call.id) or call.id in session.pending:
        return None
    if any(isinstance(m, ToolMessage) and m.tool_call_id == call.id for m in _messages(state)):
        return None  # the model reused an id that already has a result: the gate refuses it
    proposed = next((c for m in reversed(session.transcript) if isinstance(m, Reply)
                     for c in m.tool_calls if c.id == call.id), None)
    if proposed is None or _parsed(call.arguments) != _parsed(proposed.raw_arguments):
        return None
    result = next((p for m in reversed(session.transcript) if isinstance(m, UserMessage)
                   for p in m.parts if isinstance(p, ToolResult) and p.call_id == call.id), None)
    if result is None:
        return None
    status = SubmissionStatus.REFUSED if result.is_error and result.error_kind in (
        "unknown_tool", "invalid_arguments", "denied", "retry_limit") else \
        SubmissionStatus.EXECUTED
    return Submission(status, proposed, result, None, None, "replay")


def _parsed(arguments: str | dict[str, Any]) -> Any:
    if isinstance(arguments, dict):
        return arguments
    try:
        return parse_json_strict(arguments or "{}")
    except JsonError:
        return None


def _tool_message(result: Result, call_id: str) -> ToolMessage | None:
    if isinstance(result, ToolMessage):
        return result
    update = result.update if isinstance(result, Command) else None
    if isinstance(update, Mapping):
        for message in update.get("messages") or ():
            if isinstance(message, ToolMessage) and message.tool_call_id == call_id:
                return message
    return None


def _message(submission: Submission, request: ToolCallRequest, ran: Result | None) -> Result:
    """What the graph gets: the gate's shaped text, in the handler's own message if it ran."""
    result = submission.result
    assert result is not None
    text = submission.text  # a result's media as summary lines: the graph's messages are text
    tool_call = request.tool_call
    status = "error" if result.is_error else "success"
    if ran is not None and submission.status is SubmissionStatus.EXECUTED:
        if isinstance(ran, ToolMessage):
            return ran.model_copy(update={"content": text, "status": status})
        original = _tool_message(ran, str(tool_call["id"]))
        if isinstance(ran, Command) and original is not None and isinstance(ran.update, Mapping):
            shaped = original.model_copy(update={"content": text, "status": status})
            messages = [shaped if m is original else m for m in ran.update["messages"]]
            return Command(graph=ran.graph, update={**ran.update, "messages": messages},
                           resume=ran.resume, goto=ran.goto)
        return ran
    return ToolMessage(content=text, name=tool_call["name"],
                       tool_call_id=tool_call["id"], status=status)
