"""Attacks on the strict parser and the schema: a hostile model tries to get arguments past
validation that a handler, a policy rule or a person would read differently."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from anfitrion import Effect, Tool, Toolbox
from anfitrion._json import DEFAULT_MAX_DEPTH, check_json_value, parse_json_strict
from anfitrion.exceptions import ArgumentError, JsonError
from anfitrion.models._scripted import call

# -- the parser --------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [
    '{"a": [{"b": 1, "b": 2}]}',                   # duplicate deep inside an array
    '{"a": {"b": {"c": {"d": 1, "d": 1}}}}',       # same value twice still counts
    '{"to": "ana@example.com", "\\u0074o": "eve@evil.com"}',  # escaped spelling of "to"
    '{"a": 1, "a\\u0000": 2, "a\\u0000": 3}',
])
def test_duplicate_keys_at_any_depth_and_in_any_spelling_are_refused(text: str) -> None:
    with pytest.raises(JsonError, match="duplicate key"):
        parse_json_strict(text)


@pytest.mark.parametrize("text", [
    '{"n": NaN}', '{"n": Infinity}', '{"n": -Infinity}',
    '{"n": 1e400}', '{"n": -1e400}', '{"n": 1E+999999}', '{"n": [0.5, 9.9e308]}',
    '{"n": 2' + '0' * 309 + '.0}',  # a long mantissa past the largest double
])
def test_non_finite_numbers_spelled_or_reached_by_exponent_overflow_are_refused(
        text: str) -> None:
    with pytest.raises(JsonError):
        parse_json_strict(text)


def test_an_integer_too_long_to_convert_is_an_error_not_a_crash() -> None:
    with pytest.raises(JsonError):
        parse_json_strict('{"n": ' + "9" * 5000 + "}")


@pytest.mark.parametrize("text", [
    '{"path": "\\ud800"}', '{"path": "\\udfff"}', '{"\\ud83d": 1}',
    '{"a": ["x", {"b": "\\ud800\\u0041"}]}',
    '{"path": "\\udc00\\ud800"}',  # a pair in the wrong order is two lone halves
])
def test_lone_surrogate_escapes_in_keys_or_values_are_refused(text: str) -> None:
    with pytest.raises(JsonError, match="surrogate"):
        parse_json_strict(text)


def test_a_raw_lone_surrogate_in_the_text_is_refused() -> None:
    with pytest.raises(JsonError, match="surrogate"):
        parse_json_strict('{"path": "\ud800"}')


def test_a_properly_paired_surrogate_escape_is_one_character() -> None:
    assert parse_json_strict('{"e": "\\ud83d\\ude00"}') == {"e": "\U0001F600"}


@pytest.mark.parametrize("text", [
    "[" * 40 + "]" * 40,
    '{"a": ' + "[" * 40 + "]" * 40 + "}",
    '{"a": [[[[{"b": ' + "[" * 40 + "]" * 40 + "}]]]]}",
    '{"s": "\\\\", "a": ' + "[" * 40 + "]" * 40 + "}",       # an escaped backslash then a quote
    '{"s": "\\"[[[[", "a": ' + "[" * 40 + "]" * 40 + "}",    # an escaped quote hides nothing
    "[" * 100_000,
])
def test_nesting_deeper_than_the_limit_is_refused_without_recursion(text: str) -> None:
    with pytest.raises(JsonError, match="nesting deeper"):
        parse_json_strict(text)


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    text = json.dumps({"s": "[" * 100 + "{" * 100})
    assert parse_json_strict(text) == {"s": "[" * 100 + "{" * 100}


_leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.text(alphabet='[]{}"\\ab,:'))


@settings(max_examples=300, deadline=None)
@given(st.recursive(_leaf, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(alphabet='[]{}"\\k', max_size=4),
                                                 inner, max_size=3)), max_leaves=60))
def test_no_json_text_gets_past_the_parser_deeper_than_the_limit(value: Any) -> None:
    text = json.dumps(value)
    try:
        parsed = parse_json_strict(text)
    except JsonError:
        return
    check_json_value(parsed, max_depth=DEFAULT_MAX_DEPTH)


def test_text_over_the_byte_limit_is_refused_counting_bytes_not_characters() -> None:
    text = json.dumps({"s": "é" * 600}, ensure_ascii=False)  # 600 characters, 1200+ bytes
    with pytest.raises(JsonError, match="bytes"):
        parse_json_strict(text, max_bytes=1000)


@pytest.mark.parametrize("text", ['\ufeff{"a": 1}', "{'a': 1}", '{"a": 1,}', '{"a": 0x10}',
                                  '{"a": 01}', '{"a": "tab\there"}', '{"a": 1} {"b": 2}'])
def test_json_dialects_other_parsers_accept_are_refused(text: str) -> None:
    with pytest.raises(JsonError):
        parse_json_strict(text)


# -- through the gate: type confusion and closed schemas ----------------------------------------

def _counter() -> tuple[Toolbox, list[Any]]:
    seen: list[Any] = []
    tools = Toolbox()

    @tools.tool(effect=Effect.READ)
    def take(n: int, flag: bool = False) -> str:
        """Take a number."""
        seen.append((n, flag))
        return "ok"

    @tools.tool(effect=Effect.READ)
    def nested(items: list[dict[str, int]]) -> str:
        """Take a list of objects."""
        seen.append(items)
        return "ok"

    return tools, seen


@pytest.mark.anyio
@pytest.mark.parametrize("raw", [
    '{"n": true}', '{"n": false}', '{"n": "1"}', '{"n": 1.5}', '{"n": null}', '{"n": [1]}',
    '{"n": 1, "flag": 1}', '{"n": 1, "flag": "true"}', '{"n": 1, "flag": 0}',
])
async def test_booleans_integers_and_strings_are_not_confused(hostile: Any, raw: str) -> None:
    tools, seen = _counter()
    outcome = await hostile(tools, [call("take", raw=raw)])
    assert outcome.result.error_kind == "invalid_arguments"
    assert seen == []


@pytest.mark.anyio
async def test_a_handler_declared_int_never_receives_a_float(hostile: Any) -> None:
    tools, seen = _counter()
    await hostile(tools, [call("take", raw='{"n": 1.0}')])
    assert all(type(n) is int for n, _ in seen)


@pytest.mark.anyio
@pytest.mark.parametrize("raw", [
    '{"items": [{"a": 1}, {"a": true}]}',
    '{"items": [{"a": 1}, {"a": "1"}]}',
    '{"items": [{"a": 1}], "extra": 1}',
    '{"items": {"a": 1}}',
])
async def test_type_confusion_inside_nested_arrays_is_refused(hostile: Any, raw: str) -> None:
    tools, seen = _counter()
    outcome = await hostile(tools, [call("nested", raw=raw)])
    assert outcome.result.error_kind == "invalid_arguments"
    assert seen == []


@pytest.mark.anyio
async def test_unknown_properties_in_nested_objects_of_a_raw_schema_are_refused(
        hostile: Any) -> None:
    seen: list[Any] = []
    schema = {"type": "object", "properties": {"to": {"type": "object", "properties": {
        "name": {"type": "string"}}}, "list": {"type": "array", "items": {
            "type": "object", "properties": {"x": {"type": "integer"}}}}}}
    tool = Tool.from_schema("raw", schema, lambda a: seen.append(a), effect=Effect.READ)
    for raw in ('{"to": {"name": "a", "bcc": "eve@evil.com"}}',
                '{"list": [{"x": 1}, {"x": 2, "admin": true}]}'):
        outcome = await hostile([tool], [call("raw", raw=raw)])
        assert outcome.result.error_kind == "invalid_arguments"
        assert "not allowed" in outcome.result.content
    assert seen == []


@pytest.mark.anyio
async def test_arguments_that_are_not_an_object_are_refused(hostile: Any) -> None:
    tools, seen = _counter()
    for raw in ('[{"n": 1}]', '"{\\"n\\": 1}"', "1", "null"):
        outcome = await hostile(tools, [call("take", raw=raw)])
        assert outcome.result.error_kind == "invalid_arguments"
    assert seen == []


@pytest.mark.anyio
async def test_smuggled_json_is_refused_even_when_the_provider_sends_an_object(
        hostile: Any) -> None:
    tools, seen = _counter()
    outcome = await hostile(tools, [call("take", {"n": float("nan")})])
    assert outcome.result.error_kind == "invalid_arguments"
    assert seen == []


@pytest.mark.anyio
async def test_a_huge_integer_against_a_fractional_multiple_of_is_an_error_result(
        hostile: Any) -> None:
    schema = {"type": "object", "properties": {"amount": {"type": "number",
                                                          "multipleOf": 0.01}}}
    tool = Tool.from_schema("pay", schema, lambda a: "paid", effect=Effect.READ)
    outcome = await hostile([tool], [call("pay", raw='{"amount": ' + "9" * 400 + "}")])
    assert outcome.result.error_kind == "invalid_arguments"


@pytest.mark.anyio
async def test_an_anchored_pattern_does_not_let_a_trailing_newline_through(
        hostile: Any) -> None:
    seen: list[Any] = []
    schema = {"type": "object", "properties": {"domain": {
        "type": "string", "pattern": "^[a-z0-9.-]+$"}}, "required": ["domain"]}
    tool = Tool.from_schema("lookup", schema, lambda a: seen.append(a), effect=Effect.READ)
    outcome = await hostile([tool], [call("lookup", {"domain": "example.com\n"})])
    assert outcome.result.error_kind == "invalid_arguments"
    assert seen == []


def test_a_business_validator_sees_exactly_what_the_schema_checked() -> None:
    checked: list[Any] = []
    tool = Tool.from_schema("t", {"type": "object", "properties": {"p": {"type": "string"}}},
                            lambda a: None, effect=Effect.READ, validator=checked.append)
    with pytest.raises(ArgumentError):
        tool.validate({"p": 1})
    assert checked == []
