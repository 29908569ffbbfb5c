"""Built-in rules: by tool name (globs), by effect, by argument constraints, repeated calls.

Each rule is a small callable object ``(call, context) -> Decision | None`` under the rule
contract (:class:`~anfitrion.policy.PolicyRule`: its id, its role, the counts it needs); any
plain function with that signature works just as well in a :class:`~.Policy` (an opinion).

Example:
    >>> from anfitrion.policy import ArgumentRule, EmailDomain, Policy, ToolRule, Verdict
    >>> policy = Policy([
    ...     ToolRule("get_*", Verdict.ALLOW),
    ...     ArgumentRule("send_email", {"to": EmailDomain(["example.com"])}, Verdict.ASK),
    ... ])
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .._canonical import digest
from .._constraints import Constraint
from .._principal import Principal
from .._tools import BoundCall, Effect, Tool
from ..exceptions import UserError
from ._contract import BaseRule, Reach, RuleRole
from ._decision import Decision, PolicyContext, Verdict

__all__ = ["RECENT_CALLS_KEPT", "ArgumentRule", "EffectRule", "RepeatGuard", "ToolRule",
           "arguments_digest"]

RECENT_CALLS_KEPT = 20
"""How many recent proposals a session keeps for :class:`RepeatGuard`."""

_MISSING = object()
_NAMES_CACHED = 1024


class _Match:
    """Which calls a rule is about: tool-name globs, an effect, principal roles (all optional;
    every one given must match)."""

    def __init__(self, tools: str | Iterable[str] | None, effect: Effect | str | None,
                 roles: Iterable[str] | None) -> None:
        if isinstance(tools, str):
            tools = (tools,)
        self.tools = tuple(tools) if tools is not None else None
        if self.tools is not None and (not self.tools or
                                       not all(isinstance(t, str) and t for t in self.tools)):
            raise UserError("tools must be non-empty name patterns")
        self.effect = Effect(effect) if effect is not None else None
        self.roles = frozenset(roles) if roles is not None else None
        self._names: dict[str, bool] = {}  # tool name -> matches a glob (names are few)

    def _name_matches(self, name: str) -> bool:
        hit = self._names.get(name)
        if hit is None:
            assert self.tools is not None
            hit = any(fnmatch.fnmatchcase(name, t) for t in self.tools)
            if len(self._names) < _NAMES_CACHED:
                self._names[name] = hit
        return hit

    def matches(self, call: BoundCall, context: PolicyContext) -> bool:
        return self.covers(call.tool, context.principal)

    def covers(self, tool: Tool, principal: Principal) -> bool:
        """Whether calls of *tool* by *principal* are the rule's (arguments aside)."""
        if self.tools is not None and not self._name_matches(tool.name):
            return False
        if self.effect is not None and tool.effect is not self.effect:
            return False
        return self.roles is None or bool(self.roles & principal.roles)

    def describe(self) -> str:
        parts = []
        if self.tools is not None:
            parts.append("tool " + "|".join(self.tools))
        if self.effect is not None:
            parts.append(f"effect {self.effect.value}")
        if self.roles is not None:
            parts.append("role " + "|".join(sorted(self.roles)))
        return ", ".join(parts) or "every call"


def _verdict_reason(verdict: Verdict, what: str) -> str:
    return {Verdict.ALLOW: f"allowed for {what}", Verdict.ASK: f"a person must approve {what}",
            Verdict.DENY: f"{what} is not allowed"}[verdict]


def _reach(match: _Match, verdict: Verdict | None, tool: Tool, principal: Principal) -> Reach:
    if verdict is None or not match.covers(tool, principal):
        return Reach.SILENT
    return Reach.DENIES_ALL if verdict is Verdict.DENY else Reach.MAY_GRANT


class ToolRule(BaseRule):
    """Gives *verdict* to calls of tools whose names match a glob (``send_*``).

    Args:
        tools: one glob or several (case-sensitive; ``*`` matches any name).
        verdict: what matching calls get.
        reason: the operator's words, shown to the model on deny and to the approver on ask.
        effect: match only tools of this effect as well.
        roles: match only principals with one of these roles.
        rule_id: for the audit log and explanations.
    """

    def __init__(self, tools: str | Iterable[str], verdict: Verdict | str, *,
                 reason: str | None = None, effect: Effect | str | None = None,
                 roles: Iterable[str] | None = None, rule_id: str | None = None) -> None:
        self.match = _Match(tools, effect, roles)
        self.verdict = Verdict(verdict)
        self.reason = reason or _verdict_reason(self.verdict, self.match.describe())
        self.rule_id = rule_id or f"tool:{'|'.join(self.match.tools or ())}"

    def reach(self, tool: Tool, principal: Principal) -> Reach:
        return _reach(self.match, self.verdict, tool, principal)

    def __call__(self, call: BoundCall, context: PolicyContext) -> Decision | None:
        if not self.match.matches(call, context):
            return None
        return Decision(self.verdict, self.reason, self.rule_id)


class EffectRule(ToolRule):
    """Gives *verdict* to every tool of one effect (``read`` → allow)."""

    def __init__(self, effect: Effect | str, verdict: Verdict | str, *,
                 reason: str | None = None, roles: Iterable[str] | None = None,
                 rule_id: str | None = None) -> None:
        super().__init__("*", verdict, reason=reason, effect=effect, roles=roles,
                         rule_id=rule_id or f"effect:{Effect(effect).value}")


def _values_at(arguments: Any, path: Sequence[str]) -> list[Any]:
    """The values at a dotted path; arrays on the way (and at the end) are entered."""
    if not path:
        if isinstance(arguments, list):
            return [v for item in arguments for v in _values_at(item, path)]
        return [arguments]
    if isinstance(arguments, list):
        return [v for item in arguments for v in _values_at(item, path)]
    if isinstance(arguments, Mapping):
        value = arguments.get(path[0], _MISSING)
        return [] if value is _MISSING else _values_at(value, path[1:])
    return [_MISSING]  # the path goes through a scalar: not what the rule expects


class ArgumentRule(BaseRule):
    """Constraints on the arguments of matching calls; *verdict* when all of them hold.

    A violated constraint denies the call. When they all hold, the rule gives *verdict*, or
    no opinion when *verdict* is ``None``. Argument names are dotted paths into the arguments
    object (``message.to``); an array value (or an array on the way) is checked element by
    element. An argument that is absent is not checked: the tool's own default applies.

    Args:
        tools: tool-name globs the rule is about.
        constraints: argument path → one constraint or several.
        verdict: what the call gets when every constraint holds (``None``: no opinion).
        reason: the operator's words for *verdict*.
        violation: the operator's words when a constraint fails; without it the denial says
            which argument failed and how (the constraint's own message), never *reason*,
            which was written for the calls that pass.
    """

    def __init__(self, tools: str | Iterable[str],
                 constraints: Mapping[str, Constraint | Sequence[Constraint]],
                 verdict: Verdict | str | None = None, *, reason: str | None = None,
                 violation: str | None = None, effect: Effect | str | None = None,
                 roles: Iterable[str] | None = None, rule_id: str | None = None) -> None:
        self.match = _Match(tools, effect, roles)
        self.constraints: dict[str, tuple[Constraint, ...]] = {}
        for name, found in constraints.items():
            items = (found,) if not isinstance(found, Sequence) else tuple(found)
            if not name or not items:
                raise UserError("every constrained argument needs a name and a constraint")
            self.constraints[name] = items
        self.verdict = Verdict(verdict) if verdict is not None else None
        self.reason = reason
        self.violation_reason = violation
        self.rule_id = rule_id or f"arguments:{'|'.join(self.match.tools or ())}"

    def reach(self, tool: Tool, principal: Principal) -> Reach:
        # a violation denies, so a deny verdict denies every call; no verdict grants nothing
        return _reach(self.match, self.verdict, tool, principal)

    def violation(self, arguments: Mapping[str, Any]) -> str | None:
        """The first violated constraint, described, or ``None``."""
        for name, constraints in self.constraints.items():
            for value in _values_at(arguments, name.split(".")):
                for constraint in constraints:
                    problem = ("has an unexpected shape" if value is _MISSING
                               else constraint.check(value))
                    if problem:
                        return f"argument {name!r} {problem}"
        return None

    def __call__(self, call: BoundCall, context: PolicyContext) -> Decision | None:
        if not self.match.matches(call, context):
            return None
        problem = self.violation(call.arguments)
        if problem is not None:
            return Decision.deny(self.violation_reason or problem, self.rule_id)
        if self.verdict is None:
            return None
        reason = self.reason or _verdict_reason(self.verdict, self.match.describe())
        return Decision(self.verdict, reason, self.rule_id)


def arguments_digest(arguments: Mapping[str, Any]) -> str:
    """The digest the gate records in ``recent_calls`` (canonical JSON: spacing and key order
    do not make two calls different)."""
    return digest(dict(arguments))


class RepeatGuard(BaseRule):
    """Denies the same call (tool and canonical arguments) proposed again after *max_repeats*
    identical proposals in a row — a model stuck in a loop, or one probing the gate."""

    role = RuleRole.DENY_ONLY  # it can deny a call, never allow one

    def __init__(self, max_repeats: int = 3, *, reason: str | None = None,
                 rule_id: str = "repeat_guard") -> None:
        if isinstance(max_repeats, bool) or not isinstance(max_repeats, int) \
                or not 1 <= max_repeats <= RECENT_CALLS_KEPT:
            raise UserError(f"max_repeats must be an integer from 1 to {RECENT_CALLS_KEPT}")
        self.max_repeats = max_repeats
        self.reason = reason or (f"the same call was proposed {max_repeats} times in a row; "
                                 "change the arguments or stop")
        self.rule_id = rule_id

    def __call__(self, call: BoundCall, context: PolicyContext) -> Decision | None:
        key = (call.name, arguments_digest(call.arguments))
        recent = context.recent_calls[-self.max_repeats:]
        if len(recent) == self.max_repeats and all(r == key for r in recent):
            return Decision.deny(self.reason, self.rule_id)
        return None
