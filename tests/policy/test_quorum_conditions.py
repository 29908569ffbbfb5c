"""A quorum's ``arguments`` condition fails closed: a value the condition cannot judge keeps the
quorum, as reviewer entitlements do. Only a value clearly outside the condition drops it.

Written as an attacker who read ``RequireQuorum``: any value the condition refuses without
having judged it (a number sent as text, an array, an object, a look-alike spelling, a NaN)
used to drop the quorum, so one approval ran a call the operator wanted two people for.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from anfitrion import DeferredApprover, Effect, Host, Principal, Tool, Toolbox
from anfitrion._approvals import Quorum
from anfitrion._tools import BoundCall
from anfitrion.policy import Decision, Policy, PolicyContext, ToolRule, Verdict, parse_policy
from anfitrion.policy._quorum import RequireQuorum
from anfitrion.testing import MemoryStore, ScriptedModel, call

PAY = Tool.from_schema("pay", {"type": "object"}, lambda arguments: "paid", effect=Effect.WRITE)
"""A tool that takes any arguments (an MCP server's tool may declare no more)."""

CONDITIONS: dict[str, tuple[str, str, Any, Any, list[Any]]] = {
    # kind: (argument, its constraint in the quorum's arguments, a value inside, a value
    #        clearly outside, values the constraint cannot judge)
    "min": ("amount", "{ min = 1000 }", 5000, 10, [
        "5000", "５０００", " 5000", "5e3", [5000, 1], [1, "5000"], {"value": 5000},
        {"amount": 5000}, True, False, None, float("nan"), float("-inf"),
        -(2**64) + 5000,  # 5000 to a tool that stores it in 64 bits
        -(10**30), -(2**53) - 1]),
    "max": ("amount", "{ max = 100 }", 50, 5000, [
        "50", True, None, [50, 5000], {"value": 50}, float("inf"), float("nan"),
        2**64 + 50, 10**30, 2**53 + 1]),
    "min and max": ("amount", "{ min = 1000, max = 100000 }", 5000, 200000, [
        "5000", True, None, [200000, 5000], {"value": 5000}, float("nan"), float("inf"),
        2**64 + 5000]),
    "one_of": ("currency", '{ one_of = ["USD", "EUR"] }', "USD", "JPY", [
        "usd", "USD ", " USD", "ＵＳＤ", "Usd", ["JPY", "USD"], {"code": "USD"}, None, True, 1,
        float("nan")]),
    "one_of numbers": ("tier", "{ one_of = [3] }", 3, 1, [
        "3", "３", True, None, [1, 3], {"tier": 3}, float("nan"), 2**64 + 3]),
    "none_of": ("currency", '{ none_of = ["USD"] }', "EUR", "USD", [
        "usd", " USD", "ＵＳＤ", ["USD", "EUR"], {"code": "USD"}, None, True]),
    "matches": ("account", '{ matches = "EXT-[0-9]+" }', "EXT-42", "INT-42", [
        "ＥＸＴ-42", "EXT-４２", "EXT-" + "4" * 5000, ["INT-1", "EXT-1"], {"id": "EXT-42"},
        42, None, True]),
    "not_matches": ("account", '{ not_matches = "INT-[0-9]+" }', "EXT-42", "INT-42", [
        "ＩＮＴ-42", "INT-４２", "INT-" + "4" * 5000, ["INT-1", "EXT-1"], {"id": "INT-42"},
        42, None, True]),
    "min_length": ("memo", "{ min_length = 10 }", "a long enough memo", "short", [
        "ﬁﬁﬁﬁﬁﬁ",  # six characters; twelve after NFKC
        1234567890123, ["short", "a long enough memo"], {"text": "a long enough memo"},
        None, True]),
    "path_inside": ("path", '{ path_inside = "/srv/prod" }', "/srv/prod/app.cfg",
                    "/srv/staging/app.cfg", [
        "srv/prod/app.cfg", "../srv/prod/app.cfg", "~/prod/app.cfg", "/srv／prod/app.cfg",
        "/srv/prod\\app.cfg", "/srv/staging/\uff0e\uff0e/prod/app.cfg", "/srv/prod\x00",
        ["/srv/staging/a", "/srv/prod/a"], {"path": "/srv/prod/a"}, 42, None, True]),
    "url_hosts": ("url", '{ url_hosts = ["pay.example.com"] }', "https://pay.example.com/x",
                  "https://docs.example.com/x", [
        "https://docs.example.com@pay.example.com/x", "https://pay.example.com\\@docs.example.com",
        "https://pay.example.com:99999/x", "https://pay.example.com/\u200bx", "pay.example.com/x",
        ["https://docs.example.com/", "https://pay.example.com/"],
        {"href": "https://pay.example.com/x"}, 42, None, True]),
    "email_domains": ("to", '{ email_domains = ["board.example.com"] }',
                      "ceo@board.example.com", "ana@staff.example.com", [
        "CEO <ceo@board.example.com>", "ana@staff.example.com, ceo@board.example.com",
        "ceo@board.example.com\u200b", '"ceo"@board.example.com', "ceo@[10.0.0.1]",
        ["ana@staff.example.com", "ceo@board.example.com"], {"to": "ceo@board.example.com"},
        42, None, True]),
}

UNJUDGED = [pytest.param(kind, value, id=f"{kind}-{value!r:.40}")
            for kind, (*_, values) in CONDITIONS.items() for value in values]


def _policy(argument: str, constraint: str) -> Policy:
    return parse_policy(f"""
[[rules]]
id = "pay"
tool = "pay"
verdict = "ask"
quorum = {{ approvals = 2, roles = ["finance"], arguments = {{ {argument} = {constraint} }} }}
""")


def _decide(policy: Policy, arguments: dict[str, Any]) -> Decision:
    context = PolicyContext(principal=Principal("agent"), session_id="s1")
    decision = policy.decide(BoundCall("c1", PAY, arguments), context)
    assert decision.verdict is Verdict.ASK and decision.rule_id == "pay"
    return decision


def _quorum(kind: str, value: Any) -> Quorum | None:
    argument, constraint, *_ = CONDITIONS[kind]
    return _decide(_policy(argument, constraint), {argument: value}).quorum


@pytest.mark.parametrize(("kind", "value"), UNJUDGED)
def test_a_value_the_quorum_condition_cannot_judge_keeps_the_quorum(kind: str,
                                                                     value: Any) -> None:
    assert _quorum(kind, value) == Quorum(2, ("finance",))


@pytest.mark.parametrize("kind", sorted(CONDITIONS))
def test_a_value_inside_the_quorum_condition_needs_the_quorum(kind: str) -> None:
    assert _quorum(kind, CONDITIONS[kind][2]) == Quorum(2, ("finance",))


@pytest.mark.parametrize("kind", sorted(CONDITIONS))
def test_a_value_clearly_outside_the_quorum_condition_needs_one_approval(kind: str) -> None:
    """No over-correction: the condition still narrows the quorum."""
    assert _quorum(kind, CONDITIONS[kind][3]) is None


@pytest.mark.parametrize(("kind", "outside"), [
    ("min", [10, 999.5]), ("min and max", [5, 200000]), ("one_of", ["JPY", "GBP"]),
    ("url_hosts", ["https://docs.example.com/", "https://a.example.org/"])])
def test_an_array_drops_the_quorum_only_when_every_element_is_clearly_outside(
        kind: str, outside: list[Any]) -> None:
    assert _quorum(kind, outside) is None
    assert _quorum(kind, [*outside, CONDITIONS[kind][2]]) == Quorum(2, ("finance",))


def test_an_absent_argument_keeps_the_quorum() -> None:
    assert _decide(_policy("amount", "{ min = 1000 }"), {}).quorum == Quorum(2, ("finance",))


@pytest.mark.parametrize("payment", ["5000", 5000, [5000], None])
def test_a_path_through_a_scalar_keeps_the_quorum(payment: Any) -> None:
    """``payment.amount`` when ``payment`` is not an object: there is no amount to judge."""
    policy = _policy('"payment.amount"', "{ min = 1000 }")
    assert _decide(policy, {"payment": payment}).quorum == Quorum(2, ("finance",))
    assert _decide(policy, {"payment": {"amount": 10}}).quorum is None


def test_a_condition_that_holds_on_one_argument_and_not_another_needs_one_approval() -> None:
    """The condition is every constraint together: one clearly false is enough."""
    policy = _policy("amount", "{ min = 1000 }, currency = { one_of = [\"USD\"] }")
    assert _decide(policy, {"amount": 5000, "currency": "JPY"}).quorum is None
    assert _decide(policy, {"amount": 5000, "currency": "usd"}).quorum is not None
    assert _decide(policy, {"amount": "5000", "currency": "JPY"}).quorum is None


class _EvenAmounts:
    """An operator's own constraint: the policy cannot know what it can judge."""

    def check(self, value: Any) -> str | None:
        return None if isinstance(value, int) and value % 2 == 0 else "must be even"


@pytest.mark.parametrize("value", [3, "4", None])
def test_an_operator_s_own_constraint_never_drops_the_quorum(value: Any) -> None:
    policy = Policy([RequireQuorum(ToolRule("pay", "ask"), Quorum(2),
                                   when={"amount": _EvenAmounts()})])
    context = PolicyContext(principal=Principal("agent"), session_id="s1")
    decision = policy.decide(BoundCall("c1", PAY, {"amount": value}), context)
    assert decision.quorum == Quorum(2)


def test_an_amount_sent_as_text_through_the_host_still_waits_for_two_approvers() -> None:
    """End to end: a tool that takes the amount as text or a number (as many payment APIs
    do) gets "5000" from the model; the approval request needs the two finance people."""
    tools, paid = Toolbox(), []

    @tools.tool(effect=Effect.WRITE, provenance="trusted")
    def pay(amount: int | str) -> str:
        """Pay an invoice."""
        paid.append(amount)
        return f"paid {amount}"

    host = Host(model=ScriptedModel([call("pay", {"amount": "5000"}), "done"]), tools=tools,
                store=MemoryStore(), approver=DeferredApprover(),
                policy=_policy("amount", "{ min = 1000 }"))
    run = host.run_sync("pay the invoice", principal="agent")
    assert run.status == "suspended" and paid == []
    assert run.pending[0].quorum == Quorum(2, ("finance",))
    assert json.loads(json.dumps(run.pending[0].arguments)) == {"amount": "5000"}
