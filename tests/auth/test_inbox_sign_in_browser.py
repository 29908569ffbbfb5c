"""Signing in with OpenID Connect in Chromium, with the inbox and the provider on two sites
(``localhost`` and ``127.0.0.1``): the start gets past the pages' CSP ``form-action 'self'``
(a redirect after the form would be blocked: this test fails with one), the flow's
``SameSite=Lax`` cookie comes back on the provider's cross-site redirect, the session works —
and the person approves a request, recorded under their subject.

(The provider here signs the person in without a page of its own, so the navigation back is
still initiated by the inbox's page; that the ``SameSite=Strict`` session cookie is sent after
a login *form* on the provider's site is what the same-site step to ``/`` is for, and is not
shown here.)"""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest
import uvicorn
from idp import Idp

from anfitrion import ApprovalRequest
from anfitrion.mcp import SignInSettings
from anfitrion.store import MemoryStore
from anfitrion.web import OidcSignIn, create_app

playwright_sync = pytest.importorskip("playwright.sync_api")

CHROMIUM = "/usr/bin/chromium"
WAIT_MS = 15_000

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists()
                       and os.environ.get("ANFITRION_REQUIRE_BROWSER") != "1",
                       reason="needs Debian's chromium package (apt-get install chromium)"),
]


@pytest.fixture
def page(chromium_page: Any) -> Any:
    return chromium_page


def in_thread(function: Any) -> Any:
    """Run *function* in a fresh thread: Playwright's sync API keeps a loop in this one."""
    box: list[Any] = []
    thread = threading.Thread(target=lambda: box.append(function()))
    thread.start()
    thread.join(timeout=60)
    assert box, "the call did not finish"
    return box[0]


def test_a_person_signs_in_at_the_provider_in_chromium_and_approves(idp: Idp,
                                                                   page: Any) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    base = f"http://localhost:{sock.getsockname()[1]}"  # another site than the provider's
    callback = f"{base}/login/callback"
    client = idp.register(callback)
    store = MemoryStore()
    request = ApprovalRequest.for_call(
        session_id="s1", principal_id="agent", call_id="c1", tool_name="send_mail",
        tool_definition_hash="0" * 64, arguments={"to": "x@example.test"}, effect="write",
        reason="a person decides", rule_id="mail")
    in_thread(lambda: anyio.run(store.create_approval, request))
    oidc = OidcSignIn(SignInSettings(issuer=idp.issuer, client_id=client[0],
                                     client_secret=client[1], allow_internal=True), callback)
    app = create_app(store, token="shared-inbox-token-0123456789", oidc=oidc)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        page.goto(f"{base}/login")
        page.click("text=Sign in at 127.0.0.1")  # to the provider (alice: no login hint)
        page.wait_for_url(f"{base}/", timeout=WAIT_MS)
        assert "alice" in page.inner_text("body")
        assert page.url == f"{base}/"  # no code, no state left in the address
        page.goto(f"{base}/approvals/{request.id}")
        page.click("button.approve")
        page.wait_for_selector("text=approved", timeout=WAIT_MS)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
    found = in_thread(lambda: anyio.run(store.get_approval, request.id))
    assert found.answer is not None and found.answer.approver == "web:alice"
