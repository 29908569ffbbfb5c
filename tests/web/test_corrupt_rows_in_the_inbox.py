"""A corrupt row in the store does not take the inbox down: ``/history``, ``/sessions`` and the
API list the other rows (the store skips the corrupt one with a logged warning) instead of
answering 500. Through the real app on a real SQLite file."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import anyio
import pytest
from starlette.testclient import TestClient

from anfitrion._approvals import ApprovalAnswer
from anfitrion._redaction import redact
from anfitrion.store import Store, open_store
from anfitrion.web import create_app

from .inbox_support import ORIGIN, TOKEN, Mailroom, mail_host, sign_in


def test_history_sessions_and_the_api_skip_a_corrupt_row(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    db = tmp_path / "anfitrion.db"
    store = open_store(f"sqlite:///{db}")
    requests = []
    for to in ("good@example.com", "broken@example.com"):
        host = mail_host(store, Mailroom([]),  # type: ignore[arg-type]
                         {"to": to, "subject": "s", "body": "b"})
        request = host.run_sync("Mail it", principal="alice").pending[0]
        answer = ApprovalAnswer.to(request, False, "web:carol", "no")
        assert _answer(store, answer)
        requests.append(request)
    good, broken = requests
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE anfitrion_approvals SET request = '{\"id\": ' WHERE id = ?",
                     (broken.id,))
        conn.execute("UPDATE anfitrion_sessions SET data = 'nope' WHERE session_id = ?",
                     (broken.session_id,))
    app = create_app(store, token=TOKEN, allowed_hosts=["testserver"])
    with TestClient(app, base_url=ORIGIN, follow_redirects=False,
                    raise_server_exceptions=False) as client, \
            caplog.at_level(logging.WARNING, "anfitrion.store"):
        sign_in(client)
        history = client.get("/history")
        assert history.status_code == 200
        assert good.id in history.text and broken.id not in history.text
        sessions = client.get("/sessions")
        assert sessions.status_code == 200
        assert good.session_id in sessions.text and broken.session_id not in sessions.text
        listed = client.get("/api/v1/approvals?status=all",
                            headers={"authorization": f"Bearer {TOKEN}"})
        assert listed.status_code == 200
        assert [r["request"]["id"] for r in listed.json()["approvals"]] == [good.id]
    assert any(redact(f"anfitrion_approvals (id={broken.id!r})") in m for m in caplog.messages)
    assert any(f"anfitrion_sessions (session_id={broken.session_id!r})" in m
               for m in caplog.messages)


def _answer(store: Store, answer: ApprovalAnswer) -> bool:
    async def go() -> bool:
        return await store.answer_approval(answer)
    return anyio.run(go)


def test_a_corrupt_session_row_leaves_its_requests_and_its_session_page_readable(
        tmp_path: Path, mailroom: Mailroom) -> None:
    db = tmp_path / "anfitrion.db"
    store = open_store(f"sqlite:///{db}")
    host = mail_host(store, mailroom, {"to": "x@example.com", "subject": "s",  # type: ignore[arg-type]
                                       "body": "b"})
    request = host.run_sync("Mail it", principal="alice").pending[0]
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE anfitrion_sessions SET data = 'nope' WHERE session_id = ?",
                     (request.session_id,))
    app = create_app(store, token=TOKEN, allowed_hosts=["testserver"])
    with TestClient(app, base_url=ORIGIN, follow_redirects=False,
                    raise_server_exceptions=False) as client:
        sign_in(client)
        for path in ("/", f"/approvals/{request.id}", f"/sessions/{request.session_id}"):
            page = client.get(path)
            assert page.status_code == 200, path
            assert request.id[:8] in page.text or request.session_id[:8] in page.text
