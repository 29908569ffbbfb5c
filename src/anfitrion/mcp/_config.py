"""The MCP servers file: the common ``mcpServers`` JSON shape, plus what anfitrion needs.

Paste the ``mcpServers`` block of a desktop assistant's config and it loads as is::

    {
      "mcpServers": {
        "git":  {"command": "uvx", "args": ["mcp-server-git", "--repository", "."],
                 "trusted": true},
        "time": {"command": "uvx", "args": ["mcp-server-time"], "env": {"TZ": "UTC"}},
        "docs": {"url": "https://docs.example/mcp",
                 "headers": {"Authorization": "Bearer ${DOCS_TOKEN}"}}
      },
      "gateway": {"store": "sqlite:///anfitrion.db", "policy": "anfitrion.toml",
                  "principal": "desktop", "approvalWait": 60}
    }

The key of each server is its *operator-assigned id*: tools are offered as ``<id>.<tool>``,
never under the name the server reports. Keys anfitrion adds to a server entry:

- ``trusted`` (default ``false``): use the server's annotations (``readOnlyHint``,
  ``idempotentHint``, ``openWorldHint``). Untrusted servers' tools are all side-effecting,
  open-world and untrusted, whatever they claim.
- ``timeout`` (seconds, default 60): per call; a server that does not answer is restarted.
- ``maxResultChars`` (default 16384): result size cap.
- ``relistBeforeCall`` (default ``true``): before the first call of a turn whose offer reused
  an earlier listing, re-read the tool list, so a definition changed without
  ``notifications/tools/list_changed`` is caught at call time.
- ``disabled`` (default ``false``): skip this server.
- ``sandbox`` (stdio servers): the OS sandbox's profile — ``paths``, ``network``, ``limits``
  — or ``"off"``; absent, the default profile (:mod:`anfitrion.mcp._sandbox`, docs/mcp.md).
- ``protocol`` (default ``"auto"``): ``server/discover`` first, 2026-07-28 with a server
  that speaks it, else the ``initialize`` handshake; ``"legacy"``: the handshake only.
- ``sampling``, ``elicitation`` (default ``false``): through the gateway, relay the server's
  ``sampling/createMessage`` / ``elicitation/create`` requests to the MCP client; otherwise
  they are refused (and audited either way).
- ``auth`` (HTTP servers): OAuth 2.1 to the server with each principal's own token
  (:class:`AuthSettings`, ``docs/auth-client.md``): ``{"scopes": [...], "clientId": …,
  "clientSecret": "${VAR}", "clientMetadataUrl": …, "issuer": …, "grant":
  "client_credentials", "allowInternal": false}``.

A spawned server gets a minimal environment: ``HOME``, ``LOGNAME``, ``PATH``, ``SHELL``,
``TERM``, ``USER`` and what its ``env`` names — never the rest of anfitrion's environment (no API
keys). ``${NAME}`` in ``env`` and ``headers`` values is replaced by anfitrion's variable
``NAME``, so secrets are passed on purpose, one by one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .._home import environment, read_settings_text, relative_to
from .._json import decode_strict
from ..exceptions import ConfigError, JsonError
from ._listing import DEFAULT_LISTING_TTL
from ._oauth_settings import (
    OAuthSettings,
    SignInSettings,
    TokenExchangeSettings,
    parse_oauth,
    parse_sign_in,
    parse_token_exchange,
)
from ._sandbox import ProfileError, SandboxProfile, parse_sandbox

__all__ = ["DEFAULT_REDIRECT_URI", "AuthSettings", "GatewaySettings", "McpConfig", "ServerConfig",
           "load_config", "parse_config"]

SERVER_ID = re.compile(r"[A-Za-z0-9_-]{1,32}")
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_SERVER_KEYS = frozenset({"command", "args", "env", "cwd", "url", "headers", "type", "transport",
                          "trusted", "timeout", "maxResultChars", "relistBeforeCall",
                          "disabled", "description", "sampling", "elicitation", "auth",
                          "tokenExchange", "sandbox", "errorResults", "protocol"})
_AUTH_KEYS = frozenset({"scopes", "clientId", "clientSecret", "clientMetadataUrl", "issuer",
                        "grant", "tokenEndpointAuthMethod", "privateKey", "signingAlgorithm",
                        "redirectUri", "allowInternal"})
DEFAULT_REDIRECT_URI = "http://127.0.0.1:33418/callback"
"""Where ``anfitrion auth login`` listens for the authorization server's redirect."""
_GRANTS = ("authorization_code", "client_credentials")
_AUTH_METHODS = ("none", "client_secret_basic", "client_secret_post", "private_key_jwt")
_SCOPE = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]{1,200}")  # RFC 6749 scope-token


@dataclass(frozen=True, slots=True)
class AuthSettings:
    """A server entry's ``auth``: how anfitrion obtains OAuth tokens for it.

    Attributes:
        scopes: the scopes to ask for (the narrowest the tools need); empty: the server's
            challenge, else its metadata's ``scopes_supported`` (the MCP scope strategy).
        client_id: a pre-registered client id (else a Client ID Metadata Document, else
            dynamic registration).
        client_secret: the pre-registered client's secret (``"${VAR}"`` in the file).
        client_metadata_url: the HTTPS URL of this client's metadata document (CIMD).
        issuer: the one authorization server accepted (any the server names, if unset).
        grant: ``authorization_code`` (a person connects an account) or ``client_credentials``
            (a service account the operator declares).
        token_endpoint_auth_method: for a pre-registered client.
        private_key: a PEM key signing ``private_key_jwt`` assertions (client credentials).
        signing_algorithm: the JWS algorithm of those assertions.
        redirect_uri: where the authorization server sends the person back (a loopback URL).
        allow_internal: fetch metadata and tokens from loopback and private addresses.
    """

    scopes: tuple[str, ...] = ()
    client_id: str | None = None
    client_secret: str | None = field(default=None, repr=False)
    client_metadata_url: str | None = None
    issuer: str | None = None
    grant: str = "authorization_code"
    token_endpoint_auth_method: str | None = None
    private_key: str | None = field(default=None, repr=False)
    signing_algorithm: str = "RS256"
    redirect_uri: str = "http://127.0.0.1:33418/callback"  # DEFAULT_REDIRECT_URI
    allow_internal: bool = False

DEFAULT_TIMEOUT = 60.0
ERROR_RESULTS = ("failed", "unknown")
PROTOCOLS = ("auto", "legacy")
"""``protocol``: how the client toolset connects (see ``ServerConfig.protocol``)."""
"""``errorResults``: what a server's ``isError`` result means (see ``ServerConfig``)."""
DEFAULT_MAX_RESULT_CHARS = 16 * 1024


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """One upstream MCP server: a command to spawn (stdio) or a URL (streamable HTTP)."""

    id: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    trusted: bool = False
    timeout: float = DEFAULT_TIMEOUT
    max_result_chars: int = DEFAULT_MAX_RESULT_CHARS
    relist_before_call: bool = True
    error_results: str = "failed"
    """What a result with ``isError: true`` means for a write: ``"failed"`` (the default: the
    server ran the call and said it failed, a known outcome) or ``"unknown"`` (the server may
    have acted before it failed: the effect waits for a person, as after a timeout)."""
    protocol: str = "auto"
    """How the client connects: ``"auto"`` (the default) asks ``server/discover`` and speaks
    2026-07-28 to a server that does (per-request ``_meta``, the ``Mcp-Method``/``Mcp-Name``
    and ``Mcp-Param-*`` headers, ``input_required`` answered and retried), else falls back
    to the ``initialize`` handshake; ``"legacy"`` always uses the handshake, for a server
    that still asks its questions with server-to-client requests (``elicitation/create``,
    ``sampling/createMessage``), which 2026-07-28 removed."""
    sampling: bool = False
    """Relay the server's sampling requests to the gateway's client (else refuse them)."""
    elicitation: bool = False
    """Relay the server's elicitation requests to the gateway's client (else refuse them)."""
    sandbox: SandboxProfile = field(default_factory=SandboxProfile)
    """The OS sandbox a stdio server runs in (:mod:`anfitrion.mcp._sandbox`): by default no
    network, no home folder, only the system and the server's own program; ``"off"`` runs it
    unconfined."""
    auth: AuthSettings | None = None
    """OAuth to the server (HTTP only), per principal."""
    token_exchange: TokenExchangeSettings | None = None
    """Through the gateway: call the server with the calling user's token exchanged for one
    meant for this server (RFC 8693; :mod:`anfitrion.mcp._oauth_settings`)."""

    @property
    def transport(self) -> str:
        return "stdio" if self.command is not None else "http"


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    """The ``gateway`` section: how ``anfitrion gateway`` runs.

    Attributes:
        store: store URL (approvals, pins, ledger, audit); a relative SQLite path is relative
            to the config file.
        policy: a policy file (TOML), relative to the config file.
        principal: who the gateway's callers act as.
        scopes: the principal's scopes.
        approval_wait: seconds a call waits for a person before returning a tool error.
        host, port: where the HTTP transport listens (always a loopback address).
        token_env: the environment variable holding the HTTP bearer token.
        allowed_origins: ``Origin`` values accepted over HTTP (none by default).
        max_body_bytes: HTTP request body limit.
        own_names: present the one wrapped server's tools under their own names.
        auth: the gateway as an OAuth 2.1 resource server (``gateway.auth``); without it,
            HTTP clients present the static bearer token.
        listing_ttl: seconds calls are relayed on a server's last listing
            (:mod:`anfitrion.mcp._listing`); ``0``: list before every call.
        drain_seconds: after SIGTERM (or Ctrl-C), seconds the HTTP gateway keeps serving
            with ``/readyz`` answering 503, so the load balancer stops sending it requests,
            before it stops listening (calls waiting for a person are handed over at once).
        adopt_within: seconds a call left waiting by a gateway process that died is kept for
            its client's re-send before its request is withdrawn (default: approval_wait).
        inbox_url: the approval inbox's address (``inboxUrl``, ``http(s)://host[:port]``
            and a path): a call waiting for a person names its page in its task and asks a
            client supporting URL-mode elicitation to open it.
    """

    store: str | None = None
    policy: str | None = None
    principal: str = "mcp-client"
    scopes: frozenset[str] = frozenset()
    approval_wait: float = 60.0
    host: str = "127.0.0.1"
    port: int = 8765
    token_env: str = "ANFITRION_GATEWAY_TOKEN"
    allowed_origins: tuple[str, ...] = ()
    max_body_bytes: int = 1024 * 1024
    own_names: bool = False
    auth: OAuthSettings | None = None
    listing_ttl: float = DEFAULT_LISTING_TTL
    drain_seconds: float = 2.0
    adopt_within: float | None = None
    inbox_url: str | None = None


@dataclass(frozen=True, slots=True)
class McpConfig:
    servers: Mapping[str, ServerConfig]
    gateway: GatewaySettings = field(default_factory=GatewaySettings)
    path: str | None = None
    sign_in: SignInSettings | None = None
    """``inbox.auth``: the inbox signs reviewers in with OpenID Connect."""


# The key index of the file being loaded, so that errors raised while checking parsed data can
# name the line of their key; parse_config of data that came from no file has none.
_LINES: ContextVar[_KeyLines | None] = ContextVar("anfitrion_mcp_config_lines", default=None)


def _printable(text: str) -> str:
    """*text* on one visible line: line breaks of any kind (``\\n``, U+2028, U+0085), control
    and format characters become escapes, so a hostile key cannot forge a second message line
    or drive a terminal."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else f"\\u{ord(c):04x}" if ord(c) < 0x10000
                   else f"\\U{ord(c):08x}" for c in text)


def _config_error(message: str, *, path: str | None, key: str | None = None) -> ConfigError:
    lines = _LINES.get()
    line = lines.find(key) if lines is not None and key else None
    return ConfigError(_printable(message), path=path, key=_printable(key) if key else None,
                       line=line)


def _expand(value: str, *, path: str | None, key: str, environ: Mapping[str, str]) -> str:
    def sub(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in environ:
            raise _config_error(f"environment variable {name} is not set", path=path, key=key)
        return environ[name]

    return _VARIABLE.sub(sub, value)


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an RFC 9110 token


def _string_map(raw: Any, *, path: str | None, key: str, environ: Mapping[str, str],
                names: re.Pattern[str], forbidden: str) -> dict[str, str]:
    """An object of strings whose keys match *names* and whose values, once ``${VAR}`` is
    expanded, hold none of *forbidden* (NUL breaks ``execve``; CR and LF in a header value
    would start another header)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                            for k, v in raw.items()):
        raise _config_error("must be an object of strings", path=path, key=key)
    out: dict[str, str] = {}
    for name, value in raw.items():
        if not names.fullmatch(name):
            raise _config_error(f"{name[:60]!r} is not a valid name here", path=path,
                                key=f"{key}.{name}")
        expanded = _expand(value, path=path, key=f"{key}.{name}", environ=environ)
        if any(c in expanded for c in forbidden):
            raise _config_error("contains a NUL or line-break character (after ${...} "
                                "expansion)", path=path, key=f"{key}.{name}")
        out[name] = expanded
    return out


MAX_SECONDS = 86400.0


def _number(raw: Any, default: float, *, path: str | None, key: str) -> float:
    if raw is None:
        return default
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not raw > 0:  # NaN too
        raise _config_error("must be a positive number", path=path, key=key)
    if raw > MAX_SECONDS:  # inf, 1e308: a deadline that far overflows the clock arithmetic
        raise _config_error(f"must be at most {MAX_SECONDS:g} seconds (a day)", path=path,
                            key=key)
    return float(raw)


def _names(keys: list[str]) -> str:
    shown = ", ".join(repr(k[:60]) for k in keys[:10])
    return shown + (f" and {len(keys) - 10} more" if len(keys) > 10 else "")


def _flag(raw: Any, default: bool, *, path: str | None, key: str) -> bool:
    if raw is None:
        return default
    if not isinstance(raw, bool):
        raise _config_error("must be true or false", path=path, key=key)
    return raw


def _server(server_id: str, raw: Any, *, path: str | None,
            environ: Mapping[str, str]) -> ServerConfig | None:
    key = f"mcpServers.{server_id}"
    if not SERVER_ID.fullmatch(server_id):
        raise _config_error("a server id must match [A-Za-z0-9_-]{1,32} (it prefixes tool names)",
                          path=path, key=key)
    if not isinstance(raw, dict):
        raise _config_error("must be an object", path=path, key=key)
    unknown = sorted(set(raw) - _SERVER_KEYS)
    if unknown:
        raise _config_error(f"unknown keys {_names(unknown)}", path=path, key=key)
    if _flag(raw.get("disabled"), False, path=path, key=f"{key}.disabled"):
        return None
    kind = raw.get("type", raw.get("transport"))
    command, url = raw.get("command"), raw.get("url")
    if (command is None) == (url is None):
        raise _config_error("give either a command (stdio) or a url (streamable HTTP)",
                          path=path, key=key)
    if kind not in (None, "stdio", "http", "streamable-http", "streamable_http",
                    "streamableHttp"):
        raise _config_error(f"transport {repr(kind)[:60]} is not supported: use stdio or "
                            "streamable HTTP",
                          path=path, key=f"{key}.type")
    if command is not None and (not isinstance(command, str) or not command):
        raise _config_error("must be a non-empty string", path=path, key=f"{key}.command")
    if url is not None and (not isinstance(url, str) or
                            not url.startswith(("http://", "https://"))
                            or any(c.isspace() or not c.isprintable() for c in url)):
        raise _config_error("must be an http(s) URL (without spaces or control characters)",
                            path=path, key=f"{key}.url")
    args = raw.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise _config_error("must be a list of strings", path=path, key=f"{key}.args")
    cwd = raw.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise _config_error("must be a string", path=path, key=f"{key}.cwd")
    for name, value in (("command", command), ("cwd", cwd), *(("args", a) for a in args)):
        if isinstance(value, str) and "\x00" in value:  # no program can be given a NUL
            raise _config_error("contains a NUL character", path=path, key=f"{key}.{name}")
    if "sandbox" in raw and url is not None:
        raise _config_error("the sandbox applies to stdio servers (a command) only", path=path,
                            key=f"{key}.sandbox")
    try:
        sandbox = parse_sandbox(raw.get("sandbox"), key=f"{key}.sandbox",
                                base=str(Path(path).parent) if path else None,
                                home=environ.get("HOME"))
    except ProfileError as exc:
        raise _config_error(str(exc), path=path, key=exc.key) from None
    max_chars = raw.get("maxResultChars", DEFAULT_MAX_RESULT_CHARS)
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
        raise _config_error("must be a positive integer", path=path, key=f"{key}.maxResultChars")
    return ServerConfig(
        id=server_id, command=command, args=tuple(args),
        env=_string_map(raw.get("env"), path=path, key=f"{key}.env", environ=environ,
                        names=_ENV_NAME, forbidden="\x00"),
        cwd=cwd, url=url,
        headers=_string_map(raw.get("headers"), path=path, key=f"{key}.headers",
                            environ=environ, names=_HEADER_NAME, forbidden="\x00\r\n"),
        trusted=_flag(raw.get("trusted"), False, path=path, key=f"{key}.trusted"),
        timeout=_number(raw.get("timeout"), DEFAULT_TIMEOUT, path=path, key=f"{key}.timeout"),
        max_result_chars=max_chars,
        relist_before_call=_flag(raw.get("relistBeforeCall"), True, path=path,
                                 key=f"{key}.relistBeforeCall"),
        error_results=_choice(raw, "errorResults", ERROR_RESULTS, path=path, key=key)
        or "failed",
        protocol=_choice(raw, "protocol", PROTOCOLS, path=path, key=key) or "auto",
        sampling=_flag(raw.get("sampling"), False, path=path, key=f"{key}.sampling"),
        elicitation=_flag(raw.get("elicitation"), False, path=path, key=f"{key}.elicitation"),
        sandbox=sandbox,
        auth=_auth(raw.get("auth"), url, path=path, key=f"{key}.auth", environ=environ),
        token_exchange=_token_exchange(raw, url, path=path, key=key, environ=environ))


def _text(raw: dict[str, Any], name: str, *, path: str | None, key: str,
          environ: Mapping[str, str], https: bool = False) -> str | None:
    value = raw.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not value or "\x00" in value:
        raise _config_error("must be a non-empty string", path=path, key=f"{key}.{name}")
    value = _expand(value, path=path, key=f"{key}.{name}", environ=environ)
    if https and (not value.startswith(("https://", "http://"))
                  or any(c.isspace() or not c.isprintable() for c in value)):
        raise _config_error("must be an http(s) URL", path=path, key=f"{key}.{name}")
    return value


def _choice(raw: dict[str, Any], name: str, choices: tuple[str, ...], *, path: str | None,
            key: str) -> str | None:
    value = raw.get(name)
    if value is not None and value not in choices:
        raise _config_error(f"must be one of {', '.join(choices)}", path=path,
                            key=f"{key}.{name}")
    return value


def _auth(raw: Any, url: str | None, *, path: str | None, key: str,
          environ: Mapping[str, str]) -> AuthSettings | None:
    if raw is None:
        return None
    if url is None:
        raise _config_error("OAuth is for HTTP servers (give a url)", path=path, key=key)
    if not isinstance(raw, dict):
        raise _config_error("must be an object", path=path, key=key)
    unknown = sorted(set(raw) - _AUTH_KEYS)
    if unknown:
        raise _config_error(f"unknown keys {_names(unknown)}", path=path, key=key)
    scopes = raw.get("scopes", [])
    if not isinstance(scopes, list) or not all(isinstance(s, str) and _SCOPE.fullmatch(s)
                                               for s in scopes):
        raise _config_error("must be a list of OAuth scope names", path=path,
                            key=f"{key}.scopes")
    text = {name: _text(raw, name, path=path, key=key, environ=environ,
                        https=name in ("clientMetadataUrl", "issuer", "redirectUri"))
            for name in ("clientId", "clientSecret", "clientMetadataUrl", "issuer",
                         "privateKey", "signingAlgorithm", "redirectUri")}
    grant = _choice(raw, "grant", _GRANTS, path=path, key=key) or "authorization_code"
    if grant == "client_credentials" and not text["clientId"]:
        raise _config_error("the client_credentials grant needs a clientId", path=path,
                            key=f"{key}.clientId")
    if grant == "client_credentials" and not (text["clientSecret"] or text["privateKey"]):
        raise _config_error("the client_credentials grant needs a clientSecret or a "
                            "privateKey", path=path, key=key)
    return AuthSettings(
        scopes=tuple(dict.fromkeys(scopes)), client_id=text["clientId"],
        client_secret=text["clientSecret"], client_metadata_url=text["clientMetadataUrl"],
        issuer=text["issuer"], grant=grant,
        token_endpoint_auth_method=_choice(raw, "tokenEndpointAuthMethod", _AUTH_METHODS,
                                           path=path, key=key),
        private_key=text["privateKey"], signing_algorithm=text["signingAlgorithm"] or "RS256",
        redirect_uri=text["redirectUri"] or DEFAULT_REDIRECT_URI,
        allow_internal=_flag(raw.get("allowInternal"), False, path=path,
                             key=f"{key}.allowInternal"))


def _token_exchange(raw: dict[str, Any], url: str | None, *, path: str | None, key: str,
                    environ: Mapping[str, str]) -> TokenExchangeSettings | None:
    if "tokenExchange" in raw and url is None:
        raise _config_error("token exchange is for HTTP servers (a url) only", path=path,
                            key=f"{key}.tokenExchange")
    if "tokenExchange" in raw and raw.get("auth") is not None:
        raise _config_error("give either auth or tokenExchange: one source of the server's "
                            "token", path=path, key=f"{key}.tokenExchange")
    if "tokenExchange" in raw and raw.get("headers"):
        raise _config_error("give either headers or tokenExchange: the exchanged token is the "
                            "server's Authorization", path=path, key=f"{key}.tokenExchange")
    return parse_token_exchange(raw.get("tokenExchange"),
                                lambda m, k: _config_error(m, path=path, key=k), environ,
                                f"{key}.tokenExchange")


def _gateway(raw: Any, *, path: str | None,
             environ: Mapping[str, str] | None = None) -> GatewaySettings:
    if raw is None:
        return GatewaySettings()
    if not isinstance(raw, dict):
        raise _config_error("must be an object", path=path, key="gateway")
    known = {"store", "policy", "principal", "scopes", "approvalWait", "host", "port", "tokenEnv",
             "allowedOrigins", "maxBodyBytes", "ownNames", "auth", "listingTtl", "inboxUrl",
             "drainSeconds", "adoptWithin"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise _config_error(f"unknown keys {_names(unknown)}", path=path, key="gateway")
    defaults = GatewaySettings()
    host = raw.get("host", defaults.host)
    if host not in ("127.0.0.1", "::1", "localhost"):
        raise _config_error("the gateway listens on a loopback address only", path=path,
                          key="gateway.host")
    port = raw.get("port", defaults.port)
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port < 65536:
        raise _config_error("must be a port number", path=path, key="gateway.port")
    scopes = raw.get("scopes", [])
    origins = raw.get("allowedOrigins", [])
    for name, value in (("scopes", scopes), ("allowedOrigins", origins)):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise _config_error("must be a list of strings", path=path, key=f"gateway.{name}")
    for name in ("store", "policy", "principal", "tokenEnv"):
        if name in raw and (not isinstance(raw[name], str) or not raw[name]
                            or not raw[name].isprintable()):
            raise _config_error("must be a non-empty string of visible characters", path=path,
                                key=f"gateway.{name}")
    body = raw.get("maxBodyBytes", defaults.max_body_bytes)
    if isinstance(body, bool) or not isinstance(body, int) or body < 1024:
        raise _config_error("must be an integer of at least 1024", path=path,
                          key="gateway.maxBodyBytes")
    inbox = raw.get("inboxUrl")
    if inbox is not None:
        parts = urlsplit(inbox) if isinstance(inbox, str) and inbox.isprintable() else None
        if (parts is None or parts.scheme not in ("http", "https") or not parts.hostname
                or parts.username is not None or parts.password is not None or parts.query
                or parts.fragment):
            raise _config_error("must look like https://inbox.example (no credentials, query "
                                "or fragment)", path=path, key="gateway.inboxUrl")
    policy, store = raw.get("policy"), raw.get("store")
    if path is not None:  # both found from the config's folder, wherever the command runs
        policy = str(Path(path).parent / policy) if policy is not None else None
        store = relative_to(store, Path(path).parent) if store is not None else None
    return GatewaySettings(
        store=store, policy=policy,
        principal=raw.get("principal", defaults.principal),
        scopes=frozenset(scopes),
        approval_wait=_number(raw.get("approvalWait"), defaults.approval_wait, path=path,
                              key="gateway.approvalWait"),
        host=host, port=port, token_env=raw.get("tokenEnv", defaults.token_env),
        allowed_origins=tuple(origins), max_body_bytes=body,
        own_names=_flag(raw.get("ownNames"), False, path=path, key="gateway.ownNames"),
        listing_ttl=0.0 if raw.get("listingTtl") == 0 and not isinstance(
            raw.get("listingTtl"), bool) else _number(raw.get("listingTtl"),
                                                     defaults.listing_ttl, path=path,
                                                     key="gateway.listingTtl"),
        drain_seconds=_number(raw.get("drainSeconds"), defaults.drain_seconds, path=path,
                              key="gateway.drainSeconds"),
        adopt_within=None if raw.get("adoptWithin") is None else _number(
            raw.get("adoptWithin"), 0.0, path=path, key="gateway.adoptWithin"),
        auth=parse_oauth(raw.get("auth"), lambda m, k: _config_error(m, path=path, key=k),
                         environment() if environ is None else environ),
        inbox_url=inbox)


MAX_DEPTH = 64


class _KeyLines:
    """Maps the dotted key paths of a JSON text (``mcpServers.git.timeout``) to the line of the
    key, and finds the first place nested deeper than :data:`MAX_DEPTH`, without recursion.

    A tolerant scan, run before parsing: on text that is not JSON it still ends, and the parser
    then reports the syntax error."""

    def __init__(self, text: str) -> None:
        self.lines: dict[str, int] = {}
        self.too_deep: int | None = None
        # per open container: its key path, whether it is an object, the path of its last key
        stack: list[tuple[str, bool, list[str]]] = []
        line, i, n = 1, 0, len(text)
        last_string: str | None = None
        while i < n:
            ch = text[i]
            if ch == "\n":
                line += 1
            elif ch == '"':
                end = i + 1
                while end < n and text[end] != '"':
                    end += 2 if text[end] == "\\" else 1
                try:
                    last_string = json.loads(text[i:end + 1])
                except ValueError:
                    last_string = None
                line += text.count("\n", i, end)
                i = end
            elif ch == ":" and stack and stack[-1][1] and isinstance(last_string, str):
                path, _, last_key = stack[-1]
                key = f"{path}.{last_string}" if path else last_string
                self.lines.setdefault(key, line)
                last_key[:] = [key]
                last_string = None
            elif ch in "{[":
                if len(stack) >= MAX_DEPTH and self.too_deep is None:
                    self.too_deep = line
                if not stack:
                    child = ""
                else:
                    path, is_object, last_key = stack[-1]
                    child = (last_key[0] if last_key else path) if is_object else path
                stack.append((child, ch == "{", []))
            elif ch in "}]" and stack:
                stack.pop()
            i += 1

    def find(self, key: str) -> int | None:
        while key:
            if key in self.lines:
                return self.lines[key]
            key = key.rpartition(".")[0]
        return None


def _parse_json(text: str, path: str, lines: _KeyLines) -> Any:
    if lines.too_deep is not None:
        raise ConfigError(f"not valid JSON: nested deeper than {MAX_DEPTH} levels", path=path,
                          line=lines.too_deep)
    try:
        return decode_strict(text)  # the one strict decoder
    except json.JSONDecodeError as exc:
        raise ConfigError(f"not valid JSON: {exc.msg}", path=path, line=exc.lineno) from None
    except JsonError as exc:
        line = 1 if text.startswith("\ufeff") else None
        raise ConfigError(f"not valid JSON: {_printable(str(exc))}", path=path,
                          line=line) from None


def parse_config(data: Any, *, path: str | None = None,
                 environ: Mapping[str, str] | None = None) -> McpConfig:
    """Build a config from parsed JSON (``{"mcpServers": {...}, "gateway": {...}}``).

    Raises:
        ConfigError: naming the file and the key that is wrong.
    """
    env = environment() if environ is None else environ
    if not isinstance(data, dict):
        raise _config_error("the MCP config must be a JSON object", path=path)
    unknown = sorted(set(data) - {"mcpServers", "gateway", "inbox", "$schema"})
    if unknown:
        raise _config_error(f"unknown keys {_names(unknown)}", path=path)
    raw_servers = data.get("mcpServers", {})
    if not isinstance(raw_servers, dict):
        raise _config_error("must be an object of servers", path=path, key="mcpServers")
    servers: dict[str, ServerConfig] = {}
    for server_id, raw in raw_servers.items():
        server = _server(server_id, raw, path=path, environ=env)
        if server is not None:
            servers[server_id] = server
    return McpConfig(servers, _gateway(data.get("gateway"), path=path, environ=env), path,
                     _inbox(data.get("inbox"), path=path, environ=env))


def _inbox(raw: Any, *, path: str | None, environ: Mapping[str, str]) -> SignInSettings | None:
    """The ``inbox`` section (``anfitrion serve --config``): only ``auth`` so far."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise _config_error("must be an object", path=path, key="inbox")
    unknown = sorted(set(raw) - {"auth"})
    if unknown:
        raise _config_error(f"unknown keys {_names(unknown)}", path=path, key="inbox")
    return parse_sign_in(raw.get("auth"), lambda m, k: _config_error(m, path=path, key=k),
                         environ)


def load_config(path: str | Path, *, environ: Mapping[str, str] | None = None) -> McpConfig:
    """Read an MCP config file.

    The file must be UTF-8 JSON without what :func:`json.loads` lets through but a config
    should not hold: duplicate keys (which one wins differs between programs), ``NaN`` and
    ``Infinity``, numbers out of range, nesting deeper than 64 levels. Every error is one line
    naming the file, the line and the key.

    Raises:
        ConfigError: the file cannot be read or is invalid.
    """
    name = str(path)
    text = read_settings_text(name, what="MCP config", required=True)
    lines = _KeyLines(text)
    data = _parse_json(text, name, lines)
    token = _LINES.set(lines)
    try:
        return parse_config(data, path=name, environ=environ)
    finally:
        _LINES.reset(token)
