"""A person connecting an account (``anfitrion auth login``): the loopback redirect flow
(RFC 8252 §7.3) — the authorization URL printed (and opened), one request awaited on
127.0.0.1 — and logout's revocation at the authorization server (RFC 7009)."""

from __future__ import annotations

import base64
import logging
import webbrowser
from collections.abc import Callable
from typing import cast
from urllib.parse import parse_qs, quote, urlsplit

import anyio
import httpx2
from anyio.abc import SocketListener, SocketStream
from mcp.client.auth.utils import (
    build_oauth_authorization_server_metadata_discovery_urls,
    issuers_match,
)
from mcp.shared.auth import AuthorizationCodeResult, OAuthMetadata
from pydantic import ValidationError

from ..store import Store
from ._config import ServerConfig
from ._oauth import CLIENT, TOKENS, CredentialError, OAuthAccess, StoredTokens

__all__ = ["LoopbackAuthorizer", "connect_account", "revoke_account"]

log = logging.getLogger("anfitrion.mcp.oauth")

MAX_REQUEST_BYTES = 16 * 1024
_TEXT = b"anfitrion: done, you can close this window.\n"
_PAGE = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n"
         b"Cache-Control: no-store\r\nContent-Length: %d\r\n\r\n%s" % (len(_TEXT), _TEXT))
_NOT_FOUND = b"HTTP/1.1 404 Not Found\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"


class LoopbackAuthorizer:
    """Prints (and, unless *no_browser*, opens) the authorization URL, then waits up to
    *timeout* seconds on the redirect URI's loopback port for the one request to its path."""

    def __init__(self, redirect_uri: str, *, no_browser: bool = False, timeout: float = 300,
                 echo: Callable[[str], None] = print) -> None:
        parts = urlsplit(redirect_uri)
        if parts.scheme != "http" or parts.hostname not in ("127.0.0.1", "localhost", "::1"):
            raise CredentialError("the redirect URI must be http://127.0.0.1:PORT/PATH for a "
                                  "login from the command line")
        self.host = "::1" if parts.hostname == "::1" else "127.0.0.1"
        self.port = parts.port or 80
        self.path = parts.path or "/"
        self.no_browser = no_browser
        self.timeout = timeout
        self.echo = echo
        self._listener: SocketListener | None = None

    async def redirect(self, url: str) -> None:
        try:
            bound = await anyio.create_tcp_listener(local_host=self.host,
                                                    local_port=self.port)
            self._listener = cast(SocketListener, bound.listeners[0])  # the one loopback
        except OSError as exc:
            raise CredentialError(f"cannot listen on {self.host}:{self.port} for the "
                                  f"authorization server's redirect: {exc.strerror}") from None
        self.echo(f"Open this address to connect your account:\n\n  {url}\n")
        if not self.no_browser:
            webbrowser.open(url)

    async def callback(self) -> AuthorizationCodeResult:
        listener = self._listener
        if listener is None:
            raise CredentialError("the login did not start")
        try:
            with anyio.fail_after(self.timeout):
                while True:
                    stream = await listener.accept()
                    async with stream:
                        query = await self._read(stream)
                    if query is not None:
                        return _result(query)
        except TimeoutError:
            raise CredentialError(f"no answer from the authorization server within "
                                  f"{self.timeout:g} s") from None
        finally:
            await listener.aclose()
            self._listener = None

    async def _read(self, stream: SocketStream) -> dict[str, str] | None:
        """The query of a ``GET`` to the redirect path (answered), or ``None`` (a 404)."""
        data = b""
        while b"\r\n\r\n" not in data and len(data) < MAX_REQUEST_BYTES:
            try:
                data += await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                break
        line = data.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
        target = urlsplit(line[1]) if len(line) == 3 and line[0] == "GET" else None
        if target is None or target.path != self.path:
            await stream.send(_NOT_FOUND)
            return None
        await stream.send(_PAGE)
        return {k: v[0] for k, v in parse_qs(target.query).items()}


def _result(query: dict[str, str]) -> AuthorizationCodeResult:
    if "error" in query:
        error = "".join(c for c in query["error"][:60] if c.isalnum() or c in "_-")
        raise CredentialError(f"the authorization server refused: {error}")
    if "code" not in query:
        raise CredentialError("the authorization server's redirect carries no code")
    return AuthorizationCodeResult(code=query["code"], state=query.get("state"),
                                   iss=query.get("iss"))


async def _metadata(client: httpx2.AsyncClient, issuer: str, url: str) -> OAuthMetadata | None:
    """The metadata of the authorization server *issuer*, or ``None``: none found, unreadable,
    or naming another issuer (RFC 8414 §3.3, as the SDK checks at login) — a revocation
    endpoint is taken only from the issuer the tokens came from, never sent them otherwise."""
    for candidate in build_oauth_authorization_server_metadata_discovery_urls(issuer, url):
        response = await client.get(candidate)
        if response.status_code != 200:
            continue
        try:
            found = OAuthMetadata.model_validate_json(response.content)
        except ValidationError:
            return None
        if not issuers_match(str(found.issuer), issuer):
            log.warning("the authorization server at %s names another issuer (%s): its "
                        "metadata is not used", issuer, str(found.issuer)[:200])
            return None
        return found
    return None


async def connect_account(access: OAuthAccess, config: ServerConfig, store: Store) -> int:
    """Connect the principal's account at *config*'s server (``anfitrion auth login``): its
    stored tokens forgotten, then a connection on *store* through *access* (whose authorizer
    runs the code flow) lists the tools. The number of tools listed."""
    from ._toolset import McpToolset  # the SDK client: imported on use

    assert config.url is not None
    await access.store.delete_credentials(access.principal, config.url, kind=TOKENS)
    async with McpToolset(config, store, oauth=access) as toolset:
        statuses = await toolset.refresh()
    return len(statuses)


async def revoke_account(access: OAuthAccess, config: ServerConfig) -> tuple[int, bool]:
    """Revoke the principal's tokens for *config* where the authorization server offers
    revocation (RFC 7009), then delete them (and the client registration) from the store.
    ``(entries deleted, revoked at the server)``."""
    assert config.url is not None
    storage: StoredTokens = access.storage(config)
    entries = await access.store.get_credentials(access.principal, config.url, TOKENS)
    revoked = False
    if entries:
        storage.issuer = entries[0].issuer
        tokens, client = await storage.get_tokens(), await storage.get_client_info()
        async with httpx2.AsyncClient(transport=access.transport(config), timeout=30,
                                      follow_redirects=False) as http:
            metadata = await _metadata(http, entries[0].issuer, config.url)
            endpoint = metadata.revocation_endpoint if metadata is not None else None
            if tokens is not None and endpoint is not None:
                for token, hint in ((tokens.refresh_token, "refresh_token"),
                                    (tokens.access_token, "access_token")):
                    if token:
                        data = {"token": token, "token_type_hint": hint}
                        headers = {}
                        if client is not None and client.client_secret:
                            pair = f"{quote(client.client_id, safe='')}:" \
                                   f"{quote(client.client_secret, safe='')}"
                            headers["Authorization"] = \
                                f"Basic {base64.b64encode(pair.encode()).decode()}"
                        elif client is not None:
                            data["client_id"] = client.client_id
                        response = await http.post(str(endpoint), data=data, headers=headers)
                        revoked = response.status_code == 200 or revoked
    deleted = await access.store.delete_credentials(access.principal, config.url, kind=TOKENS)
    deleted += await access.store.delete_credentials(access.principal, config.url, kind=CLIENT)
    return deleted, revoked
