"""What the store-facing commands share: the ``--store`` option and running with a store."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import click

from .._home import default_store_url
from ..exceptions import AnfitrionError
from ..store import Store, open_store

__all__ = ["resolve_url", "run_with_store", "shown", "store_option"]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


def store_option(function: F) -> F:
    """``--store URL``; default ``$ANFITRION_STORE``, else the SQLite file in the data folder."""
    return click.option(
        "--store", "store_url", default=None, metavar="URL",
        help="Store URL: sqlite:///PATH or postgresql://… (default: $ANFITRION_STORE, else "
             "anfitrion.db in $ANFITRION_HOME, ~/.local/share/anfitrion).")(function)


def resolve_url(url: str | None) -> str:
    return url or default_store_url()


def run_with_store(url: str | None, work: Callable[[Store], Awaitable[T]]) -> T:
    """Open the store, run *work*, close the store; our errors become a clean CLI error."""

    async def main() -> T:
        store = open_store(resolve_url(url))
        try:
            return await work(store)
        finally:
            await store.close()

    try:
        return anyio.run(main)
    except AnfitrionError as exc:
        raise click.ClickException(str(exc)) from exc


def shown(text: str) -> str:
    """Text from the store as a person may safely see it on a terminal."""
    from ..approvals import make_visible

    return make_visible(text)
