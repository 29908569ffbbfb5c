"""The command line with a corrupt row in the store: no traceback; listings show the other rows
and say which row is corrupt; ``resume`` and ``approvals show`` fail cleanly naming it;
``audit verify`` reports it and exits 1. On SQLite (the command line's default store)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from anfitrion._approvals import DeferredApprover
from anfitrion._cli.main import cli
from anfitrion._demo import demo_toolbox
from anfitrion._host import Host, RunStatus
from anfitrion.models._demo_script import demo_model


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


@pytest.fixture
def store(tmp_path: Path) -> tuple[str, Path, list[tuple[str, str]]]:
    """A SQLite store with two demo sessions waiting for approval: (url, file, [(s, r)])."""
    path = tmp_path / "store.db"
    url = f"sqlite:///{path}"
    waiting = []
    for _ in range(2):
        host = Host(model=demo_model(), tools=demo_toolbox(), store=url,
                    approver=DeferredApprover())
        run = host.run_sync("Save a note for the team: Lisboa 15 °C.", principal="demo-user")
        assert run.status is RunStatus.SUSPENDED
        waiting.append((run.session_id, run.pending[0].id))
    return url, path, waiting


def _corrupt(path: Path, sql: str, *args: str) -> None:
    with sqlite3.connect(path) as conn:
        assert conn.execute(sql, args).rowcount == 1


def test_approvals_list_shows_the_other_requests_and_a_line_naming_the_corrupt_one(
        store: tuple[str, Path, list[tuple[str, str]]]) -> None:
    """As a person sees it, in a real process: the warning line is on standard error."""
    url, path, [(_, good), (_, broken)] = store
    _corrupt(path, "UPDATE anfitrion_approvals SET request = '{not json' WHERE id = ?", broken)
    for extra in ((), ("--all",), ("--json",)):
        done = subprocess.run(
            [sys.executable, "-c", "from anfitrion._cli.main import main; main()",
             "approvals", "list", "--store", url, *extra],
            capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
            env=os.environ.copy())
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
        assert good in done.stdout and broken not in done.stdout
        assert f"corrupt row in anfitrion_approvals (id={broken!r}): invalid JSON" \
            in done.stderr
        if extra == ("--json",):
            listed = json.loads(done.stdout)["approvals"]
            assert [r["request"]["id"] for r in listed] == [good]


def test_resume_and_show_of_a_corrupt_row_fail_cleanly_naming_it(
        store: tuple[str, Path, list[tuple[str, str]]]) -> None:
    url, path, [(session, request), _] = store
    _corrupt(path, "UPDATE anfitrion_sessions SET data = '[1, 2' WHERE session_id = ?", session)
    _corrupt(path, "UPDATE anfitrion_approvals SET answer = '{\"x\": 1}' WHERE id = ?", request)
    resumed = invoke("resume", session, "--store", url)
    assert resumed.exit_code == 1
    assert f"corrupt row in anfitrion_sessions (session_id={session!r})" in resumed.output
    assert resumed.exception is None or isinstance(resumed.exception, SystemExit)
    shown = invoke("approvals", "show", request, "--store", url)
    assert shown.exit_code == 1
    assert f"corrupt row in anfitrion_approvals (id={request!r}): missing field" \
        in shown.output
    assert isinstance(shown.exception, SystemExit)


def test_audit_verify_reports_corrupt_rows_and_exits_1(
        store: tuple[str, Path, list[tuple[str, str]]]) -> None:
    url, path, [(session, _), (_, request)] = store
    assert invoke("audit", "verify", "--store", url).exit_code == 0
    _corrupt(path, "UPDATE anfitrion_session_messages SET data = '{' WHERE session_id = ? "
                   "AND idx = 0", session)
    _corrupt(path, "UPDATE anfitrion_approvals SET request = '' WHERE id = ?", request)
    verified = invoke("audit", "verify", "--store", url)
    assert verified.exit_code == 1
    assert "audit chain intact" in verified.output  # the chain itself is fine
    assert f"anfitrion_session_messages (session_id={session!r}, idx=0)" in verified.output
    assert f"anfitrion_approvals (id={request!r})" in verified.output
    assert "2 corrupt row(s)" in verified.output
    report = json.loads(invoke("audit", "verify", "--json", "--store", url).output)
    assert report["ok"] is True and len(report["corrupt_rows"]) == 2


def test_audit_verify_calls_an_unreadable_audit_record_a_broken_chain(
        store: tuple[str, Path, list[tuple[str, str]]]) -> None:
    url, path, _ = store
    _corrupt(path, "UPDATE anfitrion_audit SET data = '{\"a\":' WHERE seq = 3")
    verified = invoke("audit", "verify", "--store", url)
    assert verified.exit_code == 1
    assert "audit chain BROKEN (corrupt): corrupt row in anfitrion_audit (seq=3): invalid " \
           "JSON" in verified.output
    assert isinstance(verified.exception, SystemExit)
    report = json.loads(invoke("audit", "verify", "--json", "--store", url).output)
    assert report["ok"] is False and report["kind"] == "corrupt"
