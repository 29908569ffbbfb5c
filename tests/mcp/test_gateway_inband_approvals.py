"""Approvals that complete in-band (issue 32 item 3): a call that must wait for a person
becomes a task (the Tasks extension) for a 2026-07-28 client that declares it, and a URL-mode
elicitation naming the inbox page of that very request for an older client that supports it.

Real components: the gateway over streamable HTTP, the official ``mcp`` client (2.3), the
parity suite's upstream SDK server (its ``send_mail`` appends a line per mail actually sent, so
"exactly once" is counted on the effect itself), a SQLite store, answers given through
:func:`anfitrion._answers.answer` as the CLI and the inbox give them.

Attacks are written by someone who read :mod:`anfitrion.mcp._gateway_tasks`: another principal
holding a task id, a guessed or borrowed id (the approval request's), a re-send with other
arguments after an approval, a client "accepting" the URL elicitation as if it approved.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import anyio
import pytest

pytest.importorskip("mcp")
import httpx2
import mcp.types as mt
from gateway_helpers import serving_http, url_of
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from pydantic import TypeAdapter

from anfitrion import _answers as answers
from anfitrion._approvals import ApprovalRequest
from anfitrion.mcp._config import ServerConfig
from anfitrion.mcp._gateway import Gateway
from anfitrion.mcp._gateway_tasks import TASKS_EXTENSION
from anfitrion.mcp._pinning import PinBook
from anfitrion.mcp._sandbox import PathGrant, SandboxProfile
from anfitrion.mcp._toolset import McpServers
from anfitrion.store import Store, open_store
from mcp import Client

pytestmark = [pytest.mark.anyio, pytest.mark.mcp_servers]

SERVER = str(Path(__file__).parents[1] / "parity" / "parity_server.py")
TOKEN = "inband-token-0123456789abcdef"
INBOX = "https://inbox.example/"
ANY = TypeAdapter(dict[str, Any])


class CreatedTask(mt.Result):
    """SEP-2663's ``CreateTaskResult``: flat, ``resultType: "task"``."""

    result_type: Literal["task"] = "task"
    task_id: str
    status: str
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None


async def until_done(task: CreatedTask, context: ClaimContext) -> mt.CallToolResult:
    """What a Tasks client does with a task: poll ``tasks/get`` until it ends."""
    while True:
        got = await context.session.send_request(
            mt.GetTaskRequest(params=mt.GetTaskRequestParams(task_id=task.task_id)), ANY)
        if got["status"] == "completed":
            return mt.CallToolResult.model_validate(got["result"])
        if got["status"] in ("failed", "cancelled"):
            text = got.get("error", {}).get("message", got["status"])
            return mt.CallToolResult(content=[mt.TextContent(type="text", text=text)],
                                     is_error=True)
        await anyio.sleep(0.05)


class Tasks(ClientExtension):
    """The client side of the Tasks extension, on the SDK's claim mechanism."""

    identifier = TASKS_EXTENSION

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=until_done)]


@pytest.fixture
def effects(tmp_path: Path) -> Path:
    path = tmp_path / "effects" / "effects.log"
    path.parent.mkdir()
    path.touch()
    return path


def config(effects: Path) -> ServerConfig:
    return ServerConfig(id="p", command=sys.executable, args=(SERVER,),
                        env={"PARITY_EFFECTS": str(effects)}, trusted=True,
                        sandbox=SandboxProfile(paths=(PathGrant(str(effects.parent), "rw"),)))


def mails(effects: Path) -> list[str]:
    return effects.read_text().splitlines()


@asynccontextmanager
async def gateways(store: Store, effects: Path, principals: tuple[str, ...] = ("alice",),
                   approval_wait: float = 0.2, inbox_url: str | None = INBOX
                   ) -> AsyncIterator[list[tuple[Gateway, str]]]:
    """One gateway per principal over HTTP, all on the same store and server config."""
    configs = [config(effects)]
    async with McpServers(configs, store) as servers:
        await servers.refresh()
    for pin in await PinBook(store).pins():
        await PinBook(store).approve(pin.name, by="operator")
    async with McpServers(configs, store) as servers, AsyncExitStack() as stack:
        served: list[tuple[Gateway, str]] = []
        for principal in principals:
            gateway = Gateway(servers, store=store, principal=principal,
                              approval_wait=approval_wait, poll_interval=0.02,
                              inbox_url=inbox_url)
            sock = await stack.enter_async_context(serving_http(gateway, TOKEN))
            served.append((gateway, url_of(sock)))
        yield served


@asynccontextmanager
async def modern(url: str, *, tasks: bool = True) -> AsyncIterator[Client]:
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=60),
                                  headers={"Authorization": f"Bearer {TOKEN}"}) as http, \
            Client(streamable_http_client(url, http_client=http), mode="2026-07-28",
                   extensions=[Tasks()] if tasks else None) as client:
        await client.list_tools()
        yield client


async def call(client: Client, to: str, body: str = "hello") -> Any:
    """``tools/call`` as sent, the claimed (task) shape accepted."""
    return await client.session.call_tool("p.send_mail", {"to": to, "body": body},
                                          allow_claimed=True)


async def task_request(client: Client, method: str, task_id: str) -> dict[str, Any]:
    request: Any = (mt.GetTaskRequest(params=mt.GetTaskRequestParams(task_id=task_id))
                    if method == "tasks/get" else
                    mt.CancelTaskRequest(params=mt.CancelTaskRequestParams(task_id=task_id)))
    return await client.session.send_request(request, ANY)


def task_of(result: Any) -> dict[str, Any]:
    dumped: dict[str, Any] = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    assert dumped.get("resultType") == "task", dumped
    return dumped


async def pending_request(store: Store) -> str:
    (request,) = await store.list_approvals(pending_only=True)
    return request.id


async def test_a_task_completes_exactly_once_after_the_approval(tmp_path: Path,
                                                                effects: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'g.db'}")
    with anyio.fail_after(120):
        async with gateways(store, effects) as [(gateway, url)], modern(url) as client:
            task = task_of(await call(client, "bob@example.com"))
            request_id = await pending_request(store)
            assert task["status"] == "working" and task["ttlMs"] > 0
            assert task["pollIntervalMs"] > 0 and "ttl" not in task
            message = task["statusMessage"]
            assert "p.send_mail" in message and request_id in message
            assert f"{INBOX}approvals/{request_id}" in message
            assert "requestState" not in task and "result" not in task
            got = await task_request(client, "tasks/get", task["taskId"])
            assert got["status"] == "working" and "result" not in got
            assert mails(effects) == []
            outcome = await answers.answer(store, request_id, None, approved=True,
                                           approver="carol", via="cli")
            assert outcome.recorded
            results: list[dict[str, Any]] = []

            async def poll() -> None:
                results.append(await task_request(client, "tasks/get", task["taskId"]))

            async with anyio.create_task_group() as tg:  # polls racing to finish it
                for _ in range(4):
                    tg.start_soon(poll)
            again = await task_request(client, "tasks/get", task["taskId"])
            looked_up = await client.call_tool("p.lookup", {"name": "ana"})  # no person: sync
    assert looked_up.content[0].text == "ana sits in room 4"
    assert gateway.tasks._locks == {}  # nothing kept per task once finished
    assert mails(effects) == ["mail to bob@example.com"]
    for got in [*results, again]:
        assert got["status"] == "completed", got
        assert got["result"]["content"][0]["text"] == "sent to bob@example.com"
        assert not got["result"].get("isError")
        assert "pollIntervalMs" not in got
    await store.close()


async def test_the_official_client_gets_the_executed_result_through_the_task(
        tmp_path: Path, effects: Path) -> None:
    """``Client.call_tool`` with a Tasks extension: the call returns the mail's own result
    once a person approves in another door, meanwhile nothing runs."""
    store = open_store(f"sqlite:///{tmp_path / 'g.db'}")

    async def approve_when_asked() -> None:
        while not await store.list_approvals(pending_only=True):
            await anyio.sleep(0.05)
        await anyio.sleep(0.3)
        assert mails(effects) == []
        await answers.answer(store, await pending_request(store), None, approved=True,
                             approver="carol", via="inbox")

    with anyio.fail_after(120):
        async with gateways(store, effects) as [(_, url)], modern(url) as client, \
                anyio.create_task_group() as tg:
            tg.start_soon(approve_when_asked)
            result = await client.call_tool("p.send_mail", {"to": "bob@example.com",
                                                            "body": "hi"})
    assert not result.is_error and result.content[0].text == "sent to bob@example.com"
    assert mails(effects) == ["mail to bob@example.com"]
    await store.close()


async def test_a_resend_joins_its_task_and_other_arguments_do_not(tmp_path: Path,
                                                                  effects: Path) -> None:
    """After the approval of bob's mail, the same tool with another recipient is another
    call: its own task and request, never run on bob's approval; bob's mail runs once."""
    store = open_store(f"sqlite:///{tmp_path / 'g.db'}")
    with anyio.fail_after(120):
        async with gateways(store, effects) as [(_, url)], modern(url) as client:
            first = task_of(await call(client, "bob@example.com"))
            again = task_of(await call(client, "bob@example.com"))
            assert again["taskId"] == first["taskId"]
            request_id = await pending_request(store)
            await answers.answer(store, request_id, None, approved=True, approver="carol")
            other = task_of(await call(client, "mallory@evil.example"))
            assert other["taskId"] != first["taskId"]
            assert other["status"] == "working"
            # naming bob's approved task in the call's _meta changes nothing: a third call
            borrowed = task_of(await client.session.call_tool(
                "p.send_mail", {"to": "mallory@evil.example", "body": "again"},
                allow_claimed=True, meta={"io.modelcontextprotocol/related-task": {
                    "taskId": first["taskId"]}}))
            assert borrowed["taskId"] not in (first["taskId"], other["taskId"])
            joined = task_of(await call(client, "bob@example.com"))  # approved, not yet run
            assert joined["taskId"] == first["taskId"]
            done = await task_request(client, "tasks/get", first["taskId"])
            still = await task_request(client, "tasks/get", other["taskId"])
    assert done["status"] == "completed"
    assert still["status"] == "working"
    assert mails(effects) == ["mail to bob@example.com"]
    assert len(await store.list_approvals(pending_only=True)) == 2  # mallory's two, waiting
    await store.close()


async def test_a_denied_task_fails_with_the_persons_reason(tmp_path: Path,
                                                           effects: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'g.db'}")
    with anyio.fail_after(120):
        async with gateways(store, effects) as [(_, url)], modern(url) as client:
            task = task_of(await call(client, "bob@example.com"))
            await answers.answer(store, await pending_request(store), None, approved=False,
                                 approver="carol", note="not to bob today")
            got = await task_request(client, "tasks/get", task["taskId"])
    assert got["status"] == "failed" and "result" not in got
    assert got["error"]["message"] == "declined by a person: not to bob today"
    assert isinstance(got["error"]["code"], int)
    assert mails(effects) == []
    await store.close()


async def test_cancel_withdraws_the_approval_request(tmp_path: Path, effects: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'g.db'}")
    with anyio.fail_after(120):
        async with gateways(store, effects) as [(_, url)], modern(url) as client:
            task = task_of(await call(client, "bob@example.com"))
            request_id = await pending_request(store)
            ack = await task_request(client, "tasks/cancel", task["taskId"])
            assert ack == {"resultType": "complete"} or set(ack) <= {"resultType", "_meta"}
            late = await answers.answer(store, request_id, None, approved=True,
                                        approver="carol")
            got = await task_request(client, "tasks/get", task["taskId"])
            repeat = await task_request(client, "tasks/cancel", task["taskId"])
    assert late.refusal is answers.Refusal.ANSWERED  # withdrawn: nobody approves it now
    assert got["status"] == "cancelled"
    assert set(repeat) <= {"resultType", "_meta"}
    assert mails(effects) == []
    await store.close()


async def test_another_principal_cannot_read_cancel_or_complete_a_task(
        tmp_path: Path, effects: Path) -> None:
    """Mallory's gateway shares the store and knows alice's task id (she read a log): to her
    every tasks/* request says "no such task", as for an id that does not exist; so does a
    guessed id and the approval request's own id."""
    store = open_store(f"sqlite:///{tmp_path / 'g.db'}")
    with anyio.fail_after(120):
        async with gateways(store, effects, ("alice", "mallory")) as \
                [(_, alice_url), (_, mallory_url)], \
                modern(alice_url) as alice, modern(mallory_url) as mallory:
            task = task_of(await call(alice, "bob@example.com"))
            request_id = await pending_request(store)
            refused: list[str] = []
            for method in ("tasks/get", "tasks/cancel"):
                for task_id in (task["taskId"], request_id,
                                "anfitrion-task-" + "A" * 43, task["taskId"] + "x"):
                    with pytest.raises(MCPError) as caught:
                        await task_request(mallory, method, task_id)
                    assert caught.value.error.code == mt.INVALID_PARAMS
                    refused.append(caught.value.error.message)
            assert (await store.get_approval(request_id)).answer is None  # not withdrawn
            await answers.answer(store, request_id, None, approved=True, approver="carol")
            with pytest.raises(MCPError):  # nor completed (run) by her poll
                await task_request(mallory, "tasks/get", task["taskId"])
            assert mails(effects) == []
            done = await task_request(alice, "tasks/get", task["taskId"])
    assert set(refused) == {"no such task"}
    assert done["status"] == "completed"
    assert mails(effects) == ["mail to bob@example.com"]
    await store.close()


async def test_a_client_without_the_extension_gets_no_task(tmp_path: Path,
                                                          effects: Path) -> None:
    """tasks/* are refused with -32021 and the call falls back to the "call again" text."""
    store = open_store(f"sqlite:///{tmp_path / 'g.db'}")
    with anyio.fail_after(120):
        async with gateways(store, effects) as [(_, url)], modern(url, tasks=False) as client:
            result = await client.call_tool("p.send_mail", {"to": "bob@example.com",
                                                            "body": "hi"})
            with pytest.raises(MCPError) as caught:
                await task_request(client, "tasks/get", "anfitrion-task-x")
    assert result.is_error and "call the tool again" in result.content[0].text
    assert caught.value.error.code == mt.MISSING_REQUIRED_CLIENT_CAPABILITY
    assert mails(effects) == []
    await store.close()


@asynccontextmanager
async def legacy(url: str, on_elicit: Any) -> AsyncIterator[ClientSession]:
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=60),
                                  headers={"Authorization": f"Bearer {TOKEN}"}) as http, \
            streamable_http_client(url, http_client=http) as (read, write), \
            ClientSession(read, write, elicitation_callback=on_elicit) as session:
        await session.initialize()
        yield session


def approving_on_the_page(store: Store) -> tuple[list[Any], Any]:
    """An elicitation callback playing the person: it opens the page the URL names and
    approves there (the inbox's door); and the list of what it was asked."""
    asked: list[Any] = []

    async def on_elicit(context: Any, params: Any) -> mt.ElicitResult:
        asked.append(params)
        await answers.answer(store, params.url.rsplit("/", 1)[1], None, approved=True,
                             approver="carol", via="inbox")
        return mt.ElicitResult(action="accept")

    return asked, on_elicit


async def sent_after_one_page(store: Store, asked: list[Any], result: Any,
                              effects: Path) -> tuple[Any, ApprovalRequest]:
    """The client was sent the page of the call's one request, and the call ran once."""
    (params,) = asked
    (request,) = await store.list_approvals(pending_only=False)
    assert params.mode == "url" and params.url == f"{INBOX}approvals/{request.id}"
    assert not result.is_error and result.content[0].text == "sent to bob@example.com"
    assert mails(effects) == ["mail to bob@example.com"]
    return params, request


async def test_url_elicitation_opens_that_requests_page_and_completes_in_the_request(
        tmp_path: Path, effects: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'g.db'}")
    asked, on_elicit = approving_on_the_page(store)
    with anyio.fail_after(120):
        async with gateways(store, effects, approval_wait=30) as [(_, url)], \
                legacy(url, on_elicit) as session:
            result = await session.call_tool("p.send_mail", {"to": "bob@example.com",
                                                             "body": "hi"})
    params, request = await sent_after_one_page(store, asked, result, effects)
    assert params.elicitation_id == f"anfitrion-approval-{request.id}"
    await store.close()


@pytest.mark.parametrize("action", ["accept", "decline"])
async def test_the_clients_reply_to_the_url_elicitation_is_never_an_approval(
        tmp_path: Path, effects: Path, action: Literal["accept", "decline"]) -> None:
    """A client (or the model behind it) answering "accept" with content approves nothing:
    the call waits for the person, then falls back to the "call again" text; "decline"
    only ends the wait early."""
    store = open_store(f"sqlite:///{tmp_path / 'g.db'}")

    async def on_elicit(context: Any, params: Any) -> mt.ElicitResult:
        return mt.ElicitResult(action=action, content={"approved": True} if
                               action == "accept" else None)

    with anyio.fail_after(120):
        wait = 1.0 if action == "accept" else 20.0
        async with gateways(store, effects, approval_wait=wait) as [(_, url)], \
                legacy(url, on_elicit) as session:
            started = anyio.current_time()
            result = await session.call_tool("p.send_mail", {"to": "bob@example.com",
                                                             "body": "hi"})
            took = anyio.current_time() - started
            (_,) = await store.list_approvals(pending_only=True)  # still unanswered
    assert result.is_error and "call the tool again" in result.content[0].text
    assert mails(effects) == []
    if action == "decline":  # the wait ended when the client declined, not at its end
        assert took < 10.0
    await store.close()


async def test_without_an_inbox_url_no_elicitation_is_sent(tmp_path: Path,
                                                           effects: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'g.db'}")
    asked: list[Any] = []

    async def on_elicit(context: Any, params: Any) -> mt.ElicitResult:
        asked.append(params)
        return mt.ElicitResult(action="cancel")

    with anyio.fail_after(120):
        async with gateways(store, effects, inbox_url=None) as [(_, url)], \
                legacy(url, on_elicit) as session:
            result = await session.call_tool("p.send_mail", {"to": "bob@example.com",
                                                             "body": "hi"})
    assert asked == [] and result.is_error
    await store.close()


@asynccontextmanager
async def modern_eliciting(url: str, on_elicit: Any) -> AsyncIterator[Client]:
    """A 2026-07-28 client without Tasks, with URL-mode elicitation (``input_required``)."""
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=60),
                                  headers={"Authorization": f"Bearer {TOKEN}"}) as http, \
            Client(streamable_http_client(url, http_client=http), mode="2026-07-28",
                   elicitation_callback=on_elicit) as client:
        await client.list_tools()
        yield client


async def test_a_2026_client_opens_the_page_through_input_required_and_the_call_completes(
        tmp_path: Path, effects: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'g.db'}")
    asked, on_elicit = approving_on_the_page(store)
    with anyio.fail_after(120):
        async with gateways(store, effects, approval_wait=30) as [(_, url)], \
                modern_eliciting(url, on_elicit) as client:
            result = await client.call_tool("p.send_mail", {"to": "bob@example.com",
                                                            "body": "hi"})
    params, _ = await sent_after_one_page(store, asked, result, effects)
    assert "p.send_mail" in params.message
    await store.close()


async def test_an_answer_for_another_requests_page_does_not_stand_for_this_call(
        tmp_path: Path, effects: Path) -> None:
    """Bob's mail is approved; the client then sends mallory's mail with the input response
    keyed by bob's request (the URL of another call): the gateway asks again, for mallory's
    own request, and runs nothing. Bob's call, re-sent with its own answer, runs once."""
    store = open_store(f"sqlite:///{tmp_path / 'g.db'}")

    async def on_elicit(context: Any, params: Any) -> mt.ElicitResult:
        return mt.ElicitResult(action="accept")

    def ask(to: str, responses: dict[str, Any] | None) -> Any:
        return client.session.call_tool("p.send_mail", {"to": to, "body": "hi"},
                                        input_responses=responses, allow_input_required=True)

    with anyio.fail_after(120):
        async with gateways(store, effects, approval_wait=0.5) as [(_, url)], \
                modern_eliciting(url, on_elicit) as client:
            first = await ask("bob@example.com", None)
            assert isinstance(first, mt.InputRequiredResult)
            (bob_key,) = first.input_requests
            bob_id = bob_key.rsplit(".", 1)[1]
            await answers.answer(store, bob_id, None, approved=True, approver="carol")
            accepted = {bob_key: {"action": "accept"}}
            other = await ask("mallory@evil.example", accepted)
            assert isinstance(other, mt.InputRequiredResult)
            (mallory_key,) = other.input_requests
            assert mallory_key != bob_key
            assert mails(effects) == []
            done = await ask("bob@example.com", accepted)
    assert isinstance(done, mt.CallToolResult) and not done.is_error
    assert mails(effects) == ["mail to bob@example.com"]
    await store.close()


async def test_a_2026_client_declining_the_page_gets_the_fallback_at_once(
        tmp_path: Path, effects: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'g.db'}")

    async def on_elicit(context: Any, params: Any) -> mt.ElicitResult:
        return mt.ElicitResult(action="decline")

    with anyio.fail_after(120):
        async with gateways(store, effects, approval_wait=20) as [(_, url)], \
                modern_eliciting(url, on_elicit) as client:
            started = anyio.current_time()
            result = await client.call_tool("p.send_mail", {"to": "bob@example.com",
                                                            "body": "hi"})
            took = anyio.current_time() - started
    assert result.is_error and "call the tool again" in result.content[0].text
    assert took < 10 and mails(effects) == []
    await store.close()


async def test_a_task_made_on_one_gateway_process_completes_on_another(
        tmp_path: Path, effects: Path) -> None:
    """Two gateway processes of the same principal on one store (replicas): the task is a
    store record, so a poll reaching the other process finishes it — once."""
    store = open_store(f"sqlite:///{tmp_path / 'g.db'}")
    with anyio.fail_after(120):
        async with gateways(store, effects, ("alice", "alice")) as [(_, one), (_, two)], \
                modern(one) as first, modern(two) as second:
            task = task_of(await call(first, "bob@example.com"))
            await answers.answer(store, await pending_request(store), None, approved=True,
                                 approver="carol")
            there = await task_request(second, "tasks/get", task["taskId"])
            here = await task_request(first, "tasks/get", task["taskId"])
    assert there["status"] == here["status"] == "completed"
    assert there["result"] == here["result"]
    assert mails(effects) == ["mail to bob@example.com"]
    await store.close()


async def test_a_reviewers_edit_is_what_the_task_runs(tmp_path: Path, effects: Path) -> None:
    """The person approves with other arguments: the task runs the edited call (a new
    proposal through the gate), never the original one, and only once."""
    store = open_store(f"sqlite:///{tmp_path / 'g.db'}")
    with anyio.fail_after(120):
        async with gateways(store, effects) as [(_, url)], modern(url) as client:
            task = task_of(await call(client, "mallory@evil.example"))
            (request,) = await store.list_approvals(pending_only=True)
            edited = await answers.propose_edit(
                store, request.id, request.digest, {"to": "bob@example.com", "body": "hello"},
                approver="carol")
            assert edited.recorded
            got = await task_request(client, "tasks/get", task["taskId"])
            for _ in range(3):
                if got["status"] != "working":
                    break
                pending = await store.list_approvals(pending_only=True)
                for waiting in pending:  # the edit, asked again by the policy: approved
                    await answers.answer(store, waiting.id, None, approved=True,
                                         approver="carol")
                got = await task_request(client, "tasks/get", task["taskId"])
            again = await task_request(client, "tasks/get", task["taskId"])
    assert got["status"] == "completed", got
    assert again == got or again["result"] == got["result"]
    assert mails(effects) == ["mail to bob@example.com"]
    await store.close()
