"""Encoded forms of text: the base64, base32 and hex tokens of a string, decoded, in bounded
work. Shared by the credential scan of the policy (:mod:`anfitrion.policy._secrets`) and the
egress check of the provenance index (:mod:`anfitrion._provenance`), below both."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator

__all__ = ["MAX_DECODED_CHARS", "MAX_TOKEN_CHARS", "MIN_TOKEN_CHARS", "SCAN_CHARS", "TRUNCATED",
           "encoded_forms"]

SCAN_CHARS = 262_144
"""Only this much of one string is scanned: the gate caps a call's raw arguments at 256 KiB, so
an argument is always scanned whole (linear-time patterns, run only where their anchor is)."""
MAX_DECODED_CHARS = 4 * SCAN_CHARS
"""At most this many characters of candidate tokens of one string are decoded: every token of
a string the gate lets through, and the paths in it tried from several slashes; more is
reported (:data:`TRUNCATED`), never passed over."""
TRUNCATED = "truncated"
"""The encoding :func:`encoded_forms` gives, once and last, with an empty text, when the
string holds more candidate text than it decodes: a caller fails closed on it (a count of
tokens let decoy words hide an encoded secret behind them)."""
MAX_TOKEN_CHARS = 8192
MIN_TOKEN_CHARS = 12
"""A base64 token shorter than this decodes to fewer than eight bytes: not worth a look."""

_TOKEN = re.compile(r"[A-Za-z0-9+/_-]{12,}={0,2}")
_HEX = re.compile(r"(?:[0-9a-fA-F]{2}){8,}")
_BASE32 = re.compile(r"[A-Z2-7]+|[a-z2-7]+")


def _decoded_text(data: bytes) -> str | None:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if len(text) < 8 or not all(c.isprintable() or c in "\t\n\r" for c in text):
        return None
    return text


def _decode_token(token: str) -> list[tuple[str, str]]:
    """Every reading of *token* (hex, base32, base64) that gives printable text."""
    found: list[tuple[str, str]] = []
    if _HEX.fullmatch(token):
        text = _decoded_text(bytes.fromhex(token))
        if text is not None:
            found.append(("hex", text))
    bare = token.rstrip("=")
    if len(bare) >= 16 and _BASE32.fullmatch(bare):  # DNS labels: case-insensitive
        try:
            text = _decoded_text(base64.b32decode(bare.upper() + "=" * (-len(bare) % 8)))
        except (binascii.Error, ValueError):
            text = None
        if text is not None:
            found.append(("base32", text))
    urlsafe = "-" in bare or "_" in bare
    if len(bare) % 4 == 1 or (urlsafe and ("+" in bare or "/" in bare)):
        return found
    if bare.isalpha() and (bare.islower() or bare.isupper()):
        # a word: the base64 of eight or more characters of text is of one case and no digit
        # about once in 10^5 (and then not by the writer's choice), so not tried
        return found
    try:
        data = base64.b64decode(bare + "=" * (-len(bare) % 4),
                                altchars=b"-_" if urlsafe else None, validate=True)
    except (binascii.Error, ValueError):
        return found
    text = _decoded_text(data)
    if text is not None:
        found.append(("base64", text))
    return found


def encoded_forms(text: str, *, max_chars: int = MAX_DECODED_CHARS
                  ) -> Iterator[tuple[str, str]]:
    """``(encoding, decoded text)`` for the base64 (standard or URL-safe, padded or not),
    base32 and hex tokens of *text* that decode to printable UTF-8 of eight or more characters.

    Bounded by the characters decoded, not the tokens: at most *max_chars* of candidates, each
    of at most :data:`MAX_TOKEN_CHARS`; a token holding ``/`` (a path) is also tried from after
    each slash and segment by segment. When more is left, ``(TRUNCATED, "")`` comes last.
    """
    spent = 0
    seen: set[str] = set()  # a repeated word is decoded once
    for match in _TOKEN.finditer(text[:SCAN_CHARS]):
        for candidate in _candidates(match.group()[:MAX_TOKEN_CHARS]):
            if candidate in seen:
                continue
            seen.add(candidate)
            spent += len(candidate)
            if spent > max_chars:
                yield TRUNCATED, ""
                return
            yield from _decode_token(candidate)


def _candidates(token: str) -> Iterator[str]:
    """The token; for a path, the rest after each slash and then each segment — made one at
    a time, so a budget spent early costs nothing more."""
    yield token
    if "/" not in token:
        return
    seen = {token}
    start = token.find("/")
    while start != -1:
        rest = token[start + 1:]
        if len(rest) >= MIN_TOKEN_CHARS and rest not in seen:
            seen.add(rest)
            yield rest
        start = token.find("/", start + 1)
    for segment in token.split("/"):
        if len(segment) >= MIN_TOKEN_CHARS and segment not in seen:
            seen.add(segment)
            yield segment
