"""The gateway: an MCP server in front of MCP servers, every ``tools/call`` through the gate.

Any MCP host — a desktop assistant, an IDE — connects to ``anfitrion gateway`` instead of to
its servers. The gateway connects to the configured upstream servers and:

- answers ``tools/list`` with the approved, pinned, unchanged tools only, under their
  namespaced names (``git.git_log``), with annotations the gateway itself determined;
- puts every ``tools/call`` through the :class:`~anfitrion._gate.Gate`: resolve, validate,
  policy, approval, execution ledger, result shaping — each stage audited in the store;
- for a call that needs a person, creates the approval request in the store and completes it
  in-band where the client can (:mod:`anfitrion.mcp._gateway_tasks`): a task for a client of
  the Tasks extension, or a URL-mode elicitation of the request's inbox page; else it waits up
  to ``approval_wait`` seconds for an answer (``anfitrion approvals approve ID`` or the inbox)
  and, without one, returns a tool error saying where to approve; calling the tool again with
  the same arguments after approval runs the approved call.

Transports: stdio (:meth:`Gateway.serve_stdio`), and streamable HTTP on a loopback address
(:meth:`Gateway.serve_http`) behind a guard checking ``Host``, ``Origin``, a bearer token and
the body size before the MCP SDK sees the request. The bearer token is a static one, or — with
``gateway.auth`` — an OAuth access token of the configured issuer: the gateway is then a
resource server (:mod:`anfitrion.mcp._gateway_auth`), each token's subject its own principal.

Beyond tools the gateway forwards the rest of the protocol, with the gate where it matters
(:mod:`anfitrion.mcp._gateway_upstream`, :mod:`anfitrion.mcp._gateway_content`): every content
type of a result as itself (shaped: hidden characters made visible), ``structuredContent``
checked against the pinned ``outputSchema``, progress and log messages relayed to the client
whose call caused them, resources (untrusted reads: taint), pinned prompts, completion, and
the servers' sampling and elicitation requests only where the config allows them.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import json
import logging
import signal
import socket
import time
import uuid
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any
from urllib.parse import urlsplit

import anyio

from .. import __version__
from .. import _answers as answers
from .._approvals import DeferredApprover
from .._apps import GATEWAY_APP
from .._canonical import digest
from .._conversation import ToolResult
from .._events import Listener
from .._gate import Gate, GateLimits
from .._home import store_flag
from .._owners import dead_local_owner
from .._principal import Principal
from .._runtime import WARM_SESSIONS, GatedSession, Runtime, SubmissionStatus
from .._tools import OfferContext, Tool
from ..exceptions import AnfitrionError, ConflictError, MissingDependencyError, UserError
from ..policy import Policy
from ..store import LedgerState, SessionState, Store
from ..telemetry import extracted_context
from ._conversations import CONVERSATION_META_KEY, Conversations, HandleError
from ._gateway_http import THROTTLED_AUDIT, HttpGuard, SessionCloseRace, respond, with_health
from ._gateway_sse import lean_post_streams
from ._listing import DEFAULT_LISTING_TTL, ListingReuse
from ._oauth_settings import OAuthSettings
from ._pinning import NAMESPACE as PIN_NAMESPACE
from ._queue_guard import refuse_approval_queue_in
from ._toolset import (
    UPSTREAM_CALL,
    McpServers,
    McpTool,
    UpstreamCall,
    _reveal_in_value,
    reveal_hidden,
)

try:
    import mcp.types as mt
    from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
    from mcp.server.lowlevel import NotificationOptions, Server
    from mcp.server.models import InitializationOptions
    from mcp.server.stdio import stdio_server
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
    from mcp.shared.exceptions import MCPError
    from mcp.types.version import MODERN_PROTOCOL_VERSIONS

    from ._gateway_auth import (
        CALL_IDENTITY,
        CALLER,
        REFUSED_AUDIT,
        UPSTREAM_SCOPES,
        OAuthResource,
        call_identity,
        request_identity,
    )
    from ._gateway_content import forward_result, listed_tool
    from ._gateway_input import HeldCall, InputRounds, is_modern, principal_key
    from ._gateway_tasks import TASKS_EXTENSION, GatewayTask, TaskBook, approval_link
    from ._gateway_upstream import LOG_LEVELS, UpstreamProtocol, page
    from ._instructions import approved_instructions, combine
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingDependencyError("mcp", "mcp") from exc

__all__ = ["Gateway"]

log = logging.getLogger("anfitrion.mcp.gateway")


def _text_result(text: str, *, is_error: bool) -> mt.CallToolResult:
    return mt.CallToolResult(content=[mt.TextContent(type="text", text=text)], is_error=is_error)


WITHDRAWN_REASON = "the MCP client session that proposed the call ended"
ORPHANED_REASON = ("the gateway process waiting for this answer died and its client did not "
                   "send the call again within {seconds:g} seconds")


class _GatewayTools:
    """The upstream servers' tools a gateway offers: approved, pinned, visible, allowed.

    Their effect keys hold for the principal by default, not for one session: a client that
    re-sends a call from a new connection after a lost reply is caught as the same effect
    (a policy's ``[tools."<name>"] effect_scope`` still decides where it says)."""

    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway
        self._scoped: dict[str, tuple[Tool, Tool]] = {}

    def _principal_scoped(self, tool: Tool) -> Tool:
        if tool.effect_scope != "session":
            return tool
        cached = self._scoped.get(tool.name)
        if cached is None or cached[0] is not tool:
            cached = self._scoped[tool.name] = (tool, dataclasses.replace(
                tool, effect_scope="principal"))
        return cached[1]

    async def list_tools(self, context: OfferContext) -> list[Tool]:
        gateway = self._gateway
        tools = await gateway.servers.list_tools(context)
        offered = [self._principal_scoped(t) for t in tools
                   if gateway.runtime.policy.may_allow(t, context.principal)
                   and (gateway._visible is None or gateway._visible(t))]
        gateway._offered_names = frozenset(t.name for t in offered)
        return offered


class _Client:
    """One conversation of a client, and the durable anfitrion session it maps to (opened,
    or continued from the store, on its first use). When the last connection using it goes:
    a conversation the client never named is over (its calls still waiting for a person are
    withdrawn); one it named in ``_meta`` is left in the store for the client to continue."""

    def __init__(self, gateway: Gateway, session_id: str | None = None,
                 handle: str | None = None, principal: Principal | None = None) -> None:
        self._gateway = gateway
        self.principal = principal
        """Who the client's token says it is (OAuth); ``None``: the gateway's principal."""
        self._lock = anyio.Lock()
        self.session_id = session_id
        self.handle = handle
        """The conversation handle returned to the client (``None``: none to continue)."""
        self.named = False
        """Whether the client named the handle in a request (it means to continue)."""
        self.connections = 0
        self.gated: GatedSession | None = None
        self.log_level: str | None = None
        """The level the client asked for (``logging/setLevel``); ``None``: everything."""

    async def session(self) -> GatedSession:
        async with self._lock:
            if self.gated is None:
                self.gated = await self._gateway._open_session(self.session_id,
                                                               self.principal)
            return self.gated

    async def lost(self, stale: GatedSession) -> None:
        """*stale* was saved by another process since this one took it (its lease lapsed):
        forget it here (unless already replaced); the next use takes the conversation over
        again from the store."""
        async with self._lock:
            if self.gated is stale:
                self.gated = None

    async def release(self) -> None:
        """The last connection of a named conversation went: its session is stored, its
        lease released, for the client to continue on any gateway process."""
        async with self._lock:
            gated, self.gated = self.gated, None
            if gated is None:
                return
            try:
                await gated.close()
            except AnfitrionError as exc:
                log.warning("gateway session %s could not be saved: %s", gated.id, exc)

    async def end(self) -> None:
        gated, self.gated = self.gated, None
        if gated is None:
            return
        store = self._gateway.store
        for request_id in list(gated.pending.values()):
            await answers.withdraw(store, request_id, WITHDRAWN_REASON, via="gateway")
        try:
            await gated.end("ended")
        except AnfitrionError as exc:  # the store went away with the client: say so, go on
            log.warning("gateway session %s could not be saved at its end: %s", gated.id, exc)


_CLIENT: contextvars.ContextVar[_Client | None] = contextvars.ContextVar(
    "anfitrion_gateway_client", default=None)
_REQUEST: contextvars.ContextVar[ServerRequestContext[Any, Any] | None] = \
    contextvars.ContextVar("anfitrion_gateway_request", default=None)
_HELD: contextvars.ContextVar[HeldCall | None] = contextvars.ContextVar(
    "anfitrion_gateway_held_call", default=None)
"""The 2026-07-28 call being run (its upstream's questions go to its client's next round)."""
_CLIENT_STATE = "anfitrion.gateway.client"
_NAMED_STATE = "anfitrion.gateway.named"
_STANDING_STATE = "anfitrion.gateway.standing"
_PRINCIPAL_HANDLE = "anfitrion:principal"
"""The conversation of a replica's requests that name none (no connection to tell them by)."""


class Gateway:
    """An MCP server aggregating upstream servers behind anfitrion's gate.

    The gateway is a door of the session runtime (:class:`~anfitrion._runtime.Runtime`): each
    MCP client session (an HTTP ``Mcp-Session-Id``, or the stdio client of the process) is one
    durable anfitrion session, so the repeat guard, invalid-call limits, budgets, rate limits,
    taint escalation and argument provenance work exactly as in the host. When a client
    session ends, its calls still waiting for a person are withdrawn (the inbox and the CLI
    say so; approving one is refused), never left to be approved for nothing.

    Args:
        servers: the upstream servers (entered by the caller, or by :meth:`serve_stdio` /
            :meth:`serve_http`).
        store: approvals, pins, sessions, execution ledger and audit.
        policy: defaults to read → allow, write → ask.
        principal: who the gateway's callers act as.
        approval_wait: seconds a call waits for a person's answer.
        poll_interval: seconds between looks at the store while waiting.
        visible: optional filter deciding which approved tools are listed at all.
        listeners: more :class:`~anfitrion._events.HostEvent` listeners (audit is built in).
        session_id: a fixed session for the stdio client, continued across gateway restarts
            (default: a new session per client session).
        max_tool_calls: executed tool calls per client session before calls are refused.
        own_names: list the one wrapped server's tools (and prompts) under their own names,
            not ``<server>.<tool>``.
        page_size: items per page of ``tools/list``, ``prompts/list``, ``resources/list``.
        conversation_key: the key signing conversation handles and deriving session ids
            (default: ``$ANFITRION_GATEWAY_KEY``, else a key kept in the store).
        store_url: the URL *store* was opened from: the "approve it with …" hint then names
            ``--store URL`` when it is not the store ``anfitrion approvals`` finds by itself.
        listing_ttl: seconds calls are relayed on a server's last listing, unless it said
            its list changed, a pin changed or the call names a tool not offered
            (:mod:`anfitrion.mcp._listing`); ``0``: list before every call.
        adopt_within: seconds a call left waiting for a person by a gateway process that
            died is kept for its client's re-send (on any process) before its request is
            withdrawn (default: *approval_wait*).
        inbox_url: the approval inbox's address: a call waiting for a person names its page
            (``<inbox_url>/approvals/<id>``) in its task, and asks a client that supports
            URL-mode elicitation to open it (:mod:`anfitrion.mcp._gateway_tasks`).

    Raises:
        UserError: ``own_names`` with more than one server.

    Example:
        >>> async def main(config, store):  # doctest: +SKIP
        ...     async with McpServers(config, store) as servers:
        ...         await Gateway(servers, store=store).serve_stdio()
    """

    def __init__(self, servers: McpServers, *, store: Store, policy: Policy | None = None,
                 principal: Principal | str = "mcp-client", approval_wait: float = 60.0,
                 poll_interval: float = 0.25, visible: Callable[[Tool], bool] | None = None,
                 listeners: Sequence[Listener] = (), limits: GateLimits | None = None,
                 audit: bool = True, session_id: str | None = None,
                 max_tool_calls: int | None = None, own_names: bool = False,
                 page_size: int = 100, conversation_key: str | bytes | None = None,
                 store_url: str | None = None,
                 listing_ttl: float = DEFAULT_LISTING_TTL,
                 adopt_within: float | None = None,
                 inbox_url: str | None = None) -> None:
        if own_names and len(servers.toolsets) != 1:
            raise UserError(f"own names need exactly one wrapped server, not "
                            f"{len(servers.toolsets)}: with several, one server's tool could "
                            "take another's name")
        if page_size < 1:
            raise UserError("page_size must be at least 1")
        # the gateway never wraps the approval queue: refused before any server starts
        refuse_approval_queue_in(t.config for t in servers.toolsets.values())
        self.servers = servers
        for toolset in servers.toolsets.values():  # calls relayed on a fresh listing
            toolset.reuse = ListingReuse(listing_ttl)
        self.own_names = own_names
        self.page_size = page_size
        self.sessions: weakref.WeakSet[Any] = weakref.WeakSet()
        """The MCP client sessions connected now (list-changed notices go to each)."""
        self.store = store
        self._store_flag = store_flag(store_url) if store_url else ""
        self.principal = Principal.of(principal)
        self.approval_wait = approval_wait
        self.poll_interval = poll_interval
        self.inbox_url = inbox_url
        """The approval inbox's address (``gateway.inboxUrl``): links to a request's page in
        task status messages and URL-mode elicitations (none: neither names a page)."""
        self.tasks = TaskBook(store)
        self.fixed_session_id = session_id
        self._visible = visible
        self._offered_names: frozenset[str] = frozenset()
        self.runtime = Runtime(_GatewayTools(self), policy=policy,
                               approver=DeferredApprover(), store=store, listeners=listeners,
                               limits=limits, audit=audit, max_tool_calls=max_tool_calls,
                               app=GATEWAY_APP, keep_released=WARM_SESSIONS)
        self._default = _Client(self)  # calls made outside any MCP client session
        self.auth: OAuthSettings | None = None
        """``gateway.auth`` once :meth:`serve_http` serves as an OAuth resource server."""
        self._clients: set[_Client] = set()
        """The conversations in use now (their leases are kept)."""
        self._by_session: dict[str, _Client] = {}
        """Conversations in use now, by anfitrion session id (one object per process)."""
        self._conversation_key = conversation_key
        self._conversations: Conversations | None = None
        self._conversations_lock = anyio.Lock()
        self.protocol = UpstreamProtocol(self)
        self.events = InMemorySubscriptionBus()
        """What 2026-07-28 clients' ``subscriptions/listen`` streams are told: the lists'
        changes (no data: the same notice every legacy client gets)."""
        self.listen = ListenHandler(self.events, max_subscriptions=256)
        self.rounds = InputRounds(self._request_principal)
        """The 2026-07-28 calls whose upstream asked the client something
        (:mod:`anfitrion.mcp._gateway_input`)."""
        self.stateless = False
        """Serving as one of several replicas (:meth:`serve_http` with ``stateless``)."""
        self.lease_wait = 10.0
        self._drain: anyio.Event | None = None
        self.adopt_within = approval_wait if adopt_within is None else adopt_within
        self._orphans: dict[str, float] = {}
        """Requests seen waiting in a dead process's conversation: when first seen."""
        self._not_ours: set[str] = set()
        """Sessions with pending requests that are no gateway conversations (not looked at
        again)."""
        """Seconds a request waits for another gateway process to release its conversation."""
        self.instructions: str | None = None
        self._instructions_read = False
        """The approved servers' instructions, combined and shaped (:mod:`._instructions`),
        as ``initialize`` and ``server/discover`` give them; kept by :meth:`_watch_offer`."""

    async def refresh_instructions(self) -> None:
        """Combine the instructions of the servers whose pins are approved now (the store
        away: none until it answers again — never instructions nobody approved)."""
        try:
            parts = [(toolset.id, text) for toolset in self.servers.toolsets.values()
                     if (text := await approved_instructions(toolset)) is not None]
        except AnfitrionError as exc:
            log.warning("the gateway cannot read the servers' pins: %s", exc)
            self.instructions, self._instructions_read = None, False
            return
        self.instructions, self._instructions_read = combine(parts), True

    @property
    def gate(self) -> Gate:
        return self.runtime.gate

    @property
    def session_id(self) -> str | None:
        """The anfitrion session of calls made outside an MCP client session (tests, code)."""
        return self._default.gated.id if self._default.gated is not None else None

    async def _open_session(self, session_id: str | None = None,
                            principal: Principal | None = None) -> GatedSession:
        """The session *session_id* (a conversation's), continued if stored, else new; by
        default the fixed session, or a new one. *principal*: who an OAuth token says the
        caller is (``None``: the gateway's principal)."""
        who = principal or self.principal
        sid = session_id or (self.fixed_session_id if principal is None else None)
        if sid is None:
            return await self.runtime.open(who, f"gateway-{uuid.uuid4().hex[:16]}",
                                           app=GATEWAY_APP)
        while True:
            if (state := await self.runtime._row(sid)) is not None:
                if state.principal_id != who.id or state.data.get("app") != GATEWAY_APP:
                    raise UserError(f"session {sid!r} is not a gateway conversation of "
                                    f"{who.id!r}")
                return await self._take_over(sid, state)
            try:
                gated = await self.runtime.open(who, sid, app=GATEWAY_APP)
            except UserError:  # stored by another process since it was looked up: take it
                if await self.runtime._row(sid) is not None:  # over (checked above)
                    continue
                raise
            try:  # stored with its lease before any call runs: no other process opens it
                await gated.save()  # too, and a process that dies holding it is seen
                return gated
            except ConflictError:  # another process opened it at this moment: take it over
                continue

    async def _take_over(self, session_id: str, loaded: SessionState | None = None
                         ) -> GatedSession:
        """The stored conversation *session_id*, its lease taken once another process
        releases it (retried with backoff for up to :attr:`lease_wait` seconds). *loaded*:
        its state as just read (the first try looks at its lease, not at another copy)."""
        delay = 0.02
        with anyio.move_on_after(self.lease_wait):
            while True:
                before = loaded if loaded is not None else \
                    await self.runtime._row(session_id)
                loaded = None
                try:  # the lease taken with a fresh copy: *before* is not read again
                    gated = await self.runtime._resume(session_id, before, force=True)
                except ConflictError:
                    await anyio.sleep(delay)
                    delay = min(delay * 2, 0.5)
                    continue
                if before is not None and _held_by_the_dead(before, self.runtime.owner):
                    await self._unknown_after_death(session_id)
                return gated
        raise UserError(f"this conversation is in use by another gateway process for more "
                        f"than {self.lease_wait:g} seconds (a call there may wait for a "
                        "person); try again shortly")

    async def _unknown_after_death(self, session_id: str) -> None:
        """The calls of *session_id* a process that died was executing: ``claimed`` becomes
        ``unknown`` (the ledger's second claim), so a re-send of any of them — on any
        process, with any call id — is refused as an unknown outcome until a person
        resolves it (``anfitrion effects``); never run again."""
        for sid, call_id in await self.store.list_unknown_executions():
            if sid != session_id:
                continue
            entry = await self.store.execution_state(sid, call_id)
            if entry is not None and entry.state is LedgerState.CLAIMED:
                claim = await self.store.claim_execution(sid, call_id, entry.digest)
                log.warning("gateway conversation %s: call %s was executing in a process that "
                            "died; its outcome is %s", sid, call_id, claim.state.value)

    async def conversations(self) -> Conversations:
        """The conversation handles' keeper (its key read or made on first use)."""
        if self._conversations is None:
            async with self._conversations_lock:
                if self._conversations is None:
                    self._conversations = await Conversations.load(self.store,
                                                                   self._conversation_key)
        return self._conversations

    def _conversation(self, session_id: str, handle: str | None,
                      oauth: Principal | None = None) -> _Client:
        """The one object of this process for conversation *session_id*, taken by one more
        connection (no await: looked up and counted at once)."""
        client = self._by_session.get(session_id)
        if client is None:
            client = self._by_session[session_id] = _Client(self, session_id, handle, oauth)
            self._clients.add(client)
        client.connections += 1
        return client

    async def _leave(self, client: _Client) -> None:
        """A connection using *client* went (or a request of a connectionless one ended)."""
        client.connections -= 1
        if client.connections > 0:
            return
        if self._by_session.get(client.session_id or "") is client:
            del self._by_session[client.session_id or ""]
        self._clients.discard(client)
        if client.named:
            await client.release()
        else:
            await client.end()

    def current_client(self) -> _Client:
        """The conversation of the request being served (the gateway's own outside any)."""
        return _CLIENT.get() or self._default

    def own_client(self) -> _Client:
        """The gateway's own conversation: calls and records that belong to no client."""
        return self._default

    def _request_principal(self) -> str:
        """Who the request being answered is, as the sealed ``requestState`` binds it: the
        OAuth caller's issuer and id, else the gateway's principal."""
        caller = CALLER.get()
        if caller is not None:
            return principal_key(str(caller.principal.attributes.get("issuer", "")),
                                 caller.principal.id)
        return principal_key("", self.principal.id)

    def request_session(self) -> Any:
        """The MCP client session of the request being answered: the SDK makes one per
        request, and its connection's first stands for the connection (notices sent without a
        request go to the connection; a conversation may span several connections)."""
        context = _REQUEST.get()
        assert context is not None
        return context.session._connection.state.get(_STANDING_STATE) or context.session

    async def _per_client(self, ctx: ServerRequestContext[Any, Any],
                          call_next: CallNext) -> HandlerResult:
        """The SDK middleware finding each request's conversation (:class:`_Client`): the
        one its ``_meta`` names, else its connection's own (minted for it, over when the
        connection ends)."""
        connection = ctx.session._connection
        legacy = connection.protocol_version not in MODERN_PROTOCOL_VERSIONS
        per_request = self.stateless or not legacy  # no connection outlives the request
        caller = request_identity(ctx.request, self.auth)  # OAuth: who the token says
        oauth = caller.principal if caller is not None else None
        principal = oauth or self.principal
        client: _Client | None = None
        named = await self._named(ctx, per_request, oauth)
        if named is not None:
            client = named
        elif self.stateless or not legacy:  # replicas, and 2026-07-28 requests (no
            # connection to tell them by): the principal's own conversation, in the store
            named = await self._principal_conversation(principal, oauth)
            client = named
        elif legacy:  # a connection per request otherwise: the default
            client = connection.state.get(_CLIENT_STATE)
            if client is None:
                client = connection.state[_CLIENT_STATE] = await self._minted(oauth)
                connection.exit_stack.push_async_callback(self._leave, client)
            elif not _same_principal(client.principal, oauth):  # the SDK binds sessions
                raise MCPError(code=mt.INVALID_REQUEST,  # to a token's principal too
                               message="this session belongs to another principal")
        if legacy and not self.stateless:  # for the notices meant for every client
            self.sessions.add(connection.state.setdefault(_STANDING_STATE, ctx.session))
        client_token = _CLIENT.set(client)
        token = _REQUEST.set(ctx)
        caller_token = CALLER.set(caller)
        try:
            return await call_next(ctx)
        finally:
            CALLER.reset(caller_token)
            _REQUEST.reset(token)
            _CLIENT.reset(client_token)
            if named is not None and per_request:
                await self._leave(named)

    async def _named(self, ctx: ServerRequestContext[Any, Any], per_request: bool,
                     oauth: Principal | None = None) -> _Client | None:
        """The conversation the request's ``_meta`` names, taken for the request's
        connection (once per connection; *per_request*: for the request)."""
        meta = ctx.meta
        if not meta or CONVERSATION_META_KEY not in meta:
            return None
        conversations = await self.conversations()
        try:
            handle = conversations.handle_in((oauth or self.principal).id, dict(meta))
        except HandleError as exc:
            raise MCPError(code=mt.INVALID_PARAMS, message=str(exc)) from None
        assert handle is not None
        session_id = conversations.session_id((oauth or self.principal).id, handle)
        connection = ctx.session._connection
        taken: dict[str, _Client] = connection.state.setdefault(_NAMED_STATE, {})
        if not per_request and session_id in taken:
            return taken[session_id]
        client = self._conversation(session_id, handle, oauth)
        client.named = True
        if not per_request:
            taken[session_id] = client
            connection.exit_stack.push_async_callback(self._leave, client)
        return client

    async def _principal_conversation(self, principal: Principal,
                                      oauth: Principal | None) -> _Client:
        """The conversation of a principal's requests that name none and have no connection
        to tell them by (2026-07-28 requests, a replica's): stored, continued by each request
        (the fixed session, for the gateway's own principal, when there is one)."""
        if self.fixed_session_id is not None and oauth is None:
            client = self._conversation(self.fixed_session_id, None)
        else:
            conversations = await self.conversations()
            client = self._conversation(
                conversations.session_id(principal.id, _PRINCIPAL_HANDLE), None, oauth)
        client.named = True
        return client

    async def _minted(self, oauth: Principal | None = None) -> _Client:
        """A connection's own conversation: a minted handle (or the fixed session, for the
        gateway's own principal)."""
        if self.fixed_session_id is not None and oauth is None:
            return self._conversation(self.fixed_session_id, None)
        who = (oauth or self.principal).id
        conversations = await self.conversations()
        handle = conversations.mint(who)
        return self._conversation(conversations.session_id(who, handle), handle, oauth)

    async def _watch_offer(self, interval: float = 0.5) -> None:
        """Tell every connected client ``notifications/tools/list_changed`` within
        *interval* of a tool's approval, revocation or definition change in the store (by
        ``anfitrion mcp approve`` in any process), and list the servers afresh."""
        last: str | None = None
        while True:
            try:
                pins = await self.store.list_records(PIN_NAMESPACE)
            except AnfitrionError as exc:  # the store is away for now: try again later
                log.warning("the gateway cannot read the pins: %s", exc)
            else:
                now = digest(sorted([key, p.get("approved_digest"), p.get("seen_digest"),
                                     bool(p.get("changed_since_approval"))]
                                    for key, p in pins))
                if last is not None and now != last:
                    self.servers.mark_stale()
                    await self.tools_changed()
                if now != last or not self._instructions_read:
                    await self.refresh_instructions()
                last = now
            await anyio.sleep(interval)

    @property
    def draining(self) -> anyio.Event:
        """Set when the process shuts down gracefully (SIGTERM): ``/readyz`` answers 503 and
        the calls waiting for a person hand over (:meth:`_answered`)."""
        if self._drain is None:
            self._drain = anyio.Event()
        return self._drain

    async def ready(self) -> str | None:
        """``None`` when this process can serve calls (its store answers), else why not
        (``GET /readyz``): draining, or the store."""
        if self.draining.is_set():
            return "draining: this gateway process is shutting down"
        try:
            with anyio.fail_after(5):
                await self.store.get_record("gateway", "ready")
        except TimeoutError:
            return "the store did not answer within 5 seconds"
        except Exception as exc:  # noqa: BLE001 - any failure of the store: not ready
            return f"the store failed ({type(exc).__name__})"
        return None

    async def tools_changed(self) -> None:
        """``notifications/tools/list_changed`` to every client connected now (and every
        2026-07-28 ``subscriptions/listen`` stream asking for it)."""
        for session in list(self.sessions):
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                await session.send_notification(mt.ToolListChangedNotification())
        await self.events.publish(ToolsListChanged())

    async def _keep_leases(self) -> None:
        """Renew the leases of the conversations in use here; and now and then withdraw
        what dead gateway processes left waiting (:meth:`withdraw_orphans`)."""
        renew_every = self.runtime.lease_seconds / 3
        sweep_every = min(5.0, max(self.adopt_within / 2, 0.5))
        renewed = swept = time.monotonic()
        while True:
            await anyio.sleep(min(renew_every, sweep_every))
            now = time.monotonic()
            if now - renewed >= renew_every:
                renewed = now
                for client in list(self._clients):
                    if client.gated is not None:
                        await client.gated.renew()
            if now - swept >= sweep_every:
                swept = now
                try:
                    await self.withdraw_orphans()
                except AnfitrionError as exc:  # the store is away: the next sweep
                    log.warning("the gateway cannot look for orphaned requests: %s", exc)

    async def withdraw_orphans(self) -> list[str]:
        """Withdraw the requests a gateway process that died left waiting for a person,
        once :attr:`adopt_within` seconds passed (from when this process first saw them)
        without the client sending the call again: never left approvable for nothing. A
        re-send within that time continues the request instead (:meth:`_take_over`). The ids
        withdrawn."""
        withdrawn: list[str] = []
        now = time.monotonic()
        waiting = await self.store.list_approvals()
        for request_id in set(self._orphans) - {r.id for r in waiting}:
            del self._orphans[request_id]
        for request in waiting:
            if request.session_id in self._not_ours:
                continue
            state = await self.store.load_session(request.session_id)
            if state is not None and state.data.get("app") != GATEWAY_APP:
                self._not_ours.add(request.session_id)
            if state is None or state.data.get("app") != GATEWAY_APP or \
                    not _held_by_the_dead(state, self.runtime.owner):
                self._orphans.pop(request.id, None)
                continue
            if now - self._orphans.setdefault(request.id, now) >= self.adopt_within and \
                    await self._withdraw_orphaned(state, request.id):
                withdrawn.append(request.id)
        return withdrawn

    async def _withdraw_orphaned(self, state: SessionState, request_id: str) -> bool:
        """Take the dead process's conversation (as this process's one object for it, so
        no request here opens it twice) and withdraw *request_id* — unless someone took the
        conversation meanwhile (a re-send adopted it: its version moved)."""
        who = None if state.principal_id == self.principal.id else \
            Principal(state.principal_id)
        client = self._conversation(state.session_id, None, who)
        client.named = True  # released after, not ended: the client may come back
        try:
            gated = await client.session()
            if gated.session.version != state.version + 1:
                return False
            reason = ORPHANED_REASON.format(seconds=self.adopt_within)
            return await answers.withdraw(self.store, request_id, reason, via="gateway")
        finally:
            await self._leave(client)

    def _upstream_tool(self, tool: Tool) -> mt.Tool | None:
        if not isinstance(tool, McpTool) or tool.server not in self.servers.toolsets:
            return None
        listed = self.servers.toolsets[tool.server]._upstream
        return next((t for t in listed if t.name == tool.upstream_name), None)

    def outside_name(self, tool: Tool) -> str:
        """The name a client sees: the server's own (``own_names``) or ``<server>.<tool>``."""
        if self.own_names and isinstance(tool, McpTool):
            return tool.upstream_name
        return tool.name

    def inside_name(self, name: str) -> str:
        """The gate's name for a name a client called."""
        if self.own_names:
            (server,) = self.servers.toolsets
            return f"{server}.{name}"
        return name

    async def offered(self) -> dict[str, Tool]:
        """The tools callers may see and call now."""
        return await self.runtime.offered((await self.current_client().session()).session)

    async def close(self) -> None:
        """End the calls made outside an MCP client session (withdrawing what waits)."""
        await self._default.end()

    # -- MCP handlers ----------------------------------------------------------------------

    async def list_tools(self) -> list[mt.Tool]:
        """``tools/list``: approved, pinned, visible tools, with their pinned ``title``,
        ``outputSchema`` and ``execution``; annotations as :func:`listed_tool` says."""
        listed = []
        for tool in (await self.offered()).values():
            server = self.servers.toolsets.get(tool.server) if isinstance(tool, McpTool) \
                else None
            listed.append(listed_tool(self.outside_name(tool), tool, self._upstream_tool(tool),
                                      trusted=server is not None and server.config.trusted))
        return listed

    def _relaying(self, server: str) -> UpstreamCall | None:
        """What the upstream call made for the request being answered relays to its client:
        progress (if the client asked for it), log messages, sampling and elicitation."""
        context = _REQUEST.get()
        if context is None:
            return None
        session, request_id = context.session, context.request_id
        client = self.current_client()

        held = _HELD.get()

        async def progress(progress: float, total: float | None, message: str | None) -> None:
            # to the caller's progress token, if it gave one (else nothing is sent)
            if held is not None and held.round > 0:
                return  # the request that started the call was answered (input_required)
            shown = reveal_hidden(message)[0] if message is not None else None
            await session.report_progress(progress, total, shown)

        async def log_message(params: mt.LoggingMessageNotificationParams) -> None:
            if held is not None and held.round > 0:
                return  # as progress
            wanted = client.log_level
            if wanted is not None and LOG_LEVELS.index(params.level) < LOG_LEVELS.index(wanted):
                return
            data = _reveal_in_value(params.data, [])
            logger = params.logger
            if not self.own_names:
                logger = server + (f"/{params.logger}" if params.logger else "")
            await session.send_notification(mt.LoggingMessageNotification(
                params=mt.LoggingMessageNotificationParams(level=params.level, data=data,
                                                           logger=logger)),
                related_request_id=request_id)

        async def request(method: str, params: Any) -> Any:
            return await self.protocol.relay(server, method, params, session, request_id,
                                             client, ask=held.ask if held else None)

        return UpstreamCall(progress=progress, log=log_message, request=request)

    async def call_tool(self, name: str, arguments: Mapping[str, Any] | None
                        ) -> mt.CallToolResult | dict[str, Any]:
        """``tools/call``: through the gate, waiting a while for a person if it must."""
        arguments = dict(arguments or {})
        name = self.inside_name(name)
        relay = self._relaying(name.partition(".")[0])
        token = UPSTREAM_CALL.set(relay)
        upstream: list[tuple[str, tuple[str, ...]]] = []
        scopes = UPSTREAM_SCOPES.set(upstream)  # OAuth: the upstream tokens' scopes, audited
        identity = CALL_IDENTITY.set(call_identity(CALLER.get(), upstream))  # every record's
        fresh = f"mcp-{uuid.uuid4().hex}"
        try:
            try:
                return await self._call_tool(name, arguments, relay, fresh)
            except ConflictError:
                # another process took the conversation and saved it meanwhile (this one's
                # lease lapsed): take it back with what that process stored, and run the call
                # again under the same call id, once — the ledger answers a write that ran
                # with its stored result, never a second run; a read runs again, its result
                # recorded in the state it goes on from
                log.warning("gateway conversation changed by another process: call %s "
                            "retried on the stored state", fresh)
                return await self._call_tool(name, arguments, relay, fresh)
        finally:
            CALL_IDENTITY.reset(identity)
            UPSTREAM_SCOPES.reset(scopes)
            UPSTREAM_CALL.reset(token)

    async def _call_tool(self, name: str, arguments: dict[str, Any],
                         relay: UpstreamCall | None, fresh: str
                         ) -> mt.CallToolResult | dict[str, Any]:
        if name not in self._offered_names:  # a tool added since the last listing?
            self.servers.mark_stale()
        client = self.current_client()
        gated = await client.session()
        try:
            return await self._through_gate(client, gated, name, arguments, relay, fresh)
        except ConflictError:  # saved by another process: not this object's to save again
            await client.lost(gated)
            raise

    async def _through_gate(self, client: _Client, gated: GatedSession, name: str,
                            arguments: dict[str, Any], relay: UpstreamCall | None,
                            fresh: str) -> mt.CallToolResult | dict[str, Any]:
        key = digest({"tool": name, "arguments": arguments})
        # a call repeated after its approval was given carries the call id it is bound to
        retry = gated.session.retry_of(name, key)
        if retry is not None and self._tasks_declared():  # a re-send joins its task
            task = await self.tasks.for_call(gated.id, retry, self._caller_principal())
            if task is not None and not task.terminal and task.bound_to(name, arguments):
                return task.created()
        call_id = retry or fresh
        try:
            outcome = await gated.submit(name, arguments, call_id)
            if outcome.status is SubmissionStatus.WAITING and outcome.request is not None:
                request = outcome.request
                # remembered (in the store) before waiting: a re-send reaching another
                # process, or this one after a reconnect, continues this very request
                gated.session.remember_retry(name, key, call_id)
                await gated.save()
                if self._tasks_declared():  # the client polls a task: nothing to wait for
                    task = await self.tasks.create(
                        principal=self._caller_principal(), session_id=gated.id,
                        handle=client.handle if client.named else None, tool=name,
                        arguments=arguments, call_id=call_id, request_id=request.id,
                        message=self._waiting_message(name, key, request.id),
                        expires_at=request.expires_at)
                    return task.created()
                asked = self._ask_in_band(request.id, name, key)
                if asked is not None:  # 2026-07-28: open the page, then send the call again
                    return asked
                if await self._await_person(request.id, name, key):
                    self.servers.mark_stale()  # what a person approved: offered afresh
                    outcome = await gated.submit(name, arguments, call_id)
                if outcome.status is SubmissionStatus.WAITING and self.draining.is_set():
                    return _text_result(_handed_over(name, request.id, client.named),
                                        is_error=True)
                if outcome.status is SubmissionStatus.WAITING:
                    return _text_result(
                        f"{name} needs a person's approval and none came within "
                        f"{self.approval_wait:g} seconds. Nothing was run. Approve it with "
                        f"`anfitrion approvals approve {request.id}{self._store_flag}` (or in "
                        "the approval inbox), then call the tool again with the same arguments. "
                        "The request expires at "
                        f"{request.expires_at.isoformat(timespec='seconds')}.",
                        is_error=True)
            if gated.session.retry_of(name, key) is not None:
                gated.session.forget_retry(name, key)
                await gated.save()
        finally:
            await self.runtime.flush()  # every call's records are stored when it returns
        return self._finished(outcome.result, name, relay)

    def _finished(self, result: ToolResult | None, name: str,
                  relay: UpstreamCall | None) -> mt.CallToolResult:
        assert result is not None
        server = self.servers.toolsets.get(name.partition(".")[0])
        if not result.is_error and relay is not None and relay.results and server is not None:
            # what the gate shaped as text, sent as the server sent it (shaped alike)
            return forward_result(relay.results[-1], server.config.max_result_chars)
        return self._to_mcp(result, name)

    async def _held_call(self, held: HeldCall | None, name: str,
                         arguments: Mapping[str, Any] | None
                         ) -> mt.CallToolResult | dict[str, Any]:
        """A 2026-07-28 client's call, run in the gateway's task group: its upstream's
        questions go to :meth:`HeldCall.ask` (the client's next ``input_required``), and its
        conversation stays taken until it ends."""
        client = _CLIENT.get()  # a 2026-07-28 request's conversation (never the default)
        if client is not None:
            client.connections += 1
        token = _HELD.set(held)
        try:
            return await self.call_tool(name, arguments)
        finally:
            _HELD.reset(token)
            if client is not None:
                await self._leave(client)

    async def _answered(self, request_id: str) -> bool:
        """Whether a person answered within :attr:`approval_wait` (woken by the store's
        notification on PostgreSQL, wherever the answer was given; else polled) — or, once
        the process drains, whether one was given by then: the wait ends at once, and the
        call is handed over (its request stays pending, its conversation is released when
        the request ends; the client's re-send continues it on any process)."""
        answered = False

        async def wait() -> None:
            nonlocal answered
            answered = await answers.wait_for_answer(self.store, request_id,
                                                     timeout=self.approval_wait,
                                                     poll=self.poll_interval)
            tg.cancel_scope.cancel()

        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            await self.draining.wait()
            tg.cancel_scope.cancel()
        if not answered and self.draining.is_set():  # an answer given as the drain began
            found = await self.store.get_approval(request_id)
            answered = found is not None and found.answer is not None
        return answered

    async def _drain_on_signal(self, server: Any, drain_seconds: float) -> None:
        """SIGTERM (or Ctrl-C): drain — ``/readyz`` 503 and waiting calls handed over at
        once; requests keep being served for *drain_seconds* (the load balancer's checks
        see the 503 meanwhile); then the server stops listening and gives the requests still
        open up to 5 seconds (uvicorn's graceful shutdown)."""
        while not server.drain_asked:  # set in a signal handler: looked at, not awaited
            await anyio.sleep(0.1)
        log.warning("anfitrion gateway: draining for %g seconds, then stopping",
                    drain_seconds)
        self.draining.set()
        await anyio.sleep(drain_seconds)
        server.should_exit = True

    # -- approvals in-band (:mod:`._gateway_tasks`) ----------------------------------------

    def _caller_principal(self) -> Principal:
        """Who the request being answered is from (its OAuth identity, else the gateway's)."""
        caller = CALLER.get()
        return (caller.principal if caller is not None else None) or self.principal

    def _capabilities(self) -> mt.ClientCapabilities | None:
        context = _REQUEST.get()
        return context.session.client_capabilities if context is not None else None

    def _tasks_declared(self) -> bool:
        """Whether the request comes from a 2026-07-28 client declaring the Tasks extension
        (for its connection, or in this request's ``_meta``): only such a client is given a
        task (an older revision has no wire for the extension's result)."""
        context = _REQUEST.get()
        if context is None or context.session.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            return False
        capabilities = self._capabilities()
        return bool(capabilities is not None and capabilities.extensions is not None
                    and TASKS_EXTENSION in capabilities.extensions)

    def _waiting_message(self, name: str, key: str, request_id: str) -> str:
        link = approval_link(self.inbox_url, request_id)
        where = f" in the inbox: {link}" if link else (
            f" with `anfitrion approvals approve {request_id}{self._store_flag}` or in the "
            "approval inbox")
        return (f"waiting for a person to approve {self.outside_name_of(name)} "
                f"(call digest {key[:16]}, approval request {request_id}){where}. Nothing "
                "has run; the task completes with the call's result after the approval.")

    def outside_name_of(self, name: str) -> str:
        """The client's name for the gate's tool name *name*."""
        if self.own_names:
            return name.partition(".")[2] or name
        return name

    def _ask_in_band(self, request_id: str, name: str, key: str) -> dict[str, Any] | None:
        """For a 2026-07-28 client with URL-mode elicitation (and an inbox): on the first
        round, ``input_required`` asking it to open this request's inbox page, keyed by the
        request (``None``: no such client, or it answered for this request already, so the
        call waits). An answer keyed by another request — a URL for another call or other
        arguments — is not this request's: the client is asked again for this one."""
        link = approval_link(self.inbox_url, request_id)
        context = _REQUEST.get()
        capabilities = self._capabilities()
        if (link is None or context is None
                or context.session.protocol_version not in MODERN_PROTOCOL_VERSIONS
                or capabilities is None or capabilities.elicitation is None
                or capabilities.elicitation.url is None):
            return None
        params = context.params if isinstance(context.params, Mapping) else {}
        responses = params.get("inputResponses")
        if isinstance(responses, Mapping) and _approval_key(request_id) in responses:
            return None
        asking = mt.ElicitRequest(params=mt.ElicitRequestURLParams(
            message=self._open_page_message(name, key), url=link))
        return mt.InputRequiredResult(input_requests={_approval_key(request_id): asking}
                                      ).model_dump(by_alias=True, mode="json",
                                                   exclude_none=True)

    def _open_page_message(self, name: str, key: str) -> str:
        return (f"A person must approve {self.outside_name_of(name)} (call digest {key[:16]}) "
                "in the approval inbox. Open the page to review the call; it runs once it is "
                "approved there.")

    def _declined_in_band(self, request_id: str) -> bool:
        """Whether the 2026-07-28 client answered this request's URL elicitation with
        ``decline`` or ``cancel`` (the person will not go: no wait)."""
        context = _REQUEST.get()
        params = context.params if context is not None and isinstance(
            context.params, Mapping) else {}
        responses = params.get("inputResponses")
        reply = responses.get(_approval_key(request_id)) if isinstance(
            responses, Mapping) else None
        return isinstance(reply, Mapping) and reply.get("action") in ("decline", "cancel")

    async def _await_person(self, request_id: str, name: str, key: str) -> bool:
        """Wait for the answer; a client that supports URL-mode elicitation (before
        2026-07-28) is asked meanwhile to open the inbox page of this very request. Its reply
        is never an approval: only the person's answer in the inbox (or any door) is. A
        client that declines or cancels ends the wait early."""
        link = approval_link(self.inbox_url, request_id)
        context = _REQUEST.get()
        capabilities = self._capabilities()
        if self._declined_in_band(request_id):
            return False
        if (link is None or context is None or capabilities is None
                or capabilities.elicitation is None or capabilities.elicitation.url is None
                or context.session.protocol_version in MODERN_PROTOCOL_VERSIONS):
            return await self._answered(request_id)
        elicitation_id = f"anfitrion-approval-{request_id}"
        answered = False
        async with anyio.create_task_group() as tg:
            async def ask() -> None:
                try:
                    reply = await context.session.elicit_url(
                        self._open_page_message(name, key), link, elicitation_id,
                        related_request_id=context.request_id)
                except Exception as exc:  # noqa: BLE001 - a client's failure ends nothing
                    log.info("the client could not be asked to open the inbox: %s", exc)
                    return
                if reply.action != "accept":  # the person will not go: stop waiting
                    tg.cancel_scope.cancel()

            tg.start_soon(ask)
            answered = await self._answered(request_id)
            tg.cancel_scope.cancel()
        if answered:
            with contextlib.suppress(Exception):
                await context.session.send_notification(
                    mt.ElicitCompleteNotification(params=mt.ElicitCompleteNotificationParams(
                        elicitation_id=elicitation_id)),
                    related_request_id=context.request_id)
        return answered

    async def task_get(self, task_id: str) -> dict[str, Any]:
        """``tasks/get``: the caller's task; the approved call run (once) when answered."""
        principal = self._caller_principal()
        task = await self.tasks.load(task_id, principal)
        if task is None:
            raise MCPError(code=mt.INVALID_PARAMS, message="no such task")
        if task.terminal:
            return task.detailed()
        found = await self.store.get_approval(task.request_id)
        if found is not None and found.answer is None and not found.request.expired():
            return task.detailed()
        async with self.tasks.lock(task.id):
            task = await self.tasks.load(task_id, principal) or task
            if not task.terminal:
                task = await self._complete(task, principal)
        return task.detailed()

    async def _complete(self, task: GatewayTask, principal: Principal) -> GatewayTask:
        """The answered task's call, resumed in its own conversation (same call id: the gate
        runs it at most once), and the task's end recorded."""
        found = await self.store.get_approval(task.request_id)
        if found is None:
            return await self.tasks.update(task, status="failed", message="",
                                           error={"code": mt.INTERNAL_ERROR,
                                                  "message": "the approval request is gone"})
        request, given = found.request, found.answer
        if (request.session_id != task.session_id or request.tool_name != task.tool
                or not (task.bound_to(request.tool_name, request.arguments)
                        or request.edit_of is not None)):
            # never run a call other than the one the person was shown (or edited to)
            return await self.tasks.update(task, status="failed", message="", error={
                "code": mt.INVALID_PARAMS,
                "message": "the task does not match its approval request: nothing was run"})
        if given is not None and given.withdrawn:
            return await self.tasks.update(task, status="cancelled",
                                           message=f"withdrawn: {given.note}", error=None)
        fresh = task.session_id not in self._by_session  # not in use here: continued from
        client = self._conversation(task.session_id, task.handle,  # the store, left there
                                    principal if principal is not self.principal else None)
        if fresh:
            client.named = True
        token = _CLIENT.set(client)
        relay = self._relaying(task.tool.partition(".")[0])
        relay_token = UPSTREAM_CALL.set(relay)
        try:
            gated = await client.session()
            outcome = await gated.submit(task.tool, dict(task.arguments), task.call_id)
            if outcome.status is SubmissionStatus.WAITING and outcome.request is not None:
                # an edit became a new proposal that waits for a person in turn
                return await self.tasks.update(
                    task, request_id=outcome.request.id,
                    message=self._waiting_message(task.tool, task.digest, outcome.request.id))
            if gated.session.retry_of(task.tool, task.digest) is not None:
                gated.session.forget_retry(task.tool, task.digest)
            await gated.save()
        finally:
            UPSTREAM_CALL.reset(relay_token)
            _CLIENT.reset(token)
            await self.runtime.flush()
            await self._leave(client)
        if given is not None and not given.approved and given.edited_arguments is None:
            return await self.tasks.update(task, status="failed", message="", error={
                "code": mt.INVALID_REQUEST,
                "message": f"declined by a person: {given.note or '(no note)'}"})
        if given is None:  # expired unanswered: the gate refused it
            return await self.tasks.update(task, status="failed", message="", error={
                "code": mt.INVALID_REQUEST,
                "message": "the approval request expired without an answer: nothing was run"})
        result = self._finished(outcome.result, task.tool, relay)
        return await self.tasks.update(
            task, status="completed", message="",
            result=result.model_dump(by_alias=True, mode="json", exclude_none=True))

    async def task_cancel(self, task_id: str) -> dict[str, Any]:
        """``tasks/cancel``: the approval request withdrawn (the call never runs); an empty
        acknowledgement, also for a task that ended already."""
        principal = self._caller_principal()
        task = await self.tasks.load(task_id, principal)
        if task is None:
            raise MCPError(code=mt.INVALID_PARAMS, message="no such task")
        async with self.tasks.lock(task.id):
            task = await self.tasks.load(task_id, principal) or task
            if not task.terminal:
                reason = "the client cancelled the task"
                if await answers.withdraw(self.store, task.request_id, reason, via="gateway"):
                    await self.tasks.update(task, status="cancelled", message=reason)
                else:  # answered meanwhile: the next tasks/get finishes it as answered
                    pass
        return {}

    def _require_tasks(self) -> None:
        if not self._tasks_declared():
            raise MCPError(code=mt.MISSING_REQUIRED_CLIENT_CAPABILITY,
                           message="the client did not declare the tasks extension",
                           data={"requiredCapabilities": {
                               "extensions": {TASKS_EXTENSION: {}}}})

    def _to_mcp(self, result: ToolResult, name: str) -> mt.CallToolResult:
        """The gate's result as text (refused; executed outside a client's request; or an
        effect's stored result: "not run again"). A tool with an ``outputSchema`` must answer
        with structured content: the stored object (after the notice line) goes with it, and
        a stored text that is no object goes as an error result (the client refuses a
        success without the structured content)."""
        server, _, upstream_name = name.partition(".")
        toolset = self.servers.toolsets.get(server)
        listed = toolset._upstream if toolset is not None else ()
        upstream = next((t for t in listed if t.name == upstream_name), None)
        if result.is_error or upstream is None or upstream.output_schema is None:
            return _text_result(result.content, is_error=result.is_error)
        text = result.content
        stored = text.partition("\n")[2] if text.startswith("[not run again") else text
        try:
            structured = json.loads(stored)
        except ValueError:
            structured = None
        if not isinstance(structured, dict):  # e.g. a person's resolution of an unknown
            # outcome: no structured content to give, and a client checks it for a tool with
            # an outputSchema unless the result is an error — said as one, with the text
            return _text_result(result.content, is_error=True)
        return mt.CallToolResult(content=[mt.TextContent(type="text", text=result.content)],
                                 structured_content=structured, is_error=False)

    # -- transports ------------------------------------------------------------------------

    def build_server(self) -> Server[Any]:
        """The MCP SDK server object with the gateway's handlers.

        A client that listed the tools is sent ``notifications/tools/list_changed`` when a call
        finds the offered set different (a tool blocked, approved, or its server gone).
        """
        server: Server[Any] = _GatewayServer("anfitrion-gateway", version=__version__,
                                             gateway=self)
        listed: weakref.WeakKeyDictionary[Any, frozenset[str]] = weakref.WeakKeyDictionary()

        async def _list(ctx: ServerRequestContext[Any, Any],
                        params: mt.PaginatedRequestParams) -> mt.ListToolsResult:
            cursor = params.cursor
            if cursor is None:
                self.servers.mark_stale()  # a client that asks for the list gets a fresh one
            tools = await self.list_tools()
            listed[self.request_session()] = self._offered_names
            items, next_cursor = page(tools, cursor, self.page_size)
            return mt.ListToolsResult(tools=items, next_cursor=next_cursor)

        server.add_request_handler("tools/list", mt.PaginatedRequestParams, _list)
        self._add_protocol_handlers(server)

        # the gate validates arguments itself, strictly, against the pinned schema
        async def _call(ctx: ServerRequestContext[Any, Any], params: mt.CallToolRequestParams
                        ) -> mt.CallToolResult | mt.InputRequiredResult | dict[str, Any]:
            meta = ctx.meta
            with extracted_context(dict(meta) if meta else None):  # the client's trace
                if is_modern(ctx):  # an upstream's question: input_required, in rounds
                    outcome = await self.rounds.call(params, partial(
                        self._held_call, name=params.name, arguments=params.arguments))
                    if isinstance(outcome, mt.InputRequiredResult):
                        return outcome
                    result = outcome
                else:
                    result = await self.call_tool(params.name, params.arguments)  # goes on
            handle = self.current_client().handle
            if isinstance(result, dict):  # a task (the Tasks extension's own shape)
                return result
            if handle is not None:  # the conversation to name when reconnecting
                result = result.model_copy(update={
                    "meta": {**(result.meta or {}), CONVERSATION_META_KEY: handle}})
            session = self.request_session()
            before = listed.get(session)
            if before is not None and before != self._offered_names:
                listed[session] = self._offered_names
                # on the call's own stream, so it reaches the client before the result
                await ctx.session.send_notification(mt.ToolListChangedNotification(),
                                                    related_request_id=ctx.request_id)
            return result

        server.add_request_handler("tools/call", mt.CallToolRequestParams, _call)
        # 2026-07-28: the lists' changes on a stream the client opens (the SDK's handler)
        server.add_request_handler("subscriptions/listen", mt.SubscriptionsListenRequestParams,
                                   self.listen)

        self._add_task_handlers(server)
        return server

    def _add_protocol_handlers(self, server: Server[Any]) -> None:
        """Resources, prompts, completion and logging: relayed by :class:`UpstreamProtocol`."""
        protocol = self.protocol
        # method: (the SDK's params type, the request the protocol's handler takes, handler)
        handlers: dict[str, tuple[type[Any], type[Any], Callable[[Any], Any]]] = {
            "resources/list": (mt.PaginatedRequestParams, mt.ListResourcesRequest,
                               protocol.list_resources),
            "resources/templates/list": (mt.PaginatedRequestParams,
                                         mt.ListResourceTemplatesRequest,
                                         protocol.list_templates),
            "resources/read": (mt.ReadResourceRequestParams, mt.ReadResourceRequest,
                               protocol.read_resource),
            "resources/subscribe": (mt.SubscribeRequestParams, mt.SubscribeRequest,
                                    protocol.subscribe),
            "resources/unsubscribe": (mt.UnsubscribeRequestParams, mt.UnsubscribeRequest,
                                      protocol.subscribe),
            "prompts/list": (mt.PaginatedRequestParams, mt.ListPromptsRequest,
                             protocol.list_prompts),
            "prompts/get": (mt.GetPromptRequestParams, mt.GetPromptRequest,
                            protocol.get_prompt),
            "completion/complete": (mt.CompleteRequestParams, mt.CompleteRequest,
                                    protocol.complete),
            "logging/setLevel": (mt.SetLevelRequestParams, mt.SetLevelRequest,
                                 protocol.set_level),
        }
        for method, (params_type, request_type, handler) in handlers.items():
            server.add_request_handler(method, params_type, _as_request(request_type, handler))

    def _add_task_handlers(self, server: Server[Any]) -> None:
        """The Tasks extension (SEP-2663): calls waiting for a person (:mod:`._gateway_tasks`)."""
        async def _task_get(ctx: ServerRequestContext[Any, Any],
                            params: mt.GetTaskRequestParams) -> dict[str, Any]:
            self._require_tasks()
            return await self.task_get(params.task_id)

        async def _task_cancel(ctx: ServerRequestContext[Any, Any],
                               params: mt.CancelTaskRequestParams) -> dict[str, Any]:
            self._require_tasks()
            return await self.task_cancel(params.task_id)

        async def _task_update(ctx: ServerRequestContext[Any, Any],
                               params: _TaskUpdateParams) -> dict[str, Any]:
            self._require_tasks()
            if await self.tasks.load(params.task_id, self._caller_principal()) is None:
                raise MCPError(code=mt.INVALID_PARAMS, message="no such task")
            raise MCPError(code=mt.INVALID_PARAMS,
                           message="this task asks for no input: a person answers it in the "
                                   "approval inbox")

        server.extensions[TASKS_EXTENSION] = {}
        server.add_request_handler("tasks/get", mt.GetTaskRequestParams, _task_get)
        server.add_request_handler("tasks/cancel", mt.CancelTaskRequestParams, _task_cancel)
        server.add_request_handler("tasks/update", _TaskUpdateParams, _task_update)

    async def serve_stdio(self, *, drain_seconds: float = 2.0) -> None:
        """Serve one MCP client on this process's stdin and stdout.

        SIGTERM (or Ctrl-C) drains as over HTTP: the calls waiting for a person stop waiting
        and are answered at once (nothing run), the calls running get *drain_seconds* to
        finish and be answered, then the session ends (a second signal ends it at once).
        """
        server = self.build_server()
        await self.refresh_instructions()
        async with stdio_server() as (read, write), anyio.create_task_group() as tg:
            tg.start_soon(self._keep_leases)
            tg.start_soon(self._watch_offer)
            self.rounds.tasks = tg
            with anyio.CancelScope() as serving:
                tg.start_soon(self._drain_stdio_on_signal, serving, drain_seconds)
                try:
                    await server.run(read, write, server.create_initialization_options())
                finally:
                    self.rounds.tasks = None
            tg.cancel_scope.cancel()

    async def _drain_stdio_on_signal(self, serving: anyio.CancelScope,
                                     drain_seconds: float) -> None:
        """The first SIGTERM or SIGINT: drain (:attr:`draining`), then end *serving* after
        *drain_seconds*, or at the next signal."""
        with contextlib.ExitStack() as stack:
            try:
                signals = stack.enter_context(
                    anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT))
            except (NotImplementedError, RuntimeError, ValueError):  # no signals here
                return  # (Windows, a thread other than the main one): the default stays
            async for _ in signals:
                log.warning("anfitrion gateway: draining for %g seconds, then stopping",
                            drain_seconds)
                self.draining.set()
                with anyio.move_on_after(drain_seconds):
                    async for _ in signals:
                        break
                break
        serving.cancel()

    def http_app(self, manager: StreamableHTTPSessionManager, *, token: str | None, port: int,
                 allowed_origins: Iterable[str] = (), max_body_bytes: int = 1024 * 1024,
                 auth: OAuthSettings | None = None) -> HttpGuard:
        """The guarded ASGI app serving the MCP endpoint at ``/mcp`` (and, with *auth*, its
        Protected Resource Metadata)."""
        async def endpoint(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope.get("path", "").rstrip("/") != "/mcp":
                await respond(send, 404, b"not found: the MCP endpoint is /mcp")
                return
            await manager.handle_request(scope, receive, send)

        hosts = {f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"}
        oauth = None
        if auth is not None:
            self.auth = auth
            oauth = self.oauth_resource(auth, port)
            hosts.add(urlsplit(oauth.resource).netloc)  # behind a proxy: the public name
        return HttpGuard(endpoint, token=token, allowed_hosts=hosts,
                         allowed_origins=allowed_origins, max_body_bytes=max_body_bytes,
                         oauth=oauth, on_throttled=self._audit_throttled)

    async def _audit_throttled(self, data: Mapping[str, Any]) -> None:
        """A client starting to be throttled for wrong bearer tokens (once per episode)."""
        try:
            await self.store.append_audit(THROTTLED_AUDIT, "gateway-auth", time.time(), data)
        except AnfitrionError as exc:
            log.warning("a throttled client could not be audited: %s", exc)

    # -- OAuth (gateway.auth) ---------------------------------------------------------------

    def oauth_resource(self, auth: OAuthSettings, port: int) -> OAuthResource:
        """The resource server's checks, each refusal audited (``gateway.auth_refused``)."""
        async def audit(data: Mapping[str, Any]) -> None:
            try:
                await self.store.append_audit(REFUSED_AUDIT, "gateway-auth", time.time(), data)
            except AnfitrionError as exc:
                log.warning("a refused request could not be audited: %s", exc)

        return OAuthResource(auth, auth.resource or f"http://127.0.0.1:{port}/mcp",
                             on_refused=audit)

    # -- end OAuth ---------------------------------------------------------------------------

    async def serve_http(self, *, token: str | None = None, host: str = "127.0.0.1",
                         port: int = 8765, allowed_origins: Iterable[str] = (),
                         max_body_bytes: int = 1024 * 1024,
                         sock: socket.socket | None = None,
                         started: Callable[[int], None] | None = None,
                         stop: anyio.Event | None = None, stateless: bool = False,
                         auth: OAuthSettings | None = None,
                         drain_seconds: float = 2.0) -> None:
        """Serve streamable HTTP at ``http://HOST:PORT/mcp`` until *stop* is set (or a signal).

        *stateless*: serve as one of several replicas behind a load balancer without
        affinity — no transport session (``Mcp-Session-Id``) lives in this process; each
        request finds its conversation in the store (the one its ``_meta`` names, else the
        principal's), taking its lease for the request and releasing it after.

        Args:
            token: the static bearer token every request must carry (local use), unless
                *auth* is given.
            auth: serve as an OAuth 2.1 resource server (``gateway.auth``): each request's
                access token is checked and its subject is the call's principal.
            sock: an already bound socket (its port is used).
            started: called with the port once the server listens.
            stop: set it to shut down gracefully (open requests get up to 5 seconds).
            drain_seconds: after SIGTERM or Ctrl-C, seconds to keep serving with
                ``/readyz`` answering 503 before the server stops listening; calls waiting
                for a person are handed over at once (a second signal stops at once).
        """
        import uvicorn

        if host not in ("127.0.0.1", "::1", "localhost"):
            raise UserError("the gateway listens on a loopback address only")
        if sock is None:
            sock = socket.socket(socket.AF_INET6 if host == "::1" else socket.AF_INET)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
        # Nagle off for every connection accepted (Linux: inherited from the listening
        # socket): asyncio sets it only on sockets made with IPPROTO_TCP, and an answer
        # written as headers then body would otherwise wait for the client's delayed ACK
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.listen(128)  # connections wait in the backlog until the server accepts them
        port = sock.getsockname()[1]
        self.stateless = stateless
        manager = StreamableHTTPSessionManager(app=self.build_server(), stateless=stateless)
        app = self.http_app(manager, token=token, port=port, allowed_origins=allowed_origins,
                            max_body_bytes=max_body_bytes, auth=auth)
        config = uvicorn.Config(with_health(app, self.ready), lifespan="off",
                                log_level="warning", access_log=False,
                                timeout_graceful_shutdown=5)
        server = _draining_server(config)

        async def stop_when_asked(event: anyio.Event) -> None:
            await event.wait()
            server.should_exit = True

        await self.refresh_instructions()
        sdk_log = logging.getLogger("mcp.server.streamable_http")
        race = SessionCloseRace()
        sdk_log.addFilter(race)
        try:
            with lean_post_streams():  # the SDK's POST streams, two tasks each
                async with manager.run(), anyio.create_task_group() as tg:
                    tg.start_soon(self._keep_leases)
                    tg.start_soon(self._watch_offer)
                    tg.start_soon(self._drain_on_signal, server, drain_seconds)
                    if stop is not None:
                        tg.start_soon(stop_when_asked, stop)
                    self.rounds.tasks = tg
                    if started is not None:
                        started(port)
                    try:
                        await server.serve(sockets=[sock])
                    finally:
                        self.rounds.tasks = None
                    tg.cancel_scope.cancel()
        finally:
            sdk_log.removeFilter(race)
            sock.close()


class _GatewayServer(Server[Any]):
    """Announces ``tools.listChanged`` on every transport (HTTP builds its own options), and
    gives each client session its own anfitrion session (:meth:`Gateway._per_client`)."""

    def __init__(self, name: str, *, version: str, gateway: Gateway) -> None:
        self._gateway = gateway
        super().__init__(name, version=version)
        self.middleware.append(gateway._per_client)
        # inside it (the request's principal known): every requestState sealed and opened
        self.middleware.append(gateway.rounds.boundary)

    @property  # type: ignore[override]
    def instructions(self) -> str | None:
        """What ``initialize`` and ``server/discover`` give: the servers' approved ones."""
        return self._gateway.instructions

    @instructions.setter
    def instructions(self, value: str | None) -> None:  # the SDK's own: none of the gateway
        pass

    def get_capabilities(self, notification_options: NotificationOptions | None = None,
                         experimental_capabilities: dict[str, dict[str, Any]] | None = None,
                         extensions: dict[str, dict[str, Any]] | None = None, *,
                         protocol_version: str | None = None) -> mt.ServerCapabilities:
        capabilities = super().get_capabilities(notification_options, experimental_capabilities,
                                                extensions, protocol_version=protocol_version)
        if protocol_version not in MODERN_PROTOCOL_VERSIONS:  # there: subscriptions/listen
            capabilities.resources = mt.ResourcesCapability(subscribe=True, list_changed=True)
            capabilities.prompts = mt.PromptsCapability(list_changed=True)
        elif capabilities.resources is not None:  # the lists' changes only: a resource's
            # updates are not subscribed to upstream for a listen stream
            capabilities.resources.subscribe = False
        return capabilities

    def create_initialization_options(
            self, notification_options: NotificationOptions | None = None,
            experimental_capabilities: dict[str, dict[str, Any]] | None = None,
            extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True),
            experimental_capabilities, extensions)


def _handed_over(name: str, request_id: str, continued: bool) -> str:
    """What a call waiting for a person answers when the process drains: *continued*, the
    client named its conversation (it is stored for a re-send to continue); else it ends
    with the session, its request withdrawn."""
    said = (f"{name} waits for a person's approval (request {request_id}), and this gateway "
            "process is shutting down, so it stopped waiting here. Nothing was run. ")
    if continued:
        return said + ("Call the tool again with the same arguments: any gateway process "
                       "continues this same request, and the person's answer counts.")
    return said + ("The request is withdrawn as this session ends: call the tool again once "
                   "reconnected to ask anew.")


def _draining_server(config: Any) -> Any:
    """A uvicorn server whose first SIGTERM or Ctrl-C asks for a drain (``drain_asked``;
    :meth:`Gateway._drain_on_signal` does it) and whose second one stops at once."""
    import uvicorn

    class DrainingServer(uvicorn.Server):
        drain_asked = False

        def handle_exit(self, sig: int, frame: Any) -> None:
            if self.drain_asked:
                super().handle_exit(sig, frame)
            self.drain_asked = True  # not re-raised afterwards: the process ends normally

    return DrainingServer(config)


def _held_by_the_dead(state: SessionState, owner: str) -> bool:
    """Whether *state* was leased by another process that died: one of this machine whose
    pid is gone, or one whose lease lapsed unrenewed (a live process renews it)."""
    held = state.lease_owner
    if held is None or held == owner:
        return False
    return dead_local_owner(held) or (state.lease_expires or 0.0) < time.time()


def _approval_key(request_id: str) -> str:
    """The ``inputRequests`` key of the URL elicitation for one approval request."""
    return f"anfitrion.approval.{request_id}"


class _TaskUpdateParams(mt.RequestParams):
    """``tasks/update`` (input for a task that asks for some: none of the gateway's do)."""

    task_id: str
    input_responses: dict[str, Any] | None = None


def _same_principal(first: Principal | None, second: Principal | None) -> bool:
    """The same OAuth identity (issuer and principal id), or both without one."""
    if first is None or second is None:
        return first is second
    return (first.id, first.attributes.get("issuer")) == \
        (second.id, second.attributes.get("issuer"))


def _as_request(request_type: type[Any], handler: Callable[[Any], Any]) -> Any:
    """An SDK handler ``(ctx, params)`` calling *handler* with the request it makes."""
    async def handle(ctx: ServerRequestContext[Any, Any], params: Any) -> HandlerResult:
        result: HandlerResult = await handler(request_type(params=params))
        return result
    return handle
