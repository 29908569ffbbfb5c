"""The rule contract: what the combining rule may know about a rule.

A rule is called ``rule(call, context) -> Decision | None``. Beyond that call, the policy reads
exactly what :class:`PolicyRule` declares, and nothing else:

* :attr:`~PolicyRule.rule_id` — the id its decisions and its errors are reported under;
* :attr:`~PolicyRule.role` — how its decisions combine (:class:`RuleRole`): an **opinion**
  (allow, ask or deny), **deny-only** (it can refuse a call, never grant one: a rate limit),
  or an **escalation** (its ask turns an allow into an ask afterwards and never overrides a
  deny; it never grants: taint, credentials in arguments);
* :meth:`~PolicyRule.rate_keys` — the counts the gate must fetch before it decides a call of
  a tool (a pure function of the tool name);
* :meth:`~PolicyRule.reach` — what it can do to every call of a tool by a principal, whatever
  the arguments (:class:`Reach`; the MCP gateway hides a tool every call of which is denied);
* :attr:`~PolicyRule.settings` — what ``anfitrion policy validate`` shows of it (plain data),
  and :attr:`~PolicyRule.trade_off`, a phrase on what its settings let through;
* :meth:`~PolicyRule.description` — what the policy hash covers of it, when it says so itself
  (``None``: its id, its class name and its public attributes).

:class:`BaseRule` gives every member a default (an opinion that needs no counts and may grant
anything); the built-in rules derive from it. A plain callable — the documented way to write a
rule — keeps working: :func:`as_rule` wraps it once, when the policy is built, in an adapter
that reports it as an opinion under its ``rule_id`` (or its name) and forwards the counts it
asks for if it has a ``rate_keys`` method.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from .._principal import Principal
    from .._tools import BoundCall, Tool
    from ._decision import Decision, PolicyContext, RateKey

__all__ = ["BaseRule", "PolicyRule", "Reach", "RuleRole", "as_rule"]


class RuleRole(StrEnum):
    """How a rule's decisions combine with the others' (see :class:`~anfitrion.policy.Policy`).

    Attributes:
        OPINION: allow, ask or deny; an ask or an allow counts as the rule's opinion.
        DENY_ONLY: a deny counts; it never grants a call, so an allow or an ask from it is
            ignored (and it does not stop :meth:`Policy.may_allow` from hiding a tool).
        ESCALATION: a deny counts; an ask turns the combined allow (or default ask) into an
            ask afterwards, never overriding a deny — the default deny included; an allow
            from it is ignored.
    """

    OPINION = "opinion"
    DENY_ONLY = "deny-only"
    ESCALATION = "escalation"


class Reach(StrEnum):
    """What a rule can do to the calls of one tool by one principal, whatever the arguments.

    Attributes:
        SILENT: it grants none of them (no opinion on them, or it only denies some).
        MAY_GRANT: it may allow or ask about some of them (also: it cannot tell).
        DENIES_ALL: it denies every one of them.
    """

    SILENT = "silent"
    MAY_GRANT = "may-grant"
    DENIES_ALL = "denies-all"


@runtime_checkable
class PolicyRule(Protocol):
    """The declared contract of a rule (module docstring)."""

    @property
    def rule_id(self) -> str: ...

    @property
    def role(self) -> RuleRole: ...

    @property
    def settings(self) -> Mapping[str, Any] | None: ...

    @property
    def trade_off(self) -> str | None: ...

    def rate_keys(self, tool_name: str) -> Iterable[RateKey]: ...

    def reach(self, tool: Tool, principal: Principal) -> Reach: ...

    def description(self) -> Mapping[str, Any] | None: ...

    def __call__(self, call: BoundCall, context: PolicyContext) -> Decision | None: ...


class BaseRule:
    """Defaults for every member of :class:`PolicyRule` but the call and the id: an opinion
    that needs no counts, has no settings to show, and may grant any call."""

    rule_id: str
    role: RuleRole = RuleRole.OPINION
    settings: Mapping[str, Any] | None = None
    trade_off: str | None = None

    def rate_keys(self, tool_name: str) -> Iterable[RateKey]:
        return ()

    def reach(self, tool: Tool, principal: Principal) -> Reach:
        return Reach.MAY_GRANT

    def description(self) -> Mapping[str, Any] | None:
        return None


@runtime_checkable
class _Identified(Protocol):
    rule_id: str


@runtime_checkable
class _Named(Protocol):
    __name__: str


@runtime_checkable
class _Counting(Protocol):
    def rate_keys(self, tool_name: str) -> Iterable[RateKey]: ...


class _CallableRule(BaseRule):
    """A plain callable as a rule: an opinion under its ``rule_id`` (else its name)."""

    def __init__(self, rule: Callable[[BoundCall, PolicyContext], Decision | None]) -> None:
        self.rule = rule
        if isinstance(rule, _Identified) and isinstance(rule.rule_id, str) and rule.rule_id:
            self.rule_id = rule.rule_id
        elif isinstance(rule, _Named):
            self.rule_id = str(rule.__name__)
        else:
            self.rule_id = type(rule).__name__
        self._counting = rule if isinstance(rule, _Counting) else None

    def rate_keys(self, tool_name: str) -> Iterable[RateKey]:
        return () if self._counting is None else self._counting.rate_keys(tool_name)

    def __call__(self, call: BoundCall, context: PolicyContext) -> Decision | None:
        return self.rule(call, context)


def as_rule(rule: Callable[[BoundCall, PolicyContext], Decision | None]) -> PolicyRule:
    """*rule* under the contract: itself when it declares it, else the one adapter."""
    if isinstance(rule, PolicyRule):
        return rule
    return _CallableRule(rule)
