"""The ``[media]`` table of a policy file: which images and sounds tool results may carry.

Example:
    >>> from anfitrion.exceptions import ConfigError
    >>> def fail(message: str, key: str) -> NoReturn:
    ...     raise ConfigError(f"{key}: {message}")
    >>> parse_media({"media": {"types": ["image/png", "audio/wav"], "max_per_result": 2}},
    ...             fail).max_per_result
    2

Keys (all optional): ``send`` (``false`` summarises every image and sound), ``types`` (the
admitted types, among :data:`anfitrion._media.KNOWN_TYPES`), ``max_bytes`` (per item),
``max_per_result``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from .._media import KNOWN_TYPES, MediaSettings, normal_type

__all__ = ["MEDIA_KEYS", "parse_media"]

MEDIA_KEYS = frozenset({"send", "types", "max_bytes", "max_per_result"})

Fail = Callable[[str, str], NoReturn]
"""``fail(message, key)``: raises the policy file's error for *key* (with its line)."""


def _integer(table: Mapping[str, Any], name: str, fail: Fail) -> int | None:
    value = table.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        fail("must be an integer", f"media.{name}")
    return value


def _types(value: Any, fail: Fail) -> frozenset[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        fail("must be a list of media types", "media.types")
    types = frozenset(normal_type(v) for v in value)
    unknown = sorted(types - KNOWN_TYPES)
    if unknown:
        fail(f"cannot admit {', '.join(map(repr, unknown))}: the types that can be admitted "
             f"are {', '.join(sorted(KNOWN_TYPES))}", "media.types")
    return types


def parse_media(data: Mapping[str, Any], fail: Fail) -> MediaSettings:
    """The media settings of a parsed policy file *data* (the defaults without ``[media]``).

    Raises:
        whatever *fail* raises: an unknown key, a value of the wrong type or out of range.
    """
    table = data.get("media")
    if table is None:
        return MediaSettings()
    if not isinstance(table, dict):
        fail("must be a table", "media")
    for name in table:
        if name not in MEDIA_KEYS:
            fail(f"unknown key {name!r} (allowed: {', '.join(sorted(MEDIA_KEYS))})",
                 f"media.{name}")
    options: dict[str, Any] = {}
    if "send" in table:
        if not isinstance(table["send"], bool):
            fail("must be true or false", "media.send")
        options["send"] = table["send"]
    if "types" in table:
        options["types"] = _types(table["types"], fail)
    for name in ("max_bytes", "max_per_result"):
        if (number := _integer(table, name, fail)) is not None:
            options[name] = number
    try:
        return MediaSettings(**options)
    except ValueError as exc:
        fail(str(exc), "media")
