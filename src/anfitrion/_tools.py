"""Tools: what the model may ask the host to run.

A :class:`Tool` is a name, a description written for the model, a JSON Schema for its input, a
declared :class:`Effect` and :class:`~anfitrion._conversation.Provenance`, and a handler. Tools know
nothing of policy. A :class:`Toolbox` is a registry and a :class:`ToolSource`; other sources (an
MCP server, a filtered view) plug into it, and the host asks it each turn what to offer.

Example:
    >>> tools = Toolbox()
    >>> @tools.tool(effect=Effect.READ)
    ... def get_weather(location: str) -> dict:
    ...     '''Get the current weather for a given location.'''
    ...     return {"location": location, "temp_c": 15}
    >>> tools.get("get_weather").input_schema["required"]
    ['location']
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import math
import re
import typing
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, TypeAlias, overload, runtime_checkable
from urllib.parse import unquote as urllib_unquote

import anyio.to_thread
import jsonschema
import pydantic
from jsonschema.validators import Draft202012Validator

from ._canonical import canonical_json, digest
from ._constraints import Matches
from ._conversation import JsonValue, Provenance
from ._dataflow import Dataflow
from ._effects import EffectScope, check_effect_template
from ._json import check_json_value
from ._principal import Principal
from .exceptions import ArgumentError, InputError, JsonError, ToolDefinitionError

__all__ = [
    "BoundCall",
    "Effect",
    "OfferContext",
    "Tool",
    "ToolContext",
    "ToolDefinition",
    "ToolSource",
    "Toolbox",
]

TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
MAX_SCHEMA_BYTES = 64 * 1024
MAX_SCHEMA_DEPTH = 32
MAX_SUBSCHEMAS = 2048
"""Schema objects in one input schema (a 64 KiB schema could hold ten times more)."""
MAX_IN_PLACE_EXPANSION = 1024
"""Subschemas applied to one value through ``$ref``, ``allOf``, ``anyOf``, … (a chain of
references that doubles at each step stays small on disk and explodes when validated)."""
MAX_IN_PLACE_DEPTH = 64
"""``$ref`` (or ``allOf``, …) chained within one value."""
VALIDATION_STEPS = 200_000
"""Keyword evaluations one validation may take; past it the arguments are refused."""
PATTERN_STEPS = 5 * 10**7
"""Estimated regular-expression steps one validation may take (all patterns together)."""
DEFAULT_MAX_RESULT_CHARS = 16 * 1024


class Effect(StrEnum):
    """What running a tool does to the world. Undeclared means WRITE: fail safe."""

    READ = "read"
    WRITE = "write"


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a running tool may know about the call: given to handlers that ask for it."""

    principal: Principal
    session_id: str
    call_id: str
    tool_name: str
    turn: int = 0


@dataclass(frozen=True, slots=True)
class OfferContext:
    """What a tool source may know when the host asks which tools to offer this turn."""

    principal: Principal
    session_id: str
    turn: int = 0


@dataclass(frozen=True, slots=True)
class ToolDefinition:
    """What a model sees of a tool: the only part adapters translate."""

    name: str
    description: str
    input_schema: Mapping[str, JsonValue]


Handler: TypeAlias = Callable[[dict[str, Any], ToolContext], Awaitable[Any]]
Validator: TypeAlias = Callable[[Mapping[str, Any]], None]


def _schema_depth_ok(schema: Any, depth: int = 0) -> bool:
    if depth > MAX_SCHEMA_DEPTH:
        return False
    if isinstance(schema, dict):
        return all(_schema_depth_ok(v, depth + 1) for v in schema.values())
    if isinstance(schema, list):
        return all(_schema_depth_ok(v, depth + 1) for v in schema)
    return True


def _refs(schema: Any) -> Iterator[Any]:
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key in ("$ref", "$dynamicRef"):
                yield value
            elif key not in ("const", "enum", "default", "examples"):
                yield from _refs(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from _refs(item)


_NOT_CLOSED = frozenset({"const", "enum", "default", "examples", "if", "not"})
"""Keys whose values are left as written: values, and the conditions ``if`` and ``not`` (a
closed condition would mean another thing: ``if`` false whenever another key is present,
``not`` true)."""


def _close_objects(schema: Any) -> Any:
    """Return *schema* with ``additionalProperties: false`` on every schema that lists
    ``properties`` and says nothing of other keys.

    Where a schema names its properties, a key it does not name is refused unless the schema
    explicitly allows it: a policy constraint written for the declared properties cannot be
    side-stepped by a look-alike or extra key the tool might read. An object schema that lists
    no properties (``{"type": "object"}``: an options map, a JSON document) is free-form by
    its author's intent and stays open; its keys are data, never names a policy can constrain.
    """
    if isinstance(schema, list):
        return [_close_objects(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: v if k in _NOT_CLOSED
           else {name: _close_objects(sub) for name, sub in v.items()}
           if k in _SCHEMA_MAPS and isinstance(v, dict) else _close_objects(v)
           for k, v in schema.items()}
    if "properties" in out and not out.keys() & {"additionalProperties", "patternProperties",
                                                 "unevaluatedProperties"}:
        out["additionalProperties"] = False
    return out


# -- bounds on schemas the host did not write ------------------------------------------------
#
# A schema from an MCP server or a raw-schema tool is hostile until checked. Validating it must
# take bounded time, whatever the arguments: patterns must be ones the policy's own `Matches`
# constraint accepts (no construct that backtracks exponentially), a value is matched only up to
# the length the pattern can take, and a validation has a budget of keyword evaluations and of
# regular-expression steps. Past any bound the arguments are refused, never checked for longer.

_NOT_SCHEMAS = frozenset({"const", "enum", "default", "examples"})
_SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions",
                          "dependentSchemas"})
_SCHEMA_LISTS = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
_IN_PLACE_ONE = ("not", "if", "then", "else")
_IN_PLACE_LISTS = ("allOf", "anyOf", "oneOf")


@dataclass(frozen=True, slots=True)
class _SafePattern:
    compiled: re.Pattern[str]
    input_cap: int
    """The longest value this pattern is run on."""
    exponent: int
    """Repeats, plus one for ``search``: a check costs at most ``len ** exponent`` steps."""


@functools.lru_cache(maxsize=1024)
def _safe_pattern(pattern: str) -> _SafePattern:
    """A JSON Schema pattern the host can run in bounded time, or ``ValueError`` saying why.

    The decision is the policy's :class:`~anfitrion._constraints.Matches`: one mechanism
    for every regular expression anfitrion runs on hostile input. JSON Schema patterns *search*
    (they are not anchored), which costs one more factor of the length: the input cap is the
    one `Matches` gives the pattern preceded by ``.*``.
    """
    if not isinstance(pattern, str):
        raise InputError("a pattern must be a string")
    translated = _ecma_translate(pattern)
    try:
        Matches(translated, max_input_length=_STEP_CAP)  # raises on a backtracking construct
        searched = Matches(f"(?s:.*)(?:{translated})", max_input_length=_STEP_CAP)
        compiled = re.compile(translated, re.ASCII)
    except re.error as exc:  # pragma: no cover - Matches compiled it already
        raise InputError(f"invalid regular expression: {exc}") from None
    cap = searched.input_cap
    exponent = 1 if cap >= _STEP_CAP else \
        max(2, math.ceil(math.log(_STEP_CAP) / math.log(cap) - 1e-9))
    return _SafePattern(compiled, cap, exponent)


_STEP_CAP = 10**7  # Matches' own step budget: a cap this high means "one repeat"


class _Budget:
    """What one validation may still spend (kept in a context variable while it runs)."""

    __slots__ = ("patterns", "steps")

    def __init__(self) -> None:
        self.steps = VALIDATION_STEPS
        self.patterns = float(PATTERN_STEPS)


class SchemaBudgetExceeded(ArgumentError):
    """Validating the arguments would take more than the schema bounds allow."""


_BUDGET: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar(
    "anfitrion_schema_budget", default=None)


def _search(pattern: str, value: str) -> bool:
    """ECMA-262 ``pattern`` search, bounded: too long a value or too much work refuses."""
    safe = _safe_pattern(pattern)
    if len(value) > safe.input_cap:
        raise SchemaBudgetExceeded(
            f"a value of {len(value)} characters is too long to check against the pattern "
            f"{pattern[:80]!r} (at most {safe.input_cap})")
    budget = _BUDGET.get()
    if budget is not None:
        budget.patterns -= (len(value) + 1) ** safe.exponent
        if budget.patterns < 0:
            raise SchemaBudgetExceeded("the arguments need too much pattern matching to check")
    return safe.compiled.search(value) is not None


def _schema_children(schema: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    for key, value in schema.items():
        if key in _NOT_SCHEMAS:
            continue
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            for sub_key, sub in value.items():
                yield f"{key}.{sub_key}", sub
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            for index, sub in enumerate(value):
                yield f"{key}[{index}]", sub
        elif isinstance(value, dict):
            yield key, value


def _subschemas(schema: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    if not isinstance(schema, dict):
        return
    yield path, schema
    for key, sub in _schema_children(schema):
        yield from _subschemas(sub, f"{path}.{key}" if path else key)


def _pointer(root: dict[str, Any], ref: str) -> Any:
    if ref == "#":
        return root
    if not ref.startswith("#/"):
        return None  # an anchor: resolved by the validator, expanded as one schema here
    node: Any = root
    for part in ref[2:].split("/"):
        part = urllib_unquote(part).replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def _in_place_expansion(root: dict[str, Any]) -> str | None:
    """Why the schema applies too many subschemas to one value, or ``None``.

    Follows what applies to the *same* value — ``$ref``, ``allOf``/``anyOf``/``oneOf``, ``not``,
    ``if``/``then``/``else``, ``dependentSchemas`` — not what descends into its parts.
    """
    sizes: dict[int, int] = {}
    visiting: set[int] = set()

    def size(schema: Any, depth: int = 0) -> int:
        if not isinstance(schema, dict):
            return 1
        key = id(schema)
        if key in sizes:
            return sizes[key]
        if key in visiting:
            raise _Cycle
        if depth > MAX_IN_PLACE_DEPTH:
            raise _TooDeep
        visiting.add(key)
        deeper = depth + 1
        total = 1
        for name in ("$ref", "$dynamicRef"):
            ref = schema.get(name)
            if isinstance(ref, str):
                total += size(_pointer(root, ref), deeper)
        for name in _IN_PLACE_ONE:
            total += size(schema.get(name), deeper) if name in schema else 0
        for name in _IN_PLACE_LISTS:
            items = schema.get(name)
            if isinstance(items, list):
                total += sum(size(s, deeper) for s in items)
        dependent = schema.get("dependentSchemas")
        if isinstance(dependent, dict):
            total += sum(size(s, deeper) for s in dependent.values())
        visiting.discard(key)
        sizes[key] = min(total, MAX_IN_PLACE_EXPANSION + 1)
        return sizes[key]

    try:
        for _, schema in _subschemas(root):
            if size(schema) > MAX_IN_PLACE_EXPANSION:
                return (f"applies more than {MAX_IN_PLACE_EXPANSION} subschemas to one value "
                        "(nested $ref, allOf, anyOf, oneOf)")
    except _Cycle:
        return "has a $ref cycle that never descends into the arguments"
    except _TooDeep:
        return (f"chains more than {MAX_IN_PLACE_DEPTH} $ref, allOf, anyOf, … applied to one "
                "value")
    return None


class _Cycle(Exception):
    pass


class _TooDeep(Exception):
    pass


def _bounds_problem(schema: dict[str, Any]) -> str | None:
    """What makes *schema* unsafe to validate hostile arguments against, or ``None``."""
    has_pattern_properties = has_unevaluated = False
    for count, (path, sub) in enumerate(_subschemas(schema), 1):
        if count > MAX_SUBSCHEMAS:
            return f"has more than {MAX_SUBSCHEMAS} subschemas"
        where = path or "(root)"
        patterns: list[Any] = []
        if "pattern" in sub:
            patterns.append(sub["pattern"])
        if isinstance(sub.get("patternProperties"), dict):
            has_pattern_properties = True
            patterns.extend(sub["patternProperties"])
        has_unevaluated = has_unevaluated or "unevaluatedProperties" in sub
        for pattern in patterns:
            try:
                _safe_pattern(pattern)
            except ValueError as exc:
                return f"{where}: pattern {str(pattern)[:80]!r} is refused: {exc}"
        multiple = sub.get("multipleOf")
        if isinstance(multiple, (int, float)) and not isinstance(multiple, bool) \
                and not (1e-100 <= abs(multiple) <= 1e100):
            return f"{where}: multipleOf {str(multiple)[:40]} is out of range (1e-100 to 1e100)"
        if isinstance(sub.get("$schema"), str) and path:
            return f"{where}: $schema is allowed at the root only"
    if has_pattern_properties and has_unevaluated:
        return "combines patternProperties with unevaluatedProperties (not supported)"
    return _in_place_expansion(schema)


def check_input_schema(name: str, schema: Any) -> dict[str, Any]:
    """Validate a tool's input schema with limits and close its objects.

    Raises:
        ToolDefinitionError: the schema is not a valid, bounded, local object schema.
    """
    if not isinstance(schema, dict):
        raise ToolDefinitionError(f"tool {name!r}: input schema must be a JSON object")
    try:
        check_json_value(schema, max_depth=MAX_SCHEMA_DEPTH + 1)
        size = len(canonical_json(schema).encode("utf-8"))
    except (JsonError, ValueError) as exc:
        raise ToolDefinitionError(f"tool {name!r}: input schema is not plain JSON: {exc}") from None
    if size > MAX_SCHEMA_BYTES:
        raise ToolDefinitionError(f"tool {name!r}: input schema is {size} bytes "
                                  f"(limit {MAX_SCHEMA_BYTES})")
    if not _schema_depth_ok(schema):
        raise ToolDefinitionError(f"tool {name!r}: input schema nests deeper than "
                                  f"{MAX_SCHEMA_DEPTH} levels")
    if schema.get("type") != "object":
        raise ToolDefinitionError(f"tool {name!r}: input schema must have type 'object'")
    for ref in _refs(schema):
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise ToolDefinitionError(f"tool {name!r}: remote $ref {ref!r} is not allowed")
    try:
        Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ToolDefinitionError(f"tool {name!r}: invalid input schema: {exc.message}") from None
    try:
        problem = _bounds_problem(schema)
    except RecursionError:  # pragma: no cover - the depth limits above come first
        problem = "nests too deeply to check"
    if problem:
        raise ToolDefinitionError(f"tool {name!r}: input schema {problem}")
    closed: dict[str, Any] = _close_objects(schema)
    return closed


def _ecma_translate(pattern: str) -> str:
    """JSON Schema patterns are ECMA-262: ``$`` is the very end, not "before a final newline"."""
    out: list[str] = []
    escaped = in_class = False
    for ch in pattern:
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
        elif ch == "$":
            out.append(r"\Z")
            continue
        out.append(ch)
    return "".join(out)


def _ecma_pattern(validator: Any, pattern: str, instance: Any,
                  schema: Mapping[str, Any]) -> Iterator[jsonschema.ValidationError]:
    if isinstance(instance, str) and not _search(pattern, instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: Mapping[str, Any], instance: Any,
                        schema: Mapping[str, Any]) -> Iterator[jsonschema.ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator: Any, additional: Any, instance: Any,
                           schema: Mapping[str, Any]) -> Iterator[jsonschema.ValidationError]:
    # jsonschema's own version matches patternProperties with an unbounded `re.search`
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = schema.get("patternProperties", {})
    extras = [k for k in instance if k not in properties
              and not any(_search(p, k) for p in patterns)]
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        if patterns:
            verb = "does" if len(extras) == 1 else "do"
            listed = ", ".join(map(repr, sorted(extras)))
            yield jsonschema.ValidationError(
                f"{listed} {verb} not match any of the regexes: "
                f"{', '.join(map(repr, sorted(patterns)))}")
        else:
            listed = ", ".join(map(repr, extras))
            yield jsonschema.ValidationError(
                f"Additional properties are not allowed ({listed} "
                f"{'was' if len(extras) == 1 else 'were'} unexpected)")


def _json_key(value: Any) -> Any:
    """A hashable key equal for equal JSON values (``1`` and ``1.0`` alike, ``true`` not)."""
    if isinstance(value, bool) or value is None:
        return ("b", value)
    if isinstance(value, (int, float)):
        return ("n", value)
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, list):
        return ("l", tuple(_json_key(v) for v in value))
    if isinstance(value, dict):
        return ("d", frozenset((k, _json_key(v)) for k, v in value.items()))
    return ("o", repr(value))


def _unique_items(validator: Any, unique: Any, instance: Any,
                  schema: Mapping[str, Any]) -> Iterator[jsonschema.ValidationError]:
    # jsonschema's own version compares unhashable items pairwise: n² for an array of objects
    if unique and validator.is_type(instance, "array"):
        keys = [_json_key(v) for v in instance]
        if len(set(keys)) != len(keys):
            yield jsonschema.ValidationError(f"{_short(instance)} has non-unique elements")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "…"


def _counted(keyword: Callable[..., Any]) -> Callable[..., Any]:
    def run(validator: Any, value: Any, instance: Any, schema: Mapping[str, Any]) -> Any:
        budget = _BUDGET.get()
        if budget is not None:
            budget.steps -= 1
            if budget.steps < 0:
                raise SchemaBudgetExceeded(
                    f"checking the arguments takes more than {VALIDATION_STEPS} steps")
        return keyword(validator, value, instance, schema)
    return run


_KEYWORDS: dict[str, Callable[..., Any]] = {
    **Draft202012Validator.VALIDATORS, "pattern": _ecma_pattern,
    "patternProperties": _pattern_properties, "additionalProperties": _additional_properties,
    "uniqueItems": _unique_items}

ArgumentValidator = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
    Draft202012Validator, {k: _counted(f) for k, f in _KEYWORDS.items()})
"""Draft 2020-12 with ECMA-262 ``pattern`` semantics (``$`` does not accept a final newline;
``\\d``, ``\\w`` and ``\\s`` are ASCII as in JavaScript), bounded: every pattern search and
keyword evaluation is counted against the budget of the validation that runs it (see
:func:`schema_errors`). ``format`` is an annotation (no format is checked)."""


def schema_errors(validator: Any, instance: Any) -> list[jsonschema.ValidationError]:
    """Every error of *instance* against an :data:`ArgumentValidator`, within the bounds.

    Raises:
        SchemaBudgetExceeded: the check would take more than the bounds allow.
    """
    token = _BUDGET.set(_Budget())
    try:
        return sorted(validator.iter_errors(instance),
                      key=lambda e: (len(e.absolute_path), str(e.absolute_path)))
    except RecursionError:
        raise SchemaBudgetExceeded("the schema nests too deeply to check") from None
    finally:
        _BUDGET.reset(token)


_ANNOTATIONS = frozenset({"description", "title", "default", "examples", "$comment"})
_FAST_TYPES: Mapping[str, Callable[[Any], bool]] = {
    "string": lambda v: type(v) is str,
    "integer": lambda v: type(v) is int,
    "number": lambda v: type(v) is int or type(v) is float,
    "boolean": lambda v: type(v) is bool,
    "null": lambda v: v is None,
}


def _fast_property(schema: Any) -> Callable[[Any], bool] | None:
    if not isinstance(schema, dict) or not set(schema) <= _ANNOTATIONS | {
            "type", "enum", "minLength", "maxLength", "minimum", "maximum"}:
        return None
    check = _FAST_TYPES.get(schema.get("type"))  # type: ignore[arg-type]
    if check is None:
        return None
    enum = schema.get("enum")
    if enum is not None:
        if not all(type(e) is str for e in enum):
            return None
        members = frozenset(enum)
        base = check
        check = lambda v: type(v) is str and v in members and base(v)  # noqa: E731
    lo_len, hi_len = schema.get("minLength"), schema.get("maxLength")
    lo, hi = schema.get("minimum"), schema.get("maximum")
    if lo_len is None and hi_len is None and lo is None and hi is None:
        return check
    inner = check

    def bounded(v: Any) -> bool:
        if not inner(v):
            return False
        if type(v) is str and ((lo_len is not None and len(v) < lo_len)
                               or (hi_len is not None and len(v) > hi_len)):
            return False
        return not (type(v) in (int, float) and ((lo is not None and v < lo)
                                                 or (hi is not None and v > hi)))

    return bounded


def _compile_fast(schema: Mapping[str, Any]) -> Callable[[dict[str, Any]], bool] | None:
    """A conservative fast check for flat object schemas: True means valid for certain.

    False means "not sure": the full JSON Schema validator then decides and explains. Schemas
    outside the simple subset (nesting, combinators, refs, patterns) get no fast path.
    """
    if not set(schema) <= _ANNOTATIONS | {"type", "properties", "required",
                                          "additionalProperties"}:
        return None
    # absent additionalProperties is JSON Schema's default: any other property is allowed
    if schema.get("type") != "object" or schema.get("additionalProperties", True) not in (
            False, True):
        return None
    props = schema.get("properties", {})
    checks = {name: _fast_property(sub) for name, sub in props.items()}
    if any(c is None for c in checks.values()):
        return None
    required = frozenset(schema.get("required", ()))
    closed = schema.get("additionalProperties") is False
    known = frozenset(props)
    pairs = tuple(checks.items())

    def fast(instance: dict[str, Any]) -> bool:
        if closed and not instance.keys() <= known:
            return False
        if not required <= instance.keys():
            return False
        return all(check(instance[name]) for name, check in pairs  # type: ignore[misc]
                   if name in instance)

    return fast


@dataclass(frozen=True, slots=True)
class CheckedSchema:
    """A JSON Schema compiled once: the bounded validator (:data:`ArgumentValidator`) and, for
    a flat object schema, a fast check that says "valid" only for certain — anything it is not
    sure of goes to the validator, which decides and explains."""

    validator: Any
    fast: Callable[[dict[str, Any]], bool] | None

    @classmethod
    def of(cls, schema: Mapping[str, Any]) -> CheckedSchema:
        return cls(ArgumentValidator(schema), _compile_fast(schema))

    def errors(self, instance: Any) -> list[jsonschema.ValidationError]:
        """Every error of *instance* (see :func:`schema_errors`), none when the fast check
        passes it.

        Raises:
            SchemaBudgetExceeded: the check would take more than the bounds allow.
        """
        if self.fast is not None and type(instance) is dict and self.fast(instance):
            return []
        return schema_errors(self.validator, instance)


def _error_path(error: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path)


def _describe(error: jsonschema.ValidationError) -> str:
    if error.validator == "additionalProperties":
        schema = error.schema if isinstance(error.schema, dict) else {}
        extra = sorted(set(error.instance) - set(schema.get("properties", {})))  # type: ignore[arg-type]
        return f"unexpected properties {', '.join(map(repr, extra))}; they are not allowed"
    if error.validator == "required":
        return error.message
    message = error.message
    if len(message) > 300:
        message = message[:300] + "…"
    return message


@dataclass(frozen=True, eq=False)
class Tool:
    """One tool the host may offer. Build with :meth:`from_function` or :meth:`from_schema`.

    Attributes:
        name: ``[A-Za-z0-9_.-]{1,64}``; matched byte for byte at resolve.
        description: written for the model: what it does and when not to use it.
        input_schema: JSON Schema (draft 2020-12) of the arguments object; objects are closed.
        handler: ``async (arguments, context) -> result``.
        effect: READ or WRITE (the default, fail safe).
        provenance: who could have written the results (UNTRUSTED unless declared).
        validator: business rules after the schema; raise ``ValueError`` to reject.
        max_result_chars: result size cap (default 16 KiB).
        timeout: seconds before the call is abandoned with an error result.
        idempotent: safe to re-run after a crash left its outcome unknown.
        effect_key: template over the arguments naming the side effect (``"refund:{id}"``);
            default: the tool's name and all its arguments (see :mod:`anfitrion._effects`).
        effect_scope: where an effect key holds: ``session`` (default), ``principal``, ``global``.
        reconcile: ``async (arguments, context) -> bool | None``: asks the outside system
            whether an effect whose outcome is unknown happened (True), did not (False), or
            cannot tell (None); the host settles the entry with the answer.
        precheck: ``async (arguments, context) -> str | None``: a check that needs I/O (a
            store), run after the policy and before any person is asked; a returned reason
            refuses the call (``refused``) and nobody is asked.
        scopes: principal scopes required to see and call this tool.
        sensitive: argument names never written to the audit log.
        dataflow: where harm can happen — sinks, outward payload, destructive targets and
            service-id result fields (:class:`anfitrion._dataflow.Dataflow`, or a
            mapping of its fields); read by the taint rule's ``reads="sinks"`` mode.
    """

    name: str
    description: str
    input_schema: Mapping[str, JsonValue]
    handler: Handler
    effect: Effect = Effect.WRITE
    provenance: Provenance = Provenance.UNTRUSTED
    validator: Validator | None = None
    max_result_chars: int = DEFAULT_MAX_RESULT_CHARS
    timeout: float | None = None
    idempotent: bool = False
    effect_key: str | None = None
    effect_scope: str = "session"
    reconcile: Callable[..., Any] | None = None
    precheck: Callable[..., Awaitable[str | None]] | None = None
    scopes: frozenset[str] = frozenset()
    sensitive: frozenset[str] = frozenset()
    metadata: Mapping[str, Any] = field(default_factory=dict)
    dataflow: Dataflow | None = None
    _schema: CheckedSchema = field(init=False, repr=False)
    _convert: Callable[[dict[str, Any]], dict[str, Any]] | None = field(default=None, repr=False)
    definition_hash: str = field(init=False)
    _definition: ToolDefinition = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not TOOL_NAME.fullmatch(self.name):
            raise ToolDefinitionError(
                f"tool name {self.name!r} must match [A-Za-z0-9_.-]{{1,64}}")
        schema = check_input_schema(self.name, dict(self.input_schema))
        object.__setattr__(self, "input_schema", schema)
        object.__setattr__(self, "effect", Effect(self.effect))
        object.__setattr__(self, "provenance", Provenance(self.provenance))
        object.__setattr__(self, "scopes", frozenset(self.scopes))
        object.__setattr__(self, "sensitive", frozenset(self.sensitive))
        if self.dataflow is not None:
            try:
                object.__setattr__(self, "dataflow", Dataflow.coerce(self.dataflow))
            except (TypeError, ValueError) as exc:
                raise ToolDefinitionError(f"tool {self.name!r}: {exc}") from None
        if self.max_result_chars < 1:
            raise ToolDefinitionError(f"tool {self.name!r}: max_result_chars must be positive")
        if self.timeout is not None and self.timeout <= 0:
            raise ToolDefinitionError(f"tool {self.name!r}: timeout must be positive")
        try:
            EffectScope(self.effect_scope)
        except ValueError:
            raise ToolDefinitionError(f"tool {self.name!r}: effect_scope must be one of "
                                      f"{[s.value for s in EffectScope]}") from None
        if self.effect_key is not None:
            properties = schema.get("properties")
            check_effect_template(self.name, self.effect_key,
                                  properties if isinstance(properties, Mapping) else {})
        object.__setattr__(self, "_schema", CheckedSchema.of(schema))
        object.__setattr__(self, "definition_hash", digest(self.definition_dict()))
        object.__setattr__(self, "_definition",
                           ToolDefinition(self.name, self.description, self.input_schema))

    @property
    def definition(self) -> ToolDefinition:
        return self._definition

    def definition_dict(self) -> dict[str, Any]:
        """Everything that defines the tool for the model and the policy (hashed and pinned)."""
        return {"name": self.name, "description": self.description,
                "input_schema": self.input_schema, "effect": self.effect.value,
                "provenance": self.provenance.value, "idempotent": self.idempotent,
                "scopes": sorted(self.scopes)} | (
                    {"effect_key": self.effect_key, "effect_scope": self.effect_scope}
                    if self.effect_key is not None or self.effect_scope != "session" else {}) | (
                    {"dataflow": self.dataflow.to_dict()} if self.dataflow is not None else {})

    def validate(self, arguments: Any) -> dict[str, Any]:
        """Check parsed arguments against the schema and the business rules.

        Returns:
            the arguments, converted for the handler.

        Raises:
            ArgumentError: naming the field and the problem.
        """
        if not isinstance(arguments, dict):
            raise ArgumentError(f"arguments must be a JSON object, got {type(arguments).__name__}")
        try:
            errors = self._schema.errors(arguments)
        except (OverflowError, ValueError, SchemaBudgetExceeded) as exc:
            # e.g. multipleOf with a 400-digit integer: an error result, not a crash
            raise ArgumentError(f"arguments could not be checked: {exc}") from None
        if errors:
            problems = [f"{_error_path(e) or '(root)'}: {_describe(e)}" for e in errors[:3]]
            more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
            first = errors[0]
            raise ArgumentError("; ".join(problems) + more, field=_error_path(first))
        converted = arguments
        if self._convert is not None:
            try:
                converted = self._convert(arguments)
            except pydantic.ValidationError as exc:
                err = exc.errors()[0]
                loc = ".".join(str(p) for p in err["loc"])
                raise ArgumentError(f"{loc}: {err['msg']}", field=loc) from None
        if self.validator is not None:
            try:
                self.validator(arguments)
            except ArgumentError:
                raise
            except ValueError as exc:
                raise ArgumentError(str(exc)) from None
        return converted

    # -- constructors ------------------------------------------------------------------------

    @classmethod
    def from_schema(cls, name: str, input_schema: Mapping[str, Any],
                    handler: Callable[..., Any], *, description: str = "",
                    **options: Any) -> Tool:
        """A tool from a raw JSON Schema and a handler ``(arguments)`` or
        ``(arguments, context)``, sync or async."""
        if not isinstance(input_schema, Mapping):
            raise ToolDefinitionError(f"tool {name!r}: input schema must be a JSON object")
        return cls(name=name, description=description, input_schema=dict(input_schema),
                   handler=_wrap_raw_handler(handler), **_note_effect(options))

    @classmethod
    def from_function(cls, fn: Callable[..., Any], *, name: str | None = None,
                      description: str | None = None, **options: Any) -> Tool:
        """A tool from a typed Python function (sync or async).

        The input schema comes from the type hints (Pydantic v2 types and models work); the
        description from the docstring, argument descriptions from its ``Args:`` section.
        Parameters annotated :class:`ToolContext` or :class:`Principal` are injected, not shown.
        """
        tool_name = name or fn.__name__
        summary, arg_docs = _parse_docstring(inspect.getdoc(fn) or "")
        schema, convert, injected = _signature_schema(tool_name, fn, arg_docs)
        return cls(name=tool_name, description=description if description is not None
                   else summary, input_schema=schema,
                   handler=_wrap_function(fn, injected), _convert=convert,
                   **_note_effect(options))


def _note_effect(options: dict[str, Any]) -> dict[str, Any]:
    """Options with ``metadata["effect_declared"] = False`` when no effect was chosen (the
    linter's ``effect-undeclared``; the tool is a write either way)."""
    if "effect" in options:
        return options
    return {**options, "metadata": {"effect_declared": False, **dict(options.get("metadata")
                                                                      or {})}}


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    lines = doc.splitlines()
    summary: list[str] = []
    args: dict[str, str] = {}
    section = None
    current = None
    for line in lines:
        stripped = line.strip()
        if re.fullmatch(r"(Args|Arguments|Parameters|Returns|Raises|Yields|Example|Examples):",
                        stripped):
            section = stripped[:-1]
            continue
        if section is None:
            summary.append(line)
        elif section in ("Args", "Arguments", "Parameters"):
            m = re.match(r"^\s*(\*{0,2}\w+)\s*(\([^)]*\))?:\s*(.*)$", line)
            if m and (line.startswith(("    ", "\t"))) and \
                    not line.startswith("        "):
                current = m.group(1)
                args[current] = m.group(3).strip()
            elif current and stripped:
                args[current] = f"{args[current]} {stripped}".strip()
    return "\n".join(summary).strip(), args


def _signature_schema(
    tool_name: str, fn: Callable[..., Any], arg_docs: Mapping[str, str]
) -> tuple[dict[str, Any], Callable[[dict[str, Any]], dict[str, Any]] | None, dict[str, str]]:
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    # BLE001 - re-raised as ToolDefinitionError: the application's annotations may raise anything
    except Exception as exc:
        raise ToolDefinitionError(f"tool {tool_name!r}: cannot resolve type hints: {exc}") from exc
    fields: dict[str, Any] = {}
    injected: dict[str, str] = {}
    simple = True
    integers: list[str] = []
    for pname, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ToolDefinitionError(f"tool {tool_name!r}: *args/**kwargs are not supported")
        annotation = hints.get(pname, inspect.Parameter.empty)
        if annotation is ToolContext:
            injected[pname] = "context"
            continue
        if annotation is Principal:
            injected[pname] = "principal"
            continue
        if annotation is inspect.Parameter.empty:
            raise ToolDefinitionError(f"tool {tool_name!r}: parameter {pname!r} needs a type hint")
        if annotation is int:
            integers.append(pname)
        elif annotation not in (str, float, bool):
            simple = False
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[pname] = (annotation, pydantic.Field(default, description=arg_docs.get(pname)))
    try:
        model = pydantic.create_model(  # type: ignore[call-overload]
            f"{tool_name.replace('.', '_').replace('-', '_')}_arguments",
            __config__=pydantic.ConfigDict(extra="forbid"), **fields)
        schema = model.model_json_schema()
    except (pydantic.PydanticUserError, pydantic.PydanticSchemaGenerationError, TypeError) as exc:
        raise ToolDefinitionError(f"tool {tool_name!r}: cannot build a schema: {exc}") from exc
    schema = _strip_titles(schema)
    schema.setdefault("properties", {})

    def convert(arguments: dict[str, Any]) -> dict[str, Any]:
        instance = model.model_validate(arguments)
        return {k: getattr(instance, k) for k in fields}

    def integral(arguments: dict[str, Any]) -> dict[str, Any]:
        # JSON Schema's integer admits 1.0; a handler declared `int` gets an int
        return {k: int(v) if k in integers and type(v) is float else v
                for k, v in arguments.items()}

    if not simple:
        return schema, convert, injected
    return schema, (integral if integers else None), injected


def _strip_titles(schema: Any, in_properties: bool = False) -> Any:
    if isinstance(schema, list):
        return [_strip_titles(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    return {k: _strip_titles(v, k in ("properties", "$defs")) for k, v in schema.items()
            if not (k == "title" and not in_properties and isinstance(v, str))}


def _wrap_function(fn: Callable[..., Any], injected: Mapping[str, str]) -> Handler:
    is_async = inspect.iscoroutinefunction(fn)

    async def handler(arguments: dict[str, Any], context: ToolContext) -> Any:
        kwargs = dict(arguments)
        for pname, what in injected.items():
            kwargs[pname] = context if what == "context" else context.principal
        if is_async:
            return await fn(**kwargs)
        return await anyio.to_thread.run_sync(lambda: fn(**kwargs), abandon_on_cancel=True)

    return handler


def _wrap_raw_handler(fn: Callable[..., Any]) -> Handler:
    wants_context = len(inspect.signature(fn).parameters) >= 2
    is_async = inspect.iscoroutinefunction(fn)

    async def handler(arguments: dict[str, Any], context: ToolContext) -> Any:
        call_args = (arguments, context) if wants_context else (arguments,)
        if is_async:
            return await fn(*call_args)
        return await anyio.to_thread.run_sync(lambda: fn(*call_args), abandon_on_cancel=True)

    return handler


@dataclass(frozen=True, slots=True)
class BoundCall:
    """A call that passed resolve and validate: a known tool and checked arguments."""

    call_id: str
    tool: Tool
    arguments: Mapping[str, JsonValue]

    @property
    def name(self) -> str:
        return self.tool.name


@runtime_checkable
class ToolSource(Protocol):
    """Anything that can say which tools to offer this turn (a toolbox, an MCP server, ...)."""

    async def list_tools(self, context: OfferContext) -> Sequence[Tool]: ...


class Toolbox:
    """A registry of tools, and a :class:`ToolSource` that can include other sources.

    Args:
        tools: tools to register at once.
        offer: optional filter ``(tool, context) -> bool`` deciding what is offered each turn.
    """

    def __init__(self, tools: Iterable[Tool] = (), *,
                 offer: Callable[[Tool, OfferContext], bool] | None = None) -> None:
        self._tools: dict[str, Tool] = {}
        self._sources: list[ToolSource] = []
        self._offer = offer
        for t in tools:
            self.add(t)

    def add(self, tool: Tool) -> Tool:
        """Register a tool. Raises :class:`ToolDefinitionError` on a duplicate name."""
        if tool.name in self._tools:
            raise ToolDefinitionError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool
        return tool

    def include(self, source: ToolSource) -> None:
        """Offer another source's tools too (names must not collide)."""
        self._sources.append(source)

    @overload
    def tool(self, fn: Callable[..., Any], /) -> Tool: ...
    @overload
    def tool(self, fn: None = None, /, **options: Any) -> Callable[[Callable[..., Any]], Tool]: ...

    def tool(self, fn: Callable[..., Any] | None = None, /,
             **options: Any) -> Tool | Callable[[Callable[..., Any]], Tool]:
        """Decorator registering a function as a tool; options as in :class:`Tool`."""
        def register(f: Callable[..., Any]) -> Tool:
            return self.add(Tool.from_function(f, **options))
        return register(fn) if fn is not None else register

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def only(self, *names: str) -> Toolbox:
        """A toolbox offering just these of this toolbox's own tools."""
        missing = [n for n in names if n not in self._tools]
        if missing:
            raise ToolDefinitionError(f"no tool named {', '.join(map(repr, missing))}")
        return Toolbox(self._tools[n] for n in names)

    async def list_tools(self, context: OfferContext) -> list[Tool]:
        tools = list(self._tools.values())
        for source in self._sources:
            for t in await source.list_tools(context):
                if t.name in self._tools or any(t.name == o.name for o in tools):
                    raise ToolDefinitionError(f"two tool sources offer {t.name!r}")
                tools.append(t)
        if self._offer is not None:
            tools = [t for t in tools if self._offer(t, context)]
        return tools
