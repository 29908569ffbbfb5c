"""Fixtures for the inbox: a host that suspends on a write, sharing its store with the app."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("starlette")

from starlette.testclient import TestClient

from anfitrion import Host
from anfitrion._approvals import ApprovalRequest
from anfitrion.store import MemoryStore
from anfitrion.web import create_app

from .inbox_support import ORIGIN, TOKEN, Mailroom, sign_in, suspended_run


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture
def mailroom() -> Mailroom:
    return Mailroom([])


@pytest.fixture
def pending(store: MemoryStore, mailroom: Mailroom) -> tuple[Host, ApprovalRequest]:
    host, run = suspended_run(store, mailroom)
    return host, run.pending[0]


@pytest.fixture
def client(store: MemoryStore) -> Iterator[TestClient]:
    app = create_app(store, token=TOKEN, allowed_hosts=["testserver", "127.0.0.1"])
    with TestClient(app, base_url=ORIGIN, follow_redirects=False) as test_client:
        yield test_client


@pytest.fixture
def browser_client(client: TestClient) -> tuple[TestClient, str]:
    return client, sign_in(client)
