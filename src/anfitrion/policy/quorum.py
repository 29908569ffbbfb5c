"""The two-person rule as a wrapper: a rule whose asks need several distinct approvers.

Example:
    >>> from anfitrion.approvals import Quorum
    >>> from anfitrion.policy import ToolRule
    >>> rule = RequireQuorum(ToolRule("deploy", "ask"), Quorum(2, ("ops",)))
    >>> rule.rule_id
    'tool:deploy'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..approvals import Quorum
from ..tools import BoundCall
from ._core import Decision, PolicyContext, Rule, Verdict, rule_id_of
from .constraints import Constraint
from .rules import ArgumentRule

__all__ = ["RequireQuorum"]


class RequireQuorum:
    """Wraps *rule*: when it asks, *quorum* distinct people must approve the call.

    With *when*, only calls whose arguments meet every one of those constraints need the
    quorum (``{"amount": NumberRange(1000, None)}``: payments of 1000 or more); the others
    need one approval as before. Other decisions pass through unchanged. The wrapper shows
    the wrapped rule's attributes (``rule_id``, ``match``, ``verdict``), so explanations and
    :meth:`Policy.may_allow` see the rule it wraps.
    """

    def __init__(self, rule: Rule, quorum: Quorum, *,
                 when: Mapping[str, Constraint | Sequence[Constraint]] | None = None) -> None:
        self.rule = rule
        self.quorum = quorum
        self.rule_id = rule_id_of(rule)
        self.when = ArgumentRule("*", when) if when else None

    def __call__(self, call: BoundCall, context: PolicyContext) -> Decision | None:
        decision = self.rule(call, context)
        if decision is None or decision.verdict is not Verdict.ASK:
            return decision
        if self.when is not None and self.when.violation(call.arguments) is not None:
            return decision
        return replace(decision, quorum=self.quorum.stricter(decision.quorum))

    def __getattr__(self, name: str) -> Any:
        if name in ("rule", "quorum", "rule_id", "when"):  # not set yet (copy, unpickling)
            raise AttributeError(name)
        return getattr(self.rule, name)
