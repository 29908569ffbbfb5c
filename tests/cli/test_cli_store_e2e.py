"""Done when: the demo suspends, a second process approves, a third resumes, the chain holds.

Every step is a separate ``anfitrion`` process, as with two terminals; on the default SQLite
file in the data folder and on PostgreSQL by URL.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ANFITRION = [sys.executable, "-c", "from anfitrion._cli.main import main; main()"]


def anfitrion(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*ANFITRION, *args], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL, env=os.environ.copy())
    if check:
        assert done.returncode == 0, done.stdout + done.stderr
    return done


def suspend_approve_resume(store: list[str]) -> str:
    demo = anfitrion("demo", "--defer", *store)
    assert "status: suspended" in demo.stdout
    request_id = re.search(r"anfitrion approvals approve ([0-9a-f]{32})", demo.stdout)
    session_id = re.search(r"anfitrion resume ([0-9a-f]{32})", demo.stdout)
    assert request_id is not None
    assert session_id is not None

    listed = json.loads(anfitrion("approvals", "list", "--json", *store).stdout)["approvals"]
    assert [r["request"]["id"] for r in listed] == [request_id.group(1)]
    assert listed[0]["request"]["arguments"]["path"] == "drafts/weather.md"

    approved = anfitrion("approvals", "approve", request_id.group(1), "--note", "looks right",
                         "--as", "ops-bob", *store)
    assert "approved" in approved.stdout
    assert json.loads(anfitrion("approvals", "list", "--json", *store).stdout) == \
        {"approvals": []}

    resumed = anfitrion("resume", session_id.group(1), *store)
    assert "final: Saved the note to drafts/weather.md." in resumed.stdout
    assert "person approved (ops-bob: looks right)" in resumed.stdout

    verified = anfitrion("audit", "verify", *store)
    assert "audit chain intact" in verified.stdout
    shown = anfitrion("audit", "show", "--session", session_id.group(1), *store).stdout
    for stage in ("approval.requested", "approval.answered", "execution.claimed",
                  "execution.settled", "run.resumed"):
        assert stage in shown
    again = anfitrion("resume", session_id.group(1), *store, check=False)
    assert again.returncode != 0
    assert "completed, not suspended" in again.stderr
    return session_id.group(1)


def test_demo_suspends_and_resumes_across_processes_on_the_default_sqlite_file(
        anfitrion_home: Path) -> None:
    suspend_approve_resume([])
    assert (anfitrion_home / "anfitrion.db").exists()
    assert anfitrion("db", "path").stdout.strip() == str(anfitrion_home / "anfitrion.db")


@pytest.mark.postgres
def test_demo_suspends_and_resumes_across_processes_on_postgresql(pg_url: str) -> None:
    suspend_approve_resume(["--store", pg_url])


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres",
                                                            marks=pytest.mark.postgres)])
def test_two_people_approving_at_once_from_two_processes_record_one_answer(
        backend: str, request: pytest.FixtureRequest) -> None:
    store = [] if backend == "sqlite" else ["--store", request.getfixturevalue("pg_url")]
    demo = anfitrion("demo", "--defer", *store)
    found = re.search(r"approvals approve ([0-9a-f]{32})", demo.stdout)
    assert found is not None
    people = [subprocess.Popen([*ANFITRION, "approvals", verb, found.group(1), "--as", who,
                                *store], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
              for verb, who in (("approve", "bob"), ("deny", "carol"))]
    outcomes = [(*p.communicate(timeout=120), p.returncode) for p in people]
    assert sorted(code for _, _, code in outcomes) == [0, 1]
    loser = next(err for _, err, code in outcomes if code == 1)
    assert "already answered" in loser
    shown = json.loads(anfitrion("approvals", "show", found.group(1), "--json", *store).stdout)
    winner = "bob" if outcomes[0][2] == 0 else "carol"
    assert shown["answer"]["approver"] == winner


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres",
                                                            marks=pytest.mark.postgres)])
def test_two_processes_resuming_one_session_execute_the_call_once(
        backend: str, request: pytest.FixtureRequest) -> None:
    store = [] if backend == "sqlite" else ["--store", request.getfixturevalue("pg_url")]
    demo = anfitrion("demo", "--defer", *store)
    request_id = re.search(r"approvals approve ([0-9a-f]{32})", demo.stdout)
    session_id = re.search(r"anfitrion resume ([0-9a-f]{32})", demo.stdout)
    assert request_id is not None
    assert session_id is not None
    anfitrion("approvals", "approve", request_id.group(1), *store)
    workers = [subprocess.Popen([*ANFITRION, "resume", session_id.group(1), "--json", *store],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(2)]
    outcomes = [(*w.communicate(timeout=120), w.returncode) for w in workers]
    completed = [json.loads(out) for out, _, code in outcomes if code == 0]
    assert [c["status"] for c in completed] == ["completed"]
    loser = next(err for _, err, code in outcomes if code != 0)
    # The loser is refused whichever step it lost at: the winner's lease (taken first), a save
    # that conflicts, or a session already completed.
    assert ("running under the lease" in loser or "changed concurrently" in loser
            or "not suspended" in loser), loser
    records = json.loads(anfitrion("audit", "show", "--json", "--session", session_id.group(1),
                                   *store).stdout)
    settled = [r for r in records if r["type"] == "execution.settled"]
    assert len(settled) == 1
    assert "audit chain intact" in anfitrion("audit", "verify", *store).stdout
