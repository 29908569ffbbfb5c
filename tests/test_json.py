"""The strict argument parser: every hostile input is a JsonError, never a crash."""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from anfitrion._json import check_json_value, parse_json_strict
from anfitrion.exceptions import JsonError


def test_plain_object_parses() -> None:
    assert parse_json_strict('{"location": "Lisboa, PT"}') == {"location": "Lisboa, PT"}


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"a": 1, "a": 2}', "duplicate key 'a'"),
        ('{"a": NaN}', "NaN is not valid JSON"),
        ('{"a": Infinity}', "Infinity is not valid JSON"),
        ('{"a": -Infinity}', "-Infinity is not valid JSON"),
        ('{"a": 1e999}', "out of range"),
        ('{"a": "\\ud800"}', "unpaired surrogate"),
        ("{'a': 1}", "invalid JSON"),
        ('{"a": 1', "invalid JSON"),
        ("", "invalid JSON"),
        ('{"a": 1} trailing', "invalid JSON"),
        ('\ufeff{"a": 1}', "byte order mark"),
        ('{"a": ' + "9" * 101 + "}", "more than 100 digits"),
    ],
)
def test_hostile_json_is_rejected_with_a_reason(text: str, problem: str) -> None:
    with pytest.raises(JsonError, match=problem):
        parse_json_strict(text)


def test_nesting_deeper_than_the_limit_is_rejected_before_parsing() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(JsonError, match="nesting deeper than 32"):
        parse_json_strict(deep)


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    text = json.dumps({"a": "[" * 100})
    assert parse_json_strict(text) == {"a": "[" * 100}


def test_text_larger_than_the_limit_is_rejected() -> None:
    with pytest.raises(JsonError, match="the limit is 10"):
        parse_json_strict('{"a": "0123456789"}', max_bytes=10)


def test_the_byte_limit_counts_utf8_bytes_not_characters() -> None:
    assert parse_json_strict('{"a": "é"}', max_bytes=11) == {"a": "é"}
    with pytest.raises(JsonError, match="arguments are 11 bytes; the limit is 10"):
        parse_json_strict('{"a": "é"}', max_bytes=10)


def test_huge_integer_is_rejected_not_crashing() -> None:
    with pytest.raises(JsonError):
        parse_json_strict("{\"a\": " + "9" * 10_000 + "}")


def test_non_text_input_is_rejected() -> None:
    with pytest.raises(JsonError, match="expected JSON text"):
        parse_json_strict(b"{}")  # type: ignore[arg-type]


def test_check_json_value_rejects_non_json_values() -> None:
    with pytest.raises(JsonError):
        check_json_value({"a": object()})
    with pytest.raises(JsonError):
        check_json_value({1: "a"})
    with pytest.raises(JsonError):
        check_json_value([float("nan")])
    check_json_value({"a": [1, 2.5, None, True, "x"]})


@given(st.text(max_size=300))
def test_any_text_parses_or_raises_json_error(text: str) -> None:
    with contextlib.suppress(JsonError):
        parse_json_strict(text)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_every_plain_json_value_round_trips(value: object) -> None:
    text = json.dumps(value)
    try:
        assert parse_json_strict(text) == value
    except JsonError as exc:  # only surrogates can legitimately fail
        assert "surrogate" in str(exc)


def test_there_is_one_strict_decoder() -> None:
    """Issue #29: the MCP config and untrusted text share one decoder (duplicate keys, NaN,
    out-of-range numbers, long integers, a BOM): no other module builds its own."""
    from pathlib import Path

    src = Path(__file__).parents[1] / "src" / "anfitrion"
    building = sorted(str(p.relative_to(src)) for p in src.rglob("*.py")
                      if "object_pairs_hook" in p.read_text(encoding="utf-8"))
    assert building == ["_json.py"]
