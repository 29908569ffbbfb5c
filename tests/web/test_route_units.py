"""The inbox's route units work on their own, mounted without the rest of the app."""

from __future__ import annotations

import pytest

pytest.importorskip("starlette")

from starlette.applications import Starlette
from starlette.testclient import TestClient

from anfitrion.store import MemoryStore
from anfitrion.web._api import Api
from anfitrion.web._security import SESSION_COOKIE, SessionBook
from anfitrion.web._signin import SignIn

from .inbox_support import ORIGIN, TOKEN


def test_the_sign_in_unit_alone_opens_a_session_only_for_the_token() -> None:
    unit = SignIn(TOKEN, None, SessionBook())
    with TestClient(Starlette(routes=unit.routes()), base_url=ORIGIN,
                    follow_redirects=False) as client:
        assert client.post("/login", data={"token": "wrong" * 4}).status_code == 401
        response = client.post("/login", data={"token": TOKEN, "name": "ana"})
    assert response.status_code == 303
    who = unit.book.find(response.cookies[SESSION_COOKIE])
    assert who is not None and who.name == "ana"
    assert unit.reviewer(who) is None  # the shared token names nobody


def test_the_api_unit_alone_answers_only_the_bearer_token() -> None:
    unit = Api(MemoryStore(), TOKEN)
    with TestClient(Starlette(routes=unit.routes()), base_url=ORIGIN) as client:
        assert client.get("/api/v1/approvals").status_code == 401
        response = client.get("/api/v1/approvals",
                              headers={"authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    assert response.json() == {"approvals": []}
