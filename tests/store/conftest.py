"""Backends for the store contract: in-memory, a SQLite file, PostgreSQL at 127.0.0.1:5432.

PostgreSQL tests get a fresh schema each (``search_path`` in the URL), dropped afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from anfitrion.store import Store, open_store

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/test"


def pg_schema_url() -> Iterator[str]:
    psycopg = pytest.importorskip("psycopg")
    try:
        admin = psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        pytest.skip(f"PostgreSQL at 127.0.0.1:5432 is not reachable: {exc}")
    schema = f"anfitrion_test_{uuid.uuid4().hex[:12]}"
    admin.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield f"{PG_ADMIN}?options=-csearch_path%3D{schema}"
    finally:
        admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
        admin.close()


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "memory":
        yield "memory://"
    elif request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
    else:
        yield from pg_schema_url()


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    opened = open_store(store_url)
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
async def other_handle(store: Store, store_url: str) -> AsyncIterator[Callable[[], Store]]:
    """Second, independent handles on the same store (another connection / process)."""
    handles: list[Store] = []

    def make() -> Store:
        if store_url == "memory://":
            return store
        handle = open_store(store_url)
        handles.append(handle)
        return handle

    try:
        yield make
    finally:
        for handle in handles:
            await handle.close()
