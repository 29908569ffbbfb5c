"""The other side of data-flow policy: after the session read untrusted content, a write whose
sinks are proven — the user's own recipient, the sender a mail service recorded — and whose
payload carries nothing unproven runs without a question; a tool that declares nothing still
asks (today's behaviour). Through the real host with a scripted model."""

from __future__ import annotations

import pytest

from anfitrion import Effect, Tool
from anfitrion.models._scripted import call
from anfitrion.policy import parse_policy
from anfitrion.policy._taint import TAINT_WARNING

from .test_dataflow_injected_sinks_ask_a_person import POLICY, Mailbox, run

pytestmark = pytest.mark.anyio


async def test_a_summary_to_the_users_own_recipient_runs_without_a_question_after_taint(
) -> None:
    box = Mailbox()
    email = {"to": ["bob@corp.example"], "subject": "Inbox summary",
             "body": "Two e-mails: lunch at noon, and the Q3 numbers are up."}
    result, asked = await run(box, [call("send_email", email)])
    assert asked == []
    assert box.sent == [email]
    assert [c.error_kind for c in result.calls] == [None, None]


async def test_a_reply_to_the_sender_the_service_recorded_runs_without_a_question() -> None:
    box = Mailbox()
    reply = {"to": ["news@shop.example"], "subject": "Unsubscribe", "body": "Please stop."}
    _, asked = await run(box, [call("send_email", reply)])
    assert asked == [] and box.sent == [reply]


async def test_a_read_of_a_url_no_untrusted_text_gave_stays_free_after_taint() -> None:
    box = Mailbox()
    _, asked = await run(box, [call("fetch", {"url": "https://corp.example/q3"})])
    assert asked == [] and box.fetched == ["https://corp.example/q3"]


async def test_a_read_of_a_new_path_on_an_injected_host_asks() -> None:
    box = Mailbox()
    _, asked = await run(box, [call("fetch", {"url": "https://collect.evil.example/other"})])
    assert len(asked) == 1 and "its host" in asked[0].warnings[0] and box.fetched == []


async def test_an_undeclared_write_still_asks_after_taint() -> None:
    box = Mailbox()
    undeclared = POLICY.replace("[tools.send_email]\nsinks = { to = \"recipient\" }\n"
                                "outward = [\"subject\", \"body\"]\n", "")
    email = {"to": ["bob@corp.example"], "subject": "Summary", "body": "Lunch at noon."}
    _, asked = await run(box, [call("send_email", email)], policy=parse_policy(undeclared))
    assert len(asked) == 1 and asked[0].warnings[0].startswith(TAINT_WARNING)
    assert box.sent == []


def test_the_tool_itself_can_declare_its_data_flow() -> None:
    def send(to: str, body: str) -> str:
        return "sent"

    tool = Tool.from_function(send, effect=Effect.WRITE,
                              dataflow={"sinks": {"to": "recipient"}, "outward": ["body"]})
    assert tool.dataflow is not None and tool.dataflow.sinks == {"to": "recipient"}
