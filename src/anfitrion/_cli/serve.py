"""``anfitrion serve``: the approval inbox and its JSON API, on loopback by default."""

from __future__ import annotations

import ipaddress
import os
import secrets
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import click

from ..exceptions import UserError
from ._common import existing_store, resolve_url, shown_store, store_option

if TYPE_CHECKING:
    from ..mcp import AccountConnector
    from ..store import Store
    from ..web import OidcSignIn

TOKEN_ENV = "ANFITRION_INBOX_TOKEN"


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def allowed_hosts_for(host: str, extra: tuple[str, ...]) -> list[str]:
    """Host names the inbox answers for: loopback names, the bound address, and *extra*."""
    hosts = ["127.0.0.1", "localhost", "[::1]"]
    bound = f"[{host.strip('[]')}]" if ":" in host else host
    for name in (bound, *extra):
        if name.lower() not in hosts:
            hosts.append(name.lower())
    return hosts


@click.command("serve")
@store_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535))
@click.option("--token", default=None,
              help=f"Sign-in and API token (default: ${TOKEN_ENV}, else a random one, printed).")
@click.option("--allow-remote", is_flag=True,
              help="Allow binding to a non-loopback address (needs --token or "
                   f"${TOKEN_ENV}).")
@click.option("--allowed-host", "allowed_host", multiple=True,
              help="A further host name browsers use to reach the inbox (repeatable).")
@click.option("--public-url", default=None,
              help="The https:// origin a TLS proxy serves the inbox at (cookies become Secure).")
@click.option("--files-root", type=click.Path(file_okay=False), default=None,
              help="The folder a files tool writes under: file writes are shown as diffs.")
@click.option("--reviewers", "reviewers_path", type=click.Path(dir_okay=False), default=None,
              help="Reviewers with their own tokens and roles (two-person rule).")
@click.option("--callback-secret-env", "callback_env", multiple=True,
              help="A variable holding a webhook secret: enables signed callbacks "
                   "(repeatable, for rotation).")
@click.option("--accounts", "accounts_config", type=click.Path(dir_okay=False), default=None,
              metavar="FILE", help="An MCP config: reviewers connect their own accounts at its "
              "servers with auth (the /connect page; needs $ANFITRION_TOKEN_KEY).")
def command(store_url: str | None, host: str, port: int, token: str | None, allow_remote: bool,
            allowed_host: tuple[str, ...], public_url: str | None,
            files_root: str | None, reviewers_path: str | None = None,
            callback_env: tuple[str, ...] = (), accounts_config: str | None = None) -> None:
    """Serve the approval inbox (extra: web).

    Binds to 127.0.0.1 unless --allow-remote is given together with a configured token. Put a
    TLS-terminating proxy in front of it for anything but loopback. With --config, the MCP
    config's store, and its inbox.auth (if any) signs reviewers in with OpenID Connect.
    """
    config_path = click.get_current_context().params.get("mcp_config")
    try:
        import uvicorn

        from ..store import open_store
        from ..web import create_app
    except ImportError as exc:
        raise click.ClickException("the inbox needs the web extra: "
                                   "pip install 'anfitrion[web]'") from exc
    configured = token or os.environ.get(TOKEN_ENV)
    if not _is_loopback(host):
        if not allow_remote:
            raise click.UsageError(f"{host} is not a loopback address: add --allow-remote "
                                   "(and put TLS in front of the inbox)")
        if not configured:
            raise click.UsageError("binding to a non-loopback address needs a configured token "
                                   f"(--token or ${TOKEN_ENV})")
    the_token = configured or secrets.token_urlsafe(24)
    public_origin = None
    if public_url:
        parts = urlsplit(public_url)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.username:
            raise click.UsageError("--public-url must look like https://inbox.example")
        public_origin = f"{parts.scheme}://{parts.netloc}"
        allowed_host = (*allowed_host, parts.hostname)
    url = existing_store(resolve_url(store_url))
    shown_host = f"[{host.strip('[]')}]" if ":" in host else host
    try:
        from ..channels import load_reviewers

        store = open_store(url)
        origin = public_origin or f"http://{shown_host}:{port}"
        accounts = _accounts(accounts_config, store, origin)
        oidc = _oidc(config_path, origin)
        app = create_app(store, token=the_token, accounts=accounts, oidc=oidc,
                         allowed_hosts=allowed_hosts_for(host, allowed_host),
                         files_root=files_root, public_origin=public_origin,
                         reviewers=load_reviewers(reviewers_path) if reviewers_path else None,
                         callback_secrets=[os.environ.get(name, "") for name in callback_env])
    except UserError as exc:
        raise click.UsageError(str(exc)) from exc
    click.echo(f"anfitrion inbox on http://{shown_host}:{port}/  (store {shown_store(url)})")
    if oidc is not None:
        click.echo(f"sign in: {origin}/login  (at {oidc.settings.issuer}; redirect URI "
                   f"{oidc.redirect_uri})")
        if configured is None:
            click.echo(f"API token: {the_token}")
    elif configured is None:
        # in the fragment, the token never reaches the server, a proxy's log or a Referer
        click.echo(f"sign in: {origin}/login#token={the_token}")
        click.echo(f"sign-in token: {the_token}")
    uvicorn.run(app, host=host.strip("[]"), port=port, log_level="warning",
                server_header=False, proxy_headers=False)


def _accounts(mcp_config: str | None, store: Store, origin: str) -> AccountConnector | None:
    """The connect pages' engine for *mcp_config*'s servers with ``auth``, or ``None``."""
    if mcp_config is None:
        return None
    from ..mcp import AccountConnector, CredentialError, TokenCipher, load_config

    try:
        return AccountConnector(load_config(mcp_config), store, TokenCipher.from_env(),
                                redirect_uri=f"{origin}/connect/callback")
    except CredentialError as exc:
        raise click.UsageError(str(exc)) from exc


def _oidc(mcp_config: str | None, origin: str) -> OidcSignIn | None:
    """Sign-in with OpenID Connect from *mcp_config*'s ``inbox.auth``, or ``None``."""
    if mcp_config is None:
        return None
    from ..mcp import load_config

    settings = load_config(mcp_config).sign_in
    if settings is None:
        return None
    try:
        from ..web import OidcSignIn
    except ImportError as exc:
        raise click.ClickException("signing in with OpenID Connect needs the mcp extra: "
                                   "pip install 'anfitrion[web,mcp]'") from exc
    return OidcSignIn(settings, redirect_uri=f"{origin}/login/callback")
