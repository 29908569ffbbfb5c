"""The combining rule: every decision path, and the host's use of it."""

from __future__ import annotations

from typing import Any

import pytest

from anfitrion import CallbackApprover, Effect, Host, Principal, Tool, Toolbox
from anfitrion._tools import BoundCall
from anfitrion.policy import (
    Budgets,
    Decision,
    EffectRule,
    Policy,
    PolicyContext,
    ToolRule,
    Verdict,
)
from anfitrion.testing import ScriptedModel, call

from .conftest import office_tools


def _tool(name: str = "t", effect: Effect = Effect.WRITE, scopes: frozenset[str] = frozenset()
          ) -> Tool:
    return Tool.from_schema(name, {"type": "object", "properties": {"x": {}}},
                            lambda a: "ok", effect=effect, scopes=scopes)


def _call(tool: Tool, **arguments: Any) -> BoundCall:
    return BoundCall("c1", tool, arguments)


def _ctx(principal: Principal | None = None, **kwargs: Any) -> PolicyContext:
    return PolicyContext(principal=principal or Principal("alice"), session_id="s", **kwargs)


def _fixed(verdict: Verdict, rid: str, warnings: tuple[str, ...] = ()) -> Any:
    def rule(call: BoundCall, context: PolicyContext) -> Decision:
        return Decision(verdict, f"{rid} says {verdict.value}", rid, warnings)
    rule.rule_id = rid  # type: ignore[attr-defined]
    return rule


def _silent(call: BoundCall, context: PolicyContext) -> None:
    return None


A, K, D = Verdict.ALLOW, Verdict.ASK, Verdict.DENY


@pytest.mark.parametrize(("verdicts", "expected"), [
    ((A,), A), ((K,), K), ((D,), D),
    ((A, K), K), ((K, A), K),
    ((A, D), D), ((D, A), D),
    ((K, D), D), ((D, K), D),
    ((A, K, D), D), ((D, K, A), D),
    ((A, A), A), ((K, K), K), ((D, D), D),
])
def test_any_deny_wins_then_any_ask_then_allow(verdicts: tuple[Verdict, ...],
                                               expected: Verdict) -> None:
    rules = [_fixed(v, f"r{i}") for i, v in enumerate(verdicts)]
    decision = Policy([_silent, *rules]).decide(_call(_tool()), _ctx())
    assert decision.verdict is expected
    first = next(i for i, v in enumerate(verdicts) if v is expected)
    assert decision.rule_id == f"r{first}"


@pytest.mark.parametrize(("effect", "verdict", "rule_id"), [
    (Effect.READ, Verdict.ALLOW, "default.read"),
    (Effect.WRITE, Verdict.ASK, "default.write"),
])
def test_no_opinion_falls_back_to_the_default_for_the_effect(effect: Effect, verdict: Verdict,
                                                            rule_id: str) -> None:
    decision = Policy([_silent]).decide(_call(_tool(effect=effect)), _ctx())
    assert (decision.verdict, decision.rule_id) == (verdict, rule_id)


def test_defaults_can_deny_writes_nobody_named() -> None:
    policy = Policy([ToolRule("send_email", Verdict.ASK)], defaults={Effect.WRITE: Verdict.DENY})
    assert policy.decide(_call(_tool("delete_file")), _ctx()).verdict is Verdict.DENY
    assert policy.decide(_call(_tool("send_email")), _ctx()).verdict is Verdict.ASK
    assert policy.decide(_call(_tool("read_file", Effect.READ)), _ctx()).verdict is Verdict.ALLOW


def test_asks_merge_their_warnings_and_keep_the_first_reason() -> None:
    policy = Policy([_fixed(K, "a", ("w1", "w2")), _fixed(K, "b", ("w2", "w3"))])
    decision = policy.decide(_call(_tool()), _ctx())
    assert decision.rule_id == "a"
    assert decision.warnings == ("w1", "w2", "w3")


def test_a_missing_scope_denies_before_any_rule_runs() -> None:
    seen: list[str] = []

    def allow_all(call: BoundCall, context: PolicyContext) -> Decision:
        seen.append(call.name)
        return Decision.allow("fine", "allow_all")

    tool = _tool(scopes=frozenset({"mail:send"}))
    decision = Policy([allow_all]).decide(_call(tool), _ctx(Principal("bob")))
    assert (decision.verdict, decision.rule_id) == (Verdict.DENY, "scopes")
    assert "mail:send" in decision.reason
    assert seen == []
    with_scope = Principal("ana", scopes=frozenset({"mail:send", "other"}))
    assert Policy([allow_all]).decide(_call(tool), _ctx(with_scope)).verdict is Verdict.ALLOW


def test_a_rule_that_raises_denies_the_call() -> None:
    def broken(call: BoundCall, context: PolicyContext) -> Decision:
        raise KeyError("oops")

    decision = Policy([_fixed(A, "ok"), broken]).decide(_call(_tool()), _ctx())
    assert (decision.verdict, decision.rule_id) == (Verdict.DENY, "broken.error")
    assert "oops" not in decision.reason


def test_spent_tool_call_and_turn_budgets_deny() -> None:
    policy = Policy([_fixed(A, "ok")], budgets=Budgets(tool_calls=3, turns=2))
    tool = _tool()
    assert policy.decide(_call(tool), _ctx(counters={"tool_calls": 2}, turn=2)).verdict is A
    calls = policy.decide(_call(tool), _ctx(counters={"tool_calls": 3}))
    assert calls.rule_id == "budget.tool_calls"
    turns = policy.decide(_call(tool), _ctx(turn=3))
    assert turns.rule_id == "budget.turns"


def test_an_ask_beyond_the_approvals_budget_is_a_deny_but_an_allow_is_not() -> None:
    policy = Policy(budgets=Budgets(approvals_asked=2))
    ctx = _ctx(counters={"approvals_asked": 2})
    decision = policy.decide(_call(_tool()), ctx)
    assert (decision.verdict, decision.rule_id) == (Verdict.DENY, "budget.approvals_asked")
    assert policy.decide(_call(_tool(effect=Effect.READ)), ctx).verdict is Verdict.ALLOW
    assert policy.decide(_call(_tool()), _ctx(counters={"approvals_asked": 1})).verdict is K


def test_budgets_reject_nonsense() -> None:
    with pytest.raises(ValueError):
        Budgets(tool_calls=-1)
    with pytest.raises(ValueError):
        Budgets(turns=True)  # type: ignore[arg-type]


def test_evaluate_keeps_every_rules_opinion_in_order() -> None:
    evaluation = Policy([_silent, _fixed(K, "k"), _fixed(D, "d")]).evaluate(
        _call(_tool()), _ctx())
    assert [(o.rule_id, o.decision.verdict if o.decision else None)
            for o in evaluation.opinions] == [("_silent", None), ("k", K), ("d", D)]
    assert evaluation.decision.rule_id == "d"


def test_effect_rule_matches_only_its_effect() -> None:
    rule = EffectRule("read", Verdict.DENY, reason="no reading today")
    assert rule(_call(_tool(effect=Effect.READ)), _ctx()) == Decision.deny("no reading today",
                                                                          "effect:read")
    assert rule(_call(_tool(effect=Effect.WRITE)), _ctx()) is None


# -- through the host --------------------------------------------------------------------------


def test_the_host_does_not_offer_a_tool_whose_scopes_the_principal_lacks() -> None:
    tools = office_tools()
    secret = Tool.from_schema("payroll", {"type": "object", "properties": {}},
                              lambda a: "salaries", effect=Effect.READ,
                              scopes=frozenset({"hr"}))
    tools.add(secret)
    model = ScriptedModel([call("payroll", {}), "done"])
    run = Host(model=model, tools=tools).run_sync("pay?", principal="bob")
    offered = {t.name for t in model.requests[0].tools}
    assert "payroll" not in offered
    assert "read_file" in offered
    assert run.calls[0].error_kind == "unknown_tool"

    model = ScriptedModel([call("payroll", {}), "done"])
    hr = Principal("ana", scopes=frozenset({"hr"}))
    run = Host(model=model, tools=tools).run_sync("pay?", principal=hr)
    assert "payroll" in {t.name for t in model.requests[0].tools}
    assert run.calls[0].stage == "execute"
    assert run.calls[0].is_error is False


def test_a_denial_tells_the_model_the_reason_and_never_the_rule_id() -> None:
    policy = Policy([ToolRule("delete_file", Verdict.DENY, reason="files are never deleted",
                              rule_id="internal-rule-7")])
    model = ScriptedModel([call("delete_file", {"path": "a"}), "ok"])
    run = Host(model=model, tools=office_tools(), policy=policy).run_sync("rm a")
    result = run.transcript[-2].parts[0]
    assert result.content == "denied by policy: files are never deleted"
    assert "internal-rule-7" not in result.content
    assert run.calls[0].rule_id == "internal-rule-7"


def test_an_unknown_tool_is_denied_even_when_a_glob_rule_would_allow_everything() -> None:
    policy = Policy([ToolRule("*", Verdict.ALLOW)])
    model = ScriptedModel([call("format_disk", {}), "ok"])
    run = Host(model=model, tools=office_tools(), policy=policy).run_sync("go")
    assert run.calls[0].stage == "resolve"
    assert run.calls[0].error_kind == "unknown_tool"


def test_ask_runs_only_with_a_yes_and_tells_the_model_a_no() -> None:
    sent: list[dict[str, str]] = []
    args = {"to": "a@example.com", "subject": "s", "body": "b"}
    for answer, expected in ((True, 1), (False, 0)):
        sent.clear()
        model = ScriptedModel([call("send_email", args), "ok"])
        host = Host(model=model, tools=office_tools(sent),
                    approver=CallbackApprover(lambda r, a=answer: a))
        run = host.run_sync("mail")
        assert len(sent) == expected
        if not answer:
            assert run.transcript[-2].parts[0].content == \
                "declined by a person (no reason given)"


def test_the_default_approver_denies_every_ask() -> None:
    sent: list[dict[str, str]] = []
    model = ScriptedModel([call("send_email", {"to": "a@example.com", "subject": "s",
                                               "body": "b"}), "ok"])
    run = Host(model=model, tools=office_tools(sent)).run_sync("mail")
    assert sent == []
    assert run.transcript[-2].parts[0].content.startswith("denied by policy: a person must "
                                                          "approve")


def test_tool_rule_globs_are_case_sensitive_and_anchored() -> None:
    rule = ToolRule(["send_*", "get_weather"], Verdict.ALLOW)
    assert rule(_call(_tool("send_email")), _ctx()) is not None
    assert rule(_call(_tool("Send_email")), _ctx()) is None
    assert rule(_call(_tool("resend_email")), _ctx()) is None
    assert rule(_call(_tool("get_weather2")), _ctx()) is None


def test_rules_can_be_limited_to_principals_with_a_role() -> None:
    rule = ToolRule("delete_file", Verdict.ALLOW, roles=["admin"])
    tool = _tool("delete_file")
    assert rule(_call(tool), _ctx(Principal("root", roles=frozenset({"admin"})))) is not None
    assert rule(_call(tool), _ctx(Principal("eve", roles=frozenset({"user"})))) is None


def test_toolbox_of_plain_functions_accepts_principal_injection() -> None:
    """Tools act with the principal's authority: the handler receives the principal."""
    tools = Toolbox()
    seen: list[Principal] = []

    @tools.tool(effect=Effect.READ)
    def whoami(principal: Principal) -> str:
        """Who am I?"""
        seen.append(principal)
        return principal.id

    ana = Principal("ana", scopes=frozenset({"db:read"}), attributes={"db_role": "ana_ro"})
    Host(model=ScriptedModel([call("whoami", {}), "ok"]), tools=tools).run_sync(
        "who", principal=ana)
    assert seen == [ana]
