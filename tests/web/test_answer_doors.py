"""One way to answer: the inbox page, the JSON API and the CLI all call anfitrion._answers, and
each leaves the same approval.answered audit record (the door named in it), once."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from anfitrion._cli.main import cli
from anfitrion.store import Store, open_store
from anfitrion.web import create_app

from .inbox_support import ORIGIN, TOKEN, Mailroom, sign_in, suspended_run


@pytest.fixture
def shared(tmp_path: Path) -> tuple[str, Store]:
    url = f"sqlite:///{tmp_path / 'inbox.db'}"
    store = open_store(url)
    return url, store


def test_inbox_api_and_cli_answers_leave_the_same_audit_record(
        shared: tuple[str, Store]) -> None:
    import anyio

    url, store = shared
    mailroom = Mailroom([])
    runs = [suspended_run(store, mailroom, {"to": f"{who}@example.com", "subject": "s",
                                            "body": "b"})[1] for who in ("ana", "rui", "eva")]
    by_inbox, by_api, by_cli = (run.pending[0] for run in runs)
    app = create_app(store, token=TOKEN, allowed_hosts=["testserver"])
    with TestClient(app, base_url=ORIGIN, follow_redirects=False) as client:
        csrf = sign_in(client, "carol")
        page = client.post(f"/approvals/{by_inbox.id}/decide",
                           data={"csrf": csrf, "digest": by_inbox.digest,
                                 "decision": "approve"}, headers={"origin": ORIGIN})
        assert page.status_code == 303
        api = client.post(f"/api/v1/approvals/{by_api.id}/approve",
                          json={"digest": by_api.digest, "approver": "dora"},
                          headers={"authorization": f"Bearer {TOKEN}"})
        assert api.status_code == 200, api.text
    done = CliRunner().invoke(cli, ["approvals", "approve", by_cli.id, "--store", url,
                                    "--as", "erin"])
    assert done.exit_code == 0, done.output

    async def answered() -> list[dict[str, object]]:
        try:
            return [dict(r.data) for r in await store.audit_records()
                    if r.type == "approval.answered"]
        finally:
            await store.close()

    records = anyio.run(answered)
    assert len(records) == 3  # one each, recorded when given
    assert len({frozenset(r) for r in records}) == 1  # the same shape whichever door
    doors = sorted(str(r.get("detail")) for r in records)
    assert doors == ["answered via api", "answered via cli", "answered via inbox"]
    assert mailroom.sent == []  # answering runs nothing: the session's app resumes it
