"""The gateway's MCP methods beyond tools: resources, prompts, completion, logging, and the
upstream servers' requests to the client (sampling, elicitation).

Each is forwarded to the server it belongs to, with the gate where it matters:

- ``resources/read`` is a read whose content is *untrusted* unless the server is trusted: it
  enters the client session's taint index (a later side-effecting call asks a person) and is
  shaped like a result (hidden characters made visible); every read is audited. A server whose
  own pin (instructions, identity) is not approved serves no resources;
- prompts are pinned like tools (:meth:`~anfitrion.mcp._pinning.PinBook.observe_prompt`): only
  approved, unchanged prompts are listed, the server is listed again before each
  ``prompts/get``, and a prompt whose definition changed is refused until approved again;
- ``sampling/createMessage`` and ``elicitation/create`` from a server reach the client only
  when the server's entry allows them (``"sampling": true``, ``"elicitation": true``);
  otherwise they are refused with the reason. Either way the audit log has a record. A
  relayed sampling request never asks for the context of the client's other servers
  (``includeContext`` is narrowed to ``"none"``).
"""

from __future__ import annotations

import contextlib
import logging
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import anyio
import mcp.types as mt
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    PromptsListChanged,
    ResourcesListChanged,
)
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata

from .._conversation import Provenance
from .._events import EventType
from ..exceptions import McpServerError
from ._elicitation import MAX_MESSAGE_CHARS, schema_problem, secret_problem
from ._gateway_content import Shaper, as_text, shape_messages
from ._pinning import PinState, pinned_prompt_fields, prompt_pin_name, server_key, suspicious_text
from ._toolset import MAX_LIST_PAGES, McpToolset

if TYPE_CHECKING:
    from mcp.server.session import ServerSession

    from .._runtime import GatedSession, Runtime
    from ._toolset import McpServers

__all__ = ["LOG_LEVELS", "ClientConversation", "GatewayCore", "UpstreamProtocol", "page"]

log = logging.getLogger("anfitrion.mcp.gateway")
_R = TypeVar("_R", bound=mt.Result)

LOG_LEVELS: tuple[str, ...] = ("debug", "info", "notice", "warning", "error", "critical",
                               "alert", "emergency")


def _error(code: int, message: str) -> MCPError:
    return MCPError(code=code, message=message)


def page(items: Sequence[Any], cursor: str | None, size: int) -> tuple[list[Any], str | None]:
    """One page of *items* and the cursor of the next (an offset, opaque to clients).

    Raises:
        MCPError: ``-32602`` for a cursor this gateway did not give.
    """
    start = 0
    if cursor is not None:
        if not cursor.isdigit() or len(cursor) > 9 or int(cursor) > len(items):
            raise _error(mt.INVALID_PARAMS, f"invalid cursor {cursor[:40]!r}")
        start = int(cursor)
    end = start + size
    return list(items[start:end]), (str(end) if end < len(items) else None)


class ClientConversation(Protocol):
    """One client's conversation with the gateway, as the upstream half uses it: the session
    its records go to, and the log level the client asked for."""

    log_level: str | None

    async def session(self) -> GatedSession: ...


class GatewayCore(Protocol):
    """What the upstream half needs of the gateway (:class:`~anfitrion.mcp.Gateway`): its
    servers and settings, the conversation of the request being served, and the door to
    tell clients the tools changed. Declared here so this module never names the gateway."""

    @property
    def servers(self) -> McpServers: ...

    @property
    def own_names(self) -> bool: ...

    @property
    def page_size(self) -> int: ...

    @property
    def sessions(self) -> weakref.WeakSet[Any]: ...

    @property
    def runtime(self) -> Runtime: ...

    @property
    def events(self) -> InMemorySubscriptionBus:
        """Where ``subscriptions/listen`` streams read list changes from."""

    def current_client(self) -> ClientConversation:
        """The conversation of the request being served (the gateway's own outside any)."""

    def own_client(self) -> ClientConversation:
        """The gateway's own conversation: what belongs to no client."""

    def request_session(self) -> Any: ...

    async def tools_changed(self) -> None: ...


class UpstreamProtocol:
    """The non-tool methods of one gateway, and where each upstream name leads."""

    def __init__(self, gateway: GatewayCore) -> None:
        self.gateway = gateway
        self._resources: dict[str, str] = {}
        """Resource URI → the server that listed it."""
        self._templates: dict[str, str] = {}
        self._prompts: dict[str, tuple[str, str]] = {}
        """Offered prompt name → (server, the server's name)."""
        self._subscribers: dict[tuple[str, str], weakref.WeakSet[Any]] = {}
        for toolset in gateway.servers.toolsets.values():
            toolset.relay_requests = True
            toolset.on_notification = self._notified(toolset.id)
            toolset.requests.on_audit = self._audit_unrouted

    @property
    def toolsets(self) -> dict[str, McpToolset]:
        return self.gateway.servers.toolsets

    def outside_name(self, server: str, name: str) -> str:
        return name if self.gateway.own_names else f"{server}.{name}"

    # -- talking to one server ---------------------------------------------------------------

    async def ask(self, toolset: McpToolset, request: Any, result_type: type[_R], what: str
                  ) -> _R:
        """One request to *toolset*'s server; its failure becomes an MCP error with the
        reason (the server's own error code is kept). The client's ``_meta`` was for the
        gateway (its protocol revision's envelope, its conversation): it is not passed on."""
        params = getattr(request, "params", None)
        if params is not None and getattr(params, "meta", None) is not None:
            request = request.model_copy(update={"params": params.model_copy(
                update={"meta": None})})
        try:
            conn = await toolset._ensure()
        except McpServerError as exc:
            raise _error(mt.INTERNAL_ERROR, f"{what}: {exc}") from None
        session = conn.session
        assert session is not None
        try:
            with anyio.fail_after(toolset.config.timeout):
                return await conn.request(lambda: session.send_request(request, result_type))
        except TimeoutError:
            raise _error(mt.INTERNAL_ERROR, f"{what}: MCP server {toolset.id!r} did not answer "
                         f"within {toolset.config.timeout:g} seconds") from None
        except MCPError as exc:
            raise _error(exc.error.code, f"{what}: MCP server {toolset.id!r}: "
                         f"{exc.error.message}") from None

    def _capable(self, toolset: McpToolset, kind: str) -> bool:
        conn = toolset._connection
        caps = conn.session.server_capabilities if conn and conn.session else None
        return caps is not None and getattr(caps, kind) is not None

    async def _server_approved(self, toolset: McpToolset) -> bool:
        pin = await toolset.pins.get(server_key(toolset.id))
        return pin is not None and pin.state is PinState.APPROVED

    async def _running(self, kind: str) -> list[McpToolset]:
        """The approved servers that offer *kind* (``resources``, ``prompts``)."""
        found = []
        for toolset in self.toolsets.values():
            try:
                await toolset._ensure()
            except McpServerError as exc:
                log.warning("%s; its %s are not offered", exc, kind)
                continue
            if self._capable(toolset, kind) and await self._server_approved(toolset):
                found.append(toolset)
        return found

    async def _all_pages(self, toolset: McpToolset, make: Any, result_type: type[_R],
                         field: str, what: str) -> list[Any]:
        items: list[Any] = []
        cursor: str | None = None
        for _ in range(MAX_LIST_PAGES):
            params = mt.PaginatedRequestParams(cursor=cursor) if cursor else None
            result = await self.ask(toolset, make(params=params), result_type, what)
            items.extend(getattr(result, field))
            cursor = getattr(result, "next_cursor", None)
            if not cursor:
                break
        return items

    # -- resources ---------------------------------------------------------------------------

    async def list_resources(self, request: mt.ListResourcesRequest) -> mt.ServerResult:
        listed: list[mt.Resource] = []
        for toolset in await self._running("resources"):
            for resource in await self._all_pages(toolset, mt.ListResourcesRequest,
                                                  mt.ListResourcesResult, "resources",
                                                  "resources/list"):
                self._resources[str(resource.uri)] = toolset.id
                listed.append(self._shaped_listing(resource, toolset))
        items, cursor = page(listed, _cursor(request), self.gateway.page_size)
        return mt.ListResourcesResult(resources=items, next_cursor=cursor)

    async def list_templates(self, request: mt.ListResourceTemplatesRequest) -> mt.ServerResult:
        listed: list[mt.ResourceTemplate] = []
        for toolset in await self._running("resources"):
            for template in await self._all_pages(toolset, mt.ListResourceTemplatesRequest,
                                                  mt.ListResourceTemplatesResult,
                                                  "resource_templates",
                                                  "resources/templates/list"):
                self._templates[template.uri_template] = toolset.id
                listed.append(self._shaped_listing(template, toolset))
        items, cursor = page(listed, _cursor(request), self.gateway.page_size)
        return mt.ListResourceTemplatesResult(resource_templates=items, next_cursor=cursor)

    @staticmethod
    def _shaped_listing(item: Any, toolset: McpToolset) -> Any:
        shaper = Shaper(toolset.config.max_result_chars)
        updates = {name: shaper.label(getattr(item, name))
                   for name in ("name", "title", "description") if getattr(item, name, None)}
        if not toolset.config.trusted:
            updates["annotations"] = None  # audience / priority: the server's claims
        return item.model_copy(update=updates)

    def _owner(self, uri: str, what: str) -> McpToolset:
        server = self._resources.get(uri)
        if server is None and len(self.toolsets) == 1:
            server = next(iter(self.toolsets))
        if server is None:  # a template's instance: the server whose template's prefix fits
            fits = [s for t, s in self._templates.items() if uri.startswith(t.split("{", 1)[0])]
            server = fits[0] if len(set(fits)) == 1 else None
        if server is None or server not in self.toolsets:
            raise _error(mt.INVALID_PARAMS, f"{what}: unknown resource {uri[:200]!r}: list the "
                         "resources (or their templates) first")
        return self.toolsets[server]

    async def read_resource(self, request: mt.ReadResourceRequest) -> mt.ServerResult:
        uri = str(request.params.uri)
        toolset = self._owner(uri, "resources/read")
        gated = await self.gateway.current_client().session()
        name = f"{toolset.id}.resources/read"
        if not await self._server_approved(toolset):
            await self._audit(name, f"refused {uri}: the server is not approved")
            raise _error(mt.INVALID_REQUEST, f"resources/read refused: server {toolset.id!r} "
                         "is not approved (anfitrion mcp review)")
        result = await self.ask(toolset, mt.ReadResourceRequest(
            params=mt.ReadResourceRequestParams(uri=request.params.uri)),
            mt.ReadResourceResult, "resources/read")
        shaper = Shaper(toolset.config.max_result_chars)
        contents: list[Any] = [shaper.resource(c) for c in result.contents]
        notice = shaper.notice()
        shaped = [c for c in contents if not isinstance(c, mt.TextContent)]
        withheld = [c.text for c in contents if isinstance(c, mt.TextContent)]
        if notice is not None or withheld:  # a text notice travels as a text resource
            text = "\n".join(([notice.text] if notice else []) + withheld)
            shaped.insert(0, mt.TextResourceContents(uri=request.params.uri, text=text,
                                                     mime_type="text/plain"))
        provenance = Provenance.TRUSTED if toolset.config.trusted else Provenance.UNTRUSTED
        await gated.report_result(name, as_text(shaped), provenance=provenance)
        await gated.save()
        await self._audit(name, f"read {uri} ({provenance.value})")
        return mt.ReadResourceResult(contents=shaped)

    async def subscribe(self, request: mt.SubscribeRequest | mt.UnsubscribeRequest
                        ) -> mt.ServerResult:
        uri = str(request.params.uri)
        subscribe = isinstance(request, mt.SubscribeRequest)
        what = "resources/subscribe" if subscribe else "resources/unsubscribe"
        toolset = self._owner(uri, what)
        session = self.gateway.request_session()
        subscribers = self._subscribers.setdefault((toolset.id, uri), weakref.WeakSet())
        if subscribe:
            first = not subscribers
            subscribers.add(session)  # before asking: the server may announce at once
            if first:
                try:
                    await self.ask(toolset, mt.SubscribeRequest(
                        params=mt.SubscribeRequestParams(uri=request.params.uri)),
                        mt.EmptyResult, what)
                except MCPError:
                    subscribers.discard(session)
                    raise
        else:
            subscribers.discard(session)
            if not subscribers:
                await self.ask(toolset, mt.UnsubscribeRequest(
                    params=mt.UnsubscribeRequestParams(uri=request.params.uri)),
                    mt.EmptyResult, what)
        return mt.EmptyResult()

    def _notified(self, server: str) -> Any:
        async def forward(notification: mt.ServerNotification) -> None:
            # built afresh: what the server sent may carry more than the notice (extra keys)
            root = notification
            notice: mt.ServerNotification
            if isinstance(root, mt.ResourceUpdatedNotification):
                notice = mt.ResourceUpdatedNotification(
                    params=mt.ResourceUpdatedNotificationParams(uri=root.params.uri))
                for session in list(self._subscribers.get((server, str(root.params.uri)), ())):
                    await _quietly(session.send_notification(notice))
            elif isinstance(root, mt.ToolListChangedNotification):
                await self.gateway.tools_changed()
            elif isinstance(root, (mt.ResourceListChangedNotification,
                                   mt.PromptListChangedNotification)):
                notice = type(root)()
                for session in list(self.gateway.sessions):
                    await _quietly(session.send_notification(notice))
                await self.gateway.events.publish(
                    ResourcesListChanged() if isinstance(root, mt.ResourceListChangedNotification)
                    else PromptsListChanged())
        return forward

    # -- prompts -----------------------------------------------------------------------------

    async def _list_prompts(self, toolset: McpToolset) -> dict[str, mt.Prompt]:
        """The server's approved, unchanged prompts (every one seen is pinned)."""
        offered: dict[str, mt.Prompt] = {}
        for prompt in await self._all_pages(toolset, mt.ListPromptsRequest,
                                            mt.ListPromptsResult, "prompts", "prompts/list"):
            definition = pinned_prompt_fields(prompt.model_dump(mode="json", by_alias=True,
                                                                exclude_none=True))
            pin = await toolset.pins.observe_prompt(toolset.id, definition)
            if pin.state is PinState.APPROVED:
                offered[prompt.name] = prompt
            else:
                log.info("MCP prompt %s is %s: not offered until approved (anfitrion mcp "
                         "approve %s)", prompt_pin_name(toolset.id, prompt.name),
                         pin.state.value, prompt_pin_name(toolset.id, prompt.name))
        return offered

    async def list_prompts(self, request: mt.ListPromptsRequest) -> mt.ServerResult:
        listed: list[mt.Prompt] = []
        for toolset in await self._running("prompts"):
            for name, prompt in (await self._list_prompts(toolset)).items():
                outside = self.outside_name(toolset.id, name)
                self._prompts[outside] = (toolset.id, name)
                shaper = Shaper(toolset.config.max_result_chars)
                arguments = [a.model_copy(update={"description": shaper.label(a.description)})
                             for a in prompt.arguments or []] or prompt.arguments
                listed.append(prompt.model_copy(update={
                    "name": outside, "title": shaper.label(prompt.title),
                    "description": shaper.label(prompt.description), "arguments": arguments}))
        items, cursor = page(listed, _cursor(request), self.gateway.page_size)
        return mt.ListPromptsResult(prompts=items, next_cursor=cursor)

    def _prompt_owner(self, name: str) -> tuple[McpToolset, str]:
        found = self._prompts.get(name)
        if found is None and not self.gateway.own_names:
            server, _, upstream = name.partition(".")
            found = (server, upstream) if server in self.toolsets and upstream else None
        if found is None and self.gateway.own_names and len(self.toolsets) == 1:
            found = (next(iter(self.toolsets)), name)
        if found is None:
            raise _error(mt.INVALID_PARAMS, f"unknown prompt {name[:100]!r}")
        return self.toolsets[found[0]], found[1]

    async def get_prompt(self, request: mt.GetPromptRequest) -> mt.ServerResult:
        toolset, upstream = self._prompt_owner(request.params.name)
        pin_name = prompt_pin_name(toolset.id, upstream)
        # listed again right before: a prompt changed since it was approved is caught here
        current = await self._list_prompts(toolset) if await self._server_approved(toolset) \
            else {}
        if upstream not in current:
            await self._audit(f"{toolset.id}.prompts/get", f"refused {pin_name}: not approved "
                              "as the server describes it now")
            raise _error(mt.INVALID_PARAMS, f"prompt {request.params.name!r} is blocked: it is "
                         "new, or its definition is no longer the one a person approved. An "
                         f"operator must review it (anfitrion mcp approve {pin_name!r})")
        result = await self.ask(toolset, mt.GetPromptRequest(params=mt.GetPromptRequestParams(
            name=upstream, arguments=request.params.arguments)), mt.GetPromptResult,
            "prompts/get")
        messages, _ = shape_messages(result.messages, toolset.config.max_result_chars)
        gated = await self.gateway.current_client().session()
        provenance = Provenance.TRUSTED if toolset.config.trusted else Provenance.UNTRUSTED
        await gated.report_result(f"{toolset.id}.prompts/get",
                                  as_text([m.content for m in messages]), provenance=provenance)
        await gated.save()
        await self._audit(f"{toolset.id}.prompts/get", f"served {pin_name}")
        description = Shaper(toolset.config.max_result_chars).label(result.description)
        return mt.GetPromptResult(description=description, messages=messages)

    # -- completion and logging ----------------------------------------------------------------

    async def complete(self, request: mt.CompleteRequest) -> mt.ServerResult:
        ref = request.params.ref
        if isinstance(ref, mt.PromptReference):
            toolset, upstream = self._prompt_owner(ref.name)
            ref = mt.PromptReference(type="ref/prompt", name=upstream)
        else:
            server = self._templates.get(ref.uri)
            if server is None and len(self.toolsets) == 1:
                server = next(iter(self.toolsets))
            if server is None:
                raise _error(mt.INVALID_PARAMS, f"unknown resource template {ref.uri[:200]!r}")
            toolset = self.toolsets[server]
        params = request.params.model_copy(update={"ref": ref})
        result = await self.ask(toolset, mt.CompleteRequest(params=params), mt.CompleteResult,
                                "completion/complete")
        shaper = Shaper(toolset.config.max_result_chars)
        values = [shaper.label(v) or "" for v in result.completion.values[:100]]
        completion = result.completion.model_copy(update={"values": values})
        return mt.CompleteResult(completion=completion)

    async def set_level(self, request: mt.SetLevelRequest) -> mt.ServerResult:
        """The client's level filters what it is sent; every server is asked for as much."""
        self.gateway.current_client().log_level = request.params.level
        for toolset in self.toolsets.values():
            if self._capable(toolset, "logging"):
                try:
                    await self.ask(toolset, mt.SetLevelRequest(params=request.params),
                                   mt.EmptyResult, "logging/setLevel")
                except MCPError as exc:
                    log.warning("%s", exc.error.message)
        return mt.EmptyResult()

    # -- the servers' requests to the client ---------------------------------------------------

    async def relay(self, server: str, method: str, params: Any, session: ServerSession,
                    request_id: Any, client: ClientConversation | None = None,
                    ask: Callable[[str, Any], Awaitable[Any]] | None = None) -> Any:
        """A server's ``sampling/createMessage`` or ``elicitation/create`` during a call:
        passed to the client when the server's entry allows it, else refused; audited.

        A form elicitation must have the flat schema MCP allows and ask for no secret
        (:mod:`anfitrion.mcp._elicitation`: MCP forbids asking for one in form mode). *ask*:
        how a 2026-07-28 client is asked (in the gateway's ``input_required`` result:
        :mod:`anfitrion.mcp._gateway_input`); else a request to the client's session."""
        config = self.toolsets[server].config
        sampling = method == "sampling/createMessage"
        allowed = config.sampling if sampling else config.elicitation
        key = "sampling" if sampling else "elicitation"
        findings = suspicious_text(params.model_dump(mode="json", by_alias=True,
                                                    exclude_none=True))
        hints = "; ".join(f"{f.path}: {f.reason}" for f in findings[:5])
        if not allowed:
            await self._audit(f"{server}.{method}", f"refused (\"{key}\" is not allowed for "
                              f"{server!r}){'; ' + hints if hints else ''}", client)
            return mt.ErrorData(code=mt.INVALID_REQUEST, message=(
                f"{method} refused by anfitrion's gateway: server {server!r} may not ask the "
                f"client for {key}. The operator can allow it with \"{key}\": true in the "
                "server's entry of the MCP config."))
        problem = None if sampling else _form_problem(params)
        if problem is not None:
            await self._audit(f"{server}.{method}", f"refused: {problem}"
                              f"{'; ' + hints if hints else ''}", client)
            return mt.ErrorData(code=mt.INVALID_PARAMS, message=(
                f"{method} refused by anfitrion's gateway: {problem}"))
        narrowed = ""
        if sampling and params.include_context not in (None, "none"):
            # the context of the client's other servers is not this server's to read
            narrowed = f"; includeContext {params.include_context!r} narrowed to 'none'"
            params = params.model_copy(update={"include_context": "none"})
        await self._audit(f"{server}.{method}",
                          f"relayed to the client{narrowed}{'; ' + hints if hints else ''}",
                          client)
        request: Any
        result_type: type[mt.Result]
        if sampling:
            request, result_type = mt.CreateMessageRequest(params=params), mt.CreateMessageResult
        else:
            request, result_type = mt.ElicitRequest(params=params), mt.ElicitResult
        if ask is not None:
            return await ask(method, params)
        try:
            return await session.send_request(
                request, result_type,
                metadata=ServerMessageMetadata(related_request_id=request_id))
        except MCPError as exc:
            return exc.error

    async def _audit_unrouted(self, name: str, detail: str) -> None:
        """What belongs to no client (or to one of several, unsaid) goes in the gateway's own
        session, never in a client's."""
        await self._audit(name, detail, self.gateway.own_client())

    async def _audit(self, name: str, detail: str,
                     client: ClientConversation | None = None) -> None:
        """An ``mcp.relayed`` record in *client*'s session (default: the request's client, or
        the gateway's own session outside any)."""
        gated = await (client or self.gateway.current_client()).session()
        await gated.emit(EventType.MCP_RELAYED, tool=name, detail=detail)
        await self.gateway.runtime.flush()


def _form_problem(params: Any) -> str | None:
    """Why a form elicitation may not reach the client: a schema MCP does not allow, or a
    question asking for a secret (``None`` for URL mode: a link, no form)."""
    if getattr(params, "mode", "form") != "form":
        return None
    schema = params.requested_schema
    problem = schema_problem(schema)
    if problem is not None:
        return problem
    secret = secret_problem(str(params.message)[:MAX_MESSAGE_CHARS], schema)
    if secret is not None:
        return f"{secret}; a server may never ask for secrets through elicitation"
    return None


def _cursor(request: Any) -> str | None:
    params = getattr(request, "params", None)
    return getattr(params, "cursor", None) if params is not None else None


async def _quietly(awaitable: Any) -> None:
    with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
        await awaitable
