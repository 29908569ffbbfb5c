"""Attacks on the execution ledger: a hostile model (or a crash) tries to run a side effect twice,
or to get a result for an action that did not run."""

from __future__ import annotations

from typing import Any

import pytest

from anfitrion import DenyAllApprover, Effect, Policy, Tool
from anfitrion._conversation import ToolCall
from anfitrion._gate import Gate, _silent
from anfitrion.models._scripted import call
from anfitrion.policy import Decision
from anfitrion.store import MemoryStore
from anfitrion.testing import gate_session


def _pay(ran: list[dict[str, Any]]) -> Tool:
    schema = {"type": "object", "properties": {"to": {"type": "string"}}, "required": ["to"]}
    return Tool.from_schema("pay", schema, lambda a: ran.append(a) or f"paid {a['to']}",
                            effect=Effect.WRITE)


def _allow_all() -> Policy:
    return Policy([lambda c, ctx: Decision.allow("test", "allow")])


@pytest.mark.anyio
async def test_the_same_call_processed_twice_runs_its_side_effect_once() -> None:
    ran: list[dict[str, Any]] = []
    store = MemoryStore()
    gate = Gate(policy=_allow_all(), approver=DenyAllApprover(), store=store, emit=_silent)
    tool = _pay(ran)
    results = [await gate.process(ToolCall.from_raw("c1", "pay", '{"to": "ana"}'),
                                  {"pay": tool}, gate_session("alice", "s1", turn=1))
               for _ in range(3)]
    assert ran == [{"to": "ana"}]
    assert {r.result.content for r in results if r.result} == {"paid ana"}


@pytest.mark.anyio
async def test_a_claim_left_by_a_crash_is_reported_as_outcome_unknown_and_not_rerun() -> None:
    ran: list[dict[str, Any]] = []
    store = MemoryStore()
    await store.claim_execution("s1", "c1", "")  # a worker died after claiming
    gate = Gate(policy=_allow_all(), approver=DenyAllApprover(), store=store, emit=_silent)
    outcome = await gate.process(ToolCall.from_raw("c1", "pay", '{"to": "ana"}'),
                                 {"pay": _pay(ran)}, gate_session("alice", "s1", turn=1))
    assert outcome.result is not None and outcome.result.error_kind == "outcome_unknown"
    assert ran == []


@pytest.mark.anyio
async def test_two_calls_with_one_id_in_a_reply_run_nothing(hostile: Any) -> None:
    ran: list[dict[str, Any]] = []
    outcome = await hostile([_pay(ran)], [[call("pay", {"to": "ana"}, id="dup"),
                                           call("pay", {"to": "eve"}, id="dup")]],
                            policy=_allow_all())
    assert outcome.run.status == "failed"
    assert ran == []


@pytest.mark.anyio
async def test_a_reused_call_id_never_passes_off_an_old_result_as_a_new_action(
        hostile: Any) -> None:
    ran: list[dict[str, Any]] = []
    outcome = await hostile([_pay(ran)], [call("pay", {"to": "ana"}, id="c1"),
                                          call("pay", {"to": "eve"}, id="c1")])
    # the reply reusing c1 is refused whole: nobody is asked, nothing runs, the run says why
    assert ran == [{"to": "ana"}]
    assert len(outcome.asked) == 1
    assert outcome.run.status == "failed"
    assert "reused the tool call id 'c1'" in (outcome.run.error or "")


@pytest.mark.anyio
async def test_a_tool_call_budget_stops_a_model_that_repeats_a_write(hostile: Any) -> None:
    ran: list[dict[str, Any]] = []
    steps = [[call("pay", {"to": f"p{i}"}) for i in range(5)]]
    outcome = await hostile([_pay(ran)], steps, policy=_allow_all(), max_tool_calls=2)
    assert len(ran) == 2
    assert outcome.run.status == "budget_exhausted"


@pytest.mark.anyio
async def test_a_repeated_call_guard_sees_the_same_arguments_however_they_are_spelled(
        hostile: Any) -> None:
    from anfitrion._canonical import digest

    ran: list[dict[str, Any]] = []

    def once(c: Any, ctx: Any) -> Decision:
        if (c.name, digest(dict(c.arguments))) in ctx.recent_calls:
            return Decision.deny("this exact call already ran", "repeat")
        return Decision.allow("first time", "allow")

    outcome = await hostile([_pay(ran)], [call("pay", raw='{"to": "ana"}'),
                                          call("pay", raw='{"to":"ana"}'),
                                          call("pay", raw='{ "to" : "ana" }')],
                            policy=Policy([once]))
    assert ran == [{"to": "ana"}]
    assert [r.error_kind for r in outcome.results] == [None, "denied", "denied"]
