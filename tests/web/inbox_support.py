"""Helpers for the inbox tests: a host that suspends on an e-mail, sharing its store."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.testclient import TestClient

from anfitrion import DeferredApprover, Effect, Host, Policy, RunResult, Toolbox
from anfitrion.store import MemoryStore
from anfitrion.testing import ScriptedModel, call

TOKEN = "test-token-0123456789abcdef"
ORIGIN = "http://testserver"
RLO_RECIPIENT = "bob\u202emoc.live@example.com"


@dataclass
class Mailroom:
    """What the send_email tool really sent."""

    sent: list[dict[str, str]]


def mail_host(store: MemoryStore, mailroom: Mailroom, arguments: dict[str, str],
              policy: Policy | None = None) -> Host:
    tools = Toolbox()

    @tools.tool(effect=Effect.WRITE, provenance="trusted", metadata={"preview": "email"})
    def send_email(to: str, subject: str, body: str) -> str:
        """Send an e-mail.

        Args:
            to: The recipient.
            subject: The subject line.
            body: The text.
        """
        mailroom.sent.append({"to": to, "subject": subject, "body": body})
        return f"sent to {to}"

    model = ScriptedModel([call("send_email", arguments), "Sent."])
    return Host(model=model, tools=tools, store=store, approver=DeferredApprover(),
                policy=policy)


def suspended_run(store: MemoryStore, mailroom: Mailroom,
                  arguments: dict[str, str] | None = None) -> tuple[Host, RunResult]:
    host = mail_host(store, mailroom, arguments or {
        "to": RLO_RECIPIENT, "subject": "Quarterly numbers", "body": "Attached.\nBob"})
    run = host.run_sync("Mail the numbers to Bob", principal="alice")
    assert run.status == "suspended"
    return host, run




def sign_in(client: TestClient, name: str = "carol") -> str:
    """Sign in; return the CSRF token of the new session."""
    response = client.post("/login", data={"token": TOKEN, "name": name},
                           headers={"origin": ORIGIN})
    assert response.status_code == 303, response.text
    page = client.get("/").text
    marker = 'name="csrf" value="'
    start = page.index(marker) + len(marker)
    return page[start:page.index('"', start)]
