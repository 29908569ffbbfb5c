"""An effect whose handler still runs under a live lease cannot be resolved: a "failed" written
then would let the next proposal run the effect a second time. Every door (the library's
`resolve`, the CLI, the JSON API and the inbox all go through `Store.resolve_effect`) on every
backend; once the run is over (or its lease lapsed), a person resolves as before."""

from __future__ import annotations

import time
from typing import Any

import pytest

from anfitrion import CallbackApprover, Effect, Host, Policy, Tool
from anfitrion._resolutions import resolve
from anfitrion.exceptions import ConflictError
from anfitrion.models._scripted import ScriptedModel, call
from anfitrion.policy import Decision
from anfitrion.store import LedgerState, SessionState, Store

pytestmark = pytest.mark.anyio


def _allow() -> Policy:
    return Policy([lambda c, ctx: Decision.allow("test", "allow")])


@pytest.mark.parametrize("done", [False, True], ids=["failed", "done"])
async def test_resolving_an_effect_while_its_handler_runs_is_refused_and_it_runs_once(
        store: Store, done: bool) -> None:
    ran: list[dict[str, Any]] = []
    refused: list[str] = []

    async def pay(arguments: dict[str, Any]) -> str:
        # the attacker (or a hasty person) resolves the effect while the handler acts
        [entry] = await store.list_effects(unsettled_only=True)
        assert entry.state is LedgerState.CLAIMED
        for outcome in (done, not done):
            try:
                await resolve(store, entry.key, done=outcome, by="mallory",
                              note="it failed, run it again", via="api")
            except ConflictError as exc:
                refused.append(str(exc))
        ran.append(arguments)
        return "paid"

    tool = Tool.from_schema("pay", {"type": "object", "properties": {"to": {"type": "string"}}},
                            pay, effect=Effect.WRITE, effect_scope="principal")
    model = ScriptedModel([call("pay", {"to": "ana"}), call("pay", {"to": "ana"}), "done"])
    host = Host(model=model, tools=[tool], policy=_allow(), store=store,
                approver=CallbackApprover(lambda r: True, name="t"), max_turns=4)
    run = await host.run("go", principal="alice")
    assert ran == [{"to": "ana"}]
    assert len(refused) == 2 and all("still running" in r for r in refused)
    [entry] = await store.list_effects()
    assert entry.state is LedgerState.DONE and entry.resolved_by is None
    assert run.transcript.tool_results[1].content.startswith("[not run again")


async def test_a_claim_whose_lease_lapsed_or_was_never_taken_can_be_resolved(
        store: Store) -> None:
    from anfitrion._effects import effect_key

    for i, lease in enumerate([None, time.time() - 5.0]):
        session = f"s{i}"
        await store.save_session(SessionState(session, "alice", "running", {}, 0,
                                               lease_owner="h:1:x" if lease else None,
                                               lease_expires=lease))
        key = effect_key(tool="pay", arguments={"n": i}, principal_id="alice",
                         session_id=session)
        await store.claim_execution(session, "c1", "", effect=key)  # then the worker died
        entry = await resolve(store, key.key, done=False, by="bob", note="checked the bank")
        assert entry is not None and entry.state is LedgerState.FAILED


async def test_a_claim_under_a_live_lease_of_another_process_is_refused(store: Store) -> None:
    from anfitrion._effects import effect_key

    await store.save_session(SessionState("s1", "alice", "running", {}, 0,
                                           lease_owner="other-host:99:tok",
                                           lease_expires=time.time() + 600))
    key = effect_key(tool="pay", arguments={"n": 1}, principal_id="alice", session_id="s1")
    await store.claim_execution("s1", "c1", "", effect=key)
    with pytest.raises(ConflictError, match="still running"):
        await store.resolve_effect(key.key, done=True, by="bob")
    entry = await store.effect_state(key.key)
    assert entry is not None and entry.state is LedgerState.CLAIMED and entry.resolved_by is None
