"""Sign-in throttling: wrong tokens are counted per client, in bounded memory, and the correct
token always signs in — a flood of wrong tokens, from anyone, cannot lock the person out."""

from __future__ import annotations

import hmac
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient
from starlette.types import ASGIApp, Receive, Scope, Send

from anfitrion.store import MemoryStore
from anfitrion.web import _security, create_app
from anfitrion.web._security import SignInThrottle, client_key

from .inbox_support import ORIGIN, TOKEN

H = {"origin": ORIGIN}
WRONG = {"token": "guess-guess-guess-guess", "name": "eve"}
RIGHT = {"token": TOKEN, "name": "carol"}


def _peer_from_header(app: ASGIApp) -> ASGIApp:
    """Sets the ASGI peer address from ``x-test-peer``, as a server does from the socket."""
    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            for name, value in scope["headers"]:
                if name == b"x-test-peer":
                    scope = {**scope, "client": (value.decode(), 40000)}
        await app(scope, receive, send)
    return wrapped


@pytest.fixture
def peers() -> Iterator[TestClient]:
    app = create_app(MemoryStore(), token=TOKEN, allowed_hosts=["testserver"])
    with TestClient(_peer_from_header(app), base_url=ORIGIN,
                    follow_redirects=False) as client:
        yield client


def _login(client: TestClient, peer: str, form: dict[str, str]) -> Any:
    return client.post("/login", data=form, headers={**H, "x-test-peer": peer})


def test_many_wrong_tokens_from_one_client_do_not_throttle_another(peers: TestClient) -> None:
    answers = [_login(peers, "203.0.113.7", WRONG).status_code for _ in range(25)]
    assert answers[:9] == [401] * 9 and set(answers[9:]) == {429}
    # another address: its own wrong tokens are merely wrong, and its right token works
    assert _login(peers, "198.51.100.20", WRONG).status_code == 401
    assert _login(peers, "198.51.100.20", RIGHT).status_code == 303


def test_the_right_token_signs_in_during_a_flood_even_from_the_flooding_client(
        peers: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    """Behind loopback every local program is 127.0.0.1: the person and the flood are one
    client, so the token is compared before anything is refused."""
    with caplog.at_level(logging.WARNING, "anfitrion.web"):
        for _ in range(30):
            assert _login(peers, "127.0.0.1", WRONG).status_code in (401, 429)
    # one warning for the episode, not one per refused guess
    warned = [m for m in caplog.messages if "wrong tokens from 127.0.0.1" in m]
    assert len(warned) == 1
    assert warned[0].startswith("sign-in: 10 wrong tokens from 127.0.0.1 within 60 s; its "
                                "wrong tokens are refused for ")
    refused = _login(peers, "127.0.0.1", WRONG)
    assert refused.status_code == 429
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    assert "anfitrion_session" not in refused.headers.get("set-cookie", "")
    signed_in = _login(peers, "127.0.0.1", RIGHT)
    assert signed_in.status_code == 303
    assert "anfitrion_session=" in signed_in.headers["set-cookie"]
    assert peers.get("/").status_code == 200
    # and the flood goes on being refused afterwards
    assert _login(peers, "127.0.0.1", WRONG).status_code == 429


def test_the_peer_address_of_the_connection_is_the_client() -> None:
    """Without any shim: Starlette's TestClient sets the ASGI client like a server does; a
    forged X-Forwarded-For does not make a new client."""
    app = create_app(MemoryStore(), token=TOKEN, allowed_hosts=["testserver"])
    with TestClient(app, base_url=ORIGIN, follow_redirects=False,
                    client=("192.0.2.1", 1234)) as eve, \
            TestClient(app, base_url=ORIGIN, follow_redirects=False,
                       client=("192.0.2.2", 1234)) as carol:
        for i in range(12):
            eve.post("/login", data=WRONG, headers={**H, "x-forwarded-for": f"10.0.0.{i}"})
        assert eve.post("/login", data=WRONG, headers=H).status_code == 429
        assert carol.post("/login", data=WRONG, headers=H).status_code == 401
        assert eve.post("/login", data=RIGHT, headers=H).status_code == 303


def test_the_client_table_stays_bounded_under_many_distinct_clients(
        peers: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the app: once more clients failed than the table holds, the oldest client is
    forgotten (its count restarts) instead of the table growing."""
    monkeypatch.setattr(_security, "MAX_THROTTLED_CLIENTS", 50)
    app = create_app(MemoryStore(), token=TOKEN, allowed_hosts=["testserver"])
    with TestClient(_peer_from_header(app), base_url=ORIGIN,
                    follow_redirects=False) as client:
        for _ in range(9):
            _login(client, "192.0.2.99", WRONG)
        for i in range(60):  # more distinct clients than the table holds
            assert _login(client, f"198.51.100.{i}", WRONG).status_code == 401
        assert _login(client, "192.0.2.99", WRONG).status_code == 401  # forgotten: counted anew
    # the control: without the other clients the same tenth wrong token is refused
    for _ in range(9):
        _login(peers, "192.0.2.99", WRONG)
    assert _login(peers, "192.0.2.99", WRONG).status_code == 429


def test_the_throttle_table_never_holds_more_than_its_bound() -> None:
    throttle = SignInThrottle(max_clients=100)
    for i in range(100_000):
        throttle.failed(f"client-{i}", now=float(i) / 1000)
        assert len(throttle) <= 100
    for _ in range(10):
        wait = throttle.failed("eve", now=200.0)
    assert wait == 60.0  # the clients at most a minute old are kept; eve is throttled
    assert throttle.failed("carol", now=300.0) is None  # a minute later: everyone forgotten
    assert len(throttle) == 1


def test_ipv6_clients_are_counted_per_64_and_mapped_ipv4_as_ipv4() -> None:
    def key(host: str) -> str:
        return client_key({"type": "http", "client": (host, 1)})

    assert key("2001:db8:1:2:aaaa::1") == key("2001:db8:1:2:bbbb::2") == "2001:db8:1:2::/64"
    assert key("2001:db8:1:3::1") != key("2001:db8:1:2::1")
    assert key("::ffff:192.0.2.1") == key("192.0.2.1") == "192.0.2.1"
    assert client_key({"type": "http", "client": None}) == "unknown"


def test_sign_in_compares_the_token_in_constant_time(
        peers: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    compared: list[tuple[bytes, bytes]] = []
    constant_time = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return constant_time(a, b)

    monkeypatch.setattr(_security.hmac, "compare_digest", spy)
    assert _login(peers, "192.0.2.5", WRONG).status_code == 401
    assert _login(peers, "192.0.2.5", RIGHT).status_code == 303
    assert (WRONG["token"].encode(), TOKEN.encode()) in compared
    assert (TOKEN.encode(), TOKEN.encode()) in compared


def test_a_token_that_is_not_valid_unicode_is_just_wrong() -> None:
    assert _security.token_matches("\ud800" * 20, TOKEN) is False
