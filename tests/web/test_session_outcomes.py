"""The inbox's session page says what happened to each call, from the audit trail (#36 item 12):
executed, refused (with the host's words), waiting — never the model's account of it."""

from __future__ import annotations

import re

from starlette.testclient import TestClient

from anfitrion import Effect, Host, ScriptedModel, Toolbox
from anfitrion._approvals import ApprovalRequest
from anfitrion.models._scripted import call
from anfitrion.store import MemoryStore


def _outcomes(page: str) -> list[tuple[str, str]]:
    table = page[page.index("What happened"):page.index("<h2>Approvals")]
    return re.findall(r'<code>([^<]*)</code></td>\s*<td data-label="Outcome"><span class="'
                      r'outcome \w+">(\w+)</span>', table)


def test_the_session_page_shows_each_calls_outcome_by_the_host(
        browser_client: tuple[TestClient, str], store: MemoryStore) -> None:
    client, _ = browser_client
    tools = Toolbox()

    @tools.tool(effect=Effect.READ, provenance="trusted")
    def get_weather(location: str) -> str:
        """The weather."""
        return "15 °C"

    @tools.tool(effect=Effect.WRITE)
    def send_email(to: str, body: str) -> str:
        """Send an e-mail."""
        return "sent"

    model = ScriptedModel([
        [call("get_weather", {"location": "Lisboa"}, id="c1"),
         call("send_email", {"to": "team@example.com"}, id="c2")],
        "The message is sent."])  # a lie: the send was refused (invalid arguments)
    run = Host(model, tools, store=store).run_sync("Weather, mailed", principal="alice")
    page = client.get(f"/sessions/{run.session_id}").text
    assert _outcomes(page) == [("get_weather", "executed"), ("send_email", "refused")]
    assert "invalid arguments for send_email" in page


def test_a_call_waiting_for_a_person_is_shown_waiting(
        browser_client: tuple[TestClient, str], pending: tuple[Host, ApprovalRequest]) -> None:
    client, _ = browser_client
    _, request = pending
    page = client.get(f"/sessions/{request.session_id}").text
    assert _outcomes(page) == [("send_email", "waiting")]
