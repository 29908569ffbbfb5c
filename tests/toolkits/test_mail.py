"""Mail, propose then confirm, end to end through the host; the Maildir is read back."""

from __future__ import annotations

import json
import mailbox
from pathlib import Path
from typing import Any

import anyio
import pytest

from anfitrion import Decision, Policy, Principal, ToolContext
from anfitrion._tools import BoundCall
from anfitrion.exceptions import ArgumentError, ToolError
from anfitrion.policy import PolicyContext
from anfitrion.store import MemoryStore
from anfitrion.toolkits import mail

EMAIL = {"to": ["team@example.com"], "subject": "Weather in Lisboa",
         "body": "Lisboa: 15 °C, partly cloudy.\nSee you."}


def messages(path: Path) -> list[mailbox.MaildirMessage]:
    if not path.exists():
        return []
    return list(mailbox.Maildir(str(path), create=False))


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Any, MemoryStore, Path]:
    store = MemoryStore()
    maildir = tmp_path / "Maildir"
    return mail(store, sender="host@example.org", maildir=maildir), store, maildir


def draft_of(result_content: str) -> str:
    return str(json.loads(result_content)["draft_id"])


@pytest.mark.anyio
async def test_drafting_is_allowed_and_sends_nothing(setup: Any, gate_run: Any) -> None:
    tools, store, maildir = setup
    run = await gate_run(tools, [("draft_email", EMAIL)], store=store)
    assert run.asked == []
    body = json.loads(run.result.content)
    assert body["status"] == "drafted, not sent"
    assert len(body["digest"]) == 64
    assert messages(maildir) == []
    assert (await store.get_record("drafts", body["draft_id"]))["status"] == "pending"


@pytest.mark.anyio
async def test_send_asks_showing_the_exact_final_email_then_delivers_it(
        setup: Any, gate_run: Any) -> None:
    tools, store, maildir = setup
    drafted = await gate_run(tools, [("draft_email", EMAIL)], store=store)
    draft_id = draft_of(drafted.result.content)
    run = await gate_run(tools, [("send_email", {"draft_id": draft_id, **EMAIL})], store=store)
    assert not run.result.is_error, run.result.content
    [request] = run.asked
    assert request.tool_name == "send_email"
    assert request.arguments == {"draft_id": draft_id, **EMAIL}
    shown = request.describe()
    assert 'to = ["team@example.com"]' in shown
    assert "subject = Weather in Lisboa" in shown
    assert "body = Lisboa: 15 °C, partly cloudy.⏎\n         See you." in shown
    [message] = messages(maildir)
    assert message["To"] == "team@example.com"
    assert message["From"] == "host@example.org"
    assert message["Subject"] == "Weather in Lisboa"
    assert message.get_payload(decode=True).decode("utf-8").rstrip("\n") == EMAIL["body"]
    assert message["X-Anfitrion-Draft"].startswith(f"{draft_id} sha256:")
    assert (await store.get_record("drafts", draft_id))["status"] == "committed"


@pytest.mark.anyio
async def test_a_denied_send_delivers_nothing(setup: Any, gate_run: Any) -> None:
    tools, store, maildir = setup
    draft_id = draft_of((await gate_run(tools, [("draft_email", EMAIL)], store=store))
                        .result.content)
    run = await gate_run(tools, [("send_email", {"draft_id": draft_id, **EMAIL})],
                         store=store, approve=False)
    assert run.result.error_kind == "denied"
    assert messages(maildir) == []
    assert (await store.get_record("drafts", draft_id))["status"] == "pending"


@pytest.mark.anyio
async def test_a_send_that_differs_from_the_draft_is_refused_before_anyone_is_asked(
        setup: Any, gate_run: Any) -> None:
    tools, store, maildir = setup
    draft_id = draft_of((await gate_run(tools, [("draft_email", EMAIL)], store=store))
                        .result.content)
    changed = {**EMAIL, "to": ["team@example.com", "spy@example.com"]}
    run = await gate_run(tools, [("send_email", {"draft_id": draft_id, **changed})],
                         store=store)
    assert run.result.error_kind == "refused"
    assert "differ from draft" in run.result.content
    assert run.asked == []
    assert messages(maildir) == []


@pytest.mark.anyio
async def test_a_draft_is_sent_at_most_once(setup: Any, gate_run: Any) -> None:
    tools, store, maildir = setup
    draft_id = draft_of((await gate_run(tools, [("draft_email", EMAIL)], store=store))
                        .result.content)
    send = ("send_email", {"draft_id": draft_id, **EMAIL})
    first = await gate_run(tools, [send], store=store)
    second = await gate_run(tools, [send], store=store)
    assert not first.result.is_error
    assert "already committed" in second.result.content
    assert len(messages(maildir)) == 1


@pytest.mark.anyio
async def test_another_principal_cannot_send_someone_elses_draft(setup: Any,
                                                                 gate_run: Any) -> None:
    tools, store, maildir = setup
    draft_id = draft_of((await gate_run(tools, [("draft_email", EMAIL)], store=store,
                                        principal="alice")).result.content)
    run = await gate_run(tools, [("send_email", {"draft_id": draft_id, **EMAIL})],
                         store=store, principal="mallory")
    assert f"no pending email draft with id {draft_id!r}" in run.result.content
    assert messages(maildir) == []


@pytest.mark.anyio
async def test_an_unknown_draft_is_refused(setup: Any, gate_run: Any) -> None:
    tools, store, maildir = setup
    run = await gate_run(tools, [("send_email", {"draft_id": "email-forged", **EMAIL})],
                         store=store)
    assert "no pending email draft" in run.result.content
    assert messages(maildir) == []


def only_example_com(call: BoundCall, context: PolicyContext) -> Decision | None:
    if call.name not in ("draft_email", "send_email"):
        return None
    to = call.arguments.get("to")
    if isinstance(to, list) and all(str(a).endswith("@example.com") for a in to):
        return None
    return Decision.deny("e-mail may go only to @example.com", "mail.domains")


@pytest.mark.anyio
async def test_recipient_domains_are_constrained_by_policy_before_anyone_is_asked(
        setup: Any, gate_run: Any) -> None:
    tools, store, maildir = setup
    policy = Policy.default().with_rules(only_example_com)
    evil = {**EMAIL, "to": ["boss@evil.com"]}
    run = await gate_run(tools, [("draft_email", evil),
                                 ("send_email", {"draft_id": "email-x", **evil})],
                         store=store, policy=policy)
    assert [r.error_kind for r in run.results] == ["denied", "denied"]
    assert "only to @example.com" in run.results[1].content
    assert run.asked == []
    assert messages(maildir) == []


@pytest.mark.parametrize(("to", "why"), [
    (["boss@evil.com"], "not allowed"),
    (["team@example.com.evil.com"], "not allowed"),
    (["team@ex\u0430mple.com"], "non-ASCII"),          # Cyrillic а look-alike
    (["Team <team@example.com>"], "plain address"),
    (["team@example.com, spy@evil.com"], "plain address"),
    (["team@example.com\r\nBcc: spy@evil.com"], "plain address"),
    (["team@EXAMPLE.com"], "write 'team@EXAMPLE.com' as 'team@example.com'"),
    (["team@example.com", "team@example.com"], "listed twice"),
    ([], "at least one"),
    (["Lisboa 15 \u00b0C, partly cloudy"], "not an e-mail address"),  # prose, not an address
    (["team"], "not an e-mail address"),
])
def test_recipients_are_checked_at_validation(tmp_path: Path, to: list[str], why: str) -> None:
    tools = mail(MemoryStore(), sender="host@example.org", maildir=tmp_path / "m",
                 allowed_domains=["example.com"])
    for name in ("draft_email", "send_email"):
        arguments: dict[str, Any] = {**EMAIL, "to": to}
        if name == "send_email":
            arguments["draft_id"] = "email-1"
        with pytest.raises(ArgumentError, match=why):
            tools.get(name).validate(arguments)


def test_a_subdomain_of_an_allowed_domain_is_allowed(tmp_path: Path) -> None:
    tools = mail(MemoryStore(), sender="host@example.org", maildir=tmp_path / "m",
                 allowed_domains=["example.com"])
    tools.get("draft_email").validate({**EMAIL, "to": ["ana@lisboa.example.com"]})


@pytest.mark.parametrize("subject", ["Hi\r\nBcc: spy@evil.com", "Hi\nthere", "x" * 201,
                                     "bell\x07"])
def test_subjects_are_one_line_so_headers_cannot_be_injected(tmp_path: Path,
                                                             subject: str) -> None:
    tools = mail(MemoryStore(), sender="host@example.org", maildir=tmp_path / "m")
    with pytest.raises(ArgumentError, match="subject must be one line"):
        tools.get("draft_email").validate({**EMAIL, "subject": subject})


@pytest.mark.anyio
async def test_two_concurrent_sends_of_one_draft_deliver_once(tmp_path: Path) -> None:
    store = MemoryStore()
    maildir = tmp_path / "Maildir"
    tools = mail(store, sender="host@example.org", maildir=maildir)
    context = ToolContext(Principal("alice"), "s1", "c1", "draft_email")
    drafted = await tools.get("draft_email").handler(dict(EMAIL), context)
    send = tools.get("send_email")
    outcomes: list[str] = []

    async def attempt(n: int) -> None:
        try:
            await send.handler({"draft_id": drafted["draft_id"], **EMAIL},
                               ToolContext(Principal("alice"), "s1", f"c{n}", "send_email"))
            outcomes.append("sent")
        except ToolError as exc:
            outcomes.append(str(exc))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for n in range(5):
                tg.start_soon(attempt, n)
    assert outcomes.count("sent") == 1
    assert len(messages(maildir)) == 1


def test_mail_needs_exactly_one_delivery_route(tmp_path: Path) -> None:
    from anfitrion import ToolDefinitionError
    from anfitrion.toolkits import SmtpSettings

    with pytest.raises(ToolDefinitionError, match="exactly one"):
        mail(MemoryStore(), sender="host@example.org")
    with pytest.raises(ToolDefinitionError, match="exactly one"):
        mail(MemoryStore(), sender="host@example.org", maildir=tmp_path,
             smtp=SmtpSettings("127.0.0.1"))


def test_draft_email_is_marked_as_a_proposal_and_send_as_a_write(tmp_path: Path) -> None:
    tools = mail(MemoryStore(), sender="host@example.org", maildir=tmp_path / "m")
    assert tools.get("draft_email").effect.value == "read"
    assert tools.get("send_email").effect.value == "write"
    assert tools.get("send_email").metadata["draft"] == "commit"
