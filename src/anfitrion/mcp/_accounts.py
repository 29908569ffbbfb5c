"""Connected accounts: each person's own OAuth tokens for an upstream server (``auth`` on its
entry), used for that person's calls through the gateway, and connected from the inbox.

- :class:`UserAccounts` — at the gateway, the :class:`~anfitrion.mcp._oauth.OAuthAccess` of
  each calling principal for one server: a call runs with the caller's own stored token; a
  caller without one is refused with :class:`~anfitrion.mcp._oauth.AccountNotConnected` (the
  inbox's connect link and the CLI command) before anything is sent — never with another
  principal's token, never with the operator's.
- :class:`AccountConnector` — the engine of the inbox's connect page: the authorization-code
  flow with PKCE of the SDK (:mod:`mcp.client.auth`) run for a signed-in person, split across
  two browser requests. The flow is bound to the person, to their inbox session and to their
  browser (a one-time nonce in a cookie), and single-use: a callback in another browser, for
  another session, with an unknown ``state``, or a second time is refused and completes
  nothing. The only place the browser is sent is the authorization endpoint the SDK built
  from the (checked) metadata; after the callback, only to the inbox's own page.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx2
from anyio.abc import TaskGroup
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull

from .._redaction import redact
from ..store import CredentialStore, Store
from ._config import McpConfig, ServerConfig
from ._oauth import (
    TOKENS,
    AccountNotConnected,
    CredentialError,
    OAuthAccess,
    StoredTokens,
    TokenCipher,
    failure_of,
    oauth_provider,
)

__all__ = ["FLOW_SECONDS", "IDLE_SECONDS", "AccountConnector", "ConnectRefused",
           "UserAccounts", "close_idle", "connect_account", "per_user"]

IDLE_SECONDS = 300.0
"""A person's own upstream connection (token exchange or connected account) unused this long
is closed; the next call opens it again."""
FLOW_SECONDS = 600.0
"""How long a started connect flow waits for the authorization server's redirect."""
MAX_FLOWS = 256
"""Connect flows pending at once (a flood of starts cannot grow memory)."""


def per_user(config: ServerConfig) -> bool:
    """Whether the gateway calls *config* with each caller's own token: token exchange, or a
    connected account (``auth`` with the authorization-code grant). A ``client_credentials``
    grant is a service account the operator declared: one shared connection."""
    return config.token_exchange is not None or (
        config.auth is not None and config.auth.grant == "authorization_code")


class UserAccounts:
    """The OAuth access of each principal calling one server through the gateway.

    Args:
        config: the server's entry (with ``auth``).
        base: the toolset's own access (its store and keys); made on first use.
        connect_url: the inbox's connect page, named in the refusal.
    """

    def __init__(self, config: ServerConfig, base: Callable[[], OAuthAccess],
                 connect_url: str | None = None) -> None:
        self.config = config
        self._base = base
        self.connect_url = connect_url
        self._by_principal: dict[str, OAuthAccess] = {}

    def access(self, principal: str) -> OAuthAccess:
        """*principal*'s access: their own tokens only, and no person to ask (a token that
        cannot be refreshed is :class:`AccountNotConnected`)."""
        found = self._by_principal.get(principal)
        if found is None:
            base = self._base()
            found = self._by_principal[principal] = OAuthAccess(base.store, base.cipher,
                                                                principal)
        return found

    async def connected(self, principal: str) -> tuple[str, ...]:
        """The scopes of *principal*'s stored token for this server.

        Raises:
            AccountNotConnected: they have none (nothing was sent anywhere).
        """
        assert self.config.url is not None
        entries = await self.access(principal).store.get_credentials(
            principal, self.config.url, TOKENS)
        if not entries:
            raise AccountNotConnected(self.config.id, principal, self.connect_url)
        scope = entries[0].meta.get("scope", "")
        return tuple(sorted(str(scope).split())) if isinstance(scope, str) else ()


# -- connecting from the inbox -----------------------------------------------------------------

class ConnectRefused(CredentialError):
    """A connect request or callback refused: the reason is safe to show (no code, no state,
    no token)."""

    def __init__(self, reason: str, status: int = 400, *, foreign: bool = False) -> None:
        super().__init__(reason)
        self.status = status
        self.foreign = foreign
        """The callback was not this browser's flow: its own flow (and cookie) stay."""


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


@dataclass
class _Flow:
    """One person connecting one account: who, from which inbox session and browser."""

    server: str
    principal: str
    session_id: str
    nonce: bytes = field(repr=False)
    """SHA-256 of the browser's one-time cookie value."""
    started: float = field(default_factory=time.monotonic)
    url: str | None = None
    state: str | None = None
    located: anyio.Event = field(default_factory=anyio.Event)
    result: AuthorizationCodeResult | None = None
    answered: anyio.Event = field(default_factory=anyio.Event)
    done: anyio.Event = field(default_factory=anyio.Event)
    error: str | None = None


class _InboxAuthorizer:
    """The SDK's redirect and callback handlers for one flow: the authorization URL is handed
    to the waiting browser request; the callback waits for the browser's redirect back."""

    def __init__(self, flow: _Flow, timeout: float) -> None:
        self.flow = flow
        self.timeout = timeout

    async def redirect(self, url: str) -> None:
        state = parse_qs(urlsplit(url).query).get("state", [""])[0]
        if not state:
            raise ConnectRefused("the authorization URL carries no state")
        self.flow.url, self.flow.state = url, state
        self.flow.located.set()

    async def callback(self) -> AuthorizationCodeResult:
        with anyio.move_on_after(self.timeout):
            await self.flow.answered.wait()
        if self.flow.result is None:
            raise ConnectRefused(f"no answer from the authorization server within "
                                 f"{self.timeout:g} s")
        return self.flow.result


class _InboxStorage(StoredTokens):
    """The person's tokens as usual; a stored client registration is used only when it names
    the inbox's redirect URI (one made by ``anfitrion auth login`` names a loopback one)."""

    def __init__(self, base: StoredTokens, redirect_uri: str) -> None:
        super().__init__(base.store, base.cipher, base.principal, base.resource)
        self.redirect_uri = redirect_uri

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        found = await super().get_client_info()
        if found is None or self.redirect_uri not in [str(u) for u in found.redirect_uris or []]:
            return None
        return found


async def connect_account(config: ServerConfig, access: OAuthAccess,
                          storage: StoredTokens | None = None) -> None:
    """Open an MCP session with *config* as *access*'s principal: the SDK's flow runs when the
    server asks for a token (discovery, registration, *access*'s authorizer, the token
    request) and the tokens are stored (in *storage*, else the principal's own); with a
    usable token already stored, nothing is asked."""
    assert config.url is not None
    assert access.authorizer is not None
    auth = oauth_provider(config, storage or access.storage(config), access.authorizer)
    async with httpx2.AsyncClient(auth=auth, transport=access.transport(config),
                                  follow_redirects=False,
                                  timeout=httpx2.Timeout(config.timeout)) as http, \
            streamable_http_client(config.url, http_client=http) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()


class AccountConnector:
    """What the inbox's connect page does (``create_app(accounts=…)``).

    Args:
        config: the MCP config: its servers with ``auth`` (authorization-code grant) can be
            connected.
        store: where the sealed tokens go (the gateway's store).
        cipher: the keys that seal them (``$ANFITRION_TOKEN_KEY``).
        redirect_uri: the inbox's callback, ``<public origin>/connect/callback``; registered
            with each authorization server (dynamically, or by the operator for a
            pre-registered client).
        flow_seconds: how long a flow waits for the redirect back.
    """

    def __init__(self, config: McpConfig | Iterable[ServerConfig], store: Store,
                 cipher: TokenCipher, *, redirect_uri: str,
                 flow_seconds: float = FLOW_SECONDS) -> None:
        servers = config.servers.values() if isinstance(config, McpConfig) else config
        self.servers: dict[str, ServerConfig] = {
            s.id: s for s in servers
            if s.auth is not None and s.auth.grant == "authorization_code" and s.url}
        if not isinstance(store, CredentialStore):
            raise CredentialError(f"the store {type(store).__name__} keeps no OAuth credentials")
        self.store: CredentialStore = store
        self.cipher = cipher
        self.redirect_uri = redirect_uri
        self.flow_seconds = flow_seconds
        self._flows: dict[bytes, _Flow] = {}
        """Pending flows by SHA-256 of their state."""
        self._tg: TaskGroup | None = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[AccountConnector]:
        """The flows' task group (the inbox's lifespan)."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            try:
                yield self
            finally:
                self._tg = None
                tg.cancel_scope.cancel()

    async def status(self, principal: str) -> dict[str, Mapping[str, Any] | None]:
        """Per server: the meta of *principal*'s stored token (scope, expiry), or ``None``."""
        found: dict[str, Mapping[str, Any] | None] = {}
        for server, config in self.servers.items():
            assert config.url is not None
            entries = await self.store.get_credentials(principal, config.url, TOKENS)
            found[server] = {"issuer": entries[0].issuer, **entries[0].meta} if entries else None
        return found

    def _prune(self) -> None:
        now = time.monotonic()
        for key, flow in list(self._flows.items()):
            if now - flow.started > self.flow_seconds or flow.done.is_set():
                del self._flows[key]

    async def start(self, server: str, principal: str, session_id: str) -> tuple[str, str]:
        """Start *principal* connecting *server* from inbox session *session_id*: the
        authorization URL to send the browser to, and the one-time nonce for its cookie.

        Raises:
            ConnectRefused: an unknown server, too many flows, already connected, or the
                discovery or registration failed (the reason).
        """
        config = self.servers.get(server)
        if config is None or self._tg is None:
            raise ConnectRefused("no such server to connect", 404)
        self._prune()
        if len(self._flows) >= MAX_FLOWS:
            raise ConnectRefused("too many connections are being made: try again later", 429)
        nonce = secrets.token_urlsafe(32)
        flow = _Flow(server, principal, session_id, _digest(nonce))
        self._tg.start_soon(self._run, flow, config)
        with anyio.move_on_after(60):
            async with anyio.create_task_group() as wait:
                async def on_done() -> None:
                    await flow.done.wait()
                    wait.cancel_scope.cancel()
                wait.start_soon(on_done)
                await flow.located.wait()
                wait.cancel_scope.cancel()
        if flow.url is None or flow.state is None:
            flow.answered.set()  # ends a flow still running
            raise ConnectRefused(flow.error or (f"{principal!r} is already connected to "
                                                f"{server!r}" if flow.done.is_set()
                                                else "the authorization server did not answer"),
                                 409 if flow.error is None and flow.done.is_set() else 502)
        self._flows[_digest(flow.state)] = flow
        return flow.url, nonce

    async def _run(self, flow: _Flow, config: ServerConfig) -> None:
        assert config.auth is not None
        settings = replace(config.auth, redirect_uri=self.redirect_uri)
        target = replace(config, auth=settings)
        access = OAuthAccess(self.store, self.cipher, flow.principal,
                             _InboxAuthorizer(flow, self.flow_seconds))
        storage = _InboxStorage(access.storage(target), self.redirect_uri)
        try:
            await connect_account(target, access, storage)
        except Exception as exc:  # noqa: BLE001 - the flow's top level: its reason is shown
            flow.error = _reason(exc)
        finally:
            flow.done.set()

    async def finish(self, query: Mapping[str, str], nonce: str | None,
                     session_alive: Callable[[str], bool]) -> tuple[str, str]:
        """The browser's redirect back: *query* (``code``, ``state``, ``iss`` or ``error``)
        and the cookie's *nonce*; ``(server, principal)`` once the token is stored.

        Raises:
            ConnectRefused: unknown or used state, another browser or session, the person
                signed out, or the authorization server refused (the flow then ends).
        """
        state = query.get("state", "")
        flow = self._flows.get(_digest(state)) if state else None
        if flow is None:
            raise ConnectRefused("this sign-in link is unknown, expired or already used: "
                                 "start again from the connect page", 400, foreign=True)
        if nonce is None or not hmac.compare_digest(_digest(nonce), flow.nonce):
            # another browser (a link sent to someone, a forged callback): this flow's owner
            # may still finish it, nothing is delivered
            raise ConnectRefused("this sign-in was started in another browser: start again "
                                 "from the connect page", 403, foreign=True)
        del self._flows[_digest(state)]  # single use from here on
        if not session_alive(flow.session_id):
            flow.answered.set()
            raise ConnectRefused("the inbox session that started this sign-in has ended: sign "
                                 "in and start again", 403)
        if "error" in query or "code" not in query:
            flow.answered.set()
            code = "".join(c for c in query.get("error", "no code")[:60]
                           if c.isalnum() or c in "_- ")
            raise ConnectRefused(f"the authorization server refused: {code}", 400)
        flow.result = AuthorizationCodeResult(code=query["code"], state=state,
                                              iss=query.get("iss"))
        flow.answered.set()
        with anyio.move_on_after(60):
            await flow.done.wait()
        if flow.error is not None or not flow.done.is_set():
            raise ConnectRefused(flow.error or "the token request did not finish", 502)
        return flow.server, flow.principal


def _reason(exc: BaseException) -> str:
    """One line naming why a flow ended, for the person in the inbox: the credential error
    (redacted), else only the kind of failure."""
    exc = failure_of(exc)
    if isinstance(exc, CredentialError):
        return redact(str(exc), 300)
    return f"the connection failed ({type(exc).__name__})"


def close_idle(callers: dict[tuple[str, str], tuple[Any, Any]],
               used: dict[tuple[str, str], float], idle: float,
               now: float) -> list[tuple[str, str]]:
    """Close and forget the per-caller connections in *callers* (``(connection, caller)``
    by key) unused since *now* − *idle* with no call in flight, and forget dead ones; the
    keys closed."""
    closed = []
    for key, (conn, _) in list(callers.items()):
        if conn.dead:
            del callers[key]
            used.pop(key, None)
        elif not conn.calls.calls and now - used.get(key, now) >= idle:
            conn.close("closed after being idle")
            del callers[key]
            used.pop(key, None)
            closed.append(key)
    return closed
