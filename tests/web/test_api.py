"""The JSON API: bearer token only, the page's digest binding, one decision per request."""

from __future__ import annotations

import anyio
from starlette.testclient import TestClient

from anfitrion import Host
from anfitrion._approvals import ApprovalRequest
from anfitrion.store import MemoryStore

from .inbox_support import ORIGIN, TOKEN

AUTH = {"authorization": f"Bearer {TOKEN}"}


def test_api_requires_the_bearer_token(client: TestClient) -> None:
    for headers in ({}, {"authorization": "Bearer wrong-token-wrong-token"},
                    {"authorization": f"Basic {TOKEN}"}):
        response = client.get("/api/v1/approvals", headers=headers)
        assert response.status_code == 401
        assert response.headers["www-authenticate"].startswith("Bearer")


def test_a_browser_session_cookie_does_not_authorise_the_api(
        client: TestClient, pending: tuple[Host, ApprovalRequest], store: MemoryStore) -> None:
    from .inbox_support import sign_in

    _, request = pending
    sign_in(client)
    response = client.post(f"/api/v1/approvals/{request.id}/approve",
                           json={"digest": request.digest}, headers={"origin": ORIGIN})
    assert response.status_code == 401
    assert anyio.run(store.get_approval, request.id).answer is None  # type: ignore[union-attr]


def test_api_lists_and_shows_pending_requests_with_findings(
        client: TestClient, pending: tuple[Host, ApprovalRequest]) -> None:
    _, request = pending
    listed = client.get("/api/v1/approvals", headers=AUTH).json()["approvals"]
    assert [item["request"]["id"] for item in listed] == [request.id]
    assert listed[0]["state"] == "pending"
    shown = client.get(f"/api/v1/approvals/{request.id}", headers=AUTH).json()
    assert shown["request"]["digest"] == request.digest
    assert any("U+202E RLO" in f for f in shown["findings"])
    assert "⟨U+202E RLO⟩" in shown["description"]
    assert client.get("/api/v1/approvals/nope", headers=AUTH).status_code == 404


def test_api_approve_is_bound_to_the_digest_and_recorded_once(
        client: TestClient, pending: tuple[Host, ApprovalRequest], mailroom: object) -> None:
    host, request = pending
    url = f"/api/v1/approvals/{request.id}/approve"
    stale = client.post(url, json={"digest": "f" * 64}, headers=AUTH)
    assert stale.status_code == 409
    assert stale.json()["error"] == "stale"
    ok = client.post(url, json={"digest": request.digest, "approver": "ticket-42",
                                "note": "ok"}, headers=AUTH)
    assert ok.status_code == 200
    assert ok.json()["answer"]["approver"] == "api:ticket-42"
    again = client.post(f"/api/v1/approvals/{request.id}/deny",
                        json={"digest": request.digest}, headers=AUTH)
    assert again.status_code == 409
    assert again.json()["error"] == "answered"
    assert host.resume_sync(request.session_id).status == "completed"
    decided = client.get("/api/v1/approvals?status=decided", headers=AUTH).json()
    assert decided["approvals"][0]["state"] == "approved"
    assert decided["approvals"][0]["used"] is True
    assert client.get("/api/v1/approvals", headers=AUTH).json() == {"approvals": []}


def test_api_refuses_malformed_bodies(client: TestClient,
                                      pending: tuple[Host, ApprovalRequest]) -> None:
    _, request = pending
    url = f"/api/v1/approvals/{request.id}/deny"
    assert client.post(url, content=b"{nope", headers=AUTH).status_code == 400
    assert client.post(url, content=b"\xff\xfe", headers=AUTH).status_code == 400
    for body in ({}, {"digest": request.digest, "extra": 1}, {"digest": 7},
                 {"digest": request.digest, "note": "x" * 2001}, [request.digest]):
        response = client.post(url, json=body, headers=AUTH)
        assert response.status_code == 422, body
    assert client.get("/api/v1/approvals?status=weird", headers=AUTH).status_code == 400


def test_api_unknown_paths_and_methods_answer_json(client: TestClient) -> None:
    response = client.get("/api/v1/nothing", headers=AUTH)
    assert response.status_code == 404
    assert response.json()["error"] == "not_found"
    response = client.delete("/api/v1/approvals", headers=AUTH)
    assert response.status_code == 405
    assert response.json()["error"] == "method_not_allowed"


def test_openapi_document_describes_every_operation_of_the_api(client: TestClient) -> None:
    document = client.get("/api/v1/openapi.json").json()
    assert document["openapi"].startswith("3.1")
    operations = {op["operationId"] for path in document["paths"].values()
                  for op in path.values()}
    assert operations == {"listApprovals", "showApproval", "approveApproval", "denyApproval",
                          "listEffects", "showEffect", "resolveEffect", "approvalCallback"}
    from anfitrion.web._api import api_routes

    documented = set(document["paths"])
    served = {route.path for route in api_routes(MemoryStore(), "t" * 20, None)
              if not route.path.endswith("openapi.json")}
    assert documented == served
    assert document["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
