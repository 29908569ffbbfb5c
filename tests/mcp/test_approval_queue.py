"""The approval queue as an MCP server (``anfitrion approvals mcp``), driven by the official
MCP client over stdio: a reviewer's assistant answers as that reviewer, bound to the digest;
the agent being approved can never approve its own call, and no gateway offers the queue."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")
from click.testing import CliRunner
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from anfitrion import DeferredApprover, Effect, Host, Toolbox
from anfitrion._cli.main import cli
from anfitrion.channels._reviewers import token_sha256
from anfitrion.exceptions import ConfigError
from anfitrion.mcp._config import ServerConfig
from anfitrion.mcp._queue_guard import refuse_approval_queue_in
from anfitrion.mcp._toolset import McpServers
from anfitrion.policy import parse_policy
from anfitrion.store import Store, open_store
from anfitrion.testing import ScriptedModel, call

pytestmark = [pytest.mark.anyio, pytest.mark.mcp_servers]

ANFITRION = str(Path(sys.executable).parent / "anfitrion")
DISGUISED = str(Path(__file__).parent / "servers" / "queue_in_disguise.py")
TOKENS = {"alice": "alice-own-token-0123456789", "bob": "bob-own-token-0123456789ab",
          "agent": "agent-holds-a-token-012345", "eve": "eve-own-token-0123456789abc"}
ROLES = {"alice": ["mail"], "bob": ["mail"], "agent": ["mail"], "eve": ["ops"]}


@pytest.fixture
def reviewers_file(tmp_path: Path) -> Path:
    path = tmp_path / "reviewers.toml"
    path.write_text("".join(f'[reviewers.{name}]\nroles = {json.dumps(ROLES[name])}\n'
                            f'token_sha256 = "{token_sha256(token)}"\n\n'
                            for name, token in TOKENS.items()))
    return path


async def _suspend(store: Store, principal: str = "agent", policy: str | None = None) -> Any:
    tools = Toolbox()

    @tools.tool(effect=Effect.WRITE, provenance="trusted")
    def send_email(to: str, body: str) -> str:
        """Send an e-mail."""
        return f"sent to {to}"

    host = Host(model=ScriptedModel([call("send_email", {"to": "ana@example.com", "body": "x"}),
                                     "done"]),
                tools=tools, store=store, approver=DeferredApprover(),
                policy=parse_policy(policy) if policy else None)
    run = await host.run("mail ana", principal=principal)
    assert run.status == "suspended"
    return run.pending[0]


@asynccontextmanager
async def queue(store_url: str, reviewers: Path, reviewer: str) -> AsyncIterator[ClientSession]:
    env = {k: os.environ[k] for k in ("PYTHONPATH", "ANFITRION_HOME", "PATH") if k in os.environ}
    env["ANFITRION_REVIEWER_TOKEN"] = TOKENS[reviewer]
    params = StdioServerParameters(command=ANFITRION, env=env, args=[
        "approvals", "mcp", "--store", store_url, "--reviewers", str(reviewers)])
    async with stdio_client(params, errlog=sys.__stderr__) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        yield session


def _data(result: Any) -> Any:
    assert not result.is_error, result.content
    return result.structured_content


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'queue.db'}"


async def test_a_reviewers_assistant_lists_shows_and_approves_bound_to_the_digest(
        store_url: str, reviewers_file: Path) -> None:
    store = open_store(store_url)
    try:
        request = await _suspend(store)
        with anyio.fail_after(60):
            async with queue(store_url, reviewers_file, "alice") as client:
                names = {t.name for t in (await client.list_tools()).tools}
                assert names == {"list_pending", "show_approval", "approve", "deny"}
                listed = _data(await client.call_tool("list_pending", {}))
                assert listed["reviewer"] == "alice"
                assert [(p["id"], p["answerable"]) for p in listed["pending"]] == \
                    [(request.id, True)]
                shown = _data(await client.call_tool("show_approval",
                                                     {"request_id": request.id[:8]}))
                assert shown["digest"] == request.digest
                assert "ana@example.com" in shown["description"]
                stale = await client.call_tool("approve", {"request_id": request.id,
                                                           "digest": "0" * 64})
                assert stale.is_error and "digest mismatch" in stale.content[0].text
                done = _data(await client.call_tool(
                    "approve", {"request_id": request.id, "digest": shown["digest"],
                                "note": "checked"}))
                assert done == {"recorded": "answer", "approved": True,
                                "approver": "mcp:alice"}
        found = await store.get_approval(request.id)
        assert found is not None and found.answer is not None
        assert found.answer.approver == "mcp:alice"
        details = [r.data["detail"] for r in await store.audit_records()
                   if r.type == "approval.answered"]
        assert details == ["answered via mcp"]
    finally:
        await store.close()


async def test_an_agent_holding_a_reviewer_token_cannot_approve_its_own_call(
        store_url: str, reviewers_file: Path) -> None:
    store = open_store(store_url)
    try:
        request = await _suspend(store, principal="agent")
        with anyio.fail_after(60):
            async with queue(store_url, reviewers_file, "agent") as client:
                listed = _data(await client.call_tool("list_pending", {}))
                assert [p["answerable"] for p in listed["pending"]] == [False]
                for tool in ("approve", "deny"):
                    refused = await client.call_tool(tool, {"request_id": request.id,
                                                            "digest": request.digest})
                    assert refused.is_error and "proposed it" in refused.content[0].text
        found = await store.get_approval(request.id)
        assert found is not None and found.answer is None
    finally:
        await store.close()


async def test_queue_votes_count_once_per_reviewer_and_need_the_role(
        store_url: str, reviewers_file: Path) -> None:
    policy = '[[rules]]\ntool = "send_email"\nverdict = "ask"\n' \
             'quorum = { approvals = 2, roles = ["mail"] }\n'
    store = open_store(store_url)
    try:
        request = await _suspend(store, policy=policy)
        arguments = {"request_id": request.id, "digest": request.digest}
        with anyio.fail_after(90):
            async with queue(store_url, reviewers_file, "alice") as client:
                first = _data(await client.call_tool("approve", arguments))
                assert first == {"recorded": "vote", "more_approvals_needed": 1}
                again = await client.call_tool("approve", arguments)
                assert again.is_error and "voted on this request already" in \
                    again.content[0].text
                shown = _data(await client.call_tool("show_approval",
                                                     {"request_id": request.id}))
                assert shown["votes"] == [{"voter": "alice", "approved": True, "via": "mcp"}]
            async with queue(store_url, reviewers_file, "eve") as client:
                outsider = await client.call_tool("approve", arguments)
                assert outsider.is_error and "roles" in outsider.content[0].text
            async with queue(store_url, reviewers_file, "bob") as client:
                second = _data(await client.call_tool("approve", arguments))
                assert second["recorded"] == "answer" and second["approver"] == "alice, bob"
    finally:
        await store.close()


def test_the_queue_does_not_start_without_a_reviewers_own_token(
        reviewers_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANFITRION_REVIEWER_TOKEN", raising=False)
    result = CliRunner().invoke(cli, ["approvals", "mcp", "--store", "memory://",
                                      "--reviewers", str(reviewers_file)])
    assert result.exit_code != 0 and "ANFITRION_REVIEWER_TOKEN" in result.output
    monkeypatch.setenv("ANFITRION_REVIEWER_TOKEN", "a-token-of-nobody-0123456789")
    result = CliRunner().invoke(cli, ["approvals", "mcp", "--store", "memory://",
                                      "--reviewers", str(reviewers_file)])
    assert result.exit_code != 0 and "nobody's token" in result.output


@pytest.mark.parametrize(("command", "args"), [
    ("anfitrion", ["approvals", "mcp", "--reviewers", "r.toml"]),
    (sys.executable, ["-m", "anfitrion", "approvals", "mcp"]),
    ("sh", ["-c", "exec anfitrion Approvals  MCP --store sqlite:///a.db"]),
])
def test_a_gateway_config_naming_the_queue_is_refused_before_anything_starts(
        command: str, args: list[str]) -> None:
    with pytest.raises(ConfigError, match="approval queue"):
        refuse_approval_queue_in([ServerConfig("approvals", command=command,
                                               args=tuple(args))])


def test_the_gateway_command_refuses_a_servers_file_with_the_queue(tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"approvals": {
        "command": "anfitrion", "args": ["approvals", "mcp", "--reviewers", "r.toml"]}}}))
    result = CliRunner().invoke(cli, ["gateway", "--config", str(config), "--store",
                                      "memory://"])
    assert result.exit_code != 0 and "approval queue" in result.output


async def test_a_queue_started_in_disguise_is_refused_when_it_names_itself() -> None:
    """Its command line says nothing; its initialize answer does: never offered."""
    store = open_store("memory://")
    env = {k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ}
    config = ServerConfig("helper", command=sys.executable, args=(DISGUISED,), trusted=True,
                          timeout=30, env=env)
    with anyio.fail_after(60):
        async with McpServers([config], store) as servers:
            found = (await servers.refresh())["helper"]
    assert isinstance(found, Exception) and "approval queue" in str(found)
