"""The gateway: an MCP server in front of MCP servers, every ``tools/call`` through the gate.

Any MCP host — a desktop assistant, an IDE — connects to ``anfitrion gateway`` instead of to
its servers. The gateway connects to the configured upstream servers and:

- answers ``tools/list`` with the approved, pinned, unchanged tools only, under their
  namespaced names (``git.git_log``), with annotations the gateway itself determined;
- puts every ``tools/call`` through the :class:`~anfitrion._gate.Gate`: resolve, validate,
  policy, approval, execution ledger, result shaping — each stage audited in the store;
- for a call that needs a person, creates the approval request in the store and waits up to
  ``approval_wait`` seconds for an answer (``anfitrion approvals approve ID`` or the inbox);
  without one, it returns a tool error saying where to approve; calling the tool again with the
  same arguments after approval runs the approved call.

Transports: stdio (:meth:`Gateway.serve_stdio`), and streamable HTTP on a loopback address
(:meth:`Gateway.serve_http`) behind a guard checking ``Host``, ``Origin``, a bearer token and
the body size before the MCP SDK sees the request.

Beyond tools the gateway forwards the rest of the protocol, with the gate where it matters
(:mod:`anfitrion.mcp._gateway_upstream`, :mod:`anfitrion.mcp._gateway_content`): every content
type of a result as itself (shaped: hidden characters made visible), ``structuredContent``
checked against the pinned ``outputSchema``, progress and log messages relayed to the client
whose call caused them, resources (untrusted reads: taint), pinned prompts, completion, and
the servers' sampling and elicitation requests only where the config allows them.
"""

from __future__ import annotations

import contextvars
import logging
import socket
import uuid
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

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
from .._principal import Principal
from .._runtime import GatedSession, Runtime, SubmissionStatus
from .._tools import OfferContext, Tool
from ..exceptions import AnfitrionError, MissingDependencyError, UserError
from ..policy import Policy
from ..store import Store
from ..telemetry import extracted_context
from ._gateway_http import HttpGuard, SessionCloseRace, respond
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
    from mcp.types.version import MODERN_PROTOCOL_VERSIONS

    from ._gateway_content import forward_result, listed_tool
    from ._gateway_upstream import LOG_LEVELS, UpstreamProtocol, page
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingDependencyError("mcp", "mcp") from exc

__all__ = ["Gateway"]

log = logging.getLogger("anfitrion.mcp.gateway")


def _text_result(text: str, *, is_error: bool) -> mt.CallToolResult:
    return mt.CallToolResult(content=[mt.TextContent(type="text", text=text)], is_error=is_error)


WITHDRAWN_REASON = "the MCP client session that proposed the call ended"


class _GatewayTools:
    """The upstream servers' tools a gateway offers: approved, pinned, visible, allowed."""

    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway

    async def list_tools(self, context: OfferContext) -> list[Tool]:
        gateway = self._gateway
        tools = await gateway.servers.list_tools(context)
        offered = [t for t in tools if gateway.runtime.policy.may_allow(t, gateway.principal)
                   and (gateway._visible is None or gateway._visible(t))
                   and gateway._callable(t)]
        gateway._offered_names = frozenset(t.name for t in offered)
        return offered


class _Client:
    """One MCP client session, and the durable anfitrion session it maps to (opened on its
    first call). When the client goes, its calls still waiting for a person are withdrawn."""

    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway
        self._lock = anyio.Lock()
        self.gated: GatedSession | None = None
        self.log_level: str | None = None
        """The level the client asked for (``logging/setLevel``); ``None``: everything."""
        self.standing: Any = None
        """The SDK's session object of the client's first request: the SDK makes one per
        request, and this one stands for the connection (notices sent without a request go
        to the connection)."""

    async def session(self) -> GatedSession:
        async with self._lock:
            if self.gated is None:
                self.gated = await self._gateway._open_session()
            return self.gated

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
_CLIENT_STATE = "anfitrion.gateway.client"


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
        store_url: the URL *store* was opened from: the "approve it with …" hint then names
            ``--store URL`` when it is not the store ``anfitrion approvals`` finds by itself.

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
                 page_size: int = 100, store_url: str | None = None) -> None:
        if own_names and len(servers.toolsets) != 1:
            raise UserError(f"own names need exactly one wrapped server, not "
                            f"{len(servers.toolsets)}: with several, one server's tool could "
                            "take another's name")
        if page_size < 1:
            raise UserError("page_size must be at least 1")
        self.servers = servers
        self.own_names = own_names
        self.page_size = page_size
        self.sessions: weakref.WeakSet[Any] = weakref.WeakSet()
        """The MCP client sessions connected now (list-changed notices go to each)."""
        self._refused_tasks: set[str] = set()
        self.store = store
        self._store_flag = store_flag(store_url) if store_url else ""
        self.principal = Principal.of(principal)
        self.approval_wait = approval_wait
        self.poll_interval = poll_interval
        self.fixed_session_id = session_id
        self._visible = visible
        self._offered_names: frozenset[str] = frozenset()
        self.runtime = Runtime(_GatewayTools(self), policy=policy,
                               approver=DeferredApprover(), store=store, listeners=listeners,
                               limits=limits, audit=audit, max_tool_calls=max_tool_calls,
                               app=GATEWAY_APP)
        self._default = _Client(self)  # calls made outside any MCP client session
        self._clients: set[_Client] = set()
        """The MCP client sessions connected now (their leases are kept)."""
        self.protocol = UpstreamProtocol(self)

    @property
    def gate(self) -> Gate:
        return self.runtime.gate

    @property
    def session_id(self) -> str | None:
        """The anfitrion session of calls made outside an MCP client session (tests, code)."""
        return self._default.gated.id if self._default.gated is not None else None

    async def _open_session(self) -> GatedSession:
        sid = self.fixed_session_id
        if sid is not None and await self.store.load_session(sid) is not None:
            return await self.runtime.resume(sid, force=True)
        return await self.runtime.open(self.principal,
                                       sid or f"gateway-{uuid.uuid4().hex[:16]}",
                                       app=GATEWAY_APP)

    def _client(self) -> _Client:
        return _CLIENT.get() or self._default

    def request_session(self) -> Any:
        """The MCP client session of the request being answered (the object that stands for
        its connection: see :attr:`_Client.standing`)."""
        context = _REQUEST.get()
        assert context is not None
        return self._client().standing or context.session

    async def _per_client(self, ctx: ServerRequestContext[Any, Any],
                          call_next: CallNext) -> HandlerResult:
        """The SDK middleware giving each client connection its own anfitrion session
        (:class:`_Client`), withdrawn when the connection ends."""
        connection = ctx.session._connection
        client: _Client | None = None
        if connection.protocol_version not in MODERN_PROTOCOL_VERSIONS:  # a connection per
            client = connection.state.get(_CLIENT_STATE)  # request otherwise: the default
            if client is None:
                client = connection.state[_CLIENT_STATE] = _Client(self)
                client.standing = ctx.session
                self._clients.add(client)
                connection.exit_stack.push_async_callback(self._end_client, client)
            self.sessions.add(client.standing)  # for the notices meant for every client
        client_token = _CLIENT.set(client)
        token = _REQUEST.set(ctx)
        try:
            return await call_next(ctx)
        finally:
            _REQUEST.reset(token)
            _CLIENT.reset(client_token)

    async def _end_client(self, client: _Client) -> None:
        self._clients.discard(client)
        await client.end()

    async def _keep_leases(self) -> None:
        while True:
            await anyio.sleep(self.runtime.lease_seconds / 3)
            for client in list(self._clients):
                if client.gated is not None:
                    await client.gated.renew()

    def _upstream_tool(self, tool: Tool) -> mt.Tool | None:
        if not isinstance(tool, McpTool) or tool.server not in self.servers.toolsets:
            return None
        listed = self.servers.toolsets[tool.server]._upstream
        return next((t for t in listed if t.name == tool.upstream_name), None)

    def _callable(self, tool: Tool) -> bool:
        """False for a tool that only runs as a task: the gateway does not forward tasks."""
        upstream = self._upstream_tool(tool)
        execution = upstream.execution if upstream is not None else None
        if execution is None or execution.task_support != "required":
            return True
        if tool.name not in self._refused_tasks:
            self._refused_tasks.add(tool.name)
            log.warning("%s is not offered: it runs only as a task (execution.taskSupport "
                        "'required'), and the gateway does not forward tasks", tool.name)
        return False

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
        return await self.runtime.offered((await self._client().session()).session)

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
        client = self._client()

        async def progress(progress: float, total: float | None, message: str | None) -> None:
            # to the caller's progress token, if it gave one (else nothing is sent)
            shown = reveal_hidden(message)[0] if message is not None else None
            await session.report_progress(progress, total, shown)

        async def log_message(params: mt.LoggingMessageNotificationParams) -> None:
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
                                             client)

        return UpstreamCall(progress=progress, log=log_message, request=request)

    async def call_tool(self, name: str, arguments: Mapping[str, Any] | None) -> mt.CallToolResult:
        """``tools/call``: through the gate, waiting a while for a person if it must."""
        arguments = dict(arguments or {})
        name = self.inside_name(name)
        relay = self._relaying(name.partition(".")[0])
        token = UPSTREAM_CALL.set(relay)
        try:
            return await self._call_tool(name, arguments, relay)
        finally:
            UPSTREAM_CALL.reset(token)

    async def _call_tool(self, name: str, arguments: dict[str, Any],
                         relay: UpstreamCall | None) -> mt.CallToolResult:
        gated = await self._client().session()
        key = digest({"tool": name, "arguments": arguments})
        # a call repeated after its approval was given carries the call id it is bound to
        call_id = gated.session.retry_of(name, key) or f"mcp-{uuid.uuid4().hex}"
        try:
            outcome = await gated.submit(name, arguments, call_id)
            if outcome.status is SubmissionStatus.WAITING and outcome.request is not None:
                request = outcome.request
                if await self._answered(request.id):
                    outcome = await gated.submit(name, arguments, call_id)
                if outcome.status is SubmissionStatus.WAITING:
                    gated.session.remember_retry(name, key, call_id)
                    await gated.save()
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
        result = outcome.result
        assert result is not None
        server = self.servers.toolsets.get(name.partition(".")[0])
        if not result.is_error and relay is not None and relay.results and server is not None:
            # what the gate shaped as text, sent as the server sent it (shaped alike)
            return forward_result(relay.results[-1], server.config.max_result_chars)
        return self._to_mcp(result)

    async def _answered(self, request_id: str) -> bool:
        with anyio.move_on_after(self.approval_wait):
            while True:
                found = await self.store.get_approval(request_id)
                if found is None:
                    return False
                if found.answer is not None:
                    return True
                await anyio.sleep(self.poll_interval)
        return False

    @staticmethod
    def _to_mcp(result: ToolResult) -> mt.CallToolResult:
        return _text_result(result.content, is_error=result.is_error)

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
        server.add_request_handler("tools/list", mt.PaginatedRequestParams, _list)
        for method, (params_type, request_type, handler) in handlers.items():
            server.add_request_handler(method, params_type, _as_request(request_type, handler))

        # the gate validates arguments itself, strictly, against the pinned schema
        async def _call(ctx: ServerRequestContext[Any, Any],
                        params: mt.CallToolRequestParams) -> mt.CallToolResult:
            meta = ctx.meta
            with extracted_context(dict(meta) if meta else None):  # the client's trace
                result = await self.call_tool(params.name, params.arguments)  # goes on
            session = self.request_session()
            before = listed.get(session)
            if before is not None and before != self._offered_names:
                listed[session] = self._offered_names
                # on the call's own stream, so it reaches the client before the result
                await ctx.session.send_notification(mt.ToolListChangedNotification(),
                                                    related_request_id=ctx.request_id)
            return result

        server.add_request_handler("tools/call", mt.CallToolRequestParams, _call)
        return server

    async def serve_stdio(self) -> None:
        """Serve one MCP client on this process's stdin and stdout."""
        server = self.build_server()
        async with stdio_server() as (read, write), anyio.create_task_group() as tg:
            tg.start_soon(self._keep_leases)
            await server.run(read, write, server.create_initialization_options())
            tg.cancel_scope.cancel()

    def http_app(self, manager: StreamableHTTPSessionManager, *, token: str, port: int,
                 allowed_origins: Iterable[str] = (),
                 max_body_bytes: int = 1024 * 1024) -> HttpGuard:
        """The guarded ASGI app serving the MCP endpoint at ``/mcp``."""
        async def endpoint(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope.get("path", "").rstrip("/") != "/mcp":
                await respond(send, 404, b"not found: the MCP endpoint is /mcp")
                return
            await manager.handle_request(scope, receive, send)

        hosts = {f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"}
        return HttpGuard(endpoint, token=token, allowed_hosts=hosts,
                         allowed_origins=allowed_origins, max_body_bytes=max_body_bytes)

    async def serve_http(self, *, token: str, host: str = "127.0.0.1", port: int = 8765,
                         allowed_origins: Iterable[str] = (), max_body_bytes: int = 1024 * 1024,
                         sock: socket.socket | None = None,
                         started: Callable[[int], None] | None = None,
                         stop: anyio.Event | None = None) -> None:
        """Serve streamable HTTP at ``http://HOST:PORT/mcp`` until *stop* is set (or a signal).

        Args:
            token: the bearer token every request must carry.
            sock: an already bound socket (its port is used).
            started: called with the port once the server listens.
            stop: set it to shut down gracefully (open requests get up to 5 seconds).
        """
        import uvicorn

        if host not in ("127.0.0.1", "::1", "localhost"):
            raise ValueError("the gateway listens on a loopback address only")
        if sock is None:
            sock = socket.socket(socket.AF_INET6 if host == "::1" else socket.AF_INET)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
        sock.listen(128)  # connections wait in the backlog until the server accepts them
        port = sock.getsockname()[1]
        manager = StreamableHTTPSessionManager(app=self.build_server(), stateless=False)
        app = self.http_app(manager, token=token, port=port, allowed_origins=allowed_origins,
                            max_body_bytes=max_body_bytes)
        config = uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False,
                                timeout_graceful_shutdown=5)
        server = uvicorn.Server(config)

        async def stop_when_asked(event: anyio.Event) -> None:
            await event.wait()
            server.should_exit = True

        sdk_log = logging.getLogger("mcp.server.streamable_http")
        race = SessionCloseRace()
        sdk_log.addFilter(race)
        try:
            async with manager.run(), anyio.create_task_group() as tg:
                tg.start_soon(self._keep_leases)
                if stop is not None:
                    tg.start_soon(stop_when_asked, stop)
                if started is not None:
                    started(port)
                await server.serve(sockets=[sock])
                tg.cancel_scope.cancel()
        finally:
            sdk_log.removeFilter(race)
            sock.close()


class _GatewayServer(Server[Any]):
    """Announces ``tools.listChanged`` on every transport (HTTP builds its own options), and
    gives each client session its own anfitrion session (:meth:`Gateway._per_client`)."""

    def __init__(self, name: str, *, version: str, gateway: Gateway) -> None:
        super().__init__(name, version=version)
        self._gateway = gateway
        self.middleware.append(gateway._per_client)

    def get_capabilities(self, notification_options: NotificationOptions | None = None,
                         experimental_capabilities: dict[str, dict[str, Any]] | None = None,
                         extensions: dict[str, dict[str, Any]] | None = None, *,
                         protocol_version: str | None = None) -> mt.ServerCapabilities:
        capabilities = super().get_capabilities(notification_options, experimental_capabilities,
                                                extensions, protocol_version=protocol_version)
        if protocol_version not in MODERN_PROTOCOL_VERSIONS:  # there: subscriptions/listen
            capabilities.resources = mt.ResourcesCapability(subscribe=True, list_changed=True)
            capabilities.prompts = mt.PromptsCapability(list_changed=True)
        return capabilities

    def create_initialization_options(
            self, notification_options: NotificationOptions | None = None,
            experimental_capabilities: dict[str, dict[str, Any]] | None = None,
            extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True),
            experimental_capabilities, extensions)


def _as_request(request_type: type[Any], handler: Callable[[Any], Any]) -> Any:
    """An SDK handler ``(ctx, params)`` calling *handler* with the request it makes."""
    async def handle(ctx: ServerRequestContext[Any, Any], params: Any) -> HandlerResult:
        result: HandlerResult = await handler(request_type(params=params))
        return result
    return handle
