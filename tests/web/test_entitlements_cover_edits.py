"""Reviewer entitlements hold for the call that runs, not only the one proposed: "approve with
edits" cannot carry a payment past the editor's limit — at the door (the inbox), and again at
the gate when the edited call is approved on resume (an edit recorded by any other path) — and
an approver in the host's process is held to the same grants as every door."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from starlette.testclient import TestClient

from anfitrion import (
    ApprovalAnswer,
    ApprovalRequest,
    CallbackApprover,
    DeferredApprover,
    Effect,
    Host,
    Toolbox,
)
from anfitrion._entitlements import Grant, grant
from anfitrion.store import MemoryStore
from anfitrion.testing import ScriptedModel, call
from anfitrion.web import create_app

from .inbox_support import ORIGIN, TOKEN, sign_in

LIMIT = 100.0
PROPOSED = {"to": "acme", "amount": 50}


def _host(store: MemoryStore, paid: list[tuple[str, int]], approver: Any = None) -> Host:
    tools = Toolbox()

    @tools.tool(effect=Effect.WRITE, provenance="trusted")
    def pay(to: str, amount: int) -> str:
        """Pay someone.

        Args:
            to: The payee.
            amount: The amount.
        """
        paid.append((to, amount))
        return f"paid {amount} to {to}"

    return Host(model=ScriptedModel([call("pay", PROPOSED), "Paid."]), tools=tools, store=store,
                approver=approver or DeferredApprover())


def _pending(store: MemoryStore, paid: list[tuple[str, int]]) -> tuple[Host, ApprovalRequest]:
    anyio.run(lambda: grant(store, "bob", Grant(("pay",), ("*",), "amount", LIMIT), by="test"))
    host = _host(store, paid)
    run = host.run_sync("Pay acme", principal="alice")
    assert run.status == "suspended"
    return host, run.pending[0]


def _refusals(store: MemoryStore) -> list[dict[str, Any]]:
    async def read() -> list[dict[str, Any]]:
        return [dict(r.data) for r in await store.audit_records() if r.type == "approval.refused"]
    return anyio.run(read)


@pytest.mark.parametrize("amount", [1_000_000, 101, 100.5, 1e300, "50", True, None, [50],
                                    {"value": 50}])
def test_an_edit_past_the_editors_limit_is_refused_at_the_inbox(amount: object) -> None:
    """Bob may approve payments up to 100. The agent proposes 50; bob approves "with edits",
    raising the amount (or making it something the limit cannot judge)."""
    store, paid = MemoryStore(), []
    host, request = _pending(store, paid)
    app = create_app(store, token=TOKEN, allowed_hosts=["testserver"])
    edited = {"to": "acme", "amount": amount}
    with TestClient(app, base_url=ORIGIN, follow_redirects=False) as client:
        csrf = sign_in(client, "bob")
        response = client.post(f"/approvals/{request.id}/edit", headers={"origin": ORIGIN},
                               data={"csrf": csrf, "digest": request.digest,
                                     "arguments": json.dumps(edited)})
    assert response.status_code == 403, response.text
    assert "the edited call" in response.text
    found = anyio.run(store.get_approval, request.id)
    assert found is not None and found.answer is None  # still waiting for someone entitled
    [refused] = _refusals(store)
    assert refused["via"] == "inbox" and refused["approver"] == "web:bob"
    assert host.resume_sync(request.session_id).status == "suspended"
    assert paid == []


def test_an_edit_within_the_limit_runs_as_edited() -> None:
    store, paid = MemoryStore(), []
    host, request = _pending(store, paid)
    app = create_app(store, token=TOKEN, allowed_hosts=["testserver"])
    with TestClient(app, base_url=ORIGIN, follow_redirects=False) as client:
        csrf = sign_in(client, "bob")
        response = client.post(f"/approvals/{request.id}/edit", headers={"origin": ORIGIN},
                               data={"csrf": csrf, "digest": request.digest,
                                     "arguments": json.dumps({"to": "acme", "amount": 80})})
    assert response.status_code == 303, response.text
    assert host.resume_sync(request.session_id).status == "completed"
    assert paid == [("acme", 80)]


def test_an_edit_recorded_past_the_door_is_not_approved_at_the_gate() -> None:
    """An edit written by a door that does not check (an older process, a bug, the store
    written directly): the gate checks the editor's grants before approving the edited call."""
    store, paid = MemoryStore(), []
    host, request = _pending(store, paid)
    edit = ApprovalAnswer.edit(request, {"to": "acme", "amount": 1_000_000}, "web:bob",
                               approve=True)
    assert anyio.run(store.answer_approval, edit)
    run = host.resume_sync(request.session_id)
    assert run.status == "suspended"  # the edited call waits for someone entitled to it
    assert paid == []
    [refused] = _refusals(store)
    assert refused["via"] == "edit" and "1000000 is above 100" in refused["detail"]


@pytest.mark.parametrize(("name", "runs"), [("carol", False), ("bob", True)])
def test_an_approver_in_process_is_held_to_the_grants(name: str, runs: bool) -> None:
    store, paid = MemoryStore(), []
    anyio.run(lambda: grant(store, "bob", Grant(("pay",), ("*",), "amount", LIMIT), by="test"))
    host = _host(store, paid, CallbackApprover(lambda request: True, name=name))
    run = host.run_sync("Pay acme", principal="alice")
    if runs:
        assert run.status == "completed" and paid == [("acme", 50)]
        assert _refusals(store) == []
    else:
        assert run.status == "suspended" and paid == []
        [refused] = _refusals(store)
        assert refused["via"] == "approver" and "carol holds no reviewer entitlement" \
            in refused["detail"]
