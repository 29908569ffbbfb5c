"""The client toolset polls an upstream's task (the Tasks extension, 2026-07-28) to its end:
behind an anfitrion gateway whose call waits for a person, the toolset gets a task, polls
``tasks/get``, and takes the executed result once the person approved — exactly once. A task
still running when the call's time is up is cancelled, so the upstream never runs later a call
nobody waits for.

Real components: the client toolset, ``anfitrion gateway``'s streamable HTTP (its own store and
approvals) in front of a real server process (``tests/parity/parity_server.py``, whose
``send_mail`` writes to a file), the person answering in the gateway's store as the CLI does.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")
from gateway_helpers import approve_all, serving_http, url_of
from mcp_helpers import through_gate

from anfitrion import _answers as answers
from anfitrion._principal import Principal
from anfitrion._tools import OfferContext
from anfitrion.mcp._config import ServerConfig
from anfitrion.mcp._gateway import Gateway
from anfitrion.mcp._sandbox import PathGrant, SandboxProfile
from anfitrion.mcp._toolset import McpServers, McpToolset
from anfitrion.store import MemoryStore, Store

pytestmark = [pytest.mark.anyio, pytest.mark.mcp_servers]

SERVER = str(Path(__file__).parents[1] / "parity" / "parity_server.py")
TOKEN = "tasks-token-0123456789abcdef"


@asynccontextmanager
async def gateway_over(store: Store, effects: Path | list[ServerConfig]
                       ) -> AsyncIterator[str]:
    """The gateway (writes wait for a person) over HTTP, in front of the parity server
    writing to *effects* (or of the given servers); yields its MCP URL."""
    upstreams = effects if isinstance(effects, list) else [ServerConfig(
        id="p", command=sys.executable, args=(SERVER,),
        env={"PARITY_EFFECTS": str(effects)}, trusted=True,
        sandbox=SandboxProfile(paths=(PathGrant(str(effects.parent), "rw"),)))]
    await approve_all(upstreams, store)
    async with McpServers(upstreams, store) as servers:
        gateway = Gateway(servers, store=store, approval_wait=0.2, poll_interval=0.02)
        async with serving_http(gateway, TOKEN) as sock:
            yield url_of(sock)


async def pending(store: Store) -> str:
    with anyio.fail_after(30):
        while not (found := await store.list_approvals(pending_only=True)):
            await anyio.sleep(0.05)
    (request,) = found
    return request.id


@pytest.fixture
def effects(tmp_path: Path) -> Path:
    path = tmp_path / "effects" / "effects.log"
    path.parent.mkdir()
    path.touch()
    return path


async def send_mail(url: str, mine: MemoryStore, timeout: float = 30) -> Any:
    config = ServerConfig(id="gw", url=url, headers={"Authorization": f"Bearer {TOKEN}"},
                          timeout=timeout)
    await approve_all([config], mine)
    async with McpToolset(config, mine) as tools:
        offered = await tools.list_tools(OfferContext(Principal("tester"), "session-1"))
        return await through_gate(offered, "gw.p.send_mail",
                                  {"to": "bob@example.com", "body": "hi"}, mine)


@asynccontextmanager
async def a_mail_waiting(effects: Path) -> AsyncIterator[tuple[MemoryStore, str, list[Any]]]:
    """The toolset's ``gw.p.send_mail`` in flight through a gateway, waiting for a person:
    the gateway's store, the approval request's id, and (once the block ends) the outcome."""
    theirs, mine = MemoryStore(), MemoryStore()
    outcome: list[Any] = []
    async with gateway_over(theirs, effects) as url, anyio.create_task_group() as tg:
        async def call() -> None:
            outcome.append(await send_mail(url, mine))

        tg.start_soon(call)
        yield theirs, await pending(theirs), outcome


async def test_the_task_completes_with_the_executed_result_after_the_approval(
        effects: Path) -> None:
    with anyio.fail_after(120):
        async with a_mail_waiting(effects) as (theirs, request_id, outcome):
            await anyio.sleep(0.5)  # the toolset polls meanwhile: nothing has run
            assert effects.read_text() == ""
            answered = await answers.answer(theirs, request_id, None, approved=True,
                                            approver="carol", via="cli")
            assert answered.recorded
    (result,) = outcome
    assert not result.result.is_error, result.result.content
    assert "sent to bob@example.com" in str(result.result.content)
    assert effects.read_text().splitlines() == ["mail to bob@example.com"]  # exactly once


async def test_a_declined_task_fails_the_call_with_the_persons_reason(effects: Path) -> None:
    with anyio.fail_after(120):
        async with a_mail_waiting(effects) as (theirs, request_id, outcome):
            await answers.answer(theirs, request_id, None, approved=False,
                                 approver="carol", note="not today", via="cli")
    (result,) = outcome
    assert result.result.is_error and "not today" in str(result.result.content)
    assert effects.read_text() == ""


async def test_a_task_unfinished_when_the_call_times_out_is_cancelled(effects: Path) -> None:
    theirs, mine = MemoryStore(), MemoryStore()
    with anyio.fail_after(120):
        async with gateway_over(theirs, effects) as url:
            result = await send_mail(url, mine, timeout=3)
            (request,) = await theirs.list_approvals(pending_only=False)
            late = await answers.answer(theirs, request.id, None, approved=True,
                                        approver="carol", via="cli")
            await anyio.sleep(0.5)
    assert result.result.is_error and "no answer within 3 seconds" in str(result.result.content)
    assert not late.recorded  # withdrawn by the cancel: approving it now runs nothing
    assert effects.read_text() == ""
