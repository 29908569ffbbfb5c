"""The shape of a per-suite operator policy, and the rules several suites share."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from anfitrion import Decision, Effect, Policy, PolicyContext
from anfitrion._conversation import Provenance
from anfitrion._provenance import egress_warnings
from anfitrion._tools import BoundCall
from anfitrion.policy import Rule, ToolRule, Verdict
from anfitrion.policy._taint import PLAN_BEFORE_TAINT, taint_rule

EMAIL_VERBS = ["send", "email", "e-mail", "mail", "reply", "forward", "respond", "write",
               "notify", "inform"]
"""The words that ask for an e-mail (``verbs`` of send_email, workspace and travel): after
untrusted content was read, an e-mail to another party runs unasked only where the user's
words ask for one — a reader they named for an invitation is not theirs for an e-mail."""
EVENT_VERBS = ["create", "schedule", "book", "invite", "organize", "arrange", "set up",
               "plan", "calendar", "add"]
"""The words that ask for a calendar event with guests."""


@dataclass(frozen=True)
class SuiteOperator:
    """Declarations for one suite.

    Attributes:
        write_tools: tools with side effects (every other tool is declared READ).
        trusted_tools: tools whose results only the host or the user can write (every other
            tool is UNTRUSTED: third parties can write e-mails, files, pages, reviews, ...).
        allowed_hosts: hosts any URL argument may reach; ``None``: no global allow-list.
        rules: the operator's own rules, in addition to the defaults and the taint rule.
        reads: how reads are treated once the session is tainted (``taint_rule(reads=...)``):
            ``"all"`` — this operator assumes the model may be compromised, so after untrusted
            content is read every call, reads included, waits for a person.
        free_reads: reads that stay free even then (nothing private comes back, nothing
            leaves: a clock).
        dataflow: what the operator declares of each tool's data flow, as the policy file's
            ``[tools."<name>"]`` tables would (sinks, outward, destructive, service_ids):
            read by ``reads="sinks"`` only.
    """

    write_tools: frozenset[str]
    trusted_tools: frozenset[str]
    allowed_hosts: tuple[str, ...] | None = None
    rules: tuple[Rule, ...] = field(default_factory=tuple)
    reads: str = "all"
    free_reads: tuple[str, ...] = ()
    dataflow: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def effect(self, tool: str) -> Effect:
        return Effect.WRITE if tool in self.write_tools else Effect.READ

    def provenance(self, tool: str) -> Provenance:
        return Provenance.TRUSTED if tool in self.trusted_tools else Provenance.UNTRUSTED

    def policy(self, reads: str | None = None, without: Iterable[str] = ()) -> Policy:
        """The default effects + this operator's rules + the taint rule, with URL arguments
        checked against the suite's hosts (``Policy.default()``'s taint rule, configured).

        *reads* overrides the operator's choice, to measure the other settings. ``"sinks"``
        is the data-flow mode: the declared writes are allowed (the taint rule asks where an
        injection could act); ``"sinks+plan"`` adds the plan the model made before the
        first untrusted result (``taint_rule(plan="before-taint")``). ``"proven"`` is
        ``"sinks"`` with the proofs of the recommended preset. *without*: ids of the
        operator's own rules to leave out (to judge what a rule exempts by running without
        it)."""
        mode = reads or self.reads
        plan = PLAN_BEFORE_TAINT if mode.endswith("+plan") else None
        mode = mode.removesuffix("+plan")
        dropped = set(without)
        rules = [r for r in self.rules if getattr(r, "rule_id", None) not in dropped]
        if mode in ("sinks", "proven") and "operator.allow.declared" not in dropped:
            declared = sorted(t for t in self.write_tools if t in self.dataflow)
            rules.append(ToolRule(declared, Verdict.ALLOW, rule_id="operator.allow.declared",
                                  reason="a write whose data flow is declared runs; the taint "
                                         "rule asks where an injection could act"))
        return Policy([*rules, taint_rule(allowed_hosts=self.allowed_hosts, reads=mode,
                                          free_reads=self.free_reads,
                                          declarations=self.dataflow
                                          if mode in ("sinks", "proven") else None,
                                          plan=plan)])


def allow(tool: str, reason: str, when: Callable[[BoundCall], bool] = lambda c: True) -> Rule:
    """Allow *tool* without asking when *when* holds (the taint rule may still escalate)."""

    def rule(call: BoundCall, context: PolicyContext) -> Decision | None:
        if call.name == tool and when(call):
            return Decision.allow(reason, f"operator.allow.{tool}")
        return None

    rule.rule_id = f"operator.allow.{tool}"  # type: ignore[attr-defined]
    return rule


def only_hosts(tool: str, hosts: Iterable[str]) -> Rule:
    """Ask whenever *tool* sends to a URL outside *hosts* (an allow-list for one tool)."""
    allowed = tuple(hosts)

    def rule(call: BoundCall, context: PolicyContext) -> Decision | None:
        if call.name != tool:
            return None
        warnings = egress_warnings(call.arguments, allowed)
        if warnings:
            return Decision.ask(f"{tool} sends outside the operator's hosts", "operator.egress",
                                warnings)
        return None

    rule.rule_id = "operator.egress"  # type: ignore[attr-defined]
    return rule


def no_participants(call: BoundCall) -> bool:
    return not call.arguments.get("participants")
