"""The exception tree of anfitrion.

Every exception anfitrion raises derives from :class:`AnfitrionError`. The tree below is the
tree as defined and raised (a test checks it against the package); a class defined outside
this module names its module in brackets::

    AnfitrionError
    ├── UserError                  misconfiguration: fix the code or the config; also a ValueError
    │   ├── ToolDefinitionError    a tool that cannot be registered as declared
    │   ├── ConfigError            an invalid config or policy file (path, line, key)
    │   ├── MissingDependencyError an optional extra is not installed (extra, module)
    │   ├── ReplayRefused          a policy replay over a broken or mismatched history  [_rollout]
    │   ├── HandleError            a forged or malformed conversation handle  [mcp._conversations]
    │   ├── ProfileError           an invalid sandbox profile (key)  [mcp._sandbox]
    │   └── SandboxUnavailable     the sandbox cannot run here (install hint)  [mcp._sandbox]
    ├── RunError                   something failed while running
    │   ├── ModelError             the model or its client failed (provider, status_code)
    │   │   └── AdapterError       a provider payload we cannot represent (path)
    │   ├── StoreError             the store failed or holds inconsistent data
    │   │   ├── ConflictError      a concurrent writer got there first
    │   │   └── CorruptRowError    a row the store cannot load (row)  [store._rows]
    │   ├── SessionNotFound        no such session in the store (session_id)
    │   ├── McpServerError         an MCP server failed or broke the protocol (server)
    │   ├── CredentialError        an OAuth credential not obtained, kept or used  [mcp._oauth]
    │   │   ├── AccountNotConnected  the principal has no token for the server  [mcp._oauth]
    │   │   └── ConnectRefused  an inbox connect request or callback refused  [mcp._accounts]
    │   └── ToolError              raised by a tool; the gate makes it an error result
    │       └── ToolNotExecuted    a write tool refused before it acted (executed)
    └── InputError                 untrusted input refused; also a ValueError
        ├── JsonError              text that is not acceptable JSON
        ├── ArgumentError          arguments that do not satisfy a tool (field)
        │   └── SchemaBudgetExceeded  checking them would cost too much  [_tools]
        ├── RequestError           a local-model HTTP request refused  [localmodel._chatml]
        ├── AuthRefused            a gateway request's token refused (status)  [mcp._gateway_auth]
        └── SignInRefused          an inbox sign-in at an OpenID Provider refused  [web._oidc]

Per-call failures that the model must see (unknown tool, invalid arguments, denial, a tool that
raised) are *data* — an error :class:`~anfitrion._conversation.ToolResult` — never exceptions
that leave the gate: :class:`ToolError` and :class:`ArgumentError` are how a tool and a
validator say so, and the gate turns them into that result. Stopping a run is no exception
either: :class:`~anfitrion._host.StopSignal` ends it with the status ``stopped``.

Foreign exceptions are translated at a boundary by :func:`map_exceptions`: the most specific
mapping wins, the cause is kept, and so are the structured fields.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeAlias

__all__ = [
    "AdapterError",
    "AnfitrionError",
    "ArgumentError",
    "ConfigError",
    "ConflictError",
    "InputError",
    "JsonError",
    "McpServerError",
    "MissingDependencyError",
    "ModelError",
    "RunError",
    "SessionNotFound",
    "StoreError",
    "ToolDefinitionError",
    "ToolError",
    "ToolNotExecuted",
    "UserError",
    "map_exceptions",
]


class AnfitrionError(Exception):
    """Root of every exception anfitrion raises."""


# -- user errors ----------------------------------------------------------------------------

class UserError(AnfitrionError, ValueError):
    """The library was used or configured wrongly: a constructor's or a config file's check.

    Also a :class:`ValueError`, as the checks raised before 0.2 were, so code that caught those
    keeps working."""


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


# -- run errors -----------------------------------------------------------------------------

class RunError(AnfitrionError):
    """Something failed while running a session."""


class ModelError(RunError):
    """The model, its client or its transport failed.

    Attributes:
        provider: the adapter's provider, when known.
        status_code: the HTTP status the provider answered with, when there was one.
    """

    def __init__(self, message: str, *, provider: str | None = None,
                 status_code: int | None = None) -> None:
        super().__init__(message)
        self.provider = provider
        self.status_code = status_code


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


class McpServerError(RunError):
    """An MCP server could not be started, did not answer, or broke the protocol."""

    def __init__(self, server: str, message: str) -> None:
        super().__init__(f"MCP server {server!r}: {message}")
        self.server = server


class ToolError(RunError):
    """Raise from a tool to tell the model what went wrong; the message is shown as is.

    For a WRITE tool, an exception means the outcome is unknown — it may have acted before it
    failed — unless it says otherwise: ``ToolError(..., executed=False)`` (or
    :class:`ToolNotExecuted`) says nothing happened, so the call fails and the same effect may
    be proposed again. Anything else leaves the effect ``unknown`` until a person (or the
    tool's ``reconcile`` hook) says what happened.
    """

    def __init__(self, message: str = "", *, executed: bool | None = None) -> None:
        super().__init__(message)
        self.executed = executed


class ToolNotExecuted(ToolError):
    """A write tool's refusal before it acted: nothing happened (the call simply failed)."""

    def __init__(self, message: str = "") -> None:
        super().__init__(message, executed=False)


# -- untrusted input refused ----------------------------------------------------------------

class InputError(AnfitrionError, ValueError):
    """Input from an untrusted peer (a model, an HTTP client, a file) was refused; the message
    says why. Also a :class:`ValueError`, as it always was."""


class JsonError(InputError):
    """The text is not acceptable JSON; the message says why."""


class ArgumentError(InputError):
    """Arguments that do not satisfy a tool; the message names the field and the problem."""

    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(message)
        self.field = field


# -- translating foreign exceptions ---------------------------------------------------------

Translation: TypeAlias = "type[AnfitrionError] | Callable[[BaseException, str], AnfitrionError]"
"""What a foreign exception becomes: one of ours (built from the message and the fields given to
:func:`map_exceptions`), or a function of the foreign exception and the message that builds it
with the fields it carries."""


def _most_specific(exc: BaseException,
                   mapping: Mapping[type[BaseException], Translation]) -> Translation | None:
    """The translation of the mapped class nearest to *exc*'s own class in its MRO: what an
    ``except`` chain ordered from specific to general would pick, whatever the mapping's order."""
    for cls in type(exc).__mro__:
        if cls in mapping:
            return mapping[cls]
    for foreign, ours in mapping.items():  # a virtual subclass (an ABC's register)
        if isinstance(exc, foreign):
            return ours
    return None


@contextmanager
def map_exceptions(mapping: Mapping[type[BaseException], Translation], message: str = "",
                   **fields: Any) -> Iterator[None]:
    """Translate foreign exceptions into ours at a boundary, keeping the cause and the fields.

    The most specific mapping wins (``{OSError: StoreError, FileNotFoundError: ConfigError}``
    maps a missing file to ``ConfigError``, in either order); ours pass through untouched.
    A class is built as ``ours(f"{message}: {exc}", **fields)``; a function gets the foreign
    exception itself, so it can keep what the foreign one carries (a status, a code).

    Example:
        >>> with map_exceptions({OSError: StoreError}, "cannot open store"):
        ...     pass
        >>> with map_exceptions({KeyError: ModelError}, "lookup", provider="x"):
        ...     {}["k"]
        Traceback (most recent call last):
        ...
        anfitrion.exceptions.ModelError: lookup: 'k'
    """
    try:
        yield
    except AnfitrionError:
        raise
    except tuple(mapping) as exc:
        ours = _most_specific(exc, mapping)
        if ours is None:  # pragma: no cover - unreachable: the except clause matched one key
            raise
        text = f"{message}: {exc}" if message else str(exc)
        raise (ours(text, **fields) if isinstance(ours, type) else ours(exc, text)) from exc
