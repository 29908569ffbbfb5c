"""Policy: the host decides whether a checked call may run, must ask a person, or is refused.

The combining rule (any deny wins, then any ask, then allow; else the default per effect) is
written once, in :mod:`anfitrion.policy._core`; what it may know of a rule (its id, its role,
the counts it needs, its settings) is the rule contract of :mod:`anfitrion.policy._contract`.
Built-in rules live in :mod:`.rules` (tool globs, effects, argument constraints, repeated
calls), :mod:`.ratelimit` and :mod:`.secrets` (credentials leaving in arguments); constraints in
:mod:`.constraints`; loading from ``anfitrion.toml`` in :mod:`.config`.
"""

from __future__ import annotations

from ..constraints import (
    Constraint,
    EmailDomain,
    LengthRange,
    Matches,
    NoneOf,
    NotMatches,
    NumberRange,
    OneOf,
    PathInside,
    UrlAllowed,
    canonical_host,
)
from ._contract import BaseRule, PolicyRule, Reach, RuleRole, as_rule
from ._core import (
    ApprovalLimits,
    Budgets,
    Decision,
    Evaluation,
    Opinion,
    Policy,
    PolicyContext,
    RateKey,
    Rule,
    Verdict,
    rule_id_of,
)
from .config import DEFAULT_POLICY_FILE, find_policy, load_policy, parse_policy
from .ratelimit import ALL_TOOLS, RateLimit, parse_duration
from .rules import ArgumentRule, EffectRule, RepeatGuard, ToolRule, arguments_digest
from .secrets import SecretArguments

__all__ = [
    "ALL_TOOLS",
    "DEFAULT_POLICY_FILE",
    "ApprovalLimits",
    "ArgumentRule",
    "BaseRule",
    "Budgets",
    "Constraint",
    "Decision",
    "EffectRule",
    "EmailDomain",
    "Evaluation",
    "LengthRange",
    "Matches",
    "NoneOf",
    "NotMatches",
    "NumberRange",
    "OneOf",
    "Opinion",
    "PathInside",
    "Policy",
    "PolicyContext",
    "PolicyRule",
    "RateKey",
    "RateLimit",
    "Reach",
    "RepeatGuard",
    "Rule",
    "RuleRole",
    "SecretArguments",
    "ToolRule",
    "UrlAllowed",
    "Verdict",
    "arguments_digest",
    "as_rule",
    "canonical_host",
    "find_policy",
    "load_policy",
    "parse_duration",
    "parse_policy",
    "rule_id_of",
]
