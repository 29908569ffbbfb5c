"""MCP: servers as tool sources with pinned definitions, and the anfitrion gateway.

Needs the ``mcp`` extra (``pip install 'anfitrion[mcp]'``) for anything that talks to a
server; the config and the pins (:mod:`.config`, :mod:`.pinning`) work without it.

- :class:`~anfitrion.mcp._toolset.McpServers` / :class:`~anfitrion.mcp._toolset.McpToolset` —
  tool sources for a :class:`~anfitrion._tools.Toolbox`;
- :class:`Elicitation` / :class:`ElicitationAnswer` — what a server asks the host's person,
  and the answer, for the ``elicitation=`` handler of a toolset (:mod:`._elicitation`);
- :class:`~anfitrion.mcp._pinning.PinBook` — approved definitions, in the store;
- :class:`~anfitrion.mcp._gateway.Gateway` — ``anfitrion gateway``: an MCP server in front of
  the configured servers, every ``tools/call`` through the gate.
"""

from __future__ import annotations

from typing import Any

from ..exceptions import McpServerError
from ._config import (
    AuthSettings,
    GatewaySettings,
    McpConfig,
    ServerConfig,
    load_config,
    parse_config,
)
from ._oauth_settings import SignInSettings
from ._pinning import Pin, PinBook, PinState

__all__ = [
    "AccountConnector",
    "AccountNotConnected",
    "AuthSettings",
    "CredentialError",
    "Elicitation",
    "ElicitationAnswer",
    "ElicitationHandler",
    "Gateway",
    "GatewaySettings",
    "McpConfig",
    "McpServerError",
    "McpServers",
    "McpTool",
    "McpToolset",
    "OAuthAccess",
    "Pin",
    "PinBook",
    "PinState",
    "ServerConfig",
    "SignInSettings",
    "TokenCipher",
    "load_config",
    "parse_config",
]

_LAZY = {"AccountConnector": "_accounts", "McpServers": "_toolset", "McpTool": "_toolset",
         "McpToolset": "_toolset", "Gateway": "_gateway", "Elicitation": "_elicitation",
         "ElicitationAnswer": "_elicitation", "ElicitationHandler": "_elicitation",
         "AccountNotConnected": "_oauth", "CredentialError": "_oauth", "OAuthAccess": "_oauth",
         "TokenCipher": "_oauth"}


def __getattr__(name: str) -> Any:
    # The SDK is imported only when a name that needs it is used.
    if name in _LAZY:
        import importlib

        module = importlib.import_module(f"{__name__}.{_LAZY[name]}")
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
