"""Read-only and role escapes tried against the real PostgreSQL at 127.0.0.1:5432.

The tool logs in as a low-privilege role that may ``SET ROLE`` to each principal's role, as its
documentation asks. Alice's role reads nothing secret; Bob's role reads ``secret``.
"""

from __future__ import annotations

import tracemalloc
import uuid
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from anfitrion import Principal, ToolContext
from anfitrion._tools import Tool
from anfitrion.exceptions import ArgumentError, ToolError

psycopg = pytest.importorskip("psycopg")

from anfitrion.toolkits import postgres  # noqa: E402

pytestmark = pytest.mark.postgres

SECRET = "BOB-ONLY-7f3a"


def _admin_dsn() -> str:
    for user in ("postgres", "root"):
        dsn = f"host=127.0.0.1 port=5432 dbname=test user={user} connect_timeout=3"
        try:
            psycopg.connect(dsn).close()
            return dsn
        except psycopg.OperationalError:
            continue
    pytest.skip("PostgreSQL at 127.0.0.1:5432 is not reachable")


@pytest.fixture(scope="module")
def pg() -> Iterator[dict[str, str]]:
    admin = _admin_dsn()
    tag = uuid.uuid4().hex[:8]
    n = {"login": f"anf_sec_login_{tag}", "alice": f"anf_sec_alice_{tag}",
         "bob": f"anf_sec_bob_{tag}", "secret": f"anf_sec_secret_{tag}",
         "fn": f"anf_sec_become_login_{tag}"}
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {n['login']} LOGIN NOINHERIT")
        conn.execute(f"CREATE ROLE {n['alice']} NOLOGIN")
        conn.execute(f"CREATE ROLE {n['bob']} NOLOGIN")
        conn.execute(f"GRANT {n['alice']}, {n['bob']} TO {n['login']}")
        conn.execute(f"CREATE TABLE {n['secret']} (s text)")
        conn.execute(f"INSERT INTO {n['secret']} VALUES ('{SECRET}')")
        conn.execute(f"GRANT SELECT ON {n['secret']} TO {n['bob']}")
        # an operator's helper function that (carelessly) changes the role: nothing in the
        # query text shows it, so only the check after the query can catch it
        conn.execute(f"CREATE FUNCTION {n['fn']}() RETURNS text LANGUAGE sql AS "
                     f"$$ SELECT set_config('role', '{n['bob']}', true) $$")
        conn.execute(f"GRANT EXECUTE ON FUNCTION {n['fn']}() TO {n['alice']}")
    n["dsn"] = f"host=127.0.0.1 port=5432 dbname=test user={n['login']} connect_timeout=3"
    try:
        psycopg.connect(n["dsn"]).close()
    except psycopg.OperationalError:
        pytest.skip("the server does not let a new role log in without a password")
    try:
        yield n
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP FUNCTION IF EXISTS {n['fn']}()")
            conn.execute(f"DROP TABLE IF EXISTS {n['secret']}")
            for role in ("alice", "bob", "login"):
                conn.execute(f"DROP ROLE IF EXISTS {n[role]}")


def _tool(pg: dict[str, str], **options: Any) -> Tool:
    roles = {"alice": pg["alice"], "bob": pg["bob"]}
    return postgres(pg["dsn"], role=lambda p: roles.get(p.id), **options)


async def _run(t: Tool, query: str, who: str = "alice") -> Any:
    with anyio.fail_after(30):
        return await t.handler(t.validate({"query": query}),
                               ToolContext(Principal(who), "s", "c", t.name))


@pytest.mark.anyio
async def test_bob_reads_his_secret_and_alice_is_refused(pg: dict[str, str]) -> None:
    t = _tool(pg)
    assert (await _run(t, f"SELECT s FROM {pg['secret']}", "bob"))["rows"] == [[SECRET]]
    with pytest.raises(ToolError, match="permission denied"):
        await _run(t, f"SELECT s FROM {pg['secret']}")


@pytest.mark.anyio
@pytest.mark.parametrize("query", [
    # set the role back to the login role or over to bob, then run SQL text under it
    "SELECT set_config('role', 'none', true), query_to_xml('SELECT s FROM {secret}', "
    "false, false, '')",
    "SELECT set_config('role', '{bob}', true), query_to_xml('SELECT s FROM {secret}', "
    "false, false, '')",
    # ... and leak it through an error message instead of a result
    "SELECT 1 WHERE set_config('role', '{bob}', true) IS NOT NULL AND CAST((xpath('//s/text()',"
    " query_to_xml('SELECT s FROM {secret}', false, false, '')))[1]::text AS int) = 1",
    # spellings of the same
    "SELECT pg_catalog.set_config('role', '{bob}', true)",
    'SELECT "set_config"(\'role\', \'{bob}\', true)',
    "SELECT PG_CATALOG.SET_CONFIG ('ROLE', '{bob}', true)",
    "SELECT set_config/**/('role', '{bob}', true)",
    "SELECT set_config(lower('ROLE'), '{bob}', true)",
    "SELECT set_config('statement_timeout' || '', '0', true)",
    "SELECT set_config('session_authorization', '{bob}', true)",
    "SELECT set_config('transaction_read_only', 'off', true)",
    "SELECT set_config(E'role', '{bob}', true)",
    # an E-string whose escaped quote would make a naive lexer skip the call
    "SELECT E'\\'', set_config('role', '{bob}', true), ''",
    "SELECT U&\"set_config\"('role', '{bob}', true)",
    "SELECT U&\"\\0073et_config\"('role', '{bob}', true)",
    # SQL given as text, which no check can read
    "SELECT * FROM ts_stat('SELECT to_tsvector(s) FROM {secret}')",
    "SELECT query_to_xmlschema('SELECT 1', false, false, '')",
    "SELECT dblink_exec('dbname=test', 'DROP TABLE {secret}')",
])
async def test_a_query_cannot_change_the_role_it_runs_as(pg: dict[str, str], query: str) -> None:
    with pytest.raises(ArgumentError):
        await _run(_tool(pg), query.format(**pg))


@pytest.mark.anyio
async def test_a_role_changed_where_the_query_cannot_show_it_discards_the_result(
        pg: dict[str, str]) -> None:
    with pytest.raises(ToolError, match="changed the database role"):
        await _run(_tool(pg), f"SELECT {pg['fn']}()")


@pytest.mark.anyio
@pytest.mark.parametrize("query", [
    "SELECT pg_read_file('/etc/hostname')", "SELECT pg_read_binary_file('/etc/hostname')",
    "SELECT pg_ls_dir('.')", "SELECT pg_stat_file('/etc/hostname')",
    "SELECT lo_import('/etc/hostname')", "SELECT lo_export(1, '/tmp/pwned')",
    "SELECT pg_reload_conf()", "SELECT pg_rotate_logfile()", "SELECT pg_notify('c', 'x')",
    "SELECT pg_advisory_lock(1)", "SELECT pg_stat_reset()", "SELECT pg_switch_wal()",
    "SELECT pg_create_restore_point('x')", "SELECT pg_log_backend_memory_contexts(1)",
    "SELECT * FROM pg_logdir_ls()",
])
async def test_functions_a_read_only_transaction_does_not_stop_are_refused(
        pg: dict[str, str], query: str) -> None:
    with pytest.raises(ArgumentError):
        await _run(_tool(pg), query)


@pytest.mark.anyio
async def test_a_query_cannot_terminate_another_session_of_the_login_role(
        pg: dict[str, str]) -> None:
    async with await psycopg.AsyncConnection.connect(pg["dsn"]) as other:
        pid = other.info.backend_pid
        with pytest.raises(ArgumentError):
            await _run(postgres(pg["dsn"]), f"SELECT pg_terminate_backend({pid})")
        with pytest.raises(ArgumentError):
            await _run(postgres(pg["dsn"]), f"SELECT pg_cancel_backend({pid})")
        assert (await (await other.execute("SELECT 1")).fetchone()) == (1,)


@pytest.mark.anyio
@pytest.mark.parametrize("query", [
    "WITH gone AS (DELETE FROM {secret} RETURNING s) SELECT count(*) FROM gone",
    "SELECT * INTO anf_sec_copy FROM {secret}",
    "SELECT s FROM {secret} FOR UPDATE",
    "TABLE {secret} FOR SHARE",
    "EXPLAIN ANALYZE WITH x AS (INSERT INTO {secret} VALUES ('pwned') RETURNING 1) "
    "SELECT * FROM x",
])
async def test_writes_and_locks_hidden_in_reads_fail_in_the_read_only_transaction(
        pg: dict[str, str], query: str) -> None:
    with pytest.raises(ToolError):
        await _run(_tool(pg), query.format(**pg), "bob")
    with psycopg.connect(_admin_dsn()) as conn:
        rows = conn.execute(f"SELECT s FROM {pg['secret']}").fetchall()
    assert rows == [(SECRET,)]


@pytest.mark.parametrize("query", [
    "SET ROLE postgres", "RESET ROLE", "SET SESSION AUTHORIZATION postgres",
    "SET transaction_read_only = off", "COPY (SELECT 1) TO PROGRAM 'id'",
    "COPY anf TO '/tmp/x'", "DO $$ BEGIN PERFORM 1; END $$", "CALL p()",
    "LISTEN x", "NOTIFY x", "LOAD 'plpgsql'", "DISCARD ALL", "PREPARE x AS SELECT 1",
    "SELECT 1; SET ROLE postgres", "SELECT $a$;$a$; RESET ROLE",
    "SELECT E'\\';'; RESET ROLE",
    "COMMIT", "ROLLBACK; SET ROLE postgres", "BEGIN READ WRITE",
])
def test_statements_that_are_not_one_read_are_refused_at_validation(query: str) -> None:
    t = postgres("host=127.0.0.1 dbname=never_connected")
    with pytest.raises(ArgumentError):
        t.validate({"query": query})


@pytest.mark.anyio
async def test_a_query_cannot_lift_its_own_statement_timeout(pg: dict[str, str]) -> None:
    with pytest.raises(ToolError, match="longer than"):
        await _run(_tool(pg, timeout=0.5),
                   "SELECT set_config('statement_timeout', '0', true), pg_sleep(20)")


@pytest.mark.anyio
async def test_harmless_settings_can_still_be_changed_for_the_query(pg: dict[str, str]) -> None:
    result = await _run(_tool(pg), "SELECT set_config('timezone', 'UTC', true)")
    assert result["rows"] == [["UTC"]]


@pytest.mark.anyio
async def test_an_empty_result_still_names_its_columns(pg: dict[str, str]) -> None:
    result = await _run(_tool(pg), "SELECT 1 AS one WHERE false")
    assert result == {"columns": ["one"], "rows": [], "row_count": 0}


@pytest.mark.anyio
async def test_a_result_of_many_big_values_is_never_held_whole(pg: dict[str, str]) -> None:
    tracemalloc.start()
    try:
        result = await _run(_tool(pg), "SELECT repeat('x', 1000000) FROM generate_series(1, 150)")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result["row_count"] == 0 and "truncated" in result
    assert peak < 30_000_000  # a few 1 MB rows at a time, not 150 of them


@pytest.mark.anyio
async def test_a_connection_failure_never_shows_the_model_the_dsn_or_its_password() -> None:
    t = postgres("postgresql://app:Sup3rS3cret-pw@127.0.0.1:1/prod?connect_timeout=3")
    with pytest.raises(ToolError) as refused:
        await _run(t, "SELECT 1")
    assert "Sup3rS3cret" not in str(refused.value) and "127.0.0.1" not in str(refused.value)
