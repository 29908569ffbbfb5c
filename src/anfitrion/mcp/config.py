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
- ``relistBeforeCall`` (default ``true``): re-read the tool list before every call, so a
  definition changed without ``notifications/tools/list_changed`` is caught at call time.
- ``disabled`` (default ``false``): skip this server.

A spawned server gets a minimal environment: ``HOME``, ``LOGNAME``, ``PATH``, ``SHELL``,
``TERM``, ``USER`` and what its ``env`` names — never the rest of anfitrion's environment (no API
keys). ``${NAME}`` in ``env`` and ``headers`` values is replaced by anfitrion's variable
``NAME``, so secrets are passed on purpose, one by one.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..exceptions import ConfigError

__all__ = ["GatewaySettings", "McpConfig", "ServerConfig", "load_config", "parse_config"]

SERVER_ID = re.compile(r"[A-Za-z0-9_-]{1,32}")
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_SERVER_KEYS = frozenset({"command", "args", "env", "cwd", "url", "headers", "type", "transport",
                          "trusted", "timeout", "maxResultChars", "relistBeforeCall",
                          "disabled", "description"})
DEFAULT_TIMEOUT = 60.0
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

    @property
    def transport(self) -> str:
        return "stdio" if self.command is not None else "http"


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    """The ``gateway`` section: how ``anfitrion gateway`` runs.

    Attributes:
        store: store URL (approvals, pins, ledger, audit).
        policy: a policy file (TOML), relative to the config file.
        principal: who the gateway's callers act as.
        scopes: the principal's scopes.
        approval_wait: seconds a call waits for a person before returning a tool error.
        host, port: where the HTTP transport listens (always a loopback address).
        token_env: the environment variable holding the HTTP bearer token.
        allowed_origins: ``Origin`` values accepted over HTTP (none by default).
        max_body_bytes: HTTP request body limit.
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


@dataclass(frozen=True, slots=True)
class McpConfig:
    servers: Mapping[str, ServerConfig]
    gateway: GatewaySettings = field(default_factory=GatewaySettings)
    path: str | None = None


def _expand(value: str, *, path: str | None, key: str, environ: Mapping[str, str]) -> str:
    def sub(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in environ:
            raise ConfigError(f"environment variable {name} is not set", path=path, key=key)
        return environ[name]

    return _VARIABLE.sub(sub, value)


def _string_map(raw: Any, *, path: str | None, key: str,
                environ: Mapping[str, str]) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                            for k, v in raw.items()):
        raise ConfigError("must be an object of strings", path=path, key=key)
    return {k: _expand(v, path=path, key=f"{key}.{k}", environ=environ) for k, v in raw.items()}


def _number(raw: Any, default: float, *, path: str | None, key: str) -> float:
    if raw is None:
        return default
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or raw <= 0:
        raise ConfigError("must be a positive number", path=path, key=key)
    return float(raw)


def _flag(raw: Any, default: bool, *, path: str | None, key: str) -> bool:
    if raw is None:
        return default
    if not isinstance(raw, bool):
        raise ConfigError("must be true or false", path=path, key=key)
    return raw


def _server(server_id: str, raw: Any, *, path: str | None,
            environ: Mapping[str, str]) -> ServerConfig | None:
    key = f"mcpServers.{server_id}"
    if not SERVER_ID.fullmatch(server_id):
        raise ConfigError("a server id must match [A-Za-z0-9_-]{1,32} (it prefixes tool names)",
                          path=path, key=key)
    if not isinstance(raw, dict):
        raise ConfigError("must be an object", path=path, key=key)
    unknown = sorted(set(raw) - _SERVER_KEYS)
    if unknown:
        raise ConfigError(f"unknown keys {', '.join(unknown)}", path=path, key=key)
    if _flag(raw.get("disabled"), False, path=path, key=f"{key}.disabled"):
        return None
    kind = raw.get("type", raw.get("transport"))
    command, url = raw.get("command"), raw.get("url")
    if (command is None) == (url is None):
        raise ConfigError("give either a command (stdio) or a url (streamable HTTP)",
                          path=path, key=key)
    if kind not in (None, "stdio", "http", "streamable-http", "streamable_http",
                    "streamableHttp"):
        raise ConfigError(f"transport {kind!r} is not supported: use stdio or streamable HTTP",
                          path=path, key=f"{key}.type")
    if command is not None and (not isinstance(command, str) or not command):
        raise ConfigError("must be a non-empty string", path=path, key=f"{key}.command")
    if url is not None and (not isinstance(url, str) or
                            not url.startswith(("http://", "https://"))):
        raise ConfigError("must be an http(s) URL", path=path, key=f"{key}.url")
    args = raw.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ConfigError("must be a list of strings", path=path, key=f"{key}.args")
    cwd = raw.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise ConfigError("must be a string", path=path, key=f"{key}.cwd")
    max_chars = raw.get("maxResultChars", DEFAULT_MAX_RESULT_CHARS)
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
        raise ConfigError("must be a positive integer", path=path, key=f"{key}.maxResultChars")
    return ServerConfig(
        id=server_id, command=command, args=tuple(args),
        env=_string_map(raw.get("env"), path=path, key=f"{key}.env", environ=environ),
        cwd=cwd, url=url,
        headers=_string_map(raw.get("headers"), path=path, key=f"{key}.headers",
                            environ=environ),
        trusted=_flag(raw.get("trusted"), False, path=path, key=f"{key}.trusted"),
        timeout=_number(raw.get("timeout"), DEFAULT_TIMEOUT, path=path, key=f"{key}.timeout"),
        max_result_chars=max_chars,
        relist_before_call=_flag(raw.get("relistBeforeCall"), True, path=path,
                                 key=f"{key}.relistBeforeCall"))


def _gateway(raw: Any, *, path: str | None) -> GatewaySettings:
    if raw is None:
        return GatewaySettings()
    if not isinstance(raw, dict):
        raise ConfigError("must be an object", path=path, key="gateway")
    known = {"store", "policy", "principal", "scopes", "approvalWait", "host", "port", "tokenEnv",
             "allowedOrigins", "maxBodyBytes"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"unknown keys {', '.join(unknown)}", path=path, key="gateway")
    defaults = GatewaySettings()
    host = raw.get("host", defaults.host)
    if host not in ("127.0.0.1", "::1", "localhost"):
        raise ConfigError("the gateway listens on a loopback address only", path=path,
                          key="gateway.host")
    port = raw.get("port", defaults.port)
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port < 65536:
        raise ConfigError("must be a port number", path=path, key="gateway.port")
    scopes = raw.get("scopes", [])
    origins = raw.get("allowedOrigins", [])
    for name, value in (("scopes", scopes), ("allowedOrigins", origins)):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError("must be a list of strings", path=path, key=f"gateway.{name}")
    for name in ("store", "policy", "principal", "tokenEnv"):
        if name in raw and (not isinstance(raw[name], str) or not raw[name]):
            raise ConfigError("must be a non-empty string", path=path, key=f"gateway.{name}")
    body = raw.get("maxBodyBytes", defaults.max_body_bytes)
    if isinstance(body, bool) or not isinstance(body, int) or body < 1024:
        raise ConfigError("must be an integer of at least 1024", path=path,
                          key="gateway.maxBodyBytes")
    policy = raw.get("policy")
    if policy is not None and path is not None:
        policy = str(Path(path).parent / policy)
    return GatewaySettings(
        store=raw.get("store"), policy=policy,
        principal=raw.get("principal", defaults.principal),
        scopes=frozenset(scopes),
        approval_wait=_number(raw.get("approvalWait"), defaults.approval_wait, path=path,
                              key="gateway.approvalWait"),
        host=host, port=port, token_env=raw.get("tokenEnv", defaults.token_env),
        allowed_origins=tuple(origins), max_body_bytes=body)


def parse_config(data: Any, *, path: str | None = None,
                 environ: Mapping[str, str] | None = None) -> McpConfig:
    """Build a config from parsed JSON (``{"mcpServers": {...}, "gateway": {...}}``).

    Raises:
        ConfigError: naming the file and the key that is wrong.
    """
    env = os.environ if environ is None else environ
    if not isinstance(data, dict):
        raise ConfigError("the MCP config must be a JSON object", path=path)
    unknown = sorted(set(data) - {"mcpServers", "gateway", "$schema"})
    if unknown:
        raise ConfigError(f"unknown keys {', '.join(unknown)}", path=path)
    raw_servers = data.get("mcpServers", {})
    if not isinstance(raw_servers, dict):
        raise ConfigError("must be an object of servers", path=path, key="mcpServers")
    servers: dict[str, ServerConfig] = {}
    for server_id, raw in raw_servers.items():
        server = _server(server_id, raw, path=path, environ=env)
        if server is not None:
            servers[server_id] = server
    return McpConfig(servers, _gateway(data.get("gateway"), path=path), path)


def load_config(path: str | Path, *, environ: Mapping[str, str] | None = None) -> McpConfig:
    """Read an MCP config file.

    Raises:
        ConfigError: the file cannot be read or is invalid.
    """
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read the MCP config: {exc.strerror}", path=name) from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"not valid JSON: {exc.msg}", path=name, line=exc.lineno) from exc
    return parse_config(data, path=name, environ=environ)
