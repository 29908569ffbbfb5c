"""Multi-round-trip requests through the gateway (MCP 2026-07-28): an upstream server's question
during a call reaches the client whose call it is, and the answer comes back to that very call.

A 2026-07-28 client has no channel for a server-to-client request: a server asks by answering
``tools/call`` with an ``input_required`` result, and the client sends the call again with the
answers and the ``requestState`` it was given. Through the gateway:

- the call runs through the gate once, as any call (in a task of the gateway's, so the client's
  request can end while the call waits for its answer); the upstream's question — asked in its
  own ``input_required`` result, or with an older revision's server-to-client request — is
  checked as every relayed question is (:meth:`UpstreamProtocol.relay
  <anfitrion.mcp._gateway_upstream.UpstreamProtocol.relay>`: the server's ``"elicitation"`` /
  ``"sampling"`` setting, a flat form schema, no secrets) and answers the client's request as
  the gateway's own ``input_required`` result;
- the upstream's ``requestState`` never leaves the gateway (its client toolset echoes it to the
  upstream). The client gets the gateway's own state, ``<held call>:<round>``, sealed by the
  SDK's :class:`~mcp.server.request_state.RequestStateBoundary` (AES-GCM under a key of this
  process): bound to the method, the tool and a digest of its arguments, the principal (the
  OAuth caller's issuer and id, else the gateway's principal), the gateway's audience and an
  expiry (:data:`INPUT_WAIT`);
- a state is good for one round: the round number must be the held call's current one, so a
  replayed state is refused, as are a forged, expired, another call's or another principal's
  (the boundary's ``-32602 Invalid or expired requestState``; this module's own check of the
  principal and round gives the same answer);
- the answers must name exactly the questions of the round; each is read as the result type of
  its method before it goes upstream;
- at most :data:`MAX_HELD_PER_PRINCIPAL` calls of one principal are held at once.

Limits: held calls live in the process that started them — a retry reaching another replica, or
this one after a restart, is refused (the call must be made again; the gate's ledger keeps a
write from running twice). Progress and log messages of a call go to the request that started
it, and are dropped once that request has been answered.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import TaskGroup

from .._canonical import digest

try:
    import mcp.types as mt
    from mcp.server.context import ServerRequestContext
    from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
    from mcp.shared.exceptions import MCPError
    from pydantic import ValidationError
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    from ..exceptions import MissingDependencyError

    raise MissingDependencyError("mcp", "mcp") from exc

__all__ = ["AUDIENCE", "INPUT_WAIT", "MAX_HELD_PER_PRINCIPAL", "HeldCall", "InputRounds"]

log = logging.getLogger("anfitrion.mcp.gateway")

INPUT_WAIT = 600.0
"""Seconds a question waits for the client's answer (and a sealed state is good for)."""
MAX_HELD_PER_PRINCIPAL = 64
"""2026-07-28 calls of one principal in flight at once in this process (each may wait
:data:`INPUT_WAIT` for an answer): more are refused, so unanswered questions cannot pile up."""
AUDIENCE = "anfitrion-gateway"
"""The audience every sealed state names: state another service minted is refused."""
_REFUSED = "Invalid or expired requestState"
Outcome = mt.CallToolResult | dict[str, Any]
"""What a call gives its client: a result, or a wire shape of its own (a task, the approval
inbox's URL elicitation: :mod:`anfitrion.mcp._gateway_tasks`)."""
_RESULTS: Mapping[str, type[Any]] = {"elicitation/create": mt.ElicitResult,
                                     "sampling/createMessage": mt.CreateMessageResult}


def refused() -> MCPError:
    """The boundary's own answer to a state it cannot accept (the reason stays in the log)."""
    return MCPError(code=mt.INVALID_PARAMS, message=_REFUSED,
                    data={"reason": "invalid_request_state"})


@dataclass(eq=False)
class _Question:
    method: str
    params: Any
    answered: anyio.Event = field(default_factory=anyio.Event)
    answer: Any = None


@dataclass(eq=False)
class HeldCall:
    """One client call running through the gate while its questions go to the client."""

    id: str
    principal: str
    tool: str
    arguments: str
    """A digest of the call's arguments (the call a state belongs to)."""
    expires: float
    round: int = 0
    asked: list[_Question] = field(default_factory=list)
    """Questions asked and not yet sent to the client."""
    sent: dict[str, _Question] = field(default_factory=dict)
    """The current round's questions, by the key the client answers them under."""
    done: bool = False
    result: Outcome | None = None
    error: BaseException | None = None
    _changed: anyio.Event = field(default_factory=anyio.Event)

    async def ask(self, method: str, params: Any) -> Any:
        """An upstream's question (already checked by the relay): waits for the client's
        answer, or until the call's time is up."""
        question = _Question(method, params)
        self.asked.append(question)
        self._changed.set()
        with anyio.move_on_after(max(self.expires - anyio.current_time(), 0)):
            await question.answered.wait()
            return question.answer
        return mt.ErrorData(code=mt.INTERNAL_ERROR, message=f"{method}: the client did not "
                            "answer in time")

    def finish(self, result: Outcome | None, error: BaseException | None) -> None:
        self.done, self.result, self.error = True, result, error
        self._changed.set()

    async def next(self) -> Outcome | mt.InputRequiredResult:
        """The call's result, or its next round of questions (as the client sees them)."""
        while True:
            if self.asked:
                await anyio.lowlevel.checkpoint()  # questions asked together go together
                self.round += 1
                self.sent = {f"q{self.round}.{i}": q for i, q in enumerate(self.asked)}
                self.asked = []
                requests: dict[str, Any] = {}
                for key, question in self.sent.items():
                    if question.method == "elicitation/create":
                        requests[key] = mt.ElicitRequest(params=question.params)
                    else:
                        requests[key] = mt.CreateMessageRequest(params=question.params)
                return mt.InputRequiredResult(input_requests=requests,
                                              request_state=f"{self.id}:{self.round}")
            if self.done:
                if self.error is not None:
                    raise self.error
                assert self.result is not None
                return self.result
            changed = self._changed = anyio.Event()
            await changed.wait()

    def answer(self, responses: Mapping[str, Any]) -> None:
        """The client's answers to the current round, each read as its method's result."""
        if set(responses) != set(self.sent):
            raise MCPError(code=mt.INVALID_PARAMS, message=(
                "inputResponses must answer exactly this round's inputRequests "
                f"({', '.join(sorted(self.sent))})"))
        answers: dict[str, Any] = {}
        for key, question in self.sent.items():
            raw = responses[key]
            try:
                value = raw if not isinstance(raw, Mapping) else dict(raw)
                answers[key] = _RESULTS[question.method].model_validate(value)
            except ValidationError:
                raise MCPError(code=mt.INVALID_PARAMS, message=(
                    f"inputResponses[{key!r}] is not a {question.method} result")) from None
        for key, question in self.sent.items():
            question.answer = answers[key]
            question.answered.set()
        self.sent = {}


Principal = Callable[[], str]


class InputRounds:
    """The gateway's held calls and the seal on their state.

    Args:
        principal: the principal of the request being answered (the OAuth caller's issuer
            and id, else the gateway's principal), as one string.
        wait: seconds a question waits for its answer (:data:`INPUT_WAIT`).
    """

    def __init__(self, principal: Principal, *, wait: float = INPUT_WAIT) -> None:
        self._principal = principal
        self.wait = wait
        self.tasks: TaskGroup | None = None
        """Where held calls run (the serving task group); ``None``: not serving."""
        self._held: dict[str, HeldCall] = {}
        self.boundary = RequestStateBoundary(
            RequestStateSecurity(keys=[os.urandom(32)], ttl=wait,
                                 bind_principal=lambda ctx: self._principal()),
            default_audience=AUDIENCE)
        """The SDK middleware sealing every outgoing ``requestState`` and opening every
        incoming one (installed on the gateway's server, inside its per-client middleware)."""

    def __len__(self) -> int:
        return len(self._held)

    async def call(self, params: mt.CallToolRequestParams,
                   run: Callable[[HeldCall | None], Awaitable[Outcome]]
                   ) -> Outcome | mt.InputRequiredResult:
        """A 2026-07-28 ``tools/call``: a new call started by *run* (given its held call to
        ask through), or, with a ``requestState`` (already opened by the boundary), the
        answers of the held call it names."""
        self._sweep()
        state = params.request_state
        if state is None:
            return await self._start(params, run)
        held_id, _, number = state.partition(":")
        held = self._held.get(held_id)
        principal = self._principal()
        if held is None or held.principal != principal or str(held.round) != number \
                or not held.sent or held.tool != params.name \
                or held.arguments != digest(params.arguments or {}):
            log.warning("requestState refused: %s", "unknown call" if held is None else
                        "another principal" if held.principal != principal else
                        "a round already answered" if str(held.round) != number
                        or not held.sent else "another call")
            raise refused()
        held.answer(params.input_responses or {})
        return await self._result(held)

    async def _start(self, params: mt.CallToolRequestParams,
                     run: Callable[[HeldCall | None], Awaitable[Outcome]]
                     ) -> Outcome | mt.InputRequiredResult:
        if self.tasks is None:  # not serving in a task group: nothing can be held (a
            # question then goes the older way, and fails without a channel back)
            return await run(None)
        principal = self._principal()
        if sum(h.principal == principal for h in self._held.values()) >= MAX_HELD_PER_PRINCIPAL:
            raise MCPError(code=mt.INVALID_REQUEST, message=(
                f"{MAX_HELD_PER_PRINCIPAL} calls of yours are in flight or waiting for your "
                "answers: answer or drop some first"))
        held = HeldCall(uuid.uuid4().hex, principal, params.name,
                        digest(params.arguments or {}), anyio.current_time() + self.wait)
        self._held[held.id] = held

        async def go() -> None:
            try:
                result = await run(held)
            except Exception as exc:  # noqa: BLE001 - handed to the request that waits
                held.finish(None, exc)
            else:
                held.finish(result, None)

        self.tasks.start_soon(go)
        return await self._result(held)

    async def _result(self, held: HeldCall) -> Outcome | mt.InputRequiredResult:
        try:
            outcome = await held.next()
        except BaseException:
            self._held.pop(held.id, None)
            raise
        if not isinstance(outcome, mt.InputRequiredResult):
            self._held.pop(held.id, None)
        return outcome

    def _sweep(self) -> None:
        now = anyio.current_time()
        for key, held in list(self._held.items()):
            if held.expires + 60 < now:
                del self._held[key]


def principal_key(issuer: str, principal_id: str) -> str:
    """The principal a state is bound to, as one string."""
    return f"{issuer}\x00{principal_id}"


def is_modern(ctx: ServerRequestContext[Any, Any]) -> bool:
    from mcp.types.version import MODERN_PROTOCOL_VERSIONS

    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
