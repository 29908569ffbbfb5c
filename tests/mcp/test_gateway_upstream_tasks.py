"""Upstream tools that run only as tasks (``execution.taskSupport: "required"``, the Tasks
extension of 2026-07-28) are forwarded through the gate: the gate decides, asks and audits as
for any call, the client toolset runs the call as the upstream's task and polls it to its end,
and the gateway's client gets the result. Over a connection that cannot take tasks (the
handshake revisions) such a tool stays withheld.

Hostile upstream: a task that never ends is cancelled when the call's time is up; a
``tasks/get`` answer of another shape, or too large to take, fails the call (the task
cancelled) instead of being polled for ever or read.

Real components: ``tests/mcp/servers/tasking.py`` (a stdio process on the SDK's low-level
server, sandboxed, writing what it was asked to a file), the gateway, the official client.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import mcp.types as mt
import pytest

pytest.importorskip("mcp")
from gateway_helpers import approve_all, gateway_client, writes_allowed
from mcp_helpers import through_gate
from test_toolset_upstream_tasks import TOKEN, gateway_over

from anfitrion import _answers as answers
from anfitrion._principal import Principal
from anfitrion._tools import Effect, OfferContext, Tool
from anfitrion.mcp._config import ServerConfig
from anfitrion.mcp._gateway_content import listed_tool
from anfitrion.mcp._sandbox import PathGrant, SandboxProfile
from anfitrion.mcp._toolset import McpToolset
from anfitrion.policy import Policy
from anfitrion.store import MemoryStore, Store

pytestmark = [pytest.mark.anyio, pytest.mark.mcp_servers]

SERVER = str(Path(__file__).parent / "servers" / "tasking.py")
TOOLS = {"task.send", "task.fail", "task.forever", "task.malformed", "task.huge"}


@pytest.fixture
def effects(tmp_path: Path) -> Path:
    path = tmp_path / "effects" / "effects.log"
    path.parent.mkdir()
    path.touch()
    return path


def tasking(effects: Path, **options: Any) -> ServerConfig:
    options.setdefault("timeout", 20)
    return ServerConfig(id="task", command=sys.executable, args=(SERVER, str(effects)),
                        sandbox=SandboxProfile(paths=(PathGrant(str(effects.parent), "rw"),)),
                        **options)


def text(result: mt.CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, mt.TextContent))


async def call(effects: Path, store: Store, name: str, *, policy: Policy | None = None,
               **options: Any) -> mt.CallToolResult:
    configs = [tasking(effects, **options)]
    await approve_all(configs, store)
    async with gateway_client(configs, store, gateway_options={
            "policy": policy or writes_allowed()}) as (_, client):
        return await client.call_tool(name, {"to": "bob@example.com"})


async def test_a_task_only_tool_is_offered_and_runs_once_as_the_upstreams_task(
        effects: Path) -> None:
    store = MemoryStore()
    configs = [tasking(effects)]
    await approve_all(configs, store)
    with anyio.fail_after(60):
        async with gateway_client(configs, store) as (_, client):
            listed = {t.name: t for t in (await client.list_tools()).tools}
            assert set(listed) >= TOOLS
            # the gateway runs the upstream's task itself: its client need not speak tasks
            execution = listed["task.send"].execution
            assert execution is None or execution.task_support != "required"
            result = await client.call_tool("task.send", {"to": "bob@example.com"})
    assert not result.is_error, result.content
    assert "sent bob@example.com" in text(result)
    assert effects.read_text().splitlines() == ["called send t1 bob@example.com"]
    kinds = [r.type for r in await store.audit_records()]
    assert "call.decided" in kinds and "result.returned" in kinds  # audited as any call


async def test_a_write_needing_approval_waits_before_anything_is_sent_upstream(
        effects: Path) -> None:
    store = MemoryStore()
    configs = [tasking(effects)]
    await approve_all(configs, store)
    outcome: list[mt.CallToolResult] = []
    with anyio.fail_after(60):
        async with gateway_client(configs, store, gateway_options={
                "policy": None, "approval_wait": 30}) as (_, client), \
                anyio.create_task_group() as tg:
            async def run() -> None:
                outcome.append(await client.call_tool("task.send", {"to": "bob@example.com"}))

            tg.start_soon(run)
            while not (waiting := await store.list_approvals(pending_only=True)):
                await anyio.sleep(0.05)
            await anyio.sleep(0.5)
            assert effects.read_text() == ""  # nothing sent upstream before the person
            (request,) = waiting
            assert request.tool_name == "task.send"
            assert request.arguments == {"to": "bob@example.com"}
            await answers.answer(store, request.id, None, approved=True, approver="carol",
                                 via="cli")
    (result,) = outcome
    assert not result.is_error, result.content
    assert "sent bob@example.com" in text(result)
    assert effects.read_text().splitlines() == ["called send t1 bob@example.com"]


async def test_a_task_that_fails_upstream_fails_the_call(effects: Path) -> None:
    with anyio.fail_after(60):
        result = await call(effects, MemoryStore(), "task.fail")
    assert result.is_error
    assert "failed" in text(result) and "disk full" in text(result)


async def test_over_a_legacy_connection_a_task_only_tool_stays_withheld(
        effects: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryStore()
    configs = [tasking(effects, protocol="legacy")]
    await approve_all(configs, store)
    with anyio.fail_after(60):
        async with gateway_client(configs, store) as (_, client):
            names = {t.name for t in (await client.list_tools()).tools}
            refused = await client.call_tool("task.send", {"to": "bob@example.com"})
    assert not names & TOOLS
    assert refused.is_error
    assert effects.read_text() == ""
    assert any("runs only as a task" in r.getMessage() and "cannot take tasks" in
               r.getMessage() for r in caplog.records)


async def test_the_library_offers_a_task_only_tool_only_when_the_connection_takes_tasks(
        effects: Path) -> None:
    context = OfferContext(Principal("tester"), "session-1")
    with anyio.fail_after(60):
        for protocol, offered in (("auto", True), ("legacy", False)):
            store = MemoryStore()
            config = tasking(effects, protocol=protocol)
            await approve_all([config], store)
            async with McpToolset(config, store) as tools:
                names = {t.name for t in await tools.list_tools(context)}
                statuses = {s.name: s for s in tools.statuses}
            assert ("task.send" in names) is offered, protocol
            if not offered:
                assert statuses["task.send"].state == "invalid"
                assert "cannot take tasks" in statuses["task.send"].problem


# -- hostile upstream ------------------------------------------------------------------------

async def test_a_task_that_never_ends_is_cancelled_when_the_call_times_out(
        effects: Path) -> None:
    with anyio.fail_after(60):
        result = await call(effects, MemoryStore(), "task.forever", timeout=2)
    assert result.is_error and "no answer within 2 seconds" in text(result)
    with anyio.fail_after(10):
        while "cancelled t1" not in effects.read_text():
            await anyio.sleep(0.05)
    assert effects.read_text().splitlines() == ["called forever t1 bob@example.com",
                                                "cancelled t1"]


async def test_a_tasks_get_answer_of_another_shape_fails_the_call(effects: Path) -> None:
    with anyio.fail_after(60):
        result = await call(effects, MemoryStore(), "task.malformed")
    assert result.is_error and "did not have the shape of a task" in text(result)
    assert "cancelled t1" in effects.read_text()


async def test_a_huge_tasks_get_answer_is_not_read_and_fails_the_call(effects: Path) -> None:
    with anyio.fail_after(60):
        result = await call(effects, MemoryStore(), "task.huge")
    assert result.is_error and "over the size limit" in text(result)
    assert "x" * 1000 not in text(result)
    assert "cancelled t1" in effects.read_text()


async def test_a_tasks_client_gets_the_gateways_task_and_then_the_upstreams_result(
        effects: Path) -> None:
    """A client declaring Tasks whose call waits for a person gets the gateway's own task
    (the in-band approval); once approved, its ``tasks/get`` runs the call, which the toolset
    runs as the upstream's task to its end: one upstream task, one result."""
    theirs, mine = MemoryStore(), MemoryStore()
    outcome: list[Any] = []
    upstream = tasking(effects)
    with anyio.fail_after(120):
        async with gateway_over(theirs, [upstream]) as url, anyio.create_task_group() as tg:
            config = ServerConfig(id="gw", url=url,
                                  headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)
            await approve_all([config], mine)

            async def run() -> None:
                async with McpToolset(config, mine) as tools:
                    offered = await tools.list_tools(OfferContext(Principal("t"), "s-1"))
                    outcome.append(await through_gate(offered, "gw.task.send",
                                                      {"to": "bob@example.com"}, mine))

            tg.start_soon(run)
            with anyio.fail_after(30):
                while not (waiting := await theirs.list_approvals(pending_only=True)):
                    await anyio.sleep(0.05)
            await anyio.sleep(0.5)
            assert effects.read_text() == ""
            await answers.answer(theirs, waiting[0].id, None, approved=True,
                                 approver="carol", via="cli")
    (result,) = outcome
    assert not result.result.is_error, result.result.content
    assert "sent bob@example.com" in str(result.result.content)
    assert effects.read_text().splitlines() == ["called send t1 bob@example.com"]


def test_the_gateway_lists_a_task_only_tool_as_optional_it_runs_the_task_itself() -> None:
    """Should a revision carry ``execution`` with a task-only tool the gateway offers, its
    client is not told it must speak tasks: the gateway runs the upstream's task."""
    upstream = mt.Tool(name="send", input_schema={"type": "object"},
                       execution=mt.ToolExecution(taskSupport="required"))
    async def handler(arguments: dict[str, Any], context: Any) -> str:
        return ""

    gated = Tool(name="task.send", description="send", input_schema={"type": "object"},
                 handler=handler, effect=Effect.WRITE)
    listed = listed_tool("task.send", gated, upstream, trusted=False)
    assert listed.execution is not None and listed.execution.task_support == "optional"
    other = upstream.model_copy(update={"execution": mt.ToolExecution(taskSupport="forbidden")})
    kept = listed_tool("task.send", gated, other, trusted=False)
    assert kept.execution is not None and kept.execution.task_support == "forbidden"
