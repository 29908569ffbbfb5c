"""Media in MCP results, as a model is shown it: a summary (type, size, SHA-256), never the data.

The neutral message model carries text only (a tool result's content is a string), so an image
or audio a server returns cannot reach a model as an image: it is summarised. So is media a
server sends as base64 *text* — in a text block, an embedded text resource or a structured
value (``{"type": "image", "data": "iVBOR…", "mimeType": "image/png"}``) — which would otherwise
reach the model as thousands of meaningless characters, cut at the result limit.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from typing import Any

MIN_BASE64_CHARS = 512
"""Shorter base64-looking text is left as it is (an id, a token, a short digest)."""

_BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")
_DATA_URI = re.compile(r"data:([\w.+-]+/[\w.+-]+)?(?:;[\w.+-]+=[\w.+-]+)*;base64,(.*)", re.S)
_WHITESPACE = re.compile(r"\s+")
_SIGNATURES: tuple[tuple[bytes, int, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", 0, "image/png"), (b"\xff\xd8\xff", 0, "image/jpeg"),
    (b"GIF87a", 0, "image/gif"), (b"GIF89a", 0, "image/gif"), (b"WEBP", 8, "image/webp"),
    (b"WAVE", 8, "audio/wav"), (b"OggS", 0, "audio/ogg"), (b"fLaC", 0, "audio/flac"),
    (b"ID3", 0, "audio/mpeg"), (b"%PDF-", 0, "application/pdf"),
    (b"PK\x03\x04", 0, "application/zip"), (b"\x1f\x8b", 0, "application/gzip"),
)


def sniff(data: bytes) -> str | None:
    """The media type *data* starts like, if a known one."""
    for magic, offset, mime in _SIGNATURES:
        if data[offset:offset + len(magic)] == magic:
            return mime
    return None


def describe(kind: str, mime: str | None, data: bytes) -> str:
    """``[image image/png, 67 bytes, sha256 1a2b…: not shown]``."""
    digest = hashlib.sha256(data).hexdigest()[:16]
    return f"[{kind} {mime or 'of unknown type'}, {len(data)} bytes, sha256 {digest}: not shown]"


def decode(data: str) -> bytes:
    """Base64 *data* decoded; undecodable data as its UTF-8 bytes (the size is still told)."""
    try:
        return base64.b64decode(data, validate=False)
    except (binascii.Error, ValueError):
        return data.encode("utf-8", "replace")


def base64_summary(text: str, mime_hint: str | None = None) -> str | None:
    """A summary of *text* if it is media sent as base64, else ``None``.

    Media is a ``data:…;base64,`` URI, or bare base64 of at least :data:`MIN_BASE64_CHARS`
    characters that either starts like a known media type (:func:`sniff`) or comes with a
    *mime_hint* (a ``mimeType`` beside it): other base64-looking text stays text.
    """
    stripped = text.strip()
    uri = _DATA_URI.fullmatch(stripped) if stripped.startswith("data:") else None
    if uri is not None:
        mime_hint, stripped = uri.group(1) or mime_hint or "", uri.group(2)
    elif len(stripped) < MIN_BASE64_CHARS:
        return None
    compact = _WHITESPACE.sub("", stripped)
    if len(compact) % 4 or not _BASE64.fullmatch(compact):
        return None
    if mime_hint is None and sniff(base64.b64decode(compact[:64])) is None:
        return None
    try:
        data = base64.b64decode(compact, validate=True)
    except (binascii.Error, ValueError):
        return None
    mime = sniff(data) or mime_hint or None
    kind = (mime or "").split("/")[0] if mime else "binary data"
    if kind not in ("image", "audio", "video"):
        kind = "binary data"
    return describe(f"{kind} sent as base64 text,", mime, data)


def summarise_in_value(value: Any, mime_hint: str | None = None) -> Any:
    """*value* (structured content) with every base64 media string replaced by its summary;
    a ``mimeType`` beside a string names its type."""
    if isinstance(value, str):
        summary = base64_summary(value, mime_hint)
        return value if summary is None else summary
    if isinstance(value, list):
        return [summarise_in_value(v) for v in value]
    if isinstance(value, dict):
        hint = value.get("mimeType")
        hint = hint if isinstance(hint, str) else None
        return {k: summarise_in_value(v, hint) for k, v in value.items()}
    return value
