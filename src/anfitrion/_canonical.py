"""Canonical JSON and digests: the one place where "the same value" is defined.

The canonical text of a value is what ``json.dumps(value, sort_keys=True, separators=(",",
":"), ensure_ascii=False, allow_nan=False)`` writes: the audit chain, approval digests and
effect keys hash it, so it must never change. orjson (compiled) writes the same bytes for
almost every value, several times faster. Where it would not — floats of exponent -5 to -9
(``1e-07``: orjson writes ``1e-7``, and ``0.00001`` for ``1e-05``), integers beyond 64 bits,
non-string keys, unpaired surrogates, very deep nesting, NaN and infinities (orjson writes
``null``) — the standard encoder writes (or refuses) the value as before. orjson also
accepts a few non-JSON types the standard encoder refuses (plain ``Enum`` members, UUIDs);
canonical values are JSON data, so none reaches it. Without orjson installed, the standard
encoder does all of it. ``tests/test_canonical.py`` pins the two against each other.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from ._json import walk_json

__all__ = ["FAST", "canonical_bytes", "canonical_json", "digest", "float_free_bytes",
           "standard_json"]

# One encoder for every call: ``json.dumps`` with these options builds an identical one each
# time (the encoder keeps no state between calls).
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                            allow_nan=False)
# floats that orjson writes otherwise than repr: a one-digit negative exponent (orjson 1e-7,
# repr 1e-07) and exponent -5 (orjson 0.00001, repr 1e-05); the other exponents agree
_OTHER_FLOAT = re.compile(rb"[0-9]e-[0-9](?![0-9])|0\.0000")

try:
    import orjson
except ImportError:  # pragma: no cover - orjson is a dependency; a platform without a wheel
    orjson = None  # type: ignore[assignment]


def _refuse(value: Any) -> Any:
    # what orjson serialises and the standard encoder refuses (dataclasses, datetimes, subclass
    # instances passed through) goes to the standard encoder, which raises as it always did
    raise TypeError


if orjson is not None:
    _dumps = orjson.dumps
    _OPTIONS = (orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS
                | orjson.OPT_PASSTHROUGH_DATETIME)
    _FAILED: tuple[type[Exception], ...] = (TypeError, orjson.JSONEncodeError)
    FAST = True
    """Whether the compiled encoder is in use."""

    def canonical_bytes(value: Any) -> bytes:
        """The canonical JSON of *value*, UTF-8 encoded (unpaired surrogates kept)."""
        try:
            out = _dumps(value, default=_refuse, option=_OPTIONS)
        except _FAILED:
            return _ENCODER.encode(value).encode("utf-8", "surrogatepass")
        if (b"null" in out and _non_finite(value)) or _other_float(out):
            return _ENCODER.encode(value).encode("utf-8", "surrogatepass")
        return out

    def float_free_bytes(value: Any) -> bytes:
        """:func:`canonical_bytes` of a value that holds no float (the data of an audit record,
        which anfitrion builds from text, integers and booleans): no search for a NaN."""
        try:
            out = _dumps(value, default=_refuse, option=_OPTIONS)
        except _FAILED:
            return _ENCODER.encode(value).encode("utf-8", "surrogatepass")
        if _other_float(out):
            return _ENCODER.encode(value).encode("utf-8", "surrogatepass")
        return out

    def canonical_json(value: Any) -> str:
        """Serialise *value* deterministically: sorted keys, no spaces, UTF-8 characters kept.

        Example:
            >>> canonical_json({"b": [1, 2.5], "a": "é"})
            '{"a":"é","b":[1,2.5]}'
        """
        try:
            out = _dumps(value, default=_refuse, option=_OPTIONS)
        except _FAILED:
            return _ENCODER.encode(value)
        if (b"null" in out and _non_finite(value)) or _other_float(out):
            return _ENCODER.encode(value)
        return out.decode("utf-8")

    def digest(value: Any) -> str:
        """SHA-256 (hex) of the canonical JSON of *value*."""
        try:
            out = _dumps(value, default=_refuse, option=_OPTIONS)
        except _FAILED:
            return hashlib.sha256(_ENCODER.encode(value).encode("utf-8")).hexdigest()
        if (b"null" in out and _non_finite(value)) or _other_float(out):
            return hashlib.sha256(_ENCODER.encode(value).encode("utf-8")).hexdigest()
        return hashlib.sha256(out).hexdigest()

else:  # orjson missing (a platform without its wheel): the pin test loads this branch too
    FAST = False

    def canonical_bytes(value: Any) -> bytes:
        """The canonical JSON of *value*, UTF-8 encoded (unpaired surrogates kept)."""
        return _ENCODER.encode(value).encode("utf-8", "surrogatepass")

    float_free_bytes = canonical_bytes

    def canonical_json(value: Any) -> str:
        """Serialise *value* deterministically: sorted keys, no spaces, UTF-8 characters kept."""
        return _ENCODER.encode(value)

    def digest(value: Any) -> str:
        """SHA-256 (hex) of the canonical JSON of *value*."""
        return hashlib.sha256(_ENCODER.encode(value).encode("utf-8")).hexdigest()


def _other_float(out: bytes) -> bool:
    """Whether orjson's text *out* may hold a float written otherwise than repr writes it (a
    false alarm costs only the standard encoder's time). One-byte searches are the cheapest:
    they come first."""
    return bool(((b"-" in out and b"e-" in out) or (b"." in out and b"0.0000" in out))
                and _OTHER_FLOAT.search(out))


def standard_json(value: Any) -> str:
    """The canonical JSON of *value* by the standard encoder alone (the reference)."""
    return _ENCODER.encode(value)


def _non_finite(value: Any) -> bool:
    """Whether a NaN or an infinity is somewhere in *value* (orjson writes them as null)."""
    # number - number: NaN (true) for a NaN or an infinity, 0.0 for a finite number; cheaper
    # than math.isfinite's lookup and call.
    return any(number - number for _, number in walk_json(value, only=float))
