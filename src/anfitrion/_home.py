"""Where anfitrion keeps its data, one rule for every command and for the library.

The store a command (or :func:`default_store_url`) uses is, first that applies:

1. the ``--store`` option (or the URL a program passes);
2. ``$ANFITRION_STORE``, a store URL;
3. ``$ANFITRION_HOME``: the SQLite file ``anfitrion.db`` in that folder;
4. the project file ``./anfitrion.toml``, when it has ``[store] url = "…"`` (a relative SQLite
   path is taken relative to the file's folder);
5. ``anfitrion.db`` in the data folder, ``$XDG_DATA_HOME/anfitrion`` or
   ``~/.local/share/anfitrion``.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from .exceptions import ConfigError

__all__ = ["PROJECT_FILE", "StoreChoice", "default_store_url", "home_dir", "store_choice"]

PROJECT_FILE = "anfitrion.toml"
"""The project file, looked for in the current folder (also the policy file)."""

STORE_FILE = "anfitrion.db"


def home_dir() -> Path:
    """The data folder (not created here): ``$ANFITRION_HOME``, else the XDG data folder."""
    configured = os.environ.get("ANFITRION_HOME")
    if configured:
        return Path(configured).expanduser().absolute()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base).expanduser().absolute() / "anfitrion"


@dataclass(frozen=True, slots=True)
class StoreChoice:
    """A store URL and what chose it (``--store``, ``$ANFITRION_STORE``, ``./anfitrion.toml``,
    ``$ANFITRION_HOME``, ``the data folder``)."""

    url: str
    source: str


def _project_store(folder: Path) -> str | None:
    """``[store] url`` of ``anfitrion.toml`` in *folder*, or ``None``.

    Raises:
        ConfigError: the file is not TOML, or its ``[store]`` table is not ``url = "…"``.
    """
    path = folder / PROJECT_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the project file: {exc}", path=str(path)) from None
    try:
        table = tomllib.loads(text).get("store")
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"not valid TOML: {exc}", path=str(path)) from None
    if table is None:
        return None
    url = table.get("url") if isinstance(table, dict) else None
    if not isinstance(url, str) or not url or set(table) != {"url"}:
        raise ConfigError('[store] must be one store URL: url = "sqlite:///anfitrion.db"',
                          path=str(path), key="store")
    prefix = "sqlite:///"
    if url.startswith(prefix) and not url.startswith(prefix + "/"):
        return f"{prefix}{(folder / url[len(prefix):]).absolute()}"
    return url


def store_choice(option: str | None = None, *, folder: str | os.PathLike[str] | None = None
                 ) -> StoreChoice:
    """The store to use, by the rule in this module's docstring.

    Args:
        option: the URL given explicitly (a command's ``--store``); wins when set.
        folder: where to look for ``anfitrion.toml`` (default: the current folder).

    Raises:
        ConfigError: the project file is unreadable or its ``[store]`` table is wrong.
    """
    if option:
        return StoreChoice(option, "--store")
    if url := os.environ.get("ANFITRION_STORE"):
        return StoreChoice(url, "$ANFITRION_STORE")
    if os.environ.get("ANFITRION_HOME"):
        return StoreChoice(f"sqlite:///{home_dir() / STORE_FILE}", "$ANFITRION_HOME")
    if url := _project_store(Path(folder) if folder is not None else Path.cwd()):
        return StoreChoice(url, f"./{PROJECT_FILE}")
    return StoreChoice(f"sqlite:///{home_dir() / STORE_FILE}", "the data folder")


def default_store_url() -> str:
    """The store URL the command line uses when no ``--store`` is given.

    ``$ANFITRION_STORE``, else ``anfitrion.db`` in ``$ANFITRION_HOME``, else the ``[store] url``
    of ``./anfitrion.toml``, else ``anfitrion.db`` in ``~/.local/share/anfitrion``. Pass it to
    :class:`~anfitrion.Host` to share sessions and approvals with ``anfitrion approvals`` and
    ``anfitrion resume``.

    Raises:
        ConfigError: ``./anfitrion.toml`` is unreadable or its ``[store]`` table is wrong.

    Example:
        >>> default_store_url().startswith(("sqlite:", "postgresql:", "memory:"))
        True
    """
    return store_choice().url
