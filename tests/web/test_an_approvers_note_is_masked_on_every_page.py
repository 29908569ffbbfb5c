"""An approver's note is free text: a person pastes a token, a password or a card number into
it ("used key sk-…, rotate it"). The inbox's pages that show notes — `/history`, the request
page, a session's page — mask it like the audit log does; the note as recorded is the
person's (and the audit record's copy is redacted: tests/audit)."""

from __future__ import annotations

import anyio
import pytest
from starlette.testclient import TestClient

from anfitrion import _answers as answers
from anfitrion._approvals import ApprovalRequest
from anfitrion.store import MemoryStore

from .inbox_support import ORIGIN

SECRETS = [
    "sk-proj-Abcdefghijklmnopqrstuvwxyz0123456789",
    "ghp_0123456789abcdefghijABCDEFGHIJ012345",
    "AKIAIOSFODNN7EXAMPLE",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "xoxb-123456789012-123456789012-abcdefghijABCDEFGHIJabcd",
]


@pytest.mark.parametrize("secret", SECRETS, ids=[s[:6] for s in SECRETS])
def test_a_secret_in_a_note_is_masked_on_history_request_and_session_pages(
        browser_client: tuple[TestClient, str], store: MemoryStore,
        pending: tuple[object, ApprovalRequest], secret: str) -> None:
    client, _ = browser_client
    _, request = pending
    note = f"approved; I used the key {secret} for the test, please rotate"
    outcome = anyio.run(lambda: answers.answer(store, request.id, request.digest,
                                               approved=False, approver="web:carol",
                                               note=note, via="inbox"))
    assert outcome.recorded
    for path in ("/history", f"/approvals/{request.id}", f"/sessions/{request.session_id}"):
        page = client.get(path, headers={"origin": ORIGIN}).text
        assert secret not in page, path
        assert secret[6:20] not in page, path
    assert "please rotate" in client.get("/history").text  # the rest of the note is shown
