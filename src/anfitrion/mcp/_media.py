"""Media in MCP results that a model is shown as a summary (type, size, SHA-256), never as data.

Images and audio a server returns — as content blocks, or as base64 *text* in a text block
(:func:`base64_media`) — become :class:`~anfitrion._conversation.Media` parts when the media
settings admit them (:mod:`anfitrion._media`); everything else is summarised here: binary
resources, base64 of other types (PDF, archives), base64 in an embedded text resource or a
structured value (``{"type": "image", "data": "iVBOR…", "mimeType": "image/png"}``), which would
otherwise reach the model as thousands of meaningless characters, cut at the result limit.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from typing import Any

from .._media import sniff

__all__ = ["base64_media", "base64_summary", "decode", "describe", "summarise_in_value"]

MIN_BASE64_CHARS = 512
"""Shorter base64-looking text is left as it is (an id, a token, a short digest)."""

_BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")
_DATA_URI = re.compile(r"data:([\w.+-]+/[\w.+-]+)?(?:;[\w.+-]+=[\w.+-]+)*;base64,(.*)", re.S)
_WHITESPACE = re.compile(r"\s+")


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


def base64_media(text: str, mime_hint: str | None = None) -> tuple[str | None, bytes] | None:
    """``(type, bytes)`` if *text* is media sent as base64, else ``None``.

    Media is a ``data:…;base64,`` URI, or bare base64 of at least :data:`MIN_BASE64_CHARS`
    characters that either starts like a known media type (:func:`sniff`) or comes with a
    *mime_hint* (a ``mimeType`` beside it): other base64-looking text stays text. The type is
    what the bytes start like, else the one declared.
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
    return sniff(data) or mime_hint or None, data


def base64_summary(text: str, mime_hint: str | None = None) -> str | None:
    """A summary of *text* if it is media sent as base64 (:func:`base64_media`), else
    ``None``."""
    found = base64_media(text, mime_hint)
    if found is None:
        return None
    mime, data = found
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
