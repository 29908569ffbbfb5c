"""Read-only SQL, by construction rather than by prompt: SQLite and PostgreSQL.

Three layers, each enough on its own for the common attacks:

1. **At validate** (nothing touched yet) a small lexer that understands quotes, quoted
   identifiers, dollar quotes and comments rejects more than one statement, and the first keyword
   must be ``SELECT``, ``WITH``, ``VALUES``, ``TABLE`` or ``EXPLAIN``.
2. **SQLite**: the file is opened with a ``mode=ro`` URI, ``PRAGMA query_only`` is set, and an
   authorizer refuses everything that is not a read: writes, schema changes, transactions,
   ``ATTACH``/``DETACH``, every PRAGMA (the schema is read from ``sqlite_master``), and
   ``load_extension``. A progress handler stops a query after the time limit, and the longest
   string or blob a query may build is capped (``randomblob(10**9)`` cannot exhaust memory).
3. **PostgreSQL** (extra ``postgres``): every query runs in a ``READ ONLY``, ``REPEATABLE
   READ`` transaction with a ``statement_timeout``, after ``SET LOCAL ROLE`` to the principal's
   own database role when a role mapping is configured (no role → refused: fail closed), and is
   always rolled back.
   A read-only transaction does not stop everything, so at validate the query is also refused
   when it names a function that can change the session's identity (``set_config`` except for
   a few harmless settings: ``set_config('role', …)`` undoes ``SET LOCAL ROLE``), runs SQL
   given as text (``query_to_xml``, ``ts_stat``, ``dblink``), reaches the server's files
   (``pg_read_file``, ``lo_import``) or acts outside the transaction
   (``pg_terminate_backend``, ``pg_reload_conf``). After the query the role is checked again:
   a result produced under another role is discarded.

Results are capped by rows and by bytes; a capped result says so. Rows are read one at a time
(PostgreSQL in single-row mode), so a query returning many big values never has them all in the
host's memory at once.

Example:
    >>> split_statements("select 1; -- done")
    ['select 1']
"""

from __future__ import annotations

import inspect
import json
import logging
import re
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._conversation import Provenance
from .._principal import Principal
from .._tools import Effect, Tool
from ..exceptions import ArgumentError, MissingDependencyError, ToolError, ToolNotExecuted

if TYPE_CHECKING:
    from psycopg import AsyncConnection, AsyncCursor

__all__ = ["postgres", "split_statements", "sqlite"]

log = logging.getLogger("anfitrion.toolkits.sql")

MAX_QUERY_CHARS = 20_000
READ_KEYWORDS = frozenset({"select", "with", "values", "table", "explain"})


def split_statements(sql: str) -> list[str]:
    """Split *sql* on top-level ``;`` — outside quotes, quoted identifiers, dollar quotes and
    comments — and return the non-empty statements (comments stripped from their ends).

    Raises:
        ArgumentError: an unterminated quote or comment.
    """
    statements: list[str] = []
    current: list[str] = []
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if c in "'\"`":
            end = i + 1
            while True:
                end = sql.find(c, end)
                if end < 0:
                    raise ArgumentError("query has an unterminated quote", field="query")
                if end + 1 < n and sql[end + 1] == c:  # doubled quote inside
                    end += 2
                    continue
                break
            current.append(sql[i:end + 1])
            i = end + 1
        elif c == "[":
            end = sql.find("]", i)
            if end < 0:
                raise ArgumentError("query has an unterminated [identifier]", field="query")
            current.append(sql[i:end + 1])
            i = end + 1
        elif c == "$":
            tag_end = sql.find("$", i + 1)
            tag = sql[i:tag_end + 1] if tag_end > 0 else ""
            if tag and all(ch.isalnum() or ch == "_" for ch in tag[1:-1]) \
                    and not tag[1:2].isdigit():
                close = sql.find(tag, tag_end + 1)
                if close < 0:
                    raise ArgumentError("query has an unterminated dollar quote", field="query")
                current.append(sql[i:close + len(tag)])
                i = close + len(tag)
            else:
                current.append(c)
                i += 1
        elif sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end + 1
            current.append(" ")
        elif sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            if end < 0:
                raise ArgumentError("query has an unterminated /* comment", field="query")
            i = end + 2
            current.append(" ")
        elif c == ";":
            statements.append("".join(current).strip())
            current = []
            i += 1
        else:
            current.append(c)
            i += 1
    statements.append("".join(current).strip())
    return [s for s in statements if s]


def _check_query(arguments: Mapping[str, Any]) -> None:
    query = arguments.get("query")
    if not isinstance(query, str) or not query.strip():
        raise ArgumentError("query must be a non-empty SQL string", field="query")
    if len(query) > MAX_QUERY_CHARS:
        raise ArgumentError(f"query is longer than {MAX_QUERY_CHARS} characters", field="query")
    if "\x00" in query:
        raise ArgumentError("query contains a NUL character", field="query")
    statements = split_statements(query)
    if len(statements) != 1:
        raise ArgumentError(f"send exactly one statement (found {len(statements)}): multiple "
                            "statements are not accepted", field="query")
    first = statements[0].lstrip("( \t\r\n").split(None, 1)[0].lower() if statements else ""
    if first not in READ_KEYWORDS:
        raise ArgumentError(f"only reading queries are accepted (SELECT, WITH, VALUES, TABLE, "
                            f"EXPLAIN); {first.upper()[:20]!r} is not one", field="query")


# Functions a read-only transaction does not stop: they change who the session is or its
# settings, run SQL given as text (which no check here can read), touch the server's files, or
# act on other sessions and the server. Matched as identifiers, schema-qualified or quoted.
_PG_DENIED_FUNCTIONS = frozenset({
    "query_to_xml", "query_to_xmlschema", "query_to_xml_and_xmlschema",
    "cursor_to_xml", "cursor_to_xmlschema", "ts_stat", "ts_rewrite",
    "pg_terminate_backend", "pg_cancel_backend", "pg_reload_conf", "pg_rotate_logfile",
    "pg_switch_wal", "pg_create_restore_point", "pg_promote", "pg_log_backend_memory_contexts",
    "pg_read_file", "pg_read_binary_file", "pg_ls_dir", "pg_stat_file", "pg_ls_logdir",
    "pg_ls_waldir", "pg_ls_tmpdir", "pg_ls_archive_statusdir", "pg_ls_logicalmapdir",
    "pg_ls_logicalsnapdir", "pg_ls_replslotdir", "pg_file_write", "pg_file_rename",
    "pg_file_unlink", "pg_file_sync", "pg_logdir_ls", "lo_import", "lo_export", "lo_unlink",
    "lo_create", "lo_creat", "lo_from_bytea", "lo_put", "lo_open", "lo_truncate", "lowrite",
    "pg_notify", "pg_logical_emit_message", "pg_advisory_lock", "pg_advisory_lock_shared",
    "pg_try_advisory_lock", "pg_try_advisory_lock_shared",
})
_PG_DENIED_PREFIXES = ("dblink", "pg_stat_reset", "pg_replication_", "pg_create_",
                       "pg_drop_replication", "pg_copy_", "pg_import_")
_IDENT_START = re.compile(r"[A-Za-z_\u0080-\U0010ffff]")
_IDENT_CHARS = re.compile(r"[A-Za-z0-9_$\u0080-\U0010ffff]*")


def _pg_words(sql: str, *, backslash_escapes: bool) -> list[tuple[str, int]]:
    """The identifiers and keywords of *sql*, lower-cased, outside strings and comments, each
    with the index just past it.

    With *backslash_escapes* every string is read as if ``standard_conforming_strings`` were off;
    ``E'…'`` strings always are. Raises :class:`ArgumentError` for ``U&`` escaped identifiers,
    whose spelling cannot be checked here.
    """
    words: list[tuple[str, int]] = []
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if c == "'":
            escapes = backslash_escapes or (i > 0 and sql[i - 1] in "eE"
                                            and (i < 2 or not _IDENT_CHARS.fullmatch(sql[i - 2])))
            i = _past_string(sql, i, escapes=escapes)
        elif c == '"':
            name, i = _quoted_identifier(sql, i)
            words.append((name, i))
        elif c == "$" and (match := re.match(r"\$([A-Za-z_][A-Za-z0-9_]*)?\$", sql[i:])):
            close = sql.find(match.group(0), i + len(match.group(0)))
            i = n if close < 0 else close + len(match.group(0))
        elif sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end + 1
        elif sql.startswith("/*", i):
            i = _past_block_comment(sql, i)
        elif c in "uU" and sql.startswith("&", i + 1) and sql[i + 2:i + 3] in ("'", '"'):
            raise ArgumentError("U& escaped strings and identifiers are not accepted; write "
                                "the characters themselves", field="query")
        elif _IDENT_START.match(c):
            match_ident = _IDENT_CHARS.match(sql, i + 1)
            end = match_ident.end() if match_ident else i + 1
            words.append((sql[i:end].lower(), end))
            i = end
        else:
            i += 1
    return words


def _past_string(sql: str, i: int, *, escapes: bool) -> int:
    """The index just past the ``'…'`` string literal opening at *i* (``''`` is a quote;
    with *escapes*, so is ``\\'``)."""
    n = len(sql)
    i += 1
    while i < n:
        if escapes and sql[i] == "\\":
            i += 2
            continue
        if sql[i] == "'":
            if i + 1 < n and sql[i + 1] == "'":
                i += 2
                continue
            break
        i += 1
    return i + 1


def _quoted_identifier(sql: str, i: int) -> tuple[str, int]:
    """The ``"…"`` identifier opening at *i*, lower-cased, and the index just past it."""
    n = len(sql)
    end = i + 1
    name: list[str] = []
    while end < n:
        if sql[end] == '"':
            if end + 1 < n and sql[end + 1] == '"':
                name.append('"')
                end += 2
                continue
            break
        name.append(sql[end])
        end += 1
    return "".join(name).lower(), end + 1


def _past_block_comment(sql: str, i: int) -> int:
    """The index just past the ``/* … */`` comment opening at *i* (PostgreSQL's nest)."""
    n = len(sql)
    depth, i = 1, i + 2
    while i < n and depth:
        if sql.startswith("/*", i):
            depth, i = depth + 1, i + 2
        elif sql.startswith("*/", i):
            depth, i = depth - 1, i + 2
        else:
            i += 1
    return i


# set_config is allowed only with one of these setting names written as a plain literal: it can
# otherwise name ``role`` and undo SET LOCAL ROLE within the query.
_PG_SETTABLE = frozenset({"statement_timeout", "lock_timeout", "work_mem", "datestyle",
                          "timezone", "intervalstyle", "extra_float_digits", "bytea_output",
                          "application_name"})
_SET_CONFIG_CALL = re.compile(r"\s*\(\s*'([A-Za-z_]+)'\s*,")


def _check_pg_query(arguments: Mapping[str, Any]) -> None:
    _check_query(arguments)
    query = str(arguments.get("query"))
    for escapes in (False, True):
        for word, end in _pg_words(query, backslash_escapes=escapes):
            if word == "set_config":
                match = _SET_CONFIG_CALL.match(query, end)
                if match and match.group(1).lower() in _PG_SETTABLE:
                    continue
                raise ArgumentError(
                    "set_config is allowed only with one of the settings "
                    f"{', '.join(sorted(_PG_SETTABLE))} written as a plain 'literal' (it could "
                    "otherwise change the role the query runs as)", field="query")
            if word in _PG_DENIED_FUNCTIONS or word.startswith(_PG_DENIED_PREFIXES):
                raise ArgumentError(
                    f"{word[:40]!r} is not allowed here: this tool only reads with your own "
                    "permissions, and that function changes the session or the server, runs SQL "
                    "text, or reads the server's files", field="query")


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"<{len(bytes(value))} bytes>"
    return str(value)


def _fetch_within(fetchone: Callable[[], Any], max_rows: int,
                  max_bytes: int) -> list[Sequence[Any]]:
    """Fetch rows one at a time, stopping one row past either cap (so the shaped result knows it
    was cut) — never holding ``max_rows`` rows of megabyte values at once."""
    rows: list[Sequence[Any]] = []
    size = 0
    while len(rows) <= max_rows:
        row = fetchone()
        if row is None:
            break
        item = [_jsonable(v) for v in row]  # a blob is kept as "<N bytes>", not its bytes
        rows.append(item)
        size += len(json.dumps(item, ensure_ascii=False).encode("utf-8")) + 1
        if size > max_bytes:
            break
    return rows


def _shape(columns: Sequence[str], rows: Sequence[Sequence[Any]], more: bool, max_rows: int,
           max_bytes: int) -> dict[str, Any]:
    kept: list[list[Any]] = []
    size = len(json.dumps(list(columns)))
    truncated = f"only the first {max_rows} rows are shown" if more else None
    for row in rows:
        item = [_jsonable(v) for v in row]
        size += len(json.dumps(item, ensure_ascii=False).encode("utf-8")) + 1
        if size > max_bytes:
            truncated = f"only the first {len(kept)} rows fit in {max_bytes} bytes"
            break
        kept.append(item)
    result: dict[str, Any] = {"columns": list(columns), "rows": kept, "row_count": len(kept)}
    if truncated:
        result["truncated"] = truncated
    return result


_SQLITE_DENIED_FUNCTIONS = frozenset({"load_extension", "fts3_tokenizer", "readfile",
                                      "writefile", "edit"})


def _sqlite_authorizer(action: int, arg1: str | None, arg2: str | None, db: str | None,
                       source: str | None) -> int:
    if action in (sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_RECURSIVE):
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_FUNCTION:
        return sqlite3.SQLITE_DENY if (arg2 or "").lower() in _SQLITE_DENIED_FUNCTIONS \
            else sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


def _query_tool(run: Callable[..., Any], name: str, description: str,
                validator: Callable[[Mapping[str, Any]], None] = _check_query) -> Tool:
    summary = (inspect.getdoc(run) or "").split("Args:")[0].strip()
    return Tool.from_function(run, name=name, effect=Effect.READ,
                              provenance=Provenance.UNTRUSTED, validator=validator,
                              description=summary + (f"\n\n{description}" if description else ""))


def sqlite(path: str | Path, *, name: str = "sql_query", max_rows: int = 200,
           max_bytes: int = 64 * 1024, timeout: float = 5.0, description: str = "",
           max_value_bytes: int = 4 * 1024 * 1024) -> Tool:
    """A read-only query tool over one SQLite file.

    Args:
        path: the database file (must exist; it is never created or changed).
        name: the tool's name.
        max_rows: most rows returned.
        max_bytes: most bytes of JSON rows returned.
        timeout: seconds a query may run.
        description: what the database holds, appended to the tool's description for the model.
        max_value_bytes: the longest string or blob a query may build or read (SQLite's
            ``SQLITE_LIMIT_LENGTH``), so one expression cannot allocate gigabytes.
    """
    uri = Path(path).resolve().as_uri() + "?mode=ro"

    def run(query: str) -> dict[str, Any]:
        """Run one read-only SQL query (SQLite dialect) and return columns and rows.

        One SELECT statement at a time; writes, PRAGMA and ATTACH are refused, so do not use it
        to change data. The schema is in sqlite_master. Ask for only the columns and rows you
        need (results are capped).

        Args:
            query: One SQLite SELECT statement.
        """
        _check_query({"query": query})
        try:
            conn = sqlite3.connect(uri, uri=True, timeout=timeout, check_same_thread=False)
        except sqlite3.Error as exc:
            raise ToolNotExecuted(f"cannot open the database read-only: {exc}") from None
        try:
            conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max_value_bytes)
            conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
            conn.execute("PRAGMA query_only = ON")
            # load the schema before the authorizer: SQLite's own schema parse is not a query
            conn.execute("SELECT count(*) FROM sqlite_master").fetchall()
            conn.set_authorizer(_sqlite_authorizer)
            deadline = time.monotonic() + timeout
            conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
            try:
                cursor = conn.execute(query)
                rows = _fetch_within(cursor.fetchone, max_rows, max_bytes)
            except sqlite3.DatabaseError as exc:
                message = str(exc)
                if message == "interrupted":
                    message = f"the query ran longer than {timeout:g} seconds"
                elif "not authorized" in message:
                    message = "not authorized: this connection is read-only (writes, PRAGMA " \
                              "changes and ATTACH are refused)"
                raise ToolError(message) from None
            columns = [d[0] for d in cursor.description or ()]
        finally:
            conn.close()
        return _shape(columns, rows[:max_rows], len(rows) > max_rows, max_rows, max_bytes)

    return _query_tool(run, name, description)


RoleOf = Callable[[Principal], "str | None"]


def postgres(dsn: str, *, role: RoleOf | None = None, name: str = "sql_query",
             max_rows: int = 200, max_bytes: int = 64 * 1024, timeout: float = 5.0,
             description: str = "") -> Tool:
    """A read-only query tool over PostgreSQL (extra ``postgres``).

    Args:
        dsn: connection string of a low-privilege login role that may ``SET ROLE`` to the
            principals' roles (never a superuser in production).
        role: the database role of a principal, e.g. ``lambda p: p.attributes.get("db_role")``;
            when given, a principal without one is refused. ``None``: the login role is used.
        name: the tool's name.
        max_rows: most rows returned.
        max_bytes: most bytes of JSON rows returned.
        timeout: seconds a statement may run (``statement_timeout``).
        description: what the database holds, for the model.

    Raises:
        MissingDependencyError: psycopg is not installed.
    """
    try:
        import psycopg  # noqa: F401 - only to fail here, at definition, without the extra
    except ImportError:  # pragma: no cover - exercised on a bare install
        raise MissingDependencyError("postgres", "psycopg") from None
    query_tool = _PostgresQuery(dsn, role, max_rows, max_bytes, timeout)
    return _query_tool(query_tool.run, name, description, _check_pg_query)


@dataclass(frozen=True)
class _PostgresQuery:
    """The PostgreSQL query tool's configuration and its one run."""

    dsn: str
    role: RoleOf | None
    max_rows: int
    max_bytes: int
    timeout: float

    async def run(self, query: str, principal: Principal) -> dict[str, Any]:
        """Run one read-only SQL query (PostgreSQL dialect) and return columns and rows.

        One SELECT statement at a time, in a read-only transaction with your own database
        permissions, so do not use it to change data. Ask for only the columns and rows you
        need (results are capped).

        Args:
            query: One PostgreSQL SELECT statement.
        """
        import psycopg

        _check_pg_query({"query": query})
        db_role = None
        if self.role is not None:
            db_role = self.role(principal)
            if not db_role:
                raise ToolNotExecuted("no database role is configured for you; ask the operator")
        try:
            conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=False)
        except psycopg.Error as exc:
            raise ToolNotExecuted(f"cannot connect to the database: {type(exc).__name__}") from None
        try:
            async with conn.cursor() as cur:
                try:
                    rows, columns, who = await self._read_only(cur, query, db_role)
                except psycopg.errors.QueryCanceled:
                    raise ToolError(f"the query ran longer than {self.timeout:g} seconds") \
                        from None
                except psycopg.Error as exc:
                    diag = exc.diag.message_primary or type(exc).__name__
                    raise ToolError(diag) from None
        finally:
            await conn.rollback()
            await conn.close()
        expected = db_role if db_role is not None else (who[1] if who else None)
        if who is None or who[0] != expected:
            raise ToolError("the query changed the database role it runs as; its result is "
                            "discarded")
        return _shape(columns, rows[:self.max_rows], len(rows) > self.max_rows, self.max_rows,
                      self.max_bytes)

    async def _read_only(self, cur: AsyncCursor[Any], query: str, db_role: str | None
                         ) -> tuple[list[Sequence[Any]], list[str], Any]:
        """*query*'s rows (one past the caps at most) and columns, in a read-only transaction
        as *db_role*, and ``(current_user, session_user)`` after it ran."""
        from psycopg import sql as pgsql

        await cur.execute("SET TRANSACTION READ ONLY, ISOLATION LEVEL REPEATABLE READ")
        await cur.execute(pgsql.SQL("SET LOCAL statement_timeout = {}").format(
            pgsql.Literal(max(1, int(self.timeout * 1000)))))
        if db_role is not None:
            await cur.execute(pgsql.SQL("SET LOCAL ROLE {}").format(pgsql.Identifier(db_role)))
        # stream() uses the extended protocol, which the server limits to one statement (a
        # second one cannot ride along), and single-row mode: rows past the caps are read and
        # dropped one at a time, never held together
        rows: list[Sequence[Any]] = []
        size = 0
        async for row in cur.stream(query.encode("utf-8")):
            if len(rows) > self.max_rows or size > self.max_bytes:
                continue  # read to the end, so the role check below can run
            item = [_jsonable(v) for v in row]
            rows.append(item)
            size += len(json.dumps(item, ensure_ascii=False).encode("utf-8")) + 1
        columns = [d.name for d in cur.description or ()] if rows else \
            await _described_columns(cur.connection)
        await cur.execute("SELECT current_user::text, session_user::text")
        return rows, columns, await cur.fetchone()


async def _described_columns(conn: AsyncConnection[Any]) -> list[str]:
    """The column names of the result the last ``stream()`` produced, asked of its portal.

    stream() keeps no description of an empty result; running the query again to get one would
    run an operator's function with side effects (or a slow query) twice. Describing the
    unnamed portal that execution left open in this transaction runs nothing.
    """
    import psycopg
    from psycopg import pq

    try:  # psycopg's own way to run a protocol step (as its server-side cursors do)
        from psycopg.generators import execute

        async with conn.lock:
            conn.pgconn.send_describe_portal(b"")
            results = await conn.wait(execute(conn.pgconn))
    except (ImportError, AttributeError):  # a psycopg without them: no names, never a rerun
        log.warning("this psycopg cannot describe an empty result: its columns are not named")
        return []
    described = results[-1] if results else None
    if described is None or described.status != pq.ExecStatus.COMMAND_OK:
        raise psycopg.OperationalError("the server did not describe the result's columns")
    return [(described.fname(i) or b"").decode(conn.info.encoding)
            for i in range(described.nfields)]

