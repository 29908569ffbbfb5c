"""A stdio server's stderr, passed on redacted like anfitrion's own logs.

An upstream server's stderr is not ours to trust: it may print the token it was started with,
a user's card number, or escape sequences that rewrite the operator's terminal. Each line is
read from a pipe and written to the configured stream through the same masking as the
``anfitrion.*`` loggers (:func:`anfitrion._redaction.redact`: secrets and personal data masked,
control characters escaped), at most :data:`MAX_STDERR_LINE` characters a line.
"""

from __future__ import annotations

from contextlib import suppress
from typing import TextIO

import anyio
import anyio.abc

from .._redaction import redact

__all__ = ["MAX_STDERR_LINE", "relay_stderr"]

MAX_STDERR_LINE = 4000
"""Characters of one stderr line passed on; a longer line is cut (with its length)."""

_MAX_BUFFER = 64 * 1024


def _write(errlog: TextIO, line: bytes) -> None:
    text = line.rstrip(b"\r").decode("utf-8", "replace")
    with suppress(OSError, ValueError):  # a closed or broken stream: the line is dropped
        errlog.write(redact(text, MAX_STDERR_LINE) + "\n")
        errlog.flush()


async def relay_stderr(stream: anyio.abc.ByteReceiveStream, errlog: TextIO) -> None:
    """Copy *stream* to *errlog* line by line, each line redacted, until it ends."""
    buffer = bytearray()
    with suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError,
                  OSError):
        async for chunk in stream:
            buffer += chunk
            while (end := buffer.find(b"\n")) >= 0:
                _write(errlog, bytes(buffer[:end]))
                del buffer[:end + 1]
            if len(buffer) > _MAX_BUFFER:  # one endless line: pass on its start, drop the rest
                _write(errlog, bytes(buffer[:MAX_STDERR_LINE * 4]))
                buffer.clear()
    if buffer:
        _write(errlog, bytes(buffer))
