"""The OpenAI strict-mode schema transformer and its inverse."""

from __future__ import annotations

import json
from typing import Any

import pytest

from anfitrion.models._strict import restore_optional, to_strict

NESTED: dict[str, Any] = {
    "type": "object",
    "properties": {
        "trip": {"$ref": "#/$defs/Trip"},
        "stops": {"type": "array", "items": {"$ref": "#/$defs/Trip"}},
        "note": {"type": ["string", "null"]},
    },
    "required": ["trip"],
    "$defs": {"Trip": {"type": "object", "title": "Trip", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer", "default": 1}},
        "required": ["city"]}},
}


def test_every_object_is_closed_and_lists_every_property_as_required() -> None:
    strict = to_strict(NESTED)
    assert strict.strict is True
    trip = strict.schema["$defs"]["Trip"]
    assert trip == {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": ["integer", "null"]}},
        "required": ["city", "days"], "additionalProperties": False}
    assert strict.schema["required"] == ["trip", "stops", "note"]
    assert strict.schema["properties"]["stops"] == {
        "type": ["array", "null"], "items": {"$ref": "#/$defs/Trip"}}
    assert strict.schema["properties"]["trip"] == {"$ref": "#/$defs/Trip"}
    assert strict.schema["properties"]["note"] == {"type": ["string", "null"]}


def test_an_optional_reference_becomes_any_of_it_or_null() -> None:
    schema = {"type": "object", "properties": {"t": {"$ref": "#/$defs/T"}},
              "$defs": {"T": {"type": "string"}}}
    assert to_strict(schema).schema["properties"]["t"] == {
        "anyOf": [{"$ref": "#/$defs/T"}, {"type": "null"}]}


def test_optional_enums_accept_null() -> None:
    schema = {"type": "object", "properties": {"units": {"enum": ["c", "f"], "type": "string"}}}
    assert to_strict(schema).schema["properties"]["units"] == {
        "enum": ["c", "f", None], "type": ["string", "null"]}


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": True},
    {"type": "object", "patternProperties": {"^x": {"type": "string"}}},
    {"type": "object", "properties": {"a": {"oneOf": [{"type": "string"}]}}},
])
def test_schemas_strict_mode_cannot_express_are_sent_unchanged_and_not_strict(
        schema: dict[str, Any]) -> None:
    strict = to_strict(schema)
    assert strict.strict is False
    assert strict.schema == schema


def test_restore_removes_nulls_only_where_the_original_was_optional_and_not_nullable() -> None:
    sent = json.dumps({"trip": {"city": "Lisboa", "days": None}, "note": None,
                       "stops": [{"city": "Porto", "days": None}]})
    restored = restore_optional(sent, NESTED)
    assert restored is not None
    assert json.loads(restored) == {"trip": {"city": "Lisboa"}, "note": None,
                                    "stops": [{"city": "Porto"}]}


def test_restore_leaves_required_nulls_for_the_gate_to_refuse() -> None:
    assert restore_optional('{"trip": null}', NESTED) is None


def test_restore_changes_nothing_in_text_that_does_not_parse_strictly() -> None:
    assert restore_optional('{"trip": {"city": "x"}, "note": NaN}', NESTED) is None
    assert restore_optional('{"note": null, "note": null}', NESTED) is None
    assert restore_optional("{", NESTED) is None


def test_a_ref_cycle_does_not_loop() -> None:
    schema = {"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}},
              "$defs": {"A": {"$ref": "#/$defs/A"}}}
    assert restore_optional('{"a": null}', schema) is None
