"""The two-person rule in the inbox and the JSON API: reviewers sign in (or call the API) with
their own tokens; the page shows who has approved so far; the shared token cannot vote."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import pytest
from starlette.testclient import TestClient

from anfitrion._approvals import ApprovalRequest
from anfitrion.channels import Reviewers
from anfitrion.policy import parse_policy
from anfitrion.store import MemoryStore
from anfitrion.web import create_app

from .inbox_support import ORIGIN, TOKEN, Mailroom, mail_host

ALICE, BOB, EVE = "alice-own-token-0123456789", "bob-own-token-0123456789ab", \
    "eve-own-token-0123456789abc"
POLICY = parse_policy('[[rules]]\ntool = "send_email"\nverdict = "ask"\n'
                      'quorum = { approvals = 2, roles = ["mail"] }\n')


@pytest.fixture
def setting() -> Iterator[tuple[TestClient, ApprovalRequest, MemoryStore]]:
    store = MemoryStore()
    host = mail_host(store, Mailroom([]), {"to": "ana@example.com", "subject": "s", "body": "b"},
                     policy=POLICY)
    run = host.run_sync("mail ana", principal="agent")
    reviewers = Reviewers.from_tokens({"alice": (ALICE, ["mail"]), "bob": (BOB, ["mail"]),
                                       "eve": (EVE, ["ops"])})
    app = create_app(store, token=TOKEN, allowed_hosts=["testserver"], reviewers=reviewers)
    with TestClient(app, base_url=ORIGIN, follow_redirects=False) as client:
        yield client, run.pending[0], store


def _sign_in(client: TestClient, token: str, name: str = "typed-name") -> str:
    response = client.post("/login", data={"token": token, "name": name},
                           headers={"origin": ORIGIN})
    assert response.status_code == 303
    page = client.get("/").text
    marker = 'name="csrf" value="'
    start = page.index(marker) + len(marker)
    return page[start:page.index('"', start)]


def _vote(client: TestClient, csrf: str, request: ApprovalRequest) -> int:
    return client.post(f"/approvals/{request.id}/decide",
                       data={"csrf": csrf, "digest": request.digest, "decision": "approve"},
                       headers={"origin": ORIGIN}).status_code


def test_a_reviewer_signs_in_with_their_own_token_and_votes_once(
        setting: tuple[TestClient, ApprovalRequest, MemoryStore]) -> None:
    client, request, store = setting
    csrf = _sign_in(client, ALICE, name="bob")  # the typed name cannot change who it is
    assert "signed in as alice" in client.get("/").text
    assert "0 of 2 approvals" in client.get("/pending.html").text
    assert _vote(client, csrf, request) == 303
    assert "1 of 2 approvals (alice)" in client.get("/pending.html").text
    detail = client.get(f"/approvals/{request.id}").text
    assert "Needs 2 distinct approvers holding mail" in detail
    assert "alice approved via inbox" in detail
    assert _vote(client, csrf, request) == 409  # the same person again
    api = client.get(f"/api/v1/approvals/{request.id}",
                     headers={"authorization": f"Bearer {BOB}"}).json()
    assert api["quorum"]["needed"] == 1 and [v["voter"] for v in api["quorum"]["votes"]] == \
        ["alice"]
    done = client.post(f"/api/v1/approvals/{request.id}/approve",
                       json={"digest": request.digest, "approver": "alice"},
                       headers={"authorization": f"Bearer {BOB}"})
    assert done.status_code == 200 and done.json()["answer"]["approver"] == "alice, bob"
    found = anyio.run(store.get_approval, request.id)
    assert found is not None and found.answer is not None and found.answer.approved


def test_the_shared_token_and_a_reviewer_without_the_role_cannot_vote(
        setting: tuple[TestClient, ApprovalRequest, MemoryStore]) -> None:
    client, request, _ = setting
    csrf = _sign_in(client, TOKEN, name="alice")  # a typed name is not an identity
    assert _vote(client, csrf, request) == 403
    shared = client.post(f"/api/v1/approvals/{request.id}/approve",
                         json={"digest": request.digest, "approver": "alice"},
                         headers={"authorization": f"Bearer {TOKEN}"})
    assert shared.status_code == 403 and shared.json()["error"] == "unidentified"
    outsider = client.post(f"/api/v1/approvals/{request.id}/approve",
                           json={"digest": request.digest},
                           headers={"authorization": f"Bearer {EVE}"})
    assert outsider.status_code == 403 and outsider.json()["error"] == "unqualified"
    first = client.post(f"/api/v1/approvals/{request.id}/approve",
                        json={"digest": request.digest},
                        headers={"authorization": f"Bearer {ALICE}"})
    assert first.status_code == 202 and first.json()["answer"] is None
    again = client.post(f"/api/v1/approvals/{request.id}/deny",
                        json={"digest": request.digest},
                        headers={"authorization": f"Bearer {ALICE}"})
    assert again.status_code == 409 and again.json()["error"] == "already_voted"


def test_a_wrong_reviewer_token_is_refused_like_a_wrong_token(
        setting: tuple[TestClient, ApprovalRequest, MemoryStore]) -> None:
    client, _, _ = setting
    wrong = client.get("/api/v1/approvals", headers={"authorization": "Bearer not-a-token-1234"})
    assert wrong.status_code == 401
    signed = client.post("/login", data={"token": ALICE[:-1], "name": "x"},
                         headers={"origin": ORIGIN})
    assert signed.status_code == 401
