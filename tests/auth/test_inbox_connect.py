"""The inbox's connect page, end to end: a reviewer signed in to the real inbox (uvicorn)
connects their own account at the SDK's protected notes server through the real
authorization server (oidc-provider: discovery, dynamic registration, PKCE, resource
indicator), and the token is stored sealed for that reviewer only. Attacked by class, as an
attacker who has read the code:

- another person's callback: a callback opened in a browser that did not start the flow
  completes nothing (and the flow's owner can still finish it);
- state swap / login CSRF: an attacker's own callback (their code, their state) sent to a
  victim is refused — the victim's account is never bound to the attacker's tokens;
- made-up, replayed and orphaned states (the person signed out) are refused;
- open redirect: no parameter steers the browser; after the callback it goes to ``/connect``;
- CSRF on the start, and the shared token (which names no one), are refused.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit

import anyio
import httpx2
import pytest

pytest.importorskip("mcp")
from gateway_oauth import Notes, onward_path, provider_url
from idp import Idp

from anfitrion.channels import Reviewers
from anfitrion.mcp import AccountConnector
from anfitrion.mcp._config import AuthSettings, ServerConfig
from anfitrion.mcp._oauth import StoredTokens, TokenCipher, new_key
from anfitrion.store import MemoryStore
from anfitrion.web import create_app

pytestmark = [pytest.mark.anyio]

SHARED = "shared-inbox-token-0123456789"
TOKENS = {"alice": "alice-reviewer-token-0123456789", "bob": "bob-reviewer-token-0123456789"}


@dataclass
class Inbox:
    base: str
    store: MemoryStore
    cipher: TokenCipher
    notes: Notes
    idp: Idp

    def browser(self) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(base_url=self.base, follow_redirects=False, timeout=30,
                                  headers={"origin": self.base})

    async def sign_in(self, browser: httpx2.AsyncClient, token: str) -> str:
        """Signs in; the CSRF token of the session."""
        response = await browser.post("/login", data={"token": token, "name": "someone"})
        assert response.status_code == 303, response.text
        page = (await browser.get("/connect")).text
        return page.split('name="csrf" value="')[1].split('"')[0]

    async def start(self, browser: httpx2.AsyncClient, csrf: str,
                    **more: str) -> httpx2.Response:
        return await browser.post("/connect/notes", data={"csrf": csrf, **more})

    async def authorize(self, url: str, user: str) -> str:
        """The person at the authorization server (logged in as *user*): the callback URL
        the authorization server sends the browser back to."""
        async with httpx2.AsyncClient(follow_redirects=False, timeout=30) as at_idp:
            url = f"{url}&login_hint={user}"
            for _ in range(10):
                response = await at_idp.get(url)
                location = response.headers.get("location", "")
                assert response.status_code in (302, 303), response.text[:300]
                url = location if location.startswith("http") else self.idp.issuer + location
                if url.startswith(f"{self.base}/connect/callback"):
                    return url
        raise AssertionError("the authorization server never sent the browser back")

    async def tokens(self, principal: str) -> str | None:
        found = await StoredTokens(self.store, self.cipher, principal,
                                   self.notes.url).get_tokens()
        return found.access_token if found is not None else None

    def subject(self, token: str) -> str:
        return str(self.idp.claims(token, self.notes.url)["sub"])


@asynccontextmanager
async def inbox_serving(idp: Idp, notes: Notes) -> AsyncIterator[Inbox]:
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    store = MemoryStore()
    cipher = TokenCipher.from_env({"ANFITRION_TOKEN_KEY": new_key()})
    server = ServerConfig(id="notes", url=notes.url, timeout=20,
                          auth=AuthSettings(issuer=idp.issuer, allow_internal=True,
                                            scopes=("notes:read", "notes:write")))
    connector = AccountConnector([server], store, cipher,
                                 redirect_uri=f"{base}/connect/callback")
    app = create_app(store, token=SHARED, accounts=connector,
                     reviewers=Reviewers.from_tokens({n: (t, ()) for n, t in TOKENS.items()}))
    uv = uvicorn.Server(uvicorn.Config(app, lifespan="on", log_level="critical",
                                       access_log=False))
    async with anyio.create_task_group() as tg:
        tg.start_soon(uv.serve, [sock])
        with anyio.fail_after(30):
            while not uv.started:
                await anyio.sleep(0.01)
        try:
            yield Inbox(base, store, cipher, notes, idp)
        finally:
            uv.should_exit = True


async def test_a_reviewer_connects_their_own_account(idp: Idp, notes: Notes) -> None:
    async with inbox_serving(idp, notes) as inbox, inbox.browser() as alice:
        csrf = await inbox.sign_in(alice, TOKENS["alice"])
        assert "not connected" in (await alice.get("/connect")).text
        # a "next" address is ignored: the browser goes to the authorization endpoint only
        started = await inbox.start(alice, csrf, next="https://evil.example/")
        location = provider_url(started)
        assert location.startswith(f"{idp.issuer}/auth?")
        assert "code_challenge_method=S256" in location and "evil" not in location
        callback = await inbox.authorize(location, "alice")
        done = await alice.get(callback)
        assert onward_path(done) == "/connect"
        assert "connected (" in (await alice.get("/connect")).text
        token = await inbox.tokens("alice")
        assert token is not None and inbox.subject(token) == "alice"
        assert await inbox.tokens("bob") is None
        replayed = await alice.get(callback)  # the same callback again: single use
        assert replayed.status_code == 400 and "already used" in replayed.text


async def test_another_persons_callback_completes_nothing(idp: Idp, notes: Notes) -> None:
    async with inbox_serving(idp, notes) as inbox, inbox.browser() as alice, \
            inbox.browser() as bob:
        alice_csrf = await inbox.sign_in(alice, TOKENS["alice"])
        bob_csrf = await inbox.sign_in(bob, TOKENS["bob"])
        alice_callback = await inbox.authorize(
            provider_url(await inbox.start(alice, alice_csrf)), "alice")
        # bob opens alice's callback (a link she pasted, a proxy log): refused
        stolen = await bob.get(alice_callback)
        assert stolen.status_code == 403 and "another browser" in stolen.text
        assert await inbox.tokens("bob") is None and await inbox.tokens("alice") is None
        # the state swap: bob's own callback (his code, his state) sent to alice's browser
        bob_callback = await inbox.authorize(
            provider_url(await inbox.start(bob, bob_csrf)), "bob")
        swapped = await alice.get(bob_callback)
        assert swapped.status_code == 403
        assert await inbox.tokens("alice") is None  # alice is never bound to bob's account
        # each owner can still finish their own
        for browser, callback in ((alice, alice_callback), (bob, bob_callback)):
            finished = await browser.get(callback)
            assert onward_path(finished) == "/connect"
        alice_token, bob_token = await inbox.tokens("alice"), await inbox.tokens("bob")
        assert alice_token is not None and bob_token is not None
        assert (inbox.subject(alice_token), inbox.subject(bob_token)) == ("alice", "bob")


async def test_made_up_states_signed_out_sessions_csrf_and_the_shared_token_are_refused(
        idp: Idp, notes: Notes) -> None:
    async with inbox_serving(idp, notes) as inbox, inbox.browser() as alice, \
            inbox.browser() as anyone:
        csrf = await inbox.sign_in(alice, TOKENS["alice"])
        made_up = await alice.get("/connect/callback?code=x&state=made-up-state")
        assert made_up.status_code == 400 and "location" not in made_up.headers
        no_csrf = await alice.post("/connect/notes", data={})
        assert no_csrf.status_code == 403
        unknown = await alice.post("/connect/https%3A%2F%2Fevil.example", data={"csrf": csrf})
        assert unknown.status_code == 404 and "location" not in unknown.headers
        # signed out after starting: the callback finishes nothing
        callback = await inbox.authorize(
            provider_url(await inbox.start(alice, csrf)), "alice")
        await alice.post("/logout", data={"csrf": csrf})
        ended = await alice.get(callback)
        assert ended.status_code == 403 and "session" in ended.text
        assert await inbox.tokens("alice") is None
        # the shared token names no one: no account can be connected with it
        shared_csrf = await inbox.sign_in(anyone, SHARED)
        refused = await inbox.start(anyone, shared_csrf)
        assert refused.status_code == 403 and "own reviewer token" in refused.text
        assert urlsplit(str(refused.url)).path == "/connect/notes"


def test_serve_offers_the_connect_pages_only_with_a_token_key(
        tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    from pathlib import Path

    from click.testing import CliRunner

    from anfitrion._cli.main import cli

    folder = Path(str(tmp_path))
    config = folder / "mcp.json"
    config.write_text('{"mcpServers": {"notes": {"url": "https://notes.example/mcp", '
                      '"auth": {"scopes": ["notes:read"]}}}}')
    monkeypatch.delenv("ANFITRION_TOKEN_KEY", raising=False)
    monkeypatch.delenv("ANFITRION_TOKEN_KEY_FILE", raising=False)
    store = f"sqlite:///{folder}/s.db"
    assert CliRunner().invoke(cli, ["db", "migrate", "--store", store]).exit_code == 0
    result = CliRunner().invoke(cli, ["serve", "--store", store, "--accounts", str(config)])
    assert result.exit_code != 0, result.output
    assert "no token key" in result.output, result.output
