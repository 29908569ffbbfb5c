"""Backends for the store contract: in-memory, a SQLite file, PostgreSQL at 127.0.0.1:5432.

PostgreSQL tests get a fresh schema each (``search_path`` in the URL), dropped afterwards.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from anfitrion.store import Store, open_store

from .pg_schema import pg_schema_url


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
