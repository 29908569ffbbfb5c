"""The arguments an effect key is computed over: equal under the tool's schema, equal here.

Two calls whose arguments a JSON Schema validator treats as the same value are one effect:

* **Numbers** are one JSON type: ``1``, ``1.0``, ``1e0`` and ``10E-1`` are the same number
  (JSON Schema's ``integer`` accepts all of them), so a finite float with no fractional part
  is written as the integer it equals (``-0.0`` as ``0``). Other floats keep Python's
  shortest round-trip spelling, which is already one text per value.
* **Defaults**: a property the schema gives a ``default`` and the call omits counts as given
  with that default, in the arguments object and in every nested object whose schema is
  known without choosing among alternatives (``properties``, ``items``, ``prefixItems`` and
  local ``$ref``\\ s to ``#/$defs/…``; not inside ``anyOf``/``oneOf``, where which branch
  applies is the validator's choice, not ours).
* **Strings are not normalised**: the outside system receives them byte for byte, and
  ``"Bob"``/``"bob"`` or ``"ﬁle"``/``"file"`` may well be two accounts or two files there;
  merging them would refuse a legitimate second effect. A tool whose identifier is
  case-insensitive says so with its ``effect_key`` template over a field it normalises in its
  own validator.

The stored key format is unchanged (:func:`anfitrion.effects.effect_key`): arguments that
carry no integral float and omit no defaulted property give the key they gave before.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["normalised_arguments"]

_MAX_DEPTH = 128


def normalised_arguments(schema: Mapping[str, Any] | None,
                         arguments: Mapping[str, Any]) -> dict[str, Any]:
    """*arguments* (already validated against *schema*) with defaults applied and integral
    numbers written as integers; the input is not changed."""
    root = schema if isinstance(schema, Mapping) else {}
    value = _normalise(root, root, dict(arguments), 0)
    return value if isinstance(value, dict) else dict(arguments)


def _resolve(root: Mapping[str, Any], schema: Any) -> Mapping[str, Any]:
    """*schema* with a local ``$ref`` followed (a few hops); ``{}`` when unknown."""
    for _ in range(8):
        if not isinstance(schema, Mapping):
            return {}
        ref = schema.get("$ref")
        if not isinstance(ref, str) or not ref.startswith("#/"):
            return schema
        target: Any = root
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            target = target.get(part) if isinstance(target, Mapping) else None
        schema = target
    return {}


def _normalise(root: Mapping[str, Any], schema: Any, value: Any, depth: int) -> Any:
    if isinstance(value, float) and not isinstance(value, bool):
        return int(value) if math.isfinite(value) and value.is_integer() else value
    if depth > _MAX_DEPTH:
        return value
    known = _resolve(root, schema)
    if isinstance(value, dict):
        properties = known.get("properties")
        properties = properties if isinstance(properties, Mapping) else {}
        out = {k: _normalise(root, properties.get(k), v, depth + 1) for k, v in value.items()}
        for name, sub in properties.items():
            sub = _resolve(root, sub)
            if name not in out and "default" in sub:
                out[name] = _normalise(root, sub, sub["default"], depth + 1)
        return out
    if isinstance(value, list):
        prefix = known.get("prefixItems")
        prefix = prefix if isinstance(prefix, list) else []
        items = known.get("items")
        return [_normalise(root, prefix[i] if i < len(prefix) else items, v, depth + 1)
                for i, v in enumerate(value)]
    return value
