"""OpenAI strict mode: a schema transformer, and its inverse for the arguments that come back.

Strict mode makes the model's arguments match the schema exactly, but accepts only a subset of
JSON Schema: every object has ``additionalProperties: false`` and lists *every* property in
``required``. So optional properties become required-but-nullable, and a model in strict mode
sends ``null`` for what it leaves out. :func:`restore_optional` removes those nulls again, so the
gate validates the arguments against the tool's own schema, where the property is optional and
not nullable.

A schema using keywords strict mode rejects is sent unchanged with ``strict: false``.

Example:
    >>> strict = to_strict({"type": "object", "properties": {"units": {"type": "string"}}})
    >>> strict.schema["properties"], strict.schema["required"], strict.strict
    ({'units': {'type': ['string', 'null']}}, ['units'], True)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._json import parse_json_strict
from ..exceptions import JsonError

__all__ = ["StrictSchema", "restore_optional", "to_strict"]

# Keywords OpenAI's strict mode does not accept (its documented "not supported" list).
_UNSUPPORTED = frozenset({
    "patternProperties", "unevaluatedProperties", "propertyNames", "minProperties",
    "maxProperties", "unevaluatedItems", "contains", "minContains", "maxContains",
    "uniqueItems", "allOf", "not", "if", "then", "else", "dependentRequired",
    "dependentSchemas", "oneOf",
})
# Annotations strict mode refuses or that mean nothing once every property is required.
_DROPPED = frozenset({"default", "title", "$schema", "examples"})
_LITERAL_KEYS = frozenset({"const", "enum", "default", "examples"})


@dataclass(frozen=True, slots=True)
class StrictSchema:
    """The schema to send, and whether it can be sent with ``strict: true``."""

    schema: dict[str, Any]
    strict: bool


class _NotStrict(Exception):
    pass


def to_strict(schema: Mapping[str, Any]) -> StrictSchema:
    """Transform a tool's input schema for strict mode, or say it cannot be.

    Objects get ``additionalProperties: false`` and all properties in ``required``; properties
    that were optional become nullable. Annotations strict mode refuses are dropped.
    """
    try:
        return StrictSchema(_transform(dict(schema)), True)
    except _NotStrict:
        return StrictSchema(dict(schema), False)


def _transform(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_transform(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    if _UNSUPPORTED & schema.keys():
        raise _NotStrict
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _DROPPED:
            continue
        if key in _LITERAL_KEYS:
            out[key] = value
        elif key in ("properties", "$defs", "definitions"):
            if not isinstance(value, dict):
                raise _NotStrict
            out[key] = {k: _transform(v) for k, v in value.items()}
        else:
            out[key] = _transform(value)
    if out.get("type") == "object" or "properties" in out:
        properties = out.get("properties", {})
        if out.get("additionalProperties") not in (None, False):
            raise _NotStrict  # an open map cannot be strict
        required = set(out.get("required", []))
        for name in properties:
            if name not in required:
                properties[name] = _nullable(properties[name])
        out["properties"] = properties
        out["required"] = list(properties)
        out["additionalProperties"] = False
    return out


def _allows_null(schema: Any) -> bool:
    if not isinstance(schema, dict):
        return schema is True
    kind = schema.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    if "enum" in schema:
        return None in schema["enum"]
    if "const" in schema:
        return schema["const"] is None
    return any(_allows_null(s) for s in schema.get("anyOf", ()))


def _nullable(schema: Any) -> Any:
    if not isinstance(schema, dict) or _allows_null(schema):
        return schema
    kind = schema.get("type")
    if "$ref" in schema or "anyOf" in schema or kind is None or "const" in schema:
        return {"anyOf": [schema, {"type": "null"}]}
    out = dict(schema)
    out["type"] = [*kind, "null"] if isinstance(kind, list) else [kind, "null"]
    if "enum" in out:
        out["enum"] = [*out["enum"], None]
    return out


def restore_optional(raw_arguments: str, schema: Mapping[str, Any]) -> str | None:
    """Remove the nulls strict mode made the model send for optional properties.

    Returns the new argument text, or ``None`` when nothing changes — including when the text
    does not parse strictly: then the gate sees the model's text as it was and says what is
    wrong with it.
    """
    try:
        arguments = parse_json_strict(raw_arguments)
    except JsonError:
        return None
    cleaned, changed = _drop_nulls(arguments, dict(schema), dict(schema))
    if not changed:
        return None
    return json.dumps(cleaned, ensure_ascii=False)


def _resolve(schema: Any, root: Mapping[str, Any]) -> Any:
    for _ in range(32):  # bounded: a $ref cycle must not loop forever
        if not (isinstance(schema, dict) and isinstance(schema.get("$ref"), str)):
            return schema
        ref: str = schema["$ref"]
        target: Any = root
        for token in ref.removeprefix("#").strip("/").split("/"):
            if not token:
                continue
            target = target.get(token) if isinstance(target, dict) else None
        if target is None:
            return True
        schema = target
    return True  # unresolvable: treat as "anything", so nothing is removed


def _drop_nulls(value: Any, schema: Any, root: Mapping[str, Any]) -> tuple[Any, bool]:
    schema = _resolve(schema, root)
    if not isinstance(schema, dict):
        return value, False
    if isinstance(value, dict) and isinstance(schema.get("properties"), dict):
        properties: dict[str, Any] = schema["properties"]
        required = set(schema.get("required", []))
        out: dict[str, Any] = {}
        changed = False
        for key, item in value.items():
            sub = properties.get(key)
            if item is None and key in properties and key not in required \
                    and not _allows_null(_resolve(sub, root)):
                changed = True
                continue
            new, sub_changed = _drop_nulls(item, sub, root)
            out[key] = new
            changed = changed or sub_changed
        return out, changed
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        pairs = [_drop_nulls(v, schema["items"], root) for v in value]
        return [p[0] for p in pairs], any(p[1] for p in pairs)
    return value, False
