"""The flood guard: too many pending requests, or asks too fast, are denied."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from anfitrion import CallbackApprover, RunStatus
from anfitrion._approvals import ApprovalRequest
from anfitrion.policy import ApprovalLimits, Policy
from anfitrion.testing import MemoryStore, call

from .conftest import MAIL, FakeClock, mail_host

pytestmark = pytest.mark.anyio

FLOOD = "denied by policy: too many approval requests are waiting in this session"
FAST = "denied by policy: approval requests are being raised too fast in this session"


def _mails(n: int) -> list[Any]:
    return [[call("send_email", {**MAIL, "subject": f"#{i}"}) for i in range(n)], "done"]


async def test_more_than_max_pending_asks_in_one_session_are_denied(store: MemoryStore,
                                                                    clock: FakeClock) -> None:
    sent: list[dict[str, Any]] = []
    policy = Policy(approvals=ApprovalLimits(max_pending=2))
    run = await mail_host(sent, store, clock, steps=_mails(4), policy=policy).run("m")
    assert run.status is RunStatus.SUSPENDED
    assert len(run.pending) == 2
    assert [c.error_kind for c in run.calls] == [None, None, "denied", "denied"]
    assert len(await store.list_approvals(session_id=run.session_id)) == 2


async def test_pending_requests_of_other_sessions_do_not_count(store: MemoryStore,
                                                               clock: FakeClock) -> None:
    sent: list[dict[str, Any]] = []
    policy = Policy(approvals=ApprovalLimits(max_pending=2))
    for _ in range(3):
        run = await mail_host(sent, store, clock, steps=_mails(2), policy=policy).run("m")
        assert len(run.pending) == 2


async def test_expired_requests_no_longer_count_as_pending(store: MemoryStore,
                                                           clock: FakeClock) -> None:
    sent: list[dict[str, Any]] = []
    policy = Policy(approvals=ApprovalLimits(max_pending=1, max_asks=100))
    run = await mail_host(sent, store, clock, steps=_mails(1), policy=policy).run("m")
    assert len(run.pending) == 1
    clock.advance(minutes=16)
    steps: list[Any] = ["done", *_mails(1)]
    host = mail_host(sent, store, clock, steps=steps, policy=policy)
    resumed = await host.resume(run.session_id)  # the expired one is denied
    assert resumed.status is RunStatus.COMPLETED
    later = await host.run("again", session_id=run.session_id)
    assert later.status is RunStatus.SUSPENDED
    assert len(later.pending) == 1


async def test_asking_faster_than_the_limit_is_denied_until_the_window_passes(
        store: MemoryStore, clock: FakeClock) -> None:
    sent: list[dict[str, Any]] = []
    asked: list[ApprovalRequest] = []

    def no(request: ApprovalRequest) -> bool:
        asked.append(request)
        return False

    policy = Policy(approvals=ApprovalLimits(max_asks=3, per=timedelta(seconds=60)))
    host = mail_host(sent, store, clock, steps=[*_mails(5)[:1], "done", *_mails(1)],
                     policy=policy, approver=CallbackApprover(no))
    run = await host.run("m")
    assert len(asked) == 3
    assert [p.content for p in run.transcript[-2].parts][3:] == [FAST, FAST]
    clock.advance(seconds=61)
    await host.run("again", session_id=run.session_id)
    assert len(asked) == 4


async def test_a_pending_flood_is_reported_to_the_model(store: MemoryStore,
                                                        clock: FakeClock) -> None:
    sent: list[dict[str, Any]] = []
    policy = Policy(approvals=ApprovalLimits(max_pending=0))
    host = mail_host(sent, store, clock, steps=_mails(1), policy=policy)
    run = await host.run("m")
    assert run.status is RunStatus.COMPLETED
    assert run.transcript[-2].parts[0].content == FLOOD


def test_approval_limits_reject_nonsense() -> None:
    with pytest.raises(ValueError):
        ApprovalLimits(ttl=timedelta(0))
    with pytest.raises(ValueError):
        ApprovalLimits(max_pending=-1)


async def test_a_session_whose_asks_a_person_keeps_approving_is_not_a_flood(
        store: MemoryStore, clock: FakeClock) -> None:
    """A benign session that legitimately asks more often than the rate (issue #20 saw one
    denied at 17 asks) runs every call its person approved; refusals still count."""
    sent: list[dict[str, Any]] = []
    policy = Policy(approvals=ApprovalLimits(max_asks=3, per=timedelta(seconds=60)))
    host = mail_host(sent, store, clock, steps=[*_mails(17)[:1], "done"], policy=policy,
                     approver=CallbackApprover(lambda request: True))
    run = await host.run("m")
    assert run.status is RunStatus.COMPLETED
    assert [c.error_kind for c in run.calls] == [None] * 17
    assert len(sent) == 17
