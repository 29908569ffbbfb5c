"""``anfitrion gateway``: an MCP server in front of MCP servers, every call through the gate.

    anfitrion gateway --config mcp.json                 # stdio: for a desktop assistant
    anfitrion gateway --config mcp.json --http --port 8765
    anfitrion gateway --config one-server.json --own-names  # its tools under their own names
"""

from __future__ import annotations

import gc
import secrets
import sys

import anyio
import click

from .._home import environment
from .._principal import Principal
from ..exceptions import AnfitrionError
from ..mcp import load_config
from ..policy import Policy
from ..store import open_store
from ._common import STORE_HELP, resolve_url

YOUNG_COLLECTION_EVERY = 10_000
"""Allocations between two young collections of the cyclic garbage collector while a gateway
serves (Python's default: 700)."""


def settle_heap() -> None:
    """A gateway process serves for as long as it runs, and what it built to start — the MCP
    SDK, pydantic's schemas, the policy, the servers' connections, some 120,000 objects — lives
    as long. The cyclic collector traversed all of it in every full collection while finding
    almost nothing to free (64 objects in 1,400 calls, measured): about 8 % of the serving
    thread's CPU (docs/performance.md, issue 31). Once started, that heap is collected, then
    frozen (``gc.freeze``: out of every later collection's reach), and young collections run
    every :data:`YOUNG_COLLECTION_EVERY` allocations instead of 700. Everything made while
    serving is still collected, cycles included — the servers' connections too: ``start``
    only schedules them, so a connection replaced when its server restarts is freed like any
    other object, never kept frozen."""
    gc.collect()
    gc.freeze()
    young, middle, old = gc.get_threshold()
    gc.set_threshold(max(young, YOUNG_COLLECTION_EVERY), middle, old)


@click.command("gateway")
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False),
              help="The MCP servers file (mcpServers JSON, optional gateway section).")
@click.option("--store", "store_url", default=None, metavar="URL",
              help=STORE_HELP)
@click.option("--http", "use_http", is_flag=True,
              help="Serve streamable HTTP on 127.0.0.1 instead of stdio.")
@click.option("--port", type=int, default=None, help="HTTP port (default: gateway.port, 8765).")
@click.option("--policy", "policy_path", type=click.Path(dir_okay=False), default=None,
              help="Policy file (TOML; default: gateway.policy, else ./anfitrion.toml when "
                   "present, else read → allow, write → ask).")
@click.option("--approval-wait", type=float, default=None,
              help="Seconds a call waits for a person (default: gateway.approvalWait, 60).")
@click.option("--own-names", is_flag=True, default=None,
              help="Present the one configured server's tools and prompts under their own "
                   "names, not SERVER.TOOL (default: gateway.ownNames). Refused with more "
                   "than one server.")
@click.option("--replica", is_flag=True,
              help="With --http: serve as one of several gateway processes on one store "
                   "behind a load balancer without affinity (no transport session kept "
                   "in the process; conversations live in the store).")
def command(config_path: str, store_url: str | None, use_http: bool, port: int | None,
            policy_path: str | None, approval_wait: float | None,
            own_names: bool | None, replica: bool = False) -> None:
    """Serve the configured MCP servers' approved tools, every call through the gate.

    Over HTTP every request needs 'Authorization: Bearer TOKEN'; the token is read from the
    variable named by gateway.tokenEnv (ANFITRION_GATEWAY_TOKEN), or generated and printed on
    stderr. With gateway.auth it is instead an OAuth access token of the configured issuer,
    and its subject is the call's principal (docs/auth.md). Nothing is ever written to stdout
    except the MCP protocol.
    """
    try:
        from ..mcp import Gateway, McpServers

        config = load_config(config_path)
    except AnfitrionError as exc:
        raise click.ClickException(str(exc)) from exc
    settings = config.gateway
    own = settings.own_names if own_names is None else own_names
    if own and len(config.servers) != 1:
        raise click.ClickException(
            f"--own-names needs exactly one configured server, not {len(config.servers)}: "
            "with several, one server's tool could take another's name")
    url = resolve_url(store_url, gateway_store=config.gateway.store)
    policy = _policy(policy_path or settings.policy)

    def say(text: str) -> None:
        click.echo(text, err=True)

    async def main() -> None:
        store = open_store(url)
        try:
            async with McpServers(config, store, errlog=sys.stderr) as servers:
                # made first: it tells the servers, before they start, what it relays
                gateway = Gateway(servers, store=store, policy=policy,
                                  principal=Principal(settings.principal, scopes=settings.scopes),
                                  approval_wait=approval_wait or settings.approval_wait,
                                  own_names=own, store_url=url,
                                  listing_ttl=settings.listing_ttl,
                                  adopt_within=settings.adopt_within,
                                  inbox_url=settings.inbox_url)
                await servers.start()  # all at once, while the client connects
                settle_heap()  # what serving starts from: out of the collector's way
                if not use_http:
                    await gateway.serve_stdio(drain_seconds=settings.drain_seconds)
                    return
                token = None if settings.auth is not None else environment().get(
                    settings.token_env)
                if not token and settings.auth is None:
                    token = secrets.token_urlsafe(32)
                    say(f"no ${settings.token_env}: this run's bearer token is {token}")
                await gateway.serve_http(
                    token=token, auth=settings.auth, host=settings.host,
                    port=port or settings.port,
                    allowed_origins=settings.allowed_origins,
                    max_body_bytes=settings.max_body_bytes, stateless=replica,
                    drain_seconds=settings.drain_seconds,
                    started=lambda p: say(f"anfitrion gateway: http://{settings.host}:{p}/mcp"))
        finally:
            await store.close()

    try:
        anyio.run(main)
    except AnfitrionError as exc:
        raise click.ClickException(str(exc)) from exc
    except KeyboardInterrupt:  # pragma: no cover - interactive stop
        pass


def _policy(path: str | None) -> Policy | None:
    """The policy file's policy, through the policy package's loader when it has one."""
    try:
        from ..policy import find_policy  # type: ignore[attr-defined,unused-ignore]
    except ImportError:
        if path is not None:
            raise click.ClickException("this anfitrion cannot read policy files") from None
        return None
    try:
        found: Policy = find_policy(path)
    except AnfitrionError as exc:
        raise click.ClickException(str(exc)) from exc
    return found
