"""Named migrations recorded in a table, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from anfitrion.exceptions import StoreError, UserError
from anfitrion.store import SessionState, open_store
from anfitrion.store._migrations import MIGRATIONS
from anfitrion.store._sqlite import SQLiteStore

from .pg_schema import pg_schema_url

pytestmark = pytest.mark.anyio
NAMES = [m.name for m in MIGRATIONS]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'nested' / 'store.db'}"
    else:
        yield from pg_schema_url()


async def test_a_fresh_store_lists_every_migration_pending_then_applies_each_once(
        db_url: str) -> None:
    store: Any = open_store(db_url)
    try:
        assert [(n, at) for n, at in await store.migration_status()] == \
            [(n, None) for n in NAMES]
        assert await store.migrate() == NAMES
        assert all(at for _, at in await store.migration_status())
        assert await store.migrate() == []
    finally:
        await store.close()


async def test_concurrent_migrators_apply_each_migration_exactly_once(db_url: str) -> None:
    stores: list[Any] = [open_store(db_url) for _ in range(3)]
    applied: list[list[str]] = []

    async def migrate(store: Any) -> None:
        applied.append(await store.migrate())

    try:
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for store in stores:
                    tg.start_soon(migrate, store)
    finally:
        for store in stores:
            await store.close()
    assert sorted(name for names in applied for name in names) == sorted(NAMES)


async def test_a_store_told_not_to_migrate_refuses_until_migrated(db_url: str) -> None:
    sep = "&" if "?" in db_url else "?"
    store: Any = open_store(f"{db_url}{sep}migrate=0")
    try:
        with pytest.raises(StoreError, match="db migrate"):
            await store.save_session(SessionState("s", "alice", "running", {}))
        await store.migrate()
        assert (await store.save_session(SessionState("s", "alice", "running", {}))).version == 1
    finally:
        await store.close()


def test_sqlite_urls_name_relative_and_absolute_files() -> None:
    assert SQLiteStore.from_url("sqlite:///rel/a.db").path == "rel/a.db"
    assert SQLiteStore.from_url("sqlite:////abs/a.db?timeout=2").path == "/abs/a.db"
    assert SQLiteStore.from_url("sqlite:////abs/a.db?timeout=2").timeout == 2.0
    for bad in ("sqlite://", "sqlite://host/a.db", "sqlite:/"):
        with pytest.raises(UserError):
            SQLiteStore.from_url(bad)


async def test_the_sqlite_file_is_in_wal_mode(tmp_path: Path) -> None:
    import sqlite3

    store = open_store(f"sqlite:///{tmp_path / 'w.db'}")
    await store.save_session(SessionState("s", "alice", "running", {}))
    await store.close()
    with sqlite3.connect(tmp_path / "w.db") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_sqlite_url_chooses_durability_and_rejects_nonsense(tmp_path: Any) -> None:
    from anfitrion.exceptions import UserError
    from anfitrion.store._sqlite import SQLiteStore

    assert SQLiteStore.from_url(f"sqlite:///{tmp_path}/a.db").synchronous == "full"
    assert SQLiteStore.from_url(
        f"sqlite:///{tmp_path}/a.db?synchronous=NORMAL").synchronous == "normal"
    with pytest.raises(UserError, match="synchronous"):
        SQLiteStore.from_url(f"sqlite:///{tmp_path}/a.db?synchronous=off")
    with pytest.raises(UserError, match="timeout"):
        SQLiteStore.from_url(f"sqlite:///{tmp_path}/a.db?timeout=soon")
