"""The inbox's effects pages: listing effects by state, one effect's detail with its arguments
redacted, and a person resolving it — signed in, with the CSRF token, from the inbox's origin,
through the same path as the CLI and the API."""

from __future__ import annotations

import json
from typing import Any

import anyio
from starlette.testclient import TestClient

from anfitrion import DenyAllApprover, Effect, Policy, Tool
from anfitrion._conversation import ToolCall
from anfitrion._gate import Gate, _silent
from anfitrion.policy import Decision
from anfitrion.store import LedgerState, MemoryStore
from anfitrion.testing import gate_session

from .inbox_support import ORIGIN, sign_in

H = {"origin": ORIGIN}
SECRET = "sk-live-4fG7hJ2kL9mN3pQ8rS1tV6wXyZ"
SCHEMA = {"type": "object", "properties": {"payment_id": {"type": "string"},
                                           "card_pin": {"type": "string"},
                                           "memo": {"type": "string"}},
          "required": ["payment_id"]}


def _refund(ran: list[Any], *, fail: bool) -> Tool:
    def handler(arguments: dict[str, Any]) -> str:
        ran.append(arguments)
        if fail:
            raise RuntimeError("the bank hung up")
        return "refunded"
    return Tool.from_schema("refund", SCHEMA, handler, effect=Effect.WRITE,
                            effect_key="refund:{payment_id}", sensitive={"card_pin"})


def _propose(store: MemoryStore, tool: Tool, call_id: str, payment: str = "p1") -> str:
    async def go() -> str:
        gate = Gate(policy=Policy([lambda c, ctx: Decision.allow("t", "allow")]),
                    approver=DenyAllApprover(), store=store, emit=_silent)
        arguments = {"payment_id": payment, "card_pin": "4321", "memo": f"key {SECRET}"}
        outcome = await gate.process(ToolCall.from_raw(call_id, "refund", json.dumps(arguments)),
                                     {"refund": tool}, gate_session("alice", "s1", turn=1))
        assert outcome.result is not None
        return outcome.result.content
    return anyio.run(go)


def _only_key(store: MemoryStore) -> str:
    [entry] = anyio.run(store.list_effects)
    return entry.key


def test_the_effects_page_lists_unsettled_effects_and_all_on_request(
        browser_client: tuple[TestClient, str], store: MemoryStore) -> None:
    client, _ = browser_client
    ran: list[Any] = []
    _propose(store, _refund(ran, fail=True), "c1", "p1")      # unknown
    _propose(store, _refund(ran, fail=False), "c2", "p2")     # done
    page = client.get("/effects").text
    assert 'refund:&#34;p1&#34;' in page and "unknown" in page
    assert 'refund:&#34;p2&#34;' not in page  # (not a bare "p2": the CSRF token may hold it)
    everything = client.get("/effects?show=all").text
    assert 'refund:&#34;p2&#34;' in everything and ">done<" in everything
    assert 'aria-current="page">Effects' in page


def test_an_effects_detail_shows_its_arguments_redacted(
        browser_client: tuple[TestClient, str], store: MemoryStore) -> None:
    client, _ = browser_client
    _propose(store, _refund([], fail=True), "c1")
    key = _only_key(store)
    page = client.get(f"/effects/{key}").text
    assert key in page and "It happened" in page and "It did not happen" in page
    assert SECRET not in page and "4321" not in page
    assert "[sensitive]" in page and "[secret]" in page
    assert client.get(f"/effects/{'0' * 64}").status_code == 404
    assert client.get("/effects/..%2F..%2Fetc").status_code == 404


def test_a_person_resolves_an_unknown_effect_and_the_model_is_told(
        browser_client: tuple[TestClient, str], store: MemoryStore) -> None:
    client, csrf = browser_client
    ran: list[Any] = []
    _propose(store, _refund(ran, fail=True), "c1")
    key = _only_key(store)
    response = client.post(f"/effects/{key}/resolve", headers=H, data={
        "csrf": csrf, "call_id": "c1", "outcome": "done", "note": "the statement shows it"})
    assert response.status_code == 303 and response.headers["location"] == f"/effects/{key}"
    entry = anyio.run(store.effect_state, key)
    assert entry is not None and entry.state is LedgerState.DONE
    assert entry.resolved_by == "web:carol"
    page = client.get(f"/effects/{key}").text
    assert "resolved_done" in page and "It happened" not in page  # no form any more
    records = anyio.run(store.audit_records)
    [resolved] = [r for r in records if r.type == "effect.resolved"]
    assert resolved.data["status"] == "resolved_done"
    assert "via web" in resolved.data["detail"] and "the statement shows it" in \
        resolved.data["detail"]
    told = _propose(store, _refund(ran, fail=False), "c2")
    assert "resolved by web:carol" in told and len(ran) == 1
    again = client.post(f"/effects/{key}/resolve", headers=H, data={
        "csrf": csrf, "call_id": "c1", "outcome": "failed"})
    assert again.status_code == 409 and "not unsettled" in again.text


def test_resolving_needs_sign_in_the_csrf_token_and_the_inbox_origin(
        client: TestClient, store: MemoryStore) -> None:
    _propose(store, _refund([], fail=True), "c1")
    key = _only_key(store)
    form = {"call_id": "c1", "outcome": "failed"}
    assert client.post(f"/effects/{key}/resolve", headers=H, data=form).status_code == 401
    assert client.get("/effects").status_code == 303  # to sign in
    csrf = sign_in(client)
    assert client.post(f"/effects/{key}/resolve", headers=H, data=form).status_code == 403
    assert client.post(f"/effects/{key}/resolve", headers=H,
                       data={**form, "csrf": "x" * 40}).status_code == 403
    assert client.post(f"/effects/{key}/resolve", headers={"origin": "http://evil.example"},
                       data={**form, "csrf": csrf}).status_code == 403
    assert client.post(f"/effects/{key}/resolve", data={**form, "csrf": csrf}).status_code == 403
    entry = anyio.run(store.effect_state, key)
    assert entry is not None and entry.state is LedgerState.UNKNOWN


def test_a_resolution_for_another_call_than_the_one_shown_or_without_an_outcome_is_refused(
        browser_client: tuple[TestClient, str], store: MemoryStore) -> None:
    client, csrf = browser_client
    _propose(store, _refund([], fail=True), "c1")
    key = _only_key(store)
    stale = client.post(f"/effects/{key}/resolve", headers=H, data={
        "csrf": csrf, "call_id": "another-call", "outcome": "done"})
    assert stale.status_code == 409 and "another call" in stale.text
    vague = client.post(f"/effects/{key}/resolve", headers=H, data={
        "csrf": csrf, "call_id": "c1", "outcome": "maybe"})
    assert vague.status_code == 422
    missing = client.post(f"/effects/{'f' * 64}/resolve", headers=H, data={
        "csrf": csrf, "call_id": "c1", "outcome": "done"})
    assert missing.status_code == 404
    entry = anyio.run(store.effect_state, key)
    assert entry is not None and entry.state is LedgerState.UNKNOWN


def test_hostile_effect_text_is_escaped_and_its_hidden_characters_shown(
        browser_client: tuple[TestClient, str], store: MemoryStore) -> None:
    client, _ = browser_client
    _propose(store, _refund([], fail=True), "c1", payment="<script>alert(1)</script>\u202e")
    key = _only_key(store)
    for page in (client.get("/effects").text, client.get(f"/effects/{key}").text):
        assert "<script>alert(1)" not in page
        assert "&lt;script&gt;" in page or "\\u003cscript" in page
        assert 'class="hidden-char"' in page
