"""The inbox and a host on two store connections to one SQLite file, as in two processes."""

from __future__ import annotations

from pathlib import Path

import pytest
from starlette.testclient import TestClient

from anfitrion.exceptions import UserError
from anfitrion.store import Store, open_store
from anfitrion.web import create_app

from .inbox_support import ORIGIN, RLO_RECIPIENT, TOKEN, Mailroom, mail_host, sign_in


def _sqlite(path: Path) -> Store:
    try:
        return open_store(f"sqlite:///{path}")
    except UserError as exc:  # the SQLite store lands with the durable-store branch
        pytest.skip(f"no SQLite store in this tree: {exc}")


def test_a_decision_in_the_inbox_resumes_a_host_on_another_connection(tmp_path: Path) -> None:
    db = tmp_path / "anfitrion.db"
    host_store, inbox_store = _sqlite(db), _sqlite(db)
    mailroom = Mailroom([])
    host = mail_host(host_store, mailroom,  # type: ignore[arg-type]
                     {"to": RLO_RECIPIENT, "subject": "s", "body": "b"})
    request = host.run_sync("Mail Bob", principal="alice").pending[0]
    app = create_app(inbox_store, token=TOKEN, allowed_hosts=["testserver"])
    with TestClient(app, base_url=ORIGIN, follow_redirects=False) as client:
        csrf = sign_in(client)
        page = client.get(f"/approvals/{request.id}").text
        assert "bob<mark class=\"hidden-char\"" in page
        # the request and the tool's description, read from the SQLite store
        assert "Mail Bob</blockquote>" in page
        assert "Send an e-mail.</blockquote>" in page
        form = {"csrf": csrf, "digest": request.digest, "decision": "approve"}
        first = client.post(f"/approvals/{request.id}/decide", data=form,
                            headers={"origin": ORIGIN})
        second = client.post(f"/approvals/{request.id}/decide", data=form,
                             headers={"origin": ORIGIN})
        assert (first.status_code, second.status_code) == (303, 409)
        assert "approval.requested" in client.get(f"/sessions/{request.session_id}").text
    assert host.resume_sync(request.session_id).status == "completed"
    assert len(mailroom.sent) == 1
