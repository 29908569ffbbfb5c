"""Attacks on mail and the propose-then-confirm primitive: header injection, look-alike and
relay-routed recipients, changed or foreign drafts, and double sends. The Maildir is read back."""

from __future__ import annotations

import mailbox
from pathlib import Path
from typing import Any

import anyio
import pytest

from anfitrion import Principal, Toolbox, ToolContext
from anfitrion._drafts import draft_tools
from anfitrion.exceptions import ArgumentError, ToolError
from anfitrion.models._scripted import call
from anfitrion.store import MemoryStore
from anfitrion.toolkits import mail

EMAIL = {"to": ["ana@example.com"], "subject": "Minutes", "body": "See you on Monday."}


@pytest.fixture
def box(tmp_path: Path) -> tuple[Toolbox, MemoryStore, Path]:
    store = MemoryStore()
    maildir = tmp_path / "Maildir"
    tools = mail(store, sender="host@example.org", maildir=maildir,
                 allowed_domains=["example.com"])
    return tools, store, maildir


def _delivered(maildir: Path) -> list[mailbox.MaildirMessage]:
    return list(mailbox.Maildir(str(maildir), create=False)) if maildir.exists() else []


async def _draft(tools: Toolbox, content: dict[str, Any], who: str = "alice") -> str:
    tool = tools.get("draft_email")
    assert tool is not None
    result = await tool.handler(tool.validate(content),
                                ToolContext(Principal(who), "s0", "d1", tool.name))
    return str(result["draft_id"])


@pytest.mark.anyio
@pytest.mark.parametrize("subject", [
    "Hi\r\nBcc: eve@evil.com", "Hi\nBcc: eve@evil.com", "Hi\rBcc: eve@evil.com",
    "Hi\x85Bcc: eve@evil.com", "Hi\u2028Bcc: eve@evil.com", "Hi\u2029Bcc: eve@evil.com",
    "Hi\x0bBcc: eve@evil.com", "Hi\x0cBcc: eve@evil.com", "Hi\x1cBcc: eve@evil.com",
    "Hi\x00", "Hi\x9bBcc", "x" * 201,
])
async def test_a_subject_that_could_break_into_a_new_header_is_refused_before_asking(
        hostile: Any, box: Any, subject: str) -> None:
    tools, store, maildir = box
    content = {**EMAIL, "subject": subject}
    outcome = await hostile(tools, [call("draft_email", content),
                                    call("send_email", {"draft_id": "email-x", **content})],
                            store=store)
    assert [r.error_kind for r in outcome.results] == ["invalid_arguments"] * 2
    assert outcome.asked == [] and _delivered(maildir) == []


@pytest.mark.anyio
@pytest.mark.parametrize("address", [
    "ana@example.com\r\nBcc: eve@evil.com", "ana@example.com, eve@evil.com",
    "Ana <ana@example.com>", "ana@example.com\u2028", '"eve@evil.com"@example.com',
    "eve@evil.com@example.com", "ana@[127.0.0.1]", "ana@localhost", "ana@example.com.",
    "ana@-example.com", "ana@exam_ple.com", "user%evil.com@example.com",
    "evil.com!user@example.com", "ana@ex\u0430mple.com", "ana@example.com.evil.com",
    "ana@evilexample.com", "ana@EXAMPLE.com", " ana@example.com", "ana@example.com ",
    "ana@xn--exmple-cua.com", "",
])
async def test_a_recipient_that_is_not_one_plain_allowed_address_is_refused_before_asking(
        hostile: Any, box: Any, address: str) -> None:
    tools, store, maildir = box
    content = {**EMAIL, "to": [address]}
    outcome = await hostile(tools, [call("send_email", {"draft_id": "email-x", **content})],
                            store=store)
    assert outcome.result.error_kind == "invalid_arguments"
    assert outcome.asked == [] and _delivered(maildir) == []


@pytest.mark.anyio
async def test_header_text_in_the_body_stays_in_the_body(hostile: Any, box: Any) -> None:
    tools, store, maildir = box
    content = {**EMAIL, "body": "hello\r\n\r\nBcc: eve@evil.com\r\nSubject: pwned\r\n.\r\nMAIL"}
    draft_id = await _draft(tools, content)
    outcome = await hostile(tools, [call("send_email", {"draft_id": draft_id, **content})],
                            store=store)
    assert not outcome.result.is_error, outcome.result.content
    [message] = _delivered(maildir)
    assert message["Bcc"] is None and message["Subject"] == "Minutes"
    assert message.get_all("To") == ["ana@example.com"]


@pytest.mark.anyio
@pytest.mark.parametrize("change", [
    {"to": ["bob@example.com"]}, {"to": ["ana@example.com", "bob@example.com"]},
    {"subject": "Minutes "}, {"body": "See you on Tuesday."},
])
async def test_a_send_that_differs_from_its_draft_sends_nothing(
        hostile: Any, box: Any, change: dict[str, Any]) -> None:
    tools, store, maildir = box
    draft_id = await _draft(tools, EMAIL)
    outcome = await hostile(tools, [call("send_email", {"draft_id": draft_id, **EMAIL,
                                                        **change})], store=store)
    assert outcome.result.is_error and "differ" in outcome.result.content
    assert _delivered(maildir) == []


@pytest.mark.anyio
async def test_another_principals_draft_cannot_be_sent(hostile: Any, box: Any) -> None:
    tools, store, maildir = box
    draft_id = await _draft(tools, EMAIL, who="bob")
    outcome = await hostile(tools, [call("send_email", {"draft_id": draft_id, **EMAIL})],
                            store=store, principal="alice")
    assert outcome.result.is_error and "no pending" in outcome.result.content
    assert _delivered(maildir) == []


@pytest.mark.anyio
async def test_a_draft_is_sent_once_however_often_the_model_asks(hostile: Any, box: Any) -> None:
    tools, store, maildir = box
    draft_id = await _draft(tools, EMAIL)
    send = {"draft_id": draft_id, **EMAIL}
    outcome = await hostile(tools, [call("send_email", send), call("send_email", send),
                                    [call("send_email", send), call("send_email", send)]],
                            store=store)
    assert [r.is_error for r in outcome.results] == [False, True, True, True]
    assert len(_delivered(maildir)) == 1


@pytest.mark.anyio
async def test_two_concurrent_commits_of_one_draft_deliver_once(box: Any) -> None:
    tools, _, maildir = box
    draft_id = await _draft(tools, EMAIL)
    send = tools.get("send_email")
    assert send is not None
    outcomes: list[str] = []

    async def commit(call_id: str) -> None:
        try:
            await send.handler(send.validate({"draft_id": draft_id, **EMAIL}),
                               ToolContext(Principal("alice"), "s", call_id, send.name))
            outcomes.append("sent")
        except ToolError:
            outcomes.append("refused")

    with anyio.fail_after(20):
        async with anyio.create_task_group() as group:
            for i in range(8):
                group.start_soon(commit, f"c{i}")
    assert sorted(outcomes) == ["refused"] * 7 + ["sent"]
    assert len(_delivered(maildir)) == 1


@pytest.mark.anyio
async def test_a_draft_of_one_kind_cannot_be_committed_as_another(box: Any) -> None:
    tools, store, _ = box
    draft_id = await _draft(tools, EMAIL)
    done: list[Any] = []
    schema = {"type": "object", "properties": {"to": {"type": "array"},
                                               "subject": {"type": "string"},
                                               "body": {"type": "string"}}}
    _, commit = draft_tools(store, kind="refund", input_schema=schema,
                            action=lambda draft, context: done.append(draft))
    with pytest.raises(ToolError, match="no pending"):
        await commit.handler(commit.validate({"draft_id": draft_id, **EMAIL}),
                             ToolContext(Principal("alice"), "s", "c", commit.name))
    assert done == []


@pytest.mark.anyio
async def test_the_person_sees_invisible_characters_in_what_they_approve(
        hostile: Any, box: Any) -> None:
    tools, store, maildir = box
    content = {**EMAIL, "subject": "Invoice \u202egpj.exe", "body": "Pay\u200b now"}
    draft_id = await _draft(tools, content)
    outcome = await hostile(tools, [call("send_email", {"draft_id": draft_id, **content})],
                            store=store, approve=False)
    [request] = outcome.asked
    shown = request.describe()
    assert "RLO" in shown and "ZWSP" in shown
    assert "\u202e" not in shown and _delivered(maildir) == []


def test_the_sender_is_the_operators_and_the_model_cannot_set_it(box: Any) -> None:
    tools, _, _ = box
    send = tools.get("send_email")
    assert send is not None
    with pytest.raises(ArgumentError, match="not allowed"):
        send.validate({"draft_id": "x", **EMAIL, "from": "ceo@example.com"})
