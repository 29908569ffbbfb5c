"""Policy: the host decides whether a checked call may run, must ask a person, or is refused.

The combining rule (any deny wins, then any ask, then allow; else the default per effect) is
written once, in :mod:`anfitrion.policy._core`; what it may know of a rule (its id, its role,
the counts it needs, its settings) is the rule contract of :mod:`anfitrion.policy._contract`.
Built-in rules live in :mod:`.rules` (tool globs, effects, argument constraints, repeated
calls), :mod:`.ratelimit` and :mod:`.secrets` (credentials leaving in arguments); constraints in
:mod:`anfitrion._constraints`; loading from ``anfitrion.toml`` in :mod:`._config`; the tool and
rule linter (``anfitrion tools lint``, ``policy validate``) in :mod:`._lint`; Cedar policies
(the ``cedar`` extra, imported on use) in :mod:`._cedar`.
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
from ._cedar import CedarRule, cedar_schema, validate_cedar
from ._cedar_export import export_cedar
from ._config import DEFAULT_POLICY_FILE, find_policy, load_policy, parse_policy
from ._contract import BaseRule, PolicyRule, Reach, RuleRole, as_rule
from ._core import ApprovalLimits, Budgets, Evaluation, Opinion, Policy, WebhookTarget, rule_id_of
from ._decision import Decision, PolicyContext, RateKey, Rule, Verdict
from ._declarations import check_declarations
from ._lint import (
    LINT_CODES,
    Finding,
    LintReport,
    Silence,
    ToolFacts,
    facts_of_mcp,
    facts_of_tool,
    lint_rules,
    lint_tools,
    visible,
)
from ._ratelimit import ALL_TOOLS, RateLimit, parse_duration
from ._rules import ArgumentRule, EffectRule, RepeatGuard, ToolRule, arguments_digest
from ._secrets import SecretArguments
from ._taint import TAINT_WARNING, TaintRule, taint_rule

__all__ = [
    "ALL_TOOLS",
    "AUDIO_TYPES",
    "DEFAULT_POLICY_FILE",
    "IMAGE_TYPES",
    "LINT_CODES",
    "TAINT_WARNING",
    "ApprovalLimits",
    "ArgumentRule",
    "BaseRule",
    "Budgets",
    "CedarRule",
    "Constraint",
    "Decision",
    "EffectRule",
    "EmailDomain",
    "Evaluation",
    "Finding",
    "LengthRange",
    "LintReport",
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
    "Silence",
    "TaintRule",
    "ToolFacts",
    "ToolRule",
    "UrlAllowed",
    "Verdict",
    "WebhookTarget",
    "arguments_digest",
    "as_rule",
    "canonical_host",
    "cedar_schema",
    "check_declarations",
    "export_cedar",
    "facts_of_mcp",
    "facts_of_tool",
    "find_policy",
    "lint_rules",
    "lint_tools",
    "load_policy",
    "parse_duration",
    "parse_policy",
    "rule_id_of",
    "taint_rule",
    "validate_cedar",
    "visible",
]
