"""The gateway as an OAuth resource server refuses, by class, every token it cannot trust —
each a clear 401/403 (or 503 when the issuer's keys cannot be had), an audit record, never a
traceback and never another identity.

An attacker who read our code: forges tokens (``alg: none``, HMAC signed with the issuer's
public key, a key of their own under a known or made-up ``kid``), replays expired or future
tokens, presents tokens of other issuers or audiences, tampers with claims, floods the gateway
with unknown key ids, and points key and metadata URLs at internal addresses. The issuer's
key set is served by a real HTTP server on loopback that can also hang, answer garbage, or
answer too much.
"""

from __future__ import annotations

import base64
import json
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("mcp")
import httpx2
import jwt
import uvicorn
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from anfitrion.mcp._gateway_auth import AuthRefused, OAuthResource
from anfitrion.mcp._gateway_http import HttpGuard
from anfitrion.mcp._oauth_settings import OAuthSettings

pytestmark = pytest.mark.anyio

RESOURCE = "http://127.0.0.1:8765/mcp"


def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def public_jwk(key: Any, kid: str, alg: str = "RS256") -> dict[str, Any]:
    found: dict[str, Any] = json.loads(jwt.algorithms.get_default_algorithms()[alg]
                                       .to_jwk(key.public_key()))
    return {**found, "kid": kid, "alg": alg, "use": "sig"}


@dataclass
class Issuer:
    """A real HTTP server on loopback publishing a key set (or misbehaving)."""

    url: str = ""
    keys: list[dict[str, Any]] = field(default_factory=list)
    mode: str = "keys"  # keys | hang | garbage | huge | empty
    requests: int = 0

    async def app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        self.requests += 1
        if self.mode == "hang":
            await anyio.sleep_forever()
        body = {"keys": json.dumps({"keys": self.keys}).encode(),
                "garbage": b"<html>not json",
                "huge": b'{"keys": [' + b'{"kty":"RSA"},' * 40000 + b"{}]}",
                "empty": b'{"keys": []}'}[self.mode]
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})


@asynccontextmanager
async def issuer_server() -> AsyncIterator[Issuer]:
    issuer = Issuer()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    issuer.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(uvicorn.Config(issuer.app, log_level="critical", lifespan="off",
                                           interface="asgi3"))
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: server.serve(sockets=[sock]))
            with anyio.fail_after(10):
                while not server.started:
                    await anyio.sleep(0.01)
            try:
                yield issuer
            finally:
                server.should_exit = True
                tg.cancel_scope.cancel()
    finally:
        sock.close()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Setup:
    issuer: Issuer
    key: rsa.RSAPrivateKey
    resource: OAuthResource
    clock: Clock
    refused: list[dict[str, Any]]

    def token(self, key: Any = None, kid: str = "k1", alg: str = "RS256",
              **claims: Any) -> str:
        now = int(time.time())
        payload = {"iss": self.issuer.url, "aud": RESOURCE, "sub": "alice",
                   "client_id": "app", "scope": "tools:read", "iat": now, "exp": now + 300,
                   **claims}
        payload = {k: v for k, v in payload.items() if v is not None}
        return jwt.encode(payload, key or self.key, algorithm=alg, headers={"kid": kid})


@asynccontextmanager
async def setup(**options: Any) -> AsyncIterator[Setup]:
    async with issuer_server() as issuer:
        key = rsa_key()
        issuer.keys = [public_jwk(key, "k1")]
        refused: list[dict[str, Any]] = []

        async def on_refused(data: Any) -> None:
            refused.append(dict(data))

        settings = OAuthSettings(issuer=issuer.url, jwks_uri=f"{issuer.url}/jwks",
                                 resource=RESOURCE, allow_internal=True, fetch_timeout=1.0,
                                 required_scopes=("tools:read",))
        clock = Clock()
        resource = OAuthResource(replace(settings, **options), RESOURCE,
                                 on_refused=on_refused, clock=clock)
        yield Setup(issuer, key, resource, clock, refused)


async def refusal(s: Setup, token: str) -> AuthRefused:
    with pytest.raises(AuthRefused) as caught:
        await s.resource.authenticate({"authorization": f"Bearer {token}"})
    assert "\n" not in caught.value.reason and token not in caught.value.reason
    return caught.value


def b64(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


async def test_a_valid_token_gives_its_subject_scopes_and_client() -> None:
    async with setup() as s:
        user = await s.resource.authenticate({"authorization": f"Bearer {s.token()}"})
        assert user.access_token.subject == "alice"
        assert user.scopes == ["tools:read"] and user.access_token.client_id == "app"


async def test_forged_algorithms_are_refused() -> None:
    async with setup() as s:
        now = int(time.time())
        claims = {"iss": s.issuer.url, "aud": RESOURCE, "sub": "mallory", "exp": now + 300,
                  "scope": "tools:read"}
        unsigned = f"{b64({'alg': 'none', 'kid': 'k1'})}.{b64(claims)}."
        assert "algorithm 'none'" in (await refusal(s, unsigned)).reason
        # HS256 "signed" with the issuer's public key: the algorithm-confusion forgery
        pem = s.key.public_key().public_bytes(serialization.Encoding.PEM,
                                              serialization.PublicFormat.SubjectPublicKeyInfo)
        confused = _hmac_token(claims, pem)
        assert "algorithm 'HS256'" in (await refusal(s, confused)).reason
        # a key of the attacker's own under the issuer's kid, or under a made-up kid
        assert (await refusal(s, s.token(key=rsa_key()))).status == 401
        assert (await refusal(s, s.token(key=rsa_key(), kid="mine"))).status == 401
        # an EC token against an RSA key id
        ec_key = ec.generate_private_key(ec.SECP256R1())
        assert "does not match" in (await refusal(s, s.token(key=ec_key, alg="ES256"))).reason


def _hmac_token(claims: dict[str, Any], secret: bytes) -> str:
    import hashlib
    import hmac

    signing = f"{b64({'alg': 'HS256', 'kid': 'k1', 'typ': 'JWT'})}.{b64(claims)}"
    mac = hmac.new(secret, signing.encode(), hashlib.sha256).digest()
    return f"{signing}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"


async def test_time_issuer_and_audience_are_checked_with_a_small_leeway() -> None:
    async with setup(leeway=30.0) as s:
        now = int(time.time())
        assert "expired" in (await refusal(s, s.token(exp=now - 120))).reason
        assert "not valid yet" in (await refusal(s, s.token(nbf=now + 600))).reason
        await s.resource.authenticate({"authorization": f"Bearer {s.token(exp=now - 10)}"})
        assert "another issuer" in (await refusal(s, s.token(iss="https://evil.example"))).reason
        assert "another audience" in (await refusal(
            s, s.token(aud="https://other.example/mcp"))).reason
        assert "'exp'" in (await refusal(s, s.token(exp=None))).reason
        assert "principal" not in (await refusal(s, s.token(aud=[]))).reason


async def test_missing_scope_is_403_and_a_missing_subject_never_becomes_someone() -> None:
    async with setup() as s:
        refused = await refusal(s, s.token(scope="notes:read"))
        assert (refused.status, refused.error, refused.scope) == (403, "insufficient_scope",
                                                                  "tools:read")
        assert "'sub'" in (await refusal(s, s.token(sub=None))).reason
        assert "'sub'" in (await refusal(s, s.token(sub=""))).reason
        assert (await refusal(s, s.token(sub=["alice", "bob"]))).status == 401
        assert (await refusal(s, s.token(sub="alice\nbob"))).status == 401


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(position=st.integers(min_value=0), flip=st.integers(min_value=1, max_value=255))
def test_a_tampered_token_never_authenticates(position: int, flip: int) -> None:
    async def run() -> None:
        async with setup() as s:
            token = s.token()
            header, payload, signature = token.split(".")
            forged_claims = json.loads(base64.urlsafe_b64decode(payload + "=="))
            forged_claims["sub"] = "admin"
            forged = f"{header}.{b64(forged_claims)}.{signature}"
            assert (await refusal(s, forged)).status == 401
            raw = bytearray(token.encode())
            at = position % len(raw)
            raw[at] = (raw[at] + flip) % 128 or 1
            mutated = raw.decode("latin-1")
            if mutated == token:
                return
            try:
                user = await s.resource.authenticate({"authorization": f"Bearer {mutated}"})
            except AuthRefused as exc:
                assert exc.status in (401, 403)
            else:  # only a change the signature does not cover (base64 padding bits)
                assert user.access_token.subject == "alice"

    anyio.run(run)


async def test_a_rotated_key_works_after_one_fetch_and_made_up_kids_cannot_flood() -> None:
    async with setup() as s:
        await s.resource.authenticate({"authorization": f"Bearer {s.token()}"})
        assert s.issuer.requests == 1
        attacker = rsa_key()
        for i in range(20):  # a flood of made-up key ids: no fetch within 10 s of the last
            await refusal(s, s.token(key=attacker, kid=f"made-up-{i}"))
        assert s.issuer.requests == 1
        s.clock.now += 11
        for i in range(20):  # then one fetch, and none again for 10 s
            await refusal(s, s.token(key=attacker, kid=f"again-{i}"))
        assert s.issuer.requests == 2
        new = rsa_key()
        s.issuer.keys.append(public_jwk(new, "k2"))
        await refusal(s, s.token(key=new, kid="k2"))  # within the 10 s: not fetched again
        s.clock.now += 11
        user = await s.resource.authenticate({"authorization":
                                              f"Bearer {s.token(key=new, kid='k2')}"})
        assert user.access_token.subject == "alice" and s.issuer.requests == 3


@pytest.mark.parametrize("mode", ["hang", "garbage", "huge", "empty"])
async def test_a_key_set_that_hangs_or_is_garbage_is_a_bounded_clear_refusal(mode: str) -> None:
    async with setup() as s:
        s.issuer.mode = mode
        started = time.monotonic()
        refused = await refusal(s, s.token())
        assert refused.status == 503 and refused.error == "temporarily_unavailable"
        assert time.monotonic() - started < 10  # fetchTimeout is 1 s
        # keys known before stay in use when a later fetch fails
        s.issuer.mode = "keys"
        s.clock.now += 11
        await s.resource.authenticate({"authorization": f"Bearer {s.token()}"})
        s.issuer.mode = mode
        s.clock.now += 1000  # stale: fetched again, fails, the known key still verifies
        await s.resource.authenticate({"authorization": f"Bearer {s.token()}"})


@pytest.mark.parametrize("target", ["http://127.0.0.1:9/jwks", "https://127.0.0.1/jwks",
                                    "https://169.254.169.254/latest/meta-data",
                                    "https://10.0.0.8/jwks", "https://[::1]/jwks",
                                    "https://[::ffff:127.0.0.1]/jwks", "https://localhost/jwks",
                                    "https://0x7f.1/jwks"])
async def test_key_and_metadata_urls_at_internal_addresses_are_refused(target: str) -> None:
    async with setup(allow_internal=False, jwks_uri=target) as s:
        refused = await refusal(s, s.token())
        assert refused.status == 503
        assert "internal address" in refused.reason or "only https" in refused.reason
    async with setup(allow_internal=False, jwks_uri=None) as s:  # discovered from metadata
        refused = await refusal(s, s.token())
        assert refused.status == 503 and s.issuer.requests == 0


async def test_the_guard_answers_401_with_the_challenge_and_audits_without_the_token() -> None:
    async with setup() as s:
        async def app(scope: Any, receive: Any, send: Any) -> None:
            raise AssertionError("an unauthenticated request reached the MCP endpoint")

        guard = HttpGuard(app, token=None, allowed_hosts={"127.0.0.1:8765"}, oauth=s.resource)
        transport = httpx2.ASGITransport(app=guard)
        async with httpx2.AsyncClient(transport=transport,
                                      base_url="http://127.0.0.1:8765") as http:
            forged = s.token(key=rsa_key())
            response = await http.post("/mcp", headers={"Authorization": f"Bearer {forged}"},
                                       json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
            meta = await http.get("/.well-known/oauth-protected-resource/mcp")
        assert response.status_code == 401
        assert 'resource_metadata="http://127.0.0.1:8765/.well-known/oauth-protected-resource' \
            '/mcp"' in response.headers["www-authenticate"]
        assert meta.json()["resource"] == RESOURCE
        [record] = s.refused
        assert record["status"] == 401 and forged not in json.dumps(record)
