"""How many durable write transactions an allowed write costs on SQLite, and that the crash
guarantees hold in that order.

Each is a commit (an fsync with ``synchronous=full``). An allowed write used to cost six: the
ledger's ``proposed``, its ``decided``, the claim, the audit records before the effect, the
settlement, and the session's save. The gate now writes ``decided`` only for a call that stops
after the policy or is put to a person; an allowed call's first ledger write is its claim.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from anfitrion import Effect, Policy, Runtime, Toolbox
from anfitrion.policy import Decision
from anfitrion.store import LedgerState
from anfitrion.store._sqlite import SQLiteStore

pytestmark = pytest.mark.anyio


class CountingStore(SQLiteStore):
    """The real SQLite store, noting each write transaction it is asked for, in order."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.writes: list[str] = []

    async def _write(self, fn):  # type: ignore[no-untyped-def]
        self.writes.append(getattr(fn, "__qualname__", repr(fn)))
        return await super()._write(fn)


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


async def test_an_allowed_write_costs_four_transactions(tmp_path: Path) -> None:
    store = CountingStore(tmp_path / "a.db")
    await store.migrate()
    ran: list[str] = []
    policy = Policy([lambda call, ctx: Decision.allow("test", "allow")])
    where: dict[str, str] = {}
    runtime = Runtime(tools=_tools(ran, store, where), policy=policy, store=store)
    session = await runtime.open("alice")
    where["session"] = session.id
    store.writes.clear()
    submitted = await session.submit("send", {"to": "ana"}, call_id="c1")
    assert submitted.status.value == "executed" and ran == ["ana"]
    # the claim, the records before the effect, the settlement, the save with the rest
    assert len(store.writes) == 4, store.writes
    entry = await store.execution_state(session.id, "c1")
    assert entry is not None and entry.state is LedgerState.DONE
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
