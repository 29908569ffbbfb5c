"""Parallel calls in one gateway client session: no spurious conflicts.

A desktop client sends several ``tools/call`` at once on one connection. The gateway merges
them into the one anfitrion session of the conversation (its state is serialised inside the
process), so none fails with "session … was changed concurrently", and every guarantee still
counts each call once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")

import httpx2
from doors import PRINCIPAL, TOKEN, _serve_http, approve_pins, server_config
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.memory import create_client_server_memory_streams

from anfitrion import _answers as answers
from anfitrion.mcp._gateway import Gateway
from anfitrion.mcp._toolset import McpServers
from anfitrion.policy import parse_policy
from anfitrion.store._sqlite import SQLiteStore

pytestmark = [pytest.mark.anyio, pytest.mark.mcp_servers]

# taint off: which write's result enters the session first is the order the calls finish in
# (a mail's result is untrusted content), and this test is about conflicts, not taint
POLICY = parse_policy('[taint]\nenabled = false\n'
                      '[[rules]]\ntool = "p.send_mail"\nverdict = "allow"\n'
                      'reason = "mail is allowed in this test"\n')


async def _in_parallel(client: ClientSession, calls: list[tuple[str, dict[str, Any]]]
                       ) -> list[Any]:
    results: list[Any] = [None] * len(calls)

    async def one(i: int, name: str, arguments: dict[str, Any]) -> None:
        results[i] = await client.call_tool(name, arguments)

    async with anyio.create_task_group() as tg:
        for i, (name, arguments) in enumerate(calls):
            tg.start_soon(one, i, name, arguments)
    return results


@asynccontextmanager
async def _connected(gateway: Gateway) -> AsyncIterator[ClientSession]:
    """The official client on the gateway's stdio code path (memory streams)."""
    server = gateway.build_server()
    async with create_client_server_memory_streams() as (client_streams, server_streams), \
            anyio.create_task_group() as tg:
        tg.start_soon(server.run, *server_streams, server.create_initialization_options())
        async with ClientSession(*client_streams) as session:
            await session.initialize()
            yield session
        tg.cancel_scope.cancel()


def _calls(run: int) -> list[tuple[str, dict[str, Any]]]:
    reads = [("p.count", {"n": i + 1}) for i in range(7)]
    writes = [("p.send_mail", {"to": f"u{i}.{run}@example.org", "body": "hi"}) for i in range(3)]
    return reads + writes


def _check(results: list[Any], effects: Path, run: int) -> None:
    texts = [r.content[0].text for r in results]
    assert [r.is_error for r in results] == [False] * 10, texts[7:]
    assert not [t for t in texts if "concurrently" in t]
    assert texts[:7] == [" ".join(str(k) for k in range(1, i + 2)) for i in range(7)]
    assert sorted(effects.read_text().splitlines()) == [f"mail to u{i}.{run}@example.org"
                                                        for i in range(3)]


async def _session_counts(store: SQLiteStore) -> dict[str, int]:
    (state,) = [s for s in await store.list_sessions() if s.session_id != ""]
    return dict(state.data["counters"])


async def test_ten_parallel_calls_in_one_stdio_session(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "a.db")
    effects = tmp_path / "fx.log"
    with anyio.fail_after(120):
        async with McpServers([server_config(effects)], store) as servers:
            await approve_pins(servers, store)
            gateway = Gateway(servers, store=store, policy=POLICY, principal=PRINCIPAL,
                              approval_wait=0.05)
            async with _connected(gateway) as client:
                for run in range(2):  # twice: the second pass runs on the stored session
                    results = await _in_parallel(client, _calls(run))
                    _check(results, effects, run)
                    effects.unlink()
    counts = await _session_counts(store)
    assert counts["tool_calls"] == 20
    await store.close()


async def test_ten_parallel_calls_in_one_http_session(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "a.db")
    effects = tmp_path / "fx.log"
    with anyio.fail_after(120):
        async with McpServers([server_config(effects)], store) as servers:
            await approve_pins(servers, store)
            gateway = Gateway(servers, store=store, policy=POLICY, principal=PRINCIPAL,
                              approval_wait=0.05)
            async with AsyncExitStack() as stack:
                url = await _serve_http(stack, gateway)
                http = await stack.enter_async_context(httpx2.AsyncClient(
                    timeout=httpx2.Timeout(30, read=300),
                    headers={"Authorization": f"Bearer {TOKEN}"}))
                read, write = await stack.enter_async_context(
                    streamable_http_client(url, http_client=http))
                client = await stack.enter_async_context(ClientSession(read, write))
                await client.initialize()
                for run in range(2):
                    results = await _in_parallel(client, _calls(run))
                    _check(results, effects, run)
                    effects.unlink()
    counts = await _session_counts(store)
    assert counts["tool_calls"] == 20
    await store.close()


async def test_a_read_never_waits_for_another_calls_approval(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "a.db")
    effects = tmp_path / "fx.log"
    asking = parse_policy('[[rules]]\ntool = "p.send_mail"\nverdict = "ask"\n'
                          'reason = "a person approves every mail"\n')
    with anyio.fail_after(120):
        async with McpServers([server_config(effects)], store) as servers:
            await approve_pins(servers, store)
            gateway = Gateway(servers, store=store, policy=asking, principal=PRINCIPAL,
                              approval_wait=60, poll_interval=0.02)
            async with _connected(gateway) as client, anyio.create_task_group() as tg:
                mailed: list[Any] = []

                async def mail() -> None:
                    mailed.append(await client.call_tool(
                        "p.send_mail", {"to": "ana@example.org", "body": "hi"}))

                tg.start_soon(mail)
                while not (waiting := await store.list_approvals()):
                    await anyio.sleep(0.01)
                # the mail waits for a person; reads of the same session go on meanwhile
                with anyio.fail_after(15):
                    for n in (1, 2, 3):
                        read = await client.call_tool("p.count", {"n": n})
                        assert not read.is_error and not mailed
                (request,) = waiting
                answered = await answers.answer(store, request.id, None, approved=True,
                                                approver="bob", via="cli")
                assert answered.answer is not None
            (result,) = mailed
            assert not result.is_error, result.content
            assert effects.read_text() == "mail to ana@example.org\n"
    await store.close()


async def test_a_conversation_saved_by_another_process_meanwhile_is_retried_not_failed(
        tmp_path: Path) -> None:
    """Two gateway processes (two runtimes, one store) on one conversation. The first one's
    lease lapses, the second takes the conversation, calls and releases it; the first one's
    next save then conflicts. The call is retried on the stored state, transparently: the
    client gets its result, not "changed concurrently"; a write that ran before the conflict
    answers with its stored result (run once); every call counts once."""
    store = SQLiteStore(tmp_path / "a.db")
    effects = tmp_path / "fx.log"
    with anyio.fail_after(120):
        async with McpServers([server_config(effects)], store) as servers:
            await approve_pins(servers, store)
            one, other = (Gateway(servers, store=store, policy=POLICY, principal=PRINCIPAL,
                                  session_id="gateway-shared", approval_wait=0.05)
                          for _ in range(2))
            assert one.runtime.owner != other.runtime.owner

            async def lapse_and_take(n: int) -> None:
                assert await store.renew_lease("gateway-shared", one.runtime.owner, 0.0)
                assert not (await other.call_tool("p.count", {"n": n})).is_error
                await other._default.release()  # the other process's request ended

            assert "1" in (await one.call_tool("p.count", {"n": 1})).content[0].text
            await lapse_and_take(2)
            read = await one.call_tool("p.count", {"n": 3})
            assert not read.is_error and "1 2 3" in read.content[0].text, read.content
            await lapse_and_take(4)
            mail = await one.call_tool("p.send_mail", {"to": "ana@example.org", "body": "b"})
            assert not mail.is_error, mail.content
            assert "sent to ana@example.org" in mail.content[0].text
            await one._default.release()
    assert effects.read_text() == "mail to ana@example.org\n"
    state = await store.load_session("gateway-shared")
    assert state is not None and state.data["counters"]["tool_calls"] == 5
    await store.close()


async def test_a_conversation_stored_by_another_process_after_the_lookup_is_taken_over(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The race two replicas run when the first calls of a new conversation reach both at
    once: this process looks the conversation up (not there yet), the other stores it with
    its lease, and this one's open then finds it running. It is taken over once the other
    releases it — never "running in another process" to the client (seen through haproxy)."""
    store = SQLiteStore(tmp_path / "a.db")
    effects = tmp_path / "fx.log"
    with anyio.fail_after(60):
        async with McpServers([server_config(effects)], store) as servers:
            one, other = (Gateway(servers, store=store, policy=POLICY, principal=PRINCIPAL)
                          for _ in range(2))
            held = await other._open_session("gateway-race")  # stored, its lease held
            real = store.session_row  # how a process looks a conversation up
            looked: list[str] = []

            async def before_the_other_stored_it(session_id: str) -> Any:
                if not looked:  # this process's first look: the other had not stored it
                    looked.append(session_id)
                    return None
                return await real(session_id)

            monkeypatch.setattr(store, "session_row", before_the_other_stored_it)

            async def release_soon() -> None:
                await anyio.sleep(0.3)
                await held.close()

            async with anyio.create_task_group() as tg:
                tg.start_soon(release_soon)
                taken = await one._open_session("gateway-race")
            assert looked == ["gateway-race"] and taken.id == "gateway-race"
            await taken.close()
    await store.close()
