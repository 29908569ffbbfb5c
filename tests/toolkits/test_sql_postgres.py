"""The PostgreSQL query tool against the real server at 127.0.0.1:5432."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from anfitrion import Principal, ToolContext
from anfitrion._tools import Tool
from anfitrion.exceptions import ArgumentError, ToolError

psycopg = pytest.importorskip("psycopg")

from anfitrion.toolkits import postgres  # noqa: E402

pytestmark = pytest.mark.postgres


def _dsn() -> str:
    for user in ("root", "postgres"):
        dsn = f"host=127.0.0.1 port=5432 dbname=test user={user} connect_timeout=3"
        try:
            psycopg.connect(dsn).close()
            return dsn
        except psycopg.OperationalError:
            continue
    pytest.skip("PostgreSQL at 127.0.0.1:5432 is not reachable")


@pytest.fixture(scope="module")
def pg() -> Iterator[dict[str, str]]:
    """A table readable by one role and not by another; dropped afterwards."""
    dsn = _dsn()
    tag = uuid.uuid4().hex[:8]
    names = {"dsn": dsn, "table": f"anf_orders_{tag}", "reader": f"anf_reader_{tag}",
             "nobody": f"anf_nobody_{tag}"}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {names['table']} (id int PRIMARY KEY, note text)")
        conn.execute(f"INSERT INTO {names['table']} SELECT g, 'note ' || g "
                     "FROM generate_series(1, 50) g")
        conn.execute(f"CREATE ROLE {names['reader']} NOLOGIN")
        conn.execute(f"CREATE ROLE {names['nobody']} NOLOGIN")
        conn.execute(f"GRANT SELECT ON {names['table']} TO {names['reader']}")
    try:
        yield names
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {names['table']}")
            conn.execute(f"DROP ROLE IF EXISTS {names['reader']}")
            conn.execute(f"DROP ROLE IF EXISTS {names['nobody']}")


def count(pg: dict[str, str]) -> int:
    with psycopg.connect(pg["dsn"]) as conn:
        row = conn.execute(f"SELECT count(*) FROM {pg['table']}").fetchone()
        assert row is not None
        return int(row[0])


def role_of(principal: Principal) -> str | None:
    value = principal.attributes.get("db_role")
    return value if isinstance(value, str) else None


async def run(t: Tool, query: str, principal: Principal | None = None) -> Any:
    return await t.handler(t.validate({"query": query}),
                           ToolContext(principal or Principal("a"), "s", "c", t.name))


@pytest.mark.anyio
async def test_a_select_runs_with_the_principals_role(pg: dict[str, str]) -> None:
    t = postgres(pg["dsn"], role=role_of)
    ana = Principal("ana", attributes={"db_role": pg["reader"]})
    result = await run(t, f"SELECT id, note, current_user FROM {pg['table']} WHERE id = 1", ana)
    assert result["rows"] == [[1, "note 1", pg["reader"]]]


@pytest.mark.anyio
async def test_a_principal_without_the_grant_is_refused_by_the_database(
        pg: dict[str, str]) -> None:
    t = postgres(pg["dsn"], role=role_of)
    bob = Principal("bob", attributes={"db_role": pg["nobody"]})
    with pytest.raises(ToolError, match="permission denied"):
        await run(t, f"SELECT * FROM {pg['table']}", bob)


@pytest.mark.anyio
async def test_a_principal_without_a_configured_role_is_refused(pg: dict[str, str]) -> None:
    with pytest.raises(ToolError, match="no database role"):
        await run(postgres(pg["dsn"], role=role_of), "SELECT 1", Principal("eve"))


@pytest.mark.anyio
@pytest.mark.parametrize("query", [
    "WITH gone AS (DELETE FROM {t} RETURNING id) SELECT count(*) FROM gone",
    "WITH x AS (UPDATE {t} SET note = 'pwned' RETURNING id) SELECT 1",
    "SELECT nextval('anf_missing_seq')",
])
async def test_writes_hidden_in_a_read_are_refused_by_the_read_only_transaction(
        pg: dict[str, str], query: str) -> None:
    with pytest.raises(ToolError):
        await run(postgres(pg["dsn"]), query.format(t=pg["table"]))
    assert count(pg) == 50


@pytest.mark.anyio
async def test_a_changed_setting_does_not_outlive_the_call(pg: dict[str, str]) -> None:
    t = postgres(pg["dsn"])
    await run(t, "SELECT set_config('statement_timeout', '0', false)")
    result = await run(t, "SELECT current_setting('transaction_read_only')")
    assert result["rows"] == [["on"]]


@pytest.mark.parametrize("query", [
    "SELECT 1; DELETE FROM orders",
    "SELECT $$;$$; DROP TABLE orders",
    "INSERT INTO orders VALUES (1)",
    "SET ROLE postgres",
    "RESET ROLE",
    "COMMIT",
    "COPY orders TO '/tmp/x'",
])
def test_multiple_statements_and_non_reads_are_refused_at_validation(query: str) -> None:
    with pytest.raises(ArgumentError):
        postgres("host=127.0.0.1 dbname=test").validate({"query": query})


@pytest.mark.anyio
async def test_the_server_refuses_a_second_statement_the_lexer_missed(
        pg: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The extended protocol carries one statement: a lexer bug cannot smuggle a second."""
    import anfitrion.toolkits._sql as sql

    monkeypatch.setattr(sql, "_check_query", lambda arguments: None)  # the "lexer bug"
    t = postgres(pg["dsn"])
    with pytest.raises(ToolError, match=r"multiple commands|cannot insert"):
        await t.handler({"query": f"SELECT 1; DELETE FROM {pg['table']}"},
                        ToolContext(Principal("a"), "s", "c", t.name))
    assert count(pg) == 50


@pytest.mark.anyio
async def test_a_slow_statement_hits_the_statement_timeout(pg: dict[str, str]) -> None:
    with pytest.raises(ToolError, match=r"longer than 0.2 seconds"):
        await run(postgres(pg["dsn"], timeout=0.2), "SELECT pg_sleep(5)")


@pytest.mark.anyio
async def test_rows_and_bytes_are_capped(pg: dict[str, str]) -> None:
    result = await run(postgres(pg["dsn"], max_rows=5), f"SELECT id FROM {pg['table']}")
    assert result["row_count"] == 5
    assert "first 5 rows" in result["truncated"]
    result = await run(postgres(pg["dsn"], max_bytes=100), f"SELECT note FROM {pg['table']}")
    assert 0 < result["row_count"] < 50
    assert "fit in 100 bytes" in result["truncated"]


@pytest.mark.anyio
async def test_percent_signs_in_a_query_are_literal(pg: dict[str, str]) -> None:
    result = await run(postgres(pg["dsn"]), "SELECT '100%' AS p, 'a%sb' AS q")
    assert result["rows"] == [["100%", "a%sb"]]


@pytest.fixture
def counted(pg: dict[str, str]) -> Iterator[str]:
    """A volatile function that counts its calls in its session and fails on the second one:
    the side effect an operator's function may have (a read-only transaction refuses writes,
    nextval included, so the count lives in a session setting)."""
    name = f"anf_counted_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg["dsn"], autocommit=True) as conn:
        conn.execute(f"""
            CREATE FUNCTION {name}() RETURNS int VOLATILE LANGUAGE plpgsql AS $$
            DECLARE n int := coalesce(nullif(current_setting('anf.calls', true), ''), '0')::int
                             + 1;
            BEGIN
                PERFORM set_config('anf.calls', n::text, false);
                IF n > 1 THEN RAISE EXCEPTION 'called % times', n; END IF;
                RETURN n;
            END $$""")
    try:
        yield name
    finally:
        with psycopg.connect(pg["dsn"], autocommit=True) as conn:
            conn.execute(f"DROP FUNCTION IF EXISTS {name}()")


@pytest.mark.anyio
async def test_a_query_returning_no_rows_runs_once_and_still_names_its_columns(
        pg: dict[str, str], counted: str) -> None:
    """Naming the columns of an empty result must not run the query a second time: an
    operator's function with side effects (or a slow query) would run twice."""
    t = postgres(pg["dsn"])
    with pytest.raises(ToolError, match="called 2 times"):  # the counter counts
        await run(t, f"SELECT {counted}() FROM generate_series(1, 2)")
    result = await run(t, f"SELECT n AS calls, 'x' AS \"Other col\" "
                          f"FROM (SELECT {counted}() AS n) AS once WHERE n < 0")
    assert result["columns"] == ["calls", "Other col"]
    assert result["rows"] == []
    assert result["row_count"] == 0


@pytest.mark.anyio
async def test_an_empty_result_of_a_table_names_its_columns(pg: dict[str, str]) -> None:
    result = await run(postgres(pg["dsn"]), f"SELECT * FROM {pg['table']} WHERE id < 0")
    assert result["columns"] == ["id", "note"]
    assert result["rows"] == []
