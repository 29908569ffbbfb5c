"""The strict argument parser: every hostile input is a JsonError, never a crash."""

from __future__ import annotations

import contextlib
import json
import math
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from anfitrion._json import JsonKey, check_json_value, parse_json_strict, walk_json
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


def _dotted(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)


def _indexed(path: str, position: int) -> str:
    return f"{path}[{position}]"


_EVERY_LEAF = {"s": "text", "i": 7, "f": 2.5, "t": True, "n": None, "o": object}


def test_the_walker_yields_every_leaf_type_in_order_with_its_path() -> None:
    value = {"a": [_EVERY_LEAF, ("x", [])], "b": {}, "c": MappingProxyType({"d": -1})}
    walked = list(walk_json(value, "", member=_dotted, index=_indexed))
    assert walked == [("a[0].s", "text"), ("a[0].i", 7), ("a[0].f", 2.5), ("a[0].t", True),
                      ("a[0].n", None), ("a[0].o", object), ("a[1][0]", "x"), ("c.d", -1)]
    assert [leaf for _, leaf in walk_json(value)] == [leaf for _, leaf in walked]  # fast loop
    assert {path for path, _ in walk_json(value, "root")} == {"root"}


def test_the_walker_filters_leaves_by_type_but_walks_past_the_others() -> None:
    value = [1, [2.5, "s", {"k": float("nan")}], True]
    floats = [v for _, v in walk_json(value, only=float)]
    assert floats[0] == 2.5 and math.isnan(floats[1]) and len(floats) == 2
    assert [v for _, v in walk_json(value, only=int)] == [1, True]  # a bool is an int


def test_the_walker_passes_non_string_keys_as_they_are() -> None:
    seen: list[object] = []

    def member(path: str, key: object) -> str:
        seen.append(key)
        return f"{path}/{key!r}"

    value = {1: "one", None: "none", (2, 3): {"x": "y"}}
    walked = list(walk_json(value, "", member=member, keys=True))
    assert seen == [1, None, (2, 3), "x"]
    assert walked[:2] == [("/1", JsonKey("1")), ("/1", "one")]
    assert ("/(2, 3)/'x'", "y") in walked
    assert [k for _, k in walked if type(k) is JsonKey] == ["1", "None", "(2, 3)", "x"]


def test_keys_are_yielded_before_their_members_whatever_the_filter() -> None:
    walked = list(walk_json({"b": 1, "a": {"c": 2}}, "", member=_dotted, only=float, keys=True,
                            sort_keys=True))
    assert walked == [("a", "a"), ("a.c", "c"), ("b", "b")]


def test_the_depth_limit_counts_objects_and_arrays_and_raises_a_json_error() -> None:
    value: Any = "leaf"
    for _ in range(3):
        value = {"a": [value]}  # six levels
    assert list(walk_json(value, max_depth=6)) == [(None, "leaf")]
    with pytest.raises(JsonError, match="nesting deeper than 5 levels"):
        list(walk_json(value, max_depth=5))
    assert list(walk_json([[1]], max_depth=2)) == [(None, 1)]
    with pytest.raises(JsonError, match="deeper than 1 levels"):
        list(walk_json([[1]], max_depth=1))


@pytest.mark.parametrize("paths", [False, True])
def test_a_very_deep_value_is_walked_without_recursion(paths: bool) -> None:
    """JSON has no cycles but can nest 100,000 deep (a value built in code, or parsed by a
    decoder without a depth limit): the walk keeps its own stack, either loop."""
    value: Any = 1.5
    for _ in range(100_000):
        value = [{"k": value}]
    options: dict[str, Any] = {"member": lambda p, k: p + 1, "index": lambda p, i: p} \
        if paths else {}
    ((path, leaf),) = walk_json(value, 0, **options)
    assert leaf == 1.5
    assert path == (100_000 if paths else 0)


def test_a_stopped_walk_does_no_more_work() -> None:
    walk = walk_json(list(range(10**6)), only=int)
    assert next(walk) == (None, 0)
    walk.close()


def test_check_json_value_walks_only_plain_objects_and_arrays() -> None:
    """The one walker's ``plain`` mode: a tuple or another mapping is not JSON data."""
    check_json_value({"a": [1, 2.5, None, True, "s", {"b": []}]})
    for bad in ({"a": (1,)}, [MappingProxyType({})]):
        with pytest.raises(JsonError, match="is not a JSON value"):
            check_json_value(bad)
    with pytest.raises(JsonError, match="nesting deeper than 2 levels"):
        check_json_value({"a": [[]]}, max_depth=2)
    assert list(walk_json([(1,)], plain=True)) == [(None, (1,))]
