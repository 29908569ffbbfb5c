"""A strict JSON parser for text that comes from a model or any other untrusted peer.

Rejects what :func:`json.loads` accepts but a hostile peer can abuse: duplicate keys (two parsers
can disagree about which one wins), ``NaN``/``Infinity``, non-finite numbers, lone surrogates,
nesting deeper than a limit (checked *before* parsing, so no recursion error) and text larger than
a limit. Every rejection is a :class:`JsonError` with a message a model can act on.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Iterator, Mapping
from typing import Any

from .exceptions import JsonError

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_DEPTH",
    "as_written",
    "check_json_value",
    "json_strings",
    "parse_json_strict",
]

DEFAULT_MAX_BYTES = 256 * 1024
DEFAULT_MAX_DEPTH = 32


def _reject_constant(name: str) -> Any:
    raise JsonError(f"{name} is not valid JSON")


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JsonError(f"number {text[:40]} is out of range")
    return value


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise JsonError(f"duplicate key {key!r}")
        result[key] = value
    return result


# One decoder for every call (``json.loads`` with options builds one each time); it keeps no
# state between calls.
_DECODER = json.JSONDecoder(object_pairs_hook=_no_duplicates, parse_constant=_reject_constant,
                            parse_float=_parse_float)


def _max_depth(text: str, limit: int) -> None:
    depth = 0
    in_string = False
    escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                raise JsonError(f"nesting deeper than {limit} levels")
        elif ch in "]}":
            depth -= 1


def parse_json_strict(text: str, *, max_bytes: int = DEFAULT_MAX_BYTES,
                      max_depth: int = DEFAULT_MAX_DEPTH) -> Any:
    """Parse untrusted JSON text, or raise :class:`JsonError` saying what is wrong.

    Example:
        >>> parse_json_strict('{"location": "Lisboa, PT"}')
        {'location': 'Lisboa, PT'}
    """
    if not isinstance(text, str):
        raise JsonError(f"expected JSON text, got {type(text).__name__}")
    try:
        size = len(text) if text.isascii() else len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise JsonError("text contains an unpaired surrogate") from None
    if size > max_bytes:
        raise JsonError(f"arguments are {size} bytes; the limit is {max_bytes}")
    if text.count("{") + text.count("[") > max_depth:  # cheap bound before the exact scan
        _max_depth(text, max_depth)
    try:
        if text.startswith("\ufeff"):  # what json.loads refuses before decoding
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        value = _DECODER.decode(text)
    except JsonError:
        raise
    except json.JSONDecodeError as exc:
        raise JsonError(
            f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except (ValueError, RecursionError) as exc:  # e.g. an integer with too many digits
        raise JsonError(f"invalid JSON: {exc}") from None
    if "\\u" in text:  # an escape may have produced an unpaired surrogate
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise JsonError("text contains an unpaired surrogate escape") from None
    return value


def check_json_value(value: Any, *, max_depth: int = DEFAULT_MAX_DEPTH) -> None:
    """Check that an already-parsed value is plain, finite JSON within the depth limit."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            if depth > max_depth:
                raise JsonError(f"nesting deeper than {max_depth} levels")
            for key, sub in item.items():
                if not isinstance(key, str):
                    raise JsonError("object keys must be strings")
                stack.append((sub, depth + 1))
        elif isinstance(item, list):
            if depth > max_depth:
                raise JsonError(f"nesting deeper than {max_depth} levels")
            stack.extend((sub, depth + 1) for sub in item)
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise JsonError("numbers must be finite")
        elif item is None or isinstance(item, (str, int, bool)):
            continue
        else:
            raise JsonError(f"{type(item).__name__} is not a JSON value")


def json_strings(value: Any, path: str = "", skip: Collection[str] = frozenset(), *,
                 keys: str | None = None, root: str = "",
                 sort_keys: bool = False) -> Iterator[tuple[str, str]]:
    """Every string in a JSON value with its path (``a.b[2]``), depth first, in order.

    The one walker of the scanners (taint, secrets, MCP definition review, the inbox's
    findings). It keeps no recursion, so a deeply nested value costs no stack.

    Args:
        value: a parsed JSON value (objects as mappings, arrays as lists or tuples).
        path: the path of *value* itself.
        skip: keys of the top-level object left out, with everything under them.
        keys: when set, every object key is yielded too, at its own path with this suffix
            (``a.b (key)``): a key can carry text as much as a value can.
        root: the path shown for a string whose path is empty (*value* itself).
        sort_keys: walk each object's members in key order instead of their own order.

    Example:
        >>> list(json_strings({"to": ["a@x"], "n": 1}, keys=" (key)"))
        [('to (key)', 'to'), ('to[0]', 'a@x'), ('n (key)', 'n')]
    """
    stack: list[tuple[str, Any, bool]] = [(path, value, False)]
    while stack:
        where, item, is_key = stack.pop()
        if is_key or isinstance(item, str):
            yield where or root, item
        elif isinstance(item, Mapping):
            children: list[tuple[str, Any, bool]] = []
            members = sorted(item.items(), key=lambda kv: kv[0]) if sort_keys else item.items()
            for key, sub in members:
                if not where and key in skip:
                    continue
                child = f"{where}.{key}" if where else str(key)
                if keys is not None:
                    children.append((f"{child}{keys}", str(key), True))
                children.append((child, sub, False))
            stack.extend(reversed(children))
        elif isinstance(item, list | tuple):
            stack.extend(reversed([(f"{where}[{i}]", sub, False) for i, sub in enumerate(item)]))


_EXACT_INTEGERS = 2 ** 53


def as_written(value: Any) -> Any:
    """*value* for a person to read: every float that holds a whole number as that integer
    (``4999.0`` → ``4999``), everything else unchanged. A model or a provider that sends
    every number as a float (``4999.0`` for the ``4999`` it was told) must not change an
    amount a person reads; non-whole floats keep their shortest form (``4999.5``).

    Example:
        >>> as_written({"amount": 4999.0, "rate": 0.5, "ids": [3.0, "3.0"]})
        {'amount': 4999, 'rate': 0.5, 'ids': [3, '3.0']}
    """
    if isinstance(value, float):
        return int(value) if value.is_integer() and abs(value) <= _EXACT_INTEGERS else value
    if isinstance(value, Mapping):
        return {k: as_written(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [as_written(v) for v in value]
    return value
