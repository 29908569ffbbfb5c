"""Tools: registration, schemas from type hints, validation messages, handlers."""

from __future__ import annotations

from typing import Literal

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from anfitrion import Effect, Principal, Provenance, Tool, Toolbox, ToolContext
from anfitrion._tools import OfferContext
from anfitrion.exceptions import ArgumentError, ToolDefinitionError


def make_toolbox() -> Toolbox:
    tools = Toolbox()

    @tools.tool(effect=Effect.READ)
    def get_weather(location: str, units: Literal["celsius", "fahrenheit"] = "celsius") -> dict:
        """Get the current weather for a given location.

        Args:
            location: City and country, e.g. "Lisboa, PT".
            units: Temperature units.
        """
        return {"location": location, "units": units}

    return tools


def test_schema_comes_from_type_hints_and_docstring() -> None:
    tool = make_toolbox().get("get_weather")
    assert tool is not None
    assert tool.description == "Get the current weather for a given location."
    assert tool.input_schema == {
        "type": "object",
        "properties": {
            "location": {"type": "string", "description": 'City and country, e.g. "Lisboa, PT".'},
            "units": {"enum": ["celsius", "fahrenheit"], "type": "string",
                      "default": "celsius", "description": "Temperature units."},
        },
        "required": ["location"],
        "additionalProperties": False,
    }


def test_effect_defaults_to_write_and_provenance_to_untrusted() -> None:
    tools = Toolbox()

    @tools.tool
    def touch(path: str) -> str:
        """Touch a file."""
        return path

    assert touch.effect is Effect.WRITE
    assert touch.provenance is Provenance.UNTRUSTED


@pytest.mark.parametrize("name", ["", "a" * 65, "has space", "semi;colon", "ünïcode", "a/b"])
def test_invalid_tool_names_are_refused(name: str) -> None:
    with pytest.raises(ToolDefinitionError, match="must match"):
        Tool.from_schema(name, {"type": "object"}, lambda a: a)


def test_duplicate_names_are_an_error_at_registration() -> None:
    tools = make_toolbox()
    with pytest.raises(ToolDefinitionError, match="already registered"):
        tools.add(Tool.from_schema("get_weather", {"type": "object"}, lambda a: a))


def test_unknown_properties_are_rejected_by_default() -> None:
    tool = make_toolbox().get("get_weather")
    assert tool is not None
    with pytest.raises(ArgumentError, match="unexpected properties 'extra'"):
        tool.validate({"location": "Lisboa", "extra": 1})


def test_raw_schema_objects_are_closed_unless_they_allow_more() -> None:
    closed = Tool.from_schema("t", {"type": "object", "properties": {"a": {"type": "string"}}},
                              lambda a: a)
    assert closed.input_schema["additionalProperties"] is False
    opened = Tool.from_schema("u", {"type": "object", "additionalProperties": True}, lambda a: a)
    assert opened.validate({"anything": 1}) == {"anything": 1}


def test_a_free_form_object_takes_any_key() -> None:
    """``{"type": "object"}`` without ``properties`` is an options map: its keys are data."""
    root = Tool.from_schema("t", {"type": "object"}, lambda **a: a)
    assert root.validate({"any": 1, "key": [2]}) == {"any": 1, "key": [2]}
    nested = Tool.from_schema("u", {"type": "object", "required": ["schema"],
                                    "properties": {"schema": {"type": "object"}}}, lambda s: s)
    echoed = {"$schema": "x", "$defs": {"a": {}}, "additionalProperties": False}
    assert nested.validate({"schema": echoed}) == {"schema": echoed}


def test_where_properties_are_declared_no_other_key_gets_past() -> None:
    """The attack closing prevents: a key the policy's constraints never name (``Path`` beside
    a constrained ``path``), at the root, beside a free-form value, in a nested declared
    object, in a ``$defs`` entry reached by ``$ref``, or in an ``anyOf`` branch."""
    schema = {"type": "object",
              "properties": {"path": {"type": "string"}, "options": {"type": "object"},
                             "target": {"type": "object", "properties": {"host": {}}},
                             "via": {"$ref": "#/$defs/via"},
                             "either": {"anyOf": [{"properties": {"a": {}}},
                                                  {"properties": {"b": {}}}]}},
              "$defs": {"via": {"properties": {"hop": {}}}}}
    tool = Tool.from_schema("t", schema, lambda **a: a)
    assert tool.validate({"path": "/srv", "options": {"Path": "/etc"}})["options"] == {
        "Path": "/etc"}
    for smuggled in ({"path": "/srv", "Path": "/etc"},
                     {"target": {"host": "h", "path": "/etc"}},
                     {"via": {"hop": 1, "path": "/etc"}},
                     {"either": {"a": 1, "path": "/etc"}}):
        with pytest.raises(ArgumentError, match=r"unexpected properties '[Pp]ath'|not valid"):
            tool.validate(smuggled)


def test_a_property_named_like_a_keyword_is_closed_like_any_other() -> None:
    """Closing knows maps of schemas from schemas: a property called ``if``, ``not`` or
    ``properties`` is a property, and its declared object stays closed."""
    for name in ("if", "not", "properties", "const"):
        tool = Tool.from_schema("t", {"type": "object", "properties": {
            name: {"type": "object", "properties": {"a": {"type": "string"}}}}},
            lambda **a: a)
        with pytest.raises(ArgumentError, match="unexpected properties 'b'"):
            tool.validate({name: {"a": "x", "b": "y"}})


def test_conditions_are_not_closed_so_they_mean_what_the_author_wrote() -> None:
    """``if`` and ``not`` are conditions: closing them would make ``if`` false whenever
    another key is present (``else`` applied to a call the author meant for ``then``)."""
    schema = {"type": "object",
              "properties": {"contactMethod": {"enum": ["phone", "email"]},
                             "phone": {"type": "string"}, "email": {"type": "string"}},
              "if": {"properties": {"contactMethod": {"const": "phone"}},
                     "required": ["contactMethod"]},
              "then": {"required": ["phone"]}, "else": {"required": ["email"]}}
    tool = Tool.from_schema("t", schema, lambda **a: a)
    assert tool.validate({"contactMethod": "phone", "phone": "1"})["phone"] == "1"
    with pytest.raises(ArgumentError, match="'phone' is a required property"):
        tool.validate({"contactMethod": "phone", "email": "a@b"})


def test_validation_error_names_the_field_and_the_problem() -> None:
    tool = make_toolbox().get("get_weather")
    assert tool is not None
    with pytest.raises(ArgumentError) as info:
        tool.validate({"location": 5})
    assert info.value.field == "location"
    assert "location: 5 is not of type 'string'" in str(info.value)


def test_missing_required_argument_is_reported() -> None:
    tool = make_toolbox().get("get_weather")
    assert tool is not None
    with pytest.raises(ArgumentError, match="'location' is a required property"):
        tool.validate({})


def test_arguments_must_be_an_object() -> None:
    tool = make_toolbox().get("get_weather")
    assert tool is not None
    with pytest.raises(ArgumentError, match="must be a JSON object, got list"):
        tool.validate([1, 2])


def test_business_validator_runs_after_the_schema() -> None:
    def only_positive(args: object) -> None:
        assert isinstance(args, dict)
        if args["amount"] <= 0:
            raise ValueError("amount must be positive")

    tool = Tool.from_schema("pay", {"type": "object", "properties": {"amount": {"type": "number"}},
                                    "required": ["amount"]}, lambda a: a,
                            validator=only_positive)
    with pytest.raises(ArgumentError, match="amount must be positive"):
        tool.validate({"amount": -1})
    assert tool.validate({"amount": 3}) == {"amount": 3}


class Address(pydantic.BaseModel):
    city: str
    country: str = pydantic.Field(min_length=2, max_length=2)


def test_pydantic_models_become_schemas_and_are_converted() -> None:
    seen: list[Address] = []
    tools = Toolbox()

    @tools.tool(effect=Effect.READ)
    def locate(address: Address) -> str:
        """Locate an address."""
        seen.append(address)
        return address.city

    args = locate.validate({"address": {"city": "Lisboa", "country": "PT"}})
    assert isinstance(args["address"], Address)
    with pytest.raises(ArgumentError, match="unexpected properties 'zip'"):
        locate.validate({"address": {"city": "Lisboa", "country": "PT", "zip": "1000"}})
    with pytest.raises(ArgumentError, match=r"address\.country"):
        locate.validate({"address": {"city": "Lisboa", "country": "PTX"}})


def test_context_and_principal_are_injected_not_shown() -> None:
    tools = Toolbox()

    @tools.tool(effect=Effect.READ)
    def whoami(context: ToolContext, principal: Principal, greeting: str) -> str:
        """Say who is asking."""
        return f"{greeting} {principal.id} {context.call_id}"

    assert set(whoami.input_schema["properties"]) == {"greeting"}


@pytest.mark.anyio
async def test_sync_and_async_handlers_both_work() -> None:
    tools = Toolbox()

    @tools.tool(effect=Effect.READ)
    def sync_tool(x: int) -> int:
        """Double."""
        return x * 2

    @tools.tool(effect=Effect.READ)
    async def async_tool(x: int) -> int:
        """Triple."""
        return x * 3

    ctx = ToolContext(Principal("alice"), "s", "c", "sync_tool")
    assert await sync_tool.handler({"x": 2}, ctx) == 4
    assert await async_tool.handler({"x": 2}, ctx) == 6


def test_untyped_parameters_and_varargs_are_definition_errors() -> None:
    def untyped(x):  # type: ignore[no-untyped-def]
        return x

    def varargs(*args: int) -> int:
        return 0

    with pytest.raises(ToolDefinitionError, match="needs a type hint"):
        Tool.from_function(untyped)
    with pytest.raises(ToolDefinitionError, match=r"\*args"):
        Tool.from_function(varargs)


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        ({"type": "string"}, "must have type 'object'"),
        ({"type": "object", "properties": {"a": {"$ref": "https://evil.example/s.json"}}},
         "remote \\$ref"),
        ({"type": "object", "properties": {"a": {"type": "nonsense"}}}, "invalid input schema"),
        ("not a schema", "must be a JSON object"),
    ],
)
def test_bad_input_schemas_are_refused(schema: object, problem: str) -> None:
    with pytest.raises(ToolDefinitionError, match=problem):
        Tool.from_schema("t", schema, lambda a: a)  # type: ignore[arg-type]


def test_deep_or_huge_schemas_are_refused() -> None:
    deep: dict[str, object] = {"type": "object"}
    node = deep
    for _ in range(40):
        child: dict[str, object] = {"type": "object"}
        node["properties"] = {"x": child}
        node = child
    with pytest.raises(ToolDefinitionError, match="deeper"):
        Tool.from_schema("t", deep, lambda a: a)
    huge = {"type": "object", "description": "x" * 70_000}
    with pytest.raises(ToolDefinitionError, match="bytes"):
        Tool.from_schema("t", huge, lambda a: a)


def test_definition_hash_changes_with_any_defining_field() -> None:
    a = Tool.from_schema("t", {"type": "object"}, lambda a: a, description="one")
    b = Tool.from_schema("t", {"type": "object"}, lambda a: a, description="two")
    c = Tool.from_schema("t", {"type": "object"}, lambda a: a, description="one",
                         effect=Effect.READ)
    assert len({a.definition_hash, b.definition_hash, c.definition_hash}) == 3


@pytest.mark.anyio
async def test_toolbox_offers_a_filtered_subset_and_includes_sources() -> None:
    tools = make_toolbox()
    other = Toolbox([Tool.from_schema("other", {"type": "object"}, lambda a: a)])
    tools.include(other)
    ctx = OfferContext(Principal("alice"), "s")
    assert [t.name for t in await tools.list_tools(ctx)] == ["get_weather", "other"]
    only = Toolbox(list(tools), offer=lambda tool, c: tool.name != "other")
    assert [t.name for t in await only.list_tools(ctx)] == ["get_weather"]
    assert [t.name for t in tools.only("get_weather")] == ["get_weather"]
    with pytest.raises(ToolDefinitionError):
        tools.only("missing")


@pytest.mark.anyio
async def test_two_sources_offering_the_same_name_is_an_error() -> None:
    tools = make_toolbox()
    tools.include(make_toolbox())
    with pytest.raises(ToolDefinitionError, match="two tool sources offer"):
        await tools.list_tools(OfferContext(Principal("alice"), "s"))


@given(st.dictionaries(st.text(max_size=10), st.integers() | st.text(max_size=10) | st.none(),
                       max_size=5))
def test_validation_never_crashes_only_rejects(arguments: dict[str, object]) -> None:
    tool = make_toolbox().get("get_weather")
    assert tool is not None
    try:
        tool.validate(arguments)
    except ArgumentError as exc:
        assert str(exc)


flat_schema = {
    "type": "object",
    "properties": {
        "s": {"type": "string", "minLength": 1, "maxLength": 5},
        "i": {"type": "integer", "minimum": 0, "maximum": 10},
        "n": {"type": "number"},
        "b": {"type": "boolean"},
        "e": {"type": "string", "enum": ["a", "b"]},
    },
    "required": ["s"],
}
json_scalars = (st.none() | st.booleans() | st.integers(-20, 20) | st.text(max_size=7)
                | st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(["a", "b"]))


@settings(deadline=None)  # a property, not a timing: a loaded worker's first example is slow
@given(st.dictionaries(st.sampled_from(["s", "i", "n", "b", "e", "x"]), json_scalars, max_size=6))
def test_the_fast_validation_path_agrees_with_json_schema(arguments: dict[str, object]) -> None:
    """The fast path may only accept what the full validator accepts."""
    import jsonschema

    tool = Tool.from_schema("flat", flat_schema, lambda a: a)
    fast = tool._schema.fast
    assert fast is not None
    expected = jsonschema.Draft202012Validator(tool.input_schema).is_valid(arguments)
    try:
        tool.validate(arguments)
        accepted = True
    except ArgumentError:
        accepted = False
    assert accepted == expected
    if fast(arguments):
        assert expected


@settings(deadline=None)
@given(st.dictionaries(st.sampled_from(["s", "i", "n", "b", "e", "x"]), json_scalars, max_size=6))
def test_the_fast_path_of_an_open_schema_agrees_with_json_schema(
        instance: dict[str, object]) -> None:
    """A schema without ``additionalProperties`` (an MCP tool's output schema, as the SDKs
    write it) allows any other property: its fast check says "valid" only where the full
    validator does, and the errors found are the full validator's."""
    import jsonschema

    from anfitrion._tools import CheckedSchema

    checked = CheckedSchema.of(flat_schema)
    assert "additionalProperties" not in flat_schema and checked.fast is not None
    expected = jsonschema.Draft202012Validator(flat_schema).is_valid(instance)
    if checked.fast(instance):
        assert expected
    assert (not checked.errors(instance)) == expected
