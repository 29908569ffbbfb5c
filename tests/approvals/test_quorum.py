"""The two-person rule end to end: a policy file asks for M of N distinct approvers with a role;
votes go through anfitrion._answers; the call runs only once the quorum approved it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from anfitrion import DeferredApprover, Effect, Host, Toolbox
from anfitrion._answers import Refusal, answer, votes_needed
from anfitrion._approvals import ApprovalAnswer, ApprovalRequest, CallbackApprover, Reviewer
from anfitrion.exceptions import ConfigError
from anfitrion.policy import parse_policy
from anfitrion.store import Store
from anfitrion.testing import MemoryStore, ScriptedModel, call

pytestmark = pytest.mark.anyio

POLICY = """
[[rules]]
id = "pay"
tool = "pay"
verdict = "ask"
reason = "payments need a person; from 1000 on, two people from finance"
quorum = { approvals = 2, roles = ["finance"], arguments = { amount = { min = 1000 } } }
"""
ALICE = Reviewer("alice", frozenset({"finance"}))
BOB = Reviewer("bob", frozenset({"finance", "ops"}))
MALLORY = Reviewer("mallory", frozenset({"ops"}))


def _host(store: Store, paid: list[int], steps: list[Any], approver: Any = None) -> Host:
    tools = Toolbox()

    @tools.tool(effect=Effect.WRITE, provenance="trusted")
    def pay(amount: int) -> str:
        """Pay an invoice."""
        paid.append(amount)
        return f"paid {amount}"

    return Host(model=ScriptedModel(steps), tools=tools, store=store,
                approver=approver or DeferredApprover(), policy=parse_policy(POLICY))


async def _suspended(store: Store, paid: list[int], amount: int = 5000
                     ) -> tuple[str, ApprovalRequest]:
    run = await _host(store, paid, [call("pay", {"amount": amount}), "done"]).run(
        "pay the invoice", principal="agent")
    assert run.status == "suspended"
    return run.session_id, run.pending[0]


async def test_a_large_payment_asks_for_two_finance_approvers_and_runs_after_both() -> None:
    store, paid = MemoryStore(), []
    session_id, request = await _suspended(store, paid)
    assert request.quorum is not None and request.quorum.required == 2
    assert "Needs 2 distinct approvers holding finance." in request.describe()
    first = await answer(store, request.id, request.digest, approved=True, approver="web:alice",
                         reviewer=ALICE)
    assert first.recorded and first.answer is None and votes_needed(request, first.votes) == 1
    resumed = await _host(store, paid, ["done"]).resume(session_id)
    assert resumed.status == "suspended" and paid == []  # one vote is not enough
    second = await answer(store, request.id, request.digest, approved=True, approver="api:bob",
                          reviewer=BOB, via="api")
    assert second.answer is not None and second.answer.approver == "alice, bob"
    done = await _host(store, paid, ["done"]).resume(session_id)
    assert done.status == "completed" and paid == [5000]
    kinds = [r.type for r in await store.audit_records(session_id)]
    assert kinds.count("approval.voted") == 2 and kinds.count("approval.answered") == 1


async def test_a_small_payment_needs_one_answer_as_before() -> None:
    store, paid = MemoryStore(), []
    session_id, request = await _suspended(store, paid, amount=10)
    assert request.quorum is None
    one = await answer(store, request.id, request.digest, approved=True, approver="api")
    assert one.answer is not None
    done = await _host(store, paid, ["done"]).resume(session_id)
    assert done.status == "completed" and paid == [10]


async def test_the_same_person_cannot_approve_twice_through_any_door() -> None:
    store, paid = MemoryStore(), []
    _, request = await _suspended(store, paid)
    await answer(store, request.id, request.digest, approved=True, approver="web:alice",
                 reviewer=ALICE)
    for via in ("api", "cli", "webhook", "mcp"):
        again = await answer(store, request.id, request.digest, approved=True,
                             approver=f"{via}:alice", reviewer=ALICE, via=via)
        assert again.refusal is Refusal.ALREADY_VOTED and not again.recorded
    found = await store.get_approval(request.id)
    assert found is not None and found.answer is None


async def test_an_approver_without_the_role_or_without_an_identity_cannot_vote() -> None:
    store, paid = MemoryStore(), []
    _, request = await _suspended(store, paid)
    outsider = await answer(store, request.id, request.digest, approved=True,
                            approver="web:mallory", reviewer=MALLORY)
    assert outsider.refusal is Refusal.UNQUALIFIED and "finance" in outsider.detail
    # a shared token (no reviewer) can neither approve nor reject a quorum request
    for approved in (True, False):
        anonymous = await answer(store, request.id, request.digest, approved=approved,
                                 approver="api:alice")
        assert anonymous.refusal is Refusal.UNIDENTIFIED
    assert await store.list_approval_votes(request.id) == ()


async def test_a_rejection_by_a_qualified_approver_rejects_the_call() -> None:
    store, paid = MemoryStore(), []
    session_id, request = await _suspended(store, paid)
    await answer(store, request.id, request.digest, approved=True, approver="a", reviewer=ALICE)
    no = await answer(store, request.id, request.digest, approved=False, approver="b",
                      reviewer=BOB, note="not this vendor")
    assert no.answer is not None and not no.answer.approved
    late = await answer(store, request.id, request.digest, approved=True, approver="c",
                        reviewer=Reviewer("carol", frozenset({"finance"})))
    assert late.refusal is Refusal.ANSWERED
    done = await _host(store, paid, ["done"]).resume(session_id)
    assert paid == [] and done.status == "completed"


async def test_a_vote_bound_to_another_digest_is_refused() -> None:
    store, paid = MemoryStore(), []
    _, request = await _suspended(store, paid)
    stale = await answer(store, request.id, "0" * 64, approved=True, approver="a",
                         reviewer=ALICE)
    assert stale.refusal is Refusal.STALE


async def test_expiry_applies_to_all_the_votes_together() -> None:
    store, paid = MemoryStore(), []
    _, request = await _suspended(store, paid)
    before = request.expires_at - timedelta(seconds=1)
    after = request.expires_at + timedelta(seconds=1)
    first = await answer(store, request.id, request.digest, approved=True, approver="a",
                         reviewer=ALICE, now=before)
    assert first.recorded
    late = await answer(store, request.id, request.digest, approved=True, approver="b",
                        reviewer=BOB, now=after)
    assert late.refusal is Refusal.EXPIRED
    found = await store.get_approval(request.id)
    assert found is not None and found.answer is None


async def test_an_in_process_approver_alone_cannot_satisfy_a_quorum() -> None:
    store, paid = MemoryStore(), []
    approver = CallbackApprover(lambda request: True, name="auto")
    run = await _host(store, paid, [call("pay", {"amount": 5000}), "done"],
                      approver=approver).run("pay", principal="agent")
    assert run.status == "suspended" and paid == []  # it waits for the people's votes
    assert not await store.answer_approval(ApprovalAnswer.to(run.pending[0], True, "x"))


async def test_an_edit_of_a_quorum_request_is_refused() -> None:
    from anfitrion._answers import propose_edit

    store, paid = MemoryStore(), []
    _, request = await _suspended(store, paid)
    edited = await propose_edit(store, request.id, request.digest, {"amount": 4000},
                                approver="a", reviewer=ALICE)
    assert edited.refusal is Refusal.INVALID


def test_the_stricter_quorum_wins_when_two_rules_ask() -> None:
    policy = parse_policy(POLICY + """
[[rules]]
tool = "pay"
verdict = "ask"
quorum = { approvals = 3 }
""")
    from anfitrion._principal import Principal
    from anfitrion._tools import BoundCall
    from anfitrion.policy import PolicyContext

    tools = Toolbox()

    @tools.tool(effect=Effect.WRITE)
    def pay(amount: int) -> str:
        """Pay."""
        return ""

    tool = tools.get("pay")
    assert tool is not None
    decision = policy.decide(BoundCall("c", tool, {"amount": 5000}),
                             PolicyContext(principal=Principal("agent"), session_id="s",
                                           now=datetime.now(UTC)))
    assert decision.quorum is not None and decision.quorum.required == 3


@pytest.mark.parametrize("bad", ["quorum = 2", "quorum = { approvals = 0 }",
                                 "quorum = { approvals = 11 }", "quorum = { roles = ['x'] }",
                                 "quorum = { approvals = 2, who = 'x' }",
                                 "quorum = { approvals = true }",
                                 "quorum = { approvals = 2, roles = [] }"])
def test_a_bad_quorum_in_the_policy_file_is_a_config_error(bad: str) -> None:
    with pytest.raises(ConfigError, match="quorum"):
        parse_policy(f'[[rules]]\ntool = "pay"\nverdict = "ask"\n{bad}\n')


async def test_the_principal_the_call_was_proposed_for_cannot_be_one_of_its_approvers() -> None:
    store, paid = MemoryStore(), []
    _, request = await _suspended(store, paid)
    own = await answer(store, request.id, request.digest, approved=True, approver="web:agent",
                       reviewer=Reviewer("agent", frozenset({"finance"})))
    assert own.refusal is Refusal.SELF_APPROVAL and not own.recorded
    assert await store.list_approval_votes(request.id) == ()
