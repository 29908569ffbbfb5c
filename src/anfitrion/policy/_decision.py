"""The vocabulary of the policy: verdicts, decisions, what a rule may look at, the counts a rule
needs, and the signature of a rule. Every rule module and the combining rule
(:mod:`._core`) import it; it imports no rule."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, TypeAlias

from .._approvals import Quorum
from .._principal import Principal
from .._tools import BoundCall
from ._declarations import ArgumentProvenance

__all__ = ["Decision", "PolicyContext", "RateKey", "Rule", "Verdict"]


class Verdict(StrEnum):
    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


@dataclass(frozen=True, slots=True)
class Decision:
    """What the policy decided for one call, why, and which rule decided it.

    Attributes:
        reason: the operator's words; the model sees ``denied by policy: <reason>`` only.
        rule_id: which rule decided (audit log and ``anfitrion policy check``; never shown
            to the model).
        warnings: things a person approving the call should see (flagged arguments, taint).
        quorum: on an ask, how many distinct people (with which roles) must approve; the
            strictest of the asking rules' quorums applies.
    """

    verdict: Verdict
    reason: str
    rule_id: str
    warnings: tuple[str, ...] = ()
    quorum: Quorum | None = None

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
                "warnings": list(self.warnings),
                **({"quorum": self.quorum.to_dict()} if self.quorum is not None else {})}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Decision:
        quorum = Quorum.from_dict(d["quorum"]) if d.get("quorum") else None
        return cls(Verdict(d["verdict"]), d["reason"], d["rule_id"], tuple(d.get("warnings", ())),
                   quorum)


@dataclass(frozen=True, slots=True)
class PolicyContext:
    """Everything a rule may look at besides the call. Built by the gate; no I/O in rules.

    Attributes:
        counters: per-session counts: ``tool_calls`` (executed), ``approvals_asked``,
            ``invalid_calls``.
        recent_calls: ``(tool, canonical-arguments digest)`` of the calls this session
            proposed (validated), oldest first, for the repeated-call guard.
        untrusted_sources: tools whose untrusted results entered the conversation (taint).
        flagged_arguments: argument paths whose values came only from untrusted content.
        rate_counts: calls the principal made in each window a rate limit needs, keyed by
            :attr:`RateKey.id` (filled by the gate from the store).
        provenance: where the session's values came from (the session's
            :class:`anfitrion._provenance.TaintIndex`): ``unproven(value)``,
            ``unproven_entities(text)``, ``planned_tools``; ``None`` outside a session.
        external: what external decision points answered about this call, by rule id
            (filled by :meth:`Policy.consult <anfitrion.policy.Policy.consult>` before
            the policy decides; the policy itself does no I/O).
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
    provenance: ArgumentProvenance | None = None
    external: Mapping[str, Any] = field(default_factory=dict)

    @property
    def tainted(self) -> bool:
        return bool(self.untrusted_sources)


Rule: TypeAlias = Callable[[BoundCall, PolicyContext], "Decision | None"]


@dataclass(frozen=True, slots=True)
class RateKey:
    """One count the gate must fetch: calls of *tool* (``*`` = all tools) by the principal
    in the last *seconds*."""

    tool: str
    seconds: int

    @property
    def id(self) -> str:
        return f"{self.tool}/{self.seconds}s"
