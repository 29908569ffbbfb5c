"""One contract, three backends: what every Store must do, including under concurrency."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import anyio
import pytest

from anfitrion._approvals import ApprovalAnswer, ApprovalRequest
from anfitrion._audit import verify_chain
from anfitrion._conversation import Provenance, ToolResult
from anfitrion.exceptions import ConflictError
from anfitrion.store import (
    ClaimState,
    LedgerState,
    SessionState,
    Store,
    open_store,
    session_audit_role,
)

pytestmark = pytest.mark.anyio


def _request(session_id: str = "s1", call_id: str = "c1", path: str = "a.md") -> ApprovalRequest:
    return ApprovalRequest.for_call(
        session_id=session_id, principal_id="alice", call_id=call_id, tool_name="save_note",
        tool_definition_hash="d" * 64, arguments={"path": path}, effect="write",
        reason="writes need a person", rule_id="default.write")


async def test_a_new_session_is_saved_and_loaded_with_version_one(store: Store) -> None:
    saved = await store.save_session(SessionState("s1", "alice", "suspended", {"k": [1, "é"]}))
    assert saved.version == 1
    loaded = await store.load_session("s1")
    assert loaded is not None
    assert (loaded.principal_id, loaded.status, dict(loaded.data), loaded.version) == \
        ("alice", "suspended", {"k": [1, "é"]}, 1)
    assert await store.load_session("missing") is None


async def test_saving_with_a_stale_version_conflicts(store: Store) -> None:
    first = await store.save_session(SessionState("s1", "alice", "running", {}))
    await store.save_session(SessionState("s1", "alice", "suspended", {}, first.version))
    with pytest.raises(ConflictError):
        await store.save_session(SessionState("s1", "alice", "completed", {}, first.version))
    with pytest.raises(ConflictError):
        await store.save_session(SessionState("s1", "alice", "running", {}))
    loaded = await store.load_session("s1")
    assert loaded is not None
    assert loaded.status == "suspended"
    assert loaded.version == 2


async def test_a_stale_save_with_nothing_new_leaves_the_stored_messages(store: Store) -> None:
    """A save whose version is stale changes nothing: not even the stored messages from its
    *saved_messages* on, which it would replace (nothing new: the one-statement save, as a
    lease given back is written)."""
    first = await store.save_session(SessionState("s1", "alice", "running", {},
                                                  messages=[{"n": 0}, {"n": 1}]))
    ahead = await store.save_session(dataclasses.replace(
        first, messages=[*first.messages, {"n": 2}]))
    assert ahead.version == first.version + 1
    for stale in (dataclasses.replace(first, status="completed", lease_owner=None),
                  dataclasses.replace(first, status="completed", messages=[])):
        with pytest.raises(ConflictError):
            await store.save_session(stale)
    loaded = await store.load_session("s1")
    assert loaded is not None
    assert (loaded.status, loaded.version) == ("running", ahead.version)
    assert [dict(m) for m in loaded.messages] == [{"n": 0}, {"n": 1}, {"n": 2}]


async def test_sessions_are_listed_by_status(store: Store) -> None:
    await store.save_session(SessionState("a", "alice", "suspended", {}))
    await store.save_session(SessionState("b", "bob", "completed", {}))
    assert [s.session_id for s in await store.list_sessions("suspended")] == ["a"]
    assert {s.session_id for s in await store.list_sessions()} == {"a", "b"}


async def test_an_approval_is_answered_once_and_used_once(store: Store) -> None:
    request = _request()
    await store.create_approval(request)
    assert [r.id for r in await store.list_approvals()] == [request.id]
    wrong = ApprovalAnswer(request.id, "0" * 64, True, "mallory")
    assert not await store.answer_approval(wrong)
    assert await store.answer_approval(ApprovalAnswer.to(request, True, "bob", "fine"))
    assert not await store.answer_approval(ApprovalAnswer.to(request, False, "carol"))
    assert await store.list_approvals() == []
    assert [r.id for r in await store.list_approvals(pending_only=False)] == [request.id]
    found = await store.get_approval(request.id)
    assert found is not None
    stored, answer, used = found.request, found.answer, found.used
    assert stored == request
    assert answer is not None
    assert (answer.approver, answer.note, used) == ("bob", "fine", False)
    assert await store.consume_approval(request.id, "0" * 64) is None
    assert await store.consume_approval(request.id, request.digest) is not None
    assert await store.consume_approval(request.id, request.digest) is None
    found = await store.get_approval(request.id)
    assert found is not None
    assert found.used is True


async def test_approvals_are_filtered_by_session(store: Store) -> None:
    await store.create_approval(_request("s1", "c1"))
    await store.create_approval(_request("s2", "c1"))
    assert [r.session_id for r in await store.list_approvals(session_id="s2")] == ["s2"]


async def test_using_an_approving_answer_moves_the_ledger_to_approved(store: Store) -> None:
    request, denied = _request("s1", "c1"), _request("s1", "c2")
    for r, ok in ((request, True), (denied, False)):
        await store.create_approval(r)
        await store.advance_execution("s1", r.call_id, LedgerState.DECIDED, r.digest)
        assert await store.answer_approval(ApprovalAnswer.to(r, ok, "bob"))
        assert await store.consume_approval(r.id, r.digest) is not None
    approved = await store.execution_state("s1", "c1")
    assert approved is not None
    assert (approved.state, approved.digest) == (LedgerState.APPROVED, request.digest)
    still = await store.execution_state("s1", "c2")
    assert still is not None
    assert still.state is LedgerState.DECIDED


async def test_the_ledger_only_moves_forward(store: Store) -> None:
    await store.advance_execution("s", "c", LedgerState.PROPOSED, "d1")
    await store.advance_execution("s", "c", LedgerState.APPROVED, "d1")
    await store.advance_execution("s", "c", LedgerState.DECIDED, "d1")
    entry = await store.execution_state("s", "c")
    assert entry is not None
    assert entry.state is LedgerState.APPROVED
    await store.claim_execution("s", "c", "d1")
    await store.advance_execution("s", "c", LedgerState.PROPOSED, "d1")
    entry = await store.execution_state("s", "c")
    assert entry is not None
    assert entry.state is LedgerState.CLAIMED
    with pytest.raises(ValueError, match="records only"):
        await store.advance_execution("s", "c", LedgerState.DONE, "d1")


async def test_a_claim_never_settled_is_unknown_to_the_next_claimer(store: Store) -> None:
    assert (await store.claim_execution("s", "c", "d")).state is ClaimState.CLAIMED
    assert (await store.claim_execution("s", "c", "d")).state is ClaimState.UNKNOWN
    assert (await store.claim_execution("s", "c", "d")).state is ClaimState.UNKNOWN
    entry = await store.execution_state("s", "c")
    assert entry is not None
    assert entry.state is LedgerState.UNKNOWN
    assert list(await store.list_unknown_executions()) == [("s", "c")]


async def test_a_settled_call_returns_its_result_instead_of_running_again(store: Store) -> None:
    ok = ToolResult("c1", "save_note", "saved", provenance=Provenance.TRUSTED)
    bad = ToolResult("c2", "save_note", "disk full", is_error=True, error_kind="tool_error")
    for result in (ok, bad):
        claim = await store.claim_execution("s", result.call_id, "d")
        assert claim.state is ClaimState.CLAIMED and claim.token
        assert await store.settle_execution("s", result.call_id, result, claim.token)
    again = await store.claim_execution("s", "c1", "d")
    assert (again.state, again.result) == (ClaimState.DONE, ok)
    failed = await store.claim_execution("s", "c2", "d")
    assert (failed.state, failed.result) == (ClaimState.FAILED, bad)
    assert list(await store.list_unknown_executions()) == []


async def test_concurrent_claims_from_many_handles_let_exactly_one_run(
        store: Store, other_handle: Callable[[], Store]) -> None:
    handles = [store] + [other_handle() for _ in range(3)]
    answers: list[ClaimState] = []

    async def claim(handle: Store) -> None:
        answers.append((await handle.claim_execution("s", "c", "d")).state)

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            for i in range(12):
                tg.start_soon(claim, handles[i % len(handles)])
    assert answers.count(ClaimState.CLAIMED) == 1
    assert answers.count(ClaimState.UNKNOWN) == 11


async def test_a_record_is_created_once_and_never_overwritten_by_a_second_create(
        store: Store) -> None:
    assert await store.create_record("seen", "k", {"at": 1}) is True
    assert await store.create_record("seen", "k", {"at": 2}) is False
    assert await store.get_record("seen", "k") == {"at": 1}
    assert await store.create_record("other", "k", {"at": 3}) is True
    await store.put_record("seen", "k", {"at": 4})  # put still replaces
    assert await store.create_record("seen", "k", {"at": 5}) is False
    assert await store.list_records("seen") == [("k", {"at": 4})]


async def test_handles_racing_to_create_one_record_let_exactly_one_create_it(
        store: Store, other_handle: Callable[[], Store]) -> None:
    handles = [store] + [other_handle() for _ in range(3)]
    created: list[tuple[int, bool]] = []

    async def create(i: int, handle: Store) -> None:
        created.append((i, await handle.create_record("seen", "key", {"by": i})))

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            for i in range(12):
                tg.start_soon(create, i, handles[i % len(handles)])
    assert sorted(ok for _, ok in created) == [False] * 11 + [True]
    winner = next(i for i, ok in created if ok)
    assert await handles[1].get_record("seen", "key") == {"by": winner}


async def test_two_approvers_answering_at_once_record_exactly_one_answer(
        store: Store, other_handle: Callable[[], Store]) -> None:
    request = _request()
    await store.create_approval(request)
    second = other_handle()
    outcomes: dict[str, bool] = {}

    async def answer(handle: Store, who: str, approved: bool) -> None:
        outcomes[who] = await handle.answer_approval(ApprovalAnswer.to(request, approved, who))

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(answer, store, "bob", True)
            tg.start_soon(answer, second, "carol", False)
    assert sorted(outcomes.values()) == [False, True]
    found = await store.get_approval(request.id)
    assert found is not None
    assert found.answer is not None
    winner = next(who for who, ok in outcomes.items() if ok)
    assert found.answer.approver == winner
    used = [await store.consume_approval(request.id, request.digest),
            await second.consume_approval(request.id, request.digest)]
    assert sum(u is not None for u in used) == 1


async def test_the_audit_chain_has_one_order_under_concurrent_writers(
        store: Store, other_handle: Callable[[], Store]) -> None:
    handles = [store, other_handle(), other_handle()]

    async def append(handle: Store, n: int) -> None:
        await handle.append_audit("call.proposed", f"s{n % 2}", 1_700_000_000.25 + n,
                                  {"n": n, "text": "ünïcode ✓", "ratio": 0.1 + n})

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for n in range(30):
                tg.start_soon(append, handles[n % 3], n)
    records = await store.audit_records()
    assert [r.seq for r in records] == list(range(1, 31))
    report = verify_chain(records)
    assert report.ok, report.problem
    assert report.head == records[-1].hash
    assert {r.data["n"] for r in await store.audit_records("s1")} == set(range(1, 30, 2))


async def test_batches_written_with_sessions_chain_in_one_order_under_concurrent_writers(
        store: Store, other_handle: Callable[[], Store]) -> None:
    """Records written in a session's save (one batch each: format 1 for one record, format
    3 for more), from several handles at once, with names a header must quote: one chain
    that verifies, every batch whole and in one place. (PostgreSQL hashes where it locks the
    head, from the parts :func:`head_free_parts` gives: a quoting or numbering slip there
    breaks the verification.)"""
    handles = [store, other_handle(), other_handle()]
    if any(session_audit_role(h) is None for h in handles):
        pytest.skip("this store writes no records with a session's save")

    async def save(handle: Store, n: int) -> None:
        role = session_audit_role(handle)
        assert role is not None
        sid = f's"{n}\u00e9\u202e'
        entries = [(f'call."kind"\u2713{k}', sid, 1_700_000_000.1 + n + k / 10,
                    {"n": n, "k": k, "text": "ünïcode ✓ \\ \"q\""}) for k in range(1 + n % 3)]
        await role.save_session_and_audit(SessionState(sid, "alice", "running", {"n": n}),
                                          entries)

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for n in range(24):
                tg.start_soon(save, handles[n % 3], n)
    records = await store.audit_records()
    assert len(records) == sum(1 + n % 3 for n in range(24))
    assert [r.seq for r in records] == list(range(1, len(records) + 1))
    report = verify_chain(records)
    assert report.ok, report.problem
    batches: dict[int, list[tuple[int, int]]] = {}
    for r in records:
        batches.setdefault(r.data["n"], []).append((r.data["k"], r.seq))
    for n, batch in batches.items():  # whole, in order, together
        assert [k for k, _ in batch] == list(range(1 + n % 3))
        assert [seq for _, seq in batch] == list(range(batch[0][1], batch[0][1] + len(batch)))
    assert len(batches) == 24


async def test_audit_data_comes_back_exactly_as_hashed(store: Store) -> None:
    data = {"b": [1, 2.5, None, True], "a": {"z": "é\u202e", "y": 1e-7}, "n": 12345678901234}
    record = await store.append_audit("run.started", "s", 1_764_000_000.123456, data)
    [again] = await store.audit_records()
    assert again == record
    assert dict(again.data) == data


async def test_call_counts_and_named_records(store: Store) -> None:
    for at in (10.0, 20.0, 30.0):
        await store.record_call("alice", "send", at)
    await store.record_call("bob", "send", 30.0)
    assert await store.count_calls("alice", "send", 15.0) == 2
    assert await store.count_calls("alice", "other", 0.0) == 0
    assert await store.get_record("pins", "srv") is None
    await store.put_record("pins", "srv", {"hash": "1"})
    await store.put_record("pins", "srv", {"hash": "2"})
    await store.put_record("pins", "another", {"hash": "3"})
    assert await store.get_record("pins", "srv") == {"hash": "2"}
    assert [k for k, _ in await store.list_records("pins")] == ["another", "srv"]
    assert await store.list_records("nothing") == []


async def test_everything_survives_closing_and_reopening(store_url: str) -> None:
    if store_url == "memory://":
        pytest.skip("the in-memory store lives and dies with its process")
    from anfitrion.store import open_store

    first = open_store(store_url)
    request = _request()
    await first.save_session(SessionState("s", "alice", "suspended", {"x": 1}))
    await first.create_approval(request)
    await first.answer_approval(ApprovalAnswer.to(request, True, "bob"))
    await first.claim_execution("s", "c9", "d")
    await first.append_audit("run.ended", "s", 1.0, {})
    await first.close()
    second = open_store(store_url)
    try:
        assert (await second.load_session("s")) is not None
        found = await second.get_approval(request.id)
        assert found is not None
        assert found.answer is not None
        assert found.answer.approved
        assert list(await second.list_unknown_executions()) == [("s", "c9")]
        assert verify_chain(await second.audit_records()).ok
    finally:
        await second.close()


async def test_expired_requests_still_list_with_their_expiry(store: Store) -> None:
    old = ApprovalRequest.for_call(
        session_id="s", principal_id="alice", call_id="c", tool_name="t",
        tool_definition_hash="d", arguments={}, effect="write", reason="r", rule_id="x",
        now=datetime.now(UTC) - timedelta(hours=1))
    await store.create_approval(old)
    [listed] = await store.list_approvals()
    assert listed.expired()


async def test_workers_claiming_ready_sessions_each_get_a_different_one(
        store: Store, other_handle: Callable[[], Store]) -> None:
    for n in range(6):
        await store.save_session(SessionState(f"s{n}", "alice", "suspended", {"n": n}))
        request = _request(f"s{n}", "c1")
        await store.create_approval(request)
        if n != 5:  # s5 still waits for a person
            await store.answer_approval(ApprovalAnswer.to(request, True, "bob"))
    await store.save_session(SessionState("done", "alice", "completed", {}))
    taken: list[str] = []

    async def worker(handle: Store) -> None:
        while (state := await handle.claim_resumable()) is not None:
            assert state.status == "running"
            taken.append(state.session_id)

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            for handle in (store, other_handle(), other_handle()):
                tg.start_soon(worker, handle)
    assert sorted(taken) == ["s0", "s1", "s2", "s3", "s4"]
    s0 = await store.load_session("s0")
    assert s0 is not None
    assert (s0.status, s0.version) == ("running", 2)


# -- the session runtime: claim tokens and leases -------------------------------------------

async def test_settling_needs_the_token_of_the_claim_so_unknown_is_never_overwritten(
        store: Store, other_handle: Callable[[], Store]) -> None:
    """A run whose claim another run took over (its lease lapsed) cannot settle: the entry
    stays unknown for a person, whatever the slow run learnt."""
    done = ToolResult("c1", "pay", "paid", provenance=Provenance.TRUSTED)
    first = await store.claim_execution("s", "c1", "d")
    assert first.state is ClaimState.CLAIMED and first.token
    second = await other_handle().claim_execution("s", "c1", "d")  # the take-over finds it
    assert second.state is ClaimState.UNKNOWN and second.token is None
    assert not await store.settle_execution("s", "c1", done, first.token)
    assert not await store.settle_execution("s", "c1", done, "forged-token")
    entry = await store.execution_state("s", "c1")
    assert entry is not None and entry.state is LedgerState.UNKNOWN and entry.result is None
    assert list(await store.list_unknown_executions()) == [("s", "c1")]


async def test_a_token_settles_once_and_only_its_own_entry(store: Store) -> None:
    done = ToolResult("c1", "pay", "paid", provenance=Provenance.TRUSTED)
    claim = await store.claim_execution("s", "c1", "d")
    other = await store.claim_execution("s", "c2", "d")
    assert claim.token and other.token and claim.token != other.token
    assert not await store.settle_execution("s", "c2", done, claim.token)
    assert await store.settle_execution("s", "c1", done, claim.token)
    assert not await store.settle_execution("s", "c1", done, claim.token)  # done: final


async def test_an_idempotent_retry_claims_an_unknown_entry_again(store: Store) -> None:
    await store.claim_execution("s", "c1", "d")
    assert (await store.claim_execution("s", "c1", "d")).state is ClaimState.UNKNOWN
    retry = await store.claim_execution("s", "c1", "d", retry_unknown=True)
    assert retry.state is ClaimState.CLAIMED and retry.token
    ok = ToolResult("c1", "lookup", "found", provenance=Provenance.TRUSTED)
    assert await store.settle_execution("s", "c1", ok, retry.token)
    assert (await store.claim_execution("s", "c1", "d", retry_unknown=True)).state is \
        ClaimState.DONE


async def test_a_live_lease_is_held_by_one_owner_and_a_lapsed_one_is_free(
        store: Store, other_handle: Callable[[], Store]) -> None:
    now = 1_000_000.0
    await store.save_session(SessionState("s1", "alice", "suspended", {}))
    taken = await store.acquire_lease("s1", "host:1:a", now + 60, now=now)
    assert taken is not None and taken.lease_owner == "host:1:a" and taken.status == "running"
    assert taken.version == 2
    other = other_handle()
    assert await other.acquire_lease("s1", "host:2:b", now + 60, now=now + 30) is None
    assert not await other.renew_lease("s1", "host:2:b", now + 120)
    assert await store.renew_lease("s1", "host:1:a", now + 90)
    assert await other.acquire_lease("s1", "host:2:b", now + 150, now=now + 80) is None
    # lapsed: free for anyone; the take-over bumps the version, fencing the old holder's saves
    stolen = await other.acquire_lease("s1", "host:2:b", now + 200, now=now + 95)
    assert stolen is not None and stolen.version == 3
    assert not await store.renew_lease("s1", "host:1:a", now + 300)
    with pytest.raises(ConflictError):
        await store.save_session(SessionState("s1", "alice", "completed", {}, taken.version))
    # an owner known to be dead can be replaced while its lease still runs
    assert await store.acquire_lease("s1", "host:1:c", now + 400, now=now + 100,
                                     replace="host:2:b") is not None
    assert await store.acquire_lease("missing", "host:1:a", now + 60, now=now) is None


async def test_claim_resumable_takes_a_session_whose_lease_lapsed(store: Store) -> None:
    import time

    now = time.time()
    await store.save_session(SessionState("dead", "alice", "running", {},
                                          lease_owner="elsewhere:1:x", lease_expires=now - 5))
    await store.save_session(SessionState("alive", "alice", "running", {},
                                          lease_owner="elsewhere:2:y", lease_expires=now + 600))
    await store.save_session(SessionState("stuck", "alice", "running", {}))  # no lease: old row
    taken = await store.claim_resumable("me:1:z", 30)
    assert taken is not None and taken.session_id == "dead"
    assert taken.lease_owner == "me:1:z" and taken.lease_expires is not None
    assert taken.lease_expires > now
    assert await store.claim_resumable("me:1:z", 30) is None


def test_a_store_used_on_one_event_loop_closes_on_another(store_url: str) -> None:
    """``run_sync()`` runs each call on a loop of its own: a store used there, then closed on
    a new loop (an application's shutdown), closes cleanly, and can be used again after."""
    import asyncio

    store = open_store(store_url)
    asyncio.run(store.put_record("loops", "k", {"n": 1}))
    asyncio.run(store.close())  # the pool's loop has ended
    assert asyncio.run(store.get_record("loops", "k")) == {"n": 1}
    asyncio.run(_use_and_close(store))


async def _use_and_close(store: Store) -> None:
    assert await store.get_record("loops", "k") == {"n": 1}
    await store.close()
