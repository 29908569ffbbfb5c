"""Replay and shadow mode with a Cedar policy: unchanged, through the real gate and store."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.test_rollout import record, toolbox

from anfitrion._rollout import replay, shadow_report
from anfitrion.policy import load_policy
from anfitrion.store import Store, open_store

from .engines import engine

engine("cedarpy")

pytestmark = pytest.mark.anyio

CEDAR = """
@id("no-mail-after-taint")
forbid(principal, action == Action::"send_email", resource)
when { context.tainted && context.unproven.contains("to") };

@id("fetch-asks") @anfitrion("ask")
permit(principal, action == Action::"fetch", resource);
"""


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    opened = open_store(f"sqlite:///{tmp_path / 'rollout.db'}")
    try:
        yield opened
    finally:
        await opened.close()


def _cedar(tmp_path: Path) -> object:
    (tmp_path / "tools.cedar").write_text(CEDAR)
    (tmp_path / "candidate.toml").write_text('[[cedar]]\nid = "cedar"\n'
                                             'policies = "tools.cedar"\n')
    return load_policy(tmp_path / "candidate.toml")


async def test_replay_with_a_cedar_policy_reports_what_it_changes(store: Store,
                                                                  tmp_path: Path) -> None:
    await record(store)
    report = await replay(store, _cedar(tmp_path), tools={t.name: t for t in toolbox()})
    assert (report.calls, report.replayed) == (3, 3)
    assert sorted((c.before.value, c.after.value, c.rule_id, c.tool) for c in report.changes) \
        == [("allow", "ask", "cedar/fetch-asks", "fetch"),
            ("ask", "deny", "cedar/no-mail-after-taint", "send_email")]


async def test_shadow_mode_with_a_cedar_policy_records_its_disagreements(
        store: Store, tmp_path: Path) -> None:
    shadow = _cedar(tmp_path)
    session_id = await record(store, shadow=shadow)  # type: ignore[arg-type]
    records = await store.audit_records(session_id)
    shadowed = {r.data["call_id"]: r.data for r in records if r.type == "call.shadow_decided"}
    assert shadowed["c3"]["decision"]["rule_id"] == "cedar/no-mail-after-taint"
    assert shadowed["c3"]["status"] == "disagree"
    assert shadowed["c1"]["status"] == "agree"
    report = await shadow_report(store)
    assert (report.decisions, report.agreed, report.disagreed) == (3, 1, 2)
