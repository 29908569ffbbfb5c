"""Reviewer entitlements (issue 37): once reviewers are entitled, an answer or vote the grants
do not cover is refused through every door — inbox, API, webhook callback, CLI, MCP queue —
and audited; the grant that covered an answer is recorded with it; revoking a reviewer stops
their answers at once, audited."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from anfitrion import _answers as answers
from anfitrion._approvals import ApprovalRequest, Quorum, Reviewer
from anfitrion._cli.main import cli
from anfitrion._entitlements import Grant, grant
from anfitrion.channels._webhooks import DELIVERY_HEADER, SIGNATURE_HEADER, signature_header
from anfitrion.store import MemoryStore, Store, open_store
from anfitrion.web import create_app

from .inbox_support import ORIGIN, TOKEN, Mailroom, sign_in, suspended_run

SECRET = "whsec-0123456789abcdef"


def _records(store: Store, kind: str) -> list[dict[str, Any]]:
    async def read() -> list[dict[str, Any]]:
        return [dict(r.data) for r in await store.audit_records() if r.type == kind]
    return anyio.run(read)


def _signed_callback(request: ApprovalRequest, reviewer: str) -> tuple[bytes, dict[str, str]]:
    raw = json.dumps({"request_id": request.id, "digest": request.digest,
                      "decision": "approve", "reviewer": reviewer}).encode()
    delivery = uuid.uuid4().hex
    return raw, {"content-type": "application/json", DELIVERY_HEADER: delivery,
                 SIGNATURE_HEADER: signature_header([SECRET], int(time.time()), delivery, raw)}


def test_an_unentitled_answer_is_refused_through_every_door(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    from anfitrion.mcp._approval_queue import approval_queue

    url = f"sqlite:///{tmp_path / 'inbox.db'}"
    store = open_store(url)
    mailroom = Mailroom([])
    pending = [suspended_run(store, mailroom, {"to": f"{who}@example.com", "subject": "s",
                                               "body": "b"})[1].pending[0]
               for who in ("ana", "rui", "eva", "ivo", "lia")]
    # the only entitlement: olga may answer payments, not mail
    anyio.run(lambda: grant(store, "olga", Grant(("pay*",)), by="test"))
    app = create_app(store, token=TOKEN, allowed_hosts=["testserver"],
                     callback_secrets=[SECRET])
    with TestClient(app, base_url=ORIGIN, follow_redirects=False) as client:
        csrf = sign_in(client, "carol")
        page = client.post(f"/approvals/{pending[0].id}/decide",
                           data={"csrf": csrf, "digest": pending[0].digest,
                                 "decision": "approve"}, headers={"origin": ORIGIN})
        assert page.status_code == 403, page.text
        api = client.post(f"/api/v1/approvals/{pending[1].id}/approve",
                          json={"digest": pending[1].digest, "approver": "dora"},
                          headers={"authorization": f"Bearer {TOKEN}"})
        assert api.status_code == 403 and api.json()["error"] == "not_entitled"
        raw, headers = _signed_callback(pending[2], "olga")  # olga: not for mail
        hook = client.post("/api/v1/approvals/callback", content=raw, headers=headers)
        assert hook.status_code == 403, hook.text
        assert "tool 'send_email' is not in ['pay*']" in hook.text
    done = CliRunner().invoke(cli, ["approvals", "approve", pending[3].id, "--store", url,
                                    "--as", "erin"])
    assert done.exit_code == 1 and "erin holds no reviewer entitlement" in done.output

    async def queue() -> None:
        server = approval_queue(store, Reviewer("mallory", frozenset()))
        with pytest.raises(Exception, match="not entitled"):
            await server.call_tool("approve", {"request_id": pending[4].id,
                                               "digest": pending[4].digest})
    anyio.run(queue)

    async def answered() -> list[Any]:
        return [(await store.get_approval(r.id)) for r in pending]
    assert all(found is not None and found.answer is None for found in anyio.run(answered))
    refused = _records(store, "approval.refused")
    assert sorted(r["via"] for r in refused) == ["api", "cli", "inbox", "mcp", "webhook"]
    assert mailroom.sent == []
    anyio.run(store.close)


def test_the_grant_is_recorded_and_a_revocation_stops_answers_at_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'inbox.db'}"
    store = open_store(url)
    first, second = (suspended_run(store, Mailroom([]), {"to": f"{w}@example.com",
                                                         "subject": "s", "body": "b"})[1]
                     .pending[0] for w in ("ana", "rui"))
    runner = CliRunner()
    entitled = runner.invoke(cli, ["reviewers", "entitle", "erin", "--tool", "send_*",
                                   "--principal", "alice", "--store", url])
    assert entitled.exit_code == 0, entitled.output
    ok = runner.invoke(cli, ["approvals", "approve", first.id, "--store", url, "--as", "erin"])
    assert ok.exit_code == 0, ok.output
    [answered] = _records(store, "approval.answered")
    assert answered["detail"] == ("answered via cli; entitled: erin (tools send_*; "
                                  "principals alice)")
    revoked = runner.invoke(cli, ["reviewers", "revoke", "erin", "--store", url,
                                  "--reason", "left the team"])
    assert revoked.exit_code == 0, revoked.output
    refused = runner.invoke(cli, ["approvals", "approve", second.id, "--store", url,
                                  "--as", "erin"])
    assert refused.exit_code == 1
    assert "erin's entitlements were revoked by cli:" in refused.output
    assert "left the team" in refused.output
    [audit] = _records(store, "reviewer.revoked")
    assert audit["reviewer"] == "erin" and audit["reason"] == "left the team"
    listed = runner.invoke(cli, ["reviewers", "list", "--store", url])
    assert "erin (REVOKED): tools send_*; principals alice" in listed.output
    anyio.run(store.close)


@pytest.mark.anyio
@pytest.mark.parametrize(("amount", "allowed"), [(500, True), (1000, True), (1001, False),
                                                 ("500", False), (True, False)])
async def test_an_amount_limit_covers_only_numbers_up_to_it(amount: object,
                                                            allowed: bool) -> None:
    store = MemoryStore()
    await grant(store, "bob", Grant(("pay",), ("*",), "amount", 1000.0), by="test")
    request = ApprovalRequest.for_call(session_id="s1", principal_id="agent", call_id="c1",
                                       tool_name="pay", tool_definition_hash="h" * 64,
                                       arguments={"amount": amount}, effect="write",
                                       reason="r", rule_id="r", quorum=Quorum(2, ("finance",)))
    await store.create_approval(request)
    outcome = await answers.answer(store, request.id, request.digest, approved=True,
                                   approver="api:bob", via="api",
                                   reviewer=Reviewer("bob", frozenset({"finance"})))
    assert outcome.recorded is allowed
    if not allowed:
        assert outcome.refusal is answers.Refusal.NOT_ENTITLED


def test_a_bad_amount_limit_is_refused_by_the_cli(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    for bad in ("amount", "=5", "amount=nan", "amount=inf", "amount=lots"):
        result = CliRunner().invoke(cli, ["reviewers", "entitle", "bob", "--max", bad,
                                          "--store", url])
        assert result.exit_code != 0 and "ARGUMENT=AMOUNT" in result.output
