"""The gateway's OAuth settings (``gateway.auth``) and a server entry's ``tokenExchange``, read
from the MCP config file with the same one-line, file-and-key errors as the rest of it.

Kept apart from :mod:`anfitrion.mcp._gateway_auth` (which needs the MCP SDK and a JOSE
library) so that reading a config file needs neither.

``gateway.auth``::

    "gateway": {"auth": {
        "issuer": "https://idp.example/realms/main",
        "audience": "https://gateway.example/mcp",
        "resource": "https://gateway.example/mcp",
        "principalClaim": "sub", "scopesClaim": "scope", "rolesClaim": "roles",
        "requiredScopes": ["mcp:tools"],
        "introspection": {"endpoint": "https://idp.example/introspect",
                          "clientId": "gateway", "clientSecret": "${GATEWAY_SECRET}"}}}

A server entry's ``tokenExchange`` (RFC 8693: the calling user's token exchanged for one meant
for this server)::

    "notes": {"url": "https://notes.example/mcp",
              "tokenExchange": {"tokenEndpoint": "https://idp.example/token",
                                "audience": "https://notes.example/mcp", "scope": "notes:read",
                                "clientId": "gateway", "clientSecret": "${GATEWAY_SECRET}"}}

The gateway's own connection to such a server (listing its tools) uses a client-credentials
token of the same client for the same audience: a service account the operator declared.

``inbox.auth`` (the inbox signing reviewers in with OpenID Connect; the same key names as
``gateway.auth`` where they mean the same)::

    "inbox": {"auth": {
        "issuer": "https://idp.example/realms/main",
        "clientId": "anfitrion-inbox", "clientSecret": "${INBOX_CLIENT_SECRET}",
        "principalClaim": "sub", "nameClaim": "name", "rolesClaim": "roles"}}
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from ..exceptions import ConfigError

__all__ = ["ASYMMETRIC_ALGORITHMS", "IntrospectionSettings", "OAuthSettings", "SignInSettings",
           "TokenExchangeSettings", "parse_oauth", "parse_sign_in", "parse_token_exchange"]

ASYMMETRIC_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256",
                         "ES384", "ES512", "EdDSA")
"""The JWS algorithms a token may be signed with: public-key ones only. ``none`` and the HMAC
algorithms (``HS*``) are never accepted: an HMAC "signed" with a public key is the classic
algorithm-confusion forgery."""
DEFAULT_ALGORITHMS = ("RS256", "PS256", "ES256", "EdDSA")
MAX_LEEWAY = 300.0
_CLAIM = re.compile(r"[A-Za-z0-9_:/.-]{1,100}")
_SCOPE = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]{1,200}")  # an RFC 6749 scope-token
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")

Error = Callable[[str, str], ConfigError]
"""Makes the config error for (message, key), with the file's path and the key's line."""


@dataclass(frozen=True, slots=True)
class IntrospectionSettings:
    """RFC 7662 token introspection: where, and the gateway's client credentials for it."""

    endpoint: str
    client_id: str
    client_secret: str = field(repr=False)


@dataclass(frozen=True, slots=True)
class OAuthSettings:
    """``gateway.auth``: the gateway as an OAuth 2.1 resource server.

    Attributes:
        issuer: the authorization server; a token's ``iss`` must equal it.
        audience: what a token's ``aud`` must hold (RFC 8707 resource); default ``resource``.
        resource: the gateway's public MCP URL (Protected Resource Metadata, RFC 9728);
            default ``http://HOST:PORT/mcp``.
        jwks_uri: the issuer's keys; default: from its metadata (``jwks_uri``).
        principal_claim: the claim naming the principal (default ``sub``).
        scopes_claim: the claim holding scopes (a space-separated string or a list).
        roles_claim: the claim holding roles or groups (a dotted path, e.g.
            ``realm_access.roles``), or none.
        required_scopes: every token must carry these (else 403 ``insufficient_scope``).
        algorithms: the JWS algorithms accepted (public-key ones only).
        leeway: seconds of clock skew allowed on ``exp``/``nbf``/``iat``.
        introspection: validate by RFC 7662 introspection instead of locally.
        allow_internal: fetch metadata and keys from loopback and private addresses
            (otherwise refused: a metadata document must not steer the gateway inside).
        jwks_cache_seconds: how long fetched keys are kept before they are fetched again.
        fetch_timeout: seconds for one fetch of metadata, keys or an introspection.
        connect_url: the inbox's connect page (``https://inbox.example/connect``), named in
            the refusal a user without a connected account gets.
    """

    issuer: str
    audience: str | None = None
    resource: str | None = None
    jwks_uri: str | None = None
    principal_claim: str = "sub"
    scopes_claim: str = "scope"
    roles_claim: str | None = None
    required_scopes: tuple[str, ...] = ()
    algorithms: tuple[str, ...] = DEFAULT_ALGORITHMS
    leeway: float = 30.0
    introspection: IntrospectionSettings | None = None
    allow_internal: bool = False
    jwks_cache_seconds: float = 300.0
    fetch_timeout: float = 5.0
    connect_url: str | None = None


@dataclass(frozen=True, slots=True)
class TokenExchangeSettings:
    """A server entry's ``tokenExchange``: call it with the calling user's token exchanged
    (RFC 8693) for one whose audience is this server, with at most ``scope``.

    Attributes:
        token_endpoint: the authorization server's token endpoint.
        audience: the upstream resource (sent as ``resource`` and ``audience``).
        scope: the scopes asked for (space-separated; empty: what the user's token has).
        client_id, client_secret: the gateway's client at that server.
        allow_internal: the token endpoint may be on a loopback or private address.
    """

    token_endpoint: str
    audience: str
    client_id: str
    client_secret: str = field(repr=False)
    scope: str = ""
    allow_internal: bool = False


@dataclass(frozen=True, slots=True)
class SignInSettings:
    """``inbox.auth``: the inbox signs reviewers in with OpenID Connect (authorization code
    with PKCE) at *issuer*; the reviewer is the ID token's ``principalClaim``.

    Attributes:
        issuer: the OpenID Provider; the ID token's ``iss`` (and the discovery document's
            ``issuer``) must equal it exactly.
        client_id, client_secret: the inbox's client at the provider (no secret: a public
            client, PKCE only).
        principal_claim: the claim naming the reviewer (their entitlements, votes and
            connected accounts); the same claim as the gateway's ``principalClaim`` makes a
            reviewer's name their gateway principal.
        name_claim: the claim holding the name shown and recorded beside it.
        roles_claim: the claim holding the reviewer's roles (two-person rule), or none.
        scopes: the scopes asked for (``openid`` always among them).
        jwks_uri, algorithms, leeway, allow_internal, jwks_cache_seconds, fetch_timeout:
            as in :class:`OAuthSettings`.
    """

    issuer: str
    client_id: str
    client_secret: str | None = field(default=None, repr=False)
    principal_claim: str = "sub"
    name_claim: str = "name"
    roles_claim: str | None = None
    scopes: tuple[str, ...] = ("openid", "profile")
    jwks_uri: str | None = None
    algorithms: tuple[str, ...] = DEFAULT_ALGORITHMS
    leeway: float = 30.0
    allow_internal: bool = False
    jwks_cache_seconds: float = 300.0
    fetch_timeout: float = 5.0


def _url(raw: Any, key: str, error: Error) -> str:
    if (not isinstance(raw, str) or not raw.startswith(("https://", "http://"))
            or any(c.isspace() or not c.isprintable() for c in raw) or "#" in raw
            or not urlsplit(raw).hostname):
        raise error("must be an http(s) URL with a host (no spaces, control characters or "
                    "fragment)", key)
    return raw


def _text(raw: Any, key: str, error: Error, environ: Mapping[str, str] | None = None) -> str:
    if not isinstance(raw, str) or not raw:
        raise error("must be a non-empty string", key)
    if environ is not None:
        def sub(match: re.Match[str]) -> str:
            if match.group(1) not in environ:
                raise error(f"environment variable {match.group(1)} is not set", key)
            return environ[match.group(1)]
        raw = _VARIABLE.sub(sub, raw)
    if not raw.isprintable():
        raise error("must be visible characters only", key)
    return str(raw)


def _claim(raw: Any, default: str | None, key: str, error: Error) -> str | None:
    if raw is None:
        return default
    if not isinstance(raw, str) or not _CLAIM.fullmatch(raw):
        raise error("must be a claim name ([A-Za-z0-9_:/.-], dots for nested claims)", key)
    return raw


def _scopes(raw: Any, key: str, error: Error) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(s, str) and _SCOPE.fullmatch(s)
                                            for s in raw):
        raise error("must be a list of scope names (RFC 6749 scope tokens)", key)
    return tuple(raw)


def _seconds(raw: Any, default: float, limit: float, key: str, error: Error) -> float:
    if raw is None:
        return default
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not 0 <= raw <= limit:
        raise error(f"must be a number of seconds from 0 to {limit:g}", key)
    return float(raw)


def _unknown(raw: dict[str, Any], known: set[str], key: str, error: Error) -> None:
    unknown = sorted(set(raw) - known)
    if unknown:
        raise error("unknown keys " + ", ".join(repr(k[:60]) for k in unknown[:10]), key)


def _introspection(raw: Any, key: str, error: Error,
                   environ: Mapping[str, str]) -> IntrospectionSettings | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise error("must be an object", key)
    _unknown(raw, {"endpoint", "clientId", "clientSecret"}, key, error)
    return IntrospectionSettings(
        endpoint=_url(raw.get("endpoint"), f"{key}.endpoint", error),
        client_id=_text(raw.get("clientId"), f"{key}.clientId", error),
        client_secret=_text(raw.get("clientSecret"), f"{key}.clientSecret", error, environ))


def _algorithms(raw: Any, key: str, error: Error) -> tuple[str, ...]:
    if raw is None:
        return DEFAULT_ALGORITHMS
    if (not isinstance(raw, list) or not raw
            or not all(isinstance(a, str) and a in ASYMMETRIC_ALGORITHMS for a in raw)):
        raise error("must be a non-empty list of public-key JWS algorithms ("
                    + ", ".join(ASYMMETRIC_ALGORITHMS) + "); none and HS* are never accepted",
                    key)
    return tuple(raw)


def parse_oauth(raw: Any, error: Error, environ: Mapping[str, str],
                key: str = "gateway.auth") -> OAuthSettings | None:
    """``gateway.auth`` checked, or a :class:`ConfigError` naming the key."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise error("must be an object", key)
    _unknown(raw, {"issuer", "audience", "resource", "jwksUri", "principalClaim",
                   "scopesClaim", "rolesClaim", "requiredScopes", "algorithms", "leeway",
                   "introspection", "allowInternal", "jwksCacheSeconds", "fetchTimeout",
                   "connectUrl"},
             key, error)
    allow = raw.get("allowInternal", False)
    if not isinstance(allow, bool):
        raise error("must be true or false", f"{key}.allowInternal")
    optional_urls = {name: _url(raw[name], f"{key}.{name}", error)
                     for name in ("audience", "resource", "jwksUri", "connectUrl")
                     if name in raw}
    timeout = _seconds(raw.get("fetchTimeout"), 5.0, 60.0, f"{key}.fetchTimeout", error)
    if timeout == 0:
        raise error("must be more than 0 seconds", f"{key}.fetchTimeout")
    return OAuthSettings(
        issuer=_url(raw.get("issuer"), f"{key}.issuer", error),
        audience=optional_urls.get("audience"), resource=optional_urls.get("resource"),
        jwks_uri=optional_urls.get("jwksUri"),
        principal_claim=_claim(raw.get("principalClaim"), "sub", f"{key}.principalClaim",
                               error) or "sub",
        scopes_claim=_claim(raw.get("scopesClaim"), "scope", f"{key}.scopesClaim",
                            error) or "scope",
        roles_claim=_claim(raw.get("rolesClaim"), None, f"{key}.rolesClaim", error),
        required_scopes=_scopes(raw.get("requiredScopes"), f"{key}.requiredScopes", error),
        algorithms=_algorithms(raw.get("algorithms"), f"{key}.algorithms", error),
        leeway=_seconds(raw.get("leeway"), 30.0, MAX_LEEWAY, f"{key}.leeway", error),
        introspection=_introspection(raw.get("introspection"), f"{key}.introspection", error,
                                     environ),
        allow_internal=allow,
        jwks_cache_seconds=_seconds(raw.get("jwksCacheSeconds"), 300.0, 86400.0,
                                    f"{key}.jwksCacheSeconds", error),
        fetch_timeout=timeout, connect_url=optional_urls.get("connectUrl"))


def parse_token_exchange(raw: Any, error: Error, environ: Mapping[str, str],
                         key: str) -> TokenExchangeSettings | None:
    """A server entry's ``tokenExchange`` checked, or a :class:`ConfigError` naming the key."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise error("must be an object", key)
    _unknown(raw, {"audience", "scope", "tokenEndpoint", "clientId", "clientSecret",
                   "allowInternal"}, key, error)
    scope = raw.get("scope", "")
    if not isinstance(scope, str) or not all(_SCOPE.fullmatch(s) for s in scope.split()):
        raise error("must be space-separated scope names", f"{key}.scope")
    allow = raw.get("allowInternal", False)
    if not isinstance(allow, bool):
        raise error("must be true or false", f"{key}.allowInternal")
    return TokenExchangeSettings(
        token_endpoint=_url(raw.get("tokenEndpoint"), f"{key}.tokenEndpoint", error),
        audience=_url(raw.get("audience"), f"{key}.audience", error),
        scope=" ".join(scope.split()), allow_internal=allow,
        client_id=_text(raw.get("clientId"), f"{key}.clientId", error),
        client_secret=_text(raw.get("clientSecret"), f"{key}.clientSecret", error, environ))


def parse_sign_in(raw: Any, error: Error, environ: Mapping[str, str],
                  key: str = "inbox.auth") -> SignInSettings | None:
    """``inbox.auth`` checked, or a :class:`ConfigError` naming the key."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise error("must be an object", key)
    _unknown(raw, {"issuer", "clientId", "clientSecret", "principalClaim", "nameClaim",
                   "rolesClaim", "scopes", "jwksUri", "algorithms", "leeway", "allowInternal",
                   "jwksCacheSeconds", "fetchTimeout"}, key, error)
    allow = raw.get("allowInternal", False)
    if not isinstance(allow, bool):
        raise error("must be true or false", f"{key}.allowInternal")
    scopes = _scopes(raw.get("scopes"), f"{key}.scopes", error) or ("openid", "profile")
    if "openid" not in scopes:
        scopes = ("openid", *scopes)
    timeout = _seconds(raw.get("fetchTimeout"), 5.0, 60.0, f"{key}.fetchTimeout", error)
    if timeout == 0:
        raise error("must be more than 0 seconds", f"{key}.fetchTimeout")
    secret = raw.get("clientSecret")
    return SignInSettings(
        issuer=_url(raw.get("issuer"), f"{key}.issuer", error),
        client_id=_text(raw.get("clientId"), f"{key}.clientId", error),
        client_secret=None if secret is None else _text(secret, f"{key}.clientSecret", error,
                                                        environ),
        principal_claim=_claim(raw.get("principalClaim"), "sub", f"{key}.principalClaim",
                               error) or "sub",
        name_claim=_claim(raw.get("nameClaim"), "name", f"{key}.nameClaim", error) or "name",
        roles_claim=_claim(raw.get("rolesClaim"), None, f"{key}.rolesClaim", error),
        scopes=scopes,
        jwks_uri=_url(raw["jwksUri"], f"{key}.jwksUri", error) if "jwksUri" in raw else None,
        algorithms=_algorithms(raw.get("algorithms"), f"{key}.algorithms", error),
        leeway=_seconds(raw.get("leeway"), 30.0, MAX_LEEWAY, f"{key}.leeway", error),
        allow_internal=allow,
        jwks_cache_seconds=_seconds(raw.get("jwksCacheSeconds"), 300.0, 86400.0,
                                    f"{key}.jwksCacheSeconds", error),
        fetch_timeout=timeout)
