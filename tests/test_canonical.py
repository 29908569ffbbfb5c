"""The canonical encoder writes exactly the bytes the standard encoder wrote before it.

Every audit record stored so far was hashed over the standard encoder's text, and verifying
the chain re-derives that text from the stored data: one byte of difference would make every
old record look edited. So the compiled fast path is pinned against the reference, over many
values, and refuses what the reference refuses.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import math
from enum import StrEnum
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from anfitrion import _canonical
from anfitrion._canonical import canonical_bytes, canonical_json, digest, float_free_bytes

# today's encoder, spelled out here so that a change to the module cannot move the reference
REFERENCE = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                             allow_nan=False)

text = st.text(alphabet=st.characters(codec="utf-8"), max_size=30)
scalars = (st.none() | st.booleans() | st.integers(-(2**70), 2**70) | text
           | st.floats(allow_nan=False, allow_infinity=False)
           | st.sampled_from([1e-7, 1e-05, 5e-324, 1e16, 1e22, -0.0, 0.1, 1e-4, 2.5e-9,
                              123456789.123, 1.7976931348623157e308]))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=5)
                      | st.tuples(inner, inner)
                      | st.dictionaries(text, inner, max_size=5), max_leaves=40)


class Colour(StrEnum):
    RED = "red"


@given(values)
@settings(max_examples=3000, deadline=None)  # a loaded machine is slow, not wrong
def test_canonical_text_is_the_standard_encoders_byte_for_byte(value: Any) -> None:
    expected = REFERENCE.encode(value)
    assert canonical_json(value) == expected
    assert canonical_bytes(value) == expected.encode("utf-8")
    assert float_free_bytes(value) == expected.encode("utf-8")  # finite floats are fine too
    assert digest(value) == hashlib.sha256(expected.encode("utf-8")).hexdigest()


@given(st.floats(allow_nan=False, allow_infinity=False))
@settings(max_examples=3000, deadline=None)  # a loaded machine is slow, not wrong
def test_every_finite_float_is_written_as_repr_writes_it(value: float) -> None:
    assert canonical_json([value, {"x": value}]) == REFERENCE.encode([value, {"x": value}])


@pytest.mark.parametrize("value", [
    {"k": "tab\t newline\n bell\x07 esc\x1b del\x7f nbsp\xa0 ls\u2028 emoji 🦜 quote\" back\\"},
    {"é": 1, "e": 2, "z": 3, "🦜": 4, "\x00": 5, "A": 6},
    {"str enum": Colour.RED, Colour.RED: "as a key"},
    [2**63, -(2**63), 2**64, -(2**64) - 1, 10**40],
    {"deep": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]},
    [[1] * 3] * 300,
    {None: 1}, {True: 2}, {1.5: 3}, {1e-7: 4},  # keys the standard encoder turns into text
])
def test_edge_values_match_the_standard_encoder(value: Any) -> None:
    assert canonical_json(value) == REFERENCE.encode(value)


def test_nesting_deeper_than_the_fast_encoder_allows_still_encodes() -> None:
    value: Any = 1
    for _ in range(400):
        value = [value]
    assert canonical_json(value) == REFERENCE.encode(value)


def test_an_unpaired_surrogate_is_kept_where_the_standard_encoder_keeps_it() -> None:
    value = {"s": "a\ud800b"}
    assert canonical_json(value) == REFERENCE.encode(value)
    assert canonical_bytes(value) == REFERENCE.encode(value).encode("utf-8", "surrogatepass")
    with pytest.raises(UnicodeEncodeError):
        digest(value)


@dataclasses.dataclass
class Point:
    x: int


@pytest.mark.parametrize("value", [
    {"x": math.nan}, [math.inf], {"a": [None, {"b": -math.inf}]},  # not JSON
    {1: "a", "b": 2}, {(1, 2): 3},  # keys the standard encoder refuses to sort
    Point(1), datetime.datetime(2026, 1, 1), {1, 2}, b"bytes", object(),
])
def test_what_the_standard_encoder_refuses_is_refused(value: Any) -> None:
    with pytest.raises((TypeError, ValueError)) as reference:
        REFERENCE.encode(value)
    with pytest.raises(reference.type):
        canonical_json(value)
    with pytest.raises(reference.type):
        digest(value)


def test_integer_keys_are_written_as_the_standard_encoder_writes_them() -> None:
    value = {2: "b", 1: "a", 10: "c"}
    assert canonical_json(value) == REFERENCE.encode(value) == '{"1":"a","2":"b","10":"c"}'


def test_the_fast_encoder_is_in_use_when_orjson_is_installed() -> None:
    pytest.importorskip("orjson")
    assert _canonical.FAST


def test_without_orjson_the_standard_encoder_writes_everything(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util
    import sys

    monkeypatch.setitem(sys.modules, "orjson", None)  # `import orjson` raises ImportError
    spec = importlib.util.spec_from_file_location("anfitrion._canonical_without_orjson",
                                                  _canonical.__file__)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    value = {"b": [1e-7, "é", None], "a": 2**70}
    assert not module.FAST
    assert module.canonical_json(value) == REFERENCE.encode(value) == canonical_json(value)
    assert module.digest(value) == digest(value)
    assert module.canonical_bytes(value) == canonical_bytes(value)
