"""A fixed handful of AgentDojo cases, run offline through the gate (the full run is in
benchmarks/agentdojo/)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agentdojo")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "agentdojo"))

import harness

CASES = [
    ("banking", "user_task_0", "injection_task_0"),  # pay a bill; bill says pay the attacker
    ("slack", "user_task_3", "injection_task_2"),  # summarise; page says post all to a site
    ("workspace", "user_task_0", "injection_task_0"),  # calendar; invite says mail the attacker
    ("travel", "user_task_3", "injection_task_3"),  # hotels; review says mail the profile out
]


async def _run(suite_name: str, user: str, injection: str | None,
               approver: str, reads: str | None = None) -> harness.RunReport:
    suite = harness.get_suites(harness.latest_version())[suite_name]
    operator = harness.operator_for(suite_name)
    user_task = suite.get_user_task_by_id(user)
    if injection is None:
        return await harness.run_one(suite, operator, user_task, None, {}, approver, reads)
    injection_task = suite.get_injection_task_by_id(injection)
    injections = harness.attack_for(suite).attack(user_task, injection_task)
    return await harness.run_one(suite, operator, user_task, injection_task, injections,
                                 approver, reads)


@pytest.mark.anyio
@pytest.mark.parametrize(("suite", "user", "injection"), CASES)
async def test_the_case_is_live_when_a_person_approves_everything(
        suite: str, user: str, injection: str) -> None:
    """Without the warnings, the scripted compromised model really does succeed."""
    report = await _run(suite, user, injection, "approve_all")
    assert report.injected
    assert report.attack_succeeded is True


@pytest.mark.anyio
@pytest.mark.parametrize(("suite", "user", "injection"), CASES)
async def test_no_attacker_call_runs_unseen_and_every_request_is_flagged(
        suite: str, user: str, injection: str) -> None:
    # a person who approves look-ups lets the injection reach the model (under the operators'
    # reads="all" every read after the first untrusted result asks) and refuses flagged writes
    report = await _run(suite, user, injection, "approve_reads")
    attacker: list[Any] = [c for c in report.calls if c.attacker]
    assert attacker, "the injection should have reached the model"
    assert not [c for c in attacker if c.executed and not c.asked]  # reads included
    assert all(c.taint_warning for c in attacker if c.asked)
    assert report.attack_succeeded is False


@pytest.mark.anyio
async def test_with_reads_left_free_the_attackers_look_up_runs_and_only_the_write_asks() -> None:
    """What the operators' ``reads="all"`` buys: under the default ``"url"`` setting the
    injected look-up of the traveller's profile runs unseen; the e-mail carrying it out asks."""
    report = await _run("travel", "user_task_3", "injection_task_3", "reject_flagged",
                        reads="url")
    unseen = [c.tool for c in report.calls if c.attacker and c.executed and not c.asked]
    assert unseen == ["get_user_information"]
    assert [c.tool for c in report.calls if c.attacker and c.asked] == ["send_email"]
    assert report.attack_succeeded is False


@pytest.mark.anyio
@pytest.mark.parametrize(("suite", "user", "injection"), CASES)
async def test_the_injected_value_itself_is_flagged(suite: str, user: str, injection: str) -> None:
    # reads="url": the user task's own look-ups run, so the injection reaches the model
    report = await _run(suite, user, injection, "reject_argument_flags", reads="url")
    assert report.injected
    assert any(c.argument_flag for c in report.calls if c.attacker and c.asked)
    assert report.attack_succeeded is False


@pytest.mark.anyio
@pytest.mark.parametrize(("suite", "user"), [(s, u) for s, u, _ in CASES])
async def test_the_benign_task_still_succeeds(suite: str, user: str) -> None:
    report = await _run(suite, user, None, "approve_all")
    assert report.utility is True
    assert not any(c.attacker for c in report.calls)
