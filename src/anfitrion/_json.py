"""The one strict JSON decoder, and the one walker of JSON values.

:func:`decode_strict` refuses what :func:`json.loads` accepts but a hostile peer can abuse:
duplicate keys (two parsers can disagree about which one wins), ``NaN``/``Infinity``,
non-finite numbers, integers of more than 100 digits and a byte order mark.
:func:`parse_json_strict` (text from a model or any other untrusted peer) adds lone surrogates,
nesting deeper than a limit (checked *before* parsing, so no recursion error) and text larger
than a limit; the MCP config reader (:mod:`anfitrion.mcp._config`) adds its own depth scan that
names the line. Every refusal is a :class:`JsonError` with a message a model can act on.

:func:`json_strings` is the one walker of the strings of a parsed value (taint, secrets, Cedar's
unproven arguments, MCP definition review, the inbox's findings), without recursion.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any, cast

from .exceptions import JsonError

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_DEPTH",
    "MAX_INT_DIGITS",
    "JsonKey",
    "as_written",
    "check_json_value",
    "decode_strict",
    "json_strings",
    "parse_json_strict",
    "walk_json",
]

DEFAULT_MAX_BYTES = 256 * 1024
DEFAULT_MAX_DEPTH = 32
MAX_INT_DIGITS = 100
"""Longer integers are refused: no JSON anfitrion reads needs them, and converting one costs
time quadratic in its length."""


def _reject_constant(name: str) -> Any:
    raise JsonError(f"{name} is not valid JSON")


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JsonError(f"number {text[:40]} is out of range")
    return value


def _bounded_int(text: str) -> int:
    if len(text) - text.startswith("-") > MAX_INT_DIGITS:
        raise JsonError(f"the number {text[:40]}... has more than {MAX_INT_DIGITS} digits")
    return int(text)


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
                            parse_float=_parse_float, parse_int=_bounded_int)


def decode_strict(text: str) -> Any:
    """Decode JSON *text* strictly (see the module's docstring); no size or depth limit of its
    own, so a caller bounds the nesting first.

    Raises:
        json.JSONDecodeError: the text is not JSON (``lineno``, ``colno`` say where).
        JsonError: JSON this decoder refuses (duplicate key, ``NaN``, out of range, too
            many digits, a byte order mark, nesting too deep for the stack).
    """
    if text.startswith("\ufeff"):  # what json.loads refuses before decoding
        raise JsonError("a byte order mark (BOM) before the JSON")
    try:
        return _DECODER.decode(text)
    except (JsonError, json.JSONDecodeError):
        raise
    except RecursionError:
        raise JsonError("nested too deeply") from None
    except ValueError as exc:  # pragma: no cover - what the hooks above do not already refuse
        raise JsonError(str(exc)) from None


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
        value = decode_strict(text)
    except json.JSONDecodeError as exc:
        raise JsonError(
            f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    if "\\u" in text:  # an escape may have produced an unpaired surrogate
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise JsonError("text contains an unpaired surrogate escape") from None
    return value


def check_json_value(value: Any, *, max_depth: int = DEFAULT_MAX_DEPTH) -> None:
    """Check that an already-parsed value is plain, finite JSON within the depth limit."""
    for _, item in walk_json(value, member=_string_key, max_depth=max_depth, plain=True):
        if isinstance(item, float):
            if not math.isfinite(item):
                raise JsonError("numbers must be finite")
        elif item is not None and not isinstance(item, str | int):  # bool is an int
            raise JsonError(f"{type(item).__name__} is not a JSON value")


def _string_key(path: None, key: Any) -> None:
    if not isinstance(key, str):
        raise JsonError("object keys must be strings")
    return path


class JsonKey(str):
    """An object key, yielded by :func:`walk_json` (``keys=True``) before its member's value."""

    __slots__ = ()


Step = Callable[[Any, Any], Any]
"""How a path grows: ``(parent path, key or index) -> child path``."""

_SCALARS = (str, int, float, type(None))  # bool is an int


def walk_json(value: Any, path: Any = None, *, member: Step | None = None,
              index: Step | None = None, only: type | tuple[type, ...] | None = None,
              keys: bool = False, sort_keys: bool = False, max_depth: int | None = None,
              plain: bool = False) -> Iterator[tuple[Any, Any]]:
    """Every leaf of a JSON value with its path, depth first, in order, without recursion:
    the one walker of JSON values (the string scanners through :func:`json_strings`, the
    provenance record's fields, the canonical encoder's search for a NaN, value checks).

    Objects are mappings, arrays lists or tuples; anything else is a leaf (``str``, ``int``,
    ``float``, ``bool``, ``None``, or whatever else a caller built). A path is whatever the
    caller makes of it: it starts as *path* and grows with *member* for an object's key (the
    key as it is, a non-``str`` key too) and *index* for an array's position; without them a
    path stays *path* and the walk builds nothing per value (the fast loop).

    Args:
        value: the value to walk.
        path: the path of *value* itself.
        member: ``(path, key) -> path`` of a member of an object.
        index: ``(path, position) -> path`` of an item of an array.
        only: yield only the leaves of these types (the others are still walked past).
        keys: yield each object key too, as a :class:`JsonKey` at its member's path, before
            the member (whatever *only* says).
        sort_keys: walk each object's members in key order instead of their own order.
        max_depth: the deepest nesting allowed (the outermost object or array is level 1).
        plain: only ``dict`` objects and ``list`` arrays are walked into; any other mapping
            or a tuple is a leaf (what a check of plain JSON refuses).

    Raises:
        JsonError: an object or array deeper than *max_depth*.

    Example:
        >>> dotted = lambda p, k: f"{p}.{k}" if p else str(k)
        >>> list(walk_json({"a": [1, {"b": None}]}, "", member=dotted,
        ...                index=lambda p, i: f"{p}[{i}]"))
        [('a[0]', 1), ('a[1].b', None)]
    """
    if member is None and index is None and max_depth is None and not (keys or sort_keys or plain):
        return _leaves(value, path, only)
    return _walk(value, path, member, index, only, keys, sort_keys, max_depth, plain)


def _leaves(value: Any, path: Any, only: type | tuple[type, ...] | None
            ) -> Iterator[tuple[Any, Any]]:
    """:func:`walk_json` with one path for every leaf: a stack of values, no tuple per value
    (the canonical encoder's search for a NaN is on the audit's path)."""
    stack = [value]
    pop, extend = stack.pop, stack.extend
    while stack:
        item = pop()
        if isinstance(item, _SCALARS):
            if only is None or isinstance(item, only):
                yield path, item
        elif isinstance(item, dict):
            extend(reversed(item.values()))
        elif isinstance(item, list | tuple):
            extend(reversed(item))
        elif isinstance(item, Mapping):
            extend(reversed(list(item.values())))
        elif only is None or isinstance(item, only):
            yield path, item


def _walk(value: Any, path: Any, member: Step | None, index: Step | None,
          only: type | tuple[type, ...] | None, keys: bool, sort_keys: bool,
          max_depth: int | None, plain: bool) -> Iterator[tuple[Any, Any]]:
    """:func:`walk_json` with paths, keys, key order, a depth limit or plain containers."""
    limit = max_depth if max_depth is not None else -1
    objects: type | tuple[type, ...] = dict if plain else (dict, Mapping)
    arrays: type | tuple[type, ...] = list if plain else (list, tuple)
    stack: list[tuple[Any, Any, int]] = [(path, value, 1)]
    while stack:
        where, item, depth = stack.pop()
        if not depth:  # a key, pushed by its object below: always yielded
            yield where, item
        elif isinstance(item, objects):
            if 0 <= limit < depth:
                raise JsonError(f"nesting deeper than {limit} levels")
            children: list[tuple[Any, Any, int]] = []
            mapping = cast(Mapping[Any, Any], item)
            members = sorted(mapping.items(), key=_first) if sort_keys else mapping.items()
            for key, sub in members:
                child = member(where, key) if member is not None else where
                if keys:
                    children.append((child, JsonKey(key), 0))
                children.append((child, sub, depth + 1))
            stack.extend(reversed(children))
        elif isinstance(item, arrays):
            if 0 <= limit < depth:
                raise JsonError(f"nesting deeper than {limit} levels")
            stack.extend(reversed([(index(where, i) if index is not None else where, sub,
                                    depth + 1) for i, sub in enumerate(cast(list[Any], item))]))
        elif only is None or isinstance(item, only):
            yield where, item


def _first(pair: tuple[Any, Any]) -> Any:
    return pair[0]


def _dotted(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _indexed(path: str, position: int) -> str:
    return f"{path}[{position}]"


def json_strings(value: Any, path: str = "", skip: Collection[str] = frozenset(), *,
                 keys: str | None = None, root: str = "",
                 sort_keys: bool = False) -> Iterator[tuple[str, str]]:
    """Every string in a JSON value with its path (``a.b[2]``), depth first, in order.

    The one walker of the scanners (taint, secrets, Cedar's unproven arguments, MCP definition
    review, the inbox's findings), on :func:`walk_json`: a deeply nested value costs no stack.

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
    if skip and not path and isinstance(value, Mapping):
        value = {k: v for k, v in value.items() if k not in skip}
    for where, text in walk_json(value, path, member=_dotted, index=_indexed, only=str,
                                 keys=keys is not None, sort_keys=sort_keys):
        if type(text) is JsonKey:
            yield f"{where}{keys}", str(text)
        else:
            yield where or root, text


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
