"""Helpers for the attack tests: a hostile scripted model driving a real host."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from anfitrion import CallbackApprover, Host, Policy, Principal, Tool, Toolbox, ToolResult
from anfitrion._approvals import ApprovalRequest, Approver
from anfitrion._conversation import ToolCall
from anfitrion._host import RunResult
from anfitrion.models._scripted import ScriptedModel
from anfitrion.store import MemoryStore, Store


@dataclass
class Attack:
    """What a hostile model achieved: the run, its results and what a person was asked."""

    run: RunResult
    store: Store
    asked: list[ApprovalRequest] = field(default_factory=list)

    @property
    def results(self) -> list[ToolResult]:
        return self.run.transcript.tool_results

    @property
    def result(self) -> ToolResult:
        return self.results[-1]


async def attack(tools: Toolbox | Iterable[Tool], steps: Sequence[ToolCall | Sequence[ToolCall]],
                 *, approve: bool = True, approver: Approver | None = None,
                 policy: Policy | None = None, principal: Principal | str = "alice",
                 store: Store | None = None, **host_options: Any) -> Attack:
    """Let a scripted model send *steps* (one reply each), then "done"; a person answers
    *approve* to every approval request."""
    asked: list[ApprovalRequest] = []

    def person(request: ApprovalRequest) -> bool:
        asked.append(request)
        return approve

    store = store or MemoryStore()
    model = ScriptedModel([*steps, "done"])
    host = Host(model=model, tools=tools if isinstance(tools, Toolbox) else Toolbox(tools),
                policy=policy, approver=approver or CallbackApprover(person, name="tester"),
                store=store, max_turns=len(steps) + 1, **host_options)
    run = await host.run("go", principal=principal)
    return Attack(run, store, asked)


@pytest.fixture
def hostile() -> Any:
    return attack
