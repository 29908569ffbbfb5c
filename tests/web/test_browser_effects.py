"""The effects page in Chromium: a person finds an unknown effect and resolves it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import pytest

from anfitrion import DenyAllApprover, Effect, Policy, Tool
from anfitrion._conversation import ToolCall
from anfitrion._gate import Gate, _silent
from anfitrion.policy import Decision
from anfitrion.store import LedgerState, MemoryStore
from anfitrion.testing import gate_session

from .browser_support import CHROMIUM, Resumer, off_loop, serve
from .inbox_support import TOKEN

playwright_sync = pytest.importorskip("playwright.sync_api")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists()
                       and os.environ.get("ANFITRION_REQUIRE_BROWSER") != "1",
                       reason="needs Debian's chromium package (apt-get install chromium)"),
]
WAIT_MS = 15_000


@pytest.fixture
def page(chromium_page: Any) -> Any:
    return chromium_page


def _unknown_refund(store: MemoryStore) -> None:
    def handler(arguments: dict[str, Any]) -> str:
        raise RuntimeError("the bank hung up")

    tool = Tool.from_schema("refund", {"type": "object", "properties": {
        "payment_id": {"type": "string"}}, "required": ["payment_id"]}, handler,
        effect=Effect.WRITE, effect_key="refund:{payment_id}")

    async def go() -> None:
        gate = Gate(policy=Policy([lambda c, ctx: Decision.allow("t", "allow")]),
                    approver=DenyAllApprover(), store=store, emit=_silent)
        await gate.process(ToolCall.from_raw("c1", "refund", json.dumps({"payment_id": "p1"})),
                           {"refund": tool}, gate_session("alice", "s1", turn=1))
    off_loop(lambda: anyio.run(go))  # Playwright's sync API keeps a loop in this thread


def test_a_person_resolves_an_unknown_effect_in_the_browser(page: Any) -> None:
    store = MemoryStore()
    _unknown_refund(store)
    with serve(store, Resumer()) as base:
        page.goto(f"{base}/")
        page.fill("input[name=token]", TOKEN)
        page.fill("input[name=name]", "carol")
        page.click("button[type=submit]")
        page.wait_for_url(f"{base}/", timeout=WAIT_MS)
        page.click("nav >> text=Effects")
        page.wait_for_url(f"{base}/effects", timeout=WAIT_MS)
        assert "unknown" in page.inner_text("table.list")
        page.click('table.list a:has-text("refund")')
        page.fill("form.decision textarea[name=note]", "no refund on the statement")
        page.click("button.deny")
        page.wait_for_selector("text=resolved_failed", timeout=WAIT_MS)
        assert "no refund on the statement" in page.inner_text("main")
    [entry] = off_loop(lambda: anyio.run(store.list_effects))
    assert entry.state is LedgerState.FAILED and entry.resolved_by == "web:carol"
