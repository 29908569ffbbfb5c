"""``anfitrion approvals``, ``resume``, ``audit`` and ``db`` through click's runner."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner, Result

from anfitrion._approvals import DeferredApprover, with_expiry
from anfitrion._apps import DEMO_APP, GATEWAY_APP
from anfitrion._cli.main import cli
from anfitrion._demo import demo_toolbox
from anfitrion._home import default_store_url
from anfitrion._host import Host, RunResult
from anfitrion.models._demo_script import demo_model
from anfitrion.store import open_store


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def suspended_note() -> RunResult:
    """A demo session waiting for approval of write_draft, in the default store."""
    host = Host(model=demo_model(), tools=demo_toolbox(), store=default_store_url(),
                approver=DeferredApprover(), app=DEMO_APP)
    return host.run_sync("Save a note for the team: Lisboa 15 °C, partly cloudy.",
                         principal="demo-user")


def test_the_default_store_is_the_sqlite_file_in_the_data_folder(anfitrion_home: Path) -> None:
    assert default_store_url() == f"sqlite:///{anfitrion_home / 'anfitrion.db'}"
    assert invoke("db", "path").output.strip() == str(anfitrion_home / "anfitrion.db")


def test_the_store_url_can_come_from_the_environment(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANFITRION_STORE", f"sqlite:///{tmp_path / 'elsewhere.db'}")
    assert invoke("db", "path").output.strip() == str(tmp_path / "elsewhere.db")


def test_db_migrate_and_status_list_named_migrations() -> None:
    missing = invoke("db", "status", "--json")  # #36: reading never creates the store
    assert missing.exit_code == 1
    assert "Create it with `anfitrion db migrate`" in missing.output
    migrated = invoke("db", "migrate")
    assert "0001_sessions_approvals_ledger" in migrated.output
    assert "up to date" in invoke("db", "migrate").output
    status = json.loads(invoke("db", "status", "--json").output)
    assert status
    assert all(m["applied_at"] for m in status)


def test_db_path_never_prints_a_password() -> None:
    result = invoke("db", "path", "--store", "postgresql://app:s3cretpass@db.internal/x")
    assert "s3cretpass" not in result.output
    assert "db.internal" in result.output


def test_approvals_list_is_empty_then_shows_the_waiting_request() -> None:
    invoke("db", "migrate")
    assert "no approval request is waiting" in invoke("approvals", "list").output
    assert json.loads(invoke("approvals", "list", "--json").output) == {"approvals": []}
    run = suspended_note()
    [request] = run.pending
    listed = invoke("approvals", "list")
    assert request.id in listed.output
    assert "write_draft" in listed.output
    shown = invoke("approvals", "show", request.id[:8])
    assert shown.exit_code == 0
    assert "text = Lisboa 15 °C, partly cloudy." in shown.output
    assert request.digest in shown.output
    assert shown.output.count("Digest:") == 1
    assert shown.output.count("xpires") == 1
    as_json = json.loads(invoke("approvals", "show", request.id[:6], "--json").output)
    assert set(as_json) == {"request", "state", "answer", "used", "description"}
    assert as_json["request"]["id"] == request.id
    assert as_json["state"] == "pending"


def test_a_denial_from_the_cli_reaches_the_model_and_nothing_runs() -> None:
    run = suspended_note()
    [request] = run.pending
    denied = invoke("approvals", "deny", request.id, "--note", "not today", "--as", "ops")
    assert denied.exit_code == 0
    resumed = invoke("resume", run.session_id, "--json")
    assert resumed.exit_code == 0
    outcome = json.loads(resumed.output)
    assert outcome["status"] == "completed"
    assert "declined by a person: not today" in outcome["output"]
    [listed] = json.loads(invoke("approvals", "list", "--all", "--json").output)["approvals"]
    assert listed["state"] == "denied"
    assert set(listed) == {"request", "state", "answer", "used"}
    assert listed["answer"]["approver"] == "ops"


def test_an_expired_request_cannot_be_approved() -> None:
    run = suspended_note()
    [request] = run.pending

    async def expire() -> None:
        store = open_store(default_store_url())
        try:
            # replace the stored request with one that expired an hour ago
            expired = with_expiry(request, datetime.now(UTC) - timedelta(hours=1))
            from anfitrion.store._sqlite import SQLiteStore

            assert isinstance(store, SQLiteStore)
            from anfitrion._canonical import canonical_json

            await store._write(lambda c: c.execute(
                "UPDATE anfitrion_approvals SET request = ? WHERE id = ?",
                (canonical_json(expired.to_dict()), request.id)))
        finally:
            await store.close()

    anyio.run(expire)
    result = invoke("approvals", "approve", request.id)
    assert result.exit_code == 1
    assert "expired" in result.output


def test_unknown_ids_and_sessions_are_clean_errors() -> None:
    invoke("db", "migrate")
    assert "no approval request 'nope'" in invoke("approvals", "show", "nope").output
    missing = invoke("resume", "0" * 32)
    assert missing.exit_code == 1
    assert "no session" in missing.output
    assert invoke("resume", "x", "--model", "gpt-9").exit_code == 2


def test_unknown_outcomes_are_listed_for_the_operator() -> None:
    invoke("db", "migrate")
    assert "no execution has an unknown outcome" in invoke("approvals", "list",
                                                           "--unknown").output

    async def leave_a_claim() -> None:
        store = open_store(default_store_url())
        try:
            await store.claim_execution("sess-1", "call-9", "digest")
        finally:
            await store.close()

    anyio.run(leave_a_claim)
    listed = json.loads(invoke("approvals", "list", "--unknown", "--json").output)
    assert [(r["session_id"], r["call_id"]) for r in listed] == [("sess-1", "call-9")]
    assert "the action may have happened" in invoke("approvals", "list", "--unknown").output


def test_audit_show_filters_by_session_and_escapes_terminal_controls() -> None:
    run = suspended_note()
    other = suspended_note()
    shown = invoke("audit", "show", "--session", run.session_id)
    assert shown.exit_code == 0
    assert run.session_id[:12] in shown.output
    assert other.session_id[:12] not in shown.output
    records = json.loads(invoke("audit", "show", "--json").output)
    assert {r["session_id"] for r in records} == {run.session_id, other.session_id}
    host = Host(model=demo_model(), tools=demo_toolbox(), store=default_store_url())
    host.run_sync("Weather in Lisboa?", session_id="evil\x1b[2J\rsession")
    everything = invoke("audit", "show")
    assert "evil" in everything.output
    assert "\x1b" not in everything.output
    assert "\r" not in everything.output


def test_resume_ready_continues_every_answered_session_once() -> None:
    first, second, waiting = suspended_note(), suspended_note(), suspended_note()
    for run in (first, second):
        assert invoke("approvals", "approve", run.pending[0].id).exit_code == 0
    result = invoke("resume", "--ready", "--json")
    assert result.exit_code == 0, result.output
    outcomes = json.loads(result.output)
    assert sorted(o["session_id"] for o in outcomes) == sorted([first.session_id,
                                                               second.session_id])
    assert all(o["output"] == "Saved the note to drafts/weather.md." for o in outcomes)
    assert waiting.session_id not in result.output
    assert "no session is ready" in invoke("resume", "--ready").output
    assert invoke("resume").exit_code == 2


def test_the_data_folder_follows_xdg_when_anfitrion_home_is_unset(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from anfitrion._home import home_dir

    monkeypatch.delenv("ANFITRION_HOME")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert home_dir() == tmp_path / "xdg" / "anfitrion"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    assert home_dir() == tmp_path / "user" / ".local" / "share" / "anfitrion"


def test_resume_refuses_a_session_of_another_app_and_says_what_to_pass() -> None:
    """The hint after an answer never sends a user's session into the demo's tools."""
    host = Host(model=demo_model(), tools=demo_toolbox(), store=default_store_url(),
                approver=DeferredApprover())  # an application's own session: no app recorded
    run = host.run_sync("Save a note for the team: Lisboa 15 °C, partly cloudy.",
                        principal="demo-user")
    [request] = run.pending
    approved = invoke("approvals", "approve", request.id)
    assert approved.exit_code == 0
    assert "anfitrion resume" not in approved.output.splitlines()[-1].split("—")[0]
    assert f"host.resume('{run.session_id}')" in approved.output
    refused = invoke("resume", run.session_id)
    assert refused.exit_code == 1
    assert "records no app" in refused.output and "--app" in refused.output
    # nothing ran and the session still waits for its own application
    assert host.resume_sync(run.session_id).output == "Saved the note to drafts/weather.md."


def test_resume_refuses_a_named_app_it_was_not_given_and_a_gateway_session() -> None:
    for app, expected in (("myapp.agent:host", "--app myapp.agent:host"),
                          (GATEWAY_APP, "its client continues it")):
        host = Host(model=demo_model(), tools=demo_toolbox(), store=default_store_url(),
                    approver=DeferredApprover(), app=app)
        run = host.run_sync("Save a note for the team: Lisboa 15 °C, partly cloudy.",
                            principal="demo-user")
        hint = invoke("approvals", "approve", run.pending[0].id).output
        assert ("--app myapp.agent:host" in hint) is (app != GATEWAY_APP)
        refused = invoke("resume", run.session_id)
        assert refused.exit_code == 1
        assert expected in refused.output
        mismatched = invoke("resume", run.session_id, "--app", "anfitrion:demo")
        assert mismatched.exit_code == 1
