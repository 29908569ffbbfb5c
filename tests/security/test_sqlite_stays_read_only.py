"""Read-only escapes tried against a real SQLite file: writes hidden in reads, PRAGMA through
table-valued functions, extension loading, ATTACH/VACUUM INTO, lexer confusion and memory
exhaustion."""

from __future__ import annotations

import hashlib
import sqlite3
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from anfitrion import Principal, ToolContext
from anfitrion._tools import Tool
from anfitrion.exceptions import ArgumentError, ToolError
from anfitrion.toolkits import sqlite


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "shop.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, note TEXT)")
    conn.executemany("INSERT INTO orders (note) VALUES (?)", [(f"n{i}",) for i in range(20)])
    conn.commit()
    conn.close()
    return path


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def _run(t: Tool, query: str) -> Any:
    return await t.handler(t.validate({"query": query}),
                           ToolContext(Principal("a"), "s", "c", t.name))


@pytest.mark.anyio
@pytest.mark.parametrize("query", [
    "WITH x AS (SELECT 1) INSERT INTO orders (note) SELECT 'pwned' FROM x",
    "WITH x AS (SELECT 1) DELETE FROM orders",
    "WITH RECURSIVE x(n) AS (SELECT 1) UPDATE orders SET note = 'pwned'",
    "EXPLAIN DELETE FROM orders",
    "EXPLAIN QUERY PLAN INSERT INTO orders (note) VALUES ('x')",
    "SELECT * FROM pragma_table_info('orders')",
    "SELECT * FROM pragma_database_list",
    "SELECT * FROM main.pragma_compile_options",
    "SELECT load_extension('/tmp/evil.so')",
    "SELECT LOAD_EXTENSION('/tmp/evil.so', 'entry')",
    'SELECT "load_extension"(\'/tmp/evil.so\')',
    "SELECT fts3_tokenizer('simple')",
    "SELECT writefile('/tmp/pwned', 'x')",
    "SELECT readfile('/etc/passwd')",
    "SELECT edit('x')",
    "VALUES ((SELECT 1)) UNION ALL SELECT sqlite_compileoption_get(0) FROM pragma_table_list",
])
async def test_writes_pragmas_and_dangerous_functions_inside_a_read_are_refused(
        db: Path, query: str) -> None:
    before = _digest(db)
    with pytest.raises((ArgumentError, ToolError)):
        await _run(sqlite(db), query)
    assert _digest(db) == before


@pytest.mark.parametrize("query", [
    "ATTACH DATABASE '/tmp/x.db' AS x", "VACUUM INTO '/tmp/copy.db'", "VACUUM",
    "PRAGMA query_only = OFF", "PRAGMA journal_mode = DELETE", "REINDEX", "ANALYZE",
    "SELECT 1; ATTACH DATABASE '/tmp/x.db' AS x",
    "SELECT ';'; DELETE FROM orders",
    "SELECT 1 -- ;\n; DELETE FROM orders",
    "SELECT [;]; DELETE FROM orders",
    "SELECT `a;b`; DELETE FROM orders",
    "SELECT 'it''s'; DELETE FROM orders",
    "SELECT /* ; */ 1; DELETE FROM orders",
    "SELECT 'a\\'; DELETE FROM orders; --'",
    "/* */ DELETE FROM orders", "(DELETE FROM orders)", "\ufeffDELETE FROM orders",
    "SAVEPOINT a", "RELEASE a", "DETACH main",
    "CREATE TEMP TABLE t AS SELECT 1",
])
def test_statements_that_are_not_one_plain_read_are_refused_before_the_file_is_opened(
        tmp_path: Path, query: str) -> None:
    missing = tmp_path / "never-opened.db"
    with pytest.raises(ArgumentError):
        sqlite(missing).validate({"query": query})
    assert not missing.exists()


@pytest.mark.anyio
async def test_a_query_cannot_allocate_a_huge_string_or_blob(db: Path) -> None:
    for query in ("SELECT length(randomblob(200000000))",
                  "SELECT length(hex(zeroblob(100000000)))",
                  "SELECT length(group_concat(note || randomblob(1000000))) FROM orders"):
        with pytest.raises(ToolError, match="too big"):
            await _run(sqlite(db), query)
    result = await _run(sqlite(db), "SELECT length(printf('%.*c', 200000000, 'x'))")
    assert result["rows"] == [[None]]  # SQLite gives up instead of building it


@pytest.mark.anyio
async def test_an_endless_recursive_query_is_stopped(db: Path) -> None:
    query = ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
             "SELECT count(*) FROM c")
    with pytest.raises(ToolError, match="longer than"):
        await _run(sqlite(db, timeout=0.2), query)


@pytest.mark.anyio
async def test_a_database_file_is_never_created_by_a_query(tmp_path: Path) -> None:
    with pytest.raises(ToolError):
        await _run(sqlite(tmp_path / "absent.db"), "SELECT 1")
    assert not (tmp_path / "absent.db").exists()


@pytest.mark.anyio
async def test_rows_of_big_values_are_not_all_held_in_memory_at_once(tmp_path: Path) -> None:
    path = tmp_path / "blobs.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE b (data BLOB)")
    conn.executemany("INSERT INTO b VALUES (zeroblob(?))", [(2_000_000,)] * 40)
    conn.commit()
    conn.close()
    tracemalloc.start()
    try:
        result = await _run(sqlite(path), "SELECT data FROM b")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result["rows"] == [["<2000000 bytes>"]] * 40
    assert peak < 20_000_000  # one 2 MB row at a time, not 40 of them
