"""Any replica serves any client: real ``anfitrion gateway --http --replica`` processes on one
PostgreSQL schema, ``haproxy`` in front in round robin without affinity, the official client.

Each test starts two gateway processes and haproxy (Debian's package; the test is skipped
without it unless ``ANFITRION_REQUIRE_HAPROXY=1``), and kills a replica with SIGKILL where it
says so.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

pytest.importorskip("mcp")
pytest.importorskip("psycopg")

import _processes
from doors import PRINCIPAL, SERVER, TOKEN, WAITING, approve_pins, server_config
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from pg_schema import pg_schema_url

from anfitrion import _answers as answers
from anfitrion import _resolutions as resolutions
from anfitrion._audit import verify_chain
from anfitrion.mcp._haproxy import haproxy_config
from anfitrion.mcp._toolset import McpServers
from anfitrion.store import LedgerState, open_store

pytestmark = [pytest.mark.anyio, pytest.mark.mcp_servers]

KEY = "replica-test-key-0123456789abcdef0123456789"
POLICY = ('[repeat_guard]\nmax_repeats = 2\n[[rules]]\ntool = "p.send_mail"\nverdict = "ask"\n'
          'reason = "a person approves every mail"\n')
ANFITRION = str(Path(sys.executable).with_name("anfitrion"))


@pytest.fixture
def pg_url() -> Iterator[str]:
    yield from pg_schema_url()


def _haproxy() -> str:
    found = shutil.which("haproxy") or ("/usr/sbin/haproxy"
                                        if Path("/usr/sbin/haproxy").exists() else None)
    if found is None:
        if os.environ.get("ANFITRION_REQUIRE_HAPROXY") == "1":
            pytest.fail("haproxy is required (ANFITRION_REQUIRE_HAPROXY=1): "
                        "tests/parity/install_haproxy.sh")
        pytest.skip("haproxy is not installed (tests/parity/install_haproxy.sh)")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    """Two gateway replicas and haproxy; ``url`` is the load balancer's MCP endpoint."""

    def __init__(self, tmp_path: Path, store_url: str, approval_wait: float,
                 policy: str = POLICY, gateway: dict[str, Any] | None = None) -> None:
        self.tmp = tmp_path
        self.policy = policy
        self.gateway = gateway or {}
        self.store_url = store_url
        self.effects = tmp_path / "fx.log"
        self.approval_wait = approval_wait
        self.replicas: dict[int, subprocess.Popen[bytes]] = {}
        self.lb_port = _free_port()
        self.url = f"http://127.0.0.1:{self.lb_port}/mcp"
        self.stats = str(tmp_path / "haproxy.sock")

    def _config(self) -> Path:
        path = self.tmp / "mcp.json"
        path.write_text(json.dumps({
            "mcpServers": {"p": {"command": sys.executable, "args": [SERVER],
                                 "env": {"PARITY_EFFECTS": str(self.effects)},
                                 # the server appends what it did to the effects file
                                 "trusted": True, "sandbox": {"paths": [
                                     {"path": str(self.effects.parent), "mode": "rw"}]}}},
            "gateway": {"principal": PRINCIPAL, **self.gateway}}))
        (self.tmp / "policy.toml").write_text(self.policy)
        return path

    def start_replica(self, port: int) -> None:
        config = self._config()
        self.replicas[port] = _processes.spawn(
            [ANFITRION, "gateway", "--config", str(config), "--http", "--replica",
             "--port", str(port), "--store", self.store_url,
             "--policy", str(self.tmp / "policy.toml"),
             "--approval-wait", str(self.approval_wait)],
            log=self.tmp / f"replica-{port}.log",
            env={"ANFITRION_GATEWAY_TOKEN": TOKEN, "ANFITRION_GATEWAY_KEY": KEY,
                 "PYTHONWARNINGS": "ignore"})

    def kill(self, port: int, sig: int = signal.SIGKILL) -> None:
        """*sig* to the replica's process group (SIGKILL: a crash), and wait for it."""
        _processes.end(self.replicas.pop(port), sig, wait=30)

    def served(self) -> dict[str, int]:
        """Requests each replica got from haproxy (its stats socket)."""
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(self.stats)
            s.sendall(b"show stat\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        rows = [line.split(",") for line in data.decode().splitlines() if line]
        header = rows[0]
        stot = header.index("stot")
        return {row[1]: int(row[stot]) for row in rows[1:]
                if row[0] == "gateways" and row[1] not in ("BACKEND", "FRONTEND")}

    async def ready(self, port: int) -> None:
        async with httpx2.AsyncClient(timeout=5) as http:
            while True:
                process = self.replicas[port]
                if process.poll() is not None:
                    raise AssertionError((self.tmp / f"replica-{port}.log").read_text())
                try:
                    if (await http.get(f"http://127.0.0.1:{port}/readyz")).status_code == 200:
                        return
                except httpx2.TransportError:
                    pass
                await anyio.sleep(0.1)

    @contextmanager
    def balancer(self, ports: list[int]) -> Iterator[None]:
        path = self.tmp / "haproxy.cfg"
        path.write_text(haproxy_config(f"127.0.0.1:{self.lb_port}",
                                       [f"127.0.0.1:{p}" for p in ports],
                                       stats_socket=self.stats))
        process = _processes.spawn([_haproxy(), "-f", str(path), "-db"],
                                   log=self.tmp / "haproxy.log")
        try:
            yield
        finally:
            _processes.end(process)

    def close(self) -> None:
        for port in list(self.replicas):
            self.kill(port)


@asynccontextmanager
async def cluster(tmp_path: Path, store_url: str, *, approval_wait: float = 0.3,
                  policy: str = POLICY, gateway: dict[str, Any] | None = None
                  ) -> AsyncIterator[Cluster]:
    _haproxy()
    store = open_store(store_url)
    try:
        async with McpServers([server_config(tmp_path / "fx.log")], store) as servers:
            await approve_pins(servers, store)
    finally:
        await store.close()
    running = Cluster(tmp_path, store_url, approval_wait, policy, gateway)
    ports = [_free_port(), _free_port()]
    try:
        for port in ports:
            running.start_replica(port)
        with anyio.fail_after(90):
            for port in ports:
                await running.ready(port)
        with running.balancer(ports):
            async with httpx2.AsyncClient(timeout=5) as http:
                with anyio.fail_after(30):  # haproxy listens
                    while True:
                        try:
                            await http.get(running.url.replace("/mcp", "/healthz"))
                            break
                        except httpx2.TransportError:
                            await anyio.sleep(0.05)
            running.ports = ports  # type: ignore[attr-defined]
            yield running
    finally:
        running.close()


@asynccontextmanager
async def client_of(url: str) -> AsyncIterator[ClientSession]:
    async with AsyncExitStack() as stack:
        http = await stack.enter_async_context(httpx2.AsyncClient(
            timeout=httpx2.Timeout(30, read=300),
            headers={"Authorization": f"Bearer {TOKEN}"}))
        read, write = await stack.enter_async_context(streamable_http_client(url,
                                                                             http_client=http))
        client = await stack.enter_async_context(ClientSession(read, write))
        await client.initialize()
        yield client


async def _waiting_for_a_person(store: Any, session_id: str, call_id: str) -> bool:
    """Whether the gateway stored the call as one to continue on a re-send (it does so
    right before it starts waiting)."""
    state = await store.load_session(session_id)
    return state is not None and any(c == call_id for _, _, c in state.data.get("retries", []))


async def _the_request_waiting_for_a_person(store: Any) -> Any:
    """The one pending approval request, once its call waits for the person's answer."""
    while not (pending := await store.list_approvals()):
        await anyio.sleep(0.05)
    (request,) = pending
    while not await _waiting_for_a_person(store, request.session_id, request.call_id):
        await anyio.sleep(0.05)
    return request


async def _resent_runs_on_one_approval(url: str, store: Any, request: Any,
                                       mail: dict[str, str]) -> None:
    """The client re-sends the call through the balancer; a live replica takes it over and
    waits on the same request, which the person approves: the call runs, and no second
    request was made (the person's one answer counted)."""
    async with client_of(url) as client, anyio.create_task_group() as tg:
        done: list[Any] = []

        async def resend() -> None:
            done.append(await client.call_tool("p.send_mail", mail))

        tg.start_soon(resend)
        await anyio.sleep(0)
        answered = await answers.answer(store, request.id, None, approved=True,
                                        approver="bob", via="cli")
        assert answered.answer is not None
    (result,) = done
    assert not result.is_error, _text(result)
    assert [r.id for r in await store.list_approvals(pending_only=False)] == [request.id]


def _text(result: Any) -> str:
    return str(result.content[0].text)


async def test_one_conversation_alternating_between_replicas_keeps_every_guarantee(
        tmp_path: Path, pg_url: str) -> None:
    with anyio.fail_after(240):
        async with cluster(tmp_path, pg_url) as running, client_of(running.url) as client:
            page = await client.call_tool("p.fetch_page", {"url": "https://example.org"})
            assert not page.is_error, _text(page)
            for _ in range(2):
                looked = await client.call_tool("p.lookup", {"name": "ana"})
                assert not looked.is_error, _text(looked)
            # the repeat guard counts the calls served by both replicas
            assert (await client.call_tool("p.lookup", {"name": "ana"})).is_error
            # and the taint of the page read on one replica holds on the other
            mail = await client.call_tool("p.send_mail", {"to": "x@example.org", "body": "b"})
            assert mail.is_error and WAITING.search(_text(mail)) is not None
            served = running.served()
            assert len(served) == 2 and all(count >= 2 for count in served.values()), served
            # 0 empty offers: twenty calls in parallel through the balancer
            results: list[Any] = []

            async def count(n: int) -> None:
                results.append(await client.call_tool("p.count", {"n": n}))

            async with anyio.create_task_group() as tg:
                for n in range(1, 21):
                    tg.start_soon(count, n)
            errors = [_text(r) for r in results if r.is_error]
            assert errors == []
            # the mail's request, whose client was told to call again once it is approved,
            # stays approvable: only a dead process's requests are withdrawn (adoptWithin is
            # 0.3 s here, the replicas look every 0.5 s)
            await anyio.sleep(1.5)
            store = open_store(pg_url)
            try:
                assert len(await store.list_approvals()) == 1
            finally:
                await store.close()
    assert not (tmp_path / "fx.log").exists()


async def test_a_replica_killed_while_a_call_waits_leaves_it_to_the_next_replica(
        tmp_path: Path, pg_url: str) -> None:
    mail = {"to": "ana@example.org", "body": "the report"}
    with anyio.fail_after(300):
        async with cluster(tmp_path, pg_url, approval_wait=60) as running:
            first, _ = running.ports  # type: ignore[attr-defined]
            store = open_store(pg_url)
            try:
                async with anyio.create_task_group() as tg:
                    async def waits_on_first() -> None:
                        direct = f"http://127.0.0.1:{first}/mcp"
                        with contextlib.suppress(Exception):  # its replica dies
                            async with client_of(direct) as client:
                                await client.call_tool("p.send_mail", mail)

                    tg.start_soon(waits_on_first)
                    request = await _the_request_waiting_for_a_person(store)
                    running.kill(first)  # SIGKILL while the call waits for a person
                    tg.cancel_scope.cancel()  # the client gives up on the lost reply
                # the client re-sends through the balancer: the other replica takes the
                # conversation over and waits on the same request; the person says yes
                await _resent_runs_on_one_approval(running.url, store, request, mail)
            finally:
                await store.close()
    assert (tmp_path / "fx.log").read_text() == "mail to ana@example.org\n"


async def test_an_answer_given_elsewhere_wakes_the_call_waiting_on_a_replica_within_a_second(
        tmp_path: Path, pg_url: str) -> None:
    """The call waits on one replica; the person answers through another process (the CLI's
    door): PostgreSQL's notification wakes it, not the replica's next look at the store —
    by then its looks are seconds apart."""
    mail = {"to": "ana@example.org", "body": "the report"}
    with anyio.fail_after(240):
        async with cluster(tmp_path, pg_url, approval_wait=60) as running:
            first, _ = running.ports  # type: ignore[attr-defined]
            store = open_store(pg_url)
            try:
                async with client_of(f"http://127.0.0.1:{first}/mcp") as client:
                    done: list[tuple[Any, float]] = []

                    async def call() -> None:
                        result = await client.call_tool("p.send_mail", mail)
                        done.append((result, time.monotonic()))

                    async with anyio.create_task_group() as tg:
                        tg.start_soon(call)
                        while not (pending := await store.list_approvals()):
                            await anyio.sleep(0.05)
                        (request,) = pending
                        await anyio.sleep(6)  # the replica's polls have backed off (5 s)
                        answered_at = time.time()
                        answered = await answers.answer(store, request.id, None,
                                                        approved=True, approver="bob",
                                                        via="cli")
                        assert answered.answer is not None
                ((result, _),) = done
                assert not result.is_error, _text(result)
                # woken, not polled: the claim (stored in the records of the call the answer
                # let through) follows the answer within a second; the tool's run and the
                # answer's way back to the client are not part of the wake
                claimed = [r.at for r in await store.audit_records()
                           if r.type == "execution.claimed" and r.session_id == request.session_id]
                assert len(claimed) == 1
                # on a failure, the replica's log says whether its listening connection
                # broke (and when it was back)
                assert claimed[0] - answered_at < 1.0, (
                    claimed[0] - answered_at, (tmp_path / f"replica-{first}.log").read_text())
            finally:
                await store.close()
    assert (tmp_path / "fx.log").read_text() == "mail to ana@example.org\n"


MAIL_ALLOWED = ('[[rules]]\ntool = "p.send_mail"\nverdict = "allow"\n'
                'reason = "mail is allowed in this test"\n')


async def _resend_everywhere(running: Cluster, mail: dict[str, str]) -> list[str]:
    """The call sent again to each replica directly and through the balancer: the texts."""
    urls = [f"http://127.0.0.1:{port}/mcp" for port in running.replicas] + [running.url]
    texts = []
    for url in urls:
        async with client_of(url) as client:
            result = await client.call_tool("p.send_mail", mail)
            texts.append((result.is_error, _text(result)))
    return [text for is_error, text in texts if is_error] + \
        [f"NOT AN ERROR: {text}" for is_error, text in texts if not is_error]


async def test_a_replica_killed_mid_execution_leaves_the_effect_unknown_refused_everywhere(
        tmp_path: Path, pg_url: str) -> None:
    """SIGKILL while the tool runs (its effect happened, its result never came back): the
    effect is ``unknown``, a re-send is refused by every replica — the restarted one too —
    until a person resolves it; then the re-send gets the resolution, never a second run."""
    mail = {"to": "ana@example.org", "body": "hold"}  # the server holds after its effect
    effects = tmp_path / "fx.log"
    with anyio.fail_after(300):
        async with cluster(tmp_path, pg_url, policy=MAIL_ALLOWED) as running:
            first, _ = running.ports  # type: ignore[attr-defined]
            store = open_store(pg_url)
            try:
                async with anyio.create_task_group() as tg:
                    async def runs_on_first() -> None:
                        with contextlib.suppress(Exception):  # its replica dies
                            async with client_of(f"http://127.0.0.1:{first}/mcp") as client:
                                await client.call_tool("p.send_mail", mail)

                    tg.start_soon(runs_on_first)
                    while not effects.exists():  # the mail went out; the tool still runs
                        await anyio.sleep(0.05)
                    running.kill(first)
                    tg.cancel_scope.cancel()
                running.start_replica(first)  # back, on the same port
                with anyio.fail_after(90):
                    await running.ready(first)
                refusals = await _resend_everywhere(running, mail)
                assert len(refusals) == 3 and all(
                    "its outcome is unknown" in t and "A person must resolve it" in t and
                    "right now" not in t for t in refusals), refusals
                (effect,) = await store.list_effects(unsettled_only=True)
                assert effect.state is LedgerState.UNKNOWN
                await resolutions.resolve(store, effect.key, done=True, by="bob",
                                          note="the mail went out")
                async with client_of(running.url) as client:
                    after = await client.call_tool("p.send_mail", mail)
                # (an error result: the stored text is the person's, not the tool's output)
                assert _text(after).startswith("[not run again"), _text(after)
                assert "resolved by bob" in _text(after)
            finally:
                await store.close()
    assert effects.read_text() == "mail to ana@example.org\n"


PARALLEL = ('[taint]\nenabled = false\n'  # which result enters first is the finishing order
            '[[rules]]\ntool = "p.send_mail"\nverdict = "allow"\n'
            'reason = "mail is allowed in this test"\n')


async def test_ten_parallel_calls_in_one_http_session_through_two_replicas(
        tmp_path: Path, pg_url: str) -> None:
    """A desktop client's parallel calls on one session, through the balancer (the calls
    alternate between the replicas), on a conversation no replica has seen: none fails
    with a conflict — the replicas take the conversation in turn — and each call counts
    once."""
    effects = tmp_path / "fx.log"
    with anyio.fail_after(240):
        async with cluster(tmp_path, pg_url, policy=PARALLEL) as running, \
                client_of(running.url) as client:
            for run in range(2):
                calls = [("p.count", {"n": i + 1}) for i in range(7)] + \
                    [("p.send_mail", {"to": f"u{i}.{run}@example.org", "body": "hi"})
                     for i in range(3)]
                results: list[Any] = [None] * len(calls)

                async def one(i: int, name: str, arguments: dict[str, Any]) -> None:
                    results[i] = await client.call_tool(  # noqa: B023 - awaited in the pass
                        name, arguments, meta={"io.anfitrion/conversation": "fresh-one"})

                async with anyio.create_task_group() as tg:
                    for i, (name, arguments) in enumerate(calls):
                        tg.start_soon(one, i, name, arguments)
                texts = [_text(r) for r in results]
                assert [r.is_error for r in results] == [False] * 10, texts
                assert texts[:7] == [" ".join(str(k) for k in range(1, i + 2))
                                     for i in range(7)]
                assert sorted(effects.read_text().splitlines()) == [
                    f"mail to u{i}.{run}@example.org" for i in range(3)]
                effects.unlink()
            served = running.served()
            assert all(count >= 5 for count in served.values()), served
            store = open_store(pg_url)
            try:
                states = [s for s in await store.list_sessions()
                          if s.data.get("counters", {}).get("tool_calls")]
                records = await store.audit_records()
            finally:
                await store.close()
    ((state,),) = [states]
    assert state.data["counters"]["tool_calls"] == 20
    # both processes appended records at once: one chain, every batch where the head was
    report = verify_chain(records)
    assert report.ok, report.problem
    assert [r.seq for r in records] == list(range(1, len(records) + 1))
    assert sum(r.type == "execution.claimed" for r in records) >= 6


async def test_sigterm_drains_a_replica_and_hands_its_waiting_call_over(
        tmp_path: Path, pg_url: str) -> None:
    """Graceful shutdown: ``/readyz`` says 503 at once, the call waiting for a person is
    answered at once with the hand-over (not failed, not withdrawn), the process exits
    cleanly; the client's re-send continues the same request on the other replica, and the
    person's one answer runs it once."""
    mail = {"to": "ana@example.org", "body": "the report"}
    with anyio.fail_after(300):
        async with cluster(tmp_path, pg_url, approval_wait=60) as running:
            first, _ = running.ports  # type: ignore[attr-defined]
            process = running.replicas[first]
            store = open_store(pg_url)
            try:
                handed: list[tuple[Any, float]] = []

                async def waits_on_first() -> None:
                    async with client_of(f"http://127.0.0.1:{first}/mcp") as client:
                        result = await client.call_tool("p.send_mail", mail)
                        handed.append((result, time.monotonic()))

                async with anyio.create_task_group() as tg, \
                        httpx2.AsyncClient(timeout=5) as http:
                    tg.start_soon(waits_on_first)
                    request = await _the_request_waiting_for_a_person(store)
                    signalled = time.monotonic()
                    process.send_signal(signal.SIGTERM)
                    while (ready := await http.get(f"http://127.0.0.1:{first}/readyz")
                           ).status_code == 200:
                        await anyio.sleep(0.02)
                    assert (ready.status_code, ready.text) == (
                        503, "not ready: draining: this gateway process is shutting down\n")
                ((result, returned_at),) = handed
                assert result.is_error and "shutting down" in _text(result) and \
                    request.id in _text(result) and "Nothing was run" in _text(result)
                assert returned_at - signalled < 2.0, returned_at - signalled
                assert await anyio.to_thread.run_sync(process.wait, 30) == 0
                assert [r.id for r in await store.list_approvals()] == [request.id]
                await _resent_runs_on_one_approval(running.url, store, request, mail)
            finally:
                await store.close()
    assert (tmp_path / "fx.log").read_text() == "mail to ana@example.org\n"


async def test_a_dead_replicas_request_whose_client_never_comes_back_is_withdrawn(
        tmp_path: Path, pg_url: str) -> None:
    """The replica waiting for a person dies and the client does not send the call again
    within ``gateway.adoptWithin``: the live replica withdraws the request, saying why —
    the person can no longer approve it for nothing — and a late re-send runs nothing."""
    mail = {"to": "ana@example.org", "body": "the report"}
    with anyio.fail_after(300):
        async with cluster(tmp_path, pg_url, approval_wait=60,
                           gateway={"adoptWithin": 2}) as running:
            first, _ = running.ports  # type: ignore[attr-defined]
            store = open_store(pg_url)
            try:
                async with anyio.create_task_group() as tg:
                    async def waits_on_first() -> None:
                        with contextlib.suppress(Exception):  # its replica dies
                            async with client_of(f"http://127.0.0.1:{first}/mcp") as client:
                                await client.call_tool("p.send_mail", mail)

                    tg.start_soon(waits_on_first)
                    request = await _the_request_waiting_for_a_person(store)
                    running.kill(first)
                    tg.cancel_scope.cancel()  # the client is gone for good
                killed_at = time.monotonic()
                with anyio.fail_after(30):
                    while await store.list_approvals():
                        await anyio.sleep(0.1)
                assert time.monotonic() - killed_at >= 2  # not before adoptWithin
                found = await store.get_approval(request.id)
                assert found is not None and found.answer is not None
                assert found.answer.withdrawn and "died" in found.answer.note
                late = await answers.answer(store, request.id, None, approved=True,
                                            approver="bob", via="cli")
                assert late.answer is None and "died" in late.detail
                async with client_of(running.url) as client:
                    resent = await client.call_tool("p.send_mail", mail)
                assert resent.is_error, _text(resent)
            finally:
                await store.close()
    assert not (tmp_path / "fx.log").exists()
