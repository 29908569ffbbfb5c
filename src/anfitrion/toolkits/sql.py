"""Read-only SQL, by construction rather than by prompt: SQLite and PostgreSQL.

Three layers, each enough on its own for the common attacks:

1. **At validate** (nothing touched yet) a small lexer that understands quotes, quoted
   identifiers, dollar quotes and comments rejects more than one statement, and the first keyword
   must be ``SELECT``, ``WITH``, ``VALUES``, ``TABLE`` or ``EXPLAIN``.
2. **SQLite**: the file is opened with a ``mode=ro`` URI, ``PRAGMA query_only`` is set, and an
   authorizer refuses everything that is not a read: writes, schema changes, transactions,
   ``ATTACH``/``DETACH``, every PRAGMA (the schema is read from ``sqlite_master``), and
   ``load_extension``. A progress handler stops a query after the time limit.
3. **PostgreSQL** (extra ``postgres``): every query runs in a ``READ ONLY`` transaction with a
   ``statement_timeout``, after ``SET LOCAL ROLE`` to the principal's own database role when a
   role mapping is configured (no role → refused: fail closed), and is always rolled back.

Results are capped by rows and by bytes; a capped result says so.

Example:
    >>> split_statements("select 1; -- done")
    ['select 1']
"""

from __future__ import annotations

import inspect
import json
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..conversation import Provenance
from ..exceptions import MissingDependencyError
from ..gate import ToolError
from ..principal import Principal
from ..tools import ArgumentError, Effect, Tool

__all__ = ["postgres", "split_statements", "sqlite"]

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


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"<{len(bytes(value))} bytes>"
    return str(value)


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


def _query_tool(run: Callable[..., Any], name: str, description: str) -> Tool:
    summary = (inspect.getdoc(run) or "").split("Args:")[0].strip()
    return Tool.from_function(run, name=name, effect=Effect.READ,
                              provenance=Provenance.UNTRUSTED, validator=_check_query,
                              description=summary + (f"\n\n{description}" if description else ""))


def sqlite(path: str | Path, *, name: str = "sql_query", max_rows: int = 200,
           max_bytes: int = 64 * 1024, timeout: float = 5.0, description: str = "") -> Tool:
    """A read-only query tool over one SQLite file.

    Args:
        path: the database file (must exist; it is never created or changed).
        name: the tool's name.
        max_rows: most rows returned.
        max_bytes: most bytes of JSON rows returned.
        timeout: seconds a query may run.
        description: what the database holds, appended to the tool's description for the model.
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
            raise ToolError(f"cannot open the database read-only: {exc}") from None
        try:
            conn.execute("PRAGMA query_only = ON")
            # load the schema before the authorizer: SQLite's own schema parse is not a query
            conn.execute("SELECT count(*) FROM sqlite_master").fetchall()
            conn.set_authorizer(_sqlite_authorizer)
            deadline = time.monotonic() + timeout
            conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
            try:
                cursor = conn.execute(query)
                rows = cursor.fetchmany(max_rows + 1)
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
        import psycopg
        from psycopg import sql as pgsql
    except ImportError:  # pragma: no cover - exercised on a bare install
        raise MissingDependencyError("postgres", "psycopg") from None

    async def run(query: str, principal: Principal) -> dict[str, Any]:
        """Run one read-only SQL query (PostgreSQL dialect) and return columns and rows.

        One SELECT statement at a time, in a read-only transaction with your own database
        permissions, so do not use it to change data. Ask for only the columns and rows you
        need (results are capped).

        Args:
            query: One PostgreSQL SELECT statement.
        """
        _check_query({"query": query})
        db_role = None
        if role is not None:
            db_role = role(principal)
            if not db_role:
                raise ToolError("no database role is configured for you; ask the operator")
        try:
            conn = await psycopg.AsyncConnection.connect(dsn, autocommit=False)
        except psycopg.Error as exc:
            raise ToolError(f"cannot connect to the database: {type(exc).__name__}") from None
        try:
            async with conn.cursor() as cur:
                try:
                    await cur.execute("SET TRANSACTION READ ONLY")
                    await cur.execute(pgsql.SQL("SET LOCAL statement_timeout = {}").format(
                        pgsql.Literal(max(1, int(timeout * 1000)))))
                    if db_role is not None:
                        await cur.execute(pgsql.SQL("SET LOCAL ROLE {}").format(
                            pgsql.Identifier(db_role)))
                    # a prepared statement goes through the extended protocol, which the
                    # server limits to one statement: a second one cannot ride along
                    await cur.execute(query.encode("utf-8"), prepare=True)
                    rows = await cur.fetchmany(max_rows + 1) if cur.description else []
                    columns = [d.name for d in cur.description or ()]
                except psycopg.errors.QueryCanceled:
                    raise ToolError(f"the query ran longer than {timeout:g} seconds") from None
                except psycopg.Error as exc:
                    diag = exc.diag.message_primary or type(exc).__name__
                    raise ToolError(diag) from None
        finally:
            await conn.rollback()
            await conn.close()
        return _shape(columns, rows[:max_rows], len(rows) > max_rows, max_rows, max_bytes)

    return _query_tool(run, name, description)
