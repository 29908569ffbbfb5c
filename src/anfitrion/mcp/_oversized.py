"""A stdio server's answer too large to take: the tool ran, its result is not shown.

A message line over the stdio limit is either **framing abuse** (a notification, a request or
garbage that never ends: the connection is closed, and a call in flight is left for a person,
since nobody knows what it did) or **a result that is too large**: a JSON-RPC response to one of
our requests. The second has a known outcome — the server answered, so a tool call ran — and
must not be left ``unknown``. Its line is read to the end without being kept (a bounded head and
tail only), and the request is answered in its place with a result saying so
(:func:`OversizedLine.message`), recognised by :func:`is_oversized_marker` through a secret the
server cannot know. A response is recognised by its first bytes: ``{"jsonrpc": "2.0", "id": N,
"result": …`` (the Python SDK's order), or ``{"result": …`` with the id the last member (the
TypeScript SDK's).
"""

from __future__ import annotations

import hmac
import re
import secrets
from typing import Any

import mcp.types as mt
from mcp.shared.message import SessionMessage

__all__ = ["MAX_DISCARDED_BYTES", "OVERSIZED_META", "OversizedLine", "is_oversized_marker"]

MAX_DISCARDED_BYTES = 256 * 1024 * 1024
"""The longest answer read to its end and dropped; a longer one is framing abuse after all."""
OVERSIZED_META = "io.anfitrion/oversized"
_SECRET = secrets.token_urlsafe(24)
_KEEP = 512
_ID = rb'(-?\d{1,18}|"(?:[^"\\]|\\.){1,200}")'
_JSONRPC = rb'(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?'
_ID_FIRST = re.compile(rb'\s*\{\s*' + _JSONRPC + rb'"id"\s*:\s*' + _ID + rb'\s*,\s*' + _JSONRPC
                       + rb'"result"\s*:')
_RESULT_FIRST = re.compile(rb'\s*\{\s*"result"\s*:')
_ID_LAST = re.compile(rb',\s*' + _JSONRPC + rb'"id"\s*:\s*' + _ID + rb'\s*(?:,\s*"jsonrpc"\s*:'
                      rb'\s*"2\.0"\s*)?\}\s*$')


class OversizedLine:
    """An over-long line that starts like a response, read to its newline and dropped."""

    def __init__(self, head: bytes, limit: int) -> None:
        self.limit = limit
        self.size = len(head)
        found = _ID_FIRST.match(head)
        self._id: bytes | None = found.group(1) if found else None
        self._tail = bytearray(head[-_KEEP:])

    @classmethod
    def start(cls, buffer: bytes | bytearray, limit: int) -> OversizedLine | None:
        """The line beginning *buffer* (no newline yet, over *limit*) as a response being
        dropped; ``None`` when it does not start like a response (framing abuse)."""
        head = bytes(buffer[:_KEEP])
        if _ID_FIRST.match(head) is None and _RESULT_FIRST.match(head) is None:
            return None
        line = cls(head, limit)
        line.size = len(buffer)
        line._tail = bytearray(buffer[-_KEEP:])
        return line

    def feed(self, chunk: bytes) -> bytes | None:
        """Drop *chunk* up to the line's end: the bytes after it, or ``None`` (not ended)."""
        end = chunk.find(b"\n")
        part = chunk if end < 0 else chunk[:end]
        self.size += len(part)
        self._tail += part
        del self._tail[:-_KEEP]
        return None if end < 0 else chunk[end + 1:]

    @property
    def too_long(self) -> bool:
        return self.size > MAX_DISCARDED_BYTES

    def message(self) -> SessionMessage | None:
        """The answer to the request in place of the dropped one; ``None`` without an id."""
        raw = self._id
        if raw is None:
            found = _ID_LAST.search(bytes(self._tail).rstrip(b"\r"))
            raw = found.group(1) if found else None
        if raw is None:
            return None
        request_id: Any = raw.decode("utf-8", "replace")
        request_id = int(request_id) if not request_id.startswith('"') else request_id[1:-1]
        text = (f"[the result was {self.size:,} bytes, over the {self.limit:,}-byte limit of a "
                "message from this server: the tool ran and answered, but its result is not "
                "shown. Ask for less.]")
        # resultType: a 2026-07-28 client reads a result without it as no result at all
        result = {"content": [{"type": "text", "text": text}], "isError": False,
                  "resultType": "complete", "_meta": {OVERSIZED_META: _SECRET}}
        response = mt.jsonrpc_message_adapter.validate_python(
            {"jsonrpc": "2.0", "id": request_id, "result": result})
        return SessionMessage(response)


def is_oversized_marker(result: mt.CallToolResult) -> bool:
    """Whether *result* is the answer :meth:`OversizedLine.message` put in place of a dropped
    one (the secret, compared in constant time: a server cannot send it)."""
    meta = result.meta or {}
    given = meta.get(OVERSIZED_META) if isinstance(meta, dict) else None
    return isinstance(given, str) and hmac.compare_digest(given.encode(), _SECRET.encode())
