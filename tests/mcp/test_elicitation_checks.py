"""The checks of an elicitation request (the flat schema MCP allows, no secrets) and the routing
of a server's messages to the call in flight, without a server."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")
import mcp.types as mt

from anfitrion.mcp._elicitation import (
    Elicitation,
    ElicitationAnswer,
    answer_elicitation,
    schema_problem,
    secret_problem,
    with_defaults,
)
from anfitrion.mcp._relay_routing import InFlight, PendingCall


def form(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


@pytest.mark.parametrize("schema", [
    form(name={"type": "string", "title": "Name", "minLength": 1, "maxLength": 40,
               "format": "email", "default": "a@b.example"}),
    form(age={"type": "integer", "minimum": 0, "maximum": 150, "default": 3},
         score={"type": "number", "default": 9.5}, ok={"type": "boolean", "default": True}),
    form(colour={"type": "string", "enum": ["red", "green"], "enumNames": ["Red", "Green"]},
         size={"type": "string", "oneOf": [{"const": "s", "title": "Small"}]}),
    form(tags={"type": "array", "items": {"type": "string", "enum": ["a", "b"]},
               "minItems": 1, "default": ["a"]},
         more={"type": "array", "items": {"anyOf": [{"const": "x", "title": "X"}]}}),
    {**form(name={"type": "string"}), "required": ["name"], "title": "T",
     "$schema": "https://json-schema.org/draft/2020-12/schema"},
])
def test_the_flat_primitive_schemas_mcp_allows_are_accepted(schema: dict[str, Any]) -> None:
    assert schema_problem(schema) is None


@pytest.mark.parametrize(("schema", "reason"), [
    ({"type": "array"}, "not an object schema"),
    (form(), "1 to 32 properties"),
    (form(**{f"f{i}": {"type": "string"} for i in range(33)}), "1 to 32 properties"),
    (form(a={"type": "object", "properties": {}}), "has type 'object'"),
    (form(a={"type": "string", "pattern": "^(a+)+$"}), "has 'pattern'"),
    (form(a={"$ref": "#/x"}), "has type 'None'"),
    (form(a={"type": "string", "format": "regex"}), "has format 'regex'"),
    (form(a={"type": "string", "enum": [f"v{i}" for i in range(101)]}), "at most 100"),
    (form(a={"type": "string", "enum": ["x"], "enumNames": ["X", "Y"]}), "enumNames"),
    (form(a={"type": "integer", "default": 1.5}), "default that is not a integer"),
    (form(a={"type": "boolean", "default": "yes"}), "default that is not a boolean"),
    (form(a={"type": "number", "minimum": True}), "minimum that is not a number"),
    (form(a={"type": "string", "description": "x" * 501}), "at most 500"),
    (form(a={"type": "array", "items": {"type": "object"}}), "enum strings"),
    (form(**{"a b": {"type": "string"}}), "field name 'a b'"),
    ({**form(a={"type": "string"}), "required": ["b"]}, "'required'"),
    ({**form(a={"type": "string"}), "additionalProperties": True}, "additionalProperties"),
    ({**form(a={"type": "string"}), "$defs": {}}, "'$defs'"),
    (form(a={"type": "string", "default": "x" * 40_000}), "bytes (at most 32768)"),
])
def test_hostile_or_unknown_schemas_are_refused(schema: Any, reason: str) -> None:
    problem = schema_problem(schema)
    assert problem is not None and reason in problem, problem


@pytest.mark.parametrize(("message", "properties", "found"), [
    ("Sign in", {"password": {"type": "string"}}, "pass"),
    ("Sign in", {"apiKey": {"type": "string"}}, "api key"),
    ("Sign in", {"API_KEY": {"type": "string"}}, "api key"),
    ("Sign in", {"code": {"type": "string", "title": "One-time code"}}, "one time code"),
    ("Sign in", {"x": {"type": "string", "description": "your GitHub token"}}, "token"),
    ("Sign in", {"x": {"type": "string", "format": "password"}}, "format 'password'"),
    ("Enter your password to continue", {"ok": {"type": "boolean"}}, "password"),
    ("Confirm", {"pin": {"type": "string"}}, "pin"),
])
def test_requests_for_secrets_are_found(message: str, properties: dict[str, Any],
                                        found: str) -> None:
    problem = secret_problem(message, form(**properties))
    assert problem is not None and found in problem, problem


@pytest.mark.parametrize(("message", "properties"), [
    ("Who are you?", {"name": {"type": "string"}, "author": {"type": "string"}}),
    ("Pick a colour", {"colour": {"type": "string", "enum": ["red"]},
                       "spinner": {"type": "boolean"}}),
])
def test_ordinary_questions_are_not_taken_for_secrets(message: str,
                                                      properties: dict[str, Any]) -> None:
    assert secret_problem(message, form(**properties)) is None


def test_defaults_fill_only_what_the_answer_left_out() -> None:
    schema = form(a={"type": "string", "default": "x"}, b={"type": "integer", "default": 2},
                  c={"type": "boolean"})
    assert with_defaults(schema, {"a": "mine"}) == {"a": "mine", "b": 2}


def test_hidden_characters_are_made_visible_before_the_person_reads() -> None:
    seen: list[Elicitation] = []

    async def person(asked: Elicitation) -> ElicitationAnswer:
        seen.append(asked)
        return ElicitationAnswer("decline")

    params = mt.ElicitRequestFormParams(message="Name?\u202e", requested_schema=form(
        n={"type": "string", "title": "N\u200b"}))
    result, detail = anyio.run(lambda: answer_elicitation(
        "s", params, person, reveal=lambda t: t.replace("\u202e", "<RLO>").replace(
            "\u200b", "<ZWSP>")))
    assert isinstance(result, mt.ElicitResult) and result.action == "decline"
    assert seen[0].message == "Name?<RLO>" and seen[0].schema["properties"]["n"]["title"] == \
        "N<ZWSP>"
    assert "hidden characters made visible" in detail


def test_a_message_goes_to_the_only_call_in_flight_and_never_to_a_guess() -> None:
    calls = InFlight()
    assert calls.owner().call is None and not calls.owner().ambiguous
    first, second = PendingCall(1, "s.a", "one"), PendingCall(2, "s.b", "two")
    calls.add(first)
    assert calls.owner().call is first
    calls.add(second)
    owner = calls.owner()
    assert owner.call is None and owner.ambiguous and "2 calls" in owner.problem
    assert calls.owner(2).call is second and calls.owner("1").call is first
    assert calls.owner(3).call is None and not calls.owner(3).ambiguous
    calls.remove(first)
    assert calls.owner().call is second
