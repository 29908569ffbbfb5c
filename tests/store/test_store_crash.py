"""Crash tests: a host process is SIGKILLed at each ledger state (SQLite, and PostgreSQL).

After a restart nothing has run twice and nothing approved is lost: an approval consumed
before the kill still executes (once); a claim left unsettled is reported as "outcome unknown"
and never re-run; a settled call returns its stored result.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from anfitrion import _resolutions as resolutions
from anfitrion._approvals import ApprovalAnswer
from anfitrion._audit import verify_chain
from anfitrion.store import LedgerState, open_store

from .pg_schema import pg_schema_url

WORKER = Path(__file__).with_name("crash_worker.py")


@pytest.fixture
def pg_url() -> Iterator[str]:
    yield from pg_schema_url()


def worker(url: str, effects: Path, *args: str, **kwargs: Any) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(WORKER), url, str(effects), *args],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, **kwargs)


def finish(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])  # after SESSION …
    return result


async def approve(url: str, session_id: str) -> None:
    store = open_store(url)
    try:
        [request] = await store.list_approvals(session_id=session_id)
        assert await store.answer_approval(ApprovalAnswer.to(request, True, "bob"))
    finally:
        await store.close()


async def ledger_state(url: str, session_id: str) -> tuple[LedgerState | None, list[Any], bool]:
    store = open_store(url)
    try:
        entry = await store.execution_state(session_id, "w1")
        unknown = list(await store.list_unknown_executions())
        intact = verify_chain(await store.audit_records()).ok
        return (entry.state if entry else None), unknown, intact
    finally:
        await store.close()


@pytest.mark.parametrize(("kill_at", "effects_after", "output", "final_state"), [
    ("approved", 1, "sent to ana", LedgerState.DONE),
    ("claimed", 0, "outcome unknown", LedgerState.UNKNOWN),
    ("executed", 1, "outcome unknown", LedgerState.UNKNOWN),
    ("settled", 1, "sent to ana", LedgerState.DONE),
])
@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres",
                                                            marks=pytest.mark.postgres)])
def test_a_host_killed_at_a_ledger_state_never_runs_twice_nor_loses_an_approval(
        tmp_path: Path, kill_at: str, effects_after: int, output: str,
        final_state: LedgerState, backend: str, request: pytest.FixtureRequest) -> None:
    url = (f"sqlite:///{tmp_path / 'host.db'}" if backend == "sqlite"
           else request.getfixturevalue("pg_url"))
    effects = tmp_path / "effects.log"
    suspended = finish(worker(url, effects, "run"))
    assert suspended["status"] == "suspended"
    session_id = suspended["session_id"]
    anyio.run(approve, url, session_id)

    doomed = worker(url, effects, "resume", session_id, kill_at)
    assert doomed.stdout is not None
    assert doomed.stdout.readline().strip() == f"AT {kill_at}"
    doomed.send_signal(signal.SIGKILL)
    doomed.communicate(timeout=60)  # reaps it and closes the pipes
    assert doomed.returncode == -signal.SIGKILL
    ran_before_restart = effects.read_text().count("sent to") if effects.exists() else 0

    restarted = finish(worker(url, effects, "resume", session_id, "none"))
    assert restarted["status"] == "completed"
    assert output in restarted["output"]
    ran = effects.read_text().count("sent to") if effects.exists() else 0
    assert ran == effects_after
    assert ran >= ran_before_restart
    state, unknown, intact = anyio.run(ledger_state, url, session_id)
    assert state is final_state
    assert ((session_id, "w1") in unknown) is (final_state is LedgerState.UNKNOWN)
    assert intact


@pytest.mark.parametrize(("kill_at", "effects_after", "output", "final_state"), [
    ("approved", 1, "sent to ana", LedgerState.DONE),
    ("claimed", 0, "outcome unknown", LedgerState.UNKNOWN),
    ("executed", 1, "outcome unknown", LedgerState.UNKNOWN),
    ("settled", 1, "sent to ana", LedgerState.DONE),
])
def test_a_host_killed_during_its_first_run_is_resumed_without_running_twice(
        tmp_path: Path, kill_at: str, effects_after: int, output: str,
        final_state: LedgerState) -> None:
    """An approver answered at once: the whole ledger is walked before any suspension."""
    url = f"sqlite:///{tmp_path / 'host.db'}"
    effects = tmp_path / "effects.log"
    doomed = worker(url, effects, "run-approving", "-", kill_at)
    assert doomed.stdout is not None
    session_id = doomed.stdout.readline().split()[1]
    assert doomed.stdout.readline().strip() == f"AT {kill_at}"
    doomed.send_signal(signal.SIGKILL)
    doomed.communicate(timeout=60)

    restarted = finish(worker(url, effects, "resume", session_id, "none"))
    assert restarted["status"] == "completed"
    assert output in restarted["output"]
    assert (effects.read_text().count("sent to") if effects.exists() else 0) == effects_after
    state, _, intact = anyio.run(ledger_state, url, session_id)
    assert state is final_state
    assert intact


async def log_and_ledger(url: str, session_id: str) -> tuple[LedgerState | None,
                                                             list[tuple[str, Any]], bool]:
    store = open_store(url)
    try:
        entry = await store.execution_state(session_id, "w1")
        records = await store.audit_records()
        kinds = [(r.type, r.data.get("status")) for r in records
                 if r.session_id == session_id and r.data.get("call_id") == "w1"]
        return (entry.state if entry else None), kinds, verify_chain(records).ok
    finally:
        await store.close()


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres",
                                                            marks=pytest.mark.postgres)])
def test_a_host_killed_right_after_its_claim_leaves_the_claim_and_its_records(
        tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> None:
    """The claim and the audit records before the effect share one transaction: a kill right
    after it leaves both — the proposal, validation, decision and the claim's own record —
    and the call, never run, is answered "outcome unknown" when the run is resumed."""
    url = (f"sqlite:///{tmp_path / 'host.db'}" if backend == "sqlite"
           else request.getfixturevalue("pg_url"))
    effects = tmp_path / "effects.log"
    doomed = worker(url, effects, "run-approving", "-", "claimed")
    assert doomed.stdout is not None
    session_id = doomed.stdout.readline().split()[1]
    assert doomed.stdout.readline().strip() == "AT claimed"
    doomed.send_signal(signal.SIGKILL)
    doomed.communicate(timeout=60)
    assert doomed.returncode == -signal.SIGKILL

    state, kinds, intact = anyio.run(log_and_ledger, url, session_id)
    assert state is LedgerState.CLAIMED
    assert intact
    stages = [kind for kind, _ in kinds]
    for stage in ("call.proposed", "call.validated", "call.decided", "execution.claimed"):
        assert stage in stages, kinds
    assert ("execution.claimed", "claimed") in kinds

    restarted = finish(worker(url, effects, "resume", session_id, "none"))
    assert "outcome unknown" in restarted["output"]
    assert not effects.exists()  # the send never ran, and was not run on resume
    state, kinds, intact = anyio.run(log_and_ledger, url, session_id)
    assert state is LedgerState.UNKNOWN and intact
    assert ("execution.claimed", "unknown") in kinds


async def approve_via_answers(url: str, session_id: str) -> list[str]:
    """A person approves every request of the session (the one answer path); their ids."""
    from anfitrion import _answers as answers

    store = open_store(url)
    try:
        requests = await store.list_approvals(session_id=session_id, pending_only=False)
        for request in requests:
            done = await answers.answer(store, request.id, request.digest, approved=True,
                                        approver="bob", via="test")
            assert done.answer is not None
        return [r.id for r in requests]
    finally:
        await store.close()


async def session_facts(url: str, session_id: str) -> tuple[str, int, int]:
    store = open_store(url)
    try:
        state = await store.load_session(session_id)
        requests = await store.list_approvals(session_id=session_id, pending_only=False)
        unanswered = await store.list_approvals(session_id=session_id)
        assert state is not None
        return state.status, len(requests), len(unanswered)
    finally:
        await store.close()


@pytest.mark.parametrize("kill_at", ["requested", "suspending"])
@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres",
                                                            marks=pytest.mark.postgres)])
def test_an_approval_stored_before_a_crash_is_the_one_that_counts(
        tmp_path: Path, kill_at: str, backend: str, request: pytest.FixtureRequest) -> None:
    """Killed after the request is stored but before the session is saved as suspended: a
    person approves that request, `resume --ready` takes the session (its lease died with its
    process), reuses the request instead of raising a new one, and the call runs once."""
    url = (f"sqlite:///{tmp_path / 'host.db'}" if backend == "sqlite"
           else request.getfixturevalue("pg_url"))
    effects = tmp_path / "effects.log"
    doomed = worker(url, effects, "run", "-", kill_at)
    assert doomed.stdout is not None
    session_id = doomed.stdout.readline().split()[1]
    assert doomed.stdout.readline().strip() == f"AT {kill_at}"
    doomed.send_signal(signal.SIGKILL)
    doomed.communicate(timeout=60)
    status, asked, _ = anyio.run(session_facts, url, session_id)
    assert (status, asked) == ("running", 1)  # the orphan: stored, never saved as waiting
    [request_id] = anyio.run(approve_via_answers, url, session_id)

    resumed = finish(worker(url, effects, "ready", "-", "none"))
    assert resumed["status"] == "completed", resumed
    assert "sent to ana" in resumed["output"]
    assert effects.read_text().count("sent to") == 1
    status, asked, unanswered = anyio.run(session_facts, url, session_id)
    assert (status, asked, unanswered) == ("completed", 1, 0)  # no second request
    state, unknown, intact = anyio.run(ledger_state, url, session_id)
    assert state is LedgerState.DONE and not unknown and intact
    assert request_id


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres",
                                                            marks=pytest.mark.postgres)])
def test_concurrent_forced_resumes_let_exactly_one_run_write(
        tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> None:
    url = (f"sqlite:///{tmp_path / 'host.db'}" if backend == "sqlite"
           else request.getfixturevalue("pg_url"))
    effects = tmp_path / "effects.log"
    suspended = finish(worker(url, effects, "run"))
    session_id = suspended["session_id"]
    anyio.run(approve, url, session_id)
    # the first resumer stops holding its lease right after the approval is consumed
    holder = worker(url, effects, "resume", session_id, "approved")
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "AT approved"
    rivals = [worker(url, effects, "resume", session_id, "none") for _ in range(3)]
    for rival in rivals:
        out, _ = rival.communicate(timeout=60)
        assert rival.returncode == 3 and "CONFLICT" in out  # the live lease fences them out
    assert not effects.exists()
    out, _ = holder.communicate("go\n", timeout=60)  # stdin closes: the holder exits dead
    assert holder.returncode != 0
    # its process is gone: the next forced resume takes over at once and finishes the call
    restarted = finish(worker(url, effects, "resume", session_id, "none"))
    assert restarted["status"] == "completed"
    assert effects.read_text().count("sent to") == 1
    state, unknown, intact = anyio.run(ledger_state, url, session_id)
    assert state is LedgerState.DONE and not unknown and intact


async def resolve_the_send(url: str, *, done: bool) -> None:
    store = open_store(url)
    try:
        [effect] = await store.list_effects(unsettled_only=True)
        assert effect.display == 'send:"ana"'
        # as every door does (CLI, inbox, API): a run that died on this machine holds no
        # live lease, so a person need not wait for it to lapse
        assert await resolutions.resolve(store, effect.key, done=done, by="ops",
                                         note="checked")
    finally:
        await store.close()


@pytest.mark.parametrize(("kill_at", "refused"), [("claimed", True), ("executed", True),
                                                  ("settled", False)])
@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres",
                                                            marks=pytest.mark.postgres)])
def test_a_send_killed_mid_execution_and_proposed_again_is_refused_until_resolved(
        tmp_path: Path, kill_at: str, refused: bool, backend: str,
        request: pytest.FixtureRequest) -> None:
    """The model proposes the same send in a new session (new call id) after the host died:
    an unsettled one is refused until a person resolves it; a settled one answers with its
    stored result. Either way it never runs twice."""
    url = (f"sqlite:///{tmp_path / 'host.db'}" if backend == "sqlite"
           else request.getfixturevalue("pg_url"))
    effects = tmp_path / "effects.log"
    doomed = worker(url, effects, "run-approving", "-", kill_at)
    assert doomed.stdout is not None
    doomed.stdout.readline()
    assert doomed.stdout.readline().strip() == f"AT {kill_at}"
    doomed.send_signal(signal.SIGKILL)
    doomed.communicate(timeout=60)
    ran = effects.read_text().count("sent to") if effects.exists() else 0

    again = finish(worker(url, effects, "again", "second-session"))
    assert again["status"] == "completed"
    if refused:
        assert "a person must resolve it" in again["output"]
        anyio.run(lambda: resolve_the_send(url, done=True))
        after = finish(worker(url, effects, "again", "third-session"))
        assert "declined by a person" in after["output"]  # told it happened, they said no
    else:
        assert "declined by a person" in again["output"]
    assert (effects.read_text().count("sent to") if effects.exists() else 0) == ran
    # the first session, resumed, does not run it either
    resumed = finish(worker(url, effects, "ready", "-", "none"))
    assert resumed.get("status") in ("completed", "nothing ready")
    assert (effects.read_text().count("sent to") if effects.exists() else 0) == ran


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres",
                                                            marks=pytest.mark.postgres)])
def test_two_processes_racing_to_reserve_one_effect_key_run_it_once(
        tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> None:
    url = (f"sqlite:///{tmp_path / 'host.db'}" if backend == "sqlite"
           else request.getfixturevalue("pg_url"))
    effects = tmp_path / "effects.log"
    for round in range(3):
        racers = [worker(url, effects, "race", f"r{round}-{i}") for i in range(2)]
        for racer in racers:
            assert racer.stdout is not None and racer.stdout.readline().strip() == "READY"
        for racer in racers:
            assert racer.stdin is not None
            racer.stdin.write("go\n")
            racer.stdin.flush()
        states = []
        for racer in racers:
            out, _ = racer.communicate(timeout=60)
            assert racer.returncode == 0, out
            states.append(out.strip().split()[-1])
        expected = ["claimed", "duplicate"] if round == 0 else ["duplicate", "duplicate"]
        assert sorted(states) == expected
        assert effects.read_text().count("sent to") == 1


@pytest.mark.parametrize(("kill_at", "settled_as"), [("claimed", "resolved_failed"),
                                                     ("executed", "resolved_done")])
@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres",
                                                            marks=pytest.mark.postgres)])
def test_a_reconcile_hook_settles_a_send_killed_mid_execution_so_it_happens_exactly_once(
        tmp_path: Path, kill_at: str, settled_as: str, backend: str,
        request: pytest.FixtureRequest) -> None:
    """SIGKILL before the send (claimed) or after it (executed): resumed, the host asks the
    hook — the effects file — and settles the effect; proposed again, the send runs only if it
    had not happened. One send intended, one send made, nobody asked whether it happened."""
    import os

    url = (f"sqlite:///{tmp_path / 'host.db'}" if backend == "sqlite"
           else request.getfixturevalue("pg_url"))
    effects = tmp_path / "effects.log"
    env = {**os.environ, "CRASH_RECONCILE": "1"}
    doomed = worker(url, effects, "run-approving", "-", kill_at, env=env)
    assert doomed.stdout is not None
    doomed.stdout.readline()
    assert doomed.stdout.readline().strip() == f"AT {kill_at}"
    doomed.send_signal(signal.SIGKILL)
    doomed.communicate(timeout=60)
    resumed = finish(worker(url, effects, "ready", "-", "none", env=env))
    assert resumed["status"] == "completed"
    again = finish(worker(url, effects, "again", "second-session", env=env))
    assert again["status"] == "completed"
    assert effects.read_text().count("sent to") == 1

    async def settled() -> list[Any]:
        store = open_store(url)
        try:
            assert list(await store.list_effects(unsettled_only=True)) == []
            return [r.data.get("status") for r in await store.audit_records()
                    if r.type == "execution.settled"]
        finally:
            await store.close()

    assert settled_as in anyio.run(settled)
