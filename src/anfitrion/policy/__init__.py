"""Policy: the host decides whether a checked call may run, must ask a person, or is refused.

The combining rule (any deny wins, then any ask, then allow; else the default per effect) is
written once, in :mod:`anfitrion.policy._core`; what it may know of a rule (its id, its role,
the counts it needs, its settings) is the rule contract of :mod:`anfitrion.policy._contract`.
Built-in rules live in :mod:`.rules` (tool globs, effects, argument constraints, repeated
calls), :mod:`.ratelimit` and :mod:`.secrets` (credentials leaving in arguments); constraints in
:mod:`.constraints`; loading from ``anfitrion.toml`` in :mod:`.config`.
"""

from __future__ import annotations

from .._constraints import (
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
from .._media import AUDIO_TYPES, IMAGE_TYPES, MediaSettings
from ._config import DEFAULT_POLICY_FILE, find_policy, load_policy, parse_policy
from ._contract import BaseRule, PolicyRule, Reach, RuleRole, as_rule
from ._core import ApprovalLimits, Budgets, Evaluation, Opinion, Policy, WebhookTarget, rule_id_of
from ._decision import Decision, PolicyContext, RateKey, Rule, Verdict
from ._ratelimit import ALL_TOOLS, RateLimit, parse_duration
from ._rules import ArgumentRule, EffectRule, RepeatGuard, ToolRule, arguments_digest
from ._secrets import SecretArguments
from ._taint import TaintRule, taint_rule

__all__ = [
    "ALL_TOOLS",
    "AUDIO_TYPES",
    "DEFAULT_POLICY_FILE",
    "IMAGE_TYPES",
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
    "MediaSettings",
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
    "TaintRule",
    "ToolRule",
    "UrlAllowed",
    "Verdict",
    "WebhookTarget",
    "arguments_digest",
    "as_rule",
    "canonical_host",
    "find_policy",
    "load_policy",
    "parse_duration",
    "parse_policy",
    "rule_id_of",
    "taint_rule",
]
