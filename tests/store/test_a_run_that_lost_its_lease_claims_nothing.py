"""The claim is fenced by the lease: a run that stalled past its lease (a GC pause, a stopped
process, a replica cut off) and whose session another run took over claims nothing when it
wakes, on every backend — the call it was deciding was decided on state the other run has
since moved on (a tainting read, a denial, a spent budget).

The attacker here is the scheduler: whatever falls between the decision and the claim. The
fence is checked in the claim's own transaction, so no takeover can slip between the two."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from anfitrion import ApprovalAnswer, Effect, Host, ScriptedModel, Tool
from anfitrion._approvals import ApprovalRequest
from anfitrion.exceptions import ConflictError
from anfitrion.policy import Policy, ToolRule, Verdict
from anfitrion.store import ClaimState, LedgerState, Store
from anfitrion.testing import call

pytestmark = pytest.mark.anyio

SCHEMA = {"type": "object", "properties": {"to": {"type": "string"}}, "required": ["to"],
          "additionalProperties": False}
OTHER = "replica-b/1:4242:takenover0001"


def _pay(ran: list[dict[str, Any]]) -> Tool:
    return Tool.from_schema("pay", SCHEMA, lambda a: ran.append(a) or "paid", effect=Effect.WRITE)


class _StalledThenApproved:
    """A person approves — but meanwhile this run's lease lapsed and *other* took the session."""

    def __init__(self, store: Store, host: Callable[[], Host], take_over: bool = True) -> None:
        self.store, self.host, self.take_over = store, host, take_over

    async def decide(self, request: ApprovalRequest) -> ApprovalAnswer:
        if self.take_over:
            mine = self.host().runtime.owner
            assert await self.store.renew_lease(request.session_id, mine, 0.0)  # the stall
            taken = await self.store.acquire_lease(request.session_id, OTHER,
                                                   time.time() + 60, now=time.time())
            assert taken is not None and taken.lease_owner == OTHER
        return ApprovalAnswer.to(request, True, "ops")


async def _run(store: Store, take_over: bool) -> tuple[list[dict[str, Any]], Any, str]:
    ran: list[dict[str, Any]] = []
    host: Host | None = None
    approver = _StalledThenApproved(store, lambda: host, take_over)  # type: ignore[arg-type,return-value]
    host = Host(model=ScriptedModel([call("pay", {"to": "acct-1"}), "done"]), tools=[_pay(ran)],
                store=store, approver=approver,
                policy=Policy([ToolRule("pay", Verdict.ASK)]))
    outcome: Any
    try:
        outcome = await host.run("pay acct-1", session_id="s-fenced")
    except ConflictError as exc:
        outcome = exc
    return ran, outcome, "s-fenced"


async def test_a_run_whose_lease_was_taken_over_runs_nothing(store: Store) -> None:
    ran, outcome, sid = await _run(store, take_over=True)
    assert ran == []  # the side effect never happened
    assert isinstance(outcome, ConflictError), outcome
    assert "leased by" in str(outcome) and OTHER in str(outcome)
    assert list(await store.list_effects()) == []  # no effect key reserved either
    state = await store.load_session(sid)
    assert state is not None and state.lease_owner == OTHER  # the new holder is untouched


async def test_the_same_run_with_its_lease_still_held_runs_once(store: Store) -> None:
    ran, outcome, _ = await _run(store, take_over=False)
    assert ran == [{"to": "acct-1"}]
    assert not isinstance(outcome, ConflictError)


async def test_the_store_refuses_the_claim_and_reserves_nothing(store: Store) -> None:
    """The store contract itself: a claim naming an owner that no longer holds the lease."""
    host = Host(model=ScriptedModel(["hi"]), store=store)
    await host.run("hi", session_id="s-contract")
    assert await store.acquire_lease("s-contract", OTHER, time.time() + 60, now=time.time())
    with pytest.raises(ConflictError, match="leased by"):
        await store.claim_execution("s-contract", "c1", "d", owner="replica-a/1:1:mine")
    assert await store.execution_state("s-contract", "c1") is None
    claim = await store.claim_execution("s-contract", "c1", "d", owner=OTHER)
    assert claim.state is ClaimState.CLAIMED
    entry = await store.execution_state("s-contract", "c1")
    assert entry is not None and entry.state is LedgerState.CLAIMED
    # a session nobody leases, or one the store has never seen, is not fenced
    assert (await store.claim_execution("s-unknown", "c1", "d", owner="x/1:1:y")).state \
        is ClaimState.CLAIMED
