"""A run's lease is renewed while the run lives, however long one of its calls takes."""

from __future__ import annotations

import anyio
import pytest

from anfitrion import Effect, Host, Reply, ScriptedModel, StopReason, Toolbox, ToolCall
from anfitrion.store import MemoryStore

pytestmark = pytest.mark.anyio


class RenewalsSeen(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.renewed = anyio.Event()

    async def renew_lease(self, session_id: str, owner: str, until: float) -> bool:
        ok = await super().renew_lease(session_id, owner, until)
        self.renewed.set()
        return ok


async def test_a_call_outliving_a_third_of_the_lease_sees_the_lease_renewed() -> None:
    store = RenewalsSeen()
    tools = Toolbox()

    @tools.tool(effect=Effect.READ, provenance="trusted")
    async def slow_send(to: str) -> str:
        """Look up, slowly: it returns once the run's lease was renewed."""
        with anyio.fail_after(10):
            await store.renewed.wait()
        return "sent"

    script = [Reply((ToolCall("c1", "slow_send", '{"to": "bob"}'),), StopReason.TOOL_USE), "done"]
    host = Host(model=ScriptedModel(script), tools=tools, store=store, lease_seconds=0.15)
    run = await host.run("send bob a note", principal="alice")
    assert run.status.value == "completed", run.error
    state = await store.load_session(run.session_id)
    assert state is not None and state.lease_owner is None  # released at the end
