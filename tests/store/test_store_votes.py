"""The two-person rule in the store: one vote per person, tallied in the vote's transaction,
the same contract on every backend, and concurrent votes never lost or double-counted."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import pytest

from anfitrion._approvals import ApprovalAnswer, ApprovalRequest, ApprovalVote, Quorum
from anfitrion.store import Store, VoteState

pytestmark = pytest.mark.anyio


def _request(required: int = 2, roles: tuple[str, ...] = ()) -> ApprovalRequest:
    return ApprovalRequest.for_call(
        session_id="s1", principal_id="agent", call_id="c1", tool_name="pay",
        tool_definition_hash="d" * 64, arguments={"amount": 5000}, effect="write",
        reason="large payments need two people", rule_id="pay.large",
        quorum=Quorum(required, roles))


def _vote(request: ApprovalRequest, voter: str, approved: bool = True) -> ApprovalVote:
    return ApprovalVote(request.id, request.digest, voter, approved, ("finance",), "", "api")


async def test_the_required_number_of_distinct_votes_approves_and_names_every_approver(
        store: Store) -> None:
    request = _request(2)
    await store.create_approval(request)
    first = await store.add_approval_vote(_vote(request, "alice"))
    assert (first.state, first.answer) == (VoteState.RECORDED, None)
    found = await store.get_approval(request.id)
    assert found is not None and found.answer is None  # one vote does not decide
    second = await store.add_approval_vote(_vote(request, "bob"))
    assert second.state is VoteState.RECORDED
    assert second.answer is not None and second.answer.approved
    assert second.answer.approver == "alice, bob"
    found = await store.get_approval(request.id)
    assert found is not None and found.answer == second.answer
    assert [v.voter for v in await store.list_approval_votes(request.id)] == ["alice", "bob"]


async def test_a_second_vote_by_the_same_person_is_not_counted(store: Store) -> None:
    request = _request(2)
    await store.create_approval(request)
    await store.add_approval_vote(_vote(request, "alice"))
    again = await store.add_approval_vote(_vote(request, "alice"))
    assert again.state is VoteState.DUPLICATE and again.answer is None
    assert len(again.votes) == 1
    found = await store.get_approval(request.id)
    assert found is not None and found.answer is None


async def test_one_rejection_rejects_the_whole_request(store: Store) -> None:
    request = _request(3)
    await store.create_approval(request)
    await store.add_approval_vote(_vote(request, "alice"))
    no = await store.add_approval_vote(_vote(request, "bob", approved=False))
    assert no.answer is not None and not no.answer.approved and no.answer.approver == "bob"
    late = await store.add_approval_vote(_vote(request, "carol"))
    assert late.state is VoteState.CLOSED  # decided: further votes change nothing


async def test_a_vote_for_another_digest_or_a_request_without_quorum_is_refused(
        store: Store) -> None:
    request = _request(2)
    await store.create_approval(request)
    forged = ApprovalVote(request.id, "0" * 64, "alice", True)
    assert (await store.add_approval_vote(forged)).state is VoteState.CLOSED
    plain = ApprovalRequest.for_call(
        session_id="s1", principal_id="agent", call_id="c2", tool_name="pay",
        tool_definition_hash="d" * 64, arguments={"amount": 5}, effect="write",
        reason="r", rule_id="r")
    await store.create_approval(plain)
    assert (await store.add_approval_vote(_vote(plain, "alice"))).state is VoteState.CLOSED
    assert await store.list_approval_votes(request.id) == ()


async def test_a_single_approving_answer_cannot_bypass_the_quorum(store: Store) -> None:
    request = _request(2)
    await store.create_approval(request)
    assert not await store.answer_approval(ApprovalAnswer.to(request, True, "alice"))
    found = await store.get_approval(request.id)
    assert found is not None and found.answer is None
    # a denial (or the host's withdrawal) needs nobody's quorum
    assert await store.answer_approval(ApprovalAnswer.to(request, False, "host"))


async def test_concurrent_votes_of_many_people_record_one_answer_and_lose_no_vote(
        store: Store, other_handle: Callable[[], Store]) -> None:
    request = _request(10)
    await store.create_approval(request)
    handles = [other_handle() for _ in range(4)]
    outcomes = []

    async def vote(i: int) -> None:
        outcomes.append(await handles[i % 4].add_approval_vote(_vote(request, f"p{i}")))

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for i in range(10):
                tg.start_soon(vote, i)
    assert all(o.state is VoteState.RECORDED for o in outcomes)
    deciding = [o for o in outcomes if o.answer is not None]
    assert len(deciding) == 1  # exactly the tenth vote decided
    assert len(await store.list_approval_votes(request.id)) == 10
    found = await store.get_approval(request.id)
    assert found is not None and found.answer == deciding[0].answer


async def test_concurrent_votes_of_one_person_count_once(
        store: Store, other_handle: Callable[[], Store]) -> None:
    request = _request(2)
    await store.create_approval(request)
    handles = [other_handle() for _ in range(3)]
    states = []

    async def vote(handle: Store) -> None:
        states.append((await handle.add_approval_vote(_vote(request, "alice"))).state)

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for handle in handles * 2:
                tg.start_soon(vote, handle)
    assert sorted(states) == sorted([VoteState.RECORDED] + [VoteState.DUPLICATE] * 5)
    found = await store.get_approval(request.id)
    assert found is not None and found.answer is None


async def test_concurrent_votes_through_the_answer_path_audit_one_answer(
        store: Store, other_handle: Callable[[], Store]) -> None:
    from anfitrion import _answers as answers
    from anfitrion._approvals import Reviewer

    request = _request(3, ("finance",))
    await store.create_approval(request)
    handles = [other_handle() for _ in range(5)]
    outcomes = []

    async def vote(i: int) -> None:
        outcomes.append(await answers.answer(
            handles[i], request.id, request.digest, approved=True, approver=f"api:p{i}",
            reviewer=Reviewer(f"p{i}", frozenset({"finance"})), via="api"))

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for i in range(5):
                tg.start_soon(vote, i)
    decided = [o for o in outcomes if o.answer is not None]
    # the third counted vote decides; later ones find the request decided and are refused
    assert len(decided) == 1 and decided[0].answer is not None
    assert len(decided[0].answer.approver.split(", ")) == 3
    records = await store.audit_records()
    assert [r.type for r in records].count("approval.answered") == 1
    assert [r.type for r in records].count("approval.voted") == \
        sum(o.vote is not None for o in outcomes)
