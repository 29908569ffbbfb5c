"""A host killed while its in-process approver is deciding (a terminal, a callback): the request
is stored, the person's answer never is. Every later resume — ``resume SESSION`` and
``resume --ready`` — puts the same request to the configured approver again, so it is never
left hanging, never answered by nobody, never asked as a second request; and the call runs at
most once. Real subprocesses killed with SIGKILL, SQLite and PostgreSQL.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from anfitrion.store import LedgerState, open_store

from .pg_schema import pg_schema_url
from .test_store_crash import finish, ledger_state, session_facts, worker


@pytest.fixture
def pg_url() -> Iterator[str]:
    yield from pg_schema_url()


def _url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    return (f"sqlite:///{tmp_path / 'host.db'}" if backend == "sqlite"
            else request.getfixturevalue("pg_url"))


async def answers_of(url: str, session_id: str) -> list[tuple[bool, str]]:
    store = open_store(url)
    try:
        found = []
        for r in await store.list_approvals(session_id=session_id, pending_only=False):
            stored = await store.get_approval(r.id)
            assert stored is not None
            if stored.answer is not None:
                found.append((stored.answer.approved, stored.answer.approver))
        return found
    finally:
        await store.close()


def _kill_while_deciding(url: str, effects: Path, kill_at: str) -> str:
    doomed = worker(url, effects, "run", "-", kill_at,
                    env={**os.environ, "CRASH_APPROVER": "yes"})
    assert doomed.stdout is not None
    session_id = doomed.stdout.readline().split()[1]
    assert doomed.stdout.readline().strip() == f"AT {kill_at}"
    doomed.send_signal(signal.SIGKILL)
    doomed.communicate(timeout=60)
    return session_id


@pytest.mark.parametrize("kill_at", ["requested", "deciding"])
@pytest.mark.parametrize("resume", ["resume", "ready"])
@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres",
                                                            marks=pytest.mark.postgres)])
def test_the_approver_is_asked_again_about_the_same_request_and_the_call_runs_once(
        tmp_path: Path, kill_at: str, resume: str, backend: str,
        request: pytest.FixtureRequest) -> None:
    url = _url(backend, tmp_path, request)
    effects = tmp_path / "effects.log"
    session_id = _kill_while_deciding(url, effects, kill_at)
    assert anyio.run(session_facts, url, session_id)[:2] == ("running", 1)

    args = ("resume", session_id, "none") if resume == "resume" else ("ready", "-", "none")
    resumed = finish(worker(url, effects, *args, env={**os.environ, "CRASH_APPROVER": "yes"}))
    assert resumed["status"] == "completed", resumed
    assert "sent to ana" in resumed["output"]
    assert effects.read_text().count("sent to") == 1
    status, asked, unanswered = anyio.run(session_facts, url, session_id)
    assert (status, asked, unanswered) == ("completed", 1, 0)  # the same request, answered
    asked_ids = Path(f"{effects}.asked").read_text().split()
    assert len(set(asked_ids)) == 1 and len(asked_ids) == (2 if kill_at == "deciding" else 1)
    assert anyio.run(answers_of, url, session_id) == [(True, "bob")]
    state, unknown, intact = anyio.run(ledger_state, url, session_id)
    assert state is LedgerState.DONE and not unknown and intact


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres",
                                                            marks=pytest.mark.postgres)])
def test_a_no_given_on_the_second_asking_is_a_denial_and_nothing_runs(
        tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> None:
    url = _url(backend, tmp_path, request)
    effects = tmp_path / "effects.log"
    session_id = _kill_while_deciding(url, effects, "deciding")
    resumed = finish(worker(url, effects, "resume", session_id, "none",
                            env={**os.environ, "CRASH_APPROVER": "no"}))
    assert resumed["status"] == "completed"
    assert not effects.exists()
    assert anyio.run(answers_of, url, session_id) == [(False, "bob")]
    assert anyio.run(session_facts, url, session_id) == ("completed", 1, 0)


def test_a_deferring_approver_asked_again_leaves_the_session_waiting_on_that_request(
        tmp_path: Path) -> None:
    """Resumed with a deferring approver (the inbox): the session is saved waiting on the same
    request, and a later resume with an in-process person gets it answered."""
    url = f"sqlite:///{tmp_path / 'host.db'}"
    effects = tmp_path / "effects.log"
    session_id = _kill_while_deciding(url, effects, "deciding")
    waiting = finish(worker(url, effects, "resume", session_id, "none"))
    assert waiting["status"] == "suspended"
    assert anyio.run(session_facts, url, session_id) == ("suspended", 1, 1)
    assert not effects.exists()
