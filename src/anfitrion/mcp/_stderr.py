"""A stdio server's stderr, passed on redacted like anfitrion's own logs.

An upstream server's stderr is not ours to trust: it may print the token it was started with,
a user's card number, or escape sequences that rewrite the operator's terminal. Each line is
read from a pipe and written to the configured stream through the same masking as the
``anfitrion.*`` loggers (:func:`anfitrion._redaction.redact`: secrets and personal data masked,
control characters escaped), at most :data:`MAX_STDERR_LINE` characters a line.

For a sandboxed server, a line that reports a refusal by the system (``Permission denied``,
``Read-only file system``, ``EACCES``, ``Network is unreachable``, …) is also passed to
``on_refusal`` (the toolset audits it, as the server's own words: a hostile server can stay
silent or lie; a compromised package that trips over its sandbox usually says so), at most
:data:`MAX_REPORTED` lines per process.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import TextIO

import anyio
import anyio.abc

from .._redaction import redact

__all__ = ["MAX_REPORTED", "MAX_STDERR_LINE", "relay_stderr"]

MAX_STDERR_LINE = 4000
"""Characters of one stderr line passed on; a longer line is cut (with its length)."""

MAX_REPORTED = 10
"""Lines reporting a refusal passed to ``on_refusal`` per process (a server printing them in a
loop does not flood the audit log)."""
_MAX_BUFFER = 64 * 1024
_REFUSAL = re.compile(r"Permission denied|Operation not permitted|Read-only file system|"
                      r"Network is unreachable|\b(?:EACCES|EPERM|EROFS|ENETUNREACH)\b")


def _write(errlog: TextIO, line: bytes) -> str:
    text = line.rstrip(b"\r").decode("utf-8", "replace")
    with suppress(OSError, ValueError):  # a closed or broken stream: the line is dropped
        errlog.write(redact(text, MAX_STDERR_LINE) + "\n")
        errlog.flush()
    return text


async def relay_stderr(stream: anyio.abc.ByteReceiveStream, errlog: TextIO, *,
                       on_refusal: Callable[[str], Awaitable[None]] | None = None) -> None:
    """Copy *stream* to *errlog* line by line, each line redacted, until it ends; lines that
    report a refusal go to *on_refusal* too (redacted, at most 300 characters)."""
    buffer = bytearray()
    reported = 0

    async def line(data: bytes) -> None:
        nonlocal reported
        text = _write(errlog, data)
        if on_refusal is not None and reported < MAX_REPORTED and _REFUSAL.search(text):
            reported += 1
            await on_refusal(redact(text, 300) + (" (further reports are not audited)"
                                                  if reported == MAX_REPORTED else ""))

    with suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError,
                  OSError):
        async for chunk in stream:
            buffer += chunk
            while (end := buffer.find(b"\n")) >= 0:
                data = bytes(buffer[:end])
                del buffer[:end + 1]
                await line(data)
            if len(buffer) > _MAX_BUFFER:  # one endless line: pass on its start, drop the rest
                await line(bytes(buffer[:MAX_STDERR_LINE * 4]))
                buffer.clear()
    if buffer:
        with suppress(OSError, anyio.ClosedResourceError, anyio.BrokenResourceError):
            await line(bytes(buffer))
