"""OAuth 2.1 from anfitrion's MCP client to upstream HTTP servers, with each principal's own
tokens, sealed in the store.

The protocol is the MCP SDK's (:mod:`mcp.client.auth`): discovery (protected resource metadata,
then authorization server metadata), the ``iss`` checks (RFC 8414 §3.3, RFC 9207), client
identity (Client ID Metadata Document, pre-registration, dynamic registration), PKCE S256,
resource indicators, scope step-up and refresh. This module adds what anfitrion needs around
it:

- :class:`TokenCipher`: AES-GCM sealing of every token and client secret, the key from
  ``$ANFITRION_TOKEN_KEY`` or the file ``$ANFITRION_TOKEN_KEY_FILE`` (one key a line, the
  first seals, every line opens: rotation), a key id stored beside each ciphertext;
- :class:`StoredTokens`: the SDK's token storage over a
  :class:`~anfitrion.store.CredentialStore`, one entry per (principal, issuer, resource);
- :class:`OAuthAccess`: which principal a toolset acts for and how a person authorizes
  (:class:`Authorizer`); without one, a call for a principal with no token is refused with
  :class:`AccountNotConnected`, which names the command that connects the account;
- :class:`GuardedTransport`: the metadata, registration and token requests refuse loopback,
  private and link-local addresses and plain HTTP (unless ``allowInternal``) and answers over
  :data:`MAX_METADATA_BYTES`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import ipaddress
import logging
import secrets
import time
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote, urlsplit

import anyio
import httpx2
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from mcp.client.auth import OAuthClientProvider
from mcp.client.auth.exceptions import OAuthFlowError, OAuthRegistrationError, OAuthTokenError
from mcp.client.auth.extensions.client_credentials import (
    ClientCredentialsOAuthProvider,
    PrivateKeyJWTOAuthProvider,
    SignedJWTParameters,
)
from mcp.client.auth.utils import (
    create_client_registration_request,
    extract_scope_from_www_auth,
    issuers_match,
    union_scopes,
)
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)
from pydantic import ValidationError

from .._addresses import address_is_public
from .._home import environment
from .._redaction import redact
from ..exceptions import ConfigError, RunError
from ..store import CredentialEntry, CredentialStore
from ._config import AuthSettings, ServerConfig

__all__ = ["KEY_ENV", "KEY_FILE_ENV", "MAX_METADATA_BYTES", "AccountNotConnected",
           "Authorizer", "CredentialError", "GuardedTransport", "OAuthAccess", "StoredTokens",
           "TokenCipher", "connect_hint", "connect_link", "failure_of", "oauth_provider"]

log = logging.getLogger("anfitrion.mcp.oauth")

KEY_ENV = "ANFITRION_TOKEN_KEY"
KEY_FILE_ENV = "ANFITRION_TOKEN_KEY_FILE"
MAX_METADATA_BYTES = 256 * 1024
"""The largest metadata, registration or token answer read from an authorization server."""
REFRESH_MARGIN = 60.0
"""Seconds before its expiry a stored access token is refreshed."""
TOKENS, CLIENT = "tokens", "client"


class CredentialError(RunError):
    """An OAuth credential could not be obtained, kept or used (the message names why, never a
    token, code or secret)."""


def failure_of(exc: BaseException) -> BaseException:
    """The error that ended a connection or a flow: the :class:`CredentialError` inside the
    task groups that carried it (it names what to do: connect an account), else the first
    leaf of the groups, else *exc* itself."""
    if isinstance(exc, BaseExceptionGroup):
        found, _ = exc.split(CredentialError)
        leaf: BaseException = found if found is not None else exc
        while isinstance(leaf, BaseExceptionGroup):
            leaf = leaf.exceptions[0]
        return leaf
    return exc


def connect_hint(server: str) -> str:
    """The exact command that connects a person's account to *server*."""
    return f"anfitrion auth login {server}"


class AccountNotConnected(CredentialError):
    """The principal has no usable token for the server; nothing was sent with anyone else's."""

    def __init__(self, server: str, principal: str, connect_url: str | None = None) -> None:
        self.server = server
        self.principal = principal
        self.connect_url = connect_link(connect_url, server) if connect_url else None
        """The inbox's page where the person connects it (``gateway.auth.connectUrl``)."""
        where = f"open {self.connect_url} or " if self.connect_url else ""
        super().__init__(f"server {server!r} needs {principal!r} to connect an account: "
                         f"{where}run `{connect_hint(server)}` (--principal {principal})")


def connect_link(connect_url: str, server: str) -> str:
    """The inbox's connect page of *server* under *connect_url* (``…/connect``)."""
    return f"{connect_url.rstrip('/')}/{quote(server, safe='')}"


# -- sealing ---------------------------------------------------------------------------------

def _decode_key(text: str, where: str) -> bytes:
    text = text.strip()
    try:
        key = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        key = b""
    if len(key) != 32:
        raise ConfigError(f"{where}: a token key is 32 bytes in URL-safe base64 "
                          "(`anfitrion auth keygen` makes one)")
    return key


class TokenCipher:
    """AES-GCM with the first key sealing and every key opening (rotation: put the new key
    first, run ``anfitrion auth rekey``, then drop the old one). A ciphertext is bound to its
    entry (principal, issuer, resource, kind) as associated data: moved to another row, it
    does not open."""

    def __init__(self, keys: Sequence[bytes]) -> None:
        if not keys:
            raise ConfigError(f"no token key: set ${KEY_ENV} or ${KEY_FILE_ENV}")
        self._keys = {self.key_id(k): AESGCM(k) for k in keys}
        self.current = self.key_id(keys[0])

    @staticmethod
    def new_key() -> str:
        """A fresh 256-bit key, as ``$ANFITRION_TOKEN_KEY`` and the key file hold it."""
        return base64.urlsafe_b64encode(secrets.token_bytes(32)).decode().rstrip("=")

    @staticmethod
    def key_id(key: bytes) -> str:
        return hashlib.sha256(b"anfitrion token key\x00" + key).hexdigest()[:16]

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> TokenCipher:
        """The keys of ``$ANFITRION_TOKEN_KEY`` (comma-separated) or ``$ANFITRION_TOKEN_KEY_FILE``
        (one a line, ``#`` comments).

        Raises:
            ConfigError: neither is set, the file cannot be read, or a key is malformed.
        """
        env = environment() if environ is None else environ
        if env.get(KEY_ENV):
            return cls([_decode_key(k, f"${KEY_ENV}") for k in env[KEY_ENV].split(",")
                        if k.strip()])
        if env.get(KEY_FILE_ENV):
            path = Path(env[KEY_FILE_ENV])
            try:
                lines = path.read_text().splitlines()
            except (OSError, UnicodeDecodeError) as exc:
                raise ConfigError(f"the token key file cannot be read: {type(exc).__name__}",
                                  path=str(path)) from None
            return cls([_decode_key(line, str(path)) for line in lines
                        if line.strip() and not line.lstrip().startswith("#")])
        return cls([])

    def seal(self, plain: bytes, aad: bytes) -> tuple[str, str]:
        """``(key id, base64 of nonce + ciphertext)``."""
        nonce = secrets.token_bytes(12)
        sealed = self._keys[self.current].encrypt(nonce, plain, aad)
        return self.current, base64.b64encode(nonce + sealed).decode()

    def open(self, key_id: str, sealed: str, aad: bytes) -> bytes:
        """The plain text, or :class:`CredentialError` (unknown key, tampered or moved)."""
        aead = self._keys.get(key_id)
        if aead is None:
            raise CredentialError(f"a stored credential is sealed with key {key_id[:16]!r}, "
                                  "which is not configured (see key rotation in "
                                  "docs/auth-client.md)")
        try:
            raw = base64.b64decode(sealed, validate=True)
            return aead.decrypt(raw[:12], raw[12:], aad)
        except (InvalidTag, binascii.Error, ValueError):
            raise CredentialError("a stored credential does not open (tampered, or moved to "
                                  "another principal or server)") from None


def _aad(principal: str, issuer: str, resource: str, kind: str) -> bytes:
    return "\x00".join(("anfitrion-credential-v1", principal, issuer, resource, kind)).encode()


# -- storage ---------------------------------------------------------------------------------

class StoredTokens:
    """The SDK's ``TokenStorage`` for one principal and one resource (the server's URL): tokens
    and client registrations sealed in a :class:`~anfitrion.store.CredentialStore`, keyed by
    the issuer that granted them. Before discovery names the issuer, the newest entry is read;
    the SDK then drops credentials of another authorization server (SEP-2352) and the tokens
    saved afterwards replace every other issuer's."""

    def __init__(self, store: CredentialStore, cipher: TokenCipher, principal: str,
                 resource: str) -> None:
        self.store = store
        self.cipher = cipher
        self.principal = principal
        self.resource = resource
        self.issuer: str | None = None
        """The authorization server in use, once known (set by the provider)."""

    async def _read(self, kind: str) -> tuple[CredentialEntry, bytes] | None:
        for entry in await self.store.get_credentials(self.principal, self.resource, kind):
            if self.issuer is None or issuers_match(entry.issuer, self.issuer):
                aad = _aad(entry.principal, entry.issuer, entry.resource, kind)
                return entry, self.cipher.open(entry.key_id, entry.sealed, aad)
        return None

    async def _write(self, kind: str, plain: bytes, meta: Mapping[str, Any]) -> None:
        issuer = self.issuer or ""
        key_id, sealed = self.cipher.seal(plain, _aad(self.principal, issuer, self.resource,
                                                      kind))
        await self.store.put_credential(CredentialEntry(
            self.principal, issuer, self.resource, kind, key_id, sealed, dict(meta), time.time()))
        for entry in await self.store.get_credentials(self.principal, self.resource, kind):
            if entry.issuer != issuer:  # never kept beside another server's
                await self.store.delete_credentials(self.principal, self.resource,
                                                    issuer=entry.issuer, kind=kind)

    async def get_tokens(self) -> OAuthToken | None:
        found = await self._read(TOKENS)
        if found is None:
            return None
        entry, plain = found
        try:
            tokens = OAuthToken.model_validate_json(plain)
        except ValidationError:
            raise CredentialError("a stored token is malformed") from None
        expires_at = entry.meta.get("expires_at")
        if isinstance(expires_at, (int, float)):  # what is left of it, less the margin
            tokens.expires_in = max(0, int(expires_at - time.time() - REFRESH_MARGIN))
        return tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        meta: dict[str, Any] = {"scope": tokens.scope or "", "refreshable":
                                tokens.refresh_token is not None}
        if tokens.expires_in is not None:
            meta["expires_at"] = time.time() + int(tokens.expires_in)
        await self._write(TOKENS, tokens.model_dump_json(exclude_none=True).encode(), meta)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        found = await self._read(CLIENT)
        if found is None:
            return None
        try:
            return OAuthClientInformationFull.model_validate_json(found[1])
        except ValidationError:
            raise CredentialError("a stored client registration is malformed") from None

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        await self._write(CLIENT, client_info.model_dump_json(exclude_none=True).encode(),
                          {"client_id": client_info.client_id})


# -- how a person authorizes -----------------------------------------------------------------

class Authorizer(Protocol):
    """How a person authorizes: sends them to the authorization URL, then returns what the
    authorization server redirected back with (the SDK checks ``state`` and ``iss``)."""

    async def redirect(self, url: str) -> None: ...

    async def callback(self) -> AuthorizationCodeResult: ...


@dataclass(frozen=True, slots=True)
class _NotConnected:
    """No person to ask (a toolset at call time): refuse, naming the command."""

    server: str
    principal: str

    async def redirect(self, url: str) -> None:
        raise AccountNotConnected(self.server, self.principal)

    async def callback(self) -> AuthorizationCodeResult:
        raise AccountNotConnected(self.server, self.principal)


# -- the metadata fetcher's guard --------------------------------------------------------------

def _internal(address: str) -> bool:
    return not address_is_public(ipaddress.ip_address(address.split("%", 1)[0]))


class GuardedTransport(httpx2.AsyncBaseTransport):
    """The HTTP transport of an OAuth-protected server's client: the MCP endpoint itself (the
    operator's URL) passes; every other request (metadata, registration, authorization, token)
    must be HTTPS to a public address unless *allow_internal*, and its answer is cut off at
    :data:`MAX_METADATA_BYTES`."""

    def __init__(self, server_url: str, *, allow_internal: bool,
                 inner: httpx2.AsyncBaseTransport | None = None) -> None:
        self.server_url = server_url
        self.allow_internal = allow_internal
        self.inner = inner or httpx2.AsyncHTTPTransport()

    async def check(self, url: httpx2.URL) -> None:
        """Refuse *url* (:class:`CredentialError`) unless it may be fetched."""
        if self.allow_internal:
            return
        if url.scheme != "https":
            raise CredentialError(f"refused {_shown(url)}: authorization metadata and "
                                  "endpoints must be HTTPS (allowInternal permits others)")
        host = url.host
        try:
            infos = await anyio.getaddrinfo(host, url.port or 443)
        except OSError:
            raise CredentialError(f"refused {_shown(url)}: the host does not resolve") from None
        if any(_internal(str(info[4][0])) for info in infos):
            raise CredentialError(f"refused {_shown(url)}: an internal address (loopback, "
                                  "private, link-local); allowInternal permits it")

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if str(request.url) == self.server_url:
            return await self.inner.handle_async_request(request)
        await self.check(request.url)
        response = await self.inner.handle_async_request(request)
        body = bytearray()
        try:
            async for chunk in response.stream:  # type: ignore[union-attr]
                body += chunk
                if len(body) > MAX_METADATA_BYTES:
                    raise CredentialError(f"refused {_shown(request.url)}: the answer is over "
                                          f"{MAX_METADATA_BYTES} bytes")
        finally:
            await response.aclose()
        return httpx2.Response(response.status_code, headers=response.headers,
                               stream=httpx2.ByteStream(bytes(body)),
                               extensions=response.extensions, request=request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _shown(url: httpx2.URL | str) -> str:
    """A URL as errors show it: scheme, host and path, never its query (codes, states)."""
    parts = urlsplit(str(url))
    return redact(f"{parts.scheme}://{parts.netloc}{parts.path}"[:200], 200)


# -- the SDK's providers, with anfitrion's rules ---------------------------------------------

class _Rules:
    """What anfitrion adds to an SDK provider (a mixin before it): the configured issuer only,
    the declared scopes (plus a step-up's challenge), the stored token's remaining lifetime,
    and errors that name no secret."""

    context: Any
    settings: AuthSettings
    storage: StoredTokens
    server_id: str
    _challenged: str | None = None

    def _select_authorization_server(self, advertised: list[str]) -> str:
        wanted = self.settings.issuer
        chosen = advertised[0]
        if wanted is not None:
            matching = [a for a in advertised if issuers_match(a, wanted)]
            if not matching:
                raise OAuthFlowError(f"the server names authorization servers "
                                     f"{[_shown(a) for a in advertised[:5]]}, not the "
                                     f"configured issuer {_shown(wanted)}")
            chosen = matching[0]
        self.storage.issuer = chosen
        return chosen

    async def _initialize(self) -> None:
        await super()._initialize()  # type: ignore[misc]
        if self.context.current_tokens is not None:
            self.context.update_token_expiry(self.context.current_tokens)

    async def _perform_authorization(self) -> httpx2.Request:
        if self.settings.scopes:  # the narrowest: what the operator declared, plus a challenge
            self.context.client_metadata.scope = union_scopes(
                " ".join(self.settings.scopes), self._challenged)
        self._note_issuer()
        request: httpx2.Request = await super()._perform_authorization()  # type: ignore[misc]
        return request

    def _note_issuer(self) -> None:
        metadata = self.context.oauth_metadata
        if metadata is not None:
            self.storage.issuer = str(metadata.issuer)
        elif self.storage.issuer is None:
            self.storage.issuer = self._expected_issuer()  # type: ignore[attr-defined]

    def _registering_declared_scopes(self, request: httpx2.Request) -> httpx2.Request:
        """A dynamic registration asks for the declared scopes (plus a challenge's), the
        ones the authorization request will ask for: the SDK registers with the challenge's
        alone, and a server then refuses the declared ones as not allowed for the client."""
        metadata = self.context.oauth_metadata
        endpoint = metadata.registration_endpoint if metadata is not None else None
        if (not self.settings.scopes or endpoint is None or request.method != "POST"
                or str(request.url) != str(endpoint)):
            return request
        self.context.client_metadata.scope = union_scopes(" ".join(self.settings.scopes),
                                                          self._challenged)
        rebuilt: httpx2.Request = create_client_registration_request(
            metadata, self.context.client_metadata,
            self.context.get_authorization_base_url(self.context.server_url))
        return rebuilt

    async def _auth_flow(self, request: httpx2.Request
                         ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        flow = super()._auth_flow(request)  # type: ignore[misc]
        try:
            outgoing = await flow.__anext__()
            while True:
                response = yield self._registering_declared_scopes(outgoing)
                if response.status_code in (401, 403):
                    self._challenged = extract_scope_from_www_auth(response)
                outgoing = await flow.asend(response)
        except StopAsyncIteration:
            return
        except (OAuthFlowError, OAuthTokenError, OAuthRegistrationError) as exc:
            raise CredentialError(f"authorization with server {self.server_id!r} failed: "
                                  f"{redact(str(exc), 300)}") from None
        finally:
            await flow.aclose()


class _CodeProvider(_Rules, OAuthClientProvider):
    pass


class _SecretProvider(_Rules, ClientCredentialsOAuthProvider):
    pass


class _KeyProvider(_Rules, PrivateKeyJWTOAuthProvider):
    pass


def _fixed_client(settings: AuthSettings) -> OAuthClientInformationFull | None:
    if settings.client_id is None:
        return None
    method = settings.token_endpoint_auth_method or (
        "client_secret_basic" if settings.client_secret else "none")
    return OAuthClientInformationFull(
        client_id=settings.client_id, client_secret=settings.client_secret,
        redirect_uris=[settings.redirect_uri],  # type: ignore[list-item]
        token_endpoint_auth_method=method,  # type: ignore[arg-type]
        grant_types=["authorization_code", "refresh_token"])


class _PreRegistered(StoredTokens):
    """Tokens stored as usual; the client is the operator's, never a stored registration."""

    def __init__(self, base: StoredTokens, client: OAuthClientInformationFull) -> None:
        super().__init__(base.store, base.cipher, base.principal, base.resource)
        self.client = client

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info  # the SDK re-registers only when the issuer changed


def oauth_provider(config: ServerConfig, storage: StoredTokens,
                   authorizer: Authorizer) -> httpx2.Auth:
    """The SDK provider for *config* (which has ``auth``), with anfitrion's rules."""
    settings = config.auth
    assert settings is not None
    assert config.url is not None
    scope = " ".join(settings.scopes) or None
    provider: _Rules
    if settings.grant == "client_credentials":
        assert settings.client_id is not None
        if settings.private_key:
            jwt = SignedJWTParameters(issuer=settings.client_id, subject=settings.client_id,
                                      signing_key=settings.private_key,
                                      signing_algorithm=settings.signing_algorithm)
            provider = _KeyProvider(config.url, storage, settings.client_id,
                                    jwt.create_assertion_provider(), scope=scope,
                                    issuer=settings.issuer)
        else:
            method = settings.token_endpoint_auth_method or "client_secret_basic"
            provider = _SecretProvider(config.url, storage, settings.client_id,
                                       settings.client_secret or "",
                                       token_endpoint_auth_method=method,  # type: ignore[arg-type]
                                       scope=scope, issuer=settings.issuer)
    else:
        fixed = _fixed_client(settings)
        if fixed is not None:
            storage = _PreRegistered(storage, fixed)
        metadata = OAuthClientMetadata(
            client_name="anfitrion", redirect_uris=[settings.redirect_uri],  # type: ignore[list-item]
            grant_types=["authorization_code", "refresh_token"], response_types=["code"],
            token_endpoint_auth_method="none", scope=scope)
        provider = _CodeProvider(config.url, metadata, storage, authorizer.redirect,
                                 authorizer.callback,
                                 client_metadata_url=settings.client_metadata_url)
    provider.settings, provider.storage, provider.server_id = settings, storage, config.id
    return provider  # type: ignore[return-value]


@dataclass
class OAuthAccess:
    """Whom a toolset's OAuth-protected servers are called for, and how a person authorizes.

    Attributes:
        store: where the sealed credentials live.
        cipher: the keys that seal them.
        principal: whose tokens are used — never another principal's.
        authorizer: a person authorizing now (``anfitrion auth login``); ``None``: a server
            that needs an authorization refuses with :class:`AccountNotConnected`.
    """

    store: CredentialStore
    cipher: TokenCipher
    principal: str
    authorizer: Authorizer | None = None
    providers: dict[str, httpx2.Auth] = field(default_factory=dict)

    @classmethod
    def from_env(cls, store: object, principal: str,
                 authorizer: Authorizer | None = None) -> OAuthAccess:
        """With the keys of :meth:`TokenCipher.from_env`.

        Raises:
            ConfigError: no key, or the store keeps no credentials.
        """
        if not isinstance(store, CredentialStore):
            raise ConfigError(f"the store {type(store).__name__} keeps no OAuth credentials")
        return cls(store, TokenCipher.from_env(), principal, authorizer)

    def storage(self, config: ServerConfig) -> StoredTokens:
        assert config.url is not None
        return StoredTokens(self.store, self.cipher, self.principal, config.url)

    def auth(self, config: ServerConfig) -> httpx2.Auth:
        """The provider for *config* (one per server, kept: it holds the discovered metadata)."""
        if config.id not in self.providers:
            authorizer = self.authorizer or _NotConnected(config.id, self.principal)
            self.providers[config.id] = oauth_provider(config, self.storage(config), authorizer)
        return self.providers[config.id]

    def transport(self, config: ServerConfig) -> GuardedTransport:
        assert config.url is not None
        assert config.auth is not None
        return GuardedTransport(config.url, allow_internal=config.auth.allow_internal)
