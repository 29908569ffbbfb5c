"""Which call in flight a server's message belongs to.

A server connection is shared: the gateway's clients, or several host sessions, may have calls
in flight on it at once. What the server sends during a call — log messages, sampling and
elicitation requests — must reach the caller whose call caused it, and no other:

- progress carries the call's ``progressToken`` (the SDK routes it to that call's callback);
- a message whose transport tells which call it belongs to (the related request id) goes to
  that call — never an id the server wrote itself (:mod:`anfitrion.mcp._server_requests`:
  neither stdio nor the SDK's HTTP client tells it today);
- otherwise, with exactly one call in flight, to that call;
- with several calls in flight and no relation, the owner is ambiguous: nothing is guessed.
  A request is refused (the server gets the reason) and a log message stays in anfitrion's own
  log; both are audited.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["InFlight", "Owner", "PendingCall"]


@dataclass(eq=False)
class PendingCall:
    """One ``tools/call`` sent to a server and not yet answered.

    Attributes:
        request_id: the JSON-RPC id the call was sent with (``None``: not known).
        tool: anfitrion's name of the tool (``<server>.<tool>``).
        session_id: the anfitrion session that made the call (``""``: none known).
        caller: what the caller wants of the server's messages (the gateway's relay), or
            ``None`` for a host's own call.
    """

    request_id: Hashable | None
    tool: str
    session_id: str = ""
    caller: Any = None


@dataclass(frozen=True)
class Owner:
    """The call a message belongs to, or why there is none (:attr:`problem`)."""

    call: PendingCall | None
    problem: str = ""
    ambiguous: bool = False


@dataclass(eq=False)
class InFlight:
    """The calls in flight on one server connection."""

    calls: list[PendingCall] = field(default_factory=list)

    def add(self, call: PendingCall) -> None:
        self.calls.append(call)

    def remove(self, call: PendingCall) -> None:
        if call in self.calls:
            self.calls.remove(call)

    def owner(self, related: Hashable | None = None) -> Owner:
        """The call *related* names, else the only call in flight; never a guess.

        Example:
            >>> calls = InFlight()
            >>> calls.owner().problem[:36]
            'no call to this server is in flight:'
            >>> calls.add(PendingCall(1, "s.a")); calls.add(PendingCall(2, "s.b"))
            >>> calls.owner(2).call.tool, calls.owner().ambiguous
            ('s.b', True)
        """
        if related is not None:
            found = [c for c in self.calls if c.request_id == related
                     or str(c.request_id) == str(related)]
            if found:
                return Owner(found[0])
            return Owner(None, f"the message belongs to request {str(related)[:40]!r}, which "
                         "is not a call in flight")
        if not self.calls:
            return Owner(None, "no call to this server is in flight: a server may ask only "
                         "during a call it is answering")
        if len(self.calls) == 1:
            return Owner(self.calls[0])
        return Owner(None, f"{len(self.calls)} calls to this server are in flight (from "
                     "different callers) and the message does not say which one it belongs "
                     "to: it is not passed to any of them rather than to the wrong one",
                     ambiguous=True)
