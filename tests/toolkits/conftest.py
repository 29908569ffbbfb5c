"""Helpers: run one proposed call through a real host and see what the gate did."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pytest

from anfitrion import CallbackApprover, Host, Policy, Principal, Tool, Toolbox, ToolResult
from anfitrion._approvals import ApprovalRequest
from anfitrion.models._scripted import ScriptedModel, call
from anfitrion.store import MemoryStore, Store


@dataclass
class GateRun:
    """What happened to a sequence of proposed calls."""

    results: list[ToolResult]
    asked: list[ApprovalRequest] = field(default_factory=list)

    @property
    def result(self) -> ToolResult:
        return self.results[-1]


async def run_calls(tools: Toolbox | Iterable[Tool], calls: list[tuple[str, dict[str, Any]]], *,
                    approve: bool = True, policy: Policy | None = None,
                    principal: Principal | str = "alice", store: Store | None = None) -> GateRun:
    """Let a scripted model propose *calls* one after another; a person answers *approve*."""
    asked: list[ApprovalRequest] = []

    def person(request: ApprovalRequest) -> bool:
        asked.append(request)
        return approve

    model = ScriptedModel([*(call(name, args) for name, args in calls), "done"])
    host = Host(model=model, tools=tools if isinstance(tools, Toolbox) else Toolbox(tools),
                policy=policy, approver=CallbackApprover(person, name="tester"),
                store=store or MemoryStore(), max_turns=len(calls) + 1)
    run = await host.run("go", principal=principal)
    return GateRun(run.transcript.tool_results, asked)


@pytest.fixture
def gate_run() -> Any:
    return run_calls
