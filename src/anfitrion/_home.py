"""Where anfitrion keeps its data: ``$ANFITRION_HOME``, default ``~/.local/share/anfitrion``.

The command line's default store is the SQLite file ``anfitrion.db`` in that folder, unless
``$ANFITRION_STORE`` names another store URL.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["default_store_url", "home_dir"]


def home_dir() -> Path:
    """The data folder (not created here)."""
    configured = os.environ.get("ANFITRION_HOME")
    if configured:
        return Path(configured).expanduser().absolute()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base).expanduser().absolute() / "anfitrion"


def default_store_url() -> str:
    """``$ANFITRION_STORE``, else ``sqlite:///<home>/anfitrion.db``."""
    return os.environ.get("ANFITRION_STORE") or f"sqlite:///{home_dir() / 'anfitrion.db'}"
