"""An existing SQLite file must be a database: an empty (0-byte) file — truncated, or made by
something else — is refused instead of being silently an empty store whose audit log is
"intact: 0 records"; so is a file that is not SQLite. A file that does not exist yet becomes
a new store, and ``anfitrion db migrate`` may turn an empty file into one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner, Result

from anfitrion._cli.main import cli
from anfitrion.exceptions import StoreError
from anfitrion.store._sqlite import SQLiteStore

pytestmark = pytest.mark.anyio


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def test_audit_verify_on_an_empty_file_fails_clearly_without_a_traceback(
        tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()
    done = subprocess.run(
        [sys.executable, "-c", "from anfitrion._cli.main import main; main()",
         "audit", "verify", "--store", f"sqlite:///{empty}"],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
        env=os.environ.copy())
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert f"Error: the SQLite store {empty} is an empty file (0 bytes)" in done.stderr
    assert "intact" not in done.stdout
    assert empty.stat().st_size == 0  # nothing was written to it


@pytest.mark.parametrize("command", [("audit", "verify"), ("audit", "show"),
                                     ("approvals", "list"), ("db", "status")])
def test_every_store_command_refuses_an_empty_file(tmp_path: Path,
                                                   command: tuple[str, ...]) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()
    result = invoke(*command, "--store", f"sqlite:///{empty}")
    assert result.exit_code == 1
    assert "is an empty file (0 bytes)" in result.output
    assert isinstance(result.exception, SystemExit)
    assert empty.stat().st_size == 0


@pytest.mark.parametrize("content", [b"not a database\n", b"S", b"SQLite format 2\x00" + b"\0" * 84,
                                     b"\x00" * 4096, b'{"sessions": []}'])
def test_a_file_that_is_not_sqlite_is_refused(tmp_path: Path, content: bytes) -> None:
    other = tmp_path / "notes.db"
    other.write_bytes(content)
    result = invoke("audit", "verify", "--store", f"sqlite:///{other}")
    assert result.exit_code == 1
    assert "is not an SQLite database" in result.output
    assert other.read_bytes() == content


def test_db_migrate_creates_a_store_in_an_empty_file_and_then_it_opens(tmp_path: Path) -> None:
    empty = tmp_path / "new.db"
    empty.touch()
    migrated = invoke("db", "migrate", "--store", f"sqlite:///{empty}")
    assert migrated.exit_code == 0, migrated.output
    assert "migration(s) applied" in migrated.output
    verified = invoke("audit", "verify", "--store", f"sqlite:///{empty}")
    assert verified.exit_code == 0
    assert "audit chain intact: 0 records" in verified.output


def test_a_file_that_does_not_exist_becomes_a_new_store(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "fresh.db"
    # #36: a command that only reads refuses it (a mistyped path is not an empty store) ...
    refused = invoke("audit", "verify", "--store", f"sqlite:///{path}")
    assert refused.exit_code == 1
    assert not path.parent.exists()
    # ... and the command that creates stores makes it
    created = invoke("db", "migrate", "--store", f"sqlite:///{path}")
    assert created.exit_code == 0, created.output
    assert path.stat().st_size > 0
    assert [p.name for p in path.parent.iterdir() if p.name.endswith(".new")] == []


async def test_many_handles_opening_one_new_file_at_once_all_succeed(tmp_path: Path) -> None:
    """A new store never exists as an empty file, so a second opener never mistakes it for
    a truncated one."""
    path = tmp_path / "shared.db"
    stores = [SQLiteStore(path) for _ in range(8)]
    seen: list[int] = []

    async def use(store: SQLiteStore) -> None:
        seen.append(len(await store.list_sessions()))

    try:
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for store in stores:
                    tg.start_soon(use, store)
    finally:
        for store in stores:
            await store.close()
    assert seen == [0] * 8


async def test_the_library_raises_a_store_error_for_an_empty_file(tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()
    store = SQLiteStore(empty)
    try:
        with pytest.raises(StoreError, match="empty file"):
            await store.list_sessions()
        assert await store.migrate()  # the explicit request to create a store
        assert await store.list_sessions() == []
    finally:
        await store.close()
