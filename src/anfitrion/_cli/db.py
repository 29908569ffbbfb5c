"""``anfitrion db``: the store's schema — ``migrate``, ``status``, ``path``."""

from __future__ import annotations

import json

import click

from ..store import MigratingStore, Store, sqlite_file
from ._common import resolve_url, run_with_store, store_option


@click.group("db")
def command() -> None:
    """The store's schema: apply migrations, show them, show where the store is."""


def _migratable(store: Store) -> MigratingStore:
    if not isinstance(store, MigratingStore):
        raise click.ClickException(f"{type(store).__name__} has no schema to migrate")
    return store


@command.command("migrate")
@store_option
def migrate(store_url: str | None) -> None:
    """Apply the migrations the store has not applied yet."""

    async def work(store: Store) -> list[str]:
        done: list[str] = await _migratable(store).migrate()
        return done

    done = run_with_store(store_url, work, create=True)
    for name in done:
        click.echo(f"applied {name}")
    click.echo("the store is up to date" if not done else f"{len(done)} migration(s) applied")


@command.command("status")
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def status(store_url: str | None, as_json: bool) -> None:
    """List every migration and whether it is applied."""

    async def work(store: Store) -> list[tuple[str, str | None]]:
        rows: list[tuple[str, str | None]] = await _migratable(store).migration_status()
        return rows

    rows = run_with_store(store_url, work)
    if as_json:
        click.echo(json.dumps([{"name": n, "applied_at": at} for n, at in rows], indent=2))
        return
    for name, applied_at in rows:
        click.echo(f"{name}  {'applied ' + applied_at if applied_at else 'PENDING'}")


@command.command("path")
@store_option
def path(store_url: str | None) -> None:
    """Print where the store is: the SQLite file, or the URL of another store."""
    url = resolve_url(store_url)
    if (file := sqlite_file(url)) is not None:
        click.echo(file)
    else:
        from .._redaction import redact

        click.echo(redact(url, 1000))  # never print a password
