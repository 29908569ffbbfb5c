"""Suspend, resume and exactly-once execution through the Host, on every backend."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest

from anfitrion import Effect, Host, Toolbox
from anfitrion._approvals import DeferredApprover
from anfitrion._conversation import ToolCall, ToolResult, UserMessage
from anfitrion._host import RunStatus
from anfitrion.exceptions import ConflictError, UserError
from anfitrion.models._base import ModelRequest
from anfitrion.store import LedgerState, Store
from anfitrion.testing import ScriptedModel, call

pytestmark = pytest.mark.anyio


class World:
    """The outside world the tools act on: counts every real execution."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.lookups = 0
        self.gate = anyio.Event()
        self.block = False

    def toolbox(self) -> Toolbox:
        tools = Toolbox()

        @tools.tool(effect=Effect.READ, provenance="trusted")
        def lookup(name: str) -> str:
            """Look a name up."""
            self.lookups += 1
            return f"{name} is in Lisboa"

        @tools.tool(effect=Effect.WRITE, provenance="trusted")
        async def send(to: str) -> str:
            """Send a message."""
            self.sent.append(to)
            return f"sent to {to}"

        @tools.tool(effect=Effect.WRITE, provenance="trusted", idempotent=True)
        def set_flag(value: str) -> str:
            """Set a flag (safe to repeat)."""
            self.sent.append(f"flag={value}")
            return "flag set"

        return tools


def model(*calls: ToolCall) -> ScriptedModel:
    def respond(request: ModelRequest) -> Any:
        last = request.messages[-1]
        if isinstance(last, UserMessage) and any(isinstance(p, ToolResult) for p in last.parts):
            return " | ".join(p.content for p in last.parts if isinstance(p, ToolResult))
        return list(calls)
    return ScriptedModel(respond)


def host(store: Store, world: World, *calls: ToolCall) -> Host:
    return Host(model=model(*calls), tools=world.toolbox(), store=store,
                approver=DeferredApprover())


async def approve_all(store: Store, session_id: str, approved: bool = True) -> None:
    from anfitrion import _answers as answers

    for request in await store.list_approvals(session_id=session_id):
        done = await answers.answer(store, request.id, request.digest, approved=approved,
                                    approver="bob", via="test")
        assert done.answer is not None


async def test_a_turn_runs_allowed_calls_once_and_waits_for_pending_ones(store: Store) -> None:
    world = World()
    calls = (call("lookup", {"name": "ana"}, id="r1"), call("send", {"to": "ana"}, id="w1"),
             call("lookup", {"name": "rui"}, id="r2"))
    first = await host(store, world, *calls).run("go", principal="alice")
    assert first.status is RunStatus.SUSPENDED
    assert [r.tool_name for r in first.pending] == ["send"]
    assert world.lookups == 2
    assert world.sent == []
    saved = await store.load_session(first.session_id)
    assert saved is not None
    assert saved.status == "suspended"

    await approve_all(store, first.session_id)
    resumed = await host(store, world, *calls).resume(first.session_id)
    assert resumed.status is RunStatus.COMPLETED
    assert world.lookups == 2
    assert world.sent == ["ana"]
    results = resumed.transcript[2]
    assert isinstance(results, UserMessage)
    assert [p.call_id for p in results.parts if isinstance(p, ToolResult)] == ["r1", "w1", "r2"]
    assert resumed.output == "ana is in Lisboa | sent to ana | rui is in Lisboa"
    entry = await store.execution_state(first.session_id, "w1")
    assert entry is not None
    assert entry.state is LedgerState.DONE


async def test_a_denied_approval_reaches_the_model_as_an_error_and_nothing_runs(
        store: Store) -> None:
    world = World()
    first = await host(store, world, call("send", {"to": "ana"}, id="w1")).run("go")
    await approve_all(store, first.session_id, approved=False)
    resumed = await host(store, world, call("send", {"to": "ana"}, id="w1")).resume(
        first.session_id)
    assert world.sent == []
    assert "declined by a person (no reason given)" in resumed.output
    entry = await store.execution_state(first.session_id, "w1")
    assert entry is not None
    assert entry.state is LedgerState.DECIDED


async def test_resuming_before_the_answer_suspends_again(store: Store) -> None:
    world = World()
    first = await host(store, world, call("send", {"to": "ana"}, id="w1")).run("go")
    again = await host(store, world, call("send", {"to": "ana"}, id="w1")).resume(
        first.session_id)
    assert again.status is RunStatus.SUSPENDED
    assert [r.id for r in again.pending] == [r.id for r in first.pending]
    assert world.sent == []


async def test_two_workers_resuming_the_same_session_execute_once(
        store: Store, other_handle: Callable[[], Store]) -> None:
    world = World()
    calls = (call("send", {"to": "ana"}, id="w1"),)
    first = await host(store, world, *calls).run("go")
    await approve_all(store, first.session_id)
    outcomes: list[object] = []

    async def worker(handle: Store) -> None:
        try:
            outcomes.append((await host(handle, world, *calls).resume(first.session_id)).status)
        except (ConflictError, UserError) as exc:
            outcomes.append(type(exc))

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(worker, store)
            tg.start_soon(worker, other_handle())
    assert world.sent == ["ana"]
    assert outcomes.count(RunStatus.COMPLETED) == 1
    assert len(outcomes) == 2


async def test_an_approval_used_by_a_worker_that_died_is_not_lost(store: Store) -> None:
    """The worker consumed the approval (ledger: approved), then died before claiming."""
    world = World()
    calls = (call("send", {"to": "ana"}, id="w1"),)
    first = await host(store, world, *calls).run("go")
    await approve_all(store, first.session_id)
    [request] = first.pending
    assert await store.consume_approval(request.id, request.digest) is not None
    resumed = await host(store, world, *calls).resume(first.session_id)
    assert resumed.status is RunStatus.COMPLETED
    assert world.sent == ["ana"]


async def test_a_claim_left_unsettled_is_reported_unknown_and_never_rerun(store: Store) -> None:
    world = World()
    calls = (call("send", {"to": "ana"}, id="w1"),)
    first = await host(store, world, *calls).run("go")
    await approve_all(store, first.session_id)
    [request] = first.pending
    assert await store.consume_approval(request.id, request.digest) is not None
    await store.claim_execution(first.session_id, "w1", request.digest)  # then "crashed"
    resumed = await host(store, world, *calls).resume(first.session_id)
    assert world.sent == []
    assert "outcome unknown" in resumed.output
    assert (first.session_id, "w1") in await store.list_unknown_executions()


async def test_an_idempotent_tool_is_run_again_after_an_unknown_outcome(store: Store) -> None:
    world = World()
    calls = (call("set_flag", {"value": "on"}, id="w1"),)
    first = await host(store, world, *calls).run("go")
    await approve_all(store, first.session_id)
    [request] = first.pending
    assert await store.consume_approval(request.id, request.digest) is not None
    await store.claim_execution(first.session_id, "w1", request.digest)
    resumed = await host(store, world, *calls).resume(first.session_id)
    assert world.sent == ["flag=on"]
    assert resumed.output == "flag set"
    entry = await store.execution_state(first.session_id, "w1")
    assert entry is not None
    assert entry.state is LedgerState.DONE


async def test_the_audit_log_of_a_suspended_and_resumed_run_verifies(store: Store) -> None:
    from anfitrion._audit import verify_chain

    world = World()
    calls = (call("send", {"to": "ana"}, id="w1"),)
    first = await host(store, world, *calls).run("go")
    await approve_all(store, first.session_id)
    await host(store, world, *calls).resume(first.session_id)
    records = await store.audit_records(first.session_id)
    types = [r.type for r in records]
    for expected in ("run.started", "call.proposed", "call.validated", "call.decided",
                     "approval.requested", "run.resumed", "approval.answered",
                     "execution.claimed", "execution.settled", "result.returned", "run.ended"):
        assert expected in types
    assert verify_chain(await store.audit_records()).ok


async def test_a_session_left_running_cannot_take_a_new_prompt_but_can_be_forced_on(
        store: Store) -> None:
    from anfitrion.store import SessionState

    world = World()
    calls = (call("lookup", {"name": "ana"}, id="r1"),)
    done = await host(store, world, *calls).run("go", principal="alice")
    state = await store.load_session(done.session_id)
    assert state is not None
    await store.save_session(SessionState(state.session_id, state.principal_id, "running",
                                          state.data, state.version))
    with pytest.raises(UserError, match="running"):
        await host(store, world, *calls).run("again", principal="alice",
                                             session_id=done.session_id)
    with pytest.raises(UserError, match="not suspended"):
        await host(store, world, *calls).resume(done.session_id)
    again = (call("lookup", {"name": "ana"}, id="r2"),)  # a new turn has new call ids
    forced = await host(store, world, *again).resume(done.session_id, force=True)
    assert forced.status is RunStatus.COMPLETED
