"""How many durable write transactions an allowed write costs on SQLite, and that the crash
guarantees hold in that order.

Each is a commit (an fsync with ``synchronous=full``). An allowed write used to cost six: the
ledger's ``proposed``, its ``decided``, the claim, the audit records before the effect, the
settlement, and the session's save. The gate now writes ``decided`` only for a call that stops
after the policy or is put to a person; an allowed call's first ledger write is its claim, and
the claim's transaction also stores the audit records before the effect, and
:meth:`GatedSession.submit` stores the write's settlement in the transaction of the session's
save that follows it at once (two in all).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from anfitrion import Effect, Host, Policy, Runtime, ScriptedModel, Toolbox
from anfitrion._audit import verify_chain
from anfitrion._conversation import ToolResult
from anfitrion._effects import effect_key
from anfitrion.exceptions import ConflictError
from anfitrion.policy import Decision
from anfitrion.store import (
    Claim,
    ClaimState,
    LedgerState,
    Store,
    claim_audit_role,
    settle_save_role,
)
from anfitrion.store._sqlite import SQLiteStore

pytestmark = pytest.mark.anyio


class CountingStore(SQLiteStore):
    """The real SQLite store, noting each write transaction it is asked for, in order."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.writes: list[str] = []
        self.reads: list[str] = []

    async def _write(self, fn):  # type: ignore[no-untyped-def]
        self.writes.append(getattr(fn, "__qualname__", repr(fn)))
        return await super()._write(fn)

    async def _run(self, fn, *, write=False, migrate=True):  # type: ignore[no-untyped-def]
        if not write:
            self.reads.append(getattr(fn, "__qualname__", repr(fn)))
        return await super()._run(fn, write=write, migrate=migrate)


def _tools(ran: list[str], store: CountingStore, where: dict[str, str]) -> Toolbox:
    tools = Toolbox()

    @tools.tool(effect=Effect.WRITE)
    async def send(to: str) -> str:
        """Send a note."""
        # what is durable when the effect runs: the claim, and every record before it
        entry = await store.execution_state(where["session"], "c1")
        assert entry is not None and entry.state is LedgerState.CLAIMED
        kinds = [r.type for r in await store.audit_records()]
        assert {"call.proposed", "call.decided", "execution.claimed"} <= set(kinds), kinds
        ran.append(to)
        return f"sent to {to}"

    return tools


async def test_an_allowed_write_costs_two_transactions(tmp_path: Path) -> None:
    store = CountingStore(tmp_path / "a.db")
    await store.migrate()
    ran: list[str] = []
    policy = Policy([lambda call, ctx: Decision.allow("test", "allow")])
    where: dict[str, str] = {}
    runtime = Runtime(tools=_tools(ran, store, where), policy=policy, store=store)
    session = await runtime.open("alice")
    where["session"] = session.id
    store.writes.clear()
    store.reads.clear()
    submitted = await session.submit("send", {"to": "ana"}, call_id="c1")
    assert submitted.status.value == "executed" and ran == ["ana"]
    # the claim with the records before the effect; the settlement with the save and the rest
    assert len(store.writes) == 2, store.writes
    # nothing read before the claim: the claim itself finds the effect free or held (the
    # reads below are the tool's own)
    assert store.reads == ["SQLiteStore.execution_state.<locals>.<lambda>",
                           "SQLiteStore.audit_records.<locals>.<lambda>"], store.reads
    entry = await store.execution_state(session.id, "c1")
    assert entry is not None and entry.state is LedgerState.DONE and entry.result is not None
    kinds = [r.type for r in await store.audit_records() if r.data.get("call_id") == "c1"]
    assert kinds[-2:] == ["execution.settled", "result.returned"], kinds
    assert verify_chain(await store.audit_records()).ok
    await store.close()


async def test_a_save_that_conflicts_still_settles_the_write(tmp_path: Path) -> None:
    """The session changed elsewhere meanwhile (another process took the conversation over):
    the save fails, but the write that ran is settled on its own — a re-send is answered with
    its stored result, never run again, as when the settlement was its own transaction."""
    store = CountingStore(tmp_path / "a.db")
    await store.migrate()
    ran: list[str] = []
    policy = Policy([lambda call, ctx: Decision.allow("test", "allow")])
    where: dict[str, str] = {}
    runtime = Runtime(tools=_tools(ran, store, where), policy=policy, store=store)
    session = await runtime.open("alice")
    where["session"] = session.id
    await session.save()
    stale = session.session.version
    other = await store.load_session(session.id)
    assert other is not None
    await store.save_session(other)  # another process saved it: this one's copy is stale
    assert session.session.version == stale
    with pytest.raises(ConflictError):
        await session.submit("send", {"to": "ana"}, call_id="c1")
    assert ran == ["ana"]
    entry = await store.execution_state(session.id, "c1")
    assert entry is not None and entry.state is LedgerState.DONE and entry.result is not None
    await store.close()


async def test_a_settlement_taken_over_writes_nothing(store: Store) -> None:
    """A settlement whose claim another run took over fails the whole transaction: neither
    the settlement, nor the save, nor the records are written."""
    together = settle_save_role(store)
    if together is None:
        pytest.skip("the store does not settle and save in one transaction")
    runtime = Runtime(tools=Toolbox(), store=store)
    session = await runtime.open("alice")
    await session.save()
    claim = await store.claim_execution(session.id, "c1", "d1")
    assert claim.token is not None
    state = session.session.to_state()
    before = len(await store.audit_records())
    result = ToolResult("c1", "send", "sent")
    with pytest.raises(ConflictError):
        await together.settle_and_save_session(
            [(session.id, "c1", result, "not-the-token")], state,
            [("run.note", session.id, 1.0, {"call_id": "c1"})])
    entry = await store.execution_state(session.id, "c1")
    assert entry is not None and entry.state is LedgerState.CLAIMED
    assert len(await store.audit_records()) == before
    loaded = await store.load_session(session.id)
    assert loaded is not None and loaded.version == state.version
    saved = await together.settle_and_save_session([(session.id, "c1", result, claim.token)],
                                                   state, [])
    assert saved.version == state.version + 1
    entry = await store.execution_state(session.id, "c1")
    assert entry is not None and entry.state is LedgerState.DONE


async def test_an_allowed_write_held_by_another_call_is_refused_by_its_claim(
        tmp_path: Path) -> None:
    """No check reads the effect before the claim of an allowed write: the claim finds the
    effect held, and the call is refused as the check refused it, with the same record."""
    store = CountingStore(tmp_path / "a.db")
    await store.migrate()
    ran: list[str] = []
    tools = Toolbox()

    @tools.tool(effect=Effect.WRITE, effect_key="send:{to}", effect_scope="principal")
    async def send(to: str) -> str:
        """Send a note."""
        ran.append(to)
        return f"sent to {to}"

    policy = Policy([lambda call, ctx: Decision.allow("test", "allow")])
    runtime = Runtime(tools=tools, policy=policy, store=store)
    first, second = await runtime.open("alice"), await runtime.open("alice")
    assert (await first.submit("send", {"to": "ana"}, call_id="c1")).status.value == "executed"
    store.reads.clear()
    again = await second.submit("send", {"to": "ana"}, call_id="c2")
    assert again.status.value == "executed" and again.result is not None
    assert again.result.content.startswith("[not run again: this exact effect"), again.result
    assert ran == ["ana"] and store.reads == [], store.reads
    claimed = [r.data for r in await store.audit_records()
               if r.type == "execution.claimed" and r.data.get("call_id") == "c2"]
    assert [(d["status"], d["detail"]) for d in claimed] == [
        ("duplicate", "effect held by call c1 (done)")], claimed
    await store.close()


async def test_a_denied_write_records_decided_once(tmp_path: Path) -> None:
    store = CountingStore(tmp_path / "a.db")
    await store.migrate()
    policy = Policy([lambda call, ctx: Decision.deny("no", "deny")])
    runtime = Runtime(tools=_tools([], store, {}), policy=policy, store=store)
    session = await runtime.open("alice")
    store.writes.clear()
    submitted = await session.submit("send", {"to": "ana"}, call_id="c1")
    assert submitted.status.value == "refused"
    entry = await store.execution_state(session.id, "c1")
    assert entry is not None and entry.state is LedgerState.DECIDED
    assert len(store.writes) == 2, store.writes  # decided, then the save with the records
    await store.close()


def _entries(call_id: str) -> list[tuple[str, str, float, dict[str, Any]]]:
    return [("call.decided", "s1", 1.0, {"call_id": call_id}),
            ("execution.claimed", "s1", 2.0, {"call_id": call_id})]


async def test_a_refused_claim_still_stores_its_records(store: Store) -> None:
    """The records say what happened: a claim refused (the effect held by another call)
    writes them in its transaction as a granted one does, and the chain stays whole."""
    both = claim_audit_role(store)
    if both is None:
        pytest.skip("the store does not claim and append in one transaction")
    key = effect_key(tool="send", arguments={"to": "ana"}, principal_id="alice",
                     session_id="s1", template="send:{to}", scope="principal")
    seen: list[ClaimState] = []

    def audit(call_id: str) -> Any:
        def entries(claim: Claim) -> list[tuple[str, str, float, dict[str, Any]]]:
            seen.append(claim.state)
            return _entries(call_id)
        return entries

    first = await both.claim_execution_and_audit("s1", "c1", "d1", audit=audit("c1"),
                                                 effect=key)
    second = await both.claim_execution_and_audit("s1", "c2", "d2", audit=audit("c2"),
                                                  effect=key)
    assert (first.state, second.state) == (ClaimState.CLAIMED, ClaimState.DUPLICATE)
    assert seen == [ClaimState.CLAIMED, ClaimState.DUPLICATE]
    records = await store.audit_records()
    assert [r.data["call_id"] for r in records] == ["c1", "c1", "c2", "c2"]
    assert verify_chain(records).ok


async def test_a_fenced_claim_stores_nothing_and_the_gate_keeps_its_records(
        store: Store) -> None:
    """A claim refused by the lease's fence writes neither the claim nor the records; the
    gate hands them back to the recorder, so they go with the run's next write."""
    both = claim_audit_role(store)
    if both is None:
        pytest.skip("the store does not claim and append in one transaction")
    host = Host(model=ScriptedModel(["hi"]), store=store)
    await host.run("hi", session_id="s-fenced")
    assert await store.acquire_lease("s-fenced", "other/1:1:x", time.time() + 60,
                                     now=time.time())
    before = len(await store.audit_records())
    with pytest.raises(ConflictError):
        await both.claim_execution_and_audit("s-fenced", "c1", "d", audit=lambda c: _entries(
            "c1"), owner="mine/1:1:y")
    assert await store.execution_state("s-fenced", "c1") is None
    assert len(await store.audit_records()) == before


class _FencedOnce(SQLiteStore):
    """The real SQLite store, whose first claim finds the session taken over."""

    fenced = False

    async def claim_execution_and_audit(self, *args: Any, **kwargs: Any) -> Claim:
        if not self.fenced:
            self.fenced = True
            raise ConflictError("session leased by another run")
        return await super().claim_execution_and_audit(*args, **kwargs)


async def test_the_records_of_a_refused_claim_go_with_the_next_write(tmp_path: Path) -> None:
    store = _FencedOnce(tmp_path / "a.db")
    await store.migrate()
    ran: list[str] = []
    policy = Policy([lambda call, ctx: Decision.allow("test", "allow")])
    runtime = Runtime(tools=_tools(ran, store, {}), policy=policy, store=store)
    session = await runtime.open("alice")
    with pytest.raises(ConflictError):
        await session.submit("send", {"to": "ana"}, call_id="c1")
    assert ran == []
    await runtime.flush()
    kinds = [r.type for r in await store.audit_records() if r.data.get("call_id") == "c1"]
    assert kinds == ["call.proposed", "call.validated", "call.decided"], kinds
    assert verify_chain(await store.audit_records()).ok
    await store.close()
