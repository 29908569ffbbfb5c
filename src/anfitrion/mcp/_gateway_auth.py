"""The gateway as an OAuth 2.1 resource server (streamable HTTP), and its token exchange.

Built on the MCP SDK's ``mcp.server.auth`` (the :class:`TokenVerifier` protocol and its
:class:`AccessToken`, the authenticated user the SDK's session manager binds each session to,
the bearer middleware's scope check, the Protected Resource Metadata route) and on PyJWT (the
JOSE library the SDK itself depends on) for every signature and claim check: nothing here
parses a token by hand or does cryptography.

- Protected Resource Metadata (RFC 9728) at ``/.well-known/oauth-protected-resource/mcp``.
- ``401`` with ``WWW-Authenticate: Bearer error=…, resource_metadata=…, scope=…`` for a
  missing or bad token, ``403 insufficient_scope`` naming the scope needed; each refusal is
  audited (``gateway.auth_refused``), never with the token.
- JWTs checked locally against the issuer's keys (:class:`JwksCache`: cached, fetched again
  for an unknown ``kid`` at most every :data:`MIN_REFETCH_SECONDS`, each fetch bounded in time
  and size, internal addresses refused unless allowed), or by introspection (RFC 7662).
- The token's subject (the configured claim) becomes the anfitrion :class:`Principal`, its
  scopes and roles the principal's (:func:`principal_for`).
- Token exchange (RFC 8693) for upstream servers whose entry asks for it
  (:class:`TokenExchanger`): the client's token itself never goes upstream.
"""

from __future__ import annotations

import contextvars
import ipaddress
import itertools
import json
import logging
import re
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx2 as httpx
import jwt
from mcp.server.auth.handlers.metadata import ProtectedResourceMetadataHandler
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.routes import build_resource_metadata_url, cors_middleware
from mcp.shared.auth import ProtectedResourceMetadata
from pydantic import AnyHttpUrl
from starlette.authentication import AuthCredentials

from .._audit import CALL_IDENTITY, CallIdentity
from .._principal import Principal
from .._redaction import redact
from ..exceptions import InputError
from ..toolkits._http_fetch import address_is_public
from ._oauth_settings import OAuthSettings, TokenExchangeSettings

__all__ = ["CALLER", "CALL_IDENTITY", "UPSTREAM_SCOPES", "AuthRefused", "Caller",
           "ExchangedTokenAuth", "Fetcher", "IntrospectionVerifier", "JwksCache", "JwtVerifier",
           "OAuthResource", "TokenExchanger", "UpstreamToken", "call_identity", "claim_at",
           "claim_words", "principal_for", "request_identity"]

log = logging.getLogger("anfitrion.mcp.gateway")

MAX_TOKEN_CHARS = 16 * 1024
"""A longer bearer token is refused before any parsing."""
MAX_DOCUMENT_BYTES = 256 * 1024
"""A metadata document, key set or token response larger than this is refused."""
MAX_KEYS = 64
MIN_REFETCH_SECONDS = 10.0
"""An unknown ``kid`` fetches the key set again at most this often: a flood of tokens with
made-up key ids cannot turn the gateway into a load generator against the issuer."""
REFUSED_AUDIT = "gateway.auth_refused"
EXCHANGED_AUDIT = "gateway.token_exchanged"
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
VERIFIED_SECONDS = 60.0
"""How long a verified JWT is taken as verified without checking its signature again (its
expiry is still checked on every request); a key the issuer withdraws stops working after
at most this long."""
MAX_VERIFIED = 4096
_ERROR_CODE = re.compile(r"[a-z_]{1,40}")
_TEXT = 200
"""Longest principal id, issuer or client id taken from a token."""


class AuthRefused(InputError):
    """A request without a usable token: the status, the OAuth error code, and a one-line
    reason safe to show the caller (it never holds the token)."""

    def __init__(self, reason: str, *, status: int = 401, error: str = "invalid_token",
                 scope: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.error = error
        self.scope = scope


# -- bounded fetches ---------------------------------------------------------------------------

class Fetcher:
    """GETs and POSTs of small JSON documents: bounded in time and size, no redirects, no
    proxies from the environment; unless ``allow_internal``, https only and to public
    addresses only (each resolved address checked, the connection made to the checked one)."""

    def __init__(self, *, timeout: float, allow_internal: bool,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.timeout = timeout
        self.allow_internal = allow_internal
        self._transport = transport

    async def _target(self, url: str) -> tuple[str, dict[str, Any], str]:
        """The URL to connect to, the request extensions, and the Host header."""
        parts = urlsplit(url)
        host = parts.hostname or ""
        if parts.scheme not in ("https", "http") or not host:
            raise AuthRefused(f"{url[:200]!r} is not an http(s) URL", status=503,
                              error="temporarily_unavailable")
        if self.allow_internal:
            return url, {}, parts.netloc
        if parts.scheme != "https":
            raise AuthRefused(f"{url[:200]!r}: only https is allowed (allowInternal is off)",
                              status=503, error="temporarily_unavailable")
        port = parts.port or 443
        try:
            infos = await anyio.getaddrinfo(host, port)
        except OSError:
            raise AuthRefused(f"cannot resolve {host[:100]!r}", status=503,
                              error="temporarily_unavailable") from None
        addresses = [str(info[4][0]).split("%")[0] for info in infos]
        for text in addresses:
            if not address_is_public(ipaddress.ip_address(text)):
                raise AuthRefused(f"{host[:100]!r} resolves to {text}, an internal address; "
                                  "refused (allowInternal is off)", status=503,
                                  error="temporarily_unavailable")
        shown = f"[{addresses[0]}]" if ":" in addresses[0] else addresses[0]
        pinned = parts._replace(netloc=f"{shown}:{port}").geturl()
        return pinned, {"sni_hostname": host}, parts.netloc

    async def request(self, method: str, url: str, *, data: Mapping[str, str] | None = None,
                      auth: tuple[str, str] | None = None) -> tuple[int, Any]:
        """The status and the parsed JSON body (``None`` when it is not JSON)."""
        target, extensions, host = await self._target(url)
        try:
            with anyio.fail_after(self.timeout):
                async with httpx.AsyncClient(trust_env=False, follow_redirects=False,
                                             timeout=self.timeout,
                                             transport=self._transport) as client:
                    request = client.build_request(
                        method, target, data=data, extensions=extensions,
                        headers={"Host": host, "Accept": "application/json"})
                    response = await client.send(request, stream=True, auth=auth)
                    try:
                        body = bytearray()
                        async for chunk in response.aiter_raw():
                            body.extend(chunk)
                            if len(body) > MAX_DOCUMENT_BYTES:
                                raise AuthRefused(f"{url[:200]!r} answered more than "
                                                  f"{MAX_DOCUMENT_BYTES} bytes", status=503,
                                                  error="temporarily_unavailable")
                    finally:
                        await response.aclose()
        except TimeoutError:
            raise AuthRefused(f"{url[:200]!r} did not answer within {self.timeout:g} s",
                              status=503, error="temporarily_unavailable") from None
        except httpx.HTTPError as exc:
            raise AuthRefused(f"{url[:200]!r} could not be reached ({type(exc).__name__})",
                              status=503, error="temporarily_unavailable") from None
        try:
            return response.status_code, json.loads(bytes(body))
        except ValueError:
            return response.status_code, None

    async def get_json(self, url: str) -> dict[str, Any]:
        status, body = await self.request("GET", url)
        if status != 200 or not isinstance(body, dict):
            raise AuthRefused(f"{url[:200]!r} did not answer a JSON object (HTTP {status})",
                              status=503, error="temporarily_unavailable")
        return body


# -- keys --------------------------------------------------------------------------------------

_FAMILIES = {"RSA": ("RS", "PS"), "EC": ("ES",), "OKP": ("EdDSA",)}


@dataclass(frozen=True, slots=True)
class _Key:
    """One published public key: PyJWT's key object, its declared ``alg`` and ``kty``."""

    jwk: jwt.PyJWK
    alg: str | None
    kty: str

    def verifies(self, alg: str) -> bool:
        """True when a token signed with *alg* may be checked with this key: the key's own
        ``alg`` when it declares one, else an algorithm of the key's family."""
        if self.alg is not None:
            return alg == self.alg
        return alg.startswith(_FAMILIES.get(self.kty, ("\x00",)))

class JwksCache:
    """The issuer's public keys, by ``kid``: fetched on first use, again after
    ``max_age`` seconds, and again for an unknown ``kid`` (at most every
    :data:`MIN_REFETCH_SECONDS`). A fetch that fails keeps the keys already known. Symmetric
    keys (``kty: oct``) and encryption keys are never used."""

    def __init__(self, uri: Callable[[], Awaitable[str]], fetcher: Fetcher, *,
                 max_age: float = 300.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._uri = uri
        self._fetcher = fetcher
        self.max_age = max_age
        self._clock = clock
        self._keys: dict[str, _Key] = {}
        self._fetched_at: float | None = None
        self._tried_at: float | None = None
        self._lock = anyio.Lock()
        self.fetches = 0

    @staticmethod
    def parse(document: Any) -> dict[str, _Key]:
        if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
            raise AuthRefused("the issuer's key set is not a JWKS document", status=503,
                              error="temporarily_unavailable")
        keys: dict[str, _Key] = {}
        for raw in document["keys"][:MAX_KEYS]:
            if (not isinstance(raw, dict) or raw.get("kty") == "oct"
                    or raw.get("use", "sig") != "sig" or not isinstance(raw.get("kid", ""), str)):
                continue
            try:
                key = jwt.PyJWK.from_dict(raw)
            except (jwt.PyJWTError, ValueError, TypeError):  # unusable key: skip it
                continue
            alg = raw.get("alg")
            keys[str(raw.get("kid", ""))] = _Key(key, alg if isinstance(alg, str) else None,
                                                 str(raw["kty"]))
        if not keys:
            raise AuthRefused("the issuer's key set holds no usable signing key", status=503,
                              error="temporarily_unavailable")
        return keys

    async def _fetch(self) -> None:
        self._tried_at = self._clock()
        self.fetches += 1
        self._keys = self.parse(await self._fetcher.get_json(await self._uri()))
        self._fetched_at = self._clock()

    async def key(self, kid: str) -> _Key:
        async with self._lock:  # one fetch at a time; the others then find its keys
            now = self._clock()
            stale = self._fetched_at is None or now - self._fetched_at > self.max_age
            recently = self._tried_at is not None and now - self._tried_at < MIN_REFETCH_SECONDS
            if (stale or kid not in self._keys) and not recently:
                try:
                    await self._fetch()
                except AuthRefused:
                    if not self._keys:
                        raise
                    log.warning("the issuer's keys could not be fetched again; the known "
                                "keys stay in use")
            elif self._fetched_at is None:
                raise AuthRefused("the issuer's keys could not be fetched (the next try is "
                                  f"at most every {MIN_REFETCH_SECONDS:g} s)", status=503,
                                  error="temporarily_unavailable")
        found = self._keys.get(kid)
        if found is None and kid == "" and len(self._keys) == 1:
            found = next(iter(self._keys.values()))  # a token without kid, a one-key set
        if found is None:
            raise AuthRefused("the token is signed with a key the issuer does not publish")
        return found


# -- verifiers ---------------------------------------------------------------------------------

def claim_at(claims: Mapping[str, Any], path: str) -> Any:
    """The claim named *path*, else the nested claim its dots name (``realm_access.roles``)."""
    if path in claims:  # a namespaced claim: "https://example.com/roles"
        return claims[path]
    value: Any = claims
    for part in path.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def claim_words(value: Any) -> frozenset[str]:
    """A space-separated string or a list of strings, as a set; anything else: empty."""
    if isinstance(value, str):
        return frozenset(value.split())
    if isinstance(value, list):
        return frozenset(v for v in value if isinstance(v, str) and v and v.isprintable()
                         and len(v) <= _TEXT)
    return frozenset()


def _audiences(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []


def _access_token(token: str, claims: dict[str, Any], settings: OAuthSettings,
                  audience: str) -> AccessToken:
    client_id = claims.get("client_id", claims.get("azp", ""))
    subject = claims.get("sub")
    exp = claims.get("exp")
    return AccessToken(
        token=token, client_id=client_id if isinstance(client_id, str) else "",
        scopes=sorted(claim_words(claim_at(claims, settings.scopes_claim))),
        expires_at=int(exp) if isinstance(exp, (int, float)) and not isinstance(exp, bool)
        else None,
        resource=audience, subject=subject if isinstance(subject, str) else None,
        claims=claims)


class JwtVerifier:
    """The SDK's :class:`TokenVerifier` for JWT access tokens, checked locally: the ``alg``
    on the allow-list (never ``none`` or ``HS*``), the signature with the issuer's key of that
    ``kid``, ``iss``, ``aud``, ``exp`` and ``nbf`` (with leeway)."""

    def __init__(self, settings: OAuthSettings, keys: JwksCache, audience: str, *,
                 clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.keys = keys
        self.audience = audience
        self._clock = clock
        self._verified: dict[str, tuple[AccessToken, float]] = {}
        """Tokens verified in the last :data:`VERIFIED_SECONDS` (at most
        :data:`MAX_VERIFIED`): a client presents the same token on every request, and its
        signature does not change; ``exp`` is checked again on every use."""

    async def check(self, token: str) -> AccessToken:
        now = self._clock()
        known = self._verified.get(token)
        if known is not None and known[1] > now:
            access = known[0]
            if access.expires_at is None or access.expires_at + self.settings.leeway >= now:
                return access
            del self._verified[token]
            raise AuthRefused("the token has expired")
        access = await self._check(token)
        if len(self._verified) >= MAX_VERIFIED:  # the oldest quarter goes (amortised O(1))
            for stale in list(itertools.islice(self._verified, MAX_VERIFIED // 4)):
                del self._verified[stale]
        self._verified[token] = (access, now + VERIFIED_SECONDS)
        return access

    async def _check(self, token: str) -> AccessToken:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise AuthRefused("the token is not a JWT") from None
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in self.settings.algorithms:
            raise AuthRefused(f"the token's algorithm {str(alg)[:20]!r} is not accepted")
        kid = header.get("kid", "")
        if not isinstance(kid, str):
            raise AuthRefused("the token's key id is not a string")
        key = await self.keys.key(kid)
        if not key.verifies(alg):
            raise AuthRefused("the token's algorithm does not match its key")
        try:
            claims = jwt.decode(  # the key object, the one allowed algorithm
                token, key.jwk.key, algorithms=[alg], audience=self.audience,
                issuer=self.settings.issuer, leeway=self.settings.leeway,
                options={"require": ["exp", "iss", "aud"], "verify_signature": True})
        except jwt.ExpiredSignatureError:
            raise AuthRefused("the token has expired") from None
        except jwt.ImmatureSignatureError:
            raise AuthRefused("the token is not valid yet") from None
        except jwt.InvalidAudienceError:
            raise AuthRefused("the token was issued for another audience") from None
        except jwt.InvalidIssuerError:
            raise AuthRefused("the token was issued by another issuer") from None
        except jwt.MissingRequiredClaimError as exc:
            raise AuthRefused(f"the token lacks the {exc.claim!r} claim") from None
        except jwt.PyJWTError:
            raise AuthRefused("the token's signature or claims are invalid") from None
        return _access_token(token, claims, self.settings, self.audience)

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            return await self.check(token)
        except AuthRefused:
            return None


class IntrospectionVerifier:
    """The SDK's :class:`TokenVerifier` asking the authorization server (RFC 7662) about each
    token, so a revoked token stops working at once. The answer must say ``active``, this
    issuer (when it names one), this audience, and not be expired."""

    def __init__(self, settings: OAuthSettings, fetcher: Fetcher, audience: str) -> None:
        assert settings.introspection is not None
        self.settings = settings
        self.introspection = settings.introspection
        self.fetcher = fetcher
        self.audience = audience

    async def check(self, token: str) -> AccessToken:
        found = self.introspection
        status, body = await self.fetcher.request(
            "POST", found.endpoint, data={"token": token, "token_type_hint": "access_token"},
            auth=(found.client_id, found.client_secret))
        if status != 200 or not isinstance(body, dict):
            raise AuthRefused(f"the introspection endpoint answered HTTP {status} without a "
                              "JSON object", status=503, error="temporarily_unavailable")
        if body.get("active") is not True:
            raise AuthRefused("the token is not active (revoked, expired or unknown)")
        issuer = body.get("iss", self.settings.issuer)
        if issuer != self.settings.issuer:
            raise AuthRefused("the token was issued by another issuer")
        if self.audience not in _audiences(body.get("aud")):
            raise AuthRefused("the token was issued for another audience")
        now, leeway = time.time(), self.settings.leeway
        exp, nbf = body.get("exp"), body.get("nbf")
        if isinstance(exp, (int, float)) and exp + leeway < now:
            raise AuthRefused("the token has expired")
        if isinstance(nbf, (int, float)) and nbf - leeway > now:
            raise AuthRefused("the token is not valid yet")
        claims = {**body, "iss": issuer}
        return _access_token(token, claims, self.settings, self.audience)

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            return await self.check(token)
        except AuthRefused:
            return None


def principal_for(access: AccessToken, settings: OAuthSettings) -> Principal:
    """The anfitrion principal of a verified token: its id the configured claim, its scopes
    the token's, its roles the roles claim's; issuer, subject and client id as attributes
    (what every call's audit says). Never the token itself.

    Raises:
        AuthRefused: the principal claim is missing or not a short visible string.
    """
    claims = access.claims or {}
    name = claim_at(claims, settings.principal_claim)
    if not isinstance(name, str) or not name or len(name) > _TEXT or not name.isprintable():
        raise AuthRefused(f"the token has no usable {settings.principal_claim!r} claim")
    roles = (claim_words(claim_at(claims, settings.roles_claim)) if settings.roles_claim
             else frozenset())
    return Principal(name, roles=roles, scopes=frozenset(access.scopes), attributes={
        "issuer": str(claims.get("iss", ""))[:_TEXT], "subject": (access.subject or "")[:_TEXT],
        "client_id": access.client_id[:_TEXT], "authenticated_by": "oauth"})


# -- the HTTP side -----------------------------------------------------------------------------

OnRefused = Callable[[Mapping[str, Any]], Awaitable[None]]


def _quoted(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', "'")


class OAuthResource:
    """What :class:`~anfitrion.mcp._gateway_http.HttpGuard` asks for each request when the
    gateway is a resource server: the metadata route, and who the bearer is.

    Args:
        settings: ``gateway.auth``.
        resource: the gateway's public MCP URL (``settings.resource`` or the loopback one).
        on_refused: called with the audit data of each refusal.
        transport: an httpx transport for the fetches.
        clock: the key cache's clock (monotonic seconds).
    """

    def __init__(self, settings: OAuthSettings, resource: str, *,
                 on_refused: OnRefused | None = None,
                 transport: httpx.AsyncBaseTransport | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self.resource = resource
        self.audience = settings.audience or resource
        self.on_refused = on_refused
        self.fetcher = Fetcher(timeout=settings.fetch_timeout,
                               allow_internal=settings.allow_internal, transport=transport)
        self._metadata: dict[str, Any] | None = None
        self.verifier: JwtVerifier | IntrospectionVerifier
        if settings.introspection is not None:
            self.verifier = IntrospectionVerifier(settings, self.fetcher, self.audience)
        else:
            self.keys = JwksCache(self._jwks_uri, self.fetcher,
                                  max_age=settings.jwks_cache_seconds, clock=clock)
            self.verifier = JwtVerifier(settings, self.keys, self.audience)
        self.metadata_url = str(build_resource_metadata_url(AnyHttpUrl(resource)))
        self.metadata_path = urlsplit(self.metadata_url).path
        # the SDK's metadata model and handler (as create_protected_resource_routes builds
        # them), validated from the strings: an issuer keeps its exact spelling (RFC 8414
        # compares issuers as strings; a URL object would gain a trailing slash)
        document = ProtectedResourceMetadata.model_validate({
            "resource": resource, "authorization_servers": [settings.issuer],
            "scopes_supported": list(settings.required_scopes) or None,
            "resource_name": "anfitrion gateway"})
        self._handler = cors_middleware(ProtectedResourceMetadataHandler(document).handle,
                                        ["GET", "OPTIONS"])

    async def issuer_metadata(self) -> dict[str, Any]:
        """The issuer's metadata (RFC 8414, else OpenID discovery), its ``issuer`` checked."""
        if self._metadata is None:
            base = self.settings.issuer.rstrip("/")
            parts = urlsplit(base)
            candidates = [
                f"{parts.scheme}://{parts.netloc}/.well-known/oauth-authorization-server"
                f"{parts.path}", f"{base}/.well-known/openid-configuration"]
            last: AuthRefused | None = None
            for url in candidates:
                try:
                    found = await self.fetcher.get_json(url)
                except AuthRefused as exc:
                    last = exc
                    continue
                if found.get("issuer") != self.settings.issuer:
                    raise AuthRefused("the issuer's metadata names another issuer", status=503,
                                      error="temporarily_unavailable")
                self._metadata = found
                break
            else:
                assert last is not None
                raise last
        return self._metadata

    async def _jwks_uri(self) -> str:
        if self.settings.jwks_uri is not None:
            return self.settings.jwks_uri
        uri = (await self.issuer_metadata()).get("jwks_uri")
        if not isinstance(uri, str):
            raise AuthRefused("the issuer's metadata has no jwks_uri", status=503,
                              error="temporarily_unavailable")
        return uri

    async def metadata(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Serve the Protected Resource Metadata (the SDK's handler)."""
        await self._handler(scope, receive, send)

    def challenge(self, refusal: AuthRefused) -> bytes:
        parts = [f'error="{refusal.error}"',
                 f'error_description="{_quoted(refusal.reason[:300])}"',
                 f'resource_metadata="{self.metadata_url}"']
        scope = refusal.scope or " ".join(self.settings.required_scopes)
        if scope:
            parts.append(f'scope="{scope}"')
        return ("Bearer " + ", ".join(parts)).encode("latin-1", "replace")

    async def authenticate(self, headers: Mapping[str, str]) -> AuthenticatedUser:
        """The bearer's verified identity; :class:`AuthRefused` otherwise."""
        given = headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise AuthRefused("a bearer token is required")
        if len(token) > MAX_TOKEN_CHARS:
            raise AuthRefused("the token is too long")
        access = await self.verifier.check(token)
        missing = [s for s in self.settings.required_scopes if s not in access.scopes]
        if missing:
            raise AuthRefused(f"the token lacks the scope {missing[0]!r}", status=403,
                              error="insufficient_scope",
                              scope=" ".join(self.settings.required_scopes))
        principal_for(access, self.settings)  # refuses a token without a usable principal
        return AuthenticatedUser(access)

    async def refuse(self, send: Any, refusal: AuthRefused, scope: Mapping[str, Any]) -> None:
        """Answer the refusal (JSON body, ``WWW-Authenticate``) and audit it."""
        body = json.dumps({"error": refusal.error,
                           "error_description": refusal.reason}).encode()
        await send({"type": "http.response.start", "status": refusal.status,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode()),
                                (b"www-authenticate", self.challenge(refusal))]})
        await send({"type": "http.response.body", "body": body})
        if self.on_refused is not None:
            client = scope.get("client") or ("", 0)
            await self.on_refused({"status": refusal.status, "error": refusal.error,
                                   "reason": redact(refusal.reason), "path": redact(
                                       str(scope.get("path", "")), 200),
                                   "client_address": str(client[0])})

    async def guard(self, scope: dict[str, Any], headers: Mapping[str, str],
                    send: Any) -> bool:
        """Authenticate the request into ``scope["user"]``/``scope["auth"]`` (what the SDK
        reads); False when it was refused (answered already)."""
        try:
            user = await self.authenticate(headers)
        except AuthRefused as refusal:
            await self.refuse(send, refusal, scope)
            return False
        scope["user"] = user
        scope["auth"] = AuthCredentials(user.scopes)
        return True


def request_identity(request: Any, settings: OAuthSettings | None) -> Caller | None:
    """The caller (principal and verified token) of an SDK request context's HTTP request,
    when the gateway authenticated it (OAuth); ``None`` otherwise."""
    if settings is None or request is None:
        return None
    scope = getattr(request, "scope", None)
    user = scope.get("user") if isinstance(scope, dict) else None
    if not isinstance(user, AuthenticatedUser):
        return None
    return Caller(principal_for(user.access_token, settings), user.access_token.token)


def call_identity(caller: Caller | None,
                  upstream: list[tuple[str, tuple[str, ...]]]) -> CallIdentity | None:
    """What every stage record of an OAuth caller's gateway call carries (``identity``): who
    (issuer, subject, client id) and the upstream tokens' scopes (*upstream*, filled as the
    call uses them) — never a token. ``None`` for a caller without OAuth."""
    if caller is None:
        return None
    attributes = caller.principal.attributes
    return CallIdentity(caller.principal.id, str(attributes.get("issuer", "")),
                        str(attributes.get("subject", "")),
                        str(attributes.get("client_id", "")), upstream)


# -- token exchange ----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class UpstreamToken:
    """A token for one upstream server and what it allows."""

    token: str = field(repr=False)
    scopes: tuple[str, ...]
    expires_at: float


@dataclass(slots=True)
class Caller:
    """The principal a gateway call runs for, and their verified inbound token (kept current:
    the token a client presents may change between its calls). Never sent upstream: only to
    the authorization server, as the subject of a token exchange."""

    principal: Principal
    token: str = field(repr=False)

    @property
    def key(self) -> tuple[str, str]:
        return self.principal.id, str(self.principal.attributes.get("issuer", ""))


CALLER: contextvars.ContextVar[Caller | None] = contextvars.ContextVar(
    "anfitrion_gateway_caller", default=None)
"""Who the gateway call being run is for (set by the gateway for OAuth callers)."""
UPSTREAM_SCOPES: contextvars.ContextVar[list[tuple[str, tuple[str, ...]]] | None] = \
    contextvars.ContextVar("anfitrion_gateway_upstream_scopes", default=None)
"""The (server, scopes) of the upstream tokens a gateway call used: for its audit record."""


class TokenExchanger:
    """Tokens for one upstream server whose entry asks for token exchange: the calling user's
    token exchanged (RFC 8693) for one whose audience is the server, with at most the scopes
    asked; or, for the gateway's own connection (listing), a client-credentials token of the
    gateway's client. Cached per (principal, issuer) until a minute before expiry."""

    EARLY = 60.0

    def __init__(self, server: str, settings: TokenExchangeSettings, *,
                 timeout: float = 10.0) -> None:
        self.server = server
        self.settings = settings
        self.fetcher = Fetcher(timeout=timeout, allow_internal=settings.allow_internal)
        self._cache: dict[tuple[str, str], UpstreamToken] = {}
        self._lock = anyio.Lock()
        self.exchanges = 0

    async def token(self, caller: Caller | None) -> UpstreamToken:
        """The current upstream token for *caller* (``None``: the gateway itself)."""
        key = caller.key if caller is not None else ("", "")
        async with self._lock:
            cached = self._cache.get(key)
            if cached is not None and cached.expires_at - self.EARLY > time.time():
                return cached
            found = await self._request(caller)
            self._cache[key] = found
            return found

    async def _request(self, caller: Caller | None) -> UpstreamToken:
        settings = self.settings
        data = {"resource": settings.audience}
        if caller is None:
            data["grant_type"] = "client_credentials"
        else:
            data.update({"grant_type": TOKEN_EXCHANGE, "subject_token": caller.token,
                         "subject_token_type": ACCESS_TOKEN_TYPE,
                         "requested_token_type": ACCESS_TOKEN_TYPE,
                         "audience": settings.audience})
        if settings.scope:
            data["scope"] = settings.scope
        status, body = await self.fetcher.request(
            "POST", settings.token_endpoint, data=data,
            auth=(settings.client_id, settings.client_secret))
        self.exchanges += 1
        if status != 200 or not isinstance(body, dict) \
                or not isinstance(body.get("access_token"), str):
            error = body.get("error") if isinstance(body, dict) else None
            if not isinstance(error, str) or not _ERROR_CODE.fullmatch(error):
                error = None  # an error code only: never text that could echo a token
            kind = "token exchange" if caller is not None else "client-credentials grant"
            raise AuthRefused(f"the authorization server refused the {kind} for "
                              f"{self.server!r} (HTTP {status}{', ' + error if error else ''})",
                              status=403, error="insufficient_scope")
        lifetime = body.get("expires_in", 300)
        if isinstance(lifetime, bool) or not isinstance(lifetime, (int, float)):
            lifetime = 300
        scope = body.get("scope", settings.scope)
        return UpstreamToken(body["access_token"], tuple(sorted(claim_words(scope))),
                             time.time() + max(0.0, min(float(lifetime), 3600.0)))

    def forget(self, caller: Caller) -> None:
        """Drop a caller's cached token (their own token was refused or revoked)."""
        self._cache.pop(caller.key, None)


class ExchangedTokenAuth(httpx.Auth):
    """The HTTP client auth of one connection to a token-exchange server: every request
    carries the connection's caller's current upstream token (or the gateway's own)."""

    def __init__(self, exchanger: TokenExchanger, caller: Caller | None) -> None:
        self.exchanger = exchanger
        self.caller = caller

    async def async_auth_flow(self, request: httpx.Request
                              ) -> AsyncGenerator[httpx.Request, httpx.Response]:
        found = await self.exchanger.token(self.caller)
        request.headers["Authorization"] = f"Bearer {found.token}"
        yield request
