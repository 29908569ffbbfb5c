"""``anfitrion reviewers``: who may answer which calls (reviewer entitlements, issue 37).

``entitle NAME [--tool GLOB]… [--principal GLOB]… [--max ARGUMENT=AMOUNT]``, ``revoke NAME
--reason WHY``, ``list [--json]``. Once one reviewer holds an entitlement, every door refuses
an answer or vote its grants do not cover; each grant and revocation is audited.
"""

from __future__ import annotations

import getpass
import json
import math
from collections.abc import Sequence
from typing import Any

import click

from .. import _entitlements as entitlements
from ._common import run_with_store, shown, store_option

__all__ = ["command"]


@click.group("reviewers")
def command() -> None:
    """Reviewer entitlements: who may approve which tool, for whom, up to which amount."""


def _by() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli"


@command.command("entitle")
@store_option
@click.argument("name")
@click.option("--tool", "tools", multiple=True, metavar="GLOB",
              help="Tools this reviewer may answer for (repeat; default every tool).")
@click.option("--principal", "principals", multiple=True, metavar="GLOB",
              help="Principals whose calls they may answer (repeat; default everyone).")
@click.option("--max", "maximum", default=None, metavar="ARGUMENT=AMOUNT",
              help="Only calls whose numeric ARGUMENT is at most AMOUNT (e.g. amount=1000).")
def entitle(store_url: str | None, name: str, tools: Sequence[str], principals: Sequence[str],
            maximum: str | None) -> None:
    """Let NAME answer the calls this grant covers (adds to their grants; lifts a revocation)."""
    argument, amount = None, None
    if maximum is not None:
        argument, _, text = maximum.partition("=")
        try:
            amount = float(text)
        except ValueError:
            amount = math.nan
        if not argument or not math.isfinite(amount):
            raise click.ClickException(f"--max {maximum!r}: use ARGUMENT=AMOUNT, e.g. amount=1000")
    given = entitlements.Grant(tuple(tools) or ("*",), tuple(principals) or ("*",), argument,
                               amount)

    async def work(store: Any) -> None:
        await entitlements.grant(store, name, given, by=_by())

    run_with_store(store_url, work)
    click.echo(shown(f"{name} may answer: {given.describe()}"))


@command.command("revoke")
@store_option
@click.argument("name")
@click.option("--reason", default="", help="Why (kept in the audit log).")
def revoke(store_url: str | None, name: str, reason: str) -> None:
    """Stop every answer and vote of NAME from now on, through every door."""
    async def work(store: Any) -> bool:
        return await entitlements.revoke(store, name, by=_by(), reason=reason)

    if not run_with_store(store_url, work):
        raise click.ClickException(shown(f"{name} holds no entitlement: nothing to revoke"))
    click.echo(shown(f"revoked {name}: their answers and votes are refused from now on"))


@command.command("list")
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_command(store_url: str | None, as_json: bool) -> None:
    """Every reviewer's grants, and who is revoked."""
    async def work(store: Any) -> Any:
        return await store.list_records(entitlements.NAMESPACE)

    entries = run_with_store(store_url, work)
    if as_json:
        click.echo(json.dumps(dict(entries)))
        return
    if not entries:
        click.echo("no reviewer entitlement: whoever a door lets in may answer")
    for name, value in entries:
        state = " (REVOKED)" if value.get("revoked") else ""
        for grant in value.get("grants", ()):
            click.echo(shown(f"{name}{state}: {entitlements.Grant.from_dict(grant).describe()}"))
