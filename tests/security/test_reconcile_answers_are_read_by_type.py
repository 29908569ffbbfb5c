"""A reconcile hook's answer settles an effect only when it is the documented type: `True`
(it happened) or `False` (it did not). An attacker who controls what the outside system
answers (a status string, a JSON body, a number) must not get an effect settled — least of
all `done` from an answer meaning "no" (`"no"`, `"false"`, `{"happened": false}`), nor
`failed` (which lets it run again) from an answer that is not `False`. Anything else leaves
the effect unknown, through the gate, a crashed call's resume and `anfitrion effects
reconcile` alike."""

from __future__ import annotations

from typing import Any

import pytest

from anfitrion import DenyAllApprover, Effect, Policy, Principal, Tool
from anfitrion._conversation import ToolCall
from anfitrion._gate import Gate, _silent
from anfitrion._resolutions import reconcile
from anfitrion.policy import Decision
from anfitrion.store import LedgerState, MemoryStore
from anfitrion.testing import gate_session

pytestmark = pytest.mark.anyio


class _Status:
    def __bool__(self) -> bool:
        return True


HOSTILE: list[Any] = ["no", "false", "False", "", "0", "yes", "true", 0, 1, 0.0, 1.0, [],
                      [False], {}, {"happened": False}, {"happened": True}, _Status(), b"",
                      b"no", "None"]


def _refund(ran: list[dict[str, Any]], answer: Any, *, fail: bool) -> Tool:
    def handler(arguments: dict[str, Any]) -> str:
        ran.append(arguments)
        if fail:
            raise RuntimeError("the bank hung up")
        return "refunded"

    async def hook(arguments: dict[str, Any], context: Any) -> Any:
        return answer

    schema = {"type": "object", "properties": {"id": {"type": "string"}}}
    return Tool.from_schema("refund", schema, handler, effect=Effect.WRITE, reconcile=hook)


async def _call(gate: Gate, tool: Tool, call_id: str) -> Any:
    outcome = await gate.process(ToolCall.from_raw(call_id, "refund", '{"id": "p1"}'),
                                 {"refund": tool}, gate_session("alice", "s1", turn=1))
    return outcome.result


@pytest.mark.parametrize("answer", HOSTILE, ids=[repr(a)[:20] for a in HOSTILE])
async def test_an_answer_not_of_the_documented_type_leaves_the_effect_unknown(
        answer: Any) -> None:
    ran: list[dict[str, Any]] = []
    store = MemoryStore()
    gate = Gate(policy=Policy([lambda c, ctx: Decision.allow("t", "allow")]),
                approver=DenyAllApprover(), store=store, emit=_silent)
    await _call(gate, _refund(ran, answer, fail=True), "c1")  # the outcome is now unknown
    again = await _call(gate, _refund(ran, answer, fail=False), "c2")
    assert again.error_kind == "outcome_unknown"
    assert len(ran) == 1
    [effect] = await store.list_effects()
    assert effect.state is LedgerState.UNKNOWN and effect.resolved_by is None
    # the CLI's reconcile door reads the answer the same way
    done = await reconcile(store, effect, _refund(ran, answer, fail=False),
                           principal=Principal("ops"), by="cli:ops")
    assert done.outcome == "undecided"
    [effect] = await store.list_effects()
    assert effect.state is LedgerState.UNKNOWN


@pytest.mark.parametrize(("answer", "state", "runs"), [(True, LedgerState.DONE, 1),
                                                       (False, LedgerState.DONE, 2)])
async def test_true_and_false_still_settle_it(answer: bool, state: LedgerState,
                                              runs: int) -> None:
    ran: list[dict[str, Any]] = []
    store = MemoryStore()
    gate = Gate(policy=Policy([lambda c, ctx: Decision.allow("t", "allow")]),
                approver=DenyAllApprover(), store=store, emit=_silent)
    await _call(gate, _refund(ran, answer, fail=True), "c1")
    await _call(gate, _refund(ran, answer, fail=False), "c2")
    # False: it did not happen, so the new call runs it (and then it is done)
    assert len(ran) == runs
    effect = (await store.list_effects())[0]
    assert effect.state is state
