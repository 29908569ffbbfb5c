"""``anfitrion effects``: side effects whose outcome is unknown, and settling them.

``list [--all] [--json]``, ``show KEY [--json]``, ``resolve KEY --done|--failed [--note]``.
KEY may be the first 8 or more characters of the key. A resolution is audited with who and
why; the model is told it the next time it proposes that effect.
"""

from __future__ import annotations

import getpass
import json

import click

from .. import resolutions
from ..exceptions import ConflictError
from ..store import EffectEntry, Store
from ._common import resolve_url, run_with_store, shown, shown_store, store_option


@click.group("effects")
def command() -> None:
    """Side effects: list the unsettled ones, show one, resolve what happened."""


async def _find(store: Store, key: str) -> EffectEntry:
    found = await resolutions.find_effect(store, key)
    if isinstance(found, list):
        raise click.ClickException(f"{key!r} is the start of {len(found)} effect keys: "
                                   "give more of it")
    if found is None:
        raise click.ClickException(f"no effect {key!r}")
    return found


def _line(entry: EffectEntry) -> str:
    state = resolutions.effect_state_name(entry)
    since = entry.updated_at.strftime("%Y-%m-%d %H:%M") if entry.updated_at else "?"
    return (f"{entry.key[:16]}  {state:<15} {shown(entry.display)}  session "
            f"{shown(entry.session_id)} call {shown(entry.call_id)}  since {since} UTC")


@command.command("list")
@store_option
@click.option("--all", "show_all", is_flag=True, help="Include settled effects.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_(store_url: str | None, show_all: bool, as_json: bool) -> None:
    """List effects a person must resolve (running with nobody settling them, or unknown)."""
    async def work(store: Store) -> list[EffectEntry]:
        return list(await store.list_effects(unsettled_only=not show_all))

    found = run_with_store(store_url, work)
    if as_json:
        click.echo(json.dumps({"effects": [resolutions.effect_json(e) for e in found]},
                              indent=2, ensure_ascii=False))
        return
    if not found:
        what = "effect is unsettled" if not show_all else "effect is recorded"
        click.echo(f"no {what} in {shown_store(resolve_url(store_url))}")
    for entry in found:
        click.echo(_line(entry))


@command.command("show")
@click.argument("key")
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def show(key: str, store_url: str | None, as_json: bool) -> None:
    """Show one effect: what it is, which call holds it, how it stands."""
    entry = run_with_store(store_url, lambda store: _find(store, key))
    if as_json:
        click.echo(json.dumps(resolutions.effect_json(entry), indent=2, ensure_ascii=False))
        return
    click.echo(_line(entry))
    click.echo(f"key     {entry.key}")
    click.echo(f"scope   {entry.scope}   tool {shown(entry.tool)}   repeats {entry.repeats}")
    if entry.resolved_by:
        click.echo(f"resolved by {shown(entry.resolved_by)}: {shown(entry.resolution_note or '')}")
    if entry.result is not None:
        click.echo(f"result  {shown(entry.result.content[:500])}")


@command.command("resolve")
@click.argument("key")
@click.option("--done", "outcome", flag_value="done", help="It happened.")
@click.option("--failed", "outcome", flag_value="failed", help="It did not happen.")
@click.option("--note", default="", help="Why you know (kept in the audit log).")
@store_option
def resolve(key: str, outcome: str | None, note: str, store_url: str | None) -> None:
    """Say what happened to an effect whose outcome is unknown (--done or --failed)."""
    if outcome is None:
        raise click.UsageError("say what happened: --done or --failed")
    who = f"cli:{getpass.getuser()}"

    async def work(store: Store) -> EffectEntry | None:
        entry = await _find(store, key)
        try:
            return await resolutions.resolve(store, entry.key, done=outcome == "done", by=who,
                                             note=note, via="cli")
        except ConflictError as exc:
            raise click.ClickException(str(exc)) from None

    entry = run_with_store(store_url, work)
    if entry is None:  # pragma: no cover - found just before
        raise click.ClickException(f"no effect {key!r}")
    click.echo(f"resolved {entry.key[:16]} as {outcome} by {who}")
