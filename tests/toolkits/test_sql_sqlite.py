from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from anfitrion import Principal, ToolContext
from anfitrion._tools import Tool
from anfitrion.exceptions import ArgumentError, ToolError
from anfitrion.toolkits import sqlite
from anfitrion.toolkits._sql import split_statements


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "shop.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, customer TEXT, total REAL)")
    conn.executemany("INSERT INTO orders (customer, total) VALUES (?, ?)",
                     [(f"c{i}", i * 1.5) for i in range(50)])
    conn.commit()
    conn.close()
    return path


async def run(t: Tool, query: str) -> Any:
    return await t.handler(t.validate({"query": query}),
                           ToolContext(Principal("a"), "s", "c", t.name))


def rows(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("SELECT count(*) FROM orders").fetchone()[0])
    finally:
        conn.close()


@pytest.mark.anyio
async def test_a_select_returns_columns_and_rows(db: Path) -> None:
    result = await run(sqlite(db), "SELECT id, customer FROM orders WHERE id <= 2 ORDER BY id")
    assert result == {"columns": ["id", "customer"], "rows": [[1, "c0"], [2, "c1"]],
                      "row_count": 2}


@pytest.mark.parametrize("query", [
    "INSERT INTO orders (customer) VALUES ('x')",
    "DELETE FROM orders",
    "UPDATE orders SET total = 0",
    "DROP TABLE orders",
    "CREATE TABLE t (x)",
    "PRAGMA writable_schema = ON",
    "ATTACH DATABASE '/tmp/other.db' AS other",
    "BEGIN",
    "VACUUM INTO '/tmp/copy.db'",
    "REPLACE INTO orders (id) VALUES (1)",
])
def test_writing_statements_are_refused_at_validation(db: Path, query: str) -> None:
    with pytest.raises(ArgumentError, match="only reading queries"):
        sqlite(db).validate({"query": query})


@pytest.mark.parametrize("query", [
    "SELECT 1; DELETE FROM orders",
    "SELECT 1;DELETE FROM orders;",
    "select ';'; drop table orders",
    "SELECT 1; -- harmless\n ATTACH 'x' AS y",
    "SELECT 1 /* ; */; PRAGMA user_version = 3",
])
def test_multiple_statements_are_refused_at_validation(db: Path, query: str) -> None:
    with pytest.raises(ArgumentError, match="exactly one statement"):
        sqlite(db).validate({"query": query})


def test_the_statement_splitter_respects_quotes_and_comments() -> None:
    assert split_statements("SELECT ';' AS a -- ; \n") == ["SELECT ';' AS a"]
    assert split_statements('SELECT "a;b", [c;d], `e;f` /* ; */') == \
        ['SELECT "a;b", [c;d], `e;f`']
    assert split_statements("SELECT $x$;$x$, 'it''s;'") == ["SELECT $x$;$x$, 'it''s;'"]
    assert split_statements("SELECT 1;;") == ["SELECT 1"]
    with pytest.raises(ArgumentError, match="unterminated"):
        split_statements("SELECT 'open")


@pytest.mark.anyio
@pytest.mark.parametrize(("query", "why"), [
    ("WITH x AS (SELECT 1) DELETE FROM orders", "read-only|not authorized|readonly"),
    ("SELECT load_extension('/tmp/evil.so')", "not authorized|read-only"),
    ("WITH x AS (SELECT 1) INSERT INTO orders (customer) SELECT * FROM x",
     "read-only|not authorized|readonly"),
    ("SELECT * FROM pragma_user_version", "not authorized|read-only|no such"),
])
async def test_writes_hidden_in_a_read_are_refused_by_the_authorizer(db: Path, query: str,
                                                                     why: str) -> None:
    with pytest.raises(ToolError, match=why):
        await run(sqlite(db), query)
    assert rows(db) == 50


@pytest.mark.anyio
async def test_the_connection_itself_is_read_only(db: Path) -> None:
    """Even past the lexer and the authorizer, the file is opened with mode=ro."""
    import anfitrion.toolkits._sql as sql

    conn = sqlite3.connect(Path(db).resolve().as_uri() + "?mode=ro", uri=True)
    try:
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            conn.execute("DELETE FROM orders")
    finally:
        conn.close()
    assert sql._sqlite_authorizer(sqlite3.SQLITE_ATTACH, "x", None, None, None) == \
        sqlite3.SQLITE_DENY
    assert sql._sqlite_authorizer(sqlite3.SQLITE_PRAGMA, "journal_mode", "off", None, None) == \
        sqlite3.SQLITE_DENY
    assert sql._sqlite_authorizer(sqlite3.SQLITE_UPDATE, "sqlite_master", "sql", None, None) \
        == sqlite3.SQLITE_DENY


@pytest.mark.anyio
async def test_the_schema_is_read_from_sqlite_master(db: Path) -> None:
    result = await run(sqlite(db), "SELECT name, sql FROM sqlite_master WHERE type = 'table'")
    assert result["rows"] == [["orders", "CREATE TABLE orders (id INTEGER PRIMARY KEY, "
                                         "customer TEXT, total REAL)"]]


@pytest.mark.anyio
async def test_pragma_table_functions_are_refused(db: Path) -> None:
    with pytest.raises(ToolError, match="not authorized"):
        await run(sqlite(db), "SELECT name FROM pragma_table_info('orders')")


@pytest.mark.anyio
async def test_rows_are_capped(db: Path) -> None:
    result = await run(sqlite(db, max_rows=10), "SELECT id FROM orders")
    assert result["row_count"] == 10
    assert result["truncated"] == "only the first 10 rows are shown"


@pytest.mark.anyio
async def test_bytes_are_capped(db: Path) -> None:
    result = await run(sqlite(db, max_bytes=200), "SELECT customer, total FROM orders")
    assert 0 < result["row_count"] < 50
    assert "fit in 200 bytes" in result["truncated"]


@pytest.mark.anyio
async def test_a_runaway_query_is_stopped_after_the_time_limit(db: Path) -> None:
    query = ("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) "
             "SELECT count(*) FROM n")
    with pytest.raises(ToolError, match=r"longer than 0.2 seconds"):
        await run(sqlite(db, timeout=0.2), query)


@pytest.mark.anyio
async def test_a_missing_database_is_not_created(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="cannot open the database"):
        await run(sqlite(tmp_path / "none.db"), "SELECT 1")
    assert not (tmp_path / "none.db").exists()


@pytest.mark.anyio
async def test_sql_query_is_offered_as_a_read_and_needs_no_approval(db: Path,
                                                                  gate_run: Any) -> None:
    run_ = await gate_run([sqlite(db)], [("sql_query", {"query": "SELECT count(*) FROM orders"}),
                                         ("sql_query", {"query": "DELETE FROM orders"})])
    assert run_.asked == []
    assert run_.results[0].content == '{"columns": ["count(*)"], "rows": [[50]], "row_count": 1}'
    assert run_.results[1].error_kind == "invalid_arguments"
    assert rows(db) == 50


@pytest.mark.anyio
async def test_a_query_returning_no_rows_runs_once_and_still_names_its_columns(
        db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cursor describes an empty result: nothing runs the query again to name columns."""
    ran: list[str] = []
    connect = sqlite3.connect

    def traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = connect(*args, **kwargs)
        conn.set_trace_callback(ran.append)
        return conn

    monkeypatch.setattr(sqlite3, "connect", traced)
    query = "SELECT id, customer AS who FROM orders WHERE id < 0"
    result = await run(sqlite(db), query)
    assert result == {"columns": ["id", "who"], "rows": [], "row_count": 0}
    assert ran.count(query) == 1
