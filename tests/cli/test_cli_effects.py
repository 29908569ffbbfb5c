"""``anfitrion effects`` and ``/api/v1/effects``: a person settles an effect of unknown outcome,
and the resolution is audited with who and why."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from click.testing import CliRunner

from anfitrion import DenyAllApprover, Effect, Policy, Tool
from anfitrion._conversation import ToolCall
from anfitrion._gate import Gate, _silent
from anfitrion.policy import Decision
from anfitrion.store import Store, open_store
from anfitrion.testing import gate_session

SCHEMA = {"type": "object", "properties": {"payment_id": {"type": "string"}},
          "required": ["payment_id"]}
TOKEN = "t" * 40


def _refund(ran: list[Any], *, fail: bool) -> Tool:
    def handler(arguments: dict[str, Any]) -> str:
        ran.append(arguments)
        if fail:
            raise RuntimeError("the bank hung up")
        return "refunded"
    return Tool.from_schema("refund", SCHEMA, handler, effect=Effect.WRITE,
                            effect_key="refund:{payment_id}")


async def _propose(store: Store, tool: Tool, call_id: str) -> str:
    gate = Gate(policy=Policy([lambda c, ctx: Decision.allow("t", "allow")]),
                approver=DenyAllApprover(), store=store, emit=_silent)
    outcome = await gate.process(ToolCall.from_raw(call_id, "refund", '{"payment_id": "p1"}'),
                                 {"refund": tool}, gate_session("alice", "s1", turn=1))
    assert outcome.result is not None
    return outcome.result.content


async def _with_store(url: str, work: Any) -> Any:
    store = open_store(url)
    try:
        return await work(store)
    finally:
        await store.close()


def test_a_person_resolves_an_unknown_effect_from_the_cli_and_the_model_is_told(
        tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    ran: list[Any] = []
    anyio.run(_with_store, url, lambda s: _propose(s, _refund(ran, fail=True), "c1"))
    runner = CliRunner()
    listed = runner.invoke(_cli(), ["effects", "list", "--store", url, "--json"])
    assert listed.exit_code == 0, listed.output
    [effect] = json.loads(listed.output)["effects"]
    assert effect["state"] == "unknown" and effect["display"] == 'refund:"p1"'
    key = effect["key"]
    text = runner.invoke(_cli(), ["effects", "list", "--store", url])
    assert key[:16] in text.output and "unknown" in text.output
    shown = runner.invoke(_cli(), ["effects", "show", key[:10], "--store", url])
    assert shown.exit_code == 0 and key in shown.output
    assert runner.invoke(_cli(), ["effects", "resolve", key, "--store", url]).exit_code != 0
    done = runner.invoke(_cli(), ["effects", "resolve", key[:12], "--done", "--note",
                                  "the bank statement shows it", "--store", url])
    assert done.exit_code == 0, done.output
    again = runner.invoke(_cli(), ["effects", "resolve", key, "--failed", "--store", url])
    assert again.exit_code != 0 and "not unsettled" in again.output
    told = anyio.run(_with_store, url, lambda s: _propose(s, _refund(ran, fail=False), "c2"))
    assert "resolved by cli:" in told and "the bank statement shows it" in told
    assert len(ran) == 1
    records = anyio.run(_with_store, url, lambda s: s.audit_records())
    [resolved] = [r for r in records if r.type == "effect.resolved"]
    assert resolved.data["effect_key"] == key
    assert resolved.data["status"] == "resolved_done"
    assert "via cli: the bank statement shows it" in resolved.data["detail"]


def test_the_api_lists_and_resolves_effects_behind_the_bearer_token(tmp_path: Path) -> None:
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from anfitrion.web import create_app

    url = f"sqlite:///{tmp_path / 'store.db'}"
    ran: list[Any] = []
    anyio.run(_with_store, url, lambda s: _propose(s, _refund(ran, fail=True), "c1"))
    store = open_store(url)
    app = create_app(store, token=TOKEN, allowed_hosts=["testserver"])
    auth = {"authorization": f"Bearer {TOKEN}"}
    with TestClient(app, base_url="http://testserver") as client:
        assert client.get("/api/v1/effects").status_code == 401
        [effect] = client.get("/api/v1/effects", headers=auth).json()["effects"]
        key = effect["key"]
        assert client.get(f"/api/v1/effects/{key}", headers=auth).json()["state"] == "unknown"
        assert client.get("/api/v1/effects/nope", headers=auth).status_code == 404
        bad = client.post(f"/api/v1/effects/{key}/resolve", json={"outcome": "maybe"},
                          headers=auth)
        assert bad.status_code == 422
        ok = client.post(f"/api/v1/effects/{key}/resolve", headers=auth,
                         json={"outcome": "failed", "note": "no money moved", "by": "t-7"})
        assert ok.status_code == 200 and ok.json()["state"] == "resolved_failed"
        assert ok.json()["resolved_by"] == "api:t-7"
        twice = client.post(f"/api/v1/effects/{key}/resolve", headers=auth,
                            json={"outcome": "done"})
        assert twice.status_code == 409
        assert client.get("/api/v1/effects", headers=auth).json()["effects"] == []
    anyio.run(store.close)
    # it did not happen: the model may run it again, once
    assert anyio.run(_with_store, url,
                     lambda s: _propose(s, _refund(ran, fail=False), "c2")) == "refunded"
    assert len(ran) == 2


def _cli() -> Any:
    from anfitrion._cli.main import cli

    return cli
