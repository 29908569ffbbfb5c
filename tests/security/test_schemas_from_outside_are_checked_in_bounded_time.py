"""A schema the host did not write (an MCP server's, a raw-schema tool's) cannot make validation
run for long: backtracking patterns refuse the schema, and every check has a budget."""

from __future__ import annotations

import contextlib
import itertools
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from anfitrion._tools import Tool
from anfitrion.exceptions import ArgumentError, ToolDefinitionError

ATOMS = ["a", "[a-z]", r"\w", ".", "(?:ab)"]
QUANTIFIERS = ["+", "*", "{1,9}", "{2,}"]


def _nested_quantifiers() -> list[str]:
    return [f"^({atom}{inner}){outer}$" for atom, inner, outer
            in itertools.product(ATOMS, QUANTIFIERS, QUANTIFIERS)]


def _overlapping_alternations() -> list[str]:
    pairs = [("a", "a"), ("a", "aa"), ("ab", "a."), ("a", "ab"), (r"\w\w", r"\d\s"), ("a", "a?")]
    return [f"({x}|{y}){q}" for (x, y), q in itertools.product(pairs, QUANTIFIERS)]


EVIL_PATTERNS = [
    *_nested_quantifiers(),
    *_overlapping_alternations(),
    r"(a)\1", r"(\w+)\s\1", r"(?P<x>a)(?P=x)",           # backreferences
    r"(?=a)a", r"(?!b).", r"(?<=a)b", r"(?<!a)b",        # lookaround
    r"(a)?(?(1)b|c)",                                    # conditionals
    r"^(([a-z])+.)+[A-Z]([a-z])+$", r"^(\w+\s?)*$",      # published ReDoS examples (OWASP)
]


def _placements(pattern: str) -> list[dict[str, Any]]:
    """Every place in a schema where a pattern is run on the arguments."""
    return [
        {"type": "object", "properties": {"x": {"type": "string", "pattern": pattern}}},
        {"type": "object", "patternProperties": {pattern: {"type": "string"}}},
        {"type": "object", "propertyNames": {"pattern": pattern}},
        {"type": "object", "properties": {"x": {"type": "array",
                                                "items": {"pattern": pattern}}}},
        {"type": "object", "$defs": {"p": {"pattern": pattern}},
         "properties": {"x": {"anyOf": [{"type": "integer"}, {"$ref": "#/$defs/p"}]}}},
        {"type": "object", "properties": {"x": {"type": "object", "additionalProperties": {
            "type": "object", "patternProperties": {pattern: {}}}}}},
    ]


@pytest.mark.parametrize("pattern", EVIL_PATTERNS)
def test_a_backtracking_pattern_refuses_the_schema_wherever_it_hides(pattern: str) -> None:
    for schema in _placements(pattern):
        with pytest.raises(ToolDefinitionError, match=r"pattern .* is refused: the regular "
                                                      "expression uses"):
            Tool.from_schema("t", schema, lambda a: a)


def test_the_reported_attack_is_refused_before_any_argument_is_seen() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string", "pattern": "^(a+)+$"}}}
    with pytest.raises(ToolDefinitionError, match="repeat inside a repeat"):
        Tool.from_schema("t", schema, lambda a: a)


@pytest.mark.parametrize("pattern", [r"^[a-z0-9.-]+$", r"^\d{4}-\d{2}-\d{2}$", "^x-",
                                     r"^[A-Za-z_][A-Za-z0-9_]*$", "a*a*a*a*b"])
def test_safe_patterns_still_match_with_ecma_semantics(pattern: str) -> None:
    tool = Tool.from_schema("t", {"type": "object", "properties": {
        "x": {"type": "string", "pattern": pattern}}}, lambda a: a)
    with pytest.raises(ArgumentError):
        tool.validate({"x": "\n"})


def test_a_value_longer_than_a_pattern_can_take_is_refused_not_matched() -> None:
    tool = Tool.from_schema("t", {"type": "object", "properties": {
        "x": {"type": "string", "pattern": "a*a*a*a*a*b"}}}, lambda a: a)
    assert tool.validate({"x": "aab"}) == {"x": "aab"}
    with pytest.raises(ArgumentError, match="too long to check against the pattern"):
        tool.validate({"x": "a" * 5000})


def test_long_property_names_against_pattern_properties_are_refused_not_matched() -> None:
    tool = Tool.from_schema("t", {"type": "object", "patternProperties": {
        "a*a*a*a*a*b": {"type": "string"}}, "additionalProperties": False}, lambda a: a)
    with pytest.raises(ArgumentError, match="too long to check"):
        tool.validate({"a" * 5000: "x"})


def test_many_values_cannot_add_up_to_too_much_pattern_matching() -> None:
    tool = Tool.from_schema("t", {"type": "object", "properties": {"x": {
        "type": "array", "items": {"type": "string", "pattern": "a*a*b"}}}}, lambda a: a)
    with pytest.raises(ArgumentError, match="too much pattern matching"):
        tool.validate({"x": ["a" * 200] * 1000})


def _doubling_refs(levels: int) -> dict[str, Any]:
    defs: dict[str, Any] = {f"a{i}": {"allOf": [{"$ref": f"#/$defs/a{i + 1}"}] * 2}
                            for i in range(levels)}
    defs[f"a{levels}"] = {"type": "string"}
    return {"type": "object", "$defs": defs, "properties": {"x": {"$ref": "#/$defs/a0"}}}


def _ref_chain(length: int) -> dict[str, Any]:
    defs: dict[str, Any] = {f"a{i}": {"$ref": f"#/$defs/a{i + 1}"} for i in range(length)}
    defs[f"a{length}"] = {"type": "string"}
    return {"type": "object", "$defs": defs, "properties": {"x": {"$ref": "#/$defs/a0"}}}


@pytest.mark.parametrize(("schema", "problem"), [
    (_doubling_refs(30), "applies more than 1024 subschemas to one value"),
    (_ref_chain(1500), "chains more than 64"),
    ({"type": "object", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"anyOf": [
        {"$ref": "#/$defs/a"}]}}, "properties": {"x": {"$ref": "#/$defs/a"}}},
     r"\$ref cycle that never descends"),
    ({"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(2100)}},
     "more than 2048 subschemas"),
    ({"type": "object", "properties": {"x": {"multipleOf": 1e-300}}}, "multipleOf"),
    ({"type": "object", "properties": {"x": {"multipleOf": 10**120}}}, "multipleOf"),
    ({"type": "object", "properties": {"x": {"$dynamicRef": "https://evil.example/s"}}},
     r"remote \$ref"),
    ({"type": "object", "patternProperties": {"^x": {}}, "unevaluatedProperties": False},
     "patternProperties with unevaluatedProperties"),
])
def test_schemas_that_explode_when_validated_are_refused(schema: dict[str, Any],
                                                         problem: str) -> None:
    with pytest.raises(ToolDefinitionError, match=problem):
        Tool.from_schema("t", schema, lambda a: a)


def test_a_small_recursive_schema_cannot_take_exponential_steps_on_deep_arguments() -> None:
    branch = {"type": "array", "items": {"$ref": "#/$defs/n"}}
    schema = {"type": "object", "$defs": {"n": {"anyOf": [branch, dict(branch)]}},
              "properties": {"x": {"$ref": "#/$defs/n"}}}
    tool = Tool.from_schema("t", schema, lambda a: a)
    deep: Any = 1
    for _ in range(28):
        deep = [deep]
    with pytest.raises(ArgumentError, match=r"takes more than .* steps"):
        tool.validate({"x": deep})
    assert tool.validate({"x": [[[]]]}) == {"x": [[[]]]}


def test_unique_items_of_many_objects_is_checked_without_comparing_every_pair() -> None:
    tool = Tool.from_schema("t", {"type": "object", "properties": {"x": {
        "type": "array", "uniqueItems": True}}}, lambda a: a)
    items: list[Any] = [{"a": i} for i in range(20_000)]
    assert tool.validate({"x": items})["x"] is items
    with pytest.raises(ArgumentError, match="non-unique"):
        tool.validate({"x": [*items, {"a": 7}]})
    with pytest.raises(ArgumentError, match="non-unique"):
        tool.validate({"x": [1, 1.0]})
    assert tool.validate({"x": [1, True, "1", [1], {"1": 1}]})


def test_format_is_an_annotation_and_runs_no_regular_expression() -> None:
    tool = Tool.from_schema("t", {"type": "object", "properties": {"x": {
        "type": "string", "format": "regex"}, "y": {"format": "email"}}}, lambda a: a)
    assert tool.validate({"x": "(a+)+$" * 10, "y": "not an address"})


GUARD = textwrap.dedent("""
    import json, sys
    from anfitrion.exceptions import ToolDefinitionError
    from anfitrion._tools import ArgumentError, Tool
    outcomes = []
    for schema, arguments in json.loads(sys.stdin.read()):
        try:
            tool = Tool.from_schema("t", schema, lambda a: a)
            tool.validate(arguments)
            outcomes.append("valid")
        except ToolDefinitionError:
            outcomes.append("refused schema")
        except ArgumentError:
            outcomes.append("refused arguments")
    print(json.dumps(outcomes))
""")


def test_every_hostile_schema_and_argument_pair_finishes() -> None:
    """A guard, not a timing: each pair is refused or checked; the subprocess must end."""
    import json

    attack = "a" * 33 + "!"
    cases: list[Any] = []
    for pattern in [*EVIL_PATTERNS[::7], "a*a*a*a*a*a*a*b", "[a-z]*[a-z]*[a-z]*="]:
        for schema in _placements(pattern):
            cases.append([schema, {"x": attack, attack: attack}])
            cases.append([schema, {"x": [attack] * 500, "a" * 3000: {attack: 1}}])
    proc = subprocess.run([sys.executable, "-c", GUARD], input=json.dumps(cases), text=True,
                          capture_output=True, timeout=120, check=True)
    outcomes = json.loads(proc.stdout)
    assert len(outcomes) == len(cases)
    assert set(outcomes) <= {"valid", "refused schema", "refused arguments"}
    assert "refused schema" in outcomes and "refused arguments" in outcomes


_PATTERN_PARTS = st.sampled_from(["a", "b", "[a-z]", r"\d", ".", "(a|b)", "(?:ab)", "^", "$",
                                  r"\1", "(?=a)", "x"])
_QUANTS = st.sampled_from(["", "*", "+", "?", "{2,5}", "*?"])
_PATTERNS = st.lists(st.tuples(_PATTERN_PARTS, _QUANTS), min_size=1, max_size=6).map(
    lambda parts: "".join(p + q for p, q in parts)).flatmap(
    lambda p: st.sampled_from([p, f"({p})+", f"({p}|{p})*", f"^{p}$"]))


def _schemas() -> st.SearchStrategy[dict[str, Any]]:
    leaf = st.one_of(
        _PATTERNS.map(lambda p: {"type": "string", "pattern": p}),
        st.just({"type": "integer", "multipleOf": 3}),
        st.just({"type": "array", "uniqueItems": True}),
        st.just({"$ref": "#/$defs/d"}),
    )
    node = st.recursive(leaf, lambda inner: st.one_of(
        st.lists(inner, min_size=1, max_size=3).map(lambda s: {"anyOf": s}),
        st.lists(inner, min_size=1, max_size=3).map(lambda s: {"allOf": s}),
        inner.map(lambda s: {"type": "array", "items": s}),
        st.tuples(_PATTERNS, inner).map(lambda t: {"type": "object",
                                                   "patternProperties": {t[0]: t[1]}}),
    ), max_leaves=6)
    return st.tuples(node, node).map(lambda t: {
        "type": "object", "$defs": {"d": t[1]}, "properties": {"x": t[0]},
        "propertyNames": {"pattern": "^[a-z]{1,12}$|^a+b"}})


_ARGUMENTS = st.recursive(
    st.one_of(st.text(alphabet="ab1 x\n", max_size=40).map(lambda s: s * 20), st.integers()),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(alphabet="abx", max_size=30), inner,
                                            max_size=3)),
    max_leaves=8)


@settings(max_examples=150, deadline=None)
@given(_schemas(), _ARGUMENTS)
def test_a_hostile_schema_is_refused_or_validates_without_crashing(
        schema: dict[str, Any], value: Any) -> None:
    try:
        tool = Tool.from_schema("t", schema, lambda a: a)
    except ToolDefinitionError:
        return
    with contextlib.suppress(ArgumentError):
        tool.validate({"x": value})
