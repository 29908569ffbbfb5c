"""The rule contract: what the combining rule knows of a rule is what the rule declares."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from anfitrion import Effect, Principal, Tool
from anfitrion._approvals import Quorum
from anfitrion._tools import BoundCall
from anfitrion.policy import (
    BaseRule,
    Decision,
    Policy,
    PolicyContext,
    PolicyRule,
    RateKey,
    RateLimit,
    Reach,
    RepeatGuard,
    RuleRole,
    SecretArguments,
    ToolRule,
    Verdict,
    as_rule,
    rule_id_of,
)
from anfitrion.policy._quorum import RequireQuorum
from anfitrion.policy._taint import taint_rule


def _tool(name: str = "t", effect: Effect = Effect.WRITE) -> Tool:
    return Tool.from_schema(name, {"type": "object"}, lambda a: "ok", effect=effect)


def _ctx() -> PolicyContext:
    return PolicyContext(principal=Principal("alice"), session_id="s")


class _Says(BaseRule):
    def __init__(self, verdict: Verdict, role: RuleRole, rule_id: str = "says") -> None:
        self.verdict, self.role, self.rule_id = verdict, role, rule_id

    def __call__(self, call: BoundCall, context: PolicyContext) -> Decision:
        return Decision(self.verdict, f"{self.rule_id} says {self.verdict}", self.rule_id)


def test_every_built_in_rule_declares_the_contract_and_its_role() -> None:
    roles = {rule_id_of(r): as_rule(r).role for r in (
        ToolRule("a", "allow"), RateLimit("a", max_calls=1, per="1m"), RepeatGuard(),
        SecretArguments(), taint_rule(), RequireQuorum(RepeatGuard(), Quorum(2, ())))}
    assert roles == {"tool:a": RuleRole.OPINION, "rate:a": RuleRole.DENY_ONLY,
                     "repeat_guard": RuleRole.DENY_ONLY, "secrets": RuleRole.ESCALATION,
                     "taint": RuleRole.ESCALATION}
    for rule in (ToolRule("a", "allow"), taint_rule(), SecretArguments()):
        assert isinstance(rule, PolicyRule) and as_rule(rule) is rule


def test_a_plain_callable_is_one_adapted_opinion_under_its_id_or_its_name() -> None:
    def grant(call: BoundCall, context: PolicyContext) -> Decision:
        return Decision.allow("fine", "grant")

    class Counting:
        rule_id = "counting"

        def rate_keys(self, tool_name: str) -> Iterable[RateKey]:
            return (RateKey(tool_name, 60),)

        def __call__(self, call: BoundCall, context: PolicyContext) -> None:
            return None

    adapted = as_rule(grant)
    assert (adapted.rule_id, adapted.role, adapted.settings) == ("grant", RuleRole.OPINION, None)
    assert adapted.reach(_tool(), Principal("a")) is Reach.MAY_GRANT  # it cannot be seen into
    assert rule_id_of(lambda c, x: None) == "<lambda>"
    assert Policy([Counting()]).rate_keys("send") == (RateKey("send", 60),)
    assert Policy([grant]).decide(BoundCall("c", _tool(), {}), _ctx()).rule_id == "grant"


@pytest.mark.parametrize("role", [RuleRole.ESCALATION, RuleRole.DENY_ONLY])
def test_a_rule_that_never_grants_cannot_grant_by_answering_allow(role: RuleRole) -> None:
    policy = Policy([_Says(Verdict.ALLOW, role)])
    decision = policy.decide(BoundCall("c", _tool(), {}), _ctx())
    assert (decision.verdict, decision.rule_id) == (Verdict.ASK, "default.write")
    assert policy.evaluate(BoundCall("c", _tool(), {}), _ctx()).opinions[0].decision is not None


def test_an_escalation_ask_never_lifts_a_default_deny_while_an_opinion_ask_does() -> None:
    deny_writes = {Effect.WRITE: Verdict.DENY}
    call = BoundCall("c", _tool(), {})
    escalation = Policy([_Says(Verdict.ASK, RuleRole.ESCALATION)], defaults=deny_writes)
    opinion = Policy([_Says(Verdict.ASK, RuleRole.OPINION)], defaults=deny_writes)
    assert escalation.decide(call, _ctx()).verdict is Verdict.DENY
    assert opinion.decide(call, _ctx()).verdict is Verdict.ASK


def test_may_allow_reads_each_rules_reach_and_skips_rules_that_never_grant() -> None:
    alice = Principal("alice")
    deny_writes = {Effect.WRITE: Verdict.DENY}
    assert not Policy([ToolRule("t", "deny")]).may_allow(_tool(), alice)
    assert Policy([ToolRule("other", "deny")]).may_allow(_tool(), alice)
    assert not Policy([RepeatGuard(), taint_rule()], defaults=deny_writes).may_allow(
        _tool(), alice)
    assert Policy([ToolRule("t", "ask")], defaults=deny_writes).may_allow(_tool(), alice)
    wrapped = RequireQuorum(ToolRule("t", "deny"), Quorum(2, ()))
    assert not Policy([wrapped]).may_allow(_tool(), alice)


def test_validate_shows_the_settings_a_rule_declares() -> None:
    rule = as_rule(taint_rule(reads="all", free_reads=["clock*"]))
    assert rule.settings is not None and rule.settings["free_reads"] == ["clock*"]
    assert rule.trade_off is not None and "reads included" in rule.trade_off
    assert ToolRule("a", "allow").settings is None


def test_the_default_policy_hashes_as_it_did_before_the_rules_declared_a_contract() -> None:
    """Every audit record names the policy by this hash: moving the taint rule from a
    function to a class must not make the same policy look like another one."""
    assert Policy.default().sha256 == \
        "9cee08a17e225cb8b0a9cbf64bdea2e9a14c790c39c8ba2f4b5d77447f9d73e8"
