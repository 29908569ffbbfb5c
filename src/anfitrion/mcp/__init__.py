"""MCP: servers as tool sources with pinned definitions, and the anfitrion gateway.

Needs the ``mcp`` extra (``pip install 'anfitrion[mcp]'``) for anything that talks to a
server; the config and the pins (:mod:`.config`, :mod:`.pinning`) work without it.

- :class:`McpServers` / :class:`McpToolset` —
  tool sources for a :class:`~anfitrion._tools.Toolbox`;
- :class:`Elicitation` / :class:`ElicitationAnswer` — what a server asks the host's person,
  and the answer, for the ``elicitation=`` handler of a toolset (:mod:`._elicitation`);
- :class:`PinBook` — approved definitions, in the store, and what ``mcp review`` shows of
  them (:func:`server_identity`, :func:`identity_changes`, :func:`suspicious_text`);
- :class:`Gateway` — ``anfitrion gateway``: an MCP server in front of the configured servers,
  every ``tools/call`` through the gate;
- :func:`approval_queue` — the approval queue as an MCP server for a reviewer's assistant;
- :func:`connect_account` / :func:`revoke_account` with :class:`LoopbackAuthorizer` —
  ``anfitrion auth login`` / ``logout``;
- :func:`resolve_program` / :func:`package_spec` / :func:`describe_profile` — what a stdio
  server runs and in which sandbox (``mcp review``, ``mcp lock``);
- :class:`Fetcher` / :class:`JwksCache` / :func:`claim_at` / :func:`claim_words` — the
  gateway's bounded fetcher, key cache and claim readers for OAuth tokens, which the inbox's
  OpenID Connect sign-in uses too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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
from ._pinning import (
    INSTRUCTION_PATTERNS,
    META_SCHEMA,
    Pin,
    PinBook,
    PinState,
    identity_changes,
    server_identity,
    server_key,
    suspicious_text,
)

if TYPE_CHECKING:  # the names below are imported on first use (most need the SDK)
    from ._accounts import AccountConnector
    from ._approval_queue import approval_queue, reviewer_from_environment
    from ._elicitation import Elicitation, ElicitationAnswer, ElicitationHandler
    from ._gateway import Gateway
    from ._gateway_auth import AuthRefused, Fetcher, JwksCache, claim_at, claim_words
    from ._oauth import AccountNotConnected, CredentialError, OAuthAccess, TokenCipher
    from ._oauth_login import LoopbackAuthorizer, connect_account, revoke_account
    from ._resolve import package_spec, resolve_program
    from ._sandbox import describe_profile
    from ._toolset import McpServers, McpTool, McpToolset

__all__ = [
    "INSTRUCTION_PATTERNS",
    "META_SCHEMA",
    "AccountConnector",
    "AccountNotConnected",
    "AuthRefused",
    "AuthSettings",
    "CredentialError",
    "Elicitation",
    "ElicitationAnswer",
    "ElicitationHandler",
    "Fetcher",
    "Gateway",
    "GatewaySettings",
    "JwksCache",
    "LoopbackAuthorizer",
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
    "approval_queue",
    "claim_at",
    "claim_words",
    "connect_account",
    "describe_profile",
    "identity_changes",
    "load_config",
    "package_spec",
    "parse_config",
    "resolve_program",
    "reviewer_from_environment",
    "revoke_account",
    "server_identity",
    "server_key",
    "suspicious_text",
]

_LAZY = {"AccountConnector": "_accounts", "McpServers": "_toolset", "McpTool": "_toolset",
         "McpToolset": "_toolset", "Gateway": "_gateway", "Elicitation": "_elicitation",
         "ElicitationAnswer": "_elicitation", "ElicitationHandler": "_elicitation",
         "AccountNotConnected": "_oauth", "CredentialError": "_oauth", "OAuthAccess": "_oauth",
         "TokenCipher": "_oauth", "approval_queue": "_approval_queue",
         "reviewer_from_environment": "_approval_queue", "LoopbackAuthorizer": "_oauth_login",
         "connect_account": "_oauth_login", "revoke_account": "_oauth_login",
         "package_spec": "_resolve", "resolve_program": "_resolve",
         "describe_profile": "_sandbox", "AuthRefused": "_gateway_auth",
         "Fetcher": "_gateway_auth", "JwksCache": "_gateway_auth", "claim_at": "_gateway_auth",
         "claim_words": "_gateway_auth"}


def __getattr__(name: str) -> Any:
    # The SDK is imported only when a name that needs it is used.
    if name in _LAZY:
        import importlib

        module = importlib.import_module(f"{__name__}.{_LAZY[name]}")
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
