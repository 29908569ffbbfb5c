"""The approval inbox: a web page for people and a JSON API for programs (extra ``web``).

Example:
    >>> from anfitrion.store import MemoryStore
    >>> from anfitrion.web import create_app
    >>> app = create_app(MemoryStore(), token="a-long-random-token")
"""

from __future__ import annotations

from ..exceptions import MissingDependencyError

try:
    import starlette  # noqa: F401
except ImportError as exc:  # pragma: no cover - the test extra installs it
    raise MissingDependencyError("web", "starlette") from exc
try:
    import jinja2  # noqa: F401
except ImportError as exc:  # pragma: no cover - the test extra installs it
    raise MissingDependencyError("web", "jinja2") from exc

from typing import Any

from ._app import DEFAULT_ALLOWED_HOSTS, create_app

__all__ = ["DEFAULT_ALLOWED_HOSTS", "OidcSignIn", "create_app"]


def __getattr__(name: str) -> Any:
    # signing in with OpenID Connect needs the mcp extra: imported only when asked for
    if name == "OidcSignIn":
        from ._oidc import OidcSignIn

        return OidcSignIn
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
