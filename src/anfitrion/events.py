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
    from .approvals import ApprovalAnswer, ApprovalRequest
    from .conversation import Reply, ToolCall, ToolResult
    from .policy import Decision

__all__ = ["EventType", "HostEvent", "Listener"]

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


Listener: TypeAlias = Callable[[HostEvent], "Awaitable[None] | None"]


async def dispatch(listeners: Sequence[Listener], event: HostEvent) -> None:
    """Give *event* to every listener; a failing listener is logged, never fatal to the run."""
    for listener in listeners:
        try:
            outcome = listener(event)
            if outcome is not None and inspect.isawaitable(outcome):
                await outcome
        except Exception:
            log.exception("event listener %r failed on %s", listener, event.type)


def event_payload(event: HostEvent) -> dict[str, Any]:
    """The event's identity fields as plain data (used by recorders)."""
    return {"type": event.type.value, "session_id": event.session_id, "turn": event.turn,
            "call_id": event.call_id, "tool": event.tool, "at": event.at}
