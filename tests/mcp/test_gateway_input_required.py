"""Multi-round-trip requests through the gateway (MCP 2026-07-28): an upstream server's question
during a call reaches the 2026-07-28 client whose call it is, in the gateway's own
``input_required`` result, and the answer goes back to that very call — with the requestState
sealed by the gateway and bound to principal, call and expiry.

Real components: the official SDK client (2026-07-28, its own multi-round-trip driver or the
rounds driven by hand), ``anfitrion gateway``'s streamable HTTP, a real upstream server process
(``servers/asking.py``, which asks in ``input_required`` results too), and for two principals a
real issuer on loopback publishing its keys, the gateway checking each client's JWT.

An attacker who read the code: forges a state, flips one character of a sealed one, replays
an answered round, presents a state after its expiry, moves a state to another call or to other
arguments, answers questions that were not asked, and presents another principal's state."""

from __future__ import annotations

import json
import socket
import sys
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")
import httpx2
import jwt
import mcp.types as mt
import uvicorn
from cryptography.hazmat.primitives.asymmetric import rsa
from gateway_helpers import approve_all, serving_http, writes_allowed
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from anfitrion._tools import Effect
from anfitrion.mcp._config import ServerConfig
from anfitrion.mcp._gateway import Gateway
from anfitrion.mcp._gateway_input import MAX_HELD_PER_PRINCIPAL, InputRounds
from anfitrion.mcp._oauth_settings import OAuthSettings
from anfitrion.mcp._toolset import McpServers
from anfitrion.policy import Policy, Verdict
from anfitrion.store import MemoryStore
from mcp import Client

pytestmark = [pytest.mark.anyio, pytest.mark.mcp_servers]

ASKING = str(Path(__file__).parent / "servers" / "asking.py")
TOKEN = "test-token-0123456789abcdef"


class Person:
    """The client application's person: answers each question, remembering it."""

    def __init__(self, name: str = "Grace") -> None:
        self.name = name
        self.asked: list[str] = []

    async def __call__(self, context: Any, params: Any) -> mt.ElicitResult:
        self.asked.append(params.message)
        return mt.ElicitResult(action="accept", content={"name": self.name})


def free_socket() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock


@asynccontextmanager
async def gateway_of(store: MemoryStore, *, wait: float | None = None,
                     auth: OAuthSettings | None = None, sock: socket.socket | None = None,
                     policy: Policy | None = None) -> AsyncIterator[tuple[Gateway, str]]:
    config = ServerConfig(id="ask", command=sys.executable, args=(ASKING,), elicitation=True)
    await approve_all([config], store)
    sock = sock or free_socket()
    port = sock.getsockname()[1]
    async with McpServers([config], store) as servers:
        gateway = Gateway(servers, store=store, policy=policy or writes_allowed(),
                          own_names=True)
        if wait is not None:
            gateway.rounds = InputRounds(gateway._request_principal, wait=wait)
        async with serving_http(gateway, None if auth else TOKEN, auth=auth, sock=sock):
            yield gateway, f"http://127.0.0.1:{port}/mcp"


@asynccontextmanager
async def client_of(url: str, token: str = TOKEN, **callbacks: Any) -> AsyncIterator[Client]:
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=120),
                                  headers={"Authorization": f"Bearer {token}"}) as http, \
            Client(streamable_http_client(url, http_client=http), mode="auto",
                   **callbacks) as client:
        assert client.session.protocol_version == "2026-07-28"
        await client.list_tools()
        yield client


async def first_round(client: Client, arguments: dict[str, Any]) -> mt.InputRequiredResult:
    first = await client.session.call_tool("ask", arguments, allow_input_required=True)
    assert isinstance(first, mt.InputRequiredResult), first
    return first


def answers(first: mt.InputRequiredResult, name: str = "Grace") -> dict[str, Any]:
    return {key: mt.ElicitResult(action="accept", content={"name": name})
            for key in first.input_requests or {}}


async def test_the_upstreams_question_reaches_the_client_and_its_answer_the_call() -> None:
    store, person = MemoryStore(), Person()
    with anyio.fail_after(120):
        async with gateway_of(store) as (gateway, url), \
                client_of(url, elicitation_callback=person) as client:
            result = await client.call_tool("ask", {"kind": "form"})
            assert len(gateway.rounds) == 0  # nothing held once the call is over
    # the upstream read the answer only with its own requestState back (asking.py checks)
    assert result.content[0].text == 'elicited: accept {"name": "Grace"}'  # type: ignore[union-attr]
    assert person.asked == ["Who are you?"]
    relayed = [r.data["detail"] for r in await store.audit_records() if r.type == "mcp.relayed"]
    assert relayed and relayed[0].startswith("relayed to the client")


async def test_the_clients_state_is_the_gateways_sealed_one_never_the_upstreams() -> None:
    store = MemoryStore()
    with anyio.fail_after(120):
        async with gateway_of(store) as (_, url), client_of(url) as client:
            first = await first_round(client, {"kind": "form"})
            state = first.request_state or ""
            (request,) = (first.input_requests or {}).values()
            assert isinstance(request, mt.ElicitRequest)
            assert "asked:" not in state and state.startswith("v1.")  # sealed, not readable
            done = await client.session.call_tool(
                "ask", {"kind": "form"}, input_responses=answers(first), request_state=state)
    assert isinstance(done, mt.CallToolResult) and done.content[0].text.startswith(  # type: ignore[union-attr]
        "elicited: accept")


def flipped(state: str) -> str:
    middle = len(state) // 2
    return state[:middle] + ("A" if state[middle] != "A" else "B") + state[middle + 1:]


@pytest.mark.parametrize("attack", ["forged", "flipped", "other arguments", "other tool"])
async def test_a_state_that_is_not_this_calls_own_is_refused(attack: str) -> None:
    store = MemoryStore()
    with anyio.fail_after(120):
        async with gateway_of(store) as (_, url), client_of(url) as client:
            first = await first_round(client, {"kind": "form"})
            state = first.request_state or ""
            tool, arguments = "ask", {"kind": "form"}
            if attack == "forged":
                state = "v1." + "A" * 80
            elif attack == "flipped":
                state = flipped(state)
            elif attack == "other arguments":
                arguments = {"kind": "form", "who": "mallory"}
            else:
                tool = "caps"
            with pytest.raises(MCPError) as refused:
                await client.session.call_tool(tool, arguments, input_responses=answers(first),
                                               request_state=state, allow_input_required=True)
            assert refused.value.error.code == mt.INVALID_PARAMS
            assert refused.value.error.message == "Invalid or expired requestState"
            # the right state still completes the call it belongs to
            done = await client.session.call_tool(
                "ask", {"kind": "form"}, input_responses=answers(first),
                request_state=first.request_state)
    assert done.content[0].text.startswith("elicited: accept")  # type: ignore[union-attr]


async def test_a_replayed_round_is_refused() -> None:
    store = MemoryStore()
    with anyio.fail_after(120):
        async with gateway_of(store) as (_, url), client_of(url) as client:
            first = await first_round(client, {"kind": "form"})
            done = await client.session.call_tool(
                "ask", {"kind": "form"}, input_responses=answers(first),
                request_state=first.request_state)
            assert done.content[0].text.startswith("elicited: accept")  # type: ignore[union-attr]
            with pytest.raises(MCPError) as refused:  # the same answer, sent again
                await client.session.call_tool(
                    "ask", {"kind": "form"}, input_responses=answers(first, "Mallory"),
                    request_state=first.request_state, allow_input_required=True)
    assert refused.value.error.message == "Invalid or expired requestState"


async def test_an_expired_state_is_refused() -> None:
    store = MemoryStore()
    with anyio.fail_after(120):
        async with gateway_of(store, wait=1.0) as (_, url), client_of(url) as client:
            first = await first_round(client, {"kind": "form"})
            await anyio.sleep(1.5)
            with pytest.raises(MCPError) as refused:
                await client.session.call_tool(
                    "ask", {"kind": "form"}, input_responses=answers(first),
                    request_state=first.request_state, allow_input_required=True)
    assert refused.value.error.message == "Invalid or expired requestState"


async def test_answers_to_questions_not_asked_are_refused() -> None:
    store = MemoryStore()
    with anyio.fail_after(120):
        async with gateway_of(store) as (_, url), client_of(url) as client:
            first = await first_round(client, {"kind": "form"})
            with pytest.raises(MCPError) as refused:
                await client.session.call_tool(
                    "ask", {"kind": "form"},
                    input_responses={"other": mt.ElicitResult(action="accept")},
                    request_state=first.request_state, allow_input_required=True)
            assert "exactly this round's inputRequests" in refused.value.error.message
            # the round is still open for its real answers
            done = await client.session.call_tool(
                "ask", {"kind": "form"}, input_responses=answers(first),
                request_state=first.request_state)
    assert done.content[0].text.startswith("elicited: accept")  # type: ignore[union-attr]


@pytest.mark.parametrize("kind", ["secret", "api_key", "nested"])
async def test_a_question_asking_for_a_secret_never_reaches_the_client(kind: str) -> None:
    store, person = MemoryStore(), Person()
    with anyio.fail_after(120):
        async with gateway_of(store) as (_, url), \
                client_of(url, elicitation_callback=person) as client:
            result = await client.call_tool("ask", {"kind": kind})
    assert result.is_error and person.asked == []
    assert "refused by anfitrion" in result.content[0].text  # type: ignore[union-attr]
    relayed = [r.data["detail"] for r in await store.audit_records() if r.type == "mcp.relayed"]
    assert any(d.startswith("refused:") for d in relayed)


async def test_an_older_client_is_still_asked_with_a_request() -> None:
    """A 2025-11-25 client of the gateway: the upstream asks in 2026-07-28, the gateway asks
    its client with ``elicitation/create`` and answers the upstream's round."""
    store, person = MemoryStore(), Person("Ada")
    with anyio.fail_after(120):
        async with gateway_of(store) as (_, url), AsyncExitStack() as stack:
            http = await stack.enter_async_context(httpx2.AsyncClient(
                timeout=httpx2.Timeout(30, read=120),
                headers={"Authorization": f"Bearer {TOKEN}"}))
            read, write = await stack.enter_async_context(streamable_http_client(
                url, http_client=http))
            session = await stack.enter_async_context(ClientSession(
                read, write, elicitation_callback=person))
            await session.initialize()
            result = await session.call_tool("ask", {"kind": "form"})
    assert person.asked == ["Who are you?"]
    assert result.content[0].text == 'elicited: accept {"name": "Ada"}'  # type: ignore[union-attr]


# -- two principals --------------------------------------------------------------------------


@asynccontextmanager
async def issuer() -> AsyncIterator[tuple[str, rsa.RSAPrivateKey]]:
    """A real HTTP server on loopback publishing one RSA key (the tokens' issuer)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    body = json.dumps({"keys": [{**jwk, "kid": "k1", "alg": "RS256", "use": "sig"}]}).encode()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})

    sock = free_socket()
    server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_level="critical"))
    async with anyio.create_task_group() as tg:
        tg.start_soon(partial(server.serve, sockets=[sock]))
        with anyio.fail_after(30):
            while not server.started:
                await anyio.sleep(0.01)
        try:
            yield f"http://127.0.0.1:{sock.getsockname()[1]}", key
        finally:
            server.should_exit = True


def token_for(key: rsa.RSAPrivateKey, iss: str, audience: str, subject: str) -> str:
    now = int(time.time())
    return jwt.encode({"iss": iss, "sub": subject, "aud": audience, "iat": now, "exp": now + 600,
                       "scope": "tools"}, key, algorithm="RS256", headers={"kid": "k1"})


async def test_another_principals_state_is_refused_and_each_question_reaches_its_own_client(
        ) -> None:
    store, alice_person, bob_person = MemoryStore(), Person("Alice"), Person("Bob")
    sock = free_socket()
    resource = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    with anyio.fail_after(120):
        async with issuer() as (iss, key):
            auth = OAuthSettings(issuer=iss, jwks_uri=f"{iss}/jwks", resource=resource,
                                 allow_internal=True)
            alice, bob = (token_for(key, iss, resource, who) for who in ("alice", "bob"))
            # every write allowed: a write after reading the upstream's (untrusted) answer
            # would otherwise wait for a person (taint), which is not what is tested here
            everything = Policy([], defaults={Effect.WRITE: Verdict.ALLOW})
            async with gateway_of(store, auth=auth, sock=sock, policy=everything) as (_, url), \
                    client_of(url, alice, elicitation_callback=alice_person) as a, \
                    client_of(url, bob, elicitation_callback=bob_person) as b:
                first = await first_round(a, {"kind": "form"})
                with pytest.raises(MCPError) as refused:  # bob presents alice's round
                    await b.session.call_tool(
                        "ask", {"kind": "form"}, input_responses=answers(first, "Bob"),
                        request_state=first.request_state, allow_input_required=True)
                assert refused.value.error.message == "Invalid or expired requestState"
                done = await a.session.call_tool(
                    "ask", {"kind": "form"}, input_responses=answers(first, "Alice"),
                    request_state=first.request_state)
                # two calls at once, each client asked its own question only
                results: dict[str, str] = {}

                async def run(client: Client, who: str) -> None:  # (not a repeat: other
                    # arguments, so the repeat guard does not ask a person)
                    result = await client.call_tool("ask", {"kind": "form", "who": who})
                    results[who] = result.content[0].text  # type: ignore[union-attr]

                async with anyio.create_task_group() as tg:
                    tg.start_soon(run, a, "alice")
                    tg.start_soon(run, b, "bob")
    assert '"name": "Alice"' in done.content[0].text  # type: ignore[union-attr]
    assert '"name": "Alice"' in results["alice"] and '"name": "Bob"' in results["bob"]
    assert alice_person.asked == ["Who are you?"] and bob_person.asked == ["Who are you?"]


# -- subscriptions/listen ----------------------------------------------------------------------


async def test_a_listen_stream_is_told_when_the_offered_tools_change() -> None:
    """2026-07-28 has no standing stream: a client opens ``subscriptions/listen`` and gets the
    lists' changes on it (what a 2025 client gets as ``notifications/tools/list_changed``)."""
    store = MemoryStore()
    with anyio.fail_after(120):
        async with gateway_of(store) as (gateway, url), client_of(url) as client:
            tools = client.session.server_capabilities.tools  # type: ignore[union-attr]
            assert tools is not None and tools.list_changed
            async with client.listen(tools_list_changed=True) as subscription:
                assert subscription.honored.tools_list_changed
                await gateway.tools_changed()  # what a pin change or the upstream's notice does
                with anyio.fail_after(10):
                    event = await subscription.__anext__()
    assert type(event).__name__ == "ToolsListChanged"


async def test_one_principal_cannot_pile_up_unanswered_calls() -> None:
    """Each held call waits up to its expiry for an answer: a principal's are capped, another
    principal's are not affected."""
    who = ["mallory"]
    rounds = InputRounds(lambda: who[0], wait=30)
    released = anyio.Event()

    async def asks_forever(held: Any) -> Any:
        await held.ask("elicitation/create", mt.ElicitRequestFormParams(
            message="?", requested_schema={"type": "object", "properties": {
                "a": {"type": "string"}}}))
        await released.wait()

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            rounds.tasks = tg
            for i in range(MAX_HELD_PER_PRINCIPAL):
                first = await rounds.call(mt.CallToolRequestParams(
                    name="ask", arguments={"i": i}), asks_forever)
                assert isinstance(first, mt.InputRequiredResult)
            with pytest.raises(MCPError, match="in flight or waiting"):
                await rounds.call(mt.CallToolRequestParams(name="ask", arguments={}),
                                  asks_forever)
            who[0] = "alice"
            other = await rounds.call(mt.CallToolRequestParams(name="ask", arguments={}),
                                      asks_forever)
            assert isinstance(other, mt.InputRequiredResult)
            released.set()
            tg.cancel_scope.cancel()
