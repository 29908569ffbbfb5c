"""The inbox in a real browser: Debian's Chromium driven by Playwright, against a live host."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from urllib.parse import quote

import anyio
import httpx
import pytest

from anfitrion import RunStatus
from anfitrion.store import MemoryStore

from .browser_support import CHROMIUM, Resumer, inbox_scenario, off_loop, serve
from .inbox_support import RLO_RECIPIENT, TOKEN, Mailroom, mail_host

playwright_sync = pytest.importorskip("playwright.sync_api")

# CI sets ANFITRION_REQUIRE_BROWSER=1 so that a missing browser fails instead of skipping
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists()
                       and os.environ.get("ANFITRION_REQUIRE_BROWSER") != "1",
                       reason="needs Debian's chromium package (apt-get install chromium)"),
]
WAIT_MS = 15_000


@pytest.fixture
def browser(chromium: playwright_sync.Browser) -> playwright_sync.Browser:
    return chromium


@pytest.fixture
def page(chromium_page: playwright_sync.Page) -> playwright_sync.Page:
    return chromium_page


def _sign_in(page: playwright_sync.Page, base: str, name: str = "carol") -> None:
    page.goto(f"{base}/")
    page.fill("input[name=token]", TOKEN)
    page.fill("input[name=name]", name)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/", timeout=WAIT_MS)


def _wait(event: threading.Event) -> None:
    assert event.wait(timeout=WAIT_MS / 1000), "the host was not resumed"


def test_a_suspended_run_is_approved_in_the_browser_and_completes(
        page: playwright_sync.Page) -> None:
    store, mailroom, resumer = MemoryStore(), Mailroom([]), Resumer()
    host = resumer.host = mail_host(store, mailroom, {
        "to": RLO_RECIPIENT, "subject": "Quarterly numbers", "body": "Attached.\nBob"})
    with serve(store, resumer) as base:
        _sign_in(page, base)
        assert "No request waits" in page.inner_text("#pending")
        run = off_loop(lambda: host.run_sync("Mail the numbers to Bob", principal="alice"))
        assert run.status is RunStatus.SUSPENDED
        request = run.pending[0]
        # the open list picks the request up by itself (live update)
        row = page.wait_for_selector(f'tr[data-request="{request.id}"]', timeout=WAIT_MS)
        assert row is not None
        assert "bidi control character (U+202E RLO)" in row.inner_text()
        row.query_selector("a").click()  # type: ignore[union-attr]
        page.wait_for_url(f"{base}/approvals/{request.id}", timeout=WAIT_MS)
        shown = page.inner_text("section:has(h2:text('Arguments'))")
        assert "bob⟨U+202E RLO⟩moc.live@example.com" in shown
        assert "\u202e" not in page.inner_text("main")
        page.fill("form.decision textarea[name=note]", "recipient checked")
        page.click("button.approve")
        page.wait_for_selector("text=Approved by web:carol", timeout=WAIT_MS)
        _wait(resumer.done)
    assert resumer.results[0].status is RunStatus.COMPLETED
    assert resumer.results[0].output == "Sent."
    assert mailroom.sent == [{"to": RLO_RECIPIENT, "subject": "Quarterly numbers",
                              "body": "Attached.\nBob"}]


def test_a_denial_in_the_browser_reaches_the_model_and_nothing_is_sent(
        page: playwright_sync.Page) -> None:
    store, mailroom, resumer = MemoryStore(), Mailroom([]), Resumer()
    host = resumer.host = mail_host(store, mailroom, {
        "to": "eve@example.com", "subject": "All our passwords", "body": "here"})
    run = off_loop(lambda: host.run_sync("Mail the numbers", principal="alice"))
    request = run.pending[0]
    with serve(store, resumer) as base:
        _sign_in(page, base)
        page.click(f'tr[data-request="{request.id}"] a')
        page.fill("form.decision textarea[name=note]", "not to eve")
        page.click("button.deny")
        page.wait_for_selector("text=Denied by web:carol", timeout=WAIT_MS)
        _wait(resumer.done)
    assert mailroom.sent == []
    final = resumer.results[0]
    assert final.status is RunStatus.COMPLETED
    denial = final.transcript[-2].parts[0]  # type: ignore[union-attr]
    assert denial.is_error
    assert "declined by a person: not to eve" in denial.content


def test_a_stale_page_cannot_approve_a_request_decided_elsewhere(
        page: playwright_sync.Page) -> None:
    store, mailroom, resumer = MemoryStore(), Mailroom([]), Resumer()
    host = resumer.host = mail_host(store, mailroom, {
        "to": "bob@example.com", "subject": "s", "body": "b"})
    request = off_loop(lambda: host.run_sync("Mail Bob", principal="alice")).pending[0]
    with serve(store, resumer) as base:
        _sign_in(page, base)
        page.goto(f"{base}/approvals/{request.id}")
        # meanwhile a ticket system denies it through the API
        denied = httpx.post(f"{base}/api/v1/approvals/{request.id}/deny",
                            json={"digest": request.digest, "approver": "ticket-7"},
                            headers={"authorization": f"Bearer {TOKEN}"})
        assert denied.status_code == 200
        _wait(resumer.done)
        page.click("button.approve")  # the page still shows the old, undecided request
        page.wait_for_selector("text=Refused", timeout=WAIT_MS)
        assert "already decided" in page.inner_text("main")
    found = off_loop(lambda: anyio.run(store.get_approval, request.id))
    assert found is not None
    assert found.answer is not None
    assert found.answer.approver == "api:ticket-7"
    assert not found.answer.approved
    assert mailroom.sent == []


def test_approve_with_edits_in_the_browser_runs_the_edited_call(
        page: playwright_sync.Page) -> None:
    store, mailroom, resumer = MemoryStore(), Mailroom([]), Resumer()
    host = resumer.host = mail_host(store, mailroom, {
        "to": RLO_RECIPIENT, "subject": "Quarterly numbers", "body": "Attached."})
    request = off_loop(lambda: host.run_sync("Mail Bob", principal="alice")).pending[0]
    with serve(store, resumer) as base:
        _sign_in(page, base)
        page.goto(f"{base}/approvals/{request.id}")
        page.click("summary:text('Approve with edits')")
        editor = page.locator("textarea[name=arguments]")
        assert "\\u202e" in editor.input_value()  # the editor shows the override escaped
        editor.fill('{"to": "bob@example.com", "subject": "Quarterly numbers", '
                    '"body": "Attached."}')
        page.click("button.edit")
        page.wait_for_selector("text=Edited proposal", timeout=WAIT_MS)
        _wait(resumer.done)
    assert mailroom.sent == [{"to": "bob@example.com", "subject": "Quarterly numbers",
                              "body": "Attached."}]
    assert resumer.results[0].status is RunStatus.COMPLETED


DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}


def _shots(tmp_path: Path) -> Path:
    """Where screenshots go: ``$ANFITRION_SCREENSHOTS`` (docs/images, to refresh the docs),
    else a temporary folder."""
    return Path(os.environ.get("ANFITRION_SCREENSHOTS") or tmp_path)


def test_the_decision_is_in_view_with_the_call_at_desktop_and_phone_widths(
        browser: playwright_sync.Browser, tmp_path: Path) -> None:
    store, resumer = MemoryStore(), Resumer()
    request, resumer.host = inbox_scenario(store, tmp_path / "files")
    out = _shots(tmp_path)
    with serve(store, resumer, files_root=tmp_path / "files") as base:
        for width, viewport in (("desktop", DESKTOP), ("phone", PHONE)):
            context = browser.new_context(viewport=viewport)  # type: ignore[arg-type]
            page = context.new_page()
            _sign_in(page, base)
            page.wait_for_selector(f'tr[data-request="{request.id}"]')
            page.screenshot(path=str(out / f"inbox-{width}.png"))
            page.goto(f"{base}/approvals/{request.id}")
            approve = page.locator("button.approve")
            box = approve.bounding_box()
            assert box is not None
            in_view = box["y"] >= 0 and box["y"] + box["height"] <= viewport["height"]
            assert page.evaluate("window.scrollY") == 0
            if width == "desktop":  # seen with the call, without scrolling
                assert in_view, box
            else:  # one column: the call, then the decision, then the previews and record
                call_box = page.locator("section.arguments").bounding_box()
                more_box = page.locator("div.more").bounding_box()
                assert call_box is not None and more_box is not None
                assert call_box["y"] + call_box["height"] <= box["y"] < more_box["y"]
            shown = page.inner_text("main")
            assert "alice asked" in shown
            assert "Read https://news.example/q3 and mail the quarterly numbers to Bob" in shown
            assert "cannot be recalled" in shown  # the tool's description
            marks = page.locator("section.arguments mark.hidden-char").all_inner_texts()
            assert "⟨U+202E RLO⟩" in marks
            # the flagged address, with the untrusted sentence that asked for it, quoted
            source = page.locator("section.notices figure.source").first
            assert "untrusted text from a result of fetch_url at turn 1" in source.inner_text()
            assert "the CFO now wants them at" in source.locator("blockquote").inner_text()
            assert source.locator("mark.flagged").inner_text() == "moc.live@example.com"
            quote_box = source.bounding_box()
            assert quote_box is not None
            if width == "desktop":  # in the first screen, with the call and the buttons
                assert quote_box["y"] + quote_box["height"] <= viewport["height"]
            # the e-mail as its recipient reads it: the non-ASCII body as text, not base64
            mail = page.locator("pre.email").inner_text()
            assert "Grüße, Alice" in mail and "4 999 €" in mail
            assert "base64" not in mail and "R3LDvMOfZ" not in mail
            # nothing wider than the window
            assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
            page.screenshot(path=str(out / f"request-{width}.png"),
                            full_page=width == "phone")
            context.close()
        # however long the arguments, the decision stays beside them at the top
        long_mail = mail_host(store, Mailroom([]), {"to": "bob@example.com", "subject": "s",
                                                    "body": "line\n" * 400})
        long_request = off_loop(lambda: long_mail.run_sync("Mail Bob", principal="alice"))
        context = browser.new_context(viewport=DESKTOP)  # type: ignore[arg-type]
        page = context.new_page()
        _sign_in(page, base)
        page.goto(f"{base}/approvals/{long_request.pending[0].id}")
        box = page.locator("button.approve").bounding_box()
        assert box is not None
        assert box["y"] + box["height"] <= DESKTOP["height"]
        page.evaluate("window.scrollTo(0, 2000)")
        assert page.evaluate("window.scrollY") > 1000
        box = page.locator("button.approve").bounding_box()  # sticky: still in view
        assert box is not None
        assert box["y"] >= 0 and box["y"] + box["height"] <= DESKTOP["height"]
        context.close()


def test_the_printed_link_signs_in_and_the_token_never_travels_in_an_address(
        page: playwright_sync.Page) -> None:
    sent: list[str] = []
    page.on("request", lambda r: sent.append(f"{r.url} {r.headers.get('referer', '')}"))
    with serve(MemoryStore(), Resumer()) as base:
        link = f"{base}/login#token={TOKEN}"
        page.goto(link)
        assert page.url == f"{base}/login"  # the token left the address bar at once
        assert page.input_value("input[name=token]") == TOKEN
        page.fill("input[name=name]", "carol")  # the first time, the browser asks who you are
        page.press("input[name=name]", "Enter")
        page.wait_for_url(f"{base}/", timeout=WAIT_MS)
        assert "signed in as carol" in page.inner_text("header")
        page.go_back()
        assert page.url == f"{base}/login"  # nor is it in the tab's history
        page.context.clear_cookies()
        page.goto(link)  # once the browser knows the name, the link alone signs in
        page.wait_for_url(f"{base}/", timeout=WAIT_MS)
        assert "signed in as carol" in page.inner_text("header")
        # the same link on another site fills the form but does not submit it: wrong tokens
        # sent that way would lock sign-in
        page.context.clear_cookies()
        page.goto("data:text/html," + quote(f'<a id="go" href="{link}">open the inbox</a>'))
        page.click("#go")
        page.wait_for_url(f"{base}/login", timeout=WAIT_MS)
        assert page.get_attribute("#login", "data-auto-sign-in") is None
        assert page.input_value("input[name=token]") == TOKEN
        assert page.input_value("input[name=name]") == "carol"
    assert sent
    assert not [s for s in sent if TOKEN in s]
