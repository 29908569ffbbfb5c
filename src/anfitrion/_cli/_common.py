"""What the commands share: ``--store``, ``--policy``, ``--principal``, running with a store,
naming the store in messages, and importing ``module:attribute`` references."""

from __future__ import annotations

import functools
import getpass
import importlib
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import click

from .._home import missing_store, store_choice, store_flag
from ..exceptions import AnfitrionError, ConfigError, UserError
from ..policy import DEFAULT_POLICY_FILE, Policy, find_policy
from ..store import Store, open_store

__all__ = ["APPROVER_HELP", "approver_name", "config_store", "existing_store",
           "import_reference", "load_policy_option",
           "policy_option", "principal_option", "resolve_url", "run_with_store", "shown",
           "shown_store", "store_option"]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

STORE_HELP = ("Store URL: sqlite:///PATH, postgresql://… or memory:// (default: "
              "--config's gateway.store, else $ANFITRION_STORE, else anfitrion.db in "
              "$ANFITRION_HOME, else [store] url in ./anfitrion.toml, else "
              "anfitrion/anfitrion.db in $XDG_DATA_HOME or ~/.local/share).")
CONFIG_HELP = "An MCP gateway config (mcp.json): use the store of its gateway.store."


def config_store(config_path: str | None) -> str | None:
    """``gateway.store`` of the MCP config at *config_path* (``None`` when it names none)."""
    if config_path is None:
        return None
    from ..mcp import load_config

    try:
        return load_config(config_path).gateway.store
    except AnfitrionError as exc:
        raise click.ClickException(str(exc)) from None


def store_option(function: F) -> F:
    """``--store URL`` and ``--config mcp.json``, resolved by :func:`resolve_url` (the one rule
    of ``anfitrion._home``): the command receives one ``store_url``."""

    @functools.wraps(function)
    def wrapper(*args: Any, store_url: str | None = None, mcp_config: str | None = None,
                **kwargs: Any) -> Any:
        if store_url is None and mcp_config is not None:
            store_url = config_store(mcp_config)
        return function(*args, store_url=store_url, **kwargs)

    with_config = click.option("--config", "mcp_config", default=None, metavar="FILE",
                               type=click.Path(dir_okay=False), help=CONFIG_HELP)(wrapper)
    return click.option("--store", "store_url", default=None, metavar="URL",  # type: ignore[return-value]
                        help=STORE_HELP)(with_config)


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


def resolve_url(url: str | None, *, gateway_store: str | None = None) -> str:
    """``--store``, else the MCP config's ``gateway.store``, ``$ANFITRION_STORE``,
    ``$ANFITRION_HOME``, ``./anfitrion.toml``, the data folder."""
    try:
        return store_choice(url, gateway_store=gateway_store).url
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None


def existing_store(url: str) -> str:
    """*url*, when it names a store that exists (or a server's); a SQLite file that does not
    exist is refused with its path and the command that creates it, never created empty.

    Raises:
        click.ClickException: the SQLite file is missing.
    """
    path = missing_store(url)
    if path is not None:
        raise click.ClickException(
            f"no store at {path}: nothing to read there (a mistyped --store?). Create it with "
            f"`anfitrion db migrate{store_flag(url)}`, or name the store you meant with --store")
    return url


def shown_store(url: str) -> str:
    """The store URL as messages show it: never a password."""
    if url.startswith(("sqlite:", "memory:")):
        return url
    from .._redaction import redact

    return redact(url, 1000)


def run_with_store(url: str | None, work: Callable[[Store], Awaitable[T]], *,
                   create: bool = False) -> T:
    """Open the store, run *work*, close the store; our errors become a clean CLI error.

    A SQLite store that does not exist is refused (:func:`existing_store`) unless *create*
    (``anfitrion db migrate``)."""
    resolved = resolve_url(url)
    if not create:
        existing_store(resolved)

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


APPROVER_FILE = "approver"
"""The name a person gave once, kept in the data folder (one line)."""
APPROVER_HELP = ("Who answers, recorded with the decision (default: the name you gave the "
                 "first time, kept in the data folder; else the login name).")
MAX_APPROVER_CHARS = 80


def _clean_name(text: str) -> str:
    """A name as one printable line, bounded (it is recorded and shown to other people)."""
    name = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return name[:MAX_APPROVER_CHARS]


def approver_name(given: str | None) -> str:
    """Who a person answering from the command line is: ``--as``, else the name they gave
    once (kept in ``$ANFITRION_HOME/approver``), else — asked on a terminal, once, and kept —
    their answer, else the login name. A name is recorded with every decision, as the inbox's
    sign-in does; the login name (``root`` in a container) says little about who decided."""
    if given is not None:
        return _clean_name(given) or given
    from .._home import home_dir

    kept = home_dir() / APPROVER_FILE
    try:
        saved = _clean_name(kept.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        saved = ""
    if saved:
        return saved
    try:
        login = getpass.getuser()
    except (KeyError, OSError):  # no login name in this environment (a container)
        login = "cli-user"
    if not sys.stdin.isatty():
        return login
    answer = _clean_name(click.prompt("Your name, recorded with every decision you make "
                                      "(asked once)", default=login))
    name = answer or login
    try:
        kept.parent.mkdir(parents=True, exist_ok=True)
        kept.write_text(name + "\n", encoding="utf-8")
        click.echo(f"kept in {kept}; --as NAME answers as someone else")
    except OSError as exc:
        click.echo(f"could not keep your name in {kept}: {exc.strerror}", err=True)
    return name
