"""Policy: the host decides whether a checked call may run, must ask a person, or is refused.

A :class:`Policy` is a chain of rules. A rule is a plain callable ``(call, context) ->
Decision | None``: ``None`` means "no opinion". The combining rule is written down once, here:

1. a tool that requires scopes the principal lacks is denied (rule id ``scopes``);
2. every rule runs; **any deny wins**, then **any ask**, then **allow**;
3. when no rule has an opinion, the default for the tool's effect applies:
   ``read → allow``, ``write → ask`` (rule ids ``default.read`` / ``default.write``).

Unknown tools never get here: the gate refuses them at resolve. The policy does no I/O; counters
it needs come in the :class:`PolicyContext`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, TypeAlias

from .principal import Principal
from .tools import BoundCall, Effect

__all__ = ["Decision", "Policy", "PolicyContext", "Rule", "Verdict"]


class Verdict(StrEnum):
    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


@dataclass(frozen=True, slots=True)
class Decision:
    """What the policy decided for one call, why, and which rule decided it.

    Attributes:
        warnings: things a person approving the call should see (flagged arguments, taint).
    """

    verdict: Verdict
    reason: str
    rule_id: str
    warnings: tuple[str, ...] = ()

    @classmethod
    def allow(cls, reason: str, rule_id: str) -> Decision:
        return cls(Verdict.ALLOW, reason, rule_id)

    @classmethod
    def ask(cls, reason: str, rule_id: str, warnings: Iterable[str] = ()) -> Decision:
        return cls(Verdict.ASK, reason, rule_id, tuple(warnings))

    @classmethod
    def deny(cls, reason: str, rule_id: str) -> Decision:
        return cls(Verdict.DENY, reason, rule_id)

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict.value, "reason": self.reason, "rule_id": self.rule_id,
                "warnings": list(self.warnings)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Decision:
        return cls(Verdict(d["verdict"]), d["reason"], d["rule_id"], tuple(d.get("warnings", ())))


@dataclass(frozen=True, slots=True)
class PolicyContext:
    """Everything a rule may look at besides the call. Built by the host; no I/O in rules.

    Attributes:
        counters: per-session counts, e.g. ``{"tool_calls": 3, "turns": 2}``.
        recent_calls: ``(tool, canonical-arguments digest)`` of the calls this session, newest
            last, for repeated-call guards.
        untrusted_sources: tools whose untrusted results entered the conversation (taint).
        flagged_arguments: argument paths whose values came only from untrusted content.
    """

    principal: Principal
    session_id: str
    turn: int = 0
    now: datetime = field(default_factory=lambda: datetime.now(UTC))
    counters: Mapping[str, int] = field(default_factory=dict)
    recent_calls: tuple[tuple[str, str], ...] = ()
    untrusted_sources: tuple[str, ...] = ()
    flagged_arguments: Mapping[str, str] = field(default_factory=dict)
    rate_counts: Mapping[str, int] = field(default_factory=dict)

    @property
    def tainted(self) -> bool:
        return bool(self.untrusted_sources)


Rule: TypeAlias = Callable[[BoundCall, PolicyContext], "Decision | None"]

_DEFAULTS: Mapping[Effect, Verdict] = {Effect.READ: Verdict.ALLOW, Effect.WRITE: Verdict.ASK}


class Policy:
    """A chain of rules plus the defaults per effect.

    Example:
        >>> policy = Policy.default()
        >>> policy.defaults[Effect.WRITE]
        <Verdict.ASK: 'ask'>
    """

    def __init__(self, rules: Iterable[Rule] = (), *,
                 defaults: Mapping[Effect, Verdict] | None = None) -> None:
        self.rules: tuple[Rule, ...] = tuple(rules)
        self.defaults: Mapping[Effect, Verdict] = dict(defaults or _DEFAULTS)

    @classmethod
    def default(cls) -> Policy:
        """Reads are allowed, writes ask a person, nothing else is decided."""
        return cls()

    def with_rules(self, *rules: Rule) -> Policy:
        """A new policy with *rules* appended."""
        return Policy((*self.rules, *rules), defaults=self.defaults)

    def decide(self, call: BoundCall, context: PolicyContext) -> Decision:
        """Apply the combining rule (module docstring) to one call."""
        tool = call.tool
        if tool.scopes and not tool.scopes <= context.principal.scopes:
            missing = ", ".join(sorted(tool.scopes - context.principal.scopes))
            return Decision.deny(f"the principal lacks the scope(s) {missing}", "scopes")
        asks: list[Decision] = []
        allow: Decision | None = None
        for rule in self.rules:
            decision = rule(call, context)
            if decision is None:
                continue
            if decision.verdict is Verdict.DENY:
                return decision
            if decision.verdict is Verdict.ASK:
                asks.append(decision)
            elif allow is None:
                allow = decision
        if asks:
            first = asks[0]
            warnings = tuple(dict.fromkeys(w for d in asks for w in d.warnings))
            return Decision(Verdict.ASK, first.reason, first.rule_id, warnings)
        if allow is not None:
            return allow
        verdict = self.defaults.get(tool.effect, Verdict.DENY)
        reason = {Verdict.ALLOW: f"{tool.effect.value} tools are allowed by default",
                  Verdict.ASK: f"{tool.effect.value} tools need a person's approval by default",
                  Verdict.DENY: f"{tool.effect.value} tools are denied by default"}[verdict]
        return Decision(verdict, reason, f"default.{tool.effect.value}")
