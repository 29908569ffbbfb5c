"""Reviewers sign in to the inbox with OpenID Connect at the real provider (oidc-provider), the
same issuer the gateway trusts: the reviewer is the ID token's subject, answers record it with
the issuer and the name, entitlements apply to it — and every way of slipping someone else's
identity, or no identity, into a session is refused, each as an attacker who read the code."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

import anyio
import httpx2
import pytest

pytest.importorskip("mcp")
pytest.importorskip("starlette")
from gateway_oauth import onward_path, provider_url
from idp import Idp, start, stop

from anfitrion import ApprovalRequest, Quorum
from anfitrion._entitlements import Grant, grant
from anfitrion.channels import Reviewers
from anfitrion.mcp._oauth_settings import SignInSettings
from anfitrion.store import MemoryStore
from anfitrion.web import create_app
from anfitrion.web._oidc import OidcSignIn
from anfitrion.web._signin import SIGN_IN_COOKIE

pytestmark = [pytest.mark.anyio]

BASE = "http://127.0.0.1:8765"
CALLBACK = f"{BASE}/login/callback"
SHARED = "shared-inbox-token-0123456789"
CAROL = "carol-reviewer-token-0123456789"


class SwapIdToken(httpx2.AsyncBaseTransport):
    """The network as the inbox sees it, except that the token endpoint's answer carries
    *id_token* instead of the provider's own (a mix-up, a token endpoint not to be trusted)."""

    def __init__(self) -> None:
        self.real = httpx2.AsyncHTTPTransport()
        self.id_token: str | None = None

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self.real.handle_async_request(request)
        if self.id_token is None or request.method != "POST" or not (
                request.url.path.endswith("/token")):
            return response
        body = json.loads(await response.aread())
        await response.aclose()
        body["id_token"] = self.id_token
        return httpx2.Response(response.status_code, stream=_Body(json.dumps(body).encode()),
                               headers={"content-type": "application/json"})

    async def aclose(self) -> None:
        await self.real.aclose()


class _Body(httpx2.AsyncByteStream):
    def __init__(self, data: bytes) -> None:
        self.data = data

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self.data


@dataclass
class Inbox:
    idp: Idp
    store: MemoryStore
    client: tuple[str, str]
    network: SwapIdToken
    app: Any

    def browser(self, origin: str | None = BASE) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(transport=httpx2.ASGITransport(app=self.app), base_url=BASE,
                                  follow_redirects=False,
                                  headers={"origin": origin} if origin else {})

    async def start(self, browser: httpx2.AsyncClient, **form: str) -> str:
        """Presses "Sign in at …": the provider's authorization URL the browser is sent to."""
        return provider_url(await browser.post("/login/oidc", data=form))

    async def at_provider(self, url: str, user: str) -> str:
        """The person at the provider, logged in as *user*: the callback URL it sends the
        browser back to."""
        return await authorize(self.idp, url, user, CALLBACK)

    async def sign_in(self, browser: httpx2.AsyncClient, user: str) -> httpx2.Response:
        return await browser.get(await self.at_provider(await self.start(browser), user))

    async def records(self, kind: str) -> list[dict[str, Any]]:
        return [dict(r.data) for r in await self.store.audit_records() if r.type == kind]


async def authorize(idp: Idp, url: str, user: str, callback: str) -> str:
    async with httpx2.AsyncClient(follow_redirects=False, timeout=30) as at_idp:
        url = f"{url}&login_hint={user}"
        for _ in range(10):
            response = await at_idp.get(url)
            location = response.headers.get("location", "")
            assert response.status_code in (302, 303), response.text[:300]
            url = location if location.startswith("http") else idp.issuer + location
            if url.startswith(callback):
                return url
    raise AssertionError("the provider never sent the browser back")


def with_query(url: str, **changes: str) -> str:
    parts = urlsplit(url)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    return urlunsplit(parts._replace(query=urlencode({**query, **changes})))


def query_of(url: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}


def settings(idp: Idp, client: tuple[str, str], **more: Any) -> SignInSettings:
    return SignInSettings(**{"issuer": idp.issuer, "client_id": client[0],
                             "client_secret": client[1], "allow_internal": True,
                             "scopes": ("openid", "profile", "roles"), "roles_claim": "roles",
                             **more})


@asynccontextmanager
async def inbox_for(idp: Idp) -> AsyncIterator[Inbox]:
    client = idp.register(CALLBACK)
    store = MemoryStore()
    network = SwapIdToken()
    oidc = OidcSignIn(settings(idp, client), CALLBACK, transport=network)
    app = create_app(store, token=SHARED, oidc=oidc,
                     reviewers=Reviewers.from_tokens({"carol": (CAROL, ())}))
    try:
        yield Inbox(idp, store, client, network, app)
    finally:
        await network.aclose()


async def signed_in_as(browser: httpx2.AsyncClient) -> str | None:
    """Who the inbox's pages say is signed in (None: sent to the sign-in page)."""
    page = await browser.get("/")
    if page.status_code == 303:
        return None
    assert page.status_code == 200, page.text
    return page.text


async def pay_request(store: MemoryStore) -> ApprovalRequest:
    request = ApprovalRequest.for_call(
        session_id="s1", principal_id="agent", call_id="c1", tool_name="pay",
        tool_definition_hash="0" * 64, arguments={"amount": 50}, effect="write",
        reason="a person decides", rule_id="payments")
    await store.create_approval(request)
    return request


async def approve(browser: httpx2.AsyncClient, request: ApprovalRequest) -> httpx2.Response:
    page = (await browser.get(f"/approvals/{request.id}")).text
    csrf = page.split('name="csrf" value="')[1].split('"')[0]
    return await browser.post(f"/approvals/{request.id}/decide",
                              data={"csrf": csrf, "digest": request.digest,
                                    "decision": "approve"})


# -- it works ----------------------------------------------------------------------------------

async def test_a_reviewer_signs_in_at_the_provider_and_is_named_by_their_subject(
        idp: Idp) -> None:
    async with inbox_for(idp) as inbox, inbox.browser() as bob:
        assert await signed_in_as(bob) is None
        assert "Sign in at 127.0.0.1" in (await bob.get("/login")).text
        location = await inbox.start(bob)
        asked = query_of(location)
        assert location.startswith(f"{idp.issuer}/auth?")
        assert asked["code_challenge_method"] == "S256" and asked["nonce"] and asked["state"]
        assert asked["redirect_uri"] == CALLBACK and asked["client_id"] == inbox.client[0]
        callback = await inbox.at_provider(location, "bob")
        done = await bob.get(callback)
        assert onward_path(done) == "/" and done.headers["referrer-policy"] == "no-referrer"
        page = await signed_in_as(bob)
        assert page is not None and "bob" in page
        [record] = await inbox.records("inbox.signed_in")
        assert (record["issuer"], record["subject"], record["reviewer"], record["name"]) == (
            idp.issuer, "bob", "bob", "Bob Cratchit")
        assert record["roles"] == ["support"]
        assert callback.split("code=")[1].split("&")[0] not in json.dumps(record)


async def test_the_recorded_approver_is_the_subject_and_an_unentitled_subject_cannot_approve(
        idp: Idp) -> None:
    async with inbox_for(idp) as inbox, inbox.browser() as alice, inbox.browser() as bob:
        request = await pay_request(inbox.store)
        await grant(inbox.store, "alice", Grant(tools=("pay",)), by="cli:operator")
        assert (await inbox.sign_in(bob, "bob")).status_code == 200
        refused = await approve(bob, request)
        assert refused.status_code == 403 and "bob holds no reviewer entitlement" in refused.text
        found = await inbox.store.get_approval(request.id)
        assert found is not None and found.answer is None
        [refusal] = await inbox.records("approval.refused")
        assert refusal["approver"] == "web:bob"

        assert (await inbox.sign_in(alice, "alice")).status_code == 200
        assert (await approve(alice, request)).status_code == 303
        found = await inbox.store.get_approval(request.id)
        assert found is not None and found.answer is not None
        assert found.answer.approved and found.answer.approver == "web:alice"
        [answered] = await inbox.records("approval.answered")
        assert answered["reviewer_identity"] == {"issuer": idp.issuer, "subject": "alice",
                                                 "name": "Alice Liddell"}
        assert "entitled: alice" in answered["detail"]


async def test_two_people_signed_in_at_the_provider_vote_with_the_roles_it_gave_them(
        idp: Idp) -> None:
    async with inbox_for(idp) as inbox, inbox.browser() as alice, inbox.browser() as bob:
        request = ApprovalRequest.for_call(
            session_id="s1", principal_id="agent", call_id="c2", tool_name="deploy",
            tool_definition_hash="0" * 64, arguments={}, effect="write", reason="two people",
            rule_id="deploys", quorum=Quorum(2, ("support",)))
        await inbox.store.create_approval(request)
        for browser, user in ((alice, "alice"), (bob, "bob")):
            assert (await inbox.sign_in(browser, user)).status_code == 200
            assert (await approve(browser, request)).status_code == 303
        found = await inbox.store.get_approval(request.id)
        assert found is not None and found.answer is not None and found.answer.approved
        voted = await inbox.records("approval.voted")
        assert [v["reviewer_identity"]["subject"] for v in voted] == ["alice", "bob"]
        assert {v["reviewer_identity"]["issuer"] for v in voted} == {idp.issuer}


# -- what is refused ---------------------------------------------------------------------------

async def test_another_browsers_callback_and_a_state_swap_sign_no_one_in(idp: Idp) -> None:
    """Login CSRF: mallory signs in at the provider as bob and sends alice his callback (his
    code, his state); alice's browser lacks that flow's cookie, with or without a flow of her
    own, and stays signed out — never signed in as someone else."""
    async with inbox_for(idp) as inbox, inbox.browser() as alice, \
            inbox.browser() as mallory:
        malloys_callback = await inbox.at_provider(await inbox.start(mallory), "bob")
        cold = await alice.get(malloys_callback)
        assert cold.status_code == 403 and "another browser" in cold.text
        await inbox.start(alice)  # alice has a flow (and its cookie) of her own
        assert alice.cookies.get(SIGN_IN_COOKIE) is not None
        swapped = await alice.get(malloys_callback)
        assert swapped.status_code == 403 and "another browser" in swapped.text
        assert await signed_in_as(alice) is None
        # her own flow is untouched by the attempt, and so is mallory's
        assert (await mallory.get(malloys_callback)).status_code == 200
        assert await signed_in_as(mallory) is not None
        refusals = await inbox.records("inbox.sign_in_refused")
        assert [r["status"] for r in refusals] == [403, 403]


async def test_a_swapped_nonce_is_refused(idp: Idp) -> None:
    """The authorization request's nonce changed on the way (another flow's, the attacker's
    own): the provider issues a code the flow's verifier redeems, but the ID token's nonce is
    not the flow's."""
    async with inbox_for(idp) as inbox, inbox.browser() as alice:
        location = await inbox.start(alice)
        callback = await inbox.at_provider(with_query(location, nonce="the-attackers-nonce"),
                                           "alice")
        refused = await alice.get(callback)
        assert refused.status_code == 403 and "nonce" in refused.text
        assert await signed_in_as(alice) is None


async def test_a_replayed_callback_and_a_replayed_code_are_refused(idp: Idp) -> None:
    async with inbox_for(idp) as inbox, inbox.browser() as alice:
        callback = await inbox.at_provider(await inbox.start(alice), "alice")
        assert (await alice.get(callback)).status_code == 200
        alice.cookies.clear()
        again = await alice.get(callback)  # the same state: single use
        assert again.status_code == 400 and "used already" in again.text
        # the used code under a new flow's state (and that browser's cookie)
        fresh = query_of(await inbox.start(alice))["state"]
        code = query_of(callback)["code"]
        replayed = await alice.get(with_query(callback, state=fresh, code=code))
        assert replayed.status_code == 403 and "refused the authorization code" in replayed.text
        assert await signed_in_as(alice) is None


async def test_an_answer_from_another_issuer_is_refused(idp: Idp) -> None:
    """RFC 9207: the redirect names another issuer (an authorization-server mix-up), or —
    the provider announcing that it always names itself — none."""
    async with inbox_for(idp) as inbox, inbox.browser() as alice:
        callback = await inbox.at_provider(await inbox.start(alice), "alice")
        assert query_of(callback)["iss"] == idp.issuer
        mixed = await alice.get(with_query(callback, iss="https://evil.example"))
        assert mixed.status_code == 400 and "another issuer" in mixed.text
        callback = await inbox.at_provider(await inbox.start(alice), "alice")
        parts = urlsplit(callback)
        unnamed = urlunsplit(parts._replace(query=urlencode(
            {k: v for k, v in query_of(callback).items() if k != "iss"})))
        assert (await alice.get(unnamed)).status_code == 400
        assert await signed_in_as(alice) is None


async def test_an_id_token_for_another_client_or_from_another_issuer_is_refused(
        idp: Idp) -> None:
    """The token endpoint's answer carries a real ID token with the flow's own nonce — but
    issued to another client of the same provider, or by another provider — or an access
    token of the same provider for a resource (another audience)."""
    other = start()
    try:
        async with inbox_for(idp) as inbox, inbox.browser() as alice:
            for provider, why in ((idp, "another client"), (other, "signature")):
                location = await inbox.start(alice)
                nonce = query_of(location)["nonce"]
                inbox.network.id_token = await id_token_of(provider, nonce, "alice")
                refused = await alice.get(await inbox.at_provider(location, "alice"))
                assert refused.status_code == 403 and why in refused.text, refused.text
                assert await signed_in_as(alice) is None
            # alice's access token for a resource (same issuer, same keys) as the ID token
            inbox.network.id_token = idp.user_token("alice", "http://127.0.0.1:9/mcp",
                                                    "tools:read")["access_token"]
            refused = await alice.get(await inbox.at_provider(await inbox.start(alice), "alice"))
            assert refused.status_code == 403 and "another client" in refused.text
            assert await signed_in_as(alice) is None
            inbox.network.id_token = None
            assert (await inbox.sign_in(alice, "alice")).status_code == 200
    finally:
        stop(other)


async def id_token_of(idp: Idp, nonce: str, user: str) -> str:
    """A real ID token of *idp* for *user* with *nonce*, issued to a client of its own."""
    redirect = "http://127.0.0.1:9/elsewhere/callback"
    client = idp.register(redirect)
    sign_in = OidcSignIn(settings(idp, client), redirect)
    url, _ = await sign_in.start()
    callback = await authorize(idp, with_query(url, nonce=nonce), user, redirect)
    flow = next(iter(sign_in._flows.values()))
    async with httpx2.AsyncClient() as http:
        response = await http.post(f"{idp.issuer}/token", auth=client, data={
            "grant_type": "authorization_code", "code": query_of(callback)["code"],
            "redirect_uri": redirect, "code_verifier": flow.verifier})
        response.raise_for_status()
        token: str = response.json()["id_token"]
        return token


async def test_signed_out_csrf_and_open_redirects_are_refused(idp: Idp) -> None:
    """A page on another site cannot start a sign-in (nor make the browser finish one, see
    above); no parameter steers the browser anywhere but to the provider and then to ``/``."""
    async with inbox_for(idp) as inbox, inbox.browser("https://evil.example") as foreign, \
            inbox.browser(None) as no_origin, inbox.browser() as alice:
        for browser in (foreign, no_origin):
            refused = await browser.post("/login/oidc", data={})
            assert refused.status_code == 403 and "location" not in refused.headers
            assert SIGN_IN_COOKIE not in browser.cookies
        location = await inbox.start(alice, next="https://evil.example/",
                                     redirect_uri="https://evil.example/cb")
        assert location.startswith(f"{idp.issuer}/auth?") and "evil" not in location
        callback = await inbox.at_provider(location, "alice")
        done = await alice.get(with_query(callback, next="https://evil.example/"))
        assert onward_path(done) == "/" and "evil" not in done.text
        # a redirect URI the client did not register: the provider refuses, nothing comes back
        async with httpx2.AsyncClient(follow_redirects=False) as at_idp:
            answer = await at_idp.get(with_query(location, redirect_uri="https://evil.example/"))
        assert "evil.example" not in answer.headers.get("location", "")


async def test_a_provider_naming_another_issuer_or_at_an_internal_address_is_refused(
        idp: Idp) -> None:
    """The discovery document must name the configured issuer exactly (a provider that
    changed ``iss``, a trailing slash); without ``allowInternal`` a loopback provider is not
    even asked (SSRF through the issuer's URL). Either way: 503, no flow, no cookie."""
    client = idp.register(CALLBACK)
    for oidc, why in ((OidcSignIn(settings(idp, client, issuer=f"{idp.issuer}/"), CALLBACK),
                       "names another issuer"),
                      (OidcSignIn(settings(idp, client, allow_internal=False), CALLBACK),
                       "only https is allowed")):
        app = create_app(MemoryStore(), token=SHARED, oidc=oidc)
        async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url=BASE,
                                      headers={"origin": BASE}) as alice:
            refused = await alice.post("/login/oidc")
        assert refused.status_code == 503, refused.text
        assert why in refused.text
        assert SIGN_IN_COOKIE not in alice.cookies and oidc._flows == {}


async def test_the_shared_token_no_longer_opens_the_pages_but_a_reviewers_own_does(
        idp: Idp) -> None:
    async with inbox_for(idp) as inbox, inbox.browser() as anyone, inbox.browser() as carol:
        shared = await anyone.post("/login", data={"token": SHARED, "name": "alice"})
        assert shared.status_code == 403 and "identity provider" in shared.text
        assert await signed_in_as(anyone) is None
        wrong = await anyone.post("/login", data={"token": "wrong-token-0123456789"})
        assert wrong.status_code == 401
        own = await carol.post("/login", data={"token": CAROL, "name": "ignored"})
        assert own.status_code == 303
        assert await signed_in_as(carol) is not None
        # the API still takes the shared token (programs)
        api = await anyone.get("/api/v1/approvals",
                               headers={"authorization": f"Bearer {SHARED}"})
        assert api.status_code == 200


def test_inbox_auth_loads_and_each_mistake_names_its_key(tmp_path: Any,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from pathlib import Path

    from anfitrion.exceptions import ConfigError
    from anfitrion.mcp import load_config

    monkeypatch.setenv("INBOX_SECRET", "s3cret-0123456789")
    path = Path(str(tmp_path)) / "mcp.json"

    def load(auth: Mapping[str, Any]) -> SignInSettings | None:
        path.write_text(json.dumps({"mcpServers": {}, "inbox": {"auth": auth}}))
        return load_config(path).sign_in

    found = load({"issuer": "https://idp.example", "clientId": "inbox",
                  "clientSecret": "${INBOX_SECRET}", "principalClaim": "preferred_username",
                  "rolesClaim": "realm_access.roles", "scopes": ["profile"]})
    assert found is not None
    assert (found.client_secret, found.principal_claim, found.scopes) == (
        "s3cret-0123456789", "preferred_username", ("openid", "profile"))
    assert "s3cret" not in repr(found)
    for auth, key in (({"clientId": "inbox"}, "inbox.auth.issuer"),
                      ({"issuer": "https://idp.example"}, "inbox.auth.clientId"),
                      ({"issuer": "https://idp.example", "clientId": "x",
                        "algorithms": ["HS256"]}, "inbox.auth.algorithms"),
                      ({"issuer": "https://idp.example", "clientId": "x", "next": "/"},
                       "inbox.auth"),
                      ({"issuer": "https://idp.example", "clientId": "x",
                        "clientSecret": "${NOT_SET_ANYWHERE}"}, "inbox.auth.clientSecret")):
        with pytest.raises(ConfigError) as caught:
            load(auth)
        assert key in str(caught.value) and "\n" not in str(caught.value)


async def test_serve_with_config_signs_reviewers_in_at_the_providers_of_inbox_auth(
        idp: Idp, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """``anfitrion serve --config mcp.json``: the config's store, and its ``inbox.auth``."""
    from pathlib import Path

    import uvicorn
    from click.testing import CliRunner

    from anfitrion._cli.main import cli

    seen: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: seen.update(app=app, **kwargs))
    monkeypatch.delenv("ANFITRION_INBOX_TOKEN", raising=False)
    client = idp.register(CALLBACK)
    monkeypatch.setenv("INBOX_SECRET", client[1])
    config = Path(str(tmp_path)) / "mcp.json"
    config.write_text(json.dumps({
        "mcpServers": {}, "gateway": {"store": "sqlite:///inbox.db"},
        "inbox": {"auth": {"issuer": idp.issuer, "clientId": client[0],
                           "clientSecret": "${INBOX_SECRET}", "allowInternal": True}}}))
    store = f"sqlite:///{tmp_path}/inbox.db"
    def run(*args: str) -> Any:  # the commands run their own event loop: in a thread
        return anyio.to_thread.run_sync(lambda: CliRunner().invoke(cli, list(args)))

    assert (await run("db", "migrate", "--store", store)).exit_code == 0
    result = await run("serve", "--config", str(config), "--port", "8765")
    assert result.exit_code == 0, result.output
    assert f"sign in: {BASE}/login  (at {idp.issuer}; redirect URI {CALLBACK})" in result.output
    assert "#token=" not in result.output and client[1] not in result.output
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=seen["app"]),
                                  base_url=BASE, headers={"origin": BASE}) as alice:
        started = await alice.post("/login/oidc")
        callback = await authorize(idp, provider_url(started), "alice", CALLBACK)
        assert (await alice.get(callback)).status_code == 200
        page = await signed_in_as(alice)
        assert page is not None and "alice" in page
