"""``anfitrion auth``: connect, show and disconnect a principal's accounts at OAuth-protected
MCP servers (the servers' ``auth`` entries in the MCP config)::

    anfitrion auth keygen                                   # a key for $ANFITRION_TOKEN_KEY
    anfitrion auth login  docs --config mcp.json            # opens the browser, waits
    anfitrion auth login  docs --config mcp.json --no-browser --principal alice
    anfitrion auth status --json
    anfitrion auth logout docs --config mcp.json            # revokes, then deletes
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click

from ..exceptions import AnfitrionError
from ..mcp import McpConfig, ServerConfig, load_config
from ..store import CredentialStore, Store
from ._common import resolve_url, run_with_store

T = TypeVar("T")

DEFAULT_PRINCIPAL = "local"


def _config(path: str) -> McpConfig:
    try:
        return load_config(path)
    except AnfitrionError as exc:
        raise click.ClickException(str(exc)) from exc


def _server(config: McpConfig, server: str) -> ServerConfig:
    found = config.servers.get(server)
    if found is None or found.auth is None:
        names = sorted(s.id for s in config.servers.values() if s.auth is not None)
        raise click.ClickException(f"no server {server[:40]!r} with an \"auth\" entry in the "
                                   f"config (servers with one: {', '.join(names) or 'none'})")
    return found


def _run(store_url: str | None, config: McpConfig | None,
         work: Callable[[Store], Awaitable[T]], *, create: bool = False) -> T:
    """*work* on the store by the one store rule (the config's ``gateway.store`` second). A
    missing store is made only by *create* (``login``, which writes the tokens); reading or
    deleting refuses it, creating nothing (``no store at …``)."""
    gateway_store = config.gateway.store if config is not None else None
    return run_with_store(resolve_url(store_url, gateway_store=gateway_store), work,
                          create=create)


_config_option = click.option("--config", "config_path", required=True,
                              type=click.Path(dir_okay=False),
                              help="The MCP servers file (mcpServers JSON).")
_store_option = click.option("--store", "store_url", default=None, metavar="URL",
                             help="Store URL (default: the config's gateway.store, else "
                                  "anfitrion's store rule).")
_principal_option = click.option("--principal", "principal", default=DEFAULT_PRINCIPAL,
                                 show_default=True,
                                 help="Whose account: the principal the tokens belong to.")


@click.group("auth")
def command() -> None:
    """Connect accounts at OAuth-protected MCP servers (tokens sealed in the store)."""


@command.command("keygen")
def keygen() -> None:
    """Print a new token key (for $ANFITRION_TOKEN_KEY or a line of the key file)."""
    from ..mcp import TokenCipher

    click.echo(TokenCipher.new_key())


@command.command("login")
@click.argument("server")
@_config_option
@_store_option
@_principal_option
@click.option("--no-browser", is_flag=True, help="Print the address; do not open a browser.")
@click.option("--timeout", type=click.FloatRange(1, 3600), default=300, show_default=True,
              help="Seconds to wait for the authorization server's redirect.")
def login(server: str, config_path: str, store_url: str | None, principal: str,
          no_browser: bool, timeout: float) -> None:
    """Connect PRINCIPAL's account at SERVER: discovery, then the authorization code flow
    with PKCE through a redirect to 127.0.0.1 (the server entry's redirectUri)."""
    from ..mcp import LoopbackAuthorizer, OAuthAccess, connect_account

    config = _config(config_path)
    target = _server(config, server)
    assert target.auth is not None
    assert target.url is not None

    async def work(store: Store) -> int:
        authorizer = LoopbackAuthorizer(target.auth.redirect_uri if target.auth else "",
                                        no_browser=no_browser, timeout=timeout,
                                        echo=click.echo)
        return await connect_account(OAuthAccess.from_env(store, principal, authorizer), target,
                                     store)

    tools = _run(store_url, config, work, create=True)
    click.echo(f"{principal} is connected to {server} ({tools} tools listed).")


@command.command("logout")
@click.argument("server")
@_config_option
@_store_option
@_principal_option
def logout(server: str, config_path: str, store_url: str | None, principal: str) -> None:
    """Revoke PRINCIPAL's tokens for SERVER at its authorization server (when it offers
    revocation) and delete them from the store."""
    from ..mcp import OAuthAccess, revoke_account

    config = _config(config_path)
    target = _server(config, server)

    async def work(store: Store) -> tuple[int, bool]:
        return await revoke_account(OAuthAccess.from_env(store, principal), target)

    deleted, revoked = _run(store_url, config, work)
    if not deleted:
        click.echo(f"{principal} had no account connected to {server}.")
        return
    at_server = "revoked at the authorization server and " if revoked else ""
    click.echo(f"{principal}'s tokens for {server}: {at_server}deleted.")


@command.command("status")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="The MCP servers file: name each connection's server.")
@_store_option
@click.option("--principal", "principal", default=None,
              help="Only this principal's connections.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def status(config_path: str | None, store_url: str | None, principal: str | None,
           as_json: bool) -> None:
    """The connected accounts: principal, server, issuer, scopes, expiry — never a token."""
    config = _config(config_path) if config_path else None
    by_url = {s.url: s.id for s in config.servers.values()} if config else {}

    async def work(store: Store) -> list[dict[str, Any]]:
        if not isinstance(store, CredentialStore):
            raise click.ClickException("this store keeps no OAuth credentials")
        return [{"principal": e.principal, "server": by_url.get(e.resource),
                 "resource": e.resource, "issuer": e.issuer,
                 "scope": e.meta.get("scope", ""), "expires_at": e.meta.get("expires_at"),
                 "refreshable": bool(e.meta.get("refreshable")), "key_id": e.key_id}
                for e in await store.list_credentials(principal) if e.kind == "tokens"]

    rows = _run(store_url, config, work)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("No account is connected.")
    for row in rows:
        server = row["server"] or row["resource"]
        click.echo(f"{row['principal']}  {server}  issuer={row['issuer']}  "
                   f"scope={row['scope'] or '-'}  refreshable={row['refreshable']}")
