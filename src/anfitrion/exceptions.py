"""The exception tree of anfitrion.

Every exception anfitrion raises derives from :class:`AnfitrionError`::

    AnfitrionError
    ├── UserError                  misconfiguration: fix the code or the config
    │   ├── ToolDefinitionError    a tool that cannot be registered as declared
    │   ├── ConfigError            a config/policy file that is invalid (names file, line, key)
    │   └── MissingDependencyError an optional extra is not installed (names the pip command)
    ├── RunError                   something failed while running
    │   ├── ModelError             the model or its client failed
    │   │   └── AdapterError       a provider payload we cannot represent (names the field path)
    │   ├── StoreError             the store failed or holds inconsistent data
    │   │   └── ConflictError      a concurrent writer got there first
    │   └── SessionNotFound        no such session in the store
    └── HostSignal                 control flow, not an error
        └── RunStopped             the host was asked to stop

Per-call failures that the model must see (unknown tool, invalid arguments, denial, a tool that
raised) are *data* — an error :class:`~anfitrion.conversation.ToolResult` — never exceptions.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = [
    "AdapterError",
    "AnfitrionError",
    "ConfigError",
    "ConflictError",
    "HostSignal",
    "MissingDependencyError",
    "ModelError",
    "RunError",
    "RunStopped",
    "SessionNotFound",
    "StoreError",
    "ToolDefinitionError",
    "UserError",
    "map_exceptions",
]


class AnfitrionError(Exception):
    """Root of every exception anfitrion raises."""


class UserError(AnfitrionError):
    """The library was used or configured wrongly."""


class ToolDefinitionError(UserError):
    """A tool cannot be registered as declared (bad name, duplicate, invalid schema)."""


class ConfigError(UserError):
    """A configuration or policy file is invalid.

    Attributes:
        path: the file, when known.
        key: the dotted key that is wrong, when known.
        line: the 1-based line, when known.
    """

    def __init__(self, message: str, *, path: str | None = None, key: str | None = None,
                 line: int | None = None) -> None:
        where = ":".join(str(p) for p in (path, line) if p is not None)
        prefix = f"{where}: " if where else ""
        suffix = f" (at {key})" if key else ""
        super().__init__(f"{prefix}{message}{suffix}")
        self.path = path
        self.key = key
        self.line = line


class MissingDependencyError(UserError):
    """An optional dependency is missing; the message names the exact install command."""

    def __init__(self, extra: str, module: str) -> None:
        super().__init__(
            f"{module!r} is not installed: run  pip install 'anfitrion[{extra}]'"
        )
        self.extra = extra
        self.module = module


class RunError(AnfitrionError):
    """Something failed while running a session."""


class ModelError(RunError):
    """The model, its client or its transport failed."""

    def __init__(self, message: str, *, provider: str | None = None) -> None:
        super().__init__(message)
        self.provider = provider


class AdapterError(ModelError):
    """A provider payload is malformed or cannot be represented.

    Attributes:
        path: where in the payload the problem is, e.g. ``content[1].id``.
    """

    def __init__(self, message: str, *, path: str = "", provider: str | None = None) -> None:
        super().__init__(f"{path}: {message}" if path else message, provider=provider)
        self.path = path


class StoreError(RunError):
    """The store failed or holds inconsistent data."""


class ConflictError(StoreError):
    """A concurrent writer changed the record first (optimistic concurrency)."""


class SessionNotFound(RunError):
    """No session with this id exists in the store."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"no session {session_id!r} in the store")
        self.session_id = session_id


class HostSignal(AnfitrionError):
    """Control flow between parts of the host; not an error."""


class RunStopped(HostSignal):
    """The host was asked to stop the run."""


@contextmanager
def map_exceptions(
    mapping: dict[type[BaseException], type[AnfitrionError]], message: str = ""
) -> Iterator[None]:
    """Translate foreign exceptions into ours at a boundary, keeping the cause.

    Example:
        >>> with map_exceptions({OSError: StoreError}, "cannot open store"):
        ...     pass
    """
    try:
        yield
    except AnfitrionError:
        raise
    except tuple(mapping) as exc:
        for foreign, ours in mapping.items():
            if isinstance(exc, foreign):
                text = f"{message}: {exc}" if message else str(exc)
                raise ours(text) from exc
        raise  # pragma: no cover - unreachable: the except clause matched one key
