"""What the commands share: ``--store``, ``--policy``, ``--principal``, running with a store,
naming the store in messages, and importing ``module:attribute`` references."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import click

from .._home import store_choice
from ..exceptions import AnfitrionError, ConfigError, UserError
from ..policy import DEFAULT_POLICY_FILE, Policy, find_policy
from ..store import Store, open_store

__all__ = ["import_reference", "load_policy_option", "policy_option", "principal_option",
           "resolve_url", "run_with_store", "shown", "shown_store", "store_option"]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

STORE_HELP = ("Store URL: sqlite:///PATH, postgresql://… or memory:// (default: "
              "$ANFITRION_STORE, else anfitrion.db in $ANFITRION_HOME, else [store] url in "
              "./anfitrion.toml, else ~/.local/share/anfitrion/anfitrion.db).")


def store_option(function: F) -> F:
    """``--store URL``, resolved by :func:`resolve_url` (the one rule of ``anfitrion._home``)."""
    return click.option("--store", "store_url", default=None, metavar="URL",
                        help=STORE_HELP)(function)


def policy_option(function: F) -> F:
    """``--policy FILE``: default ``./anfitrion.toml`` when present, else the default policy."""
    return click.option(
        "--policy", "policy_path", type=click.Path(dir_okay=False), default=None,
        help=f"Policy file (TOML); default ./{DEFAULT_POLICY_FILE} if present, else the "
             "built-in default (read → allow, write → ask).")(function)


def principal_option(default: str) -> Callable[[F], F]:
    """``--principal ID``: who the session acts for (its roles and scopes from the policy)."""
    return click.option("--principal", "principal_id", default=default, show_default=True,
                        help="Who the session acts for (roles and scopes from the policy "
                             "file's [principals]).")


def load_policy_option(path: str | None) -> Policy:
    """The policy for ``--policy`` (see :func:`anfitrion.policy.find_policy`), errors clean."""
    try:
        return find_policy(path)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None


def resolve_url(url: str | None) -> str:
    """``--store``, else ``$ANFITRION_STORE``, ``$ANFITRION_HOME``, ``./anfitrion.toml``, the
    data folder."""
    try:
        return store_choice(url).url
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None


def shown_store(url: str) -> str:
    """The store URL as messages show it: never a password."""
    if url.startswith(("sqlite:", "memory:")):
        return url
    from .._redaction import redact

    return redact(url, 1000)


def run_with_store(url: str | None, work: Callable[[Store], Awaitable[T]]) -> T:
    """Open the store, run *work*, close the store; our errors become a clean CLI error."""
    resolved = resolve_url(url)

    async def main() -> T:
        store = open_store(resolved)
        try:
            return await work(store)
        finally:
            await store.close()

    try:
        return anyio.run(main)
    except AnfitrionError as exc:
        raise click.ClickException(str(exc)) from exc


def import_reference(reference: str) -> Any:
    """The object named ``module:attribute``, imported with the current folder on
    ``sys.path`` (as ``uvicorn app:app`` does), so ``tools:toolbox`` finds ``./tools.py``.

    Raises:
        UserError: the reference is malformed or cannot be imported.
    """
    module_name, sep, attribute = reference.partition(":")
    if not sep or not module_name or not attribute:
        raise UserError(f"{reference!r} must look like module:attribute, "
                        "e.g. myapp.tools:toolbox")
    here = os.getcwd()
    if here not in sys.path:
        sys.path.insert(0, here)
    try:
        found: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as exc:
        raise UserError(f"cannot load {reference!r}: {exc}") from None
    return found


def shown(text: str) -> str:
    """Text from the store as a person may safely see it on a terminal."""
    from .._approvals import make_visible

    return make_visible(text)
