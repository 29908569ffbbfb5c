"""The tool linter: the field's advice on tool definitions, as findings with a reason.

A model chooses a tool by its name, description and parameters, and the policy can only be as
narrow as the arguments it sees. :func:`lint_tools` checks each definition for what makes
either go wrong and returns a :class:`LintReport` of :class:`Finding` values; it does no I/O
(``anfitrion tools lint`` and ``anfitrion mcp review`` are the thin commands on top).

Findings (``code``):

- ``description-short`` — too short to choose the tool by;
- ``description-vague`` — words that say nothing ("does things", "handles stuff");
- ``no-when-not`` — the description never says when *not* to use the tool;
- ``effect-undeclared`` — no effect declared: the tool is treated as a write;
- ``write-free-form`` — a write tool takes a free-form ``path``/``url``/``to``/``sql``/
  ``command``-like string that neither its schema nor the policy constrains;
- ``read-network`` — a read tool that can reach the network (its request carries data out);
- ``parameter-undescribed`` / ``parameter-untyped`` — a parameter without a description or
  a type;
- ``name-confusable`` — two names that differ only by case or look-alike characters;
- ``name-unusual`` — a name with invisible, control or non-ASCII characters.

A finding is silenced by the policy file, with a reason (the reason is required)::

    [[lint.silence]]
    finding = "write-free-form"
    tool = "run_sql"            # a name or glob
    argument = "query"          # optional
    reason = "the database user can only read; reviewed by the DBA"

Everything the linter shows of a definition (names, excerpts) is escaped and cut: hostile
metadata cannot drive a terminal or flood the report.

Example:
    >>> from anfitrion.policy import ToolFacts, lint_tools
    >>> report = lint_tools([ToolFacts("files", "Does things with files.", {}, None)])
    >>> sorted({f.code for f in report.findings})
    ['description-short', 'description-vague', 'effect-undeclared', 'no-when-not']
"""

from __future__ import annotations

import fnmatch
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._constraints import NoneOf, OneOf
from ..exceptions import UserError
from ._cedar import CedarRule, cedar_lint
from ._decision import Verdict
from ._quorum import RequireQuorum
from ._rules import ArgumentRule

if TYPE_CHECKING:
    from .._tools import Tool
    from ._core import Policy

__all__ = ["LINT_CODES", "Finding", "LintReport", "Silence", "ToolFacts", "facts_of_mcp",
           "facts_of_tool", "lint_rules", "lint_tools", "parse_silenced"]

LINT_CODES: Mapping[str, str] = {
    "description-short": "the description is too short to choose the tool by",
    "description-vague": "the description is too vague to choose the tool by",
    "no-when-not": "the description does not say when not to use the tool",
    "effect-undeclared": "the effect is not declared (treated as a write)",
    "write-free-form": "a write tool takes a free-form argument with no constraint",
    "read-network": "a read tool can reach the network",
    "parameter-undescribed": "a parameter has no description",
    "parameter-untyped": "a parameter has no type",
    "name-confusable": "names differ only by case or look-alike characters",
    "name-unusual": "the name has invisible, control or non-ASCII characters",
}
"""Every finding code and what it means."""

MIN_DESCRIPTION_WORDS = 8
MAX_PARAMETERS_CHECKED = 256
EXCERPT_CHARS = 60
NAME_CHARS = 64

_VAGUE = re.compile(
    r"(?i)\b(?:does (?:things|stuff|various)|do (?:things|stuff)|various (?:things|operations"
    r"|tasks)|handles? (?:things|stuff|data|requests)|manages? (?:things|stuff)|stuff"
    r"|general[- ]purpose|multi[- ]purpose|misc(?:ellaneous)?|utility|helper|etc\.?"
    r"|and more|anything)\b")
_WHEN_NOT = re.compile(
    r"(?i)\b(?:do not|don't|never|not for|not to be used|avoid|instead|only (?:for|when|if|use)"
    r"|unless|must not|should not|rather than|except)\b")
_FREE_FORM = {
    "path": "a path", "file": "a path", "filename": "a path", "file_path": "a path",
    "filepath": "a path", "dir": "a path", "directory": "a path", "destination": "a path",
    "url": "a URL", "uri": "a URL", "href": "a URL", "endpoint": "a URL", "link": "a URL",
    "to": "a recipient", "recipient": "a recipient", "recipients": "a recipient",
    "email": "a recipient", "address": "a recipient", "cc": "a recipient", "bcc": "a recipient",
    "sql": "SQL", "query": "SQL", "statement": "SQL",
    "command": "a command", "cmd": "a command", "script": "a command", "shell": "a command",
    "code": "a command", "args": "a command",
}
_NETWORK = {"url", "uri", "href", "endpoint", "link", "host", "hostname", "domain", "website"}
# Look-alikes: what a person reading a list of tool names mistakes one character for.
_LOOKALIKE = str.maketrans({
    "0": "o", "1": "l", "i": "l", "|": "l", "5": "s", "$": "s", "-": "_", ".": "_",
    "а": "a", "е": "e", "о": "o", "р": "p", "с": "c", "у": "y", "х": "x", "і": "l",
    "ј": "j", "ѕ": "s", "ԁ": "d", "ɡ": "g", "ո": "n", "ս": "u", "α": "a", "ε": "e",
    "ο": "o", "ρ": "p", "τ": "t", "υ": "u", "ν": "v", "κ": "k", "ι": "l",
})
_INVISIBLE = re.compile(r"[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f"
                        r"\u200b-\u200f\u202a-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff]")


@dataclass(frozen=True, slots=True)
class ToolFacts:
    """What the linter looks at of one tool: neutral data, from a :class:`Tool` or an MCP
    definition.

    Attributes:
        effect: ``"read"``, ``"write"``, or ``None`` when none was declared (then a write).
        open_world: whether the tool can reach outside systems (MCP ``openWorldHint``, whose
            default is true), ``None`` when unknown.
        origin: where the tool comes from (``toolbox``, ``mcp:<server>``), for messages.
    """

    name: str
    description: str
    input_schema: Mapping[str, Any]
    effect: str | None
    open_world: bool | None = None
    origin: str = "toolbox"


@dataclass(frozen=True, slots=True)
class Finding:
    """One piece of advice about one tool. Every text field is escaped and cut."""

    code: str
    tool: str
    reason: str
    argument: str | None = None
    silenced: str | None = None
    """The reason the policy file gives for silencing it; ``None`` when it stands."""

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "tool": self.tool, "argument": self.argument,
                "reason": self.reason, "silenced": self.silenced}


@dataclass(frozen=True, slots=True)
class Silence:
    """A finding the operator has accepted, and why (``[[lint.silence]]``)."""

    finding: str
    tool: str = "*"
    argument: str | None = None
    reason: str = ""

    def covers(self, code: str, tool: str, argument: str | None) -> bool:
        return (self.finding in (code, "*") and fnmatch.fnmatchcase(tool, self.tool)
                and (self.argument is None or self.argument == argument))


@dataclass(frozen=True, slots=True)
class LintReport:
    """The findings over a set of tools (silenced ones included, marked)."""

    findings: tuple[Finding, ...]
    tools: int
    unused_silences: tuple[Silence, ...] = field(default=())

    @property
    def standing(self) -> tuple[Finding, ...]:
        """The findings no silence covers: what a CI run fails on."""
        return tuple(f for f in self.findings if f.silenced is None)

    def to_dict(self) -> dict[str, Any]:
        return {"tools": self.tools, "findings": [f.to_dict() for f in self.findings],
                "standing": len(self.standing),
                "silenced": len(self.findings) - len(self.standing),
                "unused_silences": [{"finding": s.finding, "tool": visible(s.tool),
                                     "argument": s.argument, "reason": visible(s.reason)}
                                    for s in self.unused_silences]}


def visible(text: str, limit: int = NAME_CHARS) -> str:
    """*text* on one line, every character a terminal would act on or hide shown as an
    escape, cut to *limit* characters."""
    if not isinstance(text, str):
        text = repr(text)
    cut = len(text) > limit
    text = text[:limit]
    if not text.isprintable() or _INVISIBLE.search(text):
        text = "".join(_escape(c) if not c.isprintable() or _INVISIBLE.match(c) else c
                       for c in text)
    return text + "…" if cut else text


def _escape(c: str) -> str:
    return f"\\u{ord(c):04x}" if ord(c) < 0x10000 else f"\\U{ord(c):08x}"


def parse_silenced(table: Any) -> list[Silence]:
    """The ``[lint]`` table of a policy file: ``silence = [{finding, tool, argument,
    reason}, …]``.

    Raises:
        ValueError: an unknown key or code, a missing reason, a wrong type.
    """
    if not isinstance(table, Mapping):
        raise UserError("must be a table")
    unknown = set(table) - {"silence"}
    if unknown:
        raise UserError(f"unknown key {sorted(unknown)[0]!r} (allowed: silence)")
    items = table.get("silence", [])
    if not isinstance(items, list):
        raise UserError("silence must be an array of tables ([[lint.silence]])")
    out = []
    for i, item in enumerate(items, 1):
        where = f"silence[{i}]"
        if not isinstance(item, Mapping):
            raise UserError(f"{where} must be a table")
        extra = set(item) - {"finding", "tool", "argument", "reason"}
        if extra:
            raise UserError(f"{where}: unknown key {sorted(extra)[0]!r} "
                             "(allowed: argument, finding, reason, tool)")
        code, reason = item.get("finding"), item.get("reason")
        if not isinstance(code, str) or (code != "*" and code not in LINT_CODES):
            raise UserError(f"{where}: finding must be one of {', '.join(LINT_CODES)} (or '*')")
        if not isinstance(reason, str) or not reason.strip():
            raise UserError(f"{where}: a silenced finding needs a reason")
        tool, argument = item.get("tool", "*"), item.get("argument")
        if not isinstance(tool, str) or not tool or \
                (argument is not None and (not isinstance(argument, str) or not argument)):
            raise UserError(f"{where}: tool and argument must be non-empty text")
        out.append(Silence(str(code), tool, argument, reason.strip()))
    return out


def facts_of_tool(tool: Tool) -> ToolFacts:
    """The linter's view of a registered tool (``effect_declared`` in its metadata says
    whether the effect was chosen or left at the default)."""
    declared = tool.metadata.get("effect_declared", True)
    open_world = tool.metadata.get("open_world")
    return ToolFacts(tool.name, tool.description, dict(tool.input_schema),
                     tool.effect.value if declared is not False else None,
                     open_world if isinstance(open_world, bool) else None)


def facts_of_mcp(definition: Mapping[str, Any], origin: str = "mcp") -> ToolFacts:
    """The linter's view of an MCP tool definition as a server listed it (``name``,
    ``description``, ``inputSchema``, ``annotations``); any shape is accepted."""
    annotations = definition.get("annotations")
    hints = annotations if isinstance(annotations, Mapping) else {}
    read_only, open_world = hints.get("readOnlyHint"), hints.get("openWorldHint")
    effect = None if not isinstance(read_only, bool) else "read" if read_only else "write"
    schema = definition.get("inputSchema", definition.get("input_schema"))
    name, description = definition.get("name"), definition.get("description")
    return ToolFacts(name if isinstance(name, str) else repr(name),
                     description if isinstance(description, str) else "",
                     schema if isinstance(schema, Mapping) else {}, effect,
                     # the protocol's default for openWorldHint is true
                     open_world if isinstance(open_world, bool) else True, origin)


def lint_tools(tools: Iterable[ToolFacts], *, policy: Policy | None = None,
               silenced: Sequence[Silence] = ()) -> LintReport:
    """Check every tool; findings in tool order, then the name clashes.

    *policy*: argument constraints in it count as narrowing a free-form argument.
    *silenced*: accepted findings (they stay in the report, marked with their reason).
    """
    facts = list(tools)
    found: list[tuple[str, str, str, str | None]] = []  # (code, raw tool name, reason, argument)
    for tool in facts:
        found.extend(_check(tool, policy))
    found.extend(_clashes(facts))
    used: set[int] = set()
    findings = []
    for code, name, reason, argument in found:
        why = None
        for i, silence in enumerate(silenced):
            if silence.covers(code, name, argument):
                why = visible(silence.reason, 300)
                used.add(i)
                break
        findings.append(Finding(code, visible(name), reason,
                                visible(argument) if argument is not None else None, why))
    return LintReport(tuple(findings), len(facts),
                      tuple(s for i, s in enumerate(silenced) if i not in used))


def _check(tool: ToolFacts, policy: Policy | None) -> list[tuple[str, str, str, str | None]]:
    out: list[tuple[str, str, str, str | None]] = []
    name = tool.name

    def add(code: str, reason: str, argument: str | None = None) -> None:
        out.append((code, name, reason, argument))

    if not name.isascii() or not name.isprintable() or _INVISIBLE.search(name):
        add("name-unusual", "the name holds invisible, control or non-ASCII characters: a "
            "person reviewing it may read another name than the model calls")
    text = tool.description.strip()
    words = len(text.split())
    if words < MIN_DESCRIPTION_WORDS:
        add("description-short", f"the description has {words} word(s): say what the tool "
            f"does, on what, and what it returns (at least {MIN_DESCRIPTION_WORDS} words), so "
            "a model can choose it and a person can review it")
    vague = _VAGUE.search(text[:4000])
    if vague:
        add("description-vague", f"{visible(vague.group(0), EXCERPT_CHARS)!r} says nothing a "
            "model can choose by: name the objects and the action")
    if not _WHEN_NOT.search(text[:4000]):
        add("no-when-not", "the description never says when not to use the tool (\"Do not "
            "use it for …; use … instead\"): models pick the nearest tool by its words")
    if tool.effect is None:
        add("effect-undeclared", "no effect is declared, so it counts as a write and every "
            "call asks a person; declare effect=\"read\" if it only reads, or \"write\" "
            "(for MCP: annotations.readOnlyHint)")
    effect = tool.effect or "write"
    properties = tool.input_schema.get("properties")
    params = list(properties.items())[:MAX_PARAMETERS_CHECKED] \
        if isinstance(properties, Mapping) else []
    for pname, spec in params:
        pname = str(pname)
        spec = spec if isinstance(spec, Mapping) else {}
        description = spec.get("description")
        if not isinstance(description, str) or not description.strip():
            add("parameter-undescribed", f"parameter {visible(pname)!r} has no description: "
                "the model guesses what to put in it", pname)
        if not any(k in spec for k in ("type", "enum", "const", "$ref", "anyOf", "oneOf",
                                       "allOf")):
            add("parameter-untyped", f"parameter {visible(pname)!r} has no type: any JSON "
                "value passes validation", pname)
        kind = _free_form_kind(pname)
        if effect == "write" and kind is not None and _free_form(spec) and \
                not _constrained(policy, name, effect, pname):
            add("write-free-form", f"write tool takes {kind} in {visible(pname)!r} as free "
                "text with no constraint: a model (or text it read) can aim the action "
                "anywhere. Narrow it in the schema (enum, pattern, format) or the policy "
                f"([[rules]] tool = \"{visible(name)}\", arguments.{visible(pname)} = "
                f"{_suggestion(kind)})", pname)
    if effect == "read":
        network = [p for p, _ in params if str(p).lower() in _NETWORK]
        unconstrained = [p for p in network
                         if not _constrained(policy, name, effect, str(p))]
        if tool.open_world is True and not network:
            add("read-network", "a read tool that can reach the network "
                "(openWorldHint): what it sends out (a URL, a query) can carry data away; "
                "mark it openWorldHint: false if it cannot, or review what it sends")
        elif unconstrained:
            p = str(unconstrained[0])
            add("read-network", f"a read tool fetching {visible(p)!r} can send data out in "
                "the request; reads run without asking. Constrain it in the policy "
                f"(arguments.{visible(p)} = {{ url_hosts = [...] }}) or keep [taint] reads "
                "at \"url\" or stricter", p)
    if isinstance(properties, Mapping) and len(properties) > MAX_PARAMETERS_CHECKED:
        add("parameter-undescribed", f"{len(properties)} parameters: only the first "
            f"{MAX_PARAMETERS_CHECKED} were checked; no model chooses well among so many")
    return out


def _free_form_kind(name: str) -> str | None:
    key = name.lower()
    if key in _FREE_FORM:
        return _FREE_FORM[key]
    for suffix in ("_path", "_url", "_uri", "_sql", "_query", "_command", "_email"):
        if key.endswith(suffix):
            return _FREE_FORM[suffix[1:]]
    return None


def _free_form(spec: Mapping[str, Any]) -> bool:
    """A string (or untyped) value that the schema does not narrow."""
    kind = spec.get("type")
    stringy = kind is None or kind == "string" or (isinstance(kind, list) and "string" in kind)
    array_of_free = kind == "array" and isinstance(spec.get("items"), Mapping) and \
        _free_form(spec["items"])
    if not stringy and not array_of_free:
        return False
    return not any(k in spec for k in ("enum", "const", "pattern", "format"))


def _constrained(policy: Policy | None, tool: str, effect: str, argument: str) -> bool:
    """Whether some argument rule of *policy* constrains *argument* of *tool* for everyone
    (a rule limited to some roles does not narrow the others' calls)."""
    if policy is None:
        return False
    for rule in policy.rules:
        if isinstance(rule, RequireQuorum):  # the two-person rule wraps an argument rule
            rule = rule.rule
        if not isinstance(rule, ArgumentRule):
            continue
        constraints, match = rule.constraints, rule.match
        if argument not in constraints and not any(k.split(".")[0] == argument
                                                   for k in constraints):
            continue
        if match.roles is not None:
            continue
        if match.tools is not None and not any(fnmatch.fnmatchcase(tool, t)
                                               for t in match.tools):
            continue
        if match.effect is not None and match.effect.value != effect:
            continue
        return True
    return False


def _suggestion(kind: str) -> str:
    return {"a path": '{ path_inside = "/srv/data" }',
            "a URL": '{ url_hosts = ["api.example.com"] }',
            "a recipient": '{ email_domains = ["example.com"] }',
            "SQL": '{ matches = "^SELECT ..." }',
            "a command": '{ one_of = ["..."] }'}[kind]


def skeleton(name: str) -> str:
    """What a name looks like to a hurried reader: compatibility-folded, case-folded,
    invisible characters dropped, look-alike characters merged (``rn`` → ``m``)."""
    folded = unicodedata.normalize("NFKC", _INVISIBLE.sub("", name)).casefold()
    folded = "".join(c for c in unicodedata.normalize("NFKD", folded)
                     if not unicodedata.combining(c))
    return folded.translate(_LOOKALIKE).replace("rn", "m").replace("vv", "w")


def _clashes(facts: Sequence[ToolFacts]) -> list[tuple[str, str, str, str | None]]:
    groups: dict[str, list[str]] = {}
    for tool in facts:
        names = groups.setdefault(skeleton(tool.name[:1000]), [])
        if tool.name not in names:
            names.append(tool.name)
    out: list[tuple[str, str, str, str | None]] = []
    for names in groups.values():
        if len(names) < 2:
            continue
        for name in names:
            others = ", ".join(repr(visible(n)) for n in names if n != name)
            out.append(("name-confusable", name, f"looks like {others}: a model or a person "
                        "can take one for the other; rename one of them", None))
    return out


def lint_rules(policy: Policy) -> list[tuple[str, str]]:
    """Argument rules whose constraints make them apply to every call of their tools or to
    none: ``(rule id, what is wrong)`` for ``anfitrion policy validate``.

    - a ``verdict = "deny"`` rule with ``arguments``: a call that breaks a constraint is denied,
      and one that keeps them gets the verdict, deny, so the rule denies every call;
    - an argument whose ``one_of`` values are all refused by its ``none_of``: no value passes;
    - Cedar policies that can never apply (:func:`anfitrion.policy._cedar.cedar_lint`).

    Example:
        >>> from anfitrion.policy import ArgumentRule, OneOf, Policy
        >>> lint_rules(Policy([ArgumentRule("send", {"to": OneOf(["ceo@x.io"])}, "deny",
        ...                                 rule_id="no-ceo")]))[0][0]
        'no-ceo'
    """
    found: list[tuple[str, str]] = []
    for rule in policy.rules:
        if isinstance(rule, CedarRule):
            found += [(rule.rule_id, f"Cedar policy {label}: {why}")
                      for label, why in cedar_lint(rule.policies)]
            continue
        inner = rule.rule if isinstance(rule, RequireQuorum) else rule
        if not isinstance(inner, ArgumentRule):
            continue
        if inner.verdict is Verdict.DENY:
            found.append((inner.rule_id, "denies every call of its tools: a call that breaks an "
                          "argument constraint is denied too. To deny only some values, use "
                          "none_of or not_matches (and no verdict)"))
        for name, constraints in inner.constraints.items():
            allowed = [v for c in constraints if isinstance(c, OneOf) for v in c.values]
            refusers = [c for c in constraints if isinstance(c, NoneOf)]
            if allowed and refusers and all(
                    any(c.check(v) is not None for c in refusers) for v in allowed):
                found.append((inner.rule_id, f"argument {name!r}: none_of refuses every value "
                              "one_of allows, so no call that sets it passes"))
    return found
