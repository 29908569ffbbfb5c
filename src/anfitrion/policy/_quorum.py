"""The two-person rule as a wrapper: a rule whose asks need several distinct approvers.

Example:
    >>> from anfitrion._approvals import Quorum
    >>> from anfitrion.policy import ToolRule
    >>> rule = RequireQuorum(ToolRule("deploy", "ask"), Quorum(2, ("ops",)))
    >>> rule.rule_id
    'tool:deploy'
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from .._approvals import Quorum
from .._constraints import Constraint, clearly_refuses
from .._principal import Principal
from .._tools import BoundCall, Tool
from ._contract import Reach, RuleRole, as_rule
from ._decision import Decision, PolicyContext, RateKey, Rule, Verdict
from ._rules import _MISSING, ArgumentRule, _values_at

__all__ = ["RequireQuorum"]


class RequireQuorum:
    """Wraps *rule*: when it asks, *quorum* distinct people must approve the call.

    With *when*, only calls whose arguments meet every one of those constraints need the
    quorum (``{"amount": NumberRange(1000, None)}``: payments of 1000 or more); the others
    need one approval as before. The quorum is dropped only for a call that is *clearly*
    outside: some constraint judged a plain value of the kind it checks and found it outside
    (every element, for an array). A value a constraint cannot judge keeps the quorum (fail
    closed, as reviewer entitlements do): ``"5000"``, ``true`` or ``null`` for a number, NaN,
    an infinity or an integer beyond ±2**53 (a tool may read it wrapped or rounded), an
    object, a path through a scalar, a string a tool may read as an allowed value (``"usd"``
    for ``one_of = ["USD"]``, a full-width look-alike for ``matches``), a URL or address that
    is not plain, an ambiguous path; and any value for a constraint of a kind not listed here
    (an operator's own).

    Other decisions pass through unchanged. Under the rule contract the wrapper is the rule
    it wraps (its id, role, counts, reach and settings), so explanations and
    :meth:`Policy.may_allow` see that rule.
    """

    def __init__(self, rule: Rule, quorum: Quorum, *,
                 when: Mapping[str, Constraint | Sequence[Constraint]] | None = None) -> None:
        self.rule = rule
        self.quorum = quorum
        self._wrapped = as_rule(rule)
        self.rule_id = self._wrapped.rule_id
        self.when = ArgumentRule("*", when) if when else None

    @property
    def role(self) -> RuleRole:
        return self._wrapped.role

    @property
    def settings(self) -> Mapping[str, Any] | None:
        return self._wrapped.settings

    @property
    def trade_off(self) -> str | None:
        return self._wrapped.trade_off

    def rate_keys(self, tool_name: str) -> Iterable[RateKey]:
        return self._wrapped.rate_keys(tool_name)

    def reach(self, tool: Tool, principal: Principal) -> Reach:
        return self._wrapped.reach(tool, principal)

    def description(self) -> Mapping[str, Any] | None:
        return None  # its id, kind and public attributes: the wrapped rule and the quorum

    def __call__(self, call: BoundCall, context: PolicyContext) -> Decision | None:
        decision = self.rule(call, context)
        if decision is None or decision.verdict is not Verdict.ASK:
            return decision
        if self.when is not None and _clearly_outside(self.when, call.arguments):
            return decision
        return replace(decision, quorum=self.quorum.stricter(decision.quorum))


def _clearly_outside(when: ArgumentRule, arguments: Mapping[str, Any]) -> bool:
    """Whether the call is outside *when*: at one argument path, every value (an absent
    argument has none) is judged outside by one of its constraints."""
    for name, constraints in when.constraints.items():
        values = _values_at(arguments, name.split("."))
        if values and all(v is not _MISSING and any(clearly_refuses(c, v) for c in constraints)
                          for v in values):
            return True
    return False
