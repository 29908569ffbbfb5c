"""``anfitrion gateway`` over stdio: the official MCP client SDK spawns it as a desktop
assistant would. The approval tests share the gateway's SQLite store with the test."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

pytest.importorskip("mcp")
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp_helpers import MALICIOUS

from anfitrion import _answers as answers
from anfitrion._approvals import ApprovalRequest
from anfitrion.mcp._config import load_config
from anfitrion.mcp._pinning import PinBook
from anfitrion.mcp._toolset import McpServers
from anfitrion.store import Store, open_store

pytestmark = [pytest.mark.anyio, pytest.mark.mcp_servers]

ANFITRION = str(Path(sys.executable).parent / "anfitrion")
HAS_SQLITE = importlib.util.find_spec("anfitrion.store._sqlite") is not None
needs_sqlite = pytest.mark.skipif(not HAS_SQLITE, reason="needs the SQLite store to share "
                                  "approvals between the test and the gateway process")


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({
        "mcpServers": {
            "time": {"command": sys.executable, "trusted": True,
                     "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]},
            "mal": {"command": sys.executable, "args": [MALICIOUS, "--trash", str(tmp_path)]}},
        "gateway": {"principal": "desktop"}}))
    return path


@asynccontextmanager
async def stdio_gateway(config: Path, store_url: str,
                        wait: float = 60) -> AsyncIterator[ClientSession]:
    env = {k: os.environ[k] for k in ("PYTHONPATH", "ANFITRION_HOME") if k in os.environ}
    params = StdioServerParameters(command=ANFITRION, env=env, args=[
        "gateway", "--config", str(config), "--store", store_url,
        "--approval-wait", str(wait)])
    async with stdio_client(params, errlog=sys.__stderr__) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        yield session


async def test_a_fresh_gateway_offers_nothing_before_an_operator_reviews(
        config_file: Path) -> None:
    with anyio.fail_after(60):
        async with stdio_gateway(config_file, "memory://") as client:
            assert (await client.list_tools()).tools == []
            refused = await client.call_tool("time.get_current_time", {"timezone": "UTC"})
    assert refused.is_error
    assert "unknown tool" in refused.content[0].text


async def wait_for_request(store: Store, tool: str) -> ApprovalRequest:
    """Look at the shared store until the gateway's request appears (another process)."""
    while True:
        found = [r for r in await store.list_approvals() if r.tool_name == tool]
        if found:
            return found[0]
        await anyio.sleep(0.05)


@needs_sqlite
async def test_over_stdio_reads_pass_and_writes_wait_for_a_person_via_the_store(
        config_file: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'anfitrion.db'}"
    store = open_store(url)
    try:
        async with McpServers(load_config(config_file), store) as servers:
            await servers.refresh()
        for name in ("time.get_current_time", "mal.rug", "mal.delete_file"):
            await PinBook(store).approve(name, by="operator")
        (tmp_path / "precious.txt").write_text("keep")
        with anyio.fail_after(90):
            async with stdio_gateway(config_file, url) as client:
                names = sorted(t.name for t in (await client.list_tools()).tools)
                assert names == ["mal.delete_file", "mal.rug", "time.get_current_time"]
                read = await client.call_tool("time.get_current_time", {"timezone": "UTC"})
                assert not read.is_error

                async with anyio.create_task_group() as tg:
                    async def approve_it() -> None:
                        request = await wait_for_request(store, "mal.rug")
                        assert request.principal_id == "desktop"
                        done = await answers.answer(store, request.id, request.digest,
                                                    approved=True, approver="alice", via="cli")
                        assert done.answer is not None
                    tg.start_soon(approve_it)
                    written = await client.call_tool("mal.rug", {"a": 20, "b": 22})
                assert not written.is_error, written.content
                assert written.content[0].text == "42"

                async with anyio.create_task_group() as tg:
                    async def deny_it() -> None:
                        request = await wait_for_request(store, "mal.delete_file")
                        done = await answers.answer(store, request.id, request.digest,
                                                    approved=False, approver="alice",
                                                    note="not today", via="cli")
                        assert done.answer is not None
                    tg.start_soon(deny_it)
                    denied = await client.call_tool("mal.delete_file", {"name": "precious.txt"})
                assert denied.is_error
                assert denied.content[0].text == "declined by a person: not today"
                assert "not today" in denied.content[0].text
        assert (tmp_path / "precious.txt").exists()
        kinds = {r.type for r in await store.audit_records()}
        assert {"approval.requested", "approval.answered", "execution.settled"} <= kinds
    finally:
        await store.close()


def _gateway_pid(config: Path) -> int:
    """The gateway process the stdio client spawned (its command line names *config*)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"gateway" in argv and str(config).encode() in argv:
            return int(entry.name)
    raise AssertionError("the gateway process is not running")


@needs_sqlite
@pytest.mark.skipif(sys.platform != "linux", reason="finds the gateway's pid in /proc")
async def test_sigterm_answers_a_call_waiting_for_a_person_before_the_stdio_gateway_ends(
        config_file: Path, tmp_path: Path) -> None:
    """A stdio gateway stopped by SIGTERM drains: the call waiting for a person is answered
    (nothing run) instead of its pipe being cut, and its request is withdrawn with the
    session, as the answer says."""
    url = f"sqlite:///{tmp_path / 'anfitrion.db'}"
    store = open_store(url)
    waiting: list[ApprovalRequest] = []

    async def stop_it() -> None:
        waiting.append(await wait_for_request(store, "mal.rug"))
        os.kill(_gateway_pid(config_file), signal.SIGTERM)

    try:
        async with McpServers(load_config(config_file), store) as servers:
            await servers.refresh()
        await PinBook(store).approve("mal.rug", by="operator")
        with anyio.fail_after(60):
            async with stdio_gateway(config_file, url) as client, \
                    anyio.create_task_group() as tg:
                tg.start_soon(stop_it)
                answered = await client.call_tool("mal.rug", {"a": 20, "b": 22})
            while (found := await store.get_approval(waiting[0].id)) is not None \
                    and found.answer is None:
                await anyio.sleep(0.05)
        assert answered.is_error
        assert "shutting down" in answered.content[0].text
        assert "withdrawn" in answered.content[0].text
        assert found is not None and found.answer is not None and found.answer.withdrawn
        assert "execution.settled" not in {r.type for r in await store.audit_records()}
    finally:
        await store.close()
