"""What an MCP server sends the client during a call — log messages, sampling and elicitation
requests — routed to the call that caused it (:mod:`anfitrion.mcp._relay_routing`).

For a call the gateway relays, the caller's :class:`~anfitrion.mcp._toolset.UpstreamCall` gets
it (the gateway applies the server's ``"sampling"`` / ``"elicitation"`` setting). For a host's
own call, the toolset answers itself:

- ``elicitation/create`` goes to the application's handler when it gave one and the server's
  entry allows it (:mod:`anfitrion.mcp._elicitation`); otherwise it is refused with the reason;
- ``sampling/createMessage`` is refused: a host does not let a server drive its model (the
  prompt is the server's, and "call the delete tool now" is a prompt like any other).

A message that belongs to no call, or to one of several with nothing saying which, is never
handed to a caller: a request is refused with the reason, a log message stays in anfitrion's
log. Every request, answer and withheld message is audited (``mcp.relayed``).

Nothing the server puts in a message is taken as the relation: a stdio server cannot say which
call a message belongs to, and the SDK's HTTP client does not tell which response stream a
message came on, so a message during one call has one owner and during several has none (a
server-provided id would let a hostile server address another client's call).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

import mcp.types as mt

from .._audit import event_record_data
from .._events import EventType, HostEvent
from ..exceptions import AnfitrionError
from ..store import AuditStore
from ._elicitation import ElicitationHandler, answer_elicitation
from ._pinning import suspicious_text
from ._relay_routing import InFlight, PendingCall

if TYPE_CHECKING:
    from mcp.client.session import ClientSession

    from ._config import ServerConfig

__all__ = ["Callbacks", "ServerRequests", "ServerSide"]

log = logging.getLogger("anfitrion.mcp")

SAMPLING, ELICITATION = "sampling/createMessage", "elicitation/create"


def _hints(params: Any) -> str:
    findings = suspicious_text(params.model_dump(mode="json", exclude_none=True))
    return "; ".join(f"{f.path}: {f.reason}" for f in findings[:5])


@dataclass(frozen=True)
class Callbacks:
    """The ``ClientSession`` callbacks for one connection: *declared* are passed to it (the
    capability is announced), the others installed after ``initialize`` (undeclared, but a
    server that sends the request anyway gets a refusal that is audited)."""

    declared: dict[str, Any]
    undeclared: dict[str, Any] = field(default_factory=dict)

    def install_undeclared(self, session: ClientSession) -> None:
        for name, callback in self.undeclared.items():
            setattr(session, f"_{name}", callback)  # the SDK's default would answer unaudited


class ServerSide(Protocol):
    """What the handling needs of its toolset (:class:`~anfitrion.mcp.McpToolset`): the
    server's entry, and whether a gateway relays its requests to the gateway's clients."""

    @property
    def id(self) -> str: ...

    @property
    def config(self) -> ServerConfig: ...

    @property
    def relay_requests(self) -> bool: ...


class ServerRequests:
    """One toolset's handling of its server's log messages and requests to the client. Each
    connection's callbacks are bound to its calls in flight, so a message goes to the call
    that caused it."""

    def __init__(self, toolset: ServerSide, store: AuditStore,
                 elicitation: ElicitationHandler | None, *, reveal: Callable[[str], str]
                 ) -> None:
        self._toolset = toolset
        self._store = store
        self.elicitation = elicitation
        self._reveal = reveal
        self.on_audit: Callable[[str, str], Awaitable[None]] | None = None
        """Where records of messages that belong to no call go (the gateway: its own log);
        by default the store's audit log, under the session ``mcp-server:<id>``."""

    @property
    def server(self) -> str:
        return self._toolset.id

    def callbacks(self, calls: InFlight) -> Callbacks:
        both = {"sampling_callback": partial(self.on_request, calls, SAMPLING),
                "elicitation_callback": partial(self.on_request, calls, ELICITATION)}
        if self._toolset.relay_requests:  # the gateway: its clients may be able to answer
            return Callbacks(both)
        if self.elicitation is not None and self._toolset.config.elicitation:
            return Callbacks({"elicitation_callback": both["elicitation_callback"]},
                             {"sampling_callback": both["sampling_callback"]})
        return Callbacks({}, both)

    async def audit(self, session_id: str, name: str, detail: str) -> None:
        if not session_id and self.on_audit is not None:
            await self.on_audit(name, detail)
            return
        session_id = session_id or f"mcp-server:{self.server}"
        event = HostEvent(EventType.MCP_RELAYED, session_id, tool=name, detail=detail)
        try:
            await self._store.append_audit(str(EventType.MCP_RELAYED), session_id, time.time(),
                                           event_record_data(event))
        except AnfitrionError as exc:
            log.warning("MCP server %r: the audit record of %s could not be stored: %s",
                        self.server, name, exc)

    async def on_log(self, calls: InFlight, params: mt.LoggingMessageNotificationParams
                     ) -> None:
        owner = calls.owner()
        call = owner.call
        if call is not None:
            if call.caller is not None and call.caller.log is not None:
                await call.caller.log(params)
            return
        # anfitrion's own log (redacted like every anfitrion record), never another caller
        log.log(logging.INFO if owner.ambiguous else logging.DEBUG,
                "MCP server %r logged (%s, not relayed: %s): %s", self.server, params.level,
                owner.problem, str(params.data)[:2000])
        if owner.ambiguous:
            await self.audit("", f"{self.server}.notifications/message",
                             f"log message ({params.level}) kept in anfitrion's log, not "
                             f"relayed: {owner.problem}")

    async def on_request(self, calls: InFlight, method: str, context: Any, params: Any
                         ) -> Any:
        owner = calls.owner()
        call = owner.call
        if call is None:
            hints = _hints(params)
            await self.audit("", f"{self.server}.{method}", f"refused: {owner.problem}"
                             f"{'; ' + hints if hints else ''}")
            return mt.ErrorData(code=mt.INVALID_REQUEST,
                                message=f"{method} refused by anfitrion: {owner.problem}")
        if call.caller is not None and call.caller.request is not None:
            return await call.caller.request(method, params)
        return await self._answer(call, method, params)

    async def on_input_request(self, call: PendingCall, request: Any) -> Any:
        """One request of an upstream's ``input_required`` result (2026-07-28): it belongs
        to *call* by construction (it came in that call's own result), so it goes to that
        call's caller, or is answered as :meth:`on_request` answers a host's own call."""
        method = request.method
        if method not in (SAMPLING, ELICITATION):  # roots/list: never offered
            await self.audit(call.session_id, f"{self.server}.{method}",
                             "refused: this client offers no roots")
            return mt.ErrorData(code=mt.INVALID_REQUEST,
                                message=f"{method} refused by anfitrion: roots are not offered")
        if call.caller is not None and call.caller.request is not None:
            return await call.caller.request(method, request.params)
        return await self._answer(call, method, request.params)

    async def _answer(self, call: PendingCall, method: str, params: Any) -> Any:
        """A host's own call: elicitation to the application's handler, if allowed."""
        name, hints = f"{self.server}.{method}", _hints(params)
        suffix = f"; {hints}" if hints else ""
        reason = None
        if method == SAMPLING:
            reason = "this host does not let MCP servers use its model (sampling is not " \
                     "offered)"
        elif self.elicitation is None:
            reason = "this host has no way to ask a person (no elicitation handler)"
        elif not self._toolset.config.elicitation:
            reason = f"server {self.server!r} may not ask the host's person; the operator " \
                     "can allow it with \"elicitation\": true in the server's entry of the " \
                     "MCP config"
        if reason is not None:
            await self.audit(call.session_id, name, f"refused: {reason}{suffix}")
            return mt.ErrorData(code=mt.INVALID_REQUEST,
                                message=f"{method} refused by anfitrion: {reason}")
        assert self.elicitation is not None
        try:
            result, detail = await answer_elicitation(
                self.server, params, self.elicitation, reveal=self._reveal, tool=call.tool,
                session_id=call.session_id)
        except Exception as exc:  # noqa: BLE001 - the application's handler: reported, not raised
            log.warning("MCP server %r: the elicitation handler failed: %s", self.server, exc)
            result = mt.ErrorData(code=mt.INTERNAL_ERROR,
                                  message="elicitation/create: the host could not ask")
            detail = f"failed: the elicitation handler raised {type(exc).__name__}"
        await self.audit(call.session_id, name, f"{detail}{suffix}")
        return result
