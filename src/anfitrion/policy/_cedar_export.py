"""A translation aid: the rules of a policy that Cedar can express, as Cedar
(``anfitrion policy export --cedar``), and the ones it cannot, each with the reason.

Expressed: tool rules (exact tool names, or globs expanded over the tools given; an effect;
roles) and argument rules whose constraints are ``one_of``, ``none_of`` over numbers and
booleans, and integer ``min``/``max`` — a violated constraint as a ``forbid``, the verdict as
a ``permit`` (``@anfitrion("ask")`` for an ask). Not expressed, and said so: taint
containment, rate limits, budgets, the repeated-call guard, credentials in arguments, quorums,
and constraints Cedar has no counterpart for (patterns, paths, URLs, e-mail domains, lengths,
a case-folding ``none_of`` over strings). The output is a starting point to review, not a
proof of equivalence: an argument rule checks each element of an array, the Cedar policy the
value itself.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterable, Sequence
from typing import Any

from .._constraints import Constraint, NoneOf, NumberRange, OneOf
from ._contract import as_rule
from ._core import Policy
from ._decision import Rule, Verdict
from ._rules import ArgumentRule, ToolRule, _Match

__all__ = ["export_cedar"]

_LONG = 2 ** 63


class _Inexpressible(Exception):
    """Why one rule cannot be written in Cedar (private: becomes a line of the report)."""


def export_cedar(policy: Policy, tool_names: Iterable[str] | None = None
                 ) -> tuple[str, list[tuple[str, str]]]:
    """The Cedar text of the rules of *policy* that Cedar can express, and ``(rule id, why
    not)`` for the others. *tool_names* (the real tools) lets tool-name globs be expanded.

    Example:
        >>> from anfitrion.policy import parse_policy
        >>> text, left = export_cedar(parse_policy(
        ...     '[[rules]]\\nid = "no-deletes"\\ntool = "delete_account"\\nverdict = "deny"\\n'))
        >>> 'forbid(principal, action == Action::"delete_account", resource)' in text
        True
        >>> [rule for rule, _ in left]
        ['taint', 'secrets']
    """
    names = None if tool_names is None else sorted(set(tool_names))
    blocks: list[str] = []
    left: list[tuple[str, str]] = []
    for rule in policy.rules:
        rule_id = as_rule(rule).rule_id
        try:
            blocks.extend(_translate(rule, rule_id, names))
        except _Inexpressible as exc:
            left.append((rule_id, str(exc)))
    header = [f"// exported by `anfitrion policy export --cedar` from {policy.source or 'code'}",
              "// review before use: a starting point, not a proof of equivalence"]
    header += [f"// not expressed: {rule_id}: {why}" for rule_id, why in left]
    budgets = {k: v for k, v in policy.budgets.to_dict().items() if v is not None}
    if budgets:
        left.append(("budgets", "session budgets stay anfitrion's ([budgets])"))
        header.append("// not expressed: budgets: session budgets stay anfitrion's ([budgets])")
    return "\n".join(header) + "\n\n" + "\n\n".join(blocks) + ("\n" if blocks else ""), left


def _translate(rule: Rule, rule_id: str, names: Sequence[str] | None) -> list[str]:
    if isinstance(rule, ToolRule):
        scope, conditions = _scope(rule.match, names)
        return [_policy(rule_id, rule.verdict, scope, conditions, rule.reason)]
    if isinstance(rule, ArgumentRule):
        return _argument_rule(rule, rule_id, names)
    kind = type(rule).__name__
    why = {"TaintRule": "taint containment stays anfitrion's ([taint]); Cedar sees "
                        "context.tainted, context.flagged and context.unproven",
           "RateLimit": "rate limits stay anfitrion's ([[rate_limits]]): Cedar keeps no "
                        "counts over time",
           "RepeatGuard": "the repeated-call guard stays anfitrion's ([repeat_guard])",
           "SecretArguments": "credentials in arguments are found by anfitrion's scanner "
                              "([secrets])",
           "RequireQuorum": "a quorum of approvers is anfitrion's (quorum = …)",
           "CedarRule": "already Cedar"}.get(kind, f"a {kind} rule has no Cedar form")
    raise _Inexpressible(why)


def _quoted(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _scope(match: _Match, names: Sequence[str] | None) -> tuple[str, list[str]]:
    conditions: list[str] = []
    if match.effect is not None:
        conditions.append(f"context.effect == {_quoted(match.effect.value)}")
    if match.roles is not None:
        roles = ", ".join(_quoted(r) for r in sorted(match.roles))
        conditions.append(f"principal.roles.containsAny([{roles}])")
    tools = match.tools or ("*",)
    if "*" in tools:
        return "action", conditions
    exact: list[str] = []
    for pattern in tools:
        if not any(c in pattern for c in "*?["):
            exact.append(pattern)
        elif names is None:
            raise _Inexpressible(f"the tool glob {pattern!r} needs the tools to expand it "
                                 "(--toolbox)")
        else:
            exact += [n for n in names if fnmatch.fnmatchcase(n, pattern)]
    exact = sorted(set(exact))
    if not exact:
        raise _Inexpressible("its tool globs match none of the tools given")
    if len(exact) == 1:
        return f"action == Action::{_quoted(exact[0])}", conditions
    return "action in [" + ", ".join(f"Action::{_quoted(n)}" for n in exact) + "]", conditions


def _policy(rule_id: str, verdict: Verdict, scope: str, conditions: Sequence[str],
            reason: str | None, suffix: str = "") -> str:
    head = [f"@id({_quoted(rule_id + suffix)})"]
    if verdict is Verdict.ASK:
        head.append('@anfitrion("ask")')
    if reason:
        head.append(f"@reason({_quoted(reason)})")
    effect = "forbid" if verdict is Verdict.DENY else "permit"
    body = f"{effect}(principal, {scope}, resource)"
    if conditions:
        body += "\nwhen { " + "\n       && ".join(conditions) + " };"
    else:
        body += ";"
    return " ".join(head) + "\n" + body


def _argument_rule(rule: ArgumentRule, rule_id: str, names: Sequence[str] | None) -> list[str]:
    scope, conditions = _scope(rule.match, names)
    holds: list[str] = []
    for name, constraints in rule.constraints.items():
        path, present = "context.arguments", []
        for part in name.split("."):
            present.append(f"{path} has {_attribute(part)}")
            path += f".{part}" if _plain(part) else f"[{_quoted(part)}]"
        checks = [_constraint(c, path) for c in constraints]
        holds.append(f"(!({' && '.join(present)}) || ({' && '.join(checks)}))")
    out = [_policy(rule_id, Verdict.DENY, scope, [*conditions, f"!({' && '.join(holds)})"],
                   rule.violation_reason, "/violation")]
    if rule.verdict is not None:
        out.append(_policy(rule_id, rule.verdict, scope, [*conditions, *holds], rule.reason))
    return out


def _plain(name: str) -> bool:
    return name.isidentifier() and name.isascii() and name not in {
        "true", "false", "if", "then", "else", "in", "is", "like", "has"}


def _attribute(name: str) -> str:
    return name if _plain(name) else _quoted(name)


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and -_LONG <= value < _LONG:
        return str(value)
    if isinstance(value, str):
        return _quoted(value)
    raise _Inexpressible(f"the value {value!r} has no exact Cedar literal")


def _constraint(constraint: Constraint, path: str) -> str:
    if isinstance(constraint, OneOf):
        return f"[{', '.join(_literal(v) for v in constraint.values)}].contains({path})"
    if isinstance(constraint, NoneOf):
        if any(isinstance(v, str) for v in constraint.values):
            raise _Inexpressible("none_of over strings compares case-folded and normalised "
                                 "text; Cedar compares exactly, which would let variants by")
        return f"!([{', '.join(_literal(v) for v in constraint.values)}].contains({path}))"
    if isinstance(constraint, NumberRange):
        bounds = []
        for op, bound in ((">=", constraint.minimum), ("<=", constraint.maximum)):
            if bound is None:
                continue
            if isinstance(bound, float) and not bound.is_integer():
                raise _Inexpressible("a fractional min/max needs Cedar's decimal type")
            bounds.append(f"{path} {op} {int(bound)}")
        return " && ".join(bounds) or "true"
    raise _Inexpressible(f"the constraint {type(constraint).__name__} has no Cedar "
                         "counterpart")
