"""A task of a call waiting for a person belongs to the OAuth user whose call it is: on the same
gateway, with a real authorization server (oidc-provider), another user holding the task id
(read in a log, a shared screen) can neither read, cancel nor complete it (issue 32 item 3)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import anyio
import httpx2
import pytest

pytest.importorskip("mcp")
import mcp.types as mt
from gateway_oauth import approve_all, free_socket, serving, settings_for
from idp import Idp
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from pydantic import TypeAdapter

from anfitrion import _answers as answers
from anfitrion.mcp._config import ServerConfig
from anfitrion.mcp._gateway import Gateway
from anfitrion.mcp._gateway_tasks import TASKS_EXTENSION
from anfitrion.mcp._sandbox import PathGrant, SandboxProfile
from anfitrion.mcp._toolset import McpServers
from anfitrion.store import open_store
from mcp import Client

pytestmark = [pytest.mark.anyio, pytest.mark.mcp_servers]

SERVER = str(Path(__file__).parents[1] / "parity" / "parity_server.py")
ANY = TypeAdapter(dict[str, Any])


class CreatedTask(mt.Result):
    result_type: Literal["task"] = "task"
    task_id: str
    status: str
    created_at: str
    last_updated_at: str


async def never(task: CreatedTask, context: ClaimContext) -> mt.CallToolResult:
    raise AssertionError("the test polls the task itself")


class Tasks(ClientExtension):
    identifier = TASKS_EXTENSION

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=never)]


@asynccontextmanager
async def client_of(url: str, token: str) -> AsyncIterator[Client]:
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=60),
                                  headers={"Authorization": f"Bearer {token}"}) as http, \
            Client(streamable_http_client(url, http_client=http), mode="2026-07-28",
                   extensions=[Tasks()]) as client:
        await client.list_tools()
        yield client


async def task_request(client: Client, method: str, task_id: str) -> dict[str, Any]:
    request: Any = (mt.GetTaskRequest(params=mt.GetTaskRequestParams(task_id=task_id))
                    if method == "tasks/get" else
                    mt.CancelTaskRequest(params=mt.CancelTaskRequestParams(task_id=task_id)))
    return await client.session.send_request(request, ANY)


async def test_another_user_cannot_read_cancel_or_complete_a_users_task(
        idp: Idp, tmp_path: Path) -> None:
    effects = tmp_path / "effects" / "effects.log"
    effects.parent.mkdir()
    effects.touch()
    configs = [ServerConfig(id="p", command=sys.executable, args=(SERVER,),
                            env={"PARITY_EFFECTS": str(effects)}, trusted=True,
                            sandbox=SandboxProfile(paths=(PathGrant(str(effects.parent),
                                                                    "rw"),)))]
    store = open_store(f"sqlite:///{tmp_path / 'g.db'}")
    await approve_all(configs, store)
    sock = free_socket()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    with anyio.fail_after(120):
        async with McpServers(configs, store) as servers:
            gateway = Gateway(servers, store=store, approval_wait=0.2, poll_interval=0.02)
            async with serving(gateway, settings_for(idp.issuer, url), sock) as served:
                alice_token = idp.user_token("alice", served, "tools:read tools:write")
                other_token = idp.user_token("bob", served, "tools:read tools:write")
                async with client_of(served, alice_token["access_token"]) as alice, \
                        client_of(served, other_token["access_token"]) as other:
                    created = await alice.session.call_tool(
                        "p.send_mail", {"to": "carol@example.com", "body": "hi"},
                        allow_claimed=True)
                    assert isinstance(created, CreatedTask)
                    (request,) = await store.list_approvals(pending_only=True)
                    assert request.principal_id == "alice"
                    for method in ("tasks/get", "tasks/cancel"):
                        with pytest.raises(MCPError, match="no such task"):
                            await task_request(other, method, created.task_id)
                    assert (await store.get_approval(request.id)).answer is None
                    await answers.answer(store, request.id, None, approved=True,
                                         approver="carol")
                    with pytest.raises(MCPError, match="no such task"):
                        await task_request(other, "tasks/get", created.task_id)
                    assert effects.read_text() == ""
                    done = await task_request(alice, "tasks/get", created.task_id)
    assert done["status"] == "completed"
    assert done["result"]["content"][0]["text"] == "sent to carol@example.com"
    assert effects.read_text().splitlines() == ["mail to carol@example.com"]
    await store.close()
