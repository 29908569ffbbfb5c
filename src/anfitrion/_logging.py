"""Log redaction: every record of an ``anfitrion`` logger is redacted like the audit log.

A :class:`logging.Filter` on the ``anfitrion`` logger would not be enough: a logger's filters
run only for records logged on that very logger, not for those of its children
(``anfitrion.gate``, ``anfitrion.mcp``) propagating to a handler on the root logger. So the
redaction happens where a record is *made*: :func:`install` wraps the process's LogRecord
factory (whatever it was, chaining it), and the wrapper redacts the records of the
``anfitrion`` logger and every logger below it before any filter, handler or formatter sees
them — whatever handler the application configures. Other loggers' records pass untouched.

A redacted record holds:

* ``msg``: the formatted message (``msg % args``) after :func:`anfitrion._audit.redact`
  (secrets, card numbers, IBANs, e-mail addresses and phone numbers masked, control characters
  escaped, cut to :data:`MESSAGE_CHARS`); ``args`` is empty.
* no ``exc_info``: an exception is added to the message as ``ExceptionType: message``,
  redacted. Tracebacks are opt-in: with ``ANFITRION_LOG_TRACEBACKS=1`` in the environment,
  ``exc_text`` holds the traceback with every line redacted. Either way the exception object
  is dropped, so no formatter can print its raw text again.
* ``stack_info`` redacted line by line.

Values added with ``extra=`` are set by :meth:`logging.Logger.makeRecord` after the factory
ran and are not redacted (anfitrion passes none). :class:`RedactingFilter` does the same
redaction for a handler that also receives other loggers' records.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from typing import Any

from ._home import environment
from ._redaction import redact, redact_lines

__all__ = ["MESSAGE_CHARS", "TRACEBACKS_ENV", "RedactingFilter", "install", "redact_record",
           "tracebacks_enabled"]

MESSAGE_CHARS = 2000
"""A log message is cut to this many characters (after redaction)."""
TRACEBACKS_ENV = "ANFITRION_LOG_TRACEBACKS"
"""Set to ``1`` to log the (redacted) traceback of an exception, not only its type and text."""
ROOT = "anfitrion"
_DONE = "_anfitrion_redacted"


def tracebacks_enabled() -> bool:
    """Whether ``ANFITRION_LOG_TRACEBACKS`` asks for tracebacks (read at every record)."""
    return environment().get(TRACEBACKS_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def _ours(name: str) -> bool:
    return name == ROOT or name.startswith(ROOT + ".")


def _exception_text(exc: BaseException) -> str:
    try:
        said = str(exc)
    except Exception:  # noqa: BLE001 - a hostile __str__ must not break logging
        said = "(its message could not be read)"
    return f"{type(exc).__name__}: {said}" if said else type(exc).__name__


def redact_record(record: logging.LogRecord) -> logging.LogRecord:
    """Redact *record* in place (once) and return it."""
    if getattr(record, _DONE, False):
        return record
    try:
        message = record.getMessage()
    except Exception:  # noqa: BLE001 - wrong arguments for the format: keep both, redacted
        message = f"{record.msg!s} {record.args!r}"
    exc_info = record.exc_info
    text = None
    if exc_info and exc_info[1] is not None:
        exc = exc_info[1]
        message = f"{message} — {_exception_text(exc)}"
        if tracebacks_enabled():
            text = redact_lines("".join(traceback.format_exception(exc)))
    elif record.exc_text:
        text = redact_lines(record.exc_text) if tracebacks_enabled() else None
    record.msg = redact(message, MESSAGE_CHARS)
    record.args = ()
    record.exc_info = None
    record.exc_text = text
    if record.stack_info:
        record.stack_info = redact_lines(record.stack_info)
    setattr(record, _DONE, True)
    return record


class RedactingFilter(logging.Filter):
    """A filter for a handler: redacts every record it sees (of any logger) like
    anfitrion's own, and never drops one."""

    def filter(self, record: logging.LogRecord) -> bool:
        redact_record(record)
        return True


class _RedactingFactory:
    """Wraps the previous LogRecord factory; redacts the records of anfitrion's loggers."""

    def __init__(self, previous: Callable[..., logging.LogRecord]) -> None:
        self.previous = previous

    def __call__(self, name: str, *args: Any, **kwargs: Any) -> logging.LogRecord:
        record = self.previous(name, *args, **kwargs)
        if _ours(name):
            redact_record(record)
        return record


def install() -> None:
    """Redact the records of every ``anfitrion`` logger from now on (idempotent).

    Called when :mod:`anfitrion` is imported. A factory installed later that chains the
    previous one (as the logging documentation recommends) keeps the redaction.
    """
    current = logging.getLogRecordFactory()
    if isinstance(current, _RedactingFactory):
        return
    logging.setLogRecordFactory(_RedactingFactory(current))
