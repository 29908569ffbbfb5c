"""Deprecated alias of :mod:`anfitrion.localmodel`, where the local model moved.

The local model is an HTTP server, a chat handler and a CLI: code above the core, so it left the
models package. ``from anfitrion.models.local import local_model`` and
``python -m anfitrion.models.local`` still work, with a :class:`DeprecationWarning`; the alias
imports the new package only when a name is looked up, so the models import nothing above them.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

_MOVED_TO = "anfitrion.localmodel"


def _moved(what: str) -> None:
    warnings.warn(f"{what} moved to {_MOVED_TO}", DeprecationWarning, stacklevel=3)


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    _moved(f"anfitrion.models.local.{name}")
    return getattr(importlib.import_module(_MOVED_TO), name)


if __name__ == "__main__":
    _moved("python -m anfitrion.models.local")
    importlib.import_module(f"{_MOVED_TO}.__main__").main()
