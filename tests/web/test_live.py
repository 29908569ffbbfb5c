"""Live inbox: server-sent events tell open pages when the pending list changes, the page
title carries the count; checked over real HTTP and in Chromium."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx
import pytest

from anfitrion import RunStatus
from anfitrion import _answers as answers
from anfitrion.store import MemoryStore

from .browser_support import CHROMIUM, Resumer, off_loop, serve
from .inbox_support import ORIGIN, TOKEN, Mailroom, mail_host, sign_in, suspended_run

WAIT_MS = 15_000


async def _events(lines: AsyncIterator[str]) -> AsyncIterator[dict[str, str]]:
    """SSE messages as {field: value}, comments skipped."""
    message: dict[str, str] = {}
    async for line in lines:
        if not line:
            if message:
                yield message
            message = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            message[name] = value.strip()


@pytest.mark.anyio
async def test_an_open_page_is_told_when_a_request_arrives_and_when_it_is_answered() -> None:
    store, mailroom = MemoryStore(), Mailroom([])
    with serve(store, Resumer()) as base:
        async with httpx.AsyncClient(base_url=base, follow_redirects=False) as client:
            signed = await client.post("/login", data={"token": TOKEN, "name": "carol"},
                                       headers={"origin": base})
            assert signed.status_code == 303
            with anyio.fail_after(30):
                async with client.stream("GET", "/events") as stream:
                    assert stream.headers["content-type"].startswith("text/event-stream")
                    events = _events(stream.aiter_lines())
                    counts = []
                    async for message in events:
                        if message.get("event") != "pending":
                            continue
                        counts.append(json.loads(message["data"])["count"])
                        if counts == [0]:
                            run = await mail_host(store, mailroom, {
                                "to": "ana@example.com", "subject": "s", "body": "b"}).run(
                                "mail", principal="alice")
                        elif counts == [0, 1]:
                            await answers.answer(store, run.pending[0].id, None,
                                                 approved=False, approver="cli")
                        else:
                            break
    assert counts == [0, 1, 0]


@pytest.mark.anyio
async def test_events_need_a_signed_in_browser() -> None:
    store = MemoryStore()
    with serve(store, Resumer()) as base:
        async with httpx.AsyncClient(base_url=base) as client:
            refused = await client.get("/events")
            assert refused.status_code == 401
            # the API's bearer token is not a browser sign-in
            refused = await client.get("/events", headers={"authorization": f"Bearer {TOKEN}"})
            assert refused.status_code == 401


def test_the_pending_page_title_carries_the_count() -> None:
    from starlette.testclient import TestClient

    from anfitrion.web import create_app

    store = MemoryStore()
    suspended_run(store, Mailroom([]))
    suspended_run(store, Mailroom([]))
    app = create_app(store, token=TOKEN, allowed_hosts=["testserver"])
    with TestClient(app, base_url=ORIGIN, follow_redirects=False) as client:
        sign_in(client)
        assert "<title>(2) Pending — anfitrion inbox</title>" in client.get("/").text


playwright_sync = pytest.importorskip("playwright.sync_api")
needs_browser = pytest.mark.skipif(
    not Path(CHROMIUM).exists() and os.environ.get("ANFITRION_REQUIRE_BROWSER") != "1",
    reason="needs Debian's chromium package (apt-get install chromium)")


@pytest.fixture
def page(chromium_page: playwright_sync.Page) -> playwright_sync.Page:
    return chromium_page


@needs_browser
@pytest.mark.browser
def test_in_chromium_the_list_and_the_title_follow_the_store_without_polling(
        page: playwright_sync.Page) -> None:
    store, mailroom = MemoryStore(), Mailroom([])
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url))
    host = mail_host(store, mailroom, {"to": "ana@example.com", "subject": "s", "body": "b"})
    with serve(store, Resumer()) as base:
        page.goto(f"{base}/")
        page.fill("input[name=token]", TOKEN)
        page.fill("input[name=name]", "carol")
        page.click("button[type=submit]")
        page.wait_for_url(f"{base}/", timeout=WAIT_MS)
        assert page.title() == "Pending — anfitrion inbox"
        run = off_loop(lambda: host.run_sync("mail ana", principal="alice"))
        assert run.status is RunStatus.SUSPENDED
        page.wait_for_selector(f'tr[data-request="{run.pending[0].id}"]', timeout=WAIT_MS)
        page.wait_for_function("() => document.title.startsWith('(1) ')", timeout=WAIT_MS)
        off_loop(lambda: anyio.run(lambda: answers.answer(
            store, run.pending[0].id, None, approved=False, approver="cli")))
        page.wait_for_selector("text=No request waits", timeout=WAIT_MS)
        page.wait_for_function("() => document.title === 'Pending — anfitrion inbox'",
                               timeout=WAIT_MS)
    assert f"{base}/events" in asked
    # the rows are fetched when an event says they changed, not on a timer
    assert asked.count(f"{base}/pending.html") <= 3
