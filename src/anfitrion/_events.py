"""Host events: what happened, as it happens, in process.

The host emits one :class:`HostEvent` per gate stage and per run milestone to its listeners —
the audit recorder (which redacts and stores them), the CLI's printer, telemetry. Events carry
the real objects; only the audit recorder decides what is kept on disk.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    from ._approvals import ApprovalAnswer, ApprovalRequest
    from ._conversation import Reply, ToolCall, ToolResult
    from .policy import Decision

__all__ = ["ALL_KINDS", "EventType", "HostEvent", "Listener", "Router", "dispatch", "hand_out",
           "kinds_of"]

log = logging.getLogger("anfitrion")


class EventType(StrEnum):
    RUN_STARTED = "run.started"
    RUN_RESUMED = "run.resumed"
    RUN_ENDED = "run.ended"
    MODEL_REQUESTED = "model.requested"
    MODEL_REPLIED = "model.replied"
    CALL_PROPOSED = "call.proposed"
    CALL_REJECTED = "call.rejected"
    CALL_VALIDATED = "call.validated"
    CALL_DECIDED = "call.decided"
    CALL_SHADOW_DECIDED = "call.shadow_decided"
    """A shadow policy's decision on a call (recorded, never enforced)."""
    APPROVAL_REQUESTED = "approval.requested"
    APPROVAL_ANSWERED = "approval.answered"
    APPROVAL_RESUMED = "approval.resumed"
    """A stored answer (given earlier, through any door) reached its call."""
    APPROVAL_VOTED = "approval.voted"
    """One person's vote on a request that needs several approvers (the two-person rule)."""
    APPROVAL_DELIVERY = "approval.delivery"
    """A request was sent to a webhook, or could not be (``status``: delivered / failed)."""
    EXECUTION_CLAIMED = "execution.claimed"
    EXECUTION_SETTLED = "execution.settled"
    EFFECT_RESOLVED = "effect.resolved"
    RESULT_RETURNED = "result.returned"
    MCP_RELAYED = "mcp.relayed"
    """The MCP gateway passed an upstream server's message on, or refused it (a resource read,
    a prompt, a sampling or elicitation request): ``tool`` names it, ``detail`` says what."""


# Not frozen: six events are built per tool call, and a frozen dataclass pays an
# object.__setattr__ per field (about a tenth of a round trip's CPU). Events are facts: the
# host never changes one after emitting it, and listeners must not either. The audit recorder
# is the first listener and copies what it keeps the moment it receives an event.
@dataclass(slots=True)
class HostEvent:
    """One thing that happened in a session (read-only by contract)."""

    type: EventType
    session_id: str
    turn: int = 0
    principal_id: str | None = None
    call_id: str | None = None
    tool: str | None = None
    call: ToolCall | None = None
    arguments: Mapping[str, Any] | None = None
    decision: Decision | None = None
    request: ApprovalRequest | None = None
    answer: ApprovalAnswer | None = None
    result: ToolResult | None = None
    reply: Reply | None = None
    status: str | None = None
    detail: str | None = None
    at: float = field(default_factory=time.time)
    arguments_sha256: str | None = None
    """The digest of the canonical JSON of ``arguments``, when the emitter computed it."""
    effect_key: str | None = None
    """The effect key (a SHA-256) of a write call's claim or settlement."""
    policy_sha256: str | None = None
    """The content hash of the policy that made ``decision`` (decided and shadow events)."""
    enforced: Decision | None = None
    """On a shadow event: the decision that was enforced (``decision`` is the shadow's)."""
    reviewer: Mapping[str, str] | None = None
    """On an answer or a vote: the identity provider's word on the reviewer (issuer,
    subject, name), when they signed in with OpenID Connect."""


Listener: TypeAlias = Callable[[HostEvent], "Awaitable[None] | None"]
"""A callable taking events. It may declare the kinds it takes in a ``kinds`` attribute (a
collection of :class:`EventType`); events of other kinds are not given to it, nor built for
it. Without the attribute it takes every kind."""

ALL_KINDS: frozenset[EventType] = frozenset(EventType)


def kinds_of(listener: Listener) -> frozenset[EventType]:
    """The kinds of event *listener* takes (its ``kinds``, or every kind)."""
    kinds = getattr(listener, "kinds", None)
    return ALL_KINDS if kinds is None else frozenset(EventType(k) for k in kinds)


def hand_out(listeners: Sequence[Listener], event: HostEvent) -> Awaitable[None] | None:
    """Give *event* to every listener, in order, as :func:`dispatch` does — without a
    coroutine until a listener returns an awaitable: then what is left to do (awaiting it,
    then the listeners after it), else ``None``."""
    for i, listener in enumerate(listeners):
        try:
            outcome = listener(event)
        except Exception:  # BLE001 - a listener is application code: logged, never ends the run
            log.exception("event listener %r failed on %s", listener, event.type)
            continue
        if outcome is not None and inspect.isawaitable(outcome):
            return _the_rest(outcome, listener, listeners[i + 1:], event)
    return None


async def _the_rest(outcome: Awaitable[None], listener: Listener,
                    later: Sequence[Listener], event: HostEvent) -> None:
    try:
        await outcome
    except Exception:  # BLE001 - a listener is application code: logged, never ends the run
        log.exception("event listener %r failed on %s", listener, event.type)
    pending = hand_out(later, event)
    if pending is not None:
        await pending


async def dispatch(listeners: Sequence[Listener], event: HostEvent) -> None:
    """Give *event* to every listener; a failing listener is logged, never fatal to the run."""
    pending = hand_out(listeners, event)
    if pending is not None:
        await pending


class Router:
    """Where each kind of event goes: the listeners that take it, in their order.

    Calling it gives an event to its kind's listeners (see :func:`hand_out`); :attr:`kinds`
    are the kinds some listener takes — an emitter builds no event of any other kind.

    Args:
        listeners: the listeners, each taking the kinds it declares (:func:`kinds_of`).
        quiet: listeners whose awaitable logs its own failures and never raises (the audit
            recorder's flush): a kind that only such a listener takes is handed to it
            directly, without a coroutine around what it returns.
    """

    __slots__ = ("_direct", "_listeners", "_quiet", "_routes", "kinds")

    def __init__(self, listeners: Sequence[Listener], *,
                 quiet: Sequence[Listener] = ()) -> None:
        self._listeners = list(listeners)
        self._quiet = tuple(quiet)
        self._routes: dict[EventType, tuple[Listener, ...]] = {}
        self._direct: dict[EventType, Listener] = {}
        self.kinds: frozenset[EventType] = frozenset()
        self._build()

    def add(self, listener: Listener) -> None:
        """Route events to *listener* too, after the others (in place: whoever holds this
        router hands events to it from now on)."""
        self._listeners.append(listener)
        self._build()

    def _build(self) -> None:
        taken = [(listener, kinds_of(listener)) for listener in self._listeners]
        routes: dict[EventType, tuple[Listener, ...]] = {}
        direct: dict[EventType, Listener] = {}
        for kind in EventType:
            route = tuple(listener for listener, kinds in taken if kind in kinds)
            if len(route) == 1 and any(route[0] is q or route[0] == q for q in self._quiet):
                direct[kind] = route[0]
            elif route:
                routes[kind] = route
        self._routes, self._direct = routes, direct
        self.kinds = frozenset(routes) | frozenset(direct)

    def listeners(self, kind: EventType) -> tuple[Listener, ...]:
        """The listeners *kind* goes to, in order."""
        direct = self._direct.get(kind)
        return (direct,) if direct is not None else self._routes.get(kind, ())

    def __call__(self, event: HostEvent) -> Awaitable[None] | None:
        """Give *event* to its listeners; what is left to await, or ``None``."""
        direct = self._direct.get(event.type)
        if direct is not None:
            return direct(event)
        route = self._routes.get(event.type)
        return hand_out(route, event) if route else None

