"""Wrong bearer tokens are throttled per client on every door that takes one — the gateway's
static token, the gateway's OAuth access tokens, the inbox's JSON API (shared with its
sign-in) — in bounded memory, audited once per episode, and never at the price of the person:
the token is compared first, so the right token passes from a client in the middle of a flood.

An attacker who read ``anfitrion._throttle``: sprays wrong tokens from the address the person
also uses (loopback), rotates ``X-Forwarded-For`` and the low bits of an IPv6 address to look
like many clients, alternates the inbox's two doors to double its rate, fills the table with
thousands of addresses, and sends no token at all to get the person throttled.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from starlette.testclient import TestClient

pytest.importorskip("mcp")
sys.path.insert(0, str(Path(__file__).parent))  # the forged-token issuer of the OAuth tests
from test_gateway_refuses_tokens_it_cannot_trust import rsa_key, setup

from anfitrion import _throttle
from anfitrion._throttle import GuessThrottle
from anfitrion.mcp._gateway_http import HttpGuard
from anfitrion.store import MemoryStore
from anfitrion.web import create_app

pytestmark = pytest.mark.anyio

TOKEN = "gateway-token-0123456789abcdef"
HOST = "127.0.0.1:8765"
INBOX_TOKEN = "inbox-token-0123456789abcdef"
PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}


async def _endpoint(scope: Any, receive: Any, send: Any) -> None:
    """Stands for the MCP SDK: reached only by an authenticated request."""
    body = b"reached"
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class Peers:
    """One ASGI client per peer address, as a server sets ``scope["client"]`` from the socket."""

    def __init__(self, guard: HttpGuard) -> None:
        self.guard = guard
        self.clients: dict[str, httpx2.AsyncClient] = {}

    async def post(self, peer: str, token: str | None, **headers: str) -> httpx2.Response:
        if peer not in self.clients:
            transport = httpx2.ASGITransport(app=self.guard, client=(peer, 40000))
            self.clients[peer] = httpx2.AsyncClient(transport=transport,
                                                    base_url=f"http://{HOST}")
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        return await self.clients[peer].post("/mcp", json=PING, headers=headers)

    async def close(self) -> None:
        for client in self.clients.values():
            await client.aclose()


@asynccontextmanager
async def static_gateway() -> AsyncIterator[tuple[Peers, list[dict[str, Any]]]]:
    audited: list[dict[str, Any]] = []

    async def on_throttled(data: Any) -> None:
        audited.append(dict(data))

    peers = Peers(HttpGuard(_endpoint, token=TOKEN, allowed_hosts={HOST},
                            on_throttled=on_throttled))
    try:
        yield peers, audited
    finally:
        await peers.close()


async def test_the_right_token_passes_from_the_flooding_client_and_its_guesses_get_429() -> None:
    async with static_gateway() as (peers, audited):
        answers = [(await peers.post("127.0.0.1", f"guess-{i:026d}")).status_code
                   for i in range(30)]
        assert answers[:9] == [401] * 9 and set(answers[9:]) == {429}
        refused = await peers.post("127.0.0.1", "still-guessing-0123456789")
        assert refused.status_code == 429 and 1 <= int(refused.headers["retry-after"]) <= 60
        # the person shares 127.0.0.1 with the flood: the token is compared first
        person = await peers.post("127.0.0.1", TOKEN)
        assert person.status_code == 200 and person.text == "reached"
        # another client's wrong token is merely wrong
        assert (await peers.post("198.51.100.20", "wrong-0123456789abcdef")).status_code == 401
        # one audit record for the whole episode (31 refused guesses), never a token
        assert audited == [{"door": "gateway", "client": "127.0.0.1", "failures": 10,
                            "window_seconds": 60.0, "retry_after": 60}]


async def test_headers_and_ipv6_low_bits_do_not_make_an_attacker_many_clients() -> None:
    async with static_gateway() as (peers, _):
        statuses = [(await peers.post("203.0.113.7", "wrong-0123456789abcdef",
                                      **{"X-Forwarded-For": f"10.0.0.{i}",
                                         "X-Real-IP": f"10.1.0.{i}"})).status_code
                    for i in range(12)]
        assert statuses[-1] == 429
        ipv6 = [(await peers.post(f"2001:db8:1:2::{i:x}", "wrong-0123456789abcdef")).status_code
                for i in range(12)]
        assert ipv6[-1] == 429
        # an IPv4-mapped IPv6 peer is the IPv4 client it maps
        assert (await peers.post("::ffff:203.0.113.7", "wrong-0123456789abcdef")
                ).status_code == 429


async def test_requests_without_a_token_do_not_throttle_the_client() -> None:
    """No token is not a guess: an attacker cannot get the person's address throttled by
    sending nothing (and the person's own wrong tokens are then still merely wrong)."""
    async with static_gateway() as (peers, audited):
        assert {(await peers.post("127.0.0.1", None)).status_code for _ in range(30)} == {401}
        assert (await peers.post("127.0.0.1", "a-typo-0123456789abcdef")).status_code == 401
        assert audited == []


async def test_spraying_from_many_addresses_keeps_the_table_bounded(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_throttle, "MAX_THROTTLED_CLIENTS", 64)
    async with static_gateway() as (peers, _):
        for i in range(300):
            await peers.post(f"10.9.{i // 250}.{i % 250}", "wrong-0123456789abcdef")
            assert len(peers.guard.throttle) <= 64
        assert (await peers.post("10.9.0.0", TOKEN)).status_code == 200


def test_the_throttle_bounds_memory_per_client_and_forgets_after_the_window() -> None:
    throttle = GuessThrottle(max_clients=8)
    for i in range(10_000):
        throttle.record("198.51.100.1", now=float(i) / 1000)
    assert len(throttle._failures["198.51.100.1"]) == throttle.max_failures
    assert throttle.record("198.51.100.1", now=1000.0) is None  # a minute of quiet: free again


async def test_oauth_wrong_tokens_are_throttled_and_a_valid_token_passes_from_the_same_client(
        ) -> None:
    async with setup() as s:
        audited: list[dict[str, Any]] = []

        async def on_throttled(data: Any) -> None:
            audited.append(dict(data))

        peers = Peers(HttpGuard(_endpoint, token=None, allowed_hosts={HOST}, oauth=s.resource,
                                on_throttled=on_throttled))
        try:
            forged = [(await peers.post("127.0.0.1", s.token(key=rsa_key()))).status_code
                      for _ in range(12)]
            assert forged[:9] == [401] * 9 and forged[9:] == [429] * 3
            # a valid token lacking the scope is not a guess (403, not counted, not 429)
            assert (await peers.post("198.51.100.9", s.token(scope="other"))).status_code == 403
            assert len(peers.guard.throttle) == 1
            assert (await peers.post("127.0.0.1", s.token())).status_code == 200
        finally:
            await peers.close()
        [record] = audited
        assert record["door"] == "gateway" and record["client"] == "127.0.0.1"
        # every refusal is still audited as a refusal, without the token
        assert len(s.refused) == 13 and "eyJ" not in json.dumps(s.refused)


def _inbox(store: MemoryStore) -> TestClient:
    return TestClient(create_app(store, token=INBOX_TOKEN, allowed_hosts=["testserver"]),
                      base_url="http://testserver", follow_redirects=False)


async def test_the_inbox_api_throttles_wrong_bearer_tokens_and_the_right_one_still_works(
        ) -> None:
    store = MemoryStore()
    with _inbox(store) as inbox:
        wrong = {"Authorization": "Bearer wrong-0123456789abcdef"}
        answers = [inbox.get("/api/v1/approvals", headers=wrong).status_code
                   for _ in range(15)]
        assert answers[:9] == [401] * 9 and set(answers[9:]) == {429}
        assert 1 <= int(inbox.get("/api/v1/effects", headers=wrong).headers["retry-after"]) <= 60
        right = {"Authorization": f"Bearer {INBOX_TOKEN}"}
        assert inbox.get("/api/v1/approvals", headers=right).status_code == 200
        assert {inbox.get("/api/v1/approvals").status_code for _ in range(3)} == {401}
    records = [r for r in await store.audit_records() if r.type == "inbox.auth_throttled"]
    assert [dict(r.data)["client"] for r in records] == ["testclient"]
    assert "wrong-0123456789abcdef" not in json.dumps([dict(r.data) for r in records])


def test_alternating_the_inbox_doors_does_not_double_the_guesses() -> None:
    with _inbox(MemoryStore()) as inbox:
        wrong_api = {"Authorization": "Bearer wrong-0123456789abcdef"}
        form = {"token": "wrong-0123456789abcdef", "name": "eve"}
        for _ in range(5):
            assert inbox.get("/api/v1/approvals", headers=wrong_api).status_code == 401
            inbox.post("/login", data=form, headers={"origin": "http://testserver"})
        assert inbox.get("/api/v1/approvals", headers=wrong_api).status_code == 429
        signed_in = inbox.post("/login", data={"token": INBOX_TOKEN, "name": "carol"},
                               headers={"origin": "http://testserver"})
        assert signed_in.status_code == 303
