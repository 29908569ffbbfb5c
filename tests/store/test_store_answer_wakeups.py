"""A call waiting for a person's answer is woken as soon as the answer is committed, by any
process: PostgreSQL ``LISTEN``/``NOTIFY`` (``anfitrion._answers.wait_for_answer``); other
stores are polled with backoff. A notification only makes the waiter look: a forged one (any
client of the database can ``NOTIFY``) answers nothing."""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio
import pytest

from anfitrion import _answers as answers
from anfitrion._approvals import ApprovalAnswer, ApprovalRequest, ApprovalVote, Quorum
from anfitrion.store import Store

pytestmark = pytest.mark.anyio


def _request(quorum: Quorum | None = None) -> ApprovalRequest:
    return ApprovalRequest.for_call(
        session_id="s1", principal_id="agent", call_id="c1", tool_name="mail.send",
        tool_definition_hash="d" * 64, arguments={"to": "ana@example.org"}, effect="write",
        reason="a person approves every mail", rule_id="mail", quorum=quorum)


async def _woken_after(store: Store, request: ApprovalRequest, answer: Callable[[], object],
                       *, poll: float) -> tuple[bool, float]:
    """Wait on *store* (first look, then a pause of *poll* seconds), answer meanwhile."""
    found: list[bool] = []
    async with anyio.create_task_group() as tg:
        async def wait() -> None:
            found.append(await answers.wait_for_answer(store, request.id, timeout=20,
                                                       poll=poll))

        tg.start_soon(wait)
        await anyio.sleep(0.5)  # the waiter has looked once and sleeps
        started = time.monotonic()
        await answer()  # type: ignore[misc]
    return found[0], time.monotonic() - started


@pytest.mark.postgres
@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
async def test_an_answer_on_another_connection_wakes_the_waiter_within_a_second(
        store: Store, other_handle: Callable[[], Store]) -> None:
    request = _request()
    await store.create_approval(request)
    elsewhere = other_handle()  # another replica's store

    async def approve() -> None:
        assert await elsewhere.answer_approval(ApprovalAnswer.to(request, True, "bob"))

    answered, took = await _woken_after(store, request, approve, poll=15)
    assert answered and took < 1.0, took  # not the 15 s poll


@pytest.mark.postgres
@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
async def test_the_vote_that_decides_a_quorum_wakes_the_waiter(
        store: Store, other_handle: Callable[[], Store]) -> None:
    request = _request(Quorum(2, ()))
    await store.create_approval(request)
    elsewhere = other_handle()

    async def two_votes() -> None:
        for voter in ("alice", "bob"):
            await elsewhere.add_approval_vote(ApprovalVote(request.id, request.digest, voter,
                                                           True, (), "", "api"))

    answered, took = await _woken_after(store, request, two_votes, poll=15)
    assert answered and took < 1.0, took


@pytest.mark.postgres
@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
async def test_a_forged_notification_answers_nothing(store: Store, store_url: str) -> None:
    import psycopg

    from anfitrion.store._wakeups import CHANNEL

    request = _request()
    await store.create_approval(request)

    async def forge() -> None:
        async with await psycopg.AsyncConnection.connect(store_url,
                                                         autocommit=True) as conn:
            await conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, request.id))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(forge)
            assert not await answers.wait_for_answer(store, request.id, timeout=1.5, poll=0.1)
    found = await store.get_approval(request.id)
    assert found is not None and found.answer is None


async def _terminate(store_url: str, pid: int) -> None:
    """End server process *pid* as an operator, a restart or a network cut would."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(store_url, autocommit=True) as admin:
        await admin.execute("SELECT pg_terminate_backend(%s)", (pid,))


@pytest.mark.postgres
@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
async def test_a_listening_connection_cut_while_a_call_waits_is_opened_again(
        store: Store, store_url: str, other_handle: Callable[[], Store]) -> None:
    """The listening connection breaks while a call waits: the waiter looks at once and
    polls meanwhile, the process listens again by itself (not only at the next wait), and
    the answer given after that wakes the same waiter."""
    request = _request()
    await store.create_approval(request)
    listener = store._listener  # type: ignore[attr-defined]
    with anyio.fail_after(60):  # a hang guard, not a bound: nothing here is timed
        async with store.watch_approval(request.id) as watch:  # type: ignore[attr-defined]
            assert watch.live
            cut = listener.backend_pid
            await _terminate(store_url, cut)
            assert await watch.wait(30)  # woken by the cut: look at the store now
            while not (watch.live and listener.backend_pid not in (None, cut)):
                await watch.wait(30)  # woken again once it listens: look once more
            assert await other_handle().answer_approval(ApprovalAnswer.to(request, True, "bob"))
            assert await watch.wait(30)
    found = await store.get_approval(request.id)
    assert found is not None and found.answer is not None


async def test_every_store_finds_an_answer_by_polling(
        store: Store, other_handle: Callable[[], Store]) -> None:
    request = _request()
    await store.create_approval(request)
    elsewhere = other_handle()

    async def approve() -> None:
        assert await elsewhere.answer_approval(ApprovalAnswer.to(request, True, "bob"))

    answered, took = await _woken_after(store, request, approve, poll=0.05)
    assert answered and took < 2.0, took  # the pause never grows past a second


async def test_a_request_the_store_lacks_is_not_waited_for(store: Store) -> None:
    with anyio.fail_after(5):
        assert not await answers.wait_for_answer(store, "no-such-request", timeout=30)
