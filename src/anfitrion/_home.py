"""Where anfitrion keeps its data, one rule for every command and for the library.

The store a command, the MCP gateway (or :func:`default_store_url`) uses is, first that applies:

1. the ``--store`` option (or the URL a program passes);
2. ``gateway.store`` of the MCP config a command is given (``--config mcp.json``; a relative
   SQLite path is taken relative to the config's folder);
3. ``$ANFITRION_STORE``, a store URL;
4. ``$ANFITRION_HOME``: the SQLite file ``anfitrion.db`` in that folder;
5. the project file ``./anfitrion.toml``, when it has ``[store] url = "…"`` (a relative SQLite
   path is taken relative to the file's folder);
6. ``anfitrion.db`` in the data folder, ``$XDG_DATA_HOME/anfitrion`` (default
   ``~/.local/share/anfitrion``).

This module is the only place that answers it (``tests/cli/test_store_rule.py`` checks that no
other module reads ``$ANFITRION_STORE``). The library's :class:`~anfitrion.Host` does not follow
it: its default store is ``memory://`` (a library writes no file unasked); pass
``store=default_store_url()`` to share the command line's store.

It is the one place the process environment is read (:func:`environment`): anfitrion's own
variables (``$ANFITRION_STORE``, ``$ANFITRION_HOME``, ``$ANFITRION_TOKEN_KEY``, …), the names an
operator's config gives for secrets, and ``HOME``/``PATH`` for the servers it launches.

It is also the one reader of anfitrion's settings files (:func:`read_settings_text`): the
project file ``anfitrion.toml``, policy files and the MCP config
(:func:`anfitrion.mcp.load_config`), each read once per process and version of the file, whether
the store rule, the policy (:func:`anfitrion.policy.find_policy`) or both ask for it. The
checks (readable, no NUL in the name, UTF-8 with the line and column of a bad byte) and their
messages are written once, here.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .exceptions import ConfigError, UserError

__all__ = ["PROJECT_FILE", "StoreChoice", "default_store_url", "environment", "home_dir",
           "missing_store", "read_settings_text", "relative_to", "store_choice", "store_flag"]

PROJECT_FILE = "anfitrion.toml"
"""The project file, looked for in the current folder (also the policy file)."""

STORE_FILE = "anfitrion.db"


def environment() -> Mapping[str, str]:
    """The process environment, live (a test's ``monkeypatch.setenv`` shows): the one place
    anfitrion reads it; code that can take an ``environ`` mapping instead defaults to this."""
    return os.environ


def home_dir() -> Path:
    """The data folder (not created here): ``$ANFITRION_HOME``, else the XDG data folder."""
    configured = environment().get("ANFITRION_HOME")
    if configured:
        return Path(configured).expanduser().absolute()
    base = environment().get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base).expanduser().absolute() / "anfitrion"


@dataclass(frozen=True, slots=True)
class StoreChoice:
    """A store URL and what chose it (``--store``, ``$ANFITRION_STORE``, ``./anfitrion.toml``,
    ``$ANFITRION_HOME``, ``the data folder``)."""

    url: str
    source: str


_READ: dict[str, tuple[tuple[int, int, int, int], str]] = {}
"""Settings files read so far: path → ((device, inode, size, mtime), text)."""
_READ_KEPT = 16


def _version(st: os.stat_result) -> tuple[int, int, int, int]:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def read_settings_text(name: str, *, what: str = "policy file", required: bool = False) -> str:
    """The text of the settings file *name* (``anfitrion.toml``, a policy file, the MCP
    config): read once, and again only when the file changes (another inode, size or
    modification time). *what* names the file in errors ("cannot read the MCP config: …").

    Raises:
        FileNotFoundError: there is no such file (unless *required*).
        ConfigError: it cannot be read or is not UTF-8 (naming the line and column); with
            *required*, also when it does not exist.
    """
    shown = name if name.isprintable() else repr(name)
    try:
        key = os.path.abspath(name)
        st = os.stat(name)
        known = _READ.get(key)
        if known is not None and known[0] == _version(st):
            return known[1]
        with open(name, "rb") as f:
            version = _version(os.fstat(f.fileno()))  # of what is read, not what was asked
            raw = f.read()
    except OSError as exc:
        if isinstance(exc, FileNotFoundError) and not required:
            raise
        raise ConfigError(f"cannot read the {what}: {exc.strerror or exc}", path=shown) from None
    except ValueError:  # a NUL in the name
        raise ConfigError(f"cannot read the {what}: the file name contains a NUL",
                          path=shown) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        column = exc.start - raw.rfind(b"\n", 0, exc.start)
        raise ConfigError(f"the {what} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at "
                          f"column {column})", path=shown,
                          line=raw.count(b"\n", 0, exc.start) + 1) from None
    if len(_READ) >= _READ_KEPT:
        _READ.clear()
    _READ[key] = (version, text)
    return text


def _project_store(folder: Path) -> str | None:
    """``[store] url`` of ``anfitrion.toml`` in *folder*, or ``None``.

    Raises:
        ConfigError: the file is not TOML, or its ``[store]`` table is not ``url = "…"``.
    """
    path = folder / PROJECT_FILE
    try:
        text = read_settings_text(str(path), what="project file")
    except FileNotFoundError:
        return None
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
    return relative_to(url, folder)


def relative_to(url: str, folder: str | os.PathLike[str]) -> str:
    """*url* with a relative SQLite path taken relative to *folder* (other URLs unchanged): a
    store named in a file is found from the file's folder, wherever the command runs."""
    prefix = "sqlite:///"
    if url.startswith(prefix) and not url.startswith(prefix + "/"):
        return f"{prefix}{(Path(folder) / url[len(prefix):]).absolute()}"
    return url


def store_choice(option: str | None = None, *, folder: str | os.PathLike[str] | None = None,
                 gateway_store: str | None = None) -> StoreChoice:
    """The store to use, by the rule in this module's docstring.

    Args:
        option: the URL given explicitly (a command's ``--store``); wins when set.
        folder: where to look for ``anfitrion.toml`` (default: the current folder).
        gateway_store: ``gateway.store`` of the MCP config the command was given.

    Raises:
        ConfigError: the project file is unreadable or its ``[store]`` table is wrong.
    """
    if option:
        return StoreChoice(option, "--store")
    if gateway_store:
        return StoreChoice(gateway_store, "the MCP config's gateway.store")
    if url := environment().get("ANFITRION_STORE"):
        return StoreChoice(url, "$ANFITRION_STORE")
    if environment().get("ANFITRION_HOME"):
        return StoreChoice(f"sqlite:///{home_dir() / STORE_FILE}", "$ANFITRION_HOME")
    if url := _project_store(Path(folder) if folder is not None else Path.cwd()):
        return StoreChoice(url, f"./{PROJECT_FILE}")
    return StoreChoice(f"sqlite:///{home_dir() / STORE_FILE}", "the data folder")


def default_store_url() -> str:
    """The store URL the command line uses when no ``--store`` is given.

    ``$ANFITRION_STORE``, else ``anfitrion.db`` in ``$ANFITRION_HOME``, else the ``[store] url``
    of ``./anfitrion.toml``, else ``anfitrion.db`` in the data folder (:func:`home_dir`). Pass it to
    :class:`~anfitrion.Host` to share sessions and approvals with ``anfitrion approvals`` and
    ``anfitrion resume``.

    Raises:
        ConfigError: ``./anfitrion.toml`` is unreadable or its ``[store]`` table is wrong.

    Example:
        >>> default_store_url().startswith(("sqlite:", "postgresql:", "memory:"))
        True
    """
    return store_choice().url


def store_flag(url: str) -> str:
    """`` --store URL`` for a printed command, or ``""`` when *url* is the store that command
    finds by itself (the rule without ``--store``), so every hint names the store it needs."""
    try:
        if store_choice().url == url:
            return ""
    except ConfigError:
        pass
    import shlex

    if not url.startswith(("sqlite:", "memory:")):
        from ._redaction import redact

        url = redact(url, 1000)  # a hint may reach a model or a log: never a password
    return f" --store {shlex.quote(url)}"


def missing_store(url: str) -> Path | None:
    """The file of a SQLite store *url* names that does not exist yet, else ``None``.

    Commands that only read (or answer what is already there) refuse such a store rather than
    create an empty one at a mistyped path; ``anfitrion db migrate`` creates it.
    """
    from .store import sqlite_file

    try:
        file = sqlite_file(url)
    except UserError:  # a malformed URL: opening it says what is wrong
        return None
    if file is None:
        return None
    path = Path(file)
    return None if path.exists() else path.absolute()
