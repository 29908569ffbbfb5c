"""Cedar policies as a rule: ``[[cedar]] policies = "tools.cedar"`` in the policy file.

Each call becomes one Cedar request, decided in-process by the official Cedar engine
(``cedarpy``, the ``cedar`` extra):

* **principal** — ``Principal::"<id>"`` with ``roles`` and ``scopes`` (sets of strings) and,
  when the principal carries them, its token's ``claims`` (a record);
* **action** — ``Action::"<tool name>"``;
* **resource** — ``Server::"<MCP server id>"`` for a tool from an MCP server, else
  ``Toolkit::"<toolkit>"`` (``Toolkit::"local"`` for the host's own tools);
* **context** — ``arguments`` (the validated arguments), ``effect`` (``"read"``/``"write"``),
  ``tainted``, ``untrusted_sources``, ``flagged`` (argument paths whose value came only from
  untrusted content), ``unproven`` (top-level arguments holding a value nobody trusted wrote),
  ``counters`` (``tool_calls``, ``approvals_asked``, ``invalid_calls``) and ``turn``.

What Cedar answers becomes an opinion of the combining rule: a satisfied ``forbid`` denies; a
satisfied ``permit`` allows, or asks a person when it is annotated ``@anfitrion("ask")``;
nothing satisfied is no opinion (the file's other rules and defaults decide — Cedar's own
default deny does not stand in for them). Cedar's deny-overrides is ours. The decision's rule
id names the Cedar policies that decided (``cedar[1]/refund-cap``: the ``@id`` annotation,
else Cedar's ``policy<N>`` and its line). ``@reason("…")`` gives the operator's words.

Fail closed: a policy that errs while evaluating a call (an attribute the call lacks, an
argument Cedar cannot represent) denies it with the engine's message under
``<rule id>.error``. A file that does not parse, or does not validate against its schema,
refuses to load with the file and line of the policy at fault.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from .._json import json_strings
from .._principal import Principal
from .._tools import BoundCall, Tool
from ..exceptions import ConfigError, MissingDependencyError
from ._contract import BaseRule, Reach, RuleRole
from ._decision import Decision, PolicyContext

__all__ = ["ASK_ANNOTATION", "CedarPolicies", "CedarRule", "cedar_entities",
           "cedar_lint", "cedar_request", "cedar_resource", "cedar_schema", "load_cedar",
           "split_statements", "validate_cedar"]

ASK_ANNOTATION = "anfitrion"
"""``@anfitrion("ask")`` on a permit: its calls ask a person instead of running."""
_ANNOTATION_VALUES = {"ask", "allow"}
_MAX_DEPTH = 32
_LONG = 2 ** 63
_MAX_UNPROVEN_CHECKED = 64
_ENTITIES_CACHED = 256


def _cedarpy() -> Any:
    try:
        import cedarpy
    except ImportError:  # pragma: no cover - exercised only on an install without the extra
        raise MissingDependencyError("cedar", "cedarpy") from None
    return cedarpy


class _CedarInput(ValueError):
    """A call's value Cedar cannot represent faithfully (a float with more than four
    decimals, an integer past 64 bits, a null in a list, a key Cedar reads as an escape)."""


# -- the text: statements and their lines ------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Statement:
    """One Cedar policy of a file: its text and the line it starts on."""

    text: str
    line: int


def split_statements(text: str) -> list[Statement]:
    """The policies of a Cedar file, split at ``;`` outside strings and comments, each with
    the line of its first token (Cedar's own parse errors carry no position)."""
    out: list[Statement] = []
    start, line, first_line = 0, 1, None
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
        elif c == "/" and text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        elif c == '"':
            first_line = first_line or line
            i += 1
            while i < n and text[i] != '"':
                if text[i] == "\\":
                    i += 1
                elif text[i] == "\n":
                    line += 1
                i += 1
        elif c == ";":
            out.append(Statement(text[start:i + 1], first_line or line))
            start, first_line = i + 1, None
        elif not c.isspace():
            first_line = first_line or line
        i += 1
    if first_line is not None:  # text after the last ';': Cedar will say what is wrong
        out.append(Statement(text[start:], first_line))
    return out


@dataclass(frozen=True, slots=True)
class CedarPolicies:
    """A parsed, checked Cedar file: the engine's handles and what each policy says of
    itself (``policy<N>`` → its ``@id``, its effect, its line, its annotations)."""

    text: str
    source: str
    policy_set: Any
    schema: Any
    schema_text: str | None
    schema_source: str | None
    est: Mapping[str, Any]
    lines: Mapping[str, int]

    def label(self, policy_id: str) -> str:
        """How a decision names a policy: its ``@id``, else ``policy<N>@line``."""
        own = self.est.get(policy_id, {}).get("annotations", {}).get("id")
        if isinstance(own, str) and own:
            return own
        return f"{policy_id}@{self.lines.get(policy_id, 0)}"

    def annotation(self, policy_id: str, name: str) -> str | None:
        value = self.est.get(policy_id, {}).get("annotations", {}).get(name)
        return value if isinstance(value, str) else None


def _fail(message: str, source: str, line: int | None = None) -> ConfigError:
    return ConfigError(message.replace("\n", " ")[:500], path=source, line=line)


def _parse(cedarpy: Any, text: str, source: str) -> tuple[Any, Mapping[str, Any], list[Statement]]:
    statements = split_statements(text)
    try:
        policy_set = cedarpy.PolicySet.from_str(text)
        est = json.loads(cedarpy.policies_to_json_str(text))
    except ValueError as whole:
        for statement in statements:  # the first policy that does not parse on its own
            try:
                cedarpy.PolicySet.from_str(statement.text)
            except ValueError as exc:
                raise _fail(f"Cedar policy does not parse: {exc}", source,
                            statement.line) from None
        raise _fail(f"Cedar policies do not parse: {whole}", source) from None
    if est.get("templates"):
        raise _fail("a Cedar template (?principal, ?resource) cannot be a rule: write the "
                    "policy for a concrete principal or resource", source)
    return policy_set, est.get("staticPolicies", {}), statements


def _check_annotations(est: Mapping[str, Any], lines: Mapping[str, int], source: str) -> None:
    for pid, policy in est.items():
        value = policy.get("annotations", {}).get(ASK_ANNOTATION)
        if value is None:
            continue
        if value not in _ANNOTATION_VALUES:
            raise _fail(f'@anfitrion({value!r}): the annotation takes "ask" or "allow"',
                        source, lines.get(pid))
        if policy.get("effect") != "permit":
            raise _fail('@anfitrion("ask") goes on a permit: a forbid always denies',
                        source, lines.get(pid))


def load_cedar(text: str, source: str, *, schema_text: str | None = None,
               schema_source: str | None = None) -> CedarPolicies:
    """Parse and check Cedar *text* (validated against *schema_text* when given).

    Raises:
        ConfigError: the policies or the schema do not parse, a policy does not validate
            against the schema, or an ``@anfitrion`` annotation is misplaced (file, line).
    """
    cedarpy = _cedarpy()
    policy_set, est, statements = _parse(cedarpy, text, source)
    if len(statements) != len(est):
        raise _fail("Cedar policies could not be told apart (a ';' inside an unusual "
                    "token?)", source)
    lines = {f"policy{i}": s.line for i, s in enumerate(statements)}
    _check_annotations(est, lines, source)
    schema = None
    if schema_text is not None:
        where = schema_source or source
        try:
            schema = (cedarpy.Schema.from_json_str(schema_text)
                      if schema_text.lstrip().startswith("{")
                      else cedarpy.Schema.from_str(schema_text))
        except ValueError as exc:
            raise _fail(f"the Cedar schema does not parse: {exc}", where) from None
        result = cedarpy.validate_policies(text, schema)
        for error in result.errors:
            raise _fail(f"Cedar policy does not validate against {where}: {error.error}",
                        source, lines.get(error.policy_id))
    return CedarPolicies(text, source, policy_set, schema, schema_text, schema_source, est,
                         lines)


# -- a call as a Cedar request -----------------------------------------------------------------

def _cedar_value(value: Any, depth: int) -> Any:
    if depth > _MAX_DEPTH:
        raise _CedarInput("the arguments are nested too deeply for Cedar")
    if isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        if not -_LONG <= value < _LONG:
            raise _CedarInput(f"the integer {value} does not fit Cedar's 64-bit Long")
        return value
    if isinstance(value, float):
        return _decimal(value)
    if isinstance(value, (list, tuple)):
        if any(v is None for v in value):
            raise _CedarInput("Cedar has no null: a list holds one")
        return [_cedar_value(v, depth + 1) for v in value]
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str) or key.startswith("__"):
                # {"__entity": …} would make an argument an entity reference (a forged
                # principal); {"__extn": …} an extension value: never from a model
                raise _CedarInput(f"the key {str(key)[:40]!r} cannot go to Cedar "
                                      "(keys starting with '__' are Cedar escapes)")
            if item is not None:  # Cedar has no null: an absent attribute is what `has` sees
                out[key] = _cedar_value(item, depth + 1)
        return out
    raise _CedarInput(f"a {type(value).__name__} value cannot go to Cedar")


def _numbers_as_decimals(value: Any, schema: Any) -> Any:
    """Integers where the tool's JSON schema says ``number`` become floats, so one argument
    has one Cedar type (decimal) whether the model wrote ``5`` or ``5.5``."""
    if not isinstance(schema, Mapping):
        return value
    if schema.get("type") == "number" and isinstance(value, int) and not isinstance(value, bool):
        return float(value) if abs(value) < 2 ** 53 else value
    if isinstance(value, Mapping):
        properties = schema.get("properties")
        if isinstance(properties, Mapping):
            return {k: _numbers_as_decimals(v, properties.get(k)) for k, v in value.items()}
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [_numbers_as_decimals(v, schema["items"]) for v in value]
    return value


def _decimal(value: float) -> dict[str, Any]:
    try:
        exact = Decimal(repr(value))
    except InvalidOperation:
        raise _CedarInput(f"the number {value!r} cannot go to Cedar") from None
    exponent = exact.as_tuple().exponent
    if not exact.is_finite() or (isinstance(exponent, int) and exponent < -4) or \
            abs(exact) >= Decimal("922337203685477"):
        raise _CedarInput(f"the number {value!r} does not fit Cedar's decimal (four "
                              "decimals, about ±9.2e14)")
    text = format(exact, "f")
    return {"__extn": {"fn": "decimal", "arg": text if "." in text else f"{text}.0"}}


def cedar_resource(tool: Tool) -> dict[str, str]:
    """The Cedar resource of *tool*: its MCP server, else its toolkit (``local``)."""
    server = tool.metadata.get("mcp_server")
    if isinstance(server, str) and server:
        return {"type": "Server", "id": server}
    toolkit = tool.metadata.get("toolkit")
    return {"type": "Toolkit", "id": toolkit if isinstance(toolkit, str) and toolkit
            else "local"}


def cedar_entities(principal: Principal, resource: Mapping[str, str]) -> list[dict[str, Any]]:
    """The principal (roles, scopes, claims when present) and the resource, as Cedar
    entities."""
    attrs: dict[str, Any] = {"roles": sorted(principal.roles),
                             "scopes": sorted(principal.scopes)}
    claims = principal.attributes.get("claims")
    if isinstance(claims, Mapping):
        attrs["claims"] = _cedar_value(claims, 1)
    return [{"uid": {"type": "Principal", "id": principal.id}, "attrs": attrs, "parents": []},
            {"uid": dict(resource), "attrs": {}, "parents": []}]


def _unproven(arguments: Mapping[str, Any], context: PolicyContext) -> list[str]:
    if context.provenance is None:
        return []
    found: list[str] = []
    checked = 0
    for name, value in arguments.items():
        for _, text in json_strings(value):
            checked += 1
            if checked > _MAX_UNPROVEN_CHECKED:
                return sorted(found)
            if context.provenance.unproven(text) is not None:
                found.append(name)
                break
    return sorted(found)


def cedar_request(call: BoundCall, context: PolicyContext, *, plain: bool = False,
                  unproven: bool = True) -> dict[str, Any]:
    """The Cedar request for one call (module docstring); *plain*: the arguments as they are
    (JSON, for an external decision point), not as Cedar values; without *unproven* the
    ``unproven`` set is left empty (the provenance lookups cost the most: done only for
    policies that name it).

    Raises:
        _CedarInput: an argument Cedar cannot represent faithfully.
    """
    counters = context.counters
    return {
        "principal": {"type": "Principal", "id": context.principal.id},
        "action": {"type": "Action", "id": call.tool.name},
        "resource": cedar_resource(call.tool),
        "context": {
            "arguments": dict(call.arguments) if plain else _cedar_value(
                _numbers_as_decimals(call.arguments, call.tool.input_schema), 1),
            "effect": call.tool.effect.value,
            "tainted": context.tainted,
            "untrusted_sources": sorted(set(context.untrusted_sources)),
            "flagged": sorted(context.flagged_arguments),
            "unproven": _unproven(call.arguments, context) if unproven else [],
            "counters": {name: int(counters.get(name, 0))
                         for name in ("tool_calls", "approvals_asked", "invalid_calls")},
            "turn": context.turn,
        },
    }


# -- the rule ----------------------------------------------------------------------------------

class CedarRule(BaseRule):
    """Cedar policies as an opinion of the combining rule (module docstring).

    Args:
        policies: a checked Cedar file (:func:`load_cedar`).
        rule_id: the id its decisions are reported under (``cedar[1]`` in a file).

    Example:
        >>> from anfitrion.policy._cedar import CedarRule, load_cedar
        >>> rule = CedarRule(load_cedar('permit(principal, action, resource);', "inline"))
        >>> rule.settings["policies"]
        1
    """

    role = RuleRole.OPINION

    def __init__(self, policies: CedarPolicies, *, rule_id: str = "cedar") -> None:
        self.policies = policies
        self.rule_id = rule_id
        self._engine = _cedarpy()
        self._parsed: dict[tuple[Any, ...], Any] = {}
        # conservative: the word anywhere (a comment too) turns the lookups on
        self._reads_unproven = "unproven" in policies.text
        self.settings = {"source": policies.source, "schema": policies.schema_source,
                         "policies": len(policies.est)}

    def _entities(self, principal: Principal, resource: Mapping[str, str]) -> Any:
        """The entities of a request, parsed once per principal and resource (the engine's
        handle; parsing them is a third of a decision's cost)."""
        claims = principal.attributes.get("claims")
        key = (principal.id, principal.roles, principal.scopes,
               json.dumps(claims, sort_keys=True, default=str) if claims is not None else None,
               resource["type"], resource["id"])
        found = self._parsed.get(key)
        if found is None:
            entities = cedar_entities(principal, resource)
            try:
                found = self._engine.Entities.from_json_str(json.dumps(entities))
            except ValueError as exc:  # a claim Cedar refuses: the decision fails closed
                raise _CedarInput(f"the principal cannot go to Cedar: {exc}") from None
            if len(self._parsed) >= _ENTITIES_CACHED:
                self._parsed.clear()
            self._parsed[key] = found
        return found

    def reach(self, tool: Tool, principal: Principal) -> Reach:
        """An unconditional ``forbid`` whose scope covers every call of *tool* by *principal*
        denies them all (the MCP gateway hides the tool); anything else may grant."""
        resource = cedar_resource(tool)
        for policy in self.policies.est.values():
            if policy.get("effect") == "forbid" and not policy.get("conditions") and \
                    _covers(policy.get("principal", {}), {"type": "Principal",
                                                          "id": principal.id}) and \
                    _covers(policy.get("action", {}), {"type": "Action", "id": tool.name}) \
                    and _covers(policy.get("resource", {}), resource):
                return Reach.DENIES_ALL
        return Reach.MAY_GRANT

    def description(self) -> Mapping[str, Any]:
        """The policy hash covers the Cedar text and the schema, not only their file names."""
        schema = self.policies.schema_text
        return {"id": self.rule_id, "kind": "cedar",
                "policies_sha256": hashlib.sha256(self.policies.text.encode()).hexdigest(),
                "schema_sha256": None if schema is None
                else hashlib.sha256(schema.encode()).hexdigest()}

    def __call__(self, call: BoundCall, context: PolicyContext) -> Decision | None:
        try:
            request = cedar_request(call, context, unproven=self._reads_unproven)
            entities = self._entities(context.principal, request["resource"])
        except _CedarInput as exc:
            return Decision.deny(f"the Cedar policies could not decide: {exc}",
                                 f"{self.rule_id}.error")
        result = self._engine.is_authorized(request, self.policies.policy_set, entities,
                                            self.policies.schema)
        diagnostics = result.diagnostics
        if diagnostics.errors:
            return Decision.deny(_error_reason(diagnostics.errors), f"{self.rule_id}.error")
        decided = sorted(diagnostics.reasons, key=_policy_order)
        if not decided:
            return None  # nothing applies: Cedar's default deny is not an opinion here
        labels = "+".join(self.policies.label(pid) for pid in decided)
        rule_id = f"{self.rule_id}/{labels}"
        reason = next((text for pid in decided
                       if (text := self.policies.annotation(pid, "reason"))), None)
        if not result.allowed:
            return Decision.deny(reason or f"refused by Cedar policy {labels}", rule_id)
        if any(self.policies.annotation(pid, ASK_ANNOTATION) == "ask" for pid in decided):
            return Decision.ask(reason or f"Cedar policy {labels} asks a person", rule_id)
        return Decision.allow(reason or f"permitted by Cedar policy {labels}", rule_id)


_TYPES = {"principal": {"Principal"}, "resource": {"Server", "Toolkit"}}


def cedar_lint(policies: CedarPolicies) -> list[tuple[str, str]]:
    """Cedar policies that can never apply: ``(policy label, why)`` for ``policy validate``.

    - a condition that is a constant (``when { false }``, ``unless { true }``);
    - a scope naming an entity type no request has (``principal == User::"x"``: anfitrion's
      principals are ``Principal``, its resources ``Server`` or ``Toolkit``);
    - a permit an unconditional forbid of the same (or a wider) scope always overrides.
    """
    found: list[tuple[str, str]] = []
    forbids = [(pid, p) for pid, p in policies.est.items()
               if p.get("effect") == "forbid" and not p.get("conditions")]
    for pid, policy in policies.est.items():
        label = policies.label(pid)
        for condition in policy.get("conditions", ()):
            constant = condition.get("body", {}).get("Value")
            if isinstance(constant, bool) and constant is (condition.get("kind") == "unless"):
                found.append((label, f"its {condition.get('kind')} condition is always "
                              f"{str(constant).lower()}: it never applies"))
        for var, allowed in _TYPES.items():
            named = _scope_types(policy.get(var, {}))
            if named and not named & allowed:
                found.append((label, f"its {var} is a {', '.join(sorted(named))}; anfitrion's "
                              f"{var}s are {' or '.join(sorted(allowed))}: it never applies"))
        if policy.get("effect") == "permit":
            for fid, forbid in forbids:
                if all(forbid.get(v, {}).get("op") == "All" or forbid.get(v) == policy.get(v)
                       for v in ("principal", "action", "resource")):
                    found.append((label, f"the unconditional forbid {policies.label(fid)} "
                                  "overrides it on every call it covers: it never applies"))
                    break
    return found


def _scope_types(scope: Mapping[str, Any]) -> set[str]:
    op = scope.get("op")
    if op in ("==", "in") and isinstance(scope.get("entity"), Mapping):
        return {str(scope["entity"].get("type"))}
    if op == "is":
        return {str(scope.get("entity_type"))}
    return set()


def _covers(scope: Mapping[str, Any], uid: Mapping[str, str]) -> bool:
    """Whether a policy's scope holds for the entity *uid* (no entity has parents here, so
    ``in`` is ``==``; an ``is … in`` or a slot is not counted)."""
    op = scope.get("op")
    if op == "All":
        return True
    if op in ("==", "in") and isinstance(scope.get("entity"), Mapping):
        return dict(scope["entity"]) == dict(uid)
    if op == "in" and isinstance(scope.get("entities"), list):
        return any(isinstance(e, Mapping) and dict(e) == dict(uid) for e in scope["entities"])
    if op == "is" and "in" not in scope:
        return scope.get("entity_type") == uid["type"]
    return False


def _policy_order(policy_id: str) -> int:
    found = re.fullmatch(r"policy(\d+)", policy_id)
    return int(found.group(1)) if found else 0


def _error_reason(errors: list[str]) -> str:
    first = str(errors[0]).replace("\n", " ")[:300]
    return f"the Cedar policies could not decide: {first}"


# -- the schema of a set of tools --------------------------------------------------------------

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CEDAR_KEYWORDS = {"true", "false", "if", "then", "else", "in", "is", "like", "has", "__cedar"}
_CONTEXT = ("effect: String, tainted: Bool, untrusted_sources: Set<String>, "
            "flagged: Set<String>, unproven: Set<String>, counters: { tool_calls: Long, "
            "approvals_asked: Long, invalid_calls: Long }, turn: Long")


def _attribute(name: str) -> str:
    if _IDENTIFIER.fullmatch(name) and name not in _CEDAR_KEYWORDS:
        return name
    return json.dumps(name)


def _cedar_type(schema: Any, depth: int = 0) -> str | None:
    """The Cedar type of a JSON-schema value; ``None`` when Cedar has none for it (a union,
    a null, an untyped value): the attribute is left out, and a policy naming it does not
    validate."""
    if not isinstance(schema, Mapping) or depth > 8:
        return None
    kind = schema.get("type")
    if kind == "string":
        return "String"
    if kind == "integer":
        return "Long"
    if kind == "boolean":
        return "Bool"
    if kind == "number":
        return "decimal"
    if kind == "array":
        item = _cedar_type(schema.get("items"), depth + 1)
        return None if item is None else f"Set<{item}>"
    if kind == "object":
        return _record(schema, depth + 1)
    return None


def _record(schema: Mapping[str, Any], depth: int) -> str:
    properties = schema.get("properties")
    required = set(schema.get("required") or ())
    fields = []
    for name, spec in (properties.items() if isinstance(properties, Mapping) else ()):
        kind = _cedar_type(spec, depth)
        if kind is not None and not name.startswith("__"):
            fields.append(f"{_attribute(name)}{'' if name in required else '?'}: {kind}")
    return "{ " + ", ".join(fields) + " }" if fields else "{}"


def cedar_schema(tools: Iterable[Tool]) -> str:
    """The Cedar schema (human syntax) of the requests anfitrion makes for *tools*: the
    ``Principal``, ``Server`` and ``Toolkit`` entity types, and one action per tool whose
    context carries its arguments' types (optional when the tool does not require them;
    ``number`` as ``decimal``). A token's ``claims`` are not in it: add their record to
    ``Principal`` when policies read them.

    Example:
        >>> from anfitrion import Tool
        >>> tool = Tool.from_schema("refund", {"type": "object", "properties": {
        ...     "amount": {"type": "integer"}}, "required": ["amount"]}, lambda a: None)
        >>> 'action "refund"' in cedar_schema([tool])
        True
    """
    lines = ["// generated by `anfitrion policy cedar-schema`: the requests anfitrion makes",
             "entity Principal = { roles: Set<String>, scopes: Set<String> };",
             "entity Server;", "entity Toolkit;", ""]
    for tool in sorted(tools, key=lambda t: t.name):
        arguments = _record(tool.input_schema, 1)
        lines.append(f"action {json.dumps(tool.name)} appliesTo {{\n"
                     f"  principal: Principal, resource: [Server, Toolkit],\n"
                     f"  context: {{ arguments: {arguments}, {_CONTEXT} }}\n}};")
    return "\n".join(lines) + "\n"


def validate_cedar(policies: CedarPolicies, schema_text: str) -> list[tuple[int | None, str]]:
    """Whether *policies* validate against *schema_text*: ``(line, message)`` per error.

    Raises:
        ConfigError: the schema does not parse.
    """
    cedarpy = _cedarpy()
    try:
        schema = cedarpy.Schema.from_str(schema_text)
    except ValueError as exc:
        raise _fail(f"the Cedar schema does not parse: {exc}", "generated schema") from None
    result = cedarpy.validate_policies(policies.text, schema)
    return [(policies.lines.get(e.policy_id), str(e.error).replace("\n", " ")[:400])
            for e in result.errors]
