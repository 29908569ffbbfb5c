"""Decisions, the policy context, and the combining rule.

A :class:`Policy` is a chain of rules. A rule is a callable ``(call, context) -> Decision |
None`` (``None`` means "no opinion") under the contract of :mod:`._contract`: its id, its
role, the counts it needs, its settings; a plain callable is an opinion. The combining rule is
written down once, here:

1. a tool that requires scopes the principal lacks is denied (rule id ``scopes``);
2. a spent session budget denies (rule ids ``budget.tool_calls``, ``budget.turns``);
3. every rule runs; **any deny wins**, then **any ask**, then **allow**;
4. when no rule has an opinion, the default for the tool's effect applies:
   ``read → allow``, ``write → ask`` (rule ids ``default.read`` / ``default.write``);
   an escalation rule (:attr:`RuleRole.ESCALATION`: taint, credentials) is not an opinion
   here: its ``ask`` turns an allow into an ask afterwards, and never overrides a deny — the
   default deny included; a deny-only or escalation rule never grants (its allow is ignored);
5. an ``ask`` when the session has asked for its budget of approvals becomes a deny
   (``budget.approvals_asked``);
6. a rule that raises denies the call (fail closed, rule id ``<rule>.error``).

Every policy has a content hash, :attr:`Policy.sha256`, recorded with each decision it makes
(audit log, telemetry), so replay and audits can tell which policy decided.

Unknown tools never get here: the gate refuses them at resolve (an unknown tool is denied).
The policy does no I/O; the counters it needs (rate counts, session counters) come in the
:class:`PolicyContext`, filled by the gate from the store.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable
from urllib.parse import urlsplit

from .._approvals import Quorum
from .._canonical import digest as _digest
from .._home import environment
from .._media import MediaSettings
from .._principal import Principal
from .._tools import BoundCall, Effect, Tool
from ..exceptions import UserError
from ._contract import PolicyRule, Reach, RuleRole, as_rule
from ._decision import Decision, PolicyContext, RateKey, Rule, Verdict
from ._secrets import SecretArguments
from ._taint import taint_rule

if TYPE_CHECKING:
    from ._declarations import ToolDeclaration

__all__ = ["ApprovalLimits", "Budgets", "Evaluation", "Opinion", "Policy", "WebhookTarget",
           "rule_id_of"]

log = logging.getLogger("anfitrion.policy")



def rule_id_of(rule: Rule) -> str:
    """The id a rule reports: its declared :attr:`~PolicyRule.rule_id`; for a plain callable
    its ``rule_id`` attribute, else its name."""
    return as_rule(rule).rule_id



_RATE_KEYS_CACHED = 1024


@dataclass(frozen=True, slots=True)
class Budgets:
    """Per-session budgets; ``None`` means unlimited.

    Attributes:
        tool_calls: executed tool calls in the session.
        turns: model replies in the session (a call in turn N+1 is denied when N is the cap).
        approvals_asked: approval requests the session may raise.
    """

    tool_calls: int | None = None
    turns: int | None = None
    approvals_asked: int | None = None

    def __post_init__(self) -> None:
        for name in ("tool_calls", "turns", "approvals_asked"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 0):
                raise UserError(f"budget {name} must be a non-negative integer")

    def to_dict(self) -> dict[str, int | None]:
        """The budgets as data: what the policy hash covers and ``policy validate`` shows."""
        return {"tool_calls": self.tool_calls, "turns": self.turns,
                "approvals_asked": self.approvals_asked}


_WEBHOOK_LOOPBACK = {"127.0.0.1", "localhost", "::1"}

@dataclass(frozen=True, slots=True)
class WebhookTarget:
    """Where approval requests are sent, and how.

    Args:
        url: ``https://…`` (``http://`` only to a loopback address).
        secret: the shared secret (at least 16 characters); or *secret_env*, the
            environment variable holding it, read when a runtime starts.
        callback_url: the signed callback the receiver should answer to (the inbox's
            ``/api/v1/approvals/callback``), sent in every delivery.
        max_attempts: deliveries are tried at most this many times.
        first_delay / max_delay: the backoff: ``first_delay * 2**(n-1)`` seconds, capped,
            with jitter (half to all of it).
        timeout: seconds per attempt.
    """

    MIN_SECRET_CHARS: ClassVar[int] = 16
    """The shortest secret accepted (also for callback secrets)."""

    url: str
    secret: str | None = None
    secret_env: str | None = None
    callback_url: str | None = None
    max_attempts: int = 6
    first_delay: float = 1.0
    max_delay: float = 60.0
    timeout: float = 10.0

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise UserError(f"a webhook URL must be https://host/… , not {self.url!r}")
        if parts.scheme == "http" and parts.hostname not in _WEBHOOK_LOOPBACK:
            raise UserError("a webhook over plain http must go to a loopback address; "
                             "use https")
        if (self.secret is None) == (self.secret_env is None):
            raise UserError("give a webhook 'secret' or 'secret_env', one of them")
        if self.secret is not None and len(self.secret) < self.MIN_SECRET_CHARS:
            raise UserError(f"a webhook secret needs at least {self.MIN_SECRET_CHARS} characters")
        if not 1 <= self.max_attempts <= 20:
            raise UserError("max_attempts must be between 1 and 20")
        if not (0 <= self.first_delay <= self.max_delay <= 3600) or self.timeout <= 0:
            raise UserError("need 0 <= first_delay <= max_delay <= 3600 and timeout > 0")

    def resolved_secret(self) -> str:
        """The secret, read from the environment when given by name.

        Raises:
            UserError: the variable is unset or the secret too short.
        """
        if self.secret is not None:
            return self.secret
        value = environment().get(self.secret_env or "", "")
        if len(value) < self.MIN_SECRET_CHARS:
            raise UserError(f"the webhook secret variable {self.secret_env} is unset or "
                            f"shorter than {self.MIN_SECRET_CHARS} characters")
        return value

    def delay(self, attempt: int) -> float:
        """The wait after failed attempt number *attempt* (from 1), before jitter."""
        return float(min(self.max_delay, self.first_delay * 2 ** (attempt - 1)))



@dataclass(frozen=True, slots=True)
class ApprovalLimits:
    """How approval requests are bounded (applied by the gate's approve stage).

    Attributes:
        ttl: how long a request stays valid (default 15 minutes); expired → denied.
        max_pending: unanswered requests one session may hold; more asks are denied.
        max_asks: requests one session may raise per *per* window (ask rate).
        per: the window of *max_asks*.
        max_edits: how many times an approver may edit one call (each edit is a new ask).
        webhooks: where every new request is also sent, signed
            (:class:`WebhookTarget`; a runtime adds one listener per target).
    """

    ttl: timedelta = timedelta(minutes=15)
    max_pending: int = 5
    max_asks: int = 20
    per: timedelta = timedelta(minutes=1)
    max_edits: int = 3
    webhooks: tuple[WebhookTarget, ...] = ()

    def __post_init__(self) -> None:
        if self.ttl <= timedelta(0) or self.per <= timedelta(0):
            raise UserError("approval ttl and per must be positive")
        for name in ("max_pending", "max_asks", "max_edits"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise UserError(f"approvals {name} must be a non-negative integer")

    def to_dict(self) -> dict[str, float | int]:
        """The limits as data, durations in seconds: what the policy hash covers and ``policy
        validate`` shows. The webhooks are not in it: where requests are sent changes no
        decision."""
        return {"ttl": self.ttl.total_seconds(), "max_pending": self.max_pending,
                "max_asks": self.max_asks, "per": self.per.total_seconds(),
                "max_edits": self.max_edits}


@dataclass(frozen=True, slots=True)
class Opinion:
    """What one rule said about a call (``None``: no opinion)."""

    rule_id: str
    decision: Decision | None


@dataclass(frozen=True, slots=True)
class Evaluation:
    """The combined decision and every rule's opinion that led to it (for explanations)."""

    decision: Decision
    opinions: tuple[Opinion, ...]


_DEFAULTS: Mapping[Effect, Verdict] = {Effect.READ: Verdict.ALLOW, Effect.WRITE: Verdict.ASK}


def _utcnow() -> datetime:
    return datetime.now(UTC)


class Policy:
    """A chain of rules, the defaults per effect, budgets and approval limits.

    Args:
        rules: :class:`PolicyRule` objects, or plain callables ``(call, context) -> Decision
            | None`` (opinions; see :func:`as_rule`).
        defaults: verdict per effect when no rule has an opinion (read → allow, write → ask).
        budgets: per-session budgets.
        approvals: TTL and flood guard of approval requests.
        clock: the time source for rate windows and approval expiry (inject one in tests).
        principals: principals declared in a policy file, by id (see :meth:`principal`).
        source: where the policy came from (a file path), for messages.
        declarations: what ``[tools."<name>"]`` declares about tools, by tool name (see
            :meth:`declared` and :mod:`anfitrion.policy._declarations`).
        media: which images and sounds tool results may carry to the model (``[media]``,
            :class:`anfitrion._media.MediaSettings`); by default png/jpeg/gif/webp images.

    Example:
        >>> policy = Policy.default()
        >>> policy.defaults[Effect.WRITE]
        <Verdict.ASK: 'ask'>
    """

    def __init__(self, rules: Iterable[Rule] = (), *,
                 defaults: Mapping[Effect, Verdict] | None = None,
                 budgets: Budgets | None = None, approvals: ApprovalLimits | None = None,
                 clock: Callable[[], datetime] | None = None,
                 principals: Mapping[str, Principal] | None = None,
                 source: str | None = None,
                 declarations: Mapping[str, ToolDeclaration] | None = None,
                 media: MediaSettings | None = None) -> None:
        self.rules: tuple[Rule, ...] = tuple(rules)
        # each rule under its declared contract, with its role, read once
        self._chain: tuple[tuple[PolicyRule, RuleRole], ...] = tuple(
            (contract, contract.role) for contract in map(as_rule, self.rules))
        # rules that ask someone outside before they decide (a decision point)
        self._consulting: tuple[_Consulting, ...] = tuple(
            r for r, _ in self._chain if isinstance(r, _Consulting))
        self._rate_keys: dict[str, tuple[RateKey, ...]] = {}
        self._sha256: str | None = None
        self._declared: dict[int, tuple[Tool, Tool]] = {}
        self.defaults: Mapping[Effect, Verdict] = {**_DEFAULTS, **(defaults or {})}
        self.budgets = budgets or Budgets()
        self.approvals = approvals or ApprovalLimits()
        self.clock: Callable[[], datetime] = clock or _utcnow
        self.principals: Mapping[str, Principal] = dict(principals or {})
        self.source = source
        self.content_sha256: str | None = None
        """Set by :func:`~anfitrion.policy.parse_policy`: the hash of the file's parsed content."""
        self.shadow: Policy | None = None
        """A policy the file names in ``[shadow]``: evaluated beside this one, never enforced
        (loaded by :func:`~anfitrion.policy.load_policy`)."""
        self.lint_silences: tuple[Any, ...] = ()
        """Set by :func:`~anfitrion.policy.parse_policy`: the file's ``[lint]`` silences
        (:class:`~anfitrion.policy.Silence`), for ``anfitrion tools lint`` and ``mcp review``;
        they decide nothing."""
        self.declarations: Mapping[str, ToolDeclaration] = dict(declarations or {})
        self.media = media or MediaSettings()

    @property
    def sha256(self) -> str:
        """The content hash of this policy: SHA-256 of the canonical JSON of :meth:`describe`.

        Equivalent files hash alike: a file's part is the hash of its *parsed* TOML (comments,
        whitespace, key order and quoting do not count), so only what can change a decision
        does. A policy built in code hashes its rule ids and settings, defaults, budgets,
        approval limits and principals; two operator callables with the same id and no
        ``settings`` hash alike (give them distinct ids). The clock is not part of it.
        """
        if self._sha256 is None:
            self._sha256 = _digest(self.describe())
        return self._sha256

    def describe(self) -> dict[str, Any]:
        """What :attr:`sha256` covers, as plain JSON data (``media`` only when not the
        default, so a policy that leaves it alone keeps the hash it had before media)."""
        media = {} if self.media == MediaSettings() else {"media": {
            "send": self.media.send, "types": sorted(self.media.types),
            "max_bytes": self.media.max_bytes, "max_per_result": self.media.max_per_result}}
        return {
            "content": self.content_sha256,
            "rules": [_rule_description(rule, contract)
                      for rule, (contract, _) in zip(self.rules, self._chain, strict=True)],
            "defaults": {effect.value: verdict.value
                         for effect, verdict in sorted(self.defaults.items())},
            "budgets": self.budgets.to_dict(),
            "approvals": self.approvals.to_dict(),
            "principals": {pid: p.to_dict() for pid, p in sorted(self.principals.items())},
            "declarations": {name: _plain({"effect": d.effect, "effect_key": d.effect_key,
                                           "effect_scope": d.effect_scope,
                                           "idempotent": d.idempotent}, 0)
                             for name, d in sorted(self.declarations.items())},
            **media,
        }

    @classmethod
    def default(cls) -> Policy:
        """Reads are allowed, writes ask a person, and taint containment is on: in a session
        that read untrusted content every write asks, and arguments that came only from such
        content are flagged (:func:`anfitrion.policy._taint.taint_rule`). A call whose arguments
        carry a credential asks too (:class:`anfitrion.policy.SecretArguments`)."""
        return cls([taint_rule(), SecretArguments()])

    def _copy(self, **changes: Any) -> Policy:
        """This policy with *changes* (``rules=``, or any other setting by its name).

        A public attribute is a setting and is carried over — all of them, so a setting added
        later cannot be forgotten here; a private one is derived from the rules or a cache,
        and the constructor builds it afresh for the copy's rules.
        """
        copy = Policy(changes.pop("rules", self.rules))
        for name, value in vars(self).items():
            if not name.startswith("_") and name != "rules":
                setattr(copy, name, changes.pop(name, value))
        if changes:
            raise TypeError(f"not a policy setting: {', '.join(sorted(changes))}")
        return copy

    def with_rules(self, *rules: Rule) -> Policy:
        """A new policy with *rules* appended."""
        return self._copy(rules=(*self.rules, *rules))

    def with_clock(self, clock: Callable[[], datetime]) -> Policy:
        """A new policy reading the time from *clock* (tests, simulations)."""
        return self._copy(clock=clock)

    def now(self) -> datetime:
        """The current time according to this policy's clock (timezone-aware)."""
        return self.clock()

    def declared(self, tool: Tool) -> Tool:
        """*tool* as the policy file declares it (its effect, effect key and scope,
        idempotence); the tool itself when nothing is declared for its name.

        Raises:
            ConfigError: the declaration does not fit the tool (file and line named).
        """
        declaration = self.declarations.get(tool.name)
        if declaration is None:
            return tool
        cache = self._declared
        hit = cache.get(id(tool))
        if hit is not None and hit[0] is tool:  # the entry holds the tool: its id is not reused
            return hit[1]
        declared = declaration.apply(tool)
        if len(cache) >= 256:
            cache.clear()
        cache[id(tool)] = (tool, declared)
        return declared

    def principal(self, principal_id: str) -> Principal:
        """The principal declared under *principal_id*, or a bare one with no scopes."""
        return self.principals.get(principal_id) or Principal(principal_id)

    def rate_keys(self, tool_name: str) -> tuple[RateKey, ...]:
        """The counts the gate must fetch before deciding a call of *tool_name* (a rule's
        :meth:`~PolicyRule.rate_keys` depends on the tool name only: asked once per name)."""
        found = self._rate_keys.get(tool_name)
        if found is None:
            keys: dict[str, RateKey] = {}
            for rule, _ in self._chain:
                for key in rule.rate_keys(tool_name):
                    keys[key.id] = key
            found = tuple(keys.values())
            if len(self._rate_keys) >= _RATE_KEYS_CACHED:
                self._rate_keys.clear()
            self._rate_keys[tool_name] = found
        return found

    async def consult(self, call: BoundCall, context: PolicyContext) -> PolicyContext:
        """*context* with what the rules that consult an external decision point were told
        about *call* (:attr:`PolicyContext.external`, by rule id): the I/O before
        :meth:`decide`, done by the gate as it fetches rate counts. *context* itself when
        no rule consults anyone. A consultation never raises (a failure is its answer)."""
        if not self._consulting:
            return context
        answers = dict(context.external)
        for rule in self._consulting:
            try:
                found = await rule.consult(call, context)
            # BLE001 - operator code: no answer, so the rule fails closed at decide
            except Exception:
                log.exception("policy rule %s could not consult about %s", rule.rule_id,
                              call.tool.name)
                answers.pop(rule.rule_id, None)
                continue
            if found is not None:
                answers[rule.rule_id] = found
        return dataclasses.replace(context, external=answers)

    @staticmethod
    def consulted(context: PolicyContext) -> str | None:
        """What the decision points answered and how long they took, for the audit record
        of the decision (``None``: none was consulted)."""
        found = [value.summary(rule_id) for rule_id, value in sorted(context.external.items())
                 if isinstance(value, _Summarised)]
        return json.dumps(found, ensure_ascii=False)[:4000] if found else None

    def may_allow(self, tool: Tool, principal: Principal) -> bool:
        """Whether some call of *tool* by *principal* could be allowed or asked about.

        False only when the policy denies every call whatever its arguments: a missing scope,
        an opinion rule whose :meth:`~PolicyRule.reach` is :attr:`Reach.DENIES_ALL` (a deny
        rule that matches the tool by name, effect and role), or a default deny that no rule
        could lift. Rules the policy cannot see into (operator callables) count as "could
        allow"; deny-only and escalation rules never grant. The MCP gateway hides tools for
        which this is False.
        """
        if tool.scopes and not tool.scopes <= principal.scopes:
            return False
        could_grant = self.defaults.get(tool.effect, Verdict.DENY) is not Verdict.DENY
        for rule, role in self._chain:
            if role is not RuleRole.OPINION:
                continue
            reach = rule.reach(tool, principal)
            if reach is Reach.DENIES_ALL:
                return False
            if reach is Reach.MAY_GRANT:
                could_grant = True
        return could_grant

    def decide(self, call: BoundCall, context: PolicyContext) -> Decision:
        """Apply the combining rule (module docstring) to one call."""
        return self._combine(call, context, None)

    def evaluate(self, call: BoundCall, context: PolicyContext) -> Evaluation:
        """Like :meth:`decide`, keeping every rule's opinion (``anfitrion policy check``)."""
        opinions: list[Opinion] = []
        decision = self._combine(call, context, opinions)
        return Evaluation(decision, tuple(opinions))

    def _combine(self, call: BoundCall, context: PolicyContext,
                 opinions: list[Opinion] | None) -> Decision:
        """The combining rule; each rule's opinion is appended to *opinions* when given."""
        tool = call.tool
        if tool.scopes and not tool.scopes <= context.principal.scopes:
            missing = ", ".join(sorted(tool.scopes - context.principal.scopes))
            return Decision.deny(f"the principal lacks the scope(s) {missing}", "scopes")
        spent = self._spent_budget(context)
        if spent is not None:
            return spent
        deny: Decision | None = None
        asks: list[Decision] = []
        escalations: list[Decision] = []
        allow: Decision | None = None
        for rule, role in self._chain:
            try:
                decision = rule(call, context)
            except Exception:  # BLE001 - a rule is operator code: a failing one fails closed
                rid = rule.rule_id
                log.exception("policy rule %s raised on %s", rid, tool.name)
                decision = Decision.deny("a policy rule could not decide", f"{rid}.error")
            if opinions is not None:
                opinions.append(Opinion(rule.rule_id, decision))
            if decision is None:
                continue
            if decision.verdict is Verdict.DENY:
                deny = deny or decision
            elif role is RuleRole.ESCALATION:
                if decision.verdict is Verdict.ASK:  # may turn an allow into an ask
                    escalations.append(decision)
            elif role is RuleRole.DENY_ONLY:
                continue  # it never grants
            elif decision.verdict is Verdict.ASK:
                asks.append(decision)
            elif allow is None:
                allow = decision
        if deny is not None:
            final = deny
        elif asks:
            first = asks[0]
            warnings = tuple(dict.fromkeys(w for d in asks for w in d.warnings))
            final = Decision(Verdict.ASK, first.reason, first.rule_id, warnings, _strictest(asks))
        elif allow is not None:
            final = allow
        else:
            final = self._default(tool.effect)
        if escalations and final.verdict is not Verdict.DENY:
            first = escalations[0]
            warnings = tuple(dict.fromkeys(
                [*final.warnings, *(w for d in escalations for w in d.warnings)]))
            # an operator's own ask keeps its words; an allow or a default ask says why it asks
            quorum = _strictest([final, *escalations])
            final = (Decision(Verdict.ASK, first.reason, first.rule_id, warnings, quorum)
                     if final.verdict is Verdict.ALLOW or final.rule_id.startswith("default.")
                     else Decision(final.verdict, final.reason, final.rule_id, warnings, quorum))
        if final.verdict is Verdict.ASK:
            cap = self.budgets.approvals_asked
            if cap is not None and context.counters.get("approvals_asked", 0) >= cap:
                final = Decision.deny(f"this session has asked for its {cap} approvals",
                                      "budget.approvals_asked")
        return final

    def _spent_budget(self, context: PolicyContext) -> Decision | None:
        calls = self.budgets.tool_calls
        if calls is not None and context.counters.get("tool_calls", 0) >= calls:
            return Decision.deny(f"this session has used its {calls} tool calls",
                                 "budget.tool_calls")
        turns = self.budgets.turns
        if turns is not None and context.turn > turns:
            return Decision.deny(f"this session has used its {turns} turns", "budget.turns")
        return None

    def _default(self, effect: Effect) -> Decision:
        return _default_decision(effect, self.defaults.get(effect, Verdict.DENY))


@runtime_checkable
class _Consulting(Protocol):
    """A rule that asks an external decision point before deciding (its answer lands in
    :attr:`PolicyContext.external` under the rule's id)."""

    rule_id: str

    async def consult(self, call: BoundCall, context: PolicyContext) -> Any: ...


@runtime_checkable
class _Summarised(Protocol):
    def summary(self, rule_id: str) -> Mapping[str, Any]: ...


@runtime_checkable
class _Qualified(Protocol):
    __qualname__: str


def _rule_description(rule: Rule, contract: PolicyRule) -> dict[str, Any]:
    """A rule as the policy hash sees it: its id, its kind, and its public attributes (its
    tools, verdict, constraints, settings ...) as plain data — never an object's address, so
    the hash is the same in every process. A rule whose :meth:`~PolicyRule.description`
    gives its own says so."""
    own = contract.description()
    if own is not None:
        return dict(own)
    kind = rule.__qualname__ if isinstance(rule, _Qualified) else type(rule).__qualname__
    return {"id": contract.rule_id, "kind": str(kind), "attributes": _plain(rule, 0)}


def _plain(value: Any, depth: int) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else repr(value)
    if isinstance(value, StrEnum):
        return value.value
    if isinstance(value, timedelta):
        return value.total_seconds()
    if depth > 6:
        return type(value).__qualname__
    if isinstance(value, Mapping):
        return {str(k): _plain(v, depth + 1) for k, v in sorted(value.items(), key=_text_key)}
    if isinstance(value, (set, frozenset)):
        return sorted((_plain(v, depth + 1) for v in value), key=_text_key)
    if isinstance(value, (list, tuple)):
        return [_plain(v, depth + 1) for v in value]
    if isinstance(value, re.Pattern):
        return value.pattern
    if (callable(value) and not hasattr(value, "__dict__")) or isinstance(value, type):
        return str(getattr(value, "__qualname__", type(value).__qualname__))
    fields = getattr(value, "__dict__", None)
    if fields is None and hasattr(value, "__slots__"):
        fields = {n: getattr(value, n) for n in value.__slots__ if hasattr(value, n)}
    if not isinstance(fields, dict):
        return type(value).__qualname__
    return {"kind": type(value).__qualname__} | {
        k: _plain(v, depth + 1) for k, v in sorted(fields.items()) if not k.startswith("_")}


def _text_key(item: Any) -> str:
    return repr(item)


def _strictest(decisions: Iterable[Decision]) -> Quorum | None:
    """The strictest quorum the asking decisions require (``None``: one approval)."""
    found: Quorum | None = None
    for d in decisions:
        if d.quorum is not None and d.verdict is Verdict.ASK:
            found = d.quorum.stricter(found)
    return found


@functools.cache
def _default_decision(effect: Effect, verdict: Verdict) -> Decision:
    """The decision when no rule has an opinion (one immutable value per effect and verdict)."""
    reason = {Verdict.ALLOW: f"{effect.value} tools are allowed by default",
              Verdict.ASK: f"{effect.value} tools need a person's approval by default",
              Verdict.DENY: f"{effect.value} tools are not allowed"}[verdict]
    return Decision(verdict, reason, f"default.{effect.value}")
